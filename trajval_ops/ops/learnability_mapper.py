"""trajval_learnability_mapper: endpoint rewards -> learnability score, weight and profile."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
from data_juicer.ops.base_op import OPERATORS, Mapper
from loguru import logger
from pydantic import Field, PositiveInt
from typing_extensions import Annotated

from trajval_ops import __version__, core, fields, settings
from trajval_ops.rows import path_root
from trajval_ops.priors import DEFAULT_PRIOR, PRIORS
from trajval_ops.priors.bandpass import BandPass
from trajval_ops.priors.base import Prior
from trajval_ops.priors.trajval import TrajVal
from trajval_ops.prior_cost import cost_summary
from trajval_ops.ops.dj.parameters import checked_parameters, safe_op_kwargs
from trajval_ops.ops.dj.table_mapper import TableMapper, run_whole_pool
from trajval_ops.ops.dj.tables import append_columns
from trajval_ops.pools.transfer import provenance_column
from trajval_ops.summary import group_noise, log_group_noise, log_rollout_noise, log_weight_summary, rollout_noise
from trajval_ops.input_checks import arrow_numeric_column, check_unique_ids, group_values
from trajval_ops.errors import TrajvalInputError, first_few

OP_NAME = "trajval_learnability_mapper"


def _check_estimator(prior: Prior, group_key) -> None:
    estimator = getattr(prior, "estimator", "paper")
    if estimator == "pooled" and not group_key:
        raise ValueError(f"{OP_NAME}: estimator 'pooled' shrinks each row toward its group: set group_key")


def _built_prior(name: str, settings: dict) -> Prior:
    """The prior the mapper writes, from its parameters; an estimator names TrajVal's."""
    from trajval_ops.priors import build_prior

    prior = build_prior(name, settings)
    if settings["estimator"] != "paper" and not hasattr(prior, "estimator"):
        raise ValueError(f"{OP_NAME}: estimator {settings['estimator']!r} scores TrajVal's s; prior {name!r} reads one "
                         "pass")
    return prior


def _missing(values) -> np.ndarray | None:
    """Null where a column has no value (a predicted row's delta and profile)."""
    values = np.asarray(values)
    if values.dtype == object:
        return np.array([v is None for v in values]) if any(v is None for v in values) else None
    if values.dtype.kind == "f" and np.isnan(values).any():
        return np.isnan(values)
    return None


