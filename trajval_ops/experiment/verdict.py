"""The verdict from runs a user already has (``trajval verdict``): their arms' logged held-out
curves, compared with the figures ``trajval validate`` computes (:mod:`.results`:
:func:`~.results.arm_training_figures`, :func:`~.results.arm_cost_figures`, the verdict sentences).

Runs are read by :mod:`trajval_ops.analysis.run_logs`; each arm's runs are its seeds. The curves
are compared on the evaluation steps every run logged; a run with other steps is cut to them and
named, as is a run that stopped before the others (or before its own planned steps). Bad input
(no baseline runs, runs with different metrics, no shared step) raises
:class:`~trajval_ops.errors.TrajvalInputError` before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from trajval_ops.analysis import curves
from trajval_ops.analysis.run_logs import RunLog, config_value
from trajval_ops.errors import TrajvalInputError
from trajval_ops.experiment import results as validate_results

#: Sampler and dataset classes of this package that weight a verl run's pool (with their weight key's setting).
VERL_WEIGHTED_CLASSES = {"TrajvalVerlDataset": "data.trajval.weight_key",
                         "TrajvalVerlSampler": "data.sampler.weight_key",
                         "TrajvalVerlCurriculumSampler": "data.sampler.weight_key"}


@dataclass
class Prior:
    """What an arm's prior is and costs, and where that was read."""

    name: str | None
    completions: int | None
    source: str


def choose_metrics(runs: Sequence[RunLog], named: Sequence[str] | None) -> list[str]:
    """The metric keys to compare: ``named`` where given (every run must log each), else the one
    held-out accuracy key every run logs."""
    if named:
        missing = [f"{run.path}: {', '.join(k for k in named if k not in run.logged_keys())} (it logs held-out keys: "
                   f"{', '.join(run.heldout_keys()) or 'none'})"
                   for run in runs if any(k not in run.logged_keys() for k in named)]
        if missing:
            raise TrajvalInputError("runs do not log the --metric key(s):\n  " + "\n  ".join(missing))
        return list(named)
    by_run = {run.path: run.heldout_keys() for run in runs}
    keys = {tuple(k) for k in by_run.values()}
    if len(keys) > 1:
        raise TrajvalInputError("the runs log different held-out accuracy keys; compare one with --metric:\n  "
                                + "\n  ".join(f"{path}: {', '.join(k) or 'none'}" for path, k in by_run.items()))
    shared = list(keys.pop())
    if len(shared) == 1:
        return shared
    if not shared:
        logged = sorted({k for run in runs for k in run.logged_keys()})
        raise TrajvalInputError("the runs log no held-out accuracy key this tool recognises; name one with --metric "
                                f"(keys logged: {', '.join(logged[:40])}{' ...' if len(logged) > 40 else ''})")
    raise TrajvalInputError("the runs log several held-out accuracy keys; name one or more with --metric (several "
                            "are macro-averaged):\n  " + "\n  ".join(shared))


def run_curve(run: RunLog, metrics: Sequence[str]) -> tuple[list[int], np.ndarray]:
    """A run's steps at which every metric is logged and its macro-averaged curve there (the
    metrics averaged at each step, :func:`curves.macro_average_curve`); a non-finite value of one
    of them is refused."""
    for key in metrics:
        run.check_finite(key)
    steps = sorted(set.intersection(*(set(run.metrics[key]) for key in metrics)))
    if not steps:
        return [], np.empty(0)
    return steps, curves.macro_average_curve({key: [run.metrics[key][s] for s in steps] for key in metrics})


