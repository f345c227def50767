"""``results.json`` and ``index.html`` of a validation run, computed from its units' files.

Statistics: Spearman and Cohen's kappa from :mod:`trajval_ops.analysis.agreement`, profiles
from :mod:`trajval_ops.analysis.trajectories`, Best Acc / AUC / S2B from
:mod:`trajval_ops.analysis.curves`; 95% intervals are percentile bootstraps over seeds
(:func:`bootstrap_ci`).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from trajval_ops import core, fields
from trajval_ops.analysis import agreement, curves
from trajval_ops.analysis.html_table import html_table
from trajval_ops.analysis.trajectories import trajectory_profiles
from trajval_ops.experiment.validation_config import (ARMS, BASELINE_ARM, MODE_SUFFIX, ValidationConfig,
                                                     evaluation_count, protocol_hash)
from trajval_ops.experiment.priors import epoch_pass_key, registry_scores
from trajval_ops.pools.io import read_rows
from trajval_ops.priors import PRIORS, arm_priors

BOOTSTRAP_SAMPLES = 2000
#: Said in a verdict whose interval is NaN.
NO_INTERVAL = "no 95% interval (fewer than 2 training seeds, or a resample where the difference is undefined)"
#: Keys results.json always has (tests/test_validate.py checks the full schema).
RESULT_KEYS = ("reproducibility", "probe_vs_oracle", "baselines", "training", "headroom", "cost", "protocol")


def bootstrap_ci(samples: Sequence[np.ndarray], statistic: Callable[..., float | None], seed: int = 0,
                 n_boot: int = BOOTSTRAP_SAMPLES, undefined: float = math.nan) -> list[float]:
    """Percentile 95% interval of ``statistic(*resampled)``: each array in ``samples`` (seeds
    along axis 0) is resampled with replacement independently.

    :param undefined: what a resample counts as where the statistic is None or NaN: ``math.inf``
        for a target never reached (steps or runs to it), ``-math.inf`` for a saving never made.
        Every resample counts: left out, such resamples would give an interval of the resamples
        that happened to reach the target. With the default (NaN), any such resample makes the
        interval NaN; a bound that falls on or next to an infinite value is that infinity.
        A sample of fewer than two seeds gives no interval (NaN): every resample would repeat it,
        an interval of zero width.
    """
    if any(len(s) < 2 for s in samples):
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    values = np.empty(n_boot)
    for b in range(n_boot):
        drawn = [s[rng.integers(0, len(s), len(s))] for s in samples]
        value = statistic(*drawn)
        values[b] = undefined if value is None or math.isnan(value) else value
    if np.isnan(values).any():
        return [float("nan"), float("nan")]
    return [_percentile_with_infinities(values, 2.5), _percentile_with_infinities(values, 97.5)]


def _percentile_with_infinities(values: np.ndarray, q: float) -> float:
    """numpy's linear percentile, except that a bound between a finite value and an infinite one
    is the infinite one (numpy's interpolation gives NaN or a finite value there)."""
    ordered = np.sort(values)
    position = q / 100 * (len(ordered) - 1)
    low, high = ordered[int(math.floor(position))], ordered[int(math.ceil(position))]
    for bound in (low, high):
        if math.isinf(bound):
            return float(bound)
    return float(np.percentile(values, q))


def oracle_figures(out: Path, context: str, window: int) -> dict | None:
    """An oracle context's per-task figures from its dense trajectories (None before it ran)."""
    path = out / "oracle" / context / "trajectories.jsonl"
    if not path.is_file():
        return None
    from trajval_ops.experiment.trajectory_callback import read_trajectories  # imports transformers

    ids, steps, acc = read_trajectories(path)
    profiles = trajectory_profiles(acc, window=window, x=steps)
    return {"ids": ids, "steps": steps, "acc": acc, "r_early": profiles["r_early"], "r_late": profiles["r_late"],
            "delta": profiles["delta"], "profile": profiles["profile"],
            "score": core.learnability_score(profiles["r_early"], profiles["r_late"])}


def _index(ids: Sequence) -> dict:
    return {task: i for i, task in enumerate(ids)}


def reproducibility(oracle_a: dict, oracle_b: dict | None, shared: Sequence) -> dict:
    if oracle_b is None or not shared:
        return {"skipped": "no second context"}
    ia, ib = _index(oracle_a["ids"]), _index(oracle_b["ids"])
    a = np.array([ia[t] for t in shared])
    b = np.array([ib[t] for t in shared])
    agree = agreement.profile_agreement(oracle_a["profile"][a], oracle_b["profile"][b])
    # each run's gain against its own base measurement (independent sampling seeds) ...
    independent = agreement.spearman(oracle_a["delta"][a], oracle_b["delta"][b])
    # ... and against one shared base: the common base term correlates the gains by construction
    shared_base = agreement.spearman(oracle_a["delta"][a], oracle_b["r_late"][b] - oracle_a["r_early"][a])
    return {"n_shared": len(shared), "kappa_six": agree["kappa_six_way"], "kappa_binary": agree["kappa_binary"],
            "spearman_gain": shared_base, "spearman_gain_independent_base": independent,
            "confusion_six_way": agree["confusion_six_way"].tolist(), "categories": agree["categories_six_way"]}


def probe_vs_oracle(probe_rows: list[dict], oracle: dict, stability_epochs: Sequence[int],
                    config: ValidationConfig | None = None) -> tuple[dict, dict, dict]:
    """(probe_vs_oracle, baselines, per-task arrays for figures). ``baselines``: per registered
    prior, the Spearman of its score from the probe unit's passes against oracle A's per-task gain
    (``<prior>_r_early`` for a one-pass prior, ``<prior>_score`` for the others; with the config's
    settings of it), then that of ``-r_early``."""
    index = _index(oracle["ids"])
    rows = [row for row in probe_rows if row["id"] in index]
    at = np.array([index[row["id"]] for row in rows])
    r_early = np.array([row[fields.R_EARLY] for row in rows])
    r_late = np.array([row[fields.R_LATE] for row in rows])
    score = np.array([row[fields.SCORE] for row in rows])
    profile = np.array([row[fields.PROFILE] for row in rows], dtype=object)
    gain = oracle["delta"][at]
    agree = agreement.profile_agreement(profile, oracle["profile"][at])
    in_probe = np.array([bool(row.get(fields.IN_PROBE)) for row in rows])
    result = {
        "n_tasks": len(rows), "n_probe_tasks": int(in_probe.sum()),
        "spearman_r_early": agreement.spearman(r_early, oracle["r_early"][at]),
        "spearman_r_late": agreement.spearman(r_late, oracle["r_late"][at]),
        "spearman_score": agreement.spearman(score, oracle["score"][at]),
        "spearman_score_vs_gain": agreement.spearman(score, gain),
        # None for a probe on the whole pool (no task outside P)
        "spearman_score_vs_gain_outside_probe": agreement.spearman(score[~in_probe], gain[~in_probe])
        if (~in_probe).sum() >= 2 else None,
        "kappa_six": agree["kappa_six_way"], "kappa_binary": agree["kappa_binary"],
        "probe_epoch_stability": None,
    }
    if stability_epochs:
        late_by_epoch = np.stack([[row[epoch_pass_key(e)] for row in rows] for e in stability_epochs]
                                 + [r_late], axis=1)
        rho = agreement.probe_epoch_stability(r_early, late_by_epoch)
        result["probe_epoch_stability"] = {"epochs": [*stability_epochs, "last"], "spearman_vs_final": rho.tolist()}
    baselines = {line: agreement.spearman(values, gain) for line, values in
                 registry_scores(rows, stability_epochs, config).items()}
    baselines["r_early_only"] = agreement.spearman(-r_early, gain)
    arrays = {"score": score, "gain": gain, "r_early": r_early, "oracle_r_early": oracle["r_early"][at]}
    return result, baselines, arrays


def _run_records(config: ValidationConfig, out: Path, name: str) -> tuple[np.ndarray, list, list[dict]]:
    """One trained arm's held-out curves (seeds x evaluations), evaluation steps and per-seed
    ``result.json`` records."""
    from trajval_ops.experiment.trajectory_callback import read_trajectories

    per_seed, records, steps = [], [], None
    for seed in config.training_seeds():
        folder = out / "arms" / name / f"seed-{seed}"
        _, steps, acc = read_trajectories(folder / "heldout.jsonl")
        per_seed.append(acc.mean(axis=0))
        records.append(json.loads((folder / "result.json").read_text()))
    return np.stack(per_seed), steps, records


def cumulative_completions(records: list[dict], steps, batch_completions: int) -> np.ndarray:
    """Completions generated up to each evaluation step, averaged over seeds (a run recorded
    before per-step completions were: the batch per step)."""
    return mean_cumulative_completions(
        [record.get("completions_per_step") or [batch_completions] * int(record["steps"]) for record in records], steps)


def mean_cumulative_completions(per_step_by_seed: Sequence[Sequence[float]], steps) -> np.ndarray:
    """Per seed, the completions its training steps 1, 2, ... generated (``per_step[i]`` at step
    ``i + 1``) summed up to each evaluation step; the mean over seeds at each step."""
    per_seed = []
    for per_step in per_step_by_seed:
        cumulative = np.concatenate(([0], np.cumsum(per_step)))
        per_seed.append([cumulative[min(int(step), len(per_step))] for step in steps])
    return np.mean(np.asarray(per_seed, dtype=np.float64), axis=0)


def auc_at_equal_completions(arm_curves: np.ndarray, base_curves: np.ndarray, x, base_x) -> tuple:
    """An arm's AUC minus its baseline's, both read at the baseline's evaluation spends (``base_x``,
    cumulative completions) that the arm also reached (``x``), with its interval over seeds and
    the last such spend; (None, None, None) where they share none or a run gives no completions."""
    if x is None or base_x is None:
        return None, None, None
    budgets = base_x[(base_x >= x[0]) & (base_x <= x[-1])]
    if not budgets.size:
        return None, None, None

    def difference(c, b):
        return curves.auc_at_budgets(c, x, budgets) - curves.auc_at_budgets(b, base_x, budgets)

    pair = [arm_curves, base_curves]
    return difference(*pair), bootstrap_ci(pair, difference), float(budgets[-1])


def arm_training_figures(arm_curves: np.ndarray, base_curves: np.ndarray, steps, x=None, base_x=None,
                         baseline: str = "uniform") -> dict:
    """One arm's Best Acc, AUC and S2B against its baseline, with bootstrap intervals over seeds:
    the core of ``results.json``'s ``training`` rows (``trajval validate`` and ``trajval verdict``).

    :param arm_curves, base_curves: held-out accuracy, seeds x evaluations, at ``steps`` (shared).
    :param x, base_x: each run's cumulative completions at ``steps`` (mean over seeds), or None
        where the runs do not give them (no AUC at equal completions then).
    :param baseline: the name the keys give the baseline (``auc_minus_<baseline>``).
    """
    def s2b(method, base):
        return curves.steps_to_baseline(method, base, steps)["s2b"]  # inf: never reaches the baseline's Best Acc

    return {
        "best_acc": curves.best_acc(arm_curves), "auc": curves.auc(arm_curves),
        "best_acc_ci95": bootstrap_ci([arm_curves], lambda c: curves.best_acc(c)),
        "auc_ci95": bootstrap_ci([arm_curves], lambda c: curves.auc(c)),
        "s2b": curves.steps_to_baseline(arm_curves, base_curves, steps)["s2b"],
        "s2b_ci95": bootstrap_ci([arm_curves, base_curves], s2b),
        f"auc_minus_{baseline}": curves.auc(arm_curves) - curves.auc(base_curves),
        f"auc_minus_{baseline}_ci95": bootstrap_ci([arm_curves, base_curves],
                                                   lambda c, b: curves.auc(c) - curves.auc(b)),
        # the same against completions (they differ from steps under dynamic sampling)
        **dict(zip((f"auc_completions_minus_{baseline}", f"auc_completions_minus_{baseline}_ci95",
                    "auc_completions_budget"), auc_at_equal_completions(arm_curves, base_curves, x, base_x))),
    }


def per_seed_figures(arm_curves: np.ndarray) -> dict:
    return {"per_seed_auc": [curves.auc(c) for c in arm_curves],
            "per_seed_best_acc": [curves.best_acc(c) for c in arm_curves]}


def training(config: ValidationConfig, out: Path) -> tuple[dict, dict]:
    """Per trained arm (and sampling mode): Best Acc, AUC and S2B against the uniform arm of the
    same mode, with bootstrap intervals over seeds, and what its runs generated."""
    batch = config.grpo.prompts_per_batch * config.grpo.num_generations
    curves_by_run, completions_by_run, records_by_run, steps = {}, {}, {}, None
    for name, _, _ in config.training_runs():
        curves_by_run[name], steps, records_by_run[name] = _run_records(config, out, name)
        completions_by_run[name] = cumulative_completions(records_by_run[name], steps, batch)

    table = {}
    for name, arm, mode in config.training_runs():
        base_name = baseline_of(mode)
        arm_curves, records = curves_by_run[name], records_by_run[name]
        figures = arm_training_figures(arm_curves, curves_by_run[base_name], steps, completions_by_run[name],
                                       completions_by_run[base_name])
        across_modes = {}
        if mode != "standard" and BASELINE_ARM in curves_by_run:  # does the sampling mode itself pay?
            across_modes = dict(zip(("auc_completions_minus_standard_uniform",
                                     "auc_completions_minus_standard_uniform_ci95",
                                     "auc_completions_standard_uniform_budget"),
                                    auc_at_equal_completions(arm_curves, curves_by_run[BASELINE_ARM],
                                                             completions_by_run[name], completions_by_run[BASELINE_ARM])))
        shares = [v for r in records for v in r.get("zero_variance_share") or [] if v is not None]
        table[name] = {
            "arm": arm, "sampling": mode, **figures, **across_modes,
            "seeds": config.training_seeds(), **per_seed_figures(arm_curves),
            "completions": float(completions_by_run[name][-1]),
            "zero_variance_share": float(np.mean(shares)) if shares else None,
            "wall_time_s": float(np.mean([r.get("wall_time_s", float("nan")) for r in records])),
        }
    return table, {"steps": steps, "curves": curves_by_run, "completions": completions_by_run}


def probe_manifest_path(out: Path) -> Path:
    """The probe unit's manifest in a run folder (the probe recipe's output, protocol.probe_recipe)."""
    return out / "probe" / "probe_run" / "manifest.json"


def prior_costs(config: ValidationConfig, out: Path) -> dict:
    """What each arm is charged (:func:`arm_charge`) from the costs recorded by the probe unit's
    run (its endpoint passes' provenance and the probe manifest) and oracle A's run: for a
    registered prior the passes it reads (probe and both passes for TrajVal, and for BOTS, whose
    reference models are those two passes; the early pass alone for the one-pass priors; the
    checkpoints' passes too for a prior that reads the whole trajectory); the short pass for the
    priors read from it; oracle A's run for those that read it; nothing for uniform, GRESO and
    another model's pass."""
    from itertools import compress

    from trajval_ops.prior_cost import recorded_cost
    from trajval_ops.experiment.priors import (
        ADAPTIVE_LATE, ORACLE_READERS, OTHER_MODEL_PRIORS, SAMPLED_SHORT, SHORT_PASS_PRIORS, TRAJVAL_COMPOSITES,
        sampled_rows,
    )
    from trajval_ops.rows import get_path

    rows = list(read_rows(out / "probe" / "weighted.jsonl"))
    k = config.probe.window_k
    early = [fields.R_EARLY] if k == 1 else fields.window_keys("early", k)
    late = [fields.R_LATE] if k == 1 else fields.window_keys("late", k)

    def column(name):
        return [get_path(row, name, None) for row in rows]

    def probe_manifest(named: str) -> Path:  # the rows name it where the probe ran: the run may have moved since
        return probe_manifest_path(out)

    def stages(cost: dict, renamed: dict[str, str] | None = None) -> dict[str, int]:
        """{stage: completions}; a stage that is another pass than the probe unit's own early or
        late pass is renamed, so that reading two priors charges a shared stage once."""
        return {(renamed or {}).get(stage, stage): part["completions"] for stage, part in cost["stages"].items()}

    full = recorded_cost(column, early, late, locate_manifest=probe_manifest)
    if "probe" in full["stages"]:  # named within the run, wherever it sits
        full["stages"]["probe"]["manifests"] = [str(Path(p).relative_to(out)) for p in full["stages"]["probe"]["manifests"]]
    passes = stages(full)
    reads = {prior: passes for prior in TRAJVAL_COMPOSITES}  # prior -> the stages its column is computed from
    checkpoints = [epoch_pass_key(e) for e in sorted(config.probe.stability_epochs)]
    for arm, (name, _) in arm_priors().items():
        cls = PRIORS[name]
        reads[arm] = (stages(recorded_cost(column, early, None)) if cls.passes == ("early",) else
                      stages(recorded_cost(column, early, late, checkpoints, locate_manifest=probe_manifest))
                      if cls.reads_checkpoints and checkpoints else passes)
    reads.update({kind: stages(recorded_cost(column, [SAMPLED_SHORT], None), {"early": "short"})
                  for kind in SHORT_PASS_PRIORS if kind in config.training.arms})
    if config.probe.adaptive_late:
        adaptive = recorded_cost(column, early, [ADAPTIVE_LATE], locate_manifest=probe_manifest)
        reads["trajval_adaptive"] = stages(adaptive, {"late": "adaptive_late"})
    if "trajval_sampled" in config.training.arms:  # the probe, the sample's passes, the short pass
        measured = sampled_rows(rows, config.group_key)
        sample = recorded_cost(lambda name: list(compress(column(name), measured)), early, late,
                               locate_manifest=probe_manifest)
        reads["trajval_sampled"] = (stages(sample, {"early": "sampled_early", "late": "sampled_late"})
                                    | stages(recorded_cost(column, [SAMPLED_SHORT], None), {"early": "sampled_short"}))
    # another model's pass stands in for a column a public pool ships: it costs its user nothing
    reads.update({kind: {} for kind in OTHER_MODEL_PRIORS})
    # a ceiling's knowledge comes from oracle A's full-pool run: its training and its evaluations
    oracle = config.oracle
    oracle_cost = (sum(_oracle_step_completions(out, config))
                   + evaluation_count(oracle.steps, oracle.every_steps) * oracle.n * len(rows))
    reads.update({kind: {"oracle": oracle_cost} for kind in ORACLE_READERS})
    return {"stages": full["stages"], "by_arm": {arm: arm_charge(arm, reads, passes) for arm in config.training.arms}}


def arm_charge(arm: str, reads: dict[str, dict[str, int]], passes: dict[str, int]) -> int:
    """The completions an arm is charged: the rollouts behind every training-pool column its spec
    reads (:func:`.priors.arm_columns`: its prior's weight, BOTS's reference passes), each stage
    once (BOTS+TrajVal reads the probe's two passes twice and pays for them once).

    :param reads: prior -> {stage: completions} its weight column was computed from.
    :param passes: the probe unit's probe and two endpoint passes, {stage: completions}.
    """
    from trajval_ops.experiment.priors import BOTS_REFERENCE_COLUMNS, PRIOR_COLUMNS, arm_columns

    by_column = {PRIOR_COLUMNS[prior]: read for prior, read in reads.items()}
    by_column.update({name: passes for name in BOTS_REFERENCE_COLUMNS})
    weight, references = arm_columns(arm)
    charged: dict[str, int] = {}
    for name in filter(None, (weight, *references)):
        charged |= by_column[name]
    return sum(charged.values())


def _oracle_step_completions(out: Path, config: ValidationConfig) -> list[int]:
    """Completions per training step of oracle A's run (its record, else the fixed batch)."""
    result = out / "oracle" / "context-a" / "result.json"
    batch = config.grpo.prompts_per_batch * config.grpo.num_generations
    record = json.loads(result.read_text()) if result.is_file() else {}
    return record.get("completions_per_step") or [batch] * config.oracle.steps


def break_even(arm_curves: np.ndarray, base_curves: np.ndarray, arm_completions, base_completions,
               prior: int) -> dict:
    """Completions an arm needs to reach uniform's Best Acc, its prior charged, against uniform's.

    :param arm_completions, base_completions: completions generated up to each evaluation (the
        curves' x axis in the main run's currency; with dynamic sampling they differ by arm).
    :param prior: the completions the arm's prior cost.
    :return: ``completions_to_uniform_best`` (prior included), ``net_saved`` (uniform's
        completions to its Best Acc minus the arm's, prior included), ``s2b_completions`` (the
        arm's training completions to that accuracy in percent of uniform's) and
        ``break_even_runs`` (the runs reusing the prior over which the completions it saves pay
        its cost back; 0.0 for a prior that costs nothing and saves nothing, uniform against
        itself; None when it saves none otherwise, also where it reaches uniform's Best Acc later
        than uniform, whatever its prior cost). All None when the arm never reaches it.
    """
    target = curves.best_acc(base_curves)
    reach_base = curves.first_step_reaching(base_curves, target)  # evaluation index, from 1
    reach_arm = curves.first_step_reaching(arm_curves, target)
    if reach_arm is None or reach_base is None:
        return {"completions_to_uniform_best": None, "net_saved": None, "s2b_completions": None,
                "break_even_runs": None}
    spent, spent_base = float(arm_completions[int(reach_arm) - 1]), float(base_completions[int(reach_base) - 1])
    saved_in_training = spent_base - spent
    return {"completions_to_uniform_best": spent + prior, "net_saved": saved_in_training - prior,
            "s2b_completions": 100.0 * spent / spent_base if spent_base else None,
            "break_even_runs": _break_even_runs(prior, saved_in_training)}


def _break_even_runs(prior: float, saved: float) -> float | None:
    """Runs reusing a prior before the training completions it saves per run pay its cost back:
    None (never) where it saves none, unless it also costs none (0.0, nothing to pay back). A
    free prior that costs completions in training never breaks even: it was read as 0 runs."""
    if saved > 0:
        return prior / saved
    return 0.0 if prior == 0 and saved == 0 else None


def arm_cost_figures(arm_curves: np.ndarray, base_curves: np.ndarray, x, base_x, prior: int) -> dict:
    """An arm's ``cost`` row: its prior's completions and :func:`break_even`'s figures, with
    bootstrap intervals over seeds (``trajval validate`` and ``trajval verdict``)."""
    def statistic(key):
        return lambda c, b: break_even(c, b, x, base_x, prior)[key]

    return {"prior_completions": prior, **break_even(arm_curves, base_curves, x, base_x, prior),
            # a resample that never reaches uniform's Best Acc saves nothing and never breaks even
            "net_saved_ci95": bootstrap_ci([arm_curves, base_curves], statistic("net_saved"), undefined=-math.inf),
            "s2b_completions_ci95": bootstrap_ci([arm_curves, base_curves], statistic("s2b_completions"),
                                                 undefined=math.inf),
            "break_even_runs_ci95": bootstrap_ci([arm_curves, base_curves], statistic("break_even_runs"),
                                                 undefined=math.inf)}


def accounting(config: ValidationConfig, out: Path, curve_data: dict) -> dict:
    """Per trained arm, with bootstrap intervals over seeds: completions to reach uniform's Best
    Acc (same sampling mode) with the prior charged, the net saving and the runs to break even."""
    costs = prior_costs(config, out)
    table = {}
    for name, arm, mode in config.training_runs():
        base_name = baseline_of(mode)
        table[name] = arm_cost_figures(curve_data["curves"][name], curve_data["curves"][base_name],
                                       curve_data["completions"][name], curve_data["completions"][base_name],
                                       costs["by_arm"][arm])
    # one main run, the unit of the "main runs" figures: plain uniform's, whatever order training.sampling
    # lists the modes in (uniform+dynamic's only where no standard arm trained)
    sampling = config.training.sampling
    uniform_run = curve_data["completions"][BASELINE_ARM + MODE_SUFFIX["standard" if "standard" in sampling
                                                                       else sampling[0]]][-1]
    return {"main_run_completions": float(uniform_run), "prior_stages": costs["stages"], "arms": table}


def headroom(train: dict) -> dict | None:
    """Whether any static prior could beat uniform per step in this regime, from the ceiling arms
    (standard sampling): yes where any ceiling's AUC-minus-uniform interval lies above 0. It names
    one ceiling, with its AUC minus uniform and interval, and a plain verdict: among the ceilings
    whose interval lies above 0 the best point estimate, else the best point estimate of all
    (None without ceiling arms)."""
    from trajval_ops.experiment.priors import CEILING_PRIORS

    ceilings = [name for name, row in train.items() if ARMS[row["arm"]][0] in CEILING_PRIORS
                and row["sampling"] == "standard"]
    if not ceilings:
        return None

    def point(arm):
        return train[arm]["auc_minus_uniform"]

    best = max(ceilings, key=point)
    above = [arm for arm in ceilings if _bounds(train[arm]["auc_minus_uniform_ci95"])[0] > 0]
    knowledge = "a full run's knowledge of each task's learnability"
    if above:
        named = max(above, key=point)
        which = (f"the best ceiling ({named}, {knowledge})" if named == best else
                 f"a ceiling ({named}, {knowledge}; the best point estimate, {best}'s, has an interval "
                 f"that does not lie above 0)")
        verdict = f"a learnability prior can beat uniform per step in this regime: {which} lies above uniform"
    elif math.isnan(_bounds(train[best]["auc_minus_uniform_ci95"])[0]):
        named = best
        verdict = f"not judged: the best ceiling ({best}, {knowledge}) has {NO_INTERVAL}"
    else:
        named = best
        verdict = (f"no learnability prior beats uniform per step in this regime: even the best ceiling ({best}, "
                   f"{knowledge}) has an AUC difference whose interval does not lie above 0 (priors of another "
                   f"kind are judged by their own verdicts)")
    return {"arm": named, "auc_minus_uniform": point(named),
            "auc_minus_uniform_ci95": list(train[named]["auc_minus_uniform_ci95"]), "verdict": verdict}


def verdicts(results: dict) -> dict[str, str]:
    """A plain verdict per claim, from the intervals (no tuning, no judgement calls)."""
    out = {}
    rep = results["reproducibility"]
    if "kappa_binary" in rep:
        out["profiles_reproducible"] = (
            f"binary kappa {rep['kappa_binary']:.2f}, gain Spearman {rep['spearman_gain_independent_base']:.2f} "
            f"(independent bases)")
    pvo = results["probe_vs_oracle"]
    out["probe_ranks_learnability"] = f"Spearman(score, oracle gain) = {pvo['spearman_score_vs_gain']:.2f}"
    train = results["training"]
    for arm, row in train.items():
        if row["arm"] == BASELINE_ARM:
            continue
        out[f"{arm}_vs_uniform_auc"] = auc_verdict(row["auc_minus_uniform"], row["auc_minus_uniform_ci95"],
                                                   baseline_of(row.get("sampling", "standard")))
    if results.get("headroom"):
        out["headroom"] = results["headroom"]["verdict"]
    for arm, row in results.get("cost", {}).get("arms", {}).items():
        if train[arm]["arm"] != BASELINE_ARM:
            out[f"{arm}_pays_for_itself"] = cost_verdict(row, results["cost"]["main_run_completions"],
                                                          baseline_of(train[arm].get("sampling", "standard")))
    return out


def auc_verdict(difference: float, interval, baseline: str) -> str:
    """An arm's AUC against its baseline's, in words, from the difference's 95% interval."""
    lo, hi = _bounds(interval)
    if math.isnan(lo) or math.isnan(hi):
        word = f"not judged against {baseline}: {NO_INTERVAL}"
    elif lo > 0:
        word = f"better than {baseline}"
    elif hi < 0:
        word = f"worse than {baseline}"
    else:
        word = f"not distinguishable from {baseline}"
    return f"{word} (AUC difference {difference:+.4f}, 95% CI [{lo:+.4f}, {hi:+.4f}])"


def _bounds(interval) -> tuple[float, float]:
    """An interval's bounds as numbers: results.json writes a NaN bound as null."""
    return tuple(math.nan if bound is None else float(bound) for bound in interval)


def baseline_of(mode: str) -> str:
    """The run an arm trained in sampling ``mode`` is measured against: uniform of that mode
    (``uniform+dynamic`` for a dynamic-sampling arm)."""
    return BASELINE_ARM + MODE_SUFFIX[mode]


def cost_verdict(row: dict, main_run: int, baseline: str = BASELINE_ARM) -> str:
    """Whether a prior's cost is paid back, in words, from its accounting row (measured against
    ``baseline``, uniform of the arm's sampling mode)."""
    # as precise as the figures beside the verdict (12.5 runs, not "12")
    share = row["prior_completions"] / main_run
    prior = f"its prior cost {row['prior_completions']:,} completions ({share:.3g} main runs)"
    if row["net_saved"] is None:
        return f"never reaches {baseline}'s Best Acc in this run; {prior}"
    lo, hi = _bounds(row["net_saved_ci95"])
    if math.isnan(lo) or math.isnan(hi):
        word = f"not judged: {NO_INTERVAL}"
    elif lo > 0:
        word = "pays for itself in one run"
    elif hi < 0:
        word = "does not pay for itself in one run"
    else:
        word = "not distinguishable from paying for itself in one run"
    return (f"{word}: net {row['net_saved']:+,.0f} completions to reach {baseline}'s Best Acc (95% CI "
            f"[{lo:+,.0f}, {hi:+,.0f}]), {prior}; breaks even {_break_even_words(row)}")


def _break_even_words(row: dict) -> str:
    """When a prior breaks even, with its interval; an interval that reaches "never" (a resample
    that saves nothing) says so."""
    runs = row["break_even_runs"]
    if runs is None:
        return "never (it saves no training steps)"
    lo, hi = _bounds(row.get("break_even_runs_ci95") or [math.nan, math.nan])
    if math.isnan(lo) or math.isnan(hi):
        return f"after {runs:.3g} runs reusing it (no 95% interval)"

    def words(bound: float) -> str:
        return "never" if math.isinf(bound) else f"{bound:.3g}"

    never = ": it may never break even" if math.isinf(hi) else ""
    return f"after {runs:.3g} runs reusing it (95% CI [{words(lo)}, {words(hi)}]{never})"


def compute_results(config: ValidationConfig, out: Path, wall_time_s: float = float("nan")) -> dict:
    window = config.oracle.window
    oracle_a = oracle_figures(out, "context-a", window)
    oracle_b = oracle_figures(out, "context-b", window)
    shared = json.loads((out / "data" / "shared_ids.json").read_text())
    probe_rows = list(read_rows(out / "probe" / "weighted.jsonl"))
    pvo, baselines, _ = probe_vs_oracle(probe_rows, oracle_a, sorted(config.probe.stability_epochs), config)
    train, curve_data = training(config, out)
    results = {
        "reproducibility": reproducibility(oracle_a, oracle_b, shared),
        "probe_vs_oracle": pvo,
        "baselines": baselines,
        "training": train,
        "headroom": headroom(train),
        "cost": accounting(config, out, curve_data),
        "protocol": {
            "config": config.to_dict(), "config_hash": protocol_hash(config),
            "data": json.loads((out / "data" / "data.json").read_text()),
            "arms": {arm: {"prior": ARMS[arm][0], "online": ARMS[arm][1]} for arm in config.training.arms},
            "wall_time_s": round(wall_time_s, 1), "versions": _versions(),
            "units": unit_records(out),
        },
    }
    if config.probe.other_model:
        results["other_model"] = other_model_figures(config, out, probe_rows, train, curve_data, oracle_a)
    results["verdicts"] = verdicts(results)
    return results


def other_model_figures(config: ValidationConfig, out: Path, probe_rows: list[dict], train: dict, curve_data: dict,
                        oracle_a: dict | None) -> dict:
    """How much a one-pass prior loses when its pass comes from another model than the one
    trained (``probe.other_model``): the two passes' rank agreement over the pool (pass rates and
    each prior's weights), each pass's prior against oracle A's per-task gain, and, per prior and
    sampling mode trained, both arms' AUC - uniform and their difference (other - own), with
    bootstrap intervals over seeds (each arm's seeds resampled on their own, not in seed pairs:
    conservative where the arms of a seed correlate)."""
    from trajval_ops.experiment.priors import OTHER_MODEL_PASS, OTHER_MODEL_PRIORS, PRIOR_COLUMNS

    pool = list(read_rows(out / "priors" / "train_pool.jsonl"))
    own = np.array([row[fields.R_EARLY] for row in probe_rows], dtype=np.float64)
    other = np.array([row[OTHER_MODEL_PASS] for row in probe_rows], dtype=np.float64)
    figures: dict[str, Any] = {
        "model": config.probe.other_model, "trained_model": config.model, "n": config.probe.n,
        "mean_pass_rate": {"own": float(own.mean()), "other_model": float(other.mean())},
        "spearman_pass_rates": agreement.spearman(own, other), "priors": {}}
    gain = None
    if oracle_a is not None:
        at = _index(oracle_a["ids"])
        keep = [i for i, row in enumerate(probe_rows) if row["id"] in at]
        gain = oracle_a["delta"][[at[probe_rows[i]["id"]] for i in keep]]
    for arm, prior in OTHER_MODEL_PRIORS.items():
        entry: dict[str, Any] = {}
        if PRIOR_COLUMNS[arm] in pool[0] and PRIOR_COLUMNS[prior] in pool[0]:
            entry["spearman_weights"] = agreement.spearman([row[PRIOR_COLUMNS[prior]] for row in pool],
                                                           [row[PRIOR_COLUMNS[arm]] for row in pool])
        if gain is not None:
            score = getattr(core, f"{prior}_score")
            entry["spearman_vs_oracle_gain"] = {"own": agreement.spearman(score(own[keep]), gain),
                                                "other_model": agreement.spearman(score(other[keep]), gain)}
        for mode in config.training.sampling:
            mine, theirs = prior + MODE_SUFFIX[mode], arm + MODE_SUFFIX[mode]
            if theirs not in train:
                continue
            row = {"other_model_auc_minus_uniform": train[theirs]["auc_minus_uniform"],
                   "other_model_auc_minus_uniform_ci95": train[theirs]["auc_minus_uniform_ci95"]}
            if mine in train:
                a, b = curve_data["curves"][theirs], curve_data["curves"][mine]
                row |= {"own_auc_minus_uniform": train[mine]["auc_minus_uniform"],
                        "own_auc_minus_uniform_ci95": train[mine]["auc_minus_uniform_ci95"],
                        "other_minus_own_auc": curves.auc(a) - curves.auc(b),
                        "other_minus_own_auc_ci95": bootstrap_ci([a, b], lambda c, d: curves.auc(c) - curves.auc(d))}
            entry[mode] = row
        figures["priors"][prior] = entry
    return figures


def unit_records(out: Path) -> dict[str, dict]:
    """Per unit: where it ran and what it took, from the protocol's ``units.json`` (the GPU it
    was pinned to, its wall time as the protocol saw it) and what the unit recorded of itself
    (a training unit: its device with the GPU's name, precision, generation engine and peak
    memory; the probe: its manifest's device, generation engine and wall time). Units copied by
    ``--reuse-from`` carry their own record."""
    from trajval_ops.experiment.devices import UNITS_RECORD
    from trajval_ops.experiment.grpo_run import finished_results

    path = out / UNITS_RECORD
    records = json.loads(path.read_text()) if path.is_file() else {}
    for name, unit in finished_results(out).items():
        records.setdefault(name, {}).update(
            {key: unit[key] for key in ("device", "precision", "generation", "peak_memory_gib") if key in unit},
            unit_wall_time_s=unit.get("wall_time_s"))
    manifest = probe_manifest_path(out)
    if manifest.is_file():
        probe = json.loads(manifest.read_text())
        records.setdefault("probe", {}).update(device=probe.get("device"), generation=probe.get("generation_engine"),
                                               probe_wall_time_s=probe.get("wall_time_s"))
    return dict(sorted(records.items()))


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("trajval_ops", "torch", "transformers", "trl", "py-data-juicer"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# ----------------------------------------------------------------------------- index.html


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def figure_file_name(title: str) -> str:
    """``Held-out accuracy per arm`` -> ``held_out_accuracy_per_arm.png``."""
    return "_".join(re.findall(r"[a-z0-9]+", title.lower())) + ".png"


def curve_figures(series: dict, baseline: str = BASELINE_ARM) -> dict[str, bytes]:
    """Held-out accuracy per arm against steps and, where ``series`` has them, against completions
    (``series``: ``steps``, ``curves`` {run: seeds x evaluations}, ``completions`` {run: x or None})."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {}
    names = list(series["curves"])

    def style(name: str) -> dict:
        """One colour per arm, dashed under dynamic sampling; the baseline and TrajVal drawn thicker."""
        arm = name.split("+")[0]
        bases = list(dict.fromkeys(n.split("+")[0] for n in names))
        return {"color": f"C{bases.index(arm) % 10}", "linestyle": "--" if "+" in name else "-",
                "linewidth": 2.2 if arm in (baseline, "trajval") else 1.2}

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, arm_curves in series["curves"].items():
        mean = arm_curves.mean(axis=0)
        ax.plot(series["steps"], mean, label=arm, **style(arm))
        if len(arm_curves) > 1:
            se = arm_curves.std(axis=0, ddof=1) / math.sqrt(len(arm_curves))
            ax.fill_between(series["steps"], mean - se, mean + se, alpha=0.12, color=style(arm)["color"])
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out accuracy (mean over seeds, ±1 SE)")
    ax.legend(fontsize=8, ncol=2)
    figures["Held-out accuracy per arm"] = _png(fig)
    plt.close(fig)
    if any(x is None for x in series["completions"].values()):
        return figures
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, arm_curves in series["curves"].items():
        ax.plot(series["completions"][arm], arm_curves.mean(axis=0), label=arm, **style(arm))
    ax.set_xlabel("completions generated in training (mean over seeds; priors' own cost not included)")
    ax.set_ylabel("held-out accuracy (mean over seeds)")
    ax.legend(fontsize=8, ncol=2)
    figures["Held-out accuracy per arm against completions"] = _png(fig)
    plt.close(fig)
    return figures


def _figures(config: ValidationConfig, out: Path) -> dict[str, bytes]:
    import matplotlib.pyplot as plt

    _, series = training(config, out)
    figures = curve_figures(series)
    oracle_a = oracle_figures(out, "context-a", config.oracle.window)
    _, _, arrays = probe_vs_oracle(list(read_rows(out / "probe" / "weighted.jsonl")), oracle_a, [])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].scatter(arrays["gain"], arrays["score"], s=6, alpha=0.4)
    axes[0].set_xlabel("oracle gain (dense trajectory)")
    axes[0].set_ylabel("probe score s")
    axes[1].scatter(arrays["oracle_r_early"], arrays["r_early"], s=6, alpha=0.4)
    axes[1].set_xlabel("oracle r_early")
    axes[1].set_ylabel("probe r_early")
    figures["Probe vs oracle, per task"] = _png(fig)
    plt.close(fig)
    return figures


def rows_table(rows: dict[str, dict], columns: Sequence[str]) -> str:
    """One row per named entry of ``rows``, its values in ``columns``."""
    return html_table(("", *columns), [[name, *(row.get(c) for c in columns)] for name, row in rows.items()],
                      number_format=".4f")


def figure_sections(figures: dict[str, bytes], out: Path) -> list[str]:
    """index.html's section per figure; each figure also written as a file under ``out/figures``,
    so documentation can quote the run's own output."""
    from trajval_ops.atomic import atomic_open

    parts = []
    for title, png in figures.items():
        with atomic_open(out / "figures" / figure_file_name(title), "wb") as handle:
            handle.write(png)
        parts.append(f"<h2>{html.escape(title)}</h2><img src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    return parts


def page_head(kind: str, name: str, verdict_sentences: dict[str, str]) -> list[str]:
    """index.html's head, title and verdicts."""
    return [f"<!doctype html><meta charset='utf-8'><title>{html.escape(kind)}</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style>",
            f"<h1>{html.escape(kind)}: {html.escape(name)}</h1>",
            "<h2>Verdicts</h2><ul>" + "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
                                              for k, v in verdict_sentences.items()) + "</ul>"]


def write_index(results: dict, config: ValidationConfig, out: Path) -> Path:
    from trajval_ops.atomic import write_text
    parts = [*page_head("TrajVal validation", results["protocol"]["config"]["name"], results["verdicts"]),
             "<h2>Training (held-out accuracy)</h2>",
             rows_table(results["training"], ["best_acc", "best_acc_ci95", "auc", "auc_ci95", "s2b", "s2b_ci95",
                                          "auc_minus_uniform", "auc_minus_uniform_ci95",
                                          "auc_completions_minus_uniform", "auc_completions_minus_uniform_ci95",
                                          "auc_completions_minus_standard_uniform",
                                          "auc_completions_minus_standard_uniform_ci95"]),
             "<h2>Cost: completions to reach uniform's Best Acc, each prior charged its own rollouts</h2>",
             rows_table(results["cost"]["arms"], ["prior_completions", "completions_to_uniform_best", "s2b_completions",
                                              "net_saved", "net_saved_ci95", "break_even_runs", "break_even_runs_ci95"]),
             "<h2>Probe vs oracle</h2>",
             rows_table({"probe": results["probe_vs_oracle"]}, ["spearman_r_early", "spearman_r_late", "spearman_score",
                                                            "spearman_score_vs_gain", "kappa_six", "kappa_binary"]),
             "<h2>Baselines (Spearman against the oracle gain)</h2>",
             rows_table({k: {"spearman": v} for k, v in results["baselines"].items()}, ["spearman"]),
             "<h2>Reproducibility of the oracle</h2>",
             rows_table({"oracle A vs B": results["reproducibility"]},
                    ["n_shared", "kappa_six", "kappa_binary", "spearman_gain", "spearman_gain_independent_base"])]
    parts += figure_sections(_figures(config, out), out)
    parts.append(f"<h2>Protocol</h2><pre>{html.escape(json.dumps(results['protocol'], indent=1, default=str))}</pre>")
    return write_text(out / "index.html", "\n".join(parts))
