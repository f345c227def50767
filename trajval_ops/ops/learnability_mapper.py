"""trajval_learnability_mapper: a pool's pass rates -> the weight of a prior (its score, weight,
profile and provenance). Glue: the work is :mod:`trajval_ops.scoring`'s and the prior's."""

from __future__ import annotations

from typing import Optional

from data_juicer.ops.base_op import OPERATORS, Mapper
from loguru import logger

from trajval_ops.errors import TrajvalInputError
from trajval_ops.ops.dj.error_exit import SettingError
from trajval_ops.ops.dj.parameters import checked_parameters, declared_parameters, safe_op_kwargs, take_declared
from trajval_ops.ops.dj.table_mapper import TableMapper, run_whole_pool
from trajval_ops.priors import DEFAULT_PRIOR, PRIORS, settings_union
from trajval_ops.scoring import PoolScorer, ScoringSettings

OP_NAME = "trajval_learnability_mapper"
#: every registered prior's settings, unset by default: the mapper passes those given to its prior
PriorSettings = settings_union()


@OPERATORS.register_module(OP_NAME)
class TrajvalLearnabilityMapper(TableMapper, Mapper):
    """Turn each task's pass rates into the weight of a prior (TrajVal's learnability by default).

    Reads ``trajval_r_early`` and ``trajval_r_late`` (floats in [0, 1]), or, when
    ``early_window_keys`` / ``late_window_keys`` are given, the per-checkpoint pass rates of a
    K-checkpoint window, averages them and writes the means back as ``trajval_r_early`` /
    ``trajval_r_late``. Writes ``trajval_delta``, ``trajval_score`` (s), ``trajval_weight``
    (w, unnormalised: samplers normalise), ``trajval_profile`` (endpoint-only profile, rule
    ``saturation_first``) and ``trajval_score_provenance`` (the prior's settings, source fields).

    Rows keep their order and count; a missing, non-numeric, NaN or out-of-range reward stops
    the run with an error naming the row and the field.
    """

    _batched_op = True

    @checked_parameters
    @declared_parameters(ScoringSettings, PriorSettings)
    def __init__(self, prior: Optional[str] = None, score: Optional[str] = None, *args, **kwargs):
        from trajval_ops.priors import given_settings, prior_with_settings, recipe_prior_name
        from trajval_ops.settings import declared

        prior_settings = given_settings({f.name: kwargs.pop(f.name) for f in declared(PriorSettings)
                                         if f.name in kwargs})
        if score is not None:
            logger.warning(f"{OP_NAME}: 'score: {score}' is deprecated (until 0.3): write 'prior: {score}'")
        try:
            settings = take_declared(kwargs, (ScoringSettings,))[ScoringSettings]
            self.scorer = PoolScorer(prior_with_settings(recipe_prior_name(prior, score), prior_settings), settings,
                                     OP_NAME)
        except ValueError as exc:
            raise SettingError(str(exc) if str(exc).startswith(OP_NAME) else f"{OP_NAME}: {exc}") from None
        super().__init__(*args, **safe_op_kwargs(kwargs))
        self.bind_table_process()

    __init__.__doc__ = "\n".join([
        "Initialization method. A prior's settings (``eps``, ``alpha`` ...) are given flat beside ``prior``: each "
        "reaches the prior named, which checks it; a setting only other priors declare is refused, naming them.",
        "",
        ":param prior: the prior written as the weight: "
        + "; ".join(f"``{name}`` ({', '.join(cls.passes)} pass{'es' if len(cls.passes) > 1 else ''}: {cls.formula})"
                    for name, cls in PRIORS.items())
        + f". None (unset): ``{DEFAULT_PRIOR}``, or the prior the deprecated ``score`` names. One-pass priors write "
        "the score, the weight and the provenance (no delta, no profile).",
        ":param score: the deprecated name of ``prior`` (accepted until 0.3, with a warning); given with a ``prior`` "
        "that names another prior, an error.",
        __init__.__doc__.strip("\n"),  # the declared settings' lines (declared_parameters)
    ])

    @property
    def prior(self):
        """The prior this mapper writes the weight of."""
        return self.scorer.prior

    @property
    def early_window_keys(self):
        return self.scorer.early_window_keys

    @property
    def late_window_keys(self):
        return self.scorer.late_window_keys

    def input_columns(self) -> list[str]:
        return self.scorer.input_columns()

    #: Scored as one pool under both executors (under Ray on the gathered pool): the provenance
    #: carries the prior's total cost, and the estimators and the prediction fit on every row.
    needs_whole_pool = True

    def transform_table(self, table, first_row: int | None = None):
        """Not for a batch alone: the mapper scores the whole pool (:meth:`score_pool`)."""
        raise TrajvalInputError(f"{OP_NAME}: scores the whole pool at once (its provenance carries the prior's "
                                "total cost); it cannot score a batch alone")

    def run(self, dataset, *, exporter=None, tracer=None):
        """Default executor: one vectorised pass over the whole pool's reward columns.

        Reading only the reward columns from Arrow and appending the outputs leaves the other
        columns (prompts, ground truths) untouched and uncopied; a row-wise map would convert
        every column to Python and back (measured: ~1000x the numpy time, tools/bench).
        """
        return run_whole_pool(self, dataset, self.score_pool, exporter=exporter, tracer=tracer)

    def score_pool(self, table):
        """The whole pool scored at once (:meth:`trajval_ops.scoring.PoolScorer.score_pool`)."""
        return self.scorer.score_pool(table)
