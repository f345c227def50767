"""trajval_weighted_resampler: resample (or cut) a weighted pool by its TrajVal weights. Glue: the
work is :mod:`trajval_ops.resampling`'s."""

from __future__ import annotations

from data_juicer.ops.base_op import OPERATORS, Pipeline

from trajval_ops.ops.dj.error_exit import SettingError
from trajval_ops.ops.dj.parameters import checked_parameters, declared_parameters, safe_op_kwargs, take_declared
from trajval_ops.ops.dj.table_mapper import run_whole_pool
from trajval_ops.resampling import PoolResampler, ResampleSettings

OP_NAME = "trajval_weighted_resampler"


@OPERATORS.register_module(OP_NAME)
class TrajvalWeightedResampler(Pipeline):
    """Resample a pool in proportion to ``trajval_weight``, or keep its learnable subset.

    Modes:

    - ``multinomial``: ``num_samples`` draws with replacement, probability ``p = w / sum(w)``.
    - ``systematic``: low-variance resampling; every row appears floor or ceil of its expected
      count ``num_samples * p``.
    - ``learnable_subset``: keep the paper's learnable subset, each row once: the rows whose
      ``profile_key`` is Stable, Sluggish or Ineffective.
    - ``hard_cut``: keep the rows whose ``score_key`` exceeds ``threshold``, each once (a score
      threshold, not the paper's subset: it drops Ineffective tasks with delta <= 0 and keeps
      Mastered tasks with a small positive delta).

    With ``online_weight_key`` the weight is ``w * w_online`` before sampling. Output rows keep
    the pool's order (duplicates adjacent) unless ``shuffle`` is set; original fields pass
    through untouched; ``trajval_prob`` (the normalised p of the row), ``trajval_source_row``
    (its 0-based position in the input) and ``trajval_resample_provenance`` are added.
    Same seed, same output. Works under the default and the Ray executor (under Ray the pool
    is gathered to the driver, which holds one copy of it).
    """

    @checked_parameters
    @declared_parameters(ResampleSettings)
    def __init__(self, *args, **kwargs):
        """Initialization method; the settings are declared by :class:`~trajval_ops.resampling.ResampleSettings`."""
        try:
            settings = take_declared(kwargs, (ResampleSettings,))[ResampleSettings]
        except ValueError as exc:
            raise SettingError(f"{OP_NAME}: {exc}") from None
        super().__init__(*args, **safe_op_kwargs(kwargs))
        self.resampler = PoolResampler(settings, OP_NAME)

    @property
    def settings(self) -> ResampleSettings:
        return self.resampler.settings

    def plan(self, table):
        """Source-row indices of the output and each output row's probability (:meth:`PoolResampler.plan`)."""
        return self.resampler.plan(table)

    def resample_table(self, table):
        """The resampled pool as a pyarrow.Table: the one code path of both executors."""
        return self.resampler.resample_table(table)

    def run(self, dataset, *, exporter=None, tracer=None):
        return run_whole_pool(self, dataset, self.resample_table, exporter=exporter, tracer=tracer)
