"""Benchmark: which probe agrees with a full run? Probe settings compared on the tuning splits.

Issue 23 item 3. For each finished ``trajval validate`` run given (``--runs``: one per tuning
split, with its two oracle runs), every candidate probe below runs as its own validation run
(the shipping ``dj-process`` probe recipe, then the ``trajval`` arm against ``uniform``, the
run's training seeds), on the same pool, against the same oracle. The oracle runs and the
uniform arm's runs are copied from the given run where their unit specs are equal (paths
aside; ``trajval validate --reuse-from``), so nothing already measured is trained again. Per candidate and split:

- agreement of its score s with oracle A's per-task gain (A trained on the probe's own pool),
  per task (all pool rows) and per task family, and with oracle B's gain on the tasks the two
  contexts share; the ceiling beside it: oracle A's gain against oracle B's on those tasks;
- the per-task difference with the shipped probe's agreement, with a paired bootstrap interval
  over tasks;
- its cost (probe training + both passes, recorded) in main-run epochs;
- the trained result: the trajval arm's AUC - uniform, and its difference with the shipped
  probe's, paired by training seed;
- shorter probes for free: ``stability_epochs`` late passes score the same probe at earlier
  epochs (agreement and cost only; not trained).

Pre-registered before any candidate ran (2026-11-25), so the choice cannot follow the figures:

- candidates (the regime's 1,500-task pool, 16 prompts per step): the shipped 3 % x 30 epochs
  (45 tasks, 60 steps; late passes also at 5, 10 and 20 epochs), the same probe with n = 8
  endpoint rollouts (half the passes), 10 % x 7 epochs (150 tasks, 63 steps; also at 2 and 4),
  30 % x 2 epochs (450 tasks, 56 steps; also at 1), and a full-pool probe, one epoch over all
  1,500 tasks (93 steps: the fewest whole epochs; the closest to the shipped step count);
- the rule: a candidate replaces the shipped probe in the recipes only if, on every split, its
  per-task Spearman against oracle A's gain exceeds the shipped probe's with the bootstrap
  interval of the difference above 0, and its trained AUC - uniform is not below the shipped
  probe's (the paired interval's upper bound at or above 0). Otherwise the shipped probe stays
  and the comparison is recorded. Oracle B is the check that a win is not fitted to oracle A.
- amended after the candidates' agreement figures were read and before any trained result was
  (the rule above named no tie-break): where several candidates pass, the one with the highest
  trained AUC - uniform averaged over the splits replaces the shipped probe.

    python tools/bench/bench_probe_choice.py --runs outputs/validation/sampled-2026 \\
        outputs/validation/sampled-2027 --out outputs/bench/probe_choice

Writes ``probe_choice.json`` into ``--out``; ``--table`` prints the markdown table of a finished
``probe_choice.json`` (docs/validation.md quotes it); ``bench_frontier.py --probe-choice`` draws
its points on the cost-agreement frontier (docs/speed.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: name -> probe settings over the run's own (pre-registered: see the module docstring)
CANDIDATES = {
    "3% x 30 (shipped)": {"probe_fraction": 0.03, "epochs": 30, "stability_epochs": (5, 10, 20)},
    "3% x 30, n = 8": {"probe_fraction": 0.03, "epochs": 30, "n": 8},
    "10% x 7": {"probe_fraction": 0.10, "epochs": 7, "stability_epochs": (2, 4)},
    "30% x 2": {"probe_fraction": 0.30, "epochs": 2, "stability_epochs": (1,)},
    "full pool x 1": {"probe_fraction": 1.0, "epochs": 1},
}
SHIPPED = "3% x 30 (shipped)"
ARMS = ("uniform", "trajval")


def slug(name: str) -> str:
    settings = CANDIDATES[name]
    return (f"p{round(settings['probe_fraction'] * 100):03d}-e{settings['epochs']:02d}"
            + (f"-n{settings['n']}" if "n" in settings else ""))


def candidate_config(base, name: str):
    """The base run's config with the candidate's probe and the two arms compared."""
    from trajval_ops.experiment.validation_config import check_config

    settings = dict(CANDIDATES[name])
    config = dataclasses.replace(
        base, name=f"{base.name}-probe-{slug(name)}",
        probe=dataclasses.replace(base.probe, **settings),
        training=dataclasses.replace(base.training, arms=ARMS, sampling=("standard",)))
    check_config(config)
    return config


def run_candidate(base_out: Path, base, name: str, out: Path, phase: str) -> None:
    """``phase`` ``probe``: the probe unit alone; ``train``: everything else (results included)."""
    from trajval_ops.experiment.protocol import check_same_protocol, prepare_data, probe_unit, run_protocol, run_units

    config = candidate_config(base, name)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    check_same_protocol(config, out)
    prepare_data(config, out)
    if phase == "probe":
        run_units([probe_unit(config, out)], 1, set(), {})
        return
    run_protocol(config, out, reuse_from=base_out)  # the oracles, uniform, and any arm whose prior came out equal


def measure(base_out: Path, base, name: str, out: Path, shipped_score: np.ndarray | None) -> dict:
    """Agreement, cost and the trained result of one finished candidate run."""
    from trajval_ops import core, fields
    from trajval_ops.analysis.agreement import group_spearman, spearman
    from trajval_ops.prior_cost import recorded_cost
    from trajval_ops.experiment.results import bootstrap_ci, oracle_figures
    from trajval_ops.pools.io import read_rows
    from trajval_ops.rows import get_path

    config = candidate_config(base, name)
    rows = list(read_rows(out / "probe" / "weighted.jsonl"))
    column = lambda key: [get_path(row, key, None) for row in rows]  # noqa: E731
    families = np.asarray(column(base.group_key or "extra_info.family"), dtype=object)
    oracle_a = oracle_figures(out, "context-a", base.oracle.window)
    oracle_b = oracle_figures(out, "context-b", base.oracle.window)
    at_a = {task: i for i, task in enumerate(oracle_a["ids"])}
    gain_a = oracle_a["delta"][[at_a[row["id"]] for row in rows]]
    shared = json.loads((out / "data" / "shared_ids.json").read_text())
    at_b = {task: i for i, task in enumerate(oracle_b["ids"])}
    mine = {row["id"]: i for i, row in enumerate(rows)}
    on_shared = np.array([mine[t] for t in shared])
    gain_b = oracle_b["delta"][[at_b[t] for t in shared]]
    epoch = len(rows) * base.grpo.num_generations
    r_early = np.array(column(fields.R_EARLY), dtype=np.float64)
    probe_cost = recorded_cost(column, [fields.R_EARLY], [fields.R_LATE])["stages"]["probe"]["completions"]
    pass_cost = recorded_cost(column, [fields.R_EARLY], None)["completions"]  # one pass at the candidate's n

    def point(label, score, completions, steps):
        figures = {"probe": label, "probe_steps": steps, "completions": int(completions),
                   "cost_epochs": completions / epoch,
                   "spearman_task": spearman(score, gain_a), "spearman_family": group_spearman(score, gain_a, families),
                   "spearman_task_b": spearman(score[on_shared], gain_b),
                   "spearman_family_b": group_spearman(score[on_shared], gain_b, families[on_shared])}
        if shipped_score is not None:
            tasks = np.arange(len(rows))
            diff = lambda i: spearman(score[i], gain_a[i]) - spearman(shipped_score[i], gain_a[i])  # noqa: E731
            figures["spearman_task_minus_shipped"] = diff(tasks)
            figures["spearman_task_minus_shipped_ci95"] = bootstrap_ci([tasks], diff, n_boot=1000)
        return figures

    steps_per_epoch = _steps_per_epoch(out)
    score = np.array(column(fields.SCORE), dtype=np.float64)
    result = {"candidate": name, "folder": str(out), "settings": {k: list(v) if isinstance(v, tuple) else v
                                                                  for k, v in CANDIDATES[name].items()},
              "points": [point(name, score, probe_cost + 2 * pass_cost, steps_per_epoch * config.probe.epochs)]}
    for e in config.probe.stability_epochs:  # the same probe stopped at epoch e: its training cost scaled
        late = np.array(column(f"trajval_acc_epoch_{e}"), dtype=np.float64)
        result["points"].append(point(f"{name.split(' (')[0].split(',')[0].rsplit(' x ', 1)[0]} x {e}",
                                      core.learnability_score(r_early, late),
                                      probe_cost * e / config.probe.epochs + 2 * pass_cost, steps_per_epoch * e))
    training = json.loads((out / "results.json").read_text())["training"]
    result["training"] = {arm: {k: training[arm][k] for k in ("auc_minus_uniform", "auc_minus_uniform_ci95",
                                                               "best_acc", "per_seed_auc", "zero_variance_share")}
                          for arm in ARMS}
    oracle_ab = spearman(oracle_a["delta"][[at_a[t] for t in shared]], gain_b)
    result["ceiling"] = {"oracle_a_vs_b_task": oracle_ab,
                         "oracle_a_vs_b_family": group_spearman(oracle_a["delta"][[at_a[t] for t in shared]], gain_b,
                                                                families[on_shared])}
    return result


def _steps_per_epoch(out: Path) -> int:
    manifest = json.loads((out / "probe" / "probe_run" / "manifest.json").read_text())
    return int(manifest["steps_per_epoch"])


def compare_training(result: dict, shipped: dict) -> None:
    """The trajval arm's AUC - uniform against the shipped probe's, paired by training seed."""
    from trajval_ops.experiment.results import bootstrap_ci

    diff = np.subtract(result["training"]["trajval"]["per_seed_auc"], shipped["training"]["trajval"]["per_seed_auc"])
    result["auc_minus_shipped"] = float(diff.mean())
    result["auc_minus_shipped_ci95"] = bootstrap_ci([diff], lambda d: float(d.mean()))


def verdict(splits: list[dict]) -> dict:
    """The pre-registered rule (module docstring), applied per candidate."""
    out = {}
    for name in CANDIDATES:
        if name == SHIPPED:
            continue
        per_split = [next(c for c in split["candidates"] if c["candidate"] == name) for split in splits]
        agrees = all(c["points"][0]["spearman_task_minus_shipped_ci95"][0] > 0 for c in per_split)
        trains = all(c["auc_minus_shipped_ci95"][1] >= 0 for c in per_split)
        out[name] = {"agrees_better_on_every_split": agrees, "trains_not_worse_on_every_split": trains,
                     "passes": agrees and trains,
                     "mean_auc_minus_uniform": float(np.mean([c["training"]["trajval"]["auc_minus_uniform"]
                                                              for c in per_split]))}
    passing = [name for name, row in out.items() if row["passes"]]
    chosen = max(passing, key=lambda name: out[name]["mean_auc_minus_uniform"]) if passing else SHIPPED
    return {"candidates": out, "chosen": chosen}


def table(results: dict) -> str:
    lines = ["| split | probe | steps | cost (epochs) | vs oracle A: task | - shipped [95% CI] | family "
             "| vs oracle B: task | family | trained: AUC - uniform [95% CI] | - shipped [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda ci: f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"  # noqa: E731
    for split in results["splits"]:
        for c in split["candidates"]:
            for i, p in enumerate(c["points"]):
                trained = c["training"]["trajval"] if i == 0 else None
                lines.append(
                    f"| {split['split_seed']} | {p['probe']} | {p['probe_steps']} | {p['cost_epochs']:.2f} "
                    f"| {p['spearman_task']:.3f} | "
                    + (f"{p['spearman_task_minus_shipped']:+.3f} {fmt(p['spearman_task_minus_shipped_ci95'])}"
                       if "spearman_task_minus_shipped_ci95" in p else "")
                    + f" | {p['spearman_family']:.2f} | {p['spearman_task_b']:.3f} | {p['spearman_family_b']:.2f} | "
                    + (f"{trained['auc_minus_uniform']:+.4f} {fmt(trained['auc_minus_uniform_ci95'])}" if trained else "")
                    + " | " + (f"{c['auc_minus_shipped']:+.4f} {fmt(c['auc_minus_shipped_ci95'])}"
                               if i == 0 and c["candidate"] != SHIPPED else "") + " |")
        ceiling = split["candidates"][0]["ceiling"]
        lines.append(f"| {split['split_seed']} | ceiling: oracle A's gain | 150 (full pool) | | | | "
                     f"| {ceiling['oracle_a_vs_b_task']:.3f} | {ceiling['oracle_a_vs_b_family']:.2f} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from trajval_ops import fields
    from trajval_ops.experiment.validation_config import load_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", help="finished trajval validate folders, one per tuning split")
    parser.add_argument("--out", default="outputs/bench/probe_choice")
    parser.add_argument("--phase", choices=("probe", "train", "all"), default="all",
                        help="probe: every candidate's probe unit (agreement first); train: the rest")
    parser.add_argument("--table", action="store_true", help="print the table of --out's probe_choice.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.table:
        print(table(json.loads((out / "probe_choice.json").read_text())))
        return 0
    splits = []
    for run in map(Path, args.runs):
        protocol = json.loads((run / "protocol.json").read_text())
        base = load_config(protocol["source"], split_seed=protocol["config"]["tasks"]["seed"])
        folder = out / f"split-{base.tasks.seed}"
        for phase in ("probe", "train") if args.phase == "all" else (args.phase,):
            for name in CANDIDATES:
                run_candidate(run.resolve(), base, name, folder / slug(name), phase)
        if args.phase == "probe":
            continue
        shipped = measure(run, base, SHIPPED, folder / slug(SHIPPED), None)
        score = np.array([row[fields.SCORE] for row in _rows(folder / slug(SHIPPED))])
        candidates = [shipped]
        for name in CANDIDATES:
            if name != SHIPPED:
                result = measure(run, base, name, folder / slug(name), score)
                compare_training(result, shipped)
                candidates.append(result)
        splits.append({"run": str(run), "split_seed": base.tasks.seed, "candidates": candidates})
    if not splits:
        return 0
    results = {"splits": splits, "verdict": verdict(splits)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe_choice.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    print(json.dumps(results["verdict"], indent=1))
    return 0


def _rows(folder: Path) -> list[dict]:
    from trajval_ops.pools.io import read_rows

    return list(read_rows(folder / "probe" / "weighted.jsonl"))


if __name__ == "__main__":
    sys.exit(main())