def align(runs_by_arm: Mapping[str, Sequence[RunLog]], metrics: Sequence[str]) -> tuple[list[int], dict, dict]:
    """The steps every run evaluated at, each arm's curves there (seeds x steps) and what was cut:
    ``{"cut": {path: [steps dropped]}, "stopped_early": {path: reason}}``."""
    per_run = {run.path: (run, *run_curve(run, metrics)) for runs in runs_by_arm.values() for run in runs}
    shared = sorted(set.intersection(*(set(steps) for _, steps, _ in per_run.values())))
    if not any(step > 0 for step in shared):  # step 0 alone: the model before training, every arm's own
        what = ("no evaluation step" if not shared else
                "no evaluation after training began (only step 0, the model before any training)")
        raise TrajvalInputError(f"the runs share {what}:\n  " + "\n  ".join(
            f"{path}: {_step_range(steps)}" for path, (_, steps, _) in per_run.items()))
    last = max(steps[-1] for _, steps, _ in per_run.values())
    cut = {path: [s for s in steps if s not in set(shared)] for path, (_, steps, _) in per_run.items()}
    stopped = {}
    for path, (run, steps, _) in per_run.items():
        if run.planned_steps and run.last_step < run.planned_steps:
            stopped[path] = f"logged up to step {run.last_step} of the {run.planned_steps} planned (still training?)"
        elif steps[-1] < last:
            stopped[path] = f"last evaluated at step {steps[-1]}, other runs at step {last} (still training?)"
    arm_curves = {}
    for arm, runs in runs_by_arm.items():
        rows = []
        for run in runs:
            _, steps, curve = per_run[run.path]
            rows.append(curve[[steps.index(s) for s in shared]])
        arm_curves[arm] = np.stack(rows)
    return shared, arm_curves, {"cut": {p: s for p, s in cut.items() if s}, "stopped_early": stopped}


def _step_range(steps: Sequence[int]) -> str:
    return "no step with every metric" if not steps else f"{len(steps)} evaluations, steps {steps[0]}..{steps[-1]}"


def arm_completions(runs: Sequence[RunLog], steps: Sequence[int]) -> np.ndarray | None:
    """Cumulative completions at ``steps``, mean over the runs (None where a run does not give
    the completions of every training step up to the last of them)."""
    through = range(1, max(steps) + 1)
    if any(any(s not in run.completions for s in through) for run in runs):
        return None
    for run in runs:
        for s in through:
            if not run.completions[s] > 0:  # NaN included
                raise TrajvalInputError(f"{run.path}: step {s} generated {run.completions[s]} completions "
                                        "(must be > 0)")
    return validate_results.mean_cumulative_completions([[run.completions[s] for s in through] for run in runs], steps)


def pool_prior(path: str | Path) -> Prior:
    """A weighted pool's prior and price, from its provenance as ``trajval cost --pool`` reads it."""
    from trajval_ops.pools.io import read_rows
    from trajval_ops.prior_cost import pool_cost

    rows = list(read_rows(path))
    if not rows:
        raise TrajvalInputError(f"{path}: the pool is empty")
    cost = pool_cost(rows)
    names = sorted({run["prior"] for run in cost["runs"] if run["prior"]})
    unpriced = cost.get("rows_without_cost", 0)
    if unpriced:  # a lower bound would make the prior look cheaper than it was: no break-even from it
        return Prior(", ".join(names) or None, None,
                     f"from the provenance of {path}: {unpriced:,} pass rows record no cost, so its price is unknown "
                     f"(at least {int(cost['completions']):,} completions)")
    return Prior(", ".join(names) or None, int(cost["completions"]), f"from the provenance of {path}")


def verl_config_prior(runs: Sequence[RunLog]) -> Prior | None:
    """The prior named by the arm's runs' verl settings (a config saved beside them, or the
    written runs' commands: each run's ``config_source``): a pool weighted by one of this package's
    verl classes, read as :func:`pool_prior` where the pool file is here; a run whose settings name
    no such class trains without a prior (None where no run has settings)."""
    configs = [run.config for run in runs if run.config]
    if not configs:
        return None
    read = "from " + " and ".join(sorted({run.config_source or "the runs' verl config" for run in runs if run.config}))
    found = set()
    for config in configs:
        classes = [config_value(config, "data.custom_cls.name"), config_value(config, "data.sampler.class_name")]
        weighted = next((c for c in classes if c in VERL_WEIGHTED_CLASSES), None)
        files = config_value(config, "data.train_files")
        files = tuple(files) if isinstance(files, list) else (files,)
        found.add((weighted, config_value(config, VERL_WEIGHTED_CLASSES[weighted]) if weighted else None, files))
    if len(found) > 1:
        raise TrajvalInputError("the runs of one arm name different pools or samplers in their verl configs: "
                                + "; ".join(map(str, sorted(found, key=str))))
    weighted, key, files = found.pop()
    if weighted is None:
        return Prior("none", 0, f"{read}: no weighted pool")
    if len(files) == 1 and isinstance(files[0], str) and Path(files[0]).is_file():
        return pool_prior(files[0])
    return Prior(f"weighted by {key or 'trajval_weight'} ({weighted})", None,
                 f"{read}; its pool {', '.join(map(str, files))} "
                 "is not readable here")


