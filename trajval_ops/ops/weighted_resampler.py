"""trajval_weighted_resampler: resample (or cut) a weighted pool by its TrajVal weights."""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from data_juicer.ops.base_op import OPERATORS, Pipeline
from loguru import logger
from pydantic import Field, PositiveInt
from typing_extensions import Annotated

from trajval_ops import __version__, core, fields
from trajval_ops.ops.dj.parameters import checked_parameters, safe_op_kwargs
from trajval_ops.ops.dj.table_mapper import run_whole_pool
from trajval_ops.ops.dj.tables import append_columns
from trajval_ops.summary import log_weight_summary
from trajval_ops.input_checks import arrow_numeric_column
from trajval_ops.errors import TrajvalInputError

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
    def __init__(
        self,
        mode: Literal["multinomial", "systematic", "learnable_subset", "hard_cut"] = "multinomial",
        num_samples: Optional[PositiveInt] = None,
        seed: int = 0,
        weight_key: str = fields.WEIGHT,
        online_weight_key: Optional[str] = None,
        score_key: str = fields.SCORE,
        threshold: float = 0.0,
        profile_key: str = fields.PROFILE,
        shuffle: bool = False,
        eps: Annotated[float, Field(gt=0, le=1)] = core.DEFAULT_EPS,
        prob_key: str = fields.PROB,
        source_row_key: str = fields.SOURCE_ROW,
        provenance_key: str = fields.RESAMPLE_PROVENANCE,
        id_key: Optional[str] = None,
        *args,
        **kwargs,
    ):
        """
        Initialization method.

        :param mode: ``multinomial``, ``systematic``, ``learnable_subset`` or ``hard_cut`` (see
            the class docstring).
        :param num_samples: rows to draw in the sampling modes; None: the pool size. Ignored by
            the subset modes.
        :param seed: random seed; the same seed gives the same output.
        :param weight_key: field holding the unnormalised weight w (written by
            trajval_learnability_mapper).
        :param online_weight_key: optional field holding an online scheduler's weight; the
            sampling weight becomes ``w * w_online``.
        :param score_key: field compared with ``threshold`` in ``hard_cut`` mode.
        :param threshold: ``hard_cut`` keeps rows with ``score > threshold``; 0 keeps every row
            with a positive learnability score.
        :param profile_key: field holding the endpoint profile, read by ``learnable_subset``.
        :param shuffle: shuffle the output rows (seeded) instead of keeping the pool's order.
        :param eps: the floor used when the weights were made; only used to report how many
            rows sit at the floor (and to warn when all do).
        :param prob_key: output field for the row's normalised sampling probability.
        :param source_row_key: output field for the row's position in the input pool.
        :param provenance_key: output field recording how the resample was made.
        :param id_key: dotted path of the row id used in error messages.
        """
        super().__init__(*args, **safe_op_kwargs(kwargs))
        self.mode = mode
        self.num_samples = num_samples
        self.seed = int(seed)
        self.weight_key = weight_key
        self.online_weight_key = online_weight_key
        self.score_key = score_key
        self.threshold = float(threshold)
        self.profile_key = profile_key
        self.shuffle = bool(shuffle)
        self.eps = float(eps)
        self.prob_key = prob_key
        self.source_row_key = source_row_key
        self.provenance_key = provenance_key
        self.id_key = id_key

    def plan(self, table) -> tuple[np.ndarray, np.ndarray]:
        """Source-row indices of the output and each output row's probability, from a pyarrow.Table."""
        if table.num_rows == 0:
            raise TrajvalInputError(f"{OP_NAME}: the pool is empty (0 rows): nothing to resample")
        self._check_not_drawn(table)
        weight = arrow_numeric_column(table, self.weight_key, lower=0.0, id_key=self.id_key)
        log_weight_summary(f"{OP_NAME} input", weight, self.eps)
        if self.online_weight_key:
            online = arrow_numeric_column(table, self.online_weight_key, lower=0.0, id_key=self.id_key)
            weight = core.compose_online(weight, online)
        if self.mode in ("hard_cut", "learnable_subset"):
            if self.mode == "hard_cut":
                score = arrow_numeric_column(table, self.score_key, lower=0.0, upper=1.0, id_key=self.id_key)
                indices = np.flatnonzero(core.hard_cut_mask(score, self.threshold))
                empty = f"the largest '{self.score_key}' is {score.max():.4g}, the threshold {self.threshold}"
            else:
                profiles = self._profiles(table)
                indices = np.flatnonzero(core.is_learnable(profiles))
                empty = f"no row's '{self.profile_key}' is one of {sorted(core.LEARNABLE_PROFILES)}"
            if indices.size == 0:
                raise TrajvalInputError(f"{OP_NAME}: {self.mode} kept no row: {empty}")
            prob = np.zeros_like(weight)
            prob[indices] = core.normalize(weight[indices])
        else:
            if not weight.sum() > 0:
                raise TrajvalInputError(f"{OP_NAME}: every weight is zero: no row can be sampled")
            prob = core.normalize(weight)
            n = self.num_samples if self.num_samples is not None else table.num_rows
            draw = core.multinomial_indices if self.mode == "multinomial" else core.systematic_indices
            indices = draw(prob, n, self.seed)
        if self.shuffle:
            indices = np.random.default_rng([self.seed, 1]).permutation(indices)
        return indices, prob[indices]

    def _check_not_drawn(self, table) -> None:
        """A pool any of whose rows this operator already drew by a weight is not resampled: drawn
        again, each task would come in proportion to the product of both weights (its weight
        squared for one key); cut, its record would name the cut, and the weighted samplers would
        draw it once more. Every row's record is read (a drawn pool concatenated after a scored one)."""
        from trajval_ops.samplers.weighted import DRAWING_MODES, weight_draws

        draws = weight_draws(table, self.provenance_key)
        if not draws.records:
            return
        before = draws.records[0]
        then = (f"drawn by a weight again, each task would come in proportion to both draws (its weight squared for "
                f"'{before['weight_key']}')" if self.mode in DRAWING_MODES else
                f"cut now, it would be recorded as a {self.mode} pool, which weighted samplers would draw by the "
                "weight once more")
        raise TrajvalInputError(
            f"{OP_NAME}: this pool was drawn by its weight '{before['weight_key']}' already (mode {before['mode']}: "
            f"{draws.described()}); {then}. Resample the pool as it was before the draw (to cut and draw, cut first)")

    def _profiles(self, table) -> np.ndarray:
        if self.profile_key not in table.column_names:
            one_pass = _one_pass_priors(table)
            if one_pass:
                raise TrajvalInputError(
                    f"{OP_NAME}: learnable_subset keeps rows by their '{self.profile_key}', and the pool was scored by "
                    f"the {' and '.join(one_pass)} prior (its rows' {fields.SCORE_PROVENANCE}), which reads the early "
                    "pass alone and writes no profile: use hard_cut or a drawing mode, or score the pool with prior: "
                    "trajval")
            raise TrajvalInputError(f"{OP_NAME}: learnable_subset reads field '{self.profile_key}', which the pool "
                                    f"lacks (run trajval_learnability_mapper first)")
        profiles = np.asarray(table.column(self.profile_key).to_pylist(), dtype=object)
        bad = [i for i, p in enumerate(profiles) if p not in core.PROFILES]
        if bad:
            from trajval_ops.pools.io import table_row
            from trajval_ops.rows import row_label

            row = table_row(table, bad[0])
            label = row_label(row, bad[0], self.id_key)
            raise TrajvalInputError(f"{OP_NAME}: {label}: field '{self.profile_key}' = {profiles[bad[0]]!r} is "
                                    f"not a profile ({', '.join(core.PROFILES)}){_why_no_profile(row)}")
        return profiles

    def resample_table(self, table):
        """Apply :meth:`plan` to a pyarrow.Table: the one code path of both executors."""
        import pyarrow as pa

        indices, prob = self.plan(table)
        out = table.take(pa.array(indices, type=pa.int64()))
        provenance = {
            "mode": self.mode,
            "seed": self.seed,
            "num_samples": int(indices.size),
            "pool_rows": int(table.num_rows),
            "weight_key": self.weight_key,
            "online_weight_key": self.online_weight_key,
            "threshold": self.threshold if self.mode == "hard_cut" else None,
            "profiles": sorted(core.LEARNABLE_PROFILES) if self.mode == "learnable_subset" else None,
            "shuffle": self.shuffle,
            "trajval_ops_version": __version__,
        }
        new_columns = {
            self.prob_key: pa.array(prob, type=pa.float64()),
            self.source_row_key: pa.array(indices, type=pa.int64()),
            self.provenance_key: pa.repeat(pa.scalar(provenance), len(indices)),
        }
        out = append_columns(out, new_columns)
        unique = np.unique(indices).size
        logger.info(
            f"{OP_NAME}: mode={self.mode} seed={self.seed}: {table.num_rows} rows in, {out.num_rows} out "
            f"({unique} distinct, {table.num_rows - unique} pool rows not drawn)"
        )
        return out

    def run(self, dataset, *, exporter=None, tracer=None):
        return run_whole_pool(self, dataset, self.resample_table, exporter=exporter, tracer=tracer)


def _one_pass_priors(table) -> list[str]:
    """The one-pass priors (no profile) that scored any row of the pool, as its rows' score
    provenance records them."""
    from trajval_ops.pools.io import distinct_path_values
    from trajval_ops.priors import ONE_PASS_PRIORS

    return [name for name in distinct_path_values(table, f"{fields.SCORE_PROVENANCE}.score") if name in ONE_PASS_PRIORS]


def _why_no_profile(row: dict) -> str:
    """Why a row has no profile, where it says so: a predicted score, or a one-pass prior's."""
    from trajval_ops.priors import ONE_PASS_PRIORS

    if row.get(fields.PREDICTED) is True:
        return (" (a sampled prior predicted this row's score: it has no profile; use hard_cut or a drawing mode, or "
                "leave the predicted rows out first)")
    provenance = row.get(fields.SCORE_PROVENANCE)
    prior = provenance.get("score") if isinstance(provenance, dict) else None
    if prior in ONE_PASS_PRIORS:
        return (f" (the {prior} prior scored this row: it writes no profile; use hard_cut or a drawing mode, or leave "
                "such rows out first)")
    return ""