@OPERATORS.register_module(OP_NAME)
class TrajvalLearnabilityMapper(TableMapper, Mapper):
    """Turn each task's early and late pass rates into TrajVal's learnability score and weight.

    Reads ``trajval_r_early`` and ``trajval_r_late`` (floats in [0, 1]), or, when
    ``early_window_keys`` / ``late_window_keys`` are given, the per-checkpoint pass rates of a
    K-checkpoint window, averages them and writes the means back as ``trajval_r_early`` /
    ``trajval_r_late``. Writes ``trajval_delta``, ``trajval_score`` (s), ``trajval_weight``
    (w, unnormalised: samplers normalise), ``trajval_profile`` (endpoint-only profile, rule
    ``saturation_first``) and ``trajval_score_provenance`` (alpha, eps, source fields).

    Rows keep their order and count; a missing, non-numeric, NaN or out-of-range reward stops
    the run with an error naming the row and the field.
    """

    _batched_op = True

    @checked_parameters
    def __init__(
        self,
        prior: Optional[str] = None,
        alpha: float = TrajVal.alpha,
        eps: float = TrajVal.eps,
        estimator: str = TrajVal.estimator,
        band_low: float = BandPass.band_low,
        band_high: float = BandPass.band_high,
        r_early_key: str = fields.R_EARLY,
        r_late_key: str = fields.R_LATE,
        window_k: Optional[PositiveInt] = None,
        early_window_keys: Optional[List[str]] = None,
        late_window_keys: Optional[List[str]] = None,
        delta_key: str = fields.DELTA,
        score_key: str = fields.SCORE,
        weight_key: str = fields.WEIGHT,
        profile_key: str = fields.PROFILE,
        provenance_key: str = fields.SCORE_PROVENANCE,
        id_key: Optional[str] = None,
        group_key: Optional[str] = None,
        predict_unmeasured: bool = False,
        predict_features: Optional[List[str]] = None,
        predict_coverage: Annotated[float, Field(gt=0, lt=1)] = 0.9,
        predict_seed: int = 0,
        predicted_key: str = fields.PREDICTED,
        overwrite: bool = False,
        score: Optional[str] = None,
        *args,
        **kwargs,
    ):
        super().__init__(*args, **safe_op_kwargs(kwargs))
        from trajval_ops.priors import recipe_prior_name

        if score is not None:
            logger.warning(f"{OP_NAME}: 'score: {score}' is deprecated (until 0.3): write 'prior: {score}'")
        try:
            name = recipe_prior_name(prior, score)
            self.prior = _built_prior(name, dict(alpha=alpha, eps=eps, estimator=estimator, band_low=band_low,
                                                 band_high=band_high))
        except ValueError as exc:
            raise ValueError(f"{OP_NAME}: {exc}") from None
        _check_estimator(self.prior, group_key)
        if predict_unmeasured and estimator != "paper":
            raise ValueError(f"{OP_NAME}: estimator {estimator!r} reads each row's rollouts, which a row a sampled "
                             "pass left out has none of; use estimator 'paper' with predict_unmeasured")
        if predict_features is not None and not predict_unmeasured:
            raise ValueError(f"{OP_NAME}: predict_features feed the prediction of unmeasured rows: set "
                             "predict_unmeasured: true")
        for name, keys in (("early_window_keys", early_window_keys), ("late_window_keys", late_window_keys)):
            if keys is not None and len(keys) == 0:
                raise ValueError(f"{name} must list at least one field, or be omitted")
        self.estimator = estimator
        self.r_early_key = r_early_key
        self.r_late_key = r_late_key
        self.early_window_keys, self.late_window_keys = fields.learnability_windows(early_window_keys,
                                                                                   late_window_keys, window_k)
        self.delta_key = delta_key
        self.score_key = score_key
        self.weight_key = weight_key
        self.profile_key = profile_key
        self.provenance_key = provenance_key
        self.id_key = id_key
        self.group_key = group_key
        self.predict_unmeasured, self.predict_features = predict_unmeasured, list(predict_features or [])
        self.predict_coverage, self.predict_seed = float(predict_coverage), int(predict_seed)
        self.predicted_key = predicted_key
        self.overwrite = overwrite
        self.provenance = self._provenance()
        self.bind_table_process()

    __init__.__doc__ = "\n".join([
        "Initialization method. The prior's settings (``alpha`` ... ``band_high``) are declared by the priors",
        "(:mod:`trajval_ops.priors`), which check them; a setting of another prior than the one named is unused.",
        "",
        ":param prior: the prior written as the weight: "
        + "; ".join(f"``{name}`` ({', '.join(cls.passes)} pass{'es' if len(cls.passes) > 1 else ''}: {cls.formula})"
                    for name, cls in PRIORS.items())
        + f". None (unset): ``{DEFAULT_PRIOR}``, or the prior the deprecated ``score`` names. One-pass priors write "
        "the score, the weight and the provenance (no delta, no profile).",
        settings.param_lines(TrajVal, ["alpha", "eps", "estimator"]),
        settings.param_lines(BandPass, ["band_low", "band_high"]),
        ':param r_early_key: field holding the early-window mean pass rate; written when '
        '``early_window_keys`` is given, read otherwise.',
        ':param r_late_key: the same for the late window.',
        ":param window_k: K > 1: average the endpoint mapper's per-checkpoint fields of each window, named "
        'from its ``window``/``window_index`` (``trajval_r_early_0`` ... ``trajval_r_early_<K-1>``, likewise '
        'late). None or 1: read ``r_early_key`` / ``r_late_key`` (K = 1). Explicit '
        '``early_window_keys``/``late_window_keys`` override.',
        ':param early_window_keys: per-checkpoint pass-rate fields of the early window (K fields, e.g. the '
        'outputs of K endpoint-reward mapper instances); averaged into ``r_early_key``. None: read '
        '``r_early_key`` directly.',
        ':param late_window_keys: the same for the late window.',
        ':param delta_key: output field for ``r_late - r_early``.',
        ':param score_key: output field for the score ``s`` of the chosen prior.',
        ':param weight_key: output field for the weight ``w`` (unnormalised).',
        ':param profile_key: output field for the endpoint-only trajectory profile.',
        ':param provenance_key: output field recording how the weight was made and what the prior cost '
        "(``prior_cost``: completions and generated tokens per stage and in total, from the passes' "
        "provenance and the probe's manifest).",
        ':param id_key: dotted path of the row id used in error messages; None tries common id fields '
        '(``id``, ``extra_info.index``, ...) and always gives the row position.',
        ':param group_key: dotted path of a task group (a family, ``data_source``): the end-of-run log then '
        'shows the mean pass rates, delta (with its SE from the rollouts) and weight per group, and says '
        "whether the gain differs between groups beyond the rollout noise (needs the endpoint mapper's "
        '``<key>_n`` columns). Rows without it form the group ``None``.',
        ':param predict_unmeasured: predict the score of each row a sampled endpoint pass left out (status '
        '``not_sampled``) from the measured rows; False: such a row stops the run.',
        ':param predict_features: numeric fields every row has (e.g. a short early pass) that the prediction '
        'reads besides ``group_key``; None: the group alone.',
        ":param predict_coverage: share of the out-of-fold errors the predicted rows' interval "
        '(``<score_key>_low`` / ``_high``) covers.',
        ":param predict_seed: seed of the prediction's model and folds.",
        ':param predicted_key: output field, true where the score is predicted; ``<predicted_key>_fallback`` '
        "is true where the row's group has no measured row (it gets the measured rows' mean).",
        ":param overwrite: replace input columns named as this mapper's outputs (a pool scored before, scored"
        ' again with other settings), each replaced column logged; False (default): such a column stops the '
        "run naming it, so a weight of the user's own is never lost.",
        ":param score: the deprecated name of ``prior`` (accepted until 0.3, with a warning); given with a ``prior`` "
        "that names another prior, an error.",
    ])

    @property
    def one_pass(self) -> bool:
        """Whether the prior reads the early pass alone."""
        return self.prior.one_pass

    def _provenance(self) -> dict:
        """How every weight of this mapper is made (written with each row): the prior's own record,
        then the fields it read."""
        provenance = dict(self.prior.provenance())
        provenance["r_early_source"] = self.early_window_keys or [self.r_early_key]
        if not self.one_pass:
            provenance.update(r_late_source=self.late_window_keys or [self.r_late_key], profile_rule=core.PROFILE_RULE)
        if self.predict_unmeasured:
            provenance["prediction"] = {"features": self.predict_features, "group_key": self.group_key,
                                        "coverage": self.predict_coverage, "seed": self.predict_seed}
        provenance["trajval_ops_version"] = __version__
        return provenance

    def _window(self, read, keys: Optional[List[str]], key: str) -> np.ndarray:
        if keys is None:
            return read(key)
        return core.window_mean(np.stack([read(k) for k in keys], axis=1))

    def score_columns(self, read) -> tuple[np.ndarray, np.ndarray | None, dict]:
        """(r_early, r_late or None for a one-pass prior, output columns) from
        ``read(field) -> float array in [0, 1]``."""
        r_early = self._window(read, self.early_window_keys, self.r_early_key)
        columns = {}
        if self.early_window_keys:
            columns[self.r_early_key] = r_early
        if self.one_pass:
            score = self.prior.score(r_early)
            columns[self.score_key] = score
            columns[self.weight_key] = self.weight_of(score)
            return r_early, None, columns
        r_late = self._window(read, self.late_window_keys, self.r_late_key)
        score = self.prior.score(r_early, r_late)
        if self.late_window_keys:
            columns[self.r_late_key] = r_late
        columns[self.delta_key] = core.reward_delta(r_early, r_late)
        columns[self.score_key] = score
        columns[self.weight_key] = self.weight_of(score)
        columns[self.profile_key] = core.endpoint_profiles(r_early, r_late)
        return r_early, r_late, columns

    def weight_of(self, score: np.ndarray) -> np.ndarray:
        """The chosen prior's weight of its score."""
        return self.prior.weight(score)

    def pass_keys(self) -> list[str]:
        """The pass-rate fields the prior reads."""
        return fields.compared_passes(self.early_window_keys, self.late_window_keys, self.r_early_key,
                                      self.r_late_key, self.one_pass)

    def input_columns(self) -> list[str]:
        keys = self.pass_keys() + [f"{key}_status" for key in self.pass_keys()]
        ids = [self.id_key] if self.id_key else list(fields.ID_CANDIDATES)
        return list(dict.fromkeys(keys + [path_root(key) for key in ids]))

    #: Scored as one pool under both executors (under Ray on the gathered pool): the provenance
    #: carries the prior's total cost, and the estimators and the prediction fit on every row.
    needs_whole_pool = True

    def measured_rows(self, table) -> np.ndarray | None:
        """Which rows every pass measured (None: all): a sampled pass marks the others
        ``not_sampled``; without ``predict_unmeasured`` such a row stops the run, named."""
        from trajval_ops.rollout.pass_rates import STATUS_NOT_SAMPLED

        left_out = np.zeros(table.num_rows, dtype=bool)
        for key in self.pass_keys():
            if f"{key}_status" in table.column_names:
                left_out |= np.asarray(table.column(f"{key}_status").to_pylist(), dtype=object) == STATUS_NOT_SAMPLED
        if not left_out.any():
            return None
        if not self.predict_unmeasured:
            from trajval_ops.pools.io import table_row
            from trajval_ops.rows import row_label

            position = int(np.argmax(left_out))
            raise TrajvalInputError(
                f"{row_label(table_row(table, position), position, self.id_key)}: a sampled endpoint pass left it out "
                f"(status '{STATUS_NOT_SAMPLED}'): set predict_unmeasured: true to predict the scores of such rows")
        return ~left_out

    def score_table(self, table, prior_cost: dict):
        """``(table with the outputs appended, (r_early, r_late, output columns))``: the reward
        columns read from Arrow (errors name the first bad row by its position in the pool); every
        other column untouched.

        :param prior_cost: the pool's recorded cost (:meth:`log_cost`), summed into the provenance.
        """
        import pyarrow as pa

        measured = self.measured_rows(table)

        def read(key):
            values = arrow_numeric_column(table, key, lower=0.0, upper=1.0, id_key=self.id_key,
                                          position_offset=0, unread=None if measured is None else ~measured)
            return values if measured is None else np.where(measured, values, 0.0)  # unmeasured: predicted below

        r_early, r_late, columns = self.score_columns(read)
        provenance = self.provenance
        if self.estimator != "paper" and not self.one_pass:
            provenance = self._noise_aware(table, r_early, r_late, columns)
        if self.predict_unmeasured:
            provenance = self._predict(table, measured, columns)
        provenance = dict(provenance)
        version = provenance.pop("trajval_ops_version")
        provenance.update(prior_cost=cost_summary(prior_cost), trajval_ops_version=version)
        new = {name: pa.array(values, mask=_missing(values)) for name, values in columns.items()}
        new[self.provenance_key] = pa.repeat(pa.scalar(provenance), table.num_rows)
        # trajval transfer-prior's record of carried weights this mapper replaces: left beside the
        # new weights it would be read as theirs (their regime, eps and scoring), so it goes with them
        carried = [name for name in (provenance_column(self.weight_key),) if name in table.column_names]
        self._check_outputs_new(table, list(new) + carried)
        table = table.drop_columns(carried)
        return append_columns(table, new), (r_early, r_late, columns)

    def _check_outputs_new(self, table, names: list[str]) -> None:
        """Refuse (or, with ``overwrite``, log) input columns this mapper would replace."""
        existing = [name for name in names if name in table.column_names]
        if not existing:
            return
        if not self.overwrite:
            raise TrajvalInputError(
                f"{OP_NAME}: the pool already has column(s) {', '.join(repr(n) for n in existing)}, which this "
                "mapper writes: set overwrite: true to replace them (a pool scored before), or rename them, or "
                "write elsewhere (weight_key, score_key, ...)")
        logger.warning(f"{OP_NAME}: replacing the pool's own column(s) {', '.join(existing)} (overwrite: true)")

    def _noise_aware(self, table, r_early, r_late, columns) -> dict:
        """Replace the paper's score by the posterior one (whole pool), add its interval and say
        how in the provenance."""
        windows = self._pass_counts(table)
        if windows is None:
            raise TrajvalInputError(f"{OP_NAME}: estimator {self.estimator!r} reads the rollouts behind each pass "
                                    "rate (the endpoint mapper's <key>_n columns), which the pool lacks")
        for keys, per_pass in windows:
            self._check_window_shares_n(table, keys, per_pass)
        counts = tuple(per_pass.sum(axis=0) for _, per_pass in windows)
        groups = group_values(table, self.group_key, OP_NAME, self.id_key) if self.estimator == "pooled" else None
        try:
            mean, low, high, fitted = self.prior.estimate(r_early, counts[0], r_late, counts[1], groups)
        except ValueError as exc:
            if core.UNIDENTIFIED_PRIOR not in str(exc):
                raise
            raise TrajvalInputError(f"{OP_NAME}: estimator {self.estimator!r}: {exc}") from None
        columns[self.score_key] = mean
        columns[f"{self.score_key}_low"], columns[f"{self.score_key}_high"] = low, high
        columns[self.weight_key] = self.prior.weight(mean)
        return {**self.provenance, "beta_priors": fitted, "interval_mass": core.INTERVAL_MASS,
                "posterior_grid": core.POSTERIOR_GRID}

    def _check_window_shares_n(self, table, keys: list[str], counts: np.ndarray) -> None:
        """A window's mean rate over all its rollouts (what the estimators read, as ``mean x
        sum of n`` successes) is the successes it counted only where its passes share n: with 4
        and 16 rollouts at rates 1 and 0 the mean 0.5 over 20 reads as 10 successes, not 4.
        ``counts``: the rollouts behind each of the window's passes (one row per key)."""
        differ = np.flatnonzero((counts != counts[0]).any(axis=0))
        if differ.size:
            from trajval_ops.pools.io import table_row
            from trajval_ops.rows import row_label

            row = int(differ[0])
            label = row_label(table_row(table, row), row, self.id_key)
            raise TrajvalInputError(
                f"{OP_NAME}: {label}: the passes of a window stand on different rollout counts ("
                + ", ".join(f"{key}_n {int(counts[i, row])}" for i, key in enumerate(keys))
                + f"; {differ.size} row(s) in all): estimator {self.estimator!r} reads a window's mean rate as the "
                "successes of all its rollouts, which holds only for one n; give the window's passes one n, or use "
                "estimator 'paper'")

    def _predict(self, table, measured, columns) -> dict:
        """Every unmeasured row's score predicted from the measured rows (:mod:`trajval_ops.priors.sampled`);
        the weight follows; the interval and the flag are written for every row."""
        from trajval_ops.priors.sampled import MIN_ROWS_FOR_A_MODEL, predict_scores

        if measured is None:
            measured = np.ones(table.num_rows, dtype=bool)
        if not measured.any():
            raise TrajvalInputError(f"{OP_NAME}: no row was measured by every pass: nothing to predict from")
        features = np.stack([arrow_numeric_column(table, key, lower=-np.inf, id_key=self.id_key,
                                                  position_offset=0) for key in self.predict_features],
                            axis=1) if self.predict_features else None
        groups = group_values(table, self.group_key, OP_NAME, self.id_key) if self.group_key else None
        score = np.where(measured, columns[self.score_key], 0.0)
        prediction = predict_scores(score, measured, features, groups, seed=self.predict_seed,
                                    coverage=self.predict_coverage)
        columns[self.score_key] = prediction.score
        columns[self.weight_key] = self.weight_of(prediction.score)
        columns[f"{self.score_key}_low"], columns[f"{self.score_key}_high"] = prediction.low, prediction.high
        columns[self.predicted_key] = prediction.predicted
        # a row of a group no measured row stands in: the measured rows' mean, flagged per row
        columns[f"{self.predicted_key}_fallback"] = prediction.fallback
        for name in (self.r_early_key, self.r_late_key, self.delta_key, self.profile_key):
            if name in columns:  # a predicted row has no measured pass rate, change or profile
                columns[name] = np.where(measured, columns[name], None) if name == self.profile_key else \
                    np.where(measured, columns[name], np.nan)
        fallback_groups = sorted({repr(groups[i]) for i in np.flatnonzero(prediction.fallback)}) if groups else []
        if fallback_groups:
            logger.warning(f"{OP_NAME}: {int(prediction.fallback.sum())} rows in {len(fallback_groups)} groups "
                           f"({first_few(fallback_groups, 10)}) have no measured row: they get the measured rows' "
                           f"mean score (flagged: {self.predicted_key}_fallback)")
        how = (f"gradient boosting on {self.predict_features}{' and ' + self.group_key if self.group_key else ''}"
               if prediction.predictor == "gradient_boosting" else
               f"the mean of each {self.group_key or 'pool'}'s measured rows"
               + (f" ({self.predict_features} unused: fewer than {MIN_ROWS_FOR_A_MODEL} measured rows)"
                  if self.predict_features else ""))
        logger.info(f"{OP_NAME}: {int(prediction.predicted.sum())} of {table.num_rows} scores predicted by {how}; "
                    f"interval +-{prediction.interval_halfwidth:.4f} ({self.predict_coverage:.0%} of the out-of-fold "
                    "errors)")
        provenance = dict(self.provenance)
        version = provenance.pop("trajval_ops_version")
        provenance["prediction"] = {**provenance["prediction"], **prediction.as_provenance(self.predict_coverage),
                                    "fallback_groups": fallback_groups}
        return {**provenance, "sample": self._sample_of(table), "trajval_ops_version": version}

    def _sample_of(self, table) -> dict | None:
        """The sample the passes measured, as their provenance records it."""
        from trajval_ops.pools.io import table_path_values

        for key in self.pass_keys():
            for provenance in table_path_values(table, f"{key}_provenance") or []:
                if isinstance(provenance, dict) and provenance.get("sample"):
                    return provenance["sample"]
        return None

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
        """The whole pool scored at once, with the end-of-run summary, noise report and cost."""
        if table.num_rows == 0:
            raise TrajvalInputError(f"{OP_NAME}: the pool is empty (0 rows): nothing to score")
        check_unique_ids(table, self.id_key, what=OP_NAME)
        described = ", ".join(f"{key}={value}" for key, value in self.prior.settings().items()
                              if key in ("alpha", "eps", "band_low", "band_high"))
        logger.info(f"{OP_NAME}: scoring {table.num_rows} rows ({self.prior.name} prior, {described})")
        self.check_passes_alike(table)
        table, (r_early, r_late, columns) = self.score_table(table, self.log_cost(table))
        measured = ~np.asarray(columns[self.predicted_key], dtype=bool) if self.predicted_key in columns else None
        pass_rates = {"r_early": r_early} if self.one_pass else {"r_early": r_early, "r_late": r_late}
        if measured is not None:  # the pass rates of the rows the passes measured
            pass_rates = {name: values[measured] for name, values in pass_rates.items()}
        log_weight_summary(OP_NAME, weight=columns[self.weight_key], eps=self.prior.eps,
                           profiles=columns.get(self.profile_key), **pass_rates)
        if not self.one_pass:
            self._log_noise(table if measured is None else table.filter(measured), *(
                (r_early, r_late, columns) if measured is None else
                (r_early[measured], r_late[measured], {k: np.asarray(v)[measured] for k, v in columns.items()})))
        return table

    def check_passes_alike(self, table) -> None:
        """The passes the prior compares (early and late, every window) must have sampled and
        verified alike, as every row's provenance records it: a late pass at a longer
        ``max_new_tokens`` would show a gain the training did not make. A pass without provenance is
        not compared. A late pass of the very checkpoint an early pass evaluated is warned of: its
        gain is noise. An adaptive pass must have bounded this prior's weight (:meth:`check_budget_prior`)."""
        from trajval_ops.measured_alike import measurement_difference

        recorded = self._pass_provenance(table)
        self.check_budget_prior(recorded)
        for key, provenance in recorded[1:]:
            first_key, first = recorded[0]
            if differ := measurement_difference(first, provenance):
                raise TrajvalInputError(
                    f"{OP_NAME}: the passes behind {first_key} and {key} measured otherwise ({differ}), as their "
                    f"provenance records it: the {self.prior.name} prior compares their pass rates, so both must "
                    "sample and verify alike; rerun one pass with the other's settings (the rollout cache keeps the "
                    "other pass)")
        if self.one_pass:
            return
        early_keys = self.early_window_keys or [self.r_early_key]
        _check_checkpoint_windows(recorded, early_keys)
        early = {p["model_path"]: key for key, p in recorded if key in early_keys and p.get("model_path")}
        seen: dict[tuple[bool, str], str] = {}
        for key, provenance in recorded:
            path, in_early = provenance.get("model_path"), key in early_keys
            if not in_early and path in early:
                logger.warning(f"{OP_NAME}: the late pass {key} evaluated the checkpoint the early pass {early[path]} "
                               f"evaluated ({path}): the gain between them is rollout noise, not learning; point the "
                               "late pass at a later checkpoint of the probe (e.g. manifest:<probe dir>#late[-1])")
            elif path and seen.get((in_early, path), key) != key:
                logger.warning(f"{OP_NAME}: the passes {seen[in_early, path]} and {key} of the "
                               f"{'early' if in_early else 'late'} window evaluated one checkpoint ({path}): the "
                               "window's mean counts it twice and another of its checkpoints not at all")
            seen.setdefault((in_early, path), key)

    def _pass_provenance(self, table) -> list[tuple[str, dict]]:
        """``(pass key, provenance)`` of each pass the prior reads that records one, once for each
        distinct record over every row (a pool concatenated from runs of other settings holds
        several): the fields the checks of the passes read."""
        from trajval_ops.measured_alike import MEASUREMENT_SETTINGS
        from trajval_ops.pools.io import distinct_path_values

        read = (*MEASUREMENT_SETTINGS, "model_path", "checkpoint", "budget")
        return [(key, provenance) for key in self.pass_keys()
                for provenance in distinct_path_values(table, f"{key}_provenance", read) if isinstance(provenance, dict)]

    def check_budget_prior(self, recorded: list[tuple[str, dict]]) -> None:
        """An adaptive pass stopped each row once more rollouts could no longer move the weight of
        the prior it was told by more than its tolerance, as its provenance's ``budget`` records it:
        scored by another prior, or with other settings, a stopped row's weight may move further."""
        from trajval_ops.rollout.budget import recorded_prior_spec

        spec = self.prior.spec()
        for key, provenance in recorded:
            bounded = recorded_prior_spec(provenance.get("budget"))
            if bounded is not None and bounded != spec:
                raise TrajvalInputError(
                    f"{OP_NAME}: the adaptive pass behind {key} stopped rows on the weight of {bounded}, as its "
                    f"provenance records it, and this mapper writes the weight of {spec}: a stopped row's "
                    f"{self.prior.name} weight may lie beyond the pass's weight_tolerance "
                    f"({provenance['budget'].get('tolerance')}) of what its full n rollouts give; score with the prior "
                    "the pass was told, or rerun the pass told this one (budget_prior, or the mapper after it in one "
                    "recipe) or with budget: fixed")

    def _log_noise(self, table, r_early, r_late, columns) -> None:
        """The rollout noise of the scores, and per group when ``group_key`` is set."""
        counts = self._rollout_counts(table)
        if counts is not None:
            log_rollout_noise(OP_NAME, rollout_noise(r_early, r_late, *counts))
            if self.group_key:
                groups = group_values(table, self.group_key, OP_NAME, self.id_key)
                log_group_noise(OP_NAME, self.group_key,
                                group_noise(groups, r_early, r_late, *counts, columns[self.weight_key]))
        elif self.group_key:
            logger.warning(f"{OP_NAME}: group_key {self.group_key!r} is set but the pool has no rollout counts "
                           "(<key>_n columns of the endpoint mapper): no per-group noise report")

    def log_cost(self, table) -> dict:
        """Log (and return) what this pool's prior cost, from its passes' provenance and the
        probe's manifest (:func:`trajval_ops.prior_cost.recorded_cost`)."""
        from trajval_ops.prior_cost import recorded_cost
        from trajval_ops.pools.io import table_path_values

        early = self.early_window_keys or [self.r_early_key]
        late = None if self.one_pass else self.late_window_keys or [self.r_late_key]
        cost = recorded_cost(lambda name: table_path_values(table, name), early, late, self.predict_features)
        stages = "; ".join(f"{name} {stage['completions']:,} completions, {stage['generated_tokens']:,} tokens"
                           + (f", {stage['wall_time_s']:.1f} s" if "wall_time_s" in stage else "")
                           for name, stage in cost["stages"].items())
        unknown = sum(stage.get("rows_without_cost", 0) for stage in cost["stages"].values())
        bound = f"at least {cost['completions']:,}" if unknown else f"{cost['completions']:,}"
        logger.info(f"{OP_NAME}: the {self.prior.name} prior cost {bound} completions and "
                    f"{cost['generated_tokens']:,} generated tokens ({stages}); `trajval cost --pool` reads it back"
                    + (f"; {unknown:,} pass rows record no cost (pass rates given, not sampled here)"
                       if unknown else ""))
        return cost

    def _pass_counts(self, table) -> tuple[tuple[list[str], np.ndarray], ...] | None:
        """The early and the late window's pass-rate keys, each with the rollouts behind each of
        its passes (the endpoint mapper's ``<key>_n`` columns, one row per key), or None where the
        pool lacks any of them."""
        windows = []
        for keys in (self.early_window_keys or [self.r_early_key], self.late_window_keys or [self.r_late_key]):
            names = [f"{key}_n" for key in keys]
            if not all(name in table.column_names for name in names):
                return None
            windows.append((keys, np.stack([np.asarray(table.column(name).to_numpy(zero_copy_only=False),
                                                       dtype=np.float64) for name in names])))
        return tuple(windows)

    def _rollout_counts(self, table) -> tuple[np.ndarray, np.ndarray] | None:
        """Rollouts behind r_early and r_late (a K-pass window's mean stands on the sum of its
        passes' rollouts), or None where the pool lacks them."""
        windows = self._pass_counts(table)
        return None if windows is None else tuple(per_pass.sum(axis=0) for _, per_pass in windows)