def arm_priors(runs_by_arm: Mapping[str, Sequence[RunLog]], pools: Mapping[str, str], baseline: str) -> dict:
    """Per arm, its prior: from ``--pool`` where given, else from its runs' verl config; the
    baseline without either costs nothing; any other arm without either has an unknown price."""
    unknown = [arm for arm in pools if arm not in runs_by_arm]
    if unknown:
        raise TrajvalInputError(f"--pool names arm(s) with no --run: {', '.join(unknown)}")
    priors = {}
    for arm, runs in runs_by_arm.items():
        prior = pool_prior(pools[arm]) if arm in pools else verl_config_prior(runs)
        if prior is None:
            prior = (Prior("none", 0, "the baseline, given no --pool") if arm == baseline else
                     Prior(None, None, "no --pool for this arm and no verl config beside its runs"))
        priors[arm] = prior
    return priors


def compare(runs_by_arm: Mapping[str, Sequence[RunLog]], baseline: str = "uniform",
            metrics: Sequence[str] | None = None, pools: Mapping[str, str] | None = None) -> tuple[dict, dict]:
    """``results.json`` of ``trajval verdict``, and the series its figures draw.

    :param runs_by_arm: arm -> its runs (seeds).
    :param pools: arm -> its weighted pool (its provenance prices the prior).
    """
    if baseline not in runs_by_arm:
        raise TrajvalInputError(f"no runs for the baseline arm '{baseline}' (arms given: {', '.join(runs_by_arm)}); "
                                "name it with --run {baseline}=PATH or choose another with --baseline")
    all_runs = [run for runs in runs_by_arm.values() for run in runs]
    keys = choose_metrics(all_runs, metrics)
    steps, arm_curves, edges = align(runs_by_arm, keys)
    priors = arm_priors(runs_by_arm, pools or {}, baseline)
    x = {arm: arm_completions(runs, steps) for arm, runs in runs_by_arm.items()}
    base = arm_curves[baseline]
    training = {}
    for arm, runs in runs_by_arm.items():
        figures = validate_results.arm_training_figures(arm_curves[arm], base, steps, x[arm], x[baseline],
                                                        baseline=baseline)
        training[arm] = {"arm": arm, **figures,
                         "seeds": [run.path for run in runs], **validate_results.per_seed_figures(arm_curves[arm]),
                         "completions": None if x[arm] is None else float(x[arm][-1])}
    notes = []
    cost = None
    if all(value is not None for value in x.values()):
        cost = {"main_run_completions": float(x[baseline][-1]), "arms": {}}
        for arm in runs_by_arm:
            if priors[arm].completions is None:
                notes.append(f"{arm}: no break-even: its prior's price is unknown; "
                             + ("its pool records no cost for some passes" if arm in (pools or {})
                                else f"pass --pool {arm}=PATH"))
                continue
            row = validate_results.arm_cost_figures(arm_curves[arm], base, x[arm], x[baseline], priors[arm].completions)
            # validate's keys, the baseline named (completions_to_<baseline>_best)
            cost["arms"][arm] = {key.replace("_uniform_", f"_{baseline}_"): value for key, value in row.items()}
    else:
        notes.append("no AUC at equal completions and no break-even: the logs of "
                     + ", ".join(run.path for arm, runs in runs_by_arm.items() if x[arm] is None for run in runs
                                 if any(s not in run.completions for s in range(1, max(steps) + 1)))
                     + " do not give the completions of every training step")
    result = {"baseline": baseline, "metric": keys, "steps": steps,
              "runs": {arm: [{"path": run.path, "format": run.format, "last_step": run.last_step,
                              "planned_steps": run.planned_steps} for run in runs]
                       for arm, runs in runs_by_arm.items()},
              "cut": edges["cut"], "stopped_early": edges["stopped_early"],
              "priors": {arm: vars(prior) for arm, prior in priors.items()},
              "training": training, **({"cost": cost} if cost else {}), "notes": notes}
    result["verdicts"] = verdict_sentences(result)
    return result, {"steps": steps, "curves": arm_curves, "completions": x}


