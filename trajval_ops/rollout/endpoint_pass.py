"""One checkpoint's endpoint pass over a pool, in one of four modes, each a class behind one entry
point, :func:`build_pass` (which reads the mode from the pass's setting groups,
:mod:`trajval_ops.rollout.pass_settings`):

- :class:`MeasuredPass`: every row rolled out (``n`` rollouts, or read from the rollout cache);
- :class:`AdaptivePass`: rollouts in rounds, a row stopped once the weight of the recipe's prior is
  pinned (:mod:`trajval_ops.rollout.budget`);
- :class:`SampledPass`: a seeded sample of the pool measured, the other rows marked ``not_sampled``
  (:mod:`trajval_ops.priors.sampled`);
- :class:`ReusedPass`: the pass rates read from a pool field (:mod:`trajval_ops.rollout.reused_pass`),
  the rows that lack it stopped on or measured (``reuse_missing``).

A sampled or reused pass with an adaptive budget measures its rows in rounds as well
(:class:`SampledAdaptivePass`, :class:`ReusedAdaptivePass`). What every mode shares is their base,
:class:`~trajval_ops.rollout.pass_base.EndpointPass`: the cache, prompt, verifier, engine and
provenance plumbing. No Data-Juicer here: the endpoint mapper is the glue.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from trajval_ops import __version__, fields
from trajval_ops.errors import TrajvalInputError
from trajval_ops.recipe import SAMPLE_SETTINGS, sample_difference
from trajval_ops.rollout.engines import DecodingConfig
from trajval_ops.rollout.pass_base import EndpointPass
from trajval_ops.rollout.pass_rates import NO_COST, STATUS_NOT_SAMPLED
from trajval_ops.rollout.pass_settings import BudgetSettings, SampleSettings
from trajval_ops.rollout.reused_pass import STATUS_REUSED, ReuseSettings


def _pass_of(provenance: dict) -> dict:
    """A measured row's provenance less what the row's record keeps itself (cost, version)."""
    return {key: value for key, value in provenance.items() if key not in ("cost", "trajval_ops_version")}


class MeasuredPass(EndpointPass):
    """Every row rolled out, ``n`` rollouts each (or read from the rollout cache)."""

    def columns(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        return self._measure(rows, first_row)


def adaptive_budget(settings: BudgetSettings, window, window_index, decoding: DecodingConfig):
    """The pass's adaptive budget (None: a fixed n), refused where it has no meaning, where the
    pass is not told which prior's weight to bound, or where its pass rate alone does not decide
    that weight (one checkpoint of a window)."""
    if settings.budget == "fixed":
        return None
    if window is None:
        raise ValueError("an adaptive budget stops rows by their prior's weight: set window (early or late)")
    if window_index is not None:
        # each checkpoint's own interval can be pinned while the window's mean is not (a row at 0
        # of 8 stops, its unsampled rollouts still moving the mean): measured off by up to 0.44
        raise ValueError(f"an adaptive budget bounds the weight this pass's own pass rate gives, and this pass is "
                         f"checkpoint {window_index} of a {window} window, whose mean decides the weight: use "
                         "budget: fixed for a window's passes, or window_k: 1")
    if settings.budget_prior is None:
        raise ValueError("budget: adaptive stops rows on the weight the learnability mapper writes, and this pass is "
                         "not told which prior that is: put the trajval_learnability_mapper in the same recipe after "
                         "this pass (dj-process then tells it), or set budget_prior (e.g. {prior: trajval, alpha: "
                         "0.3, eps: 0.05})")
    if decoding.temperature == 0:
        raise ValueError("an adaptive budget samples in rounds, and greedy decoding (temperature 0) gives every round "
                         "the same completion: set temperature > 0 or budget: fixed")
    from trajval_ops.priors import prior_from_spec
    from trajval_ops.rollout.budget import AdaptiveBudget

    return AdaptiveBudget(window, decoding.n, settings.round_size or max(1, decoding.n // 4),
                          prior_from_spec(settings.budget_prior), settings.weight_tolerance)


class AdaptivePass(MeasuredPass):
    """Every row rolled out in rounds, each stopped once more rollouts can no longer move the weight
    of the recipe's prior by more than the tolerance (``budget``: :func:`adaptive_budget`); the
    budget is part of the rollout cache's key and of every row's provenance."""

    def __init__(self, *args, budget, **kwargs):
        super().__init__(*args, **kwargs)
        self.budget = budget

    def _cache_key_parts(self) -> dict:
        return {**super()._cache_key_parts(), "budget": self.budget.as_dict()}

    def _provenance_parts(self) -> dict:
        return {**super()._provenance_parts(), "budget": self.budget.as_dict()}


class SampledPass(EndpointPass):
    """A seeded sample of the pool rolled out, drawn from the whole pool before the first batch
    (:meth:`draw_sample`), the other rows marked ``not_sampled``.

    :param sample: the sample's settings (:meth:`~trajval_ops.rollout.pass_settings.SampleSettings.drawn`).
    :param drawn_sample: a sample drawn from the whole pool elsewhere (the Ray driver's).
    """

    def __init__(self, *args, sample: dict, drawn_sample: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.sample = sample
        self._sampled_ids = None  # repr of each measured row's id, once drawn
        if drawn_sample is not None:
            self._adopt_sample(drawn_sample)

    def columns(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        """The rows in the sample rolled out, the others marked ``not_sampled``."""
        if self._sampled_ids is None:
            raise RuntimeError(f"{self.what}: a sampled pass draws its sample from the whole pool in check_pool, "
                               "which must run before the first batch")
        chosen = [i for i, row in enumerate(rows) if self._in_sample(row)]
        # the chosen rows are not contiguous in the pool, and the rollout pass names row i by
        # first_row + i: they are named by their ids alone (the sample reads ids), not by a wrong row
        measured = self._measure([rows[i] for i in chosen], None) if chosen else None
        self._prepare()
        # a measured row's fields, nothing generated: one shape for the column (the default
        # executor's datasets would store differing shapes as JSON text of its own spelling)
        provenance = self._provenance_of(engine=None, dtype=None, fallback_hits=0, cost=NO_COST)
        out = {self.output_key: [None] * len(rows), f"{self.output_key}_n": [0] * len(rows),
               f"{self.output_key}_status": [STATUS_NOT_SAMPLED] * len(rows),
               f"{self.output_key}_provenance": [provenance] * len(rows)}
        for j, i in enumerate(chosen):
            for name, values in measured.items():
                out[name][i] = values[j]
        return out

    def _cache_key_parts(self) -> dict:
        # a sample's generate calls group other rows than a full pass's
        return {**super()._cache_key_parts(), "sample": {k: self.sample[k] for k in SAMPLE_SETTINGS}}

    def _provenance_parts(self) -> dict:
        return {**super()._provenance_parts(), "sample": self.sample}

    def _check_rows(self, table) -> dict | None:
        drawn = self.draw_sample(table)
        super()._check_rows(table)
        return drawn

    def _rolled_out(self, row: dict) -> bool:
        return self._sampled_ids is None or self._in_sample(row)  # the rows it leaves out are never rolled out

    def _finish_note(self, statuses: list) -> str:
        return f", {statuses.count(STATUS_NOT_SAMPLED)} rows not sampled"

    def _in_sample(self, row) -> bool:
        """Whether a sampled pass measures ``row`` (its id among the drawn ones)."""
        from trajval_ops.rows import get_path

        return repr(get_path(row, self.sample["id_key"], None)) in self._sampled_ids

    def _adopt_sample(self, drawn: dict) -> None:
        """Measure the rows of a sample drawn from the whole pool (here or on the Ray driver)."""
        settings = {k: drawn.get(k) for k in SAMPLE_SETTINGS}
        if self.sample is None or settings != {k: self.sample[k] for k in SAMPLE_SETTINGS}:
            raise ValueError(f"{self.what}: drawn_sample {settings} is not this pass's sample settings; it is set by "
                             "the operator, not by a recipe")
        self._sampled_ids = frozenset(repr(task) for task in drawn["ids"])
        self.sample = {k: v for k, v in drawn.items() if k != "ids"}

    def draw_sample(self, table) -> dict:
        """The rows a sampled pass measures, from the whole pool (every row needs a unique id):
        the drawn sample (its settings, the pool's size and the measured ids), adopted here."""
        from trajval_ops.input_checks import group_values, id_key_of
        from trajval_ops.pools.io import table_path_values
        from trajval_ops.priors.sampled import stratified_sample

        key = id_key_of(table, self.id_key)
        ids = table_path_values(table, key) if key else None
        if ids is None:
            raise TrajvalInputError(f"{self.what}: a sampled pass (sample_fraction {self.sample['fraction']}) names its "
                                    + (f"rows by task id, and no row has id_key '{key}'" if key else
                                       "rows by task id, and the pool has none: set id_key"))
        if None in ids:
            raise TrajvalInputError(f"{self.what}: row {ids.index(None)}: field '{key}' is missing; a sampled pass "
                                    "needs a task id on every row")
        self._check_earlier_samples(table)
        groups = None
        if self.sample["group_key"]:
            groups = group_values(table, self.sample["group_key"], f"{self.what} [{self.output_key}]", self.id_key)
        chosen = stratified_sample(ids, self.sample["fraction"], self.sample["seed"], groups)
        self._check_earlier_draws(table, key, ids, chosen)
        measured = [task for task, keep in zip(ids, chosen) if keep]
        drawn = {**self.sample, "id_key": key, "pool_rows": table.num_rows, "measured_rows": len(measured),
                 "ids": measured}
        self._adopt_sample(drawn)
        logger.info(f"{self.what} [{self.output_key}]: sampled pass: {len(self._sampled_ids)} of {table.num_rows} rows "
                    f"(fraction {self.sample['fraction']}, seed {self.sample['seed']}, stratified by "
                    f"{self.sample['group_key'] or 'nothing'}); the others are left to the learnability mapper")
        return drawn

    def _earlier_samples(self, table):
        """``(pass name, recorded sample)`` of each other sampled pass the pool already holds."""
        from trajval_ops.pools.io import table_path_values

        for name in table.column_names:
            if not name.endswith("_provenance") or name == f"{self.output_key}_provenance":
                continue
            recorded = next((value for value in table_path_values(table, f"{name}.sample") or []
                             if isinstance(value, dict)), None)
            if recorded is not None:
                yield name[:-len("_provenance")], recorded

    def _check_earlier_samples(self, table) -> None:
        """Refuse to draw another sample than a sampled pass the pool already has (an earlier
        recipe's): the prior would score only the overlap of the two samples."""
        for earlier, recorded in self._earlier_samples(table):
            differ = sample_difference(recorded, self.sample)
            if differ:
                raise TrajvalInputError(
                    f"{self.what} [{self.output_key}]: the pool's sampled pass '{earlier}' drew "
                    f"another sample ({differ}): a sampled prior scores the rows both passes measured, so give this "
                    "pass the same sample_fraction, sample_seed and sample_group_key")

    def _check_earlier_draws(self, table, key: str, ids: list, chosen) -> None:
        """Refuse a draw that differs, on the rows present, from the rows an earlier sampled pass
        with the same settings measured (its status not ``not_sampled``): the draw takes
        ``ceil(fraction x size)`` rows per group of the pool it is given, so the same settings
        draw other rows from a pool that lost or gained rows; the late rollouts of a row the
        early pass did not measure would be wasted, and the overlap would shrink unsaid."""
        from trajval_ops.pools.io import table_path_values

        for earlier, recorded in self._earlier_samples(table):
            statuses = table_path_values(table, f"{earlier}_status")
            if sample_difference(recorded, self.sample) or statuses is None:
                continue
            differing = next((i for i, (status, keep) in enumerate(zip(statuses, chosen))
                              if status is not None and (status != STATUS_NOT_SAMPLED) != bool(keep)), None)
            if differing is None:
                continue
            which = (f"this pass draws it and '{earlier}' did not measure it" if chosen[differing] else
                     f"'{earlier}' measured it and this pass does not draw it")
            raise TrajvalInputError(
                f"{self.what} [{self.output_key}]: the pool's sampled pass '{earlier}' measured other rows than this "
                f"pass draws with the same sample settings: row {differing} ({key}={ids[differing]!r}): {which}. "
                f"The sample takes ceil(fraction x size) rows per group of the pool it is given, so rows were likely "
                f"removed or added (or their ids or groups changed) between the passes ('{earlier}' drew from "
                f"{recorded.get('pool_rows', 'an unrecorded number of')} rows, this pool has {table.num_rows}): run "
                f"this pass on the pool '{earlier}' ran on and filter rows after both passes, or rerun '{earlier}' "
                "on this pool")


class ReusedPass(EndpointPass):
    """The pass rates read from a field the pool already has; with ``reuse_missing: measure`` the
    rows lacking it are rolled out.

    :param reuse: the reused field's settings (:meth:`~trajval_ops.rollout.reused_pass.ReuseSettings.settings`).
    """

    def __init__(self, *args, reuse: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.reuse = reuse

    def columns(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        """The reused values read and checked; with ``reuse_missing: measure``
        the rows lacking the field sampled (:meth:`_measure`), every row's provenance then
        of one shape: the reused field's, ``source`` (``pool_field`` or ``measured``), the row's
        cost and ``measured_by``: the pass that samples the rows lacking it (a measured row's own
        engine and dtype, a read row's the settings')."""
        from trajval_ops.rollout.reused_pass import missing_rows

        measuring = self.reuse["missing"] == "measure"
        rates, counts = self._read_reused(rows, first_row, skip_missing=measuring)
        present = counts > 0
        # the pool's one n (a k/n string's is read from its rows, but for a pass measuring missing rows, whose
        # batch may hold none: a column's type must not change between batches); each row's own is in <key>_n
        read_n = self.reuse["n"] is None and not measuring and present.any()
        pool_n = int(counts[present][0]) if read_n else self.reuse["n"]
        record = {"source": "pool_field", "field": self.reuse["key"], "n": None if self.reuse["n_key"] else pool_n,
                  "n_field": self.reuse["n_key"], "form": self.reuse["form"], "preset": self.reuse["preset"],
                  "model": self.reuse["model"], "cost": NO_COST, "trajval_ops_version": __version__}
        provenance = f"{self.output_key}_provenance"
        out = {self.output_key: rates.tolist(), f"{self.output_key}_n": counts.tolist(),
               f"{self.output_key}_status": [STATUS_REUSED] * len(rows), provenance: [record] * len(rows)}
        if not measuring:
            return out
        missing = missing_rows(rows, self.reuse["key"])
        # not contiguous in the pool: named by their ids (as a sampled pass's rows are)
        measured = self._measure([rows[i] for i in missing], None) if missing else {}
        self._prepare()
        # a read row names the engine and dtype the pass is set to (null where others name theirs would change the
        # column's type between batches)
        not_run = self._provenance_of(engine=self.engine.engine, dtype=self.engine.dtype, fallback_hits=0,
                                      cost=NO_COST)
        out[provenance] = [{**record, "reuse_missing": "measure", "measured_by": _pass_of(not_run)}] * len(rows)
        for j, i in enumerate(missing):
            for name in (self.output_key, f"{self.output_key}_n", f"{self.output_key}_status"):
                out[name][i] = measured[name][j]
            own = measured[provenance][j]
            out[provenance][i] = {**record, "source": "measured", "cost": own["cost"], "reuse_missing": "measure",
                                  "measured_by": _pass_of(own)}
        return out

    def _read_reused(self, rows: list[dict], first_row: int | None = 0, skip_missing: bool = False):
        """The reused pass rates of ``rows`` and the n behind each (checked, named by row)."""
        from trajval_ops.rollout.reused_pass import reused_pass_rates

        return reused_pass_rates(rows, self.reuse["key"], n=self.reuse["n"], n_key=self.reuse["n_key"],
                                 form=self.reuse["form"], id_key=self.id_key, first_row=first_row, what=self.what,
                                 skip_missing=skip_missing)

    def _check_rows(self, table) -> dict | None:
        """The reused values and their n read over the whole pool (checked, named by row) and logged."""
        from trajval_ops.pools.io import table_rows

        measuring = self.reuse["missing"] == "measure"
        rates, counts = self._read_reused(table_rows(table), skip_missing=measuring)
        read = counts > 0
        source = f"{self.reuse['model']}, " if self.reuse["model"] else ""
        spread = (f"n = {int(counts[read].min())}" if not read.any() or counts[read].min() == counts[read].max()
                  else f"n {int(counts[read].min())} to {int(counts[read].max())}")
        logger.info(f"{self.what} [{self.output_key}]: reusing the pool's field '{self.reuse['key']}' "
                    f"({source}{self.reuse['form']}; {int(read.sum())} of {table.num_rows} rows, {spread}, mean "
                    f"pass rate {rates[read].mean() if read.any() else float('nan'):.3f}); "
                    + (f"the {int((~read).sum())} rows lacking it are measured: model={self.model}, "
                       f"n={self.decoding.n}, T={self.decoding.temperature}" if measuring and not read.all()
                       else "nothing is sampled"))
        return None

    def warn_repeats_across_workers(self, table, workers: str) -> None:
        if self.reuse["missing"] == "measure":  # else nothing is rolled out
            super().warn_repeats_across_workers(table, workers)

    def _rolled_out(self, row: dict) -> bool:
        from trajval_ops.rows import get_path

        return get_path(row, self.reuse["key"], None) is None  # a row with the value is read, not rolled out


class SampledAdaptivePass(SampledPass, AdaptivePass):
    """A sampled pass whose rows are rolled out in rounds (an adaptive budget)."""


class ReusedAdaptivePass(ReusedPass, AdaptivePass):
    """A reused pass whose rows lacking the field are rolled out in rounds (an adaptive budget)."""


#: the class of each mode with an adaptive budget
_IN_ROUNDS = {MeasuredPass: AdaptivePass, SampledPass: SampledAdaptivePass, ReusedPass: ReusedAdaptivePass}


def build_pass(model: str, window: str | None, window_index: int | None, output_key: str | None,
               groups: dict[type, Any], id_key: str | None = None, drawn_sample: dict | None = None,
               what: str = "endpoint pass") -> EndpointPass:
    """The pass its settings describe: a reused pass where ``reuse_key`` (or a preset) names a
    field, a sampled pass where ``sample_fraction`` is below 1, else a measured pass; each rolled
    out in rounds where ``budget`` is adaptive.

    :param window: ``early``, ``late`` or None (the output field is then derived from it).
    :param groups: the settings groups (:func:`~trajval_ops.rollout.pass_settings.group_settings`).
    :param drawn_sample: a sample drawn from the whole pool elsewhere (the Ray driver's).
    :raises ValueError: naming ``what``, for settings that cannot work together.
    """
    if window not in (None, *fields.WINDOWS):
        raise ValueError(f"{what}: window must be one of {fields.WINDOWS} or null, got {window!r}")
    try:
        output_key = fields.endpoint_output_key(window, window_index, output_key)
        reuse = groups[ReuseSettings].settings()
        budget = adaptive_budget(groups[BudgetSettings], window, window_index, groups[DecodingConfig])
        sample = groups[SampleSettings].drawn()
        if sample is not None and reuse is not None:
            raise ValueError("a reused pass reads its column on every row (with reuse_missing: measure, it samples "
                             "the rows that lack it, each in full): it draws no sample; drop sample_fraction")
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if reuse is not None:
        mode, own = ReusedPass, {"reuse": reuse}
    elif sample is not None:
        mode, own = SampledPass, {"sample": sample, "drawn_sample": drawn_sample}
    else:
        mode, own = MeasuredPass, {}
    if budget is not None:
        mode, own = _IN_ROUNDS[mode], {**own, "budget": budget}
    return mode(model, output_key, groups, id_key=id_key, what=what, **own)
