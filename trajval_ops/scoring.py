"""A pool scored by a prior: the learnability mapper's work, without Data-Juicer.

:class:`ScoringSettings` declares the mapper's own settings (which fields hold the passes, what
it writes, how rows a sampled pass left out are predicted); :class:`PoolScorer` reads the passes
a prior needs from an Arrow table (:class:`~trajval_ops.priors.base.PassRates`: the windows'
means, every checkpoint's pass, the rollouts behind them, the groups), has the prior score them
(:meth:`~trajval_ops.priors.base.Prior.scores`), predicts the rows a sampled pass left out, and
appends the output columns with their provenance, every other column untouched. The checks of
the passes the prior compares are :mod:`trajval_ops.pass_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
from loguru import logger

from trajval_ops import __version__, core, fields
from trajval_ops.errors import TrajvalInputError, first_few
from trajval_ops.input_checks import arrow_numeric_column, check_unique_ids, group_values
from trajval_ops.priors.base import PassRates, Prior
from trajval_ops.settings import check_settings, setting


@dataclass(frozen=True)
class ScoringSettings:
    """The learnability mapper's own settings: the fields it reads and writes, the prediction of
    unmeasured rows, the replacement of existing columns."""

    r_early_key: str = setting(fields.R_EARLY, "Field holding the early-window mean pass rate; written when "
                               "`early_window_keys` is given, read otherwise.")
    r_late_key: str = setting(fields.R_LATE, "The same for the late window.")
    window_k: Optional[int] = setting(None, "K > 1: average the endpoint mapper's per-checkpoint fields of each "
                                      "window, named from its `window`/`window_index` (`trajval_r_early_0` ... "
                                      "`trajval_r_early_<K-1>`, likewise late). None or 1: read `r_early_key` / "
                                      "`r_late_key` (K = 1). Explicit `early_window_keys`/`late_window_keys` "
                                      "override.", ge=1)
    early_window_keys: Optional[List[str]] = setting(None, "Per-checkpoint pass-rate fields of the early window (K "
                                                     "fields, e.g. the outputs of K endpoint-reward mapper "
                                                     "instances); averaged into `r_early_key`. None: read "
                                                     "`r_early_key` directly.")
    late_window_keys: Optional[List[str]] = setting(None, "The same for the late window.")
    checkpoint_keys: Optional[List[str]] = setting(None, "Pass-rate fields of the checkpoints between the early and "
                                                   "the late window, in training order (e.g. passes on the probe's "
                                                   "`epoch-<e>` checkpoints), for a prior that reads the whole "
                                                   "trajectory (limr): it reads the early window's passes, these, "
                                                   "then the late window's. None: the windows' passes alone.")
    delta_key: str = setting(fields.DELTA, "Output field for `r_late - r_early`.")
    score_key: str = setting(fields.SCORE, "Output field for the score `s` of the chosen prior.")
    weight_key: str = setting(fields.WEIGHT, "Output field for the weight `w` (unnormalised).")
    profile_key: str = setting(fields.PROFILE, "Output field for the endpoint-only trajectory profile.")
    provenance_key: str = setting(fields.SCORE_PROVENANCE, "Output field recording how the weight was made and "
                                  "what the prior cost (`prior_cost`: completions and generated tokens per stage "
                                  "and in total, from the passes' provenance and the probe's manifest).")
    id_key: Optional[str] = setting(None, "Dotted path of the row id used in error messages; None tries common id "
                                    "fields (`id`, `extra_info.index`, ...) and always gives the row position.")
    group_key: Optional[str] = setting(None, "Dotted path of a task group (a family, `data_source`): the end-of-run "
                                       "log then shows the mean pass rates, delta (with its SE from the rollouts) "
                                       "and weight per group, and says whether the gain differs between groups "
                                       "beyond the rollout noise (needs the endpoint mapper's `<key>_n` columns). "
                                       "Rows without it form the group `None`.")
    predict_unmeasured: bool = setting(False, "Predict the score of each row a sampled endpoint pass left out "
                                       "(status `not_sampled`) from the measured rows; false: such a row stops the "
                                       "run.")
    predict_features: Optional[List[str]] = setting(None, "Numeric fields every row has (e.g. a short early pass) "
                                                    "that the prediction reads besides `group_key`; None: the "
                                                    "group alone.")
    predict_coverage: float = setting(0.9, "Share of the out-of-fold errors the predicted rows' interval "
                                      "(`<score_key>_low` / `_high`) covers.", gt=0, lt=1)
    predict_seed: int = setting(0, "Seed of the prediction's model and folds.")
    predicted_key: str = setting(fields.PREDICTED, "Output field, true where the score is predicted; "
                                 "`<predicted_key>_fallback` is true where the row's group has no measured row (it "
                                 "gets the measured rows' mean).")
    overwrite: bool = setting(False, "Replace input columns named as this mapper's outputs (a pool scored before, "
                              "scored again with other settings), each replaced column logged; false: such a column "
                              "stops the run naming it, so a weight of the user's own is never lost.")

    def __post_init__(self):
        check_settings(self)
        for name in ("early_window_keys", "late_window_keys", "checkpoint_keys"):
            if getattr(self, name) is not None and len(getattr(self, name)) == 0:
                raise ValueError(f"{name} must list at least one field, or be omitted")


def _missing(values) -> np.ndarray | None:
    """Null where a column has no value (a predicted row's delta and profile)."""
    values = np.asarray(values)
    if values.dtype == object:
        return np.array([v is None for v in values]) if any(v is None for v in values) else None
    if values.dtype.kind == "f" and np.isnan(values).any():
        return np.isnan(values)
    return None


class PoolScorer:
    """A pool's scores and weights by ``prior``, read and written as ``settings`` say.

    :param what: the name errors and log lines begin with (the operator's).
    :raises ValueError: settings that do not go together with the prior.
    """

    def __init__(self, prior: Prior, settings: ScoringSettings, what: str):
        self.prior, self.settings, self.what = prior, settings, what
        s = settings
        if prior.groups_read_by and not s.group_key:
            raise ValueError(f"{what}: {prior.groups_read_by} shrinks each row toward its group: set group_key")
        if s.predict_unmeasured and prior.rollouts_read_by:
            raise ValueError(f"{what}: {prior.rollouts_read_by} reads each row's rollouts, which a row a sampled pass "
                             "left out has none of; use estimator 'paper' with predict_unmeasured")
        if s.predict_features is not None and not s.predict_unmeasured:
            raise ValueError(f"{what}: predict_features feed the prediction of unmeasured rows: set "
                             "predict_unmeasured: true")
        if s.checkpoint_keys and not prior.reads_checkpoints:
            raise ValueError(f"{what}: checkpoint_keys are read by a prior that reads the whole trajectory; the "
                             f"{prior.name} prior reads the windows' means")
        self.early_window_keys, self.late_window_keys = fields.learnability_windows(
            s.early_window_keys, s.late_window_keys, s.window_k)
        self.provenance = self._provenance()

    @property
    def one_pass(self) -> bool:
        return self.prior.one_pass

    def _provenance(self) -> dict:
        """How every weight is made (written with each row): the prior's own record, then the
        fields it read."""
        s = self.settings
        provenance = dict(self.prior.provenance())
        provenance["r_early_source"] = self.early_window_keys or [s.r_early_key]
        if not self.one_pass:
            provenance.update(r_late_source=self.late_window_keys or [s.r_late_key], profile_rule=core.PROFILE_RULE)
        if s.checkpoint_keys:
            provenance["checkpoint_source"] = list(s.checkpoint_keys)
        if s.predict_unmeasured:
            provenance["prediction"] = {"features": list(s.predict_features or []), "group_key": s.group_key,
                                        "coverage": s.predict_coverage, "seed": s.predict_seed}
        provenance["trajval_ops_version"] = __version__
        return provenance

    def pass_keys(self) -> list[str]:
        """The pass-rate fields the prior reads, in training order."""
        s = self.settings
        keys = fields.compared_passes(self.early_window_keys, self.late_window_keys, s.r_early_key, s.r_late_key,
                                      self.one_pass)
        if s.checkpoint_keys:
            early = len(self.early_window_keys or [s.r_early_key])
            keys = keys[:early] + list(s.checkpoint_keys) + keys[early:]
        return keys

    def input_columns(self) -> list[str]:
        from trajval_ops.rows import path_root

        keys = self.pass_keys() + [f"{key}_status" for key in self.pass_keys()]
        ids = [self.settings.id_key] if self.settings.id_key else list(fields.ID_CANDIDATES)
        return list(dict.fromkeys(keys + [path_root(key) for key in ids]))

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
        if not self.settings.predict_unmeasured:
            from trajval_ops.pools.io import table_row
            from trajval_ops.rows import row_label

            position = int(np.argmax(left_out))
            raise TrajvalInputError(
                f"{row_label(table_row(table, position), position, self.settings.id_key)}: a sampled endpoint pass "
                f"left it out (status '{STATUS_NOT_SAMPLED}'): set predict_unmeasured: true to predict the scores of "
                "such rows")
        return ~left_out

    def score_pool(self, table):
        """The whole pool scored at once, with the end-of-run summary, noise report and cost."""
        from trajval_ops.pass_checks import check_passes_alike
        from trajval_ops.summary import log_weight_summary

        if table.num_rows == 0:
            raise TrajvalInputError(f"{self.what}: the pool is empty (0 rows): nothing to score")
        check_unique_ids(table, self.settings.id_key, what=self.what)
        described = ", ".join(f"{key}={value}" for key, value in self.prior.settings().items())
        logger.info(f"{self.what}: scoring {table.num_rows} rows ({self.prior.name} prior, {described})")
        check_passes_alike(self, table)
        table, (r_early, r_late, columns) = self.score_table(table, self.log_cost(table))
        s = self.settings
        measured = ~np.asarray(columns[s.predicted_key], dtype=bool) if s.predicted_key in columns else None
        pass_rates = {"r_early": r_early} if self.one_pass else {"r_early": r_early, "r_late": r_late}
        if measured is not None:  # the pass rates of the rows the passes measured
            pass_rates = {name: values[measured] for name, values in pass_rates.items()}
        log_weight_summary(self.what, weight=columns[s.weight_key], eps=self.prior.eps,
                           profiles=columns.get(s.profile_key), **pass_rates)
        if not self.one_pass:
            self._log_noise(table if measured is None else table.filter(measured), *(
                (r_early, r_late, columns) if measured is None else
                (r_early[measured], r_late[measured], {k: np.asarray(v)[measured] for k, v in columns.items()})))
        return table

    def score_table(self, table, prior_cost: dict):
        """``(table with the outputs appended, (r_early, r_late, output columns))``: the pass
        columns read from Arrow (errors name the first bad row by its position in the pool); every
        other column untouched.

        :param prior_cost: the pool's recorded cost (:meth:`log_cost`), summed into the provenance.
        """
        import pyarrow as pa

        from trajval_ops.pools.io import append_columns
        from trajval_ops.pools.transfer import provenance_column
        from trajval_ops.prior_cost import cost_summary

        s = self.settings
        measured = self.measured_rows(table)
        r_early, r_late, columns, found = self.score_columns(table, measured)
        provenance = dict(self.provenance)
        if found:  # what the prior's fit over the pool found, before the version
            provenance = {**provenance, **found, "trajval_ops_version": provenance.pop("trajval_ops_version")}
        if s.predict_unmeasured:
            provenance = self._predict(table, measured, columns, provenance)
        provenance = dict(provenance)
        version = provenance.pop("trajval_ops_version")
        provenance.update(prior_cost=cost_summary(prior_cost), trajval_ops_version=version)
        new = {name: pa.array(values, mask=_missing(values)) for name, values in columns.items()}
        new[s.provenance_key] = pa.repeat(pa.scalar(provenance), table.num_rows)
        # trajval transfer-prior's record of carried weights this mapper replaces: left beside the
        # new weights it would be read as theirs (their regime, eps and scoring), so it goes with them
        carried = [name for name in (provenance_column(s.weight_key),) if name in table.column_names]
        self._check_outputs_new(table, list(new) + carried)
        table = table.drop_columns(carried)
        return append_columns(table, new), (r_early, r_late, columns)

    def read_passes(self, table, measured: np.ndarray | None):
        """``read(field) -> float array in [0, 1]`` over the pool; a row no pass measured reads 0
        (its score is predicted)."""
        def read(key):
            values = arrow_numeric_column(table, key, lower=0.0, upper=1.0, id_key=self.settings.id_key,
                                          position_offset=0, unread=None if measured is None else ~measured)
            return values if measured is None else np.where(measured, values, 0.0)

        return read

    def score_columns(self, table, measured: np.ndarray | None = None) -> tuple:
        """``(r_early, r_late or None for a one-pass prior, output columns, what the prior's fit
        found)``: the windows' means (written back where a window averages passes), the change and
        profile of a two-pass prior, and the prior's scores, weights and interval of the rows every
        pass measured."""
        s = self.settings
        read = self.read_passes(table, measured)
        early = self._window_passes(read, self.early_window_keys, s.r_early_key)
        r_early = core.window_mean(early) if self.early_window_keys else early[:, 0]
        columns = {s.r_early_key: r_early} if self.early_window_keys else {}
        r_late = late = None
        if not self.one_pass:
            late = self._window_passes(read, self.late_window_keys, s.r_late_key)
            r_late = core.window_mean(late) if self.late_window_keys else late[:, 0]
            if self.late_window_keys:
                columns[s.r_late_key] = r_late
            columns[s.delta_key] = core.reward_delta(r_early, r_late)
        scored = self._scores(table, measured, PassRates(r_early, r_late, self._checkpoints(read, early, late)))
        columns[s.score_key], columns[s.weight_key] = scored.score, scored.weight
        if not self.one_pass:
            columns[s.profile_key] = core.endpoint_profiles(r_early, r_late)
        if scored.low is not None:
            columns[f"{s.score_key}_low"], columns[f"{s.score_key}_high"] = scored.low, scored.high
        return r_early, r_late, columns, dict(scored.found)

    @staticmethod
    def _window_passes(read, keys: Optional[List[str]], key: str) -> np.ndarray:
        """A window's passes, rows x passes (one column: the window's mean field itself)."""
        return np.stack([read(k) for k in (keys or [key])], axis=1)

    def _checkpoints(self, read, early: np.ndarray, late: np.ndarray | None) -> np.ndarray | None:
        if not self.prior.reads_checkpoints:
            return None
        between = [read(key)[:, None] for key in self.settings.checkpoint_keys or []]
        return np.concatenate([early, *between, *([] if late is None else [late])], axis=1)

    def _scores(self, table, measured: np.ndarray | None, rates: PassRates):
        """The prior's scores of the rows every pass measured (the others 0 until predicted), with
        the rollouts and groups it reads; a pool it cannot score is an input error."""
        from trajval_ops.priors.base import Scores

        prior, s = self.prior, self.settings
        if prior.rollouts_read_by:
            rates = PassRates(rates.early, rates.late, rates.checkpoints, self._rollout_counts_checked(table))
        if prior.groups_read_by:
            rates = PassRates(rates.early, rates.late, rates.checkpoints, rates.rollouts,
                              group_values(table, s.group_key, self.what, s.id_key))
        try:
            if measured is None:
                return prior.scores(rates)
            scored = prior.scores(rates.subset(measured))
        except ValueError as exc:
            raise TrajvalInputError(f"{self.what}: {exc}") from None
        return Scores(*(None if values is None else _scattered(values, measured)
                        for values in (scored.score, scored.weight, scored.low, scored.high)), scored.found)

    def _rollout_counts_checked(self, table) -> tuple[np.ndarray, np.ndarray]:
        """The rollouts behind r_early and r_late, for a prior that reads them: each window's passes
        must stand on one n (:meth:`_check_window_shares_n`)."""
        windows = self._pass_counts(table)
        if windows is None:
            raise TrajvalInputError(f"{self.what}: {self.prior.rollouts_read_by} reads the rollouts behind each pass "
                                    "rate (the endpoint mapper's <key>_n columns), which the pool lacks")
        for keys, per_pass in windows:
            self._check_window_shares_n(table, keys, per_pass)
        return tuple(per_pass.sum(axis=0) for _, per_pass in windows)

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
            label = row_label(table_row(table, row), row, self.settings.id_key)
            raise TrajvalInputError(
                f"{self.what}: {label}: the passes of a window stand on different rollout counts ("
                + ", ".join(f"{key}_n {int(counts[i, row])}" for i, key in enumerate(keys))
                + f"; {differ.size} row(s) in all): {self.prior.rollouts_read_by} reads a window's mean rate as the "
                "successes of all its rollouts, which holds only for one n; give the window's passes one n, or use "
                "estimator 'paper'")

    def _pass_counts(self, table) -> tuple[tuple[list[str], np.ndarray], ...] | None:
        """The early and the late window's pass-rate keys, each with the rollouts behind each of
        its passes (the endpoint mapper's ``<key>_n`` columns, one row per key), or None where the
        pool lacks any of them."""
        windows = []
        for keys in (self.early_window_keys or [self.settings.r_early_key],
                     self.late_window_keys or [self.settings.r_late_key]):
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

    def _predict(self, table, measured, columns, provenance: dict) -> dict:
        """Every unmeasured row's score predicted from the measured rows (:mod:`trajval_ops.priors.sampled`);
        the weight follows; the interval and the flag are written for every row."""
        from trajval_ops.priors.sampled import MIN_ROWS_FOR_A_MODEL, predict_scores

        s = self.settings
        if measured is None:
            measured = np.ones(table.num_rows, dtype=bool)
        if not measured.any():
            raise TrajvalInputError(f"{self.what}: no row was measured by every pass: nothing to predict from")
        features = np.stack([arrow_numeric_column(table, key, lower=-np.inf, id_key=s.id_key, position_offset=0)
                             for key in s.predict_features], axis=1) if s.predict_features else None
        groups = group_values(table, s.group_key, self.what, s.id_key) if s.group_key else None
        score = np.where(measured, columns[s.score_key], 0.0)
        prediction = predict_scores(score, measured, features, groups, seed=s.predict_seed,
                                    coverage=s.predict_coverage)
        columns[s.score_key] = prediction.score
        columns[s.weight_key] = self.prior.weight(prediction.score)
        columns[f"{s.score_key}_low"], columns[f"{s.score_key}_high"] = prediction.low, prediction.high
        columns[s.predicted_key] = prediction.predicted
        # a row of a group no measured row stands in: the measured rows' mean, flagged per row
        columns[f"{s.predicted_key}_fallback"] = prediction.fallback
        for name in (s.r_early_key, s.r_late_key, s.delta_key, s.profile_key):
            if name in columns:  # a predicted row has no measured pass rate, change or profile
                columns[name] = np.where(measured, columns[name], None) if name == s.profile_key else \
                    np.where(measured, columns[name], np.nan)
        fallback_groups = sorted({repr(groups[i]) for i in np.flatnonzero(prediction.fallback)}) if groups else []
        if fallback_groups:
            logger.warning(f"{self.what}: {int(prediction.fallback.sum())} rows in {len(fallback_groups)} groups "
                           f"({first_few(fallback_groups, 10)}) have no measured row: they get the measured rows' "
                           f"mean score (flagged: {s.predicted_key}_fallback)")
        how = (f"gradient boosting on {s.predict_features}{' and ' + s.group_key if s.group_key else ''}"
               if prediction.predictor == "gradient_boosting" else
               f"the mean of each {s.group_key or 'pool'}'s measured rows"
               + (f" ({s.predict_features} unused: fewer than {MIN_ROWS_FOR_A_MODEL} measured rows)"
                  if s.predict_features else ""))
        logger.info(f"{self.what}: {int(prediction.predicted.sum())} of {table.num_rows} scores predicted by {how}; "
                    f"interval +-{prediction.interval_halfwidth:.4f} ({s.predict_coverage:.0%} of the out-of-fold "
                    "errors)")
        provenance = dict(provenance)
        version = provenance.pop("trajval_ops_version")
        provenance["prediction"] = {**provenance["prediction"], **prediction.as_provenance(s.predict_coverage),
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

    def _check_outputs_new(self, table, names: list[str]) -> None:
        """Refuse (or, with ``overwrite``, log) input columns this mapper would replace."""
        existing = [name for name in names if name in table.column_names]
        if not existing:
            return
        if not self.settings.overwrite:
            raise TrajvalInputError(
                f"{self.what}: the pool already has column(s) {', '.join(repr(n) for n in existing)}, which this "
                "mapper writes: set overwrite: true to replace them (a pool scored before), or rename them, or "
                "write elsewhere (weight_key, score_key, ...)")
        logger.warning(f"{self.what}: replacing the pool's own column(s) {', '.join(existing)} (overwrite: true)")

    def _log_noise(self, table, r_early, r_late, columns) -> None:
        """The rollout noise of the scores, and per group when ``group_key`` is set."""
        from trajval_ops.summary import group_noise, log_group_noise, log_rollout_noise, rollout_noise

        s = self.settings
        counts = self._rollout_counts(table)
        if counts is not None:
            log_rollout_noise(self.what, rollout_noise(r_early, r_late, *counts))
            if s.group_key:
                groups = group_values(table, s.group_key, self.what, s.id_key)
                log_group_noise(self.what, s.group_key,
                                group_noise(groups, r_early, r_late, *counts, columns[s.weight_key]))
        elif s.group_key:
            logger.warning(f"{self.what}: group_key {s.group_key!r} is set but the pool has no rollout counts "
                           "(<key>_n columns of the endpoint mapper): no per-group noise report")

    def log_cost(self, table) -> dict:
        """Log (and return) what this pool's prior cost, from its passes' provenance and the
        probe's manifest (:func:`trajval_ops.prior_cost.recorded_cost`)."""
        from trajval_ops.prior_cost import recorded_cost
        from trajval_ops.pools.io import table_path_values

        s = self.settings
        early = self.early_window_keys or [s.r_early_key]
        late = None if self.one_pass else self.late_window_keys or [s.r_late_key]
        cost = recorded_cost(lambda name: table_path_values(table, name), early, late,
                             [*(s.checkpoint_keys or []), *(s.predict_features or [])])
        stages = "; ".join(f"{name} {stage['completions']:,} completions, {stage['generated_tokens']:,} tokens"
                           + (f", {stage['wall_time_s']:.1f} s" if "wall_time_s" in stage else "")
                           for name, stage in cost["stages"].items())
        unknown = sum(stage.get("rows_without_cost", 0) for stage in cost["stages"].values())
        bound = f"at least {cost['completions']:,}" if unknown else f"{cost['completions']:,}"
        logger.info(f"{self.what}: the {self.prior.name} prior cost {bound} completions and "
                    f"{cost['generated_tokens']:,} generated tokens ({stages}); `trajval cost --pool` reads it back"
                    + (f"; {unknown:,} pass rows record no cost (pass rates given, not sampled here)"
                       if unknown else ""))
        return cost


def _scattered(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values`` of the rows ``rows`` (a boolean mask) selects, placed in a pool-long array (0
    elsewhere)."""
    out = np.zeros(rows.size, dtype=np.asarray(values).dtype)
    out[rows] = values
    return out