def verdict_sentences(result: Mapping) -> dict[str, str]:
    """Per arm other than the baseline: its AUC against the baseline and, where priced, whether
    its prior pays for itself, in the sentences ``trajval validate`` writes."""
    baseline, out = result["baseline"], {}
    for arm, row in result["training"].items():
        if arm == baseline:
            continue
        out[f"{arm}_vs_{baseline}_auc"] = validate_results.auc_verdict(row[f"auc_minus_{baseline}"],
                                                              row[f"auc_minus_{baseline}_ci95"], baseline)
        cost = (result.get("cost") or {}).get("arms", {}).get(arm)
        if cost is not None:
            out[f"{arm}_pays_for_itself"] = validate_results.cost_verdict(
                cost, result["cost"]["main_run_completions"], baseline)
    return out


def write(result: dict, series: dict, out: Path) -> None:
    """``results.json``, ``index.html`` (verdicts, tables, the curves) and ``figures/`` in ``out``."""
    import html

    from trajval_ops.atomic import write_json, write_text

    baseline = result["baseline"]
    out.mkdir(parents=True, exist_ok=True)
    parts = [*validate_results.page_head("TrajVal verdict", f"against {baseline}, on {' + '.join(result['metric'])}",
                                result["verdicts"]),
             "<h2>Training (held-out accuracy)</h2>",
             validate_results.rows_table(result["training"], [
                 "best_acc", "best_acc_ci95", "auc", "auc_ci95", "s2b", "s2b_ci95", f"auc_minus_{baseline}",
                 f"auc_minus_{baseline}_ci95", f"auc_completions_minus_{baseline}",
                 f"auc_completions_minus_{baseline}_ci95"])]
    if "cost" in result:
        parts += [f"<h2>Cost: completions to reach {html.escape(baseline)}'s Best Acc, each prior charged</h2>",
                  validate_results.rows_table(result["cost"]["arms"], [
                      "prior_completions", f"completions_to_{baseline}_best", "s2b_completions", "net_saved",
                      "net_saved_ci95", "break_even_runs", "break_even_runs_ci95"])]
    parts += ["<h2>Runs</h2><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in run_lines(result)) + "</ul>"]
    parts += validate_results.figure_sections(validate_results.curve_figures(series, baseline), out)
    write_json(out / "results.json", result)
    write_text(out / "index.html", "\n".join(parts))


def run_lines(result: Mapping) -> list[str]:
    """What was compared, cut and left out, one line each (stdout and index.html)."""
    steps = result["steps"]
    lines = [f"metric: {' + '.join(result['metric'])} (macro average)" if len(result["metric"]) > 1 else
             f"metric: {result['metric'][0]}",
             f"steps kept: {len(steps)} evaluations, {', '.join(map(str, steps))}"]
    lines += [f"cut to the shared steps: {path} (dropped its steps {', '.join(map(str, dropped))})"
              for path, dropped in result["cut"].items()]
    lines += [f"stopped early: {path}: {reason}" for path, reason in result["stopped_early"].items()]
    lines += [f"prior of {arm}: {prior['name'] or 'unknown'}"
              + (f", {prior['completions']:,} completions" if prior["completions"] is not None else ", price unknown")
              + f" ({prior['source']})" for arm, prior in result["priors"].items()]
    return lines + list(result["notes"])