def _check_checkpoint_windows(recorded: list[tuple[str, dict]], early_keys: list[str]) -> None:
    """Refuse passes whose recorded probe checkpoints contradict their window: a pass named by a
    window reference of the other window (``late[0]`` behind an early pass), or an early
    checkpoint of one probe trained after a late one. Either reverses the gain: tasks the probe
    learned would go to the floor and tasks it forgot would be weighted up."""
    checkpoints = [(key, key in early_keys, p["checkpoint"]) for key, p in recorded
                   if isinstance(p.get("checkpoint"), dict) and p["checkpoint"].get("source") == "manifest"]
    for key, in_early, checkpoint in checkpoints:
        window, ref = "early" if in_early else "late", str(checkpoint.get("ref", ""))
        if ref.split("[")[0] in ("early", "late") and not ref.startswith(window):
            raise TrajvalInputError(f"{OP_NAME}: the {window} pass {key} evaluated the probe's {ref} (epoch "
                                    f"{checkpoint.get('epoch')}), as its provenance records it: point it at "
                                    f"manifest:<probe dir>#{window}[i]")
    by_probe: dict[str, dict[bool, list]] = {}
    for key, in_early, checkpoint in checkpoints:
        if isinstance(checkpoint.get("epoch"), (int, float)):
            by_probe.setdefault(str(checkpoint.get("manifest")), {True: [], False: []})[in_early].append(
                (checkpoint["epoch"], key))
    for windows in by_probe.values():
        if windows[True] and windows[False] and max(windows[True])[0] > min(windows[False])[0]:
            (early_epoch, early_key), (late_epoch, late_key) = max(windows[True]), min(windows[False])
            raise TrajvalInputError(f"{OP_NAME}: the early pass {early_key} evaluated the probe at epoch {early_epoch}, "
                                    f"after the late pass {late_key} (epoch {late_epoch}), as their provenance records "
                                    "it: the gain would run backwards; point the early passes at earlier checkpoints")
