"""Benchmark: the cost-agreement frontier of priors on the validation regime.

For finished ``trajval validate`` runs (``--runs``, one per split), each prior's score is ranked
against oracle A's gain (its full-pool GRPO run's per-task delta) and against the full passes'
TrajVal score, per task and per task family, with its cost in main-run epochs (the pool x the
run's ``grpo.num_generations`` completions):

- TrajVal (probe + early + late passes at the run's ``probe.n``), the run's own pipeline;
- the one-pass priors (variance, band-pass) from early passes of the base model at
  ``--ns`` rollouts per task (4, 8, 16), sampled here (seeded, ``--seeds`` repeats; the mean and
  range of the Spearman are printed), and from the run's own early pass;
- the sampled prior (``trajval_ops.priors.sampled``) at ``--fractions`` of the pool: TrajVal's
  score measured on a seeded sample stratified by family (the run's own passes, charged per
  measured row, the probe in full), every other row predicted from its family alone
  (``sampled-group``) or from its family and a short early pass at the smallest of ``--ns``
  (``sampled-short``, that pass charged for every row); one sample per seed.

Writes ``frontier.json`` and ``frontier.png`` into ``--out``.

    python tools/bench/bench_frontier.py --runs outputs/validation/priors-2026 outputs/validation/priors-2027 \\
        --out docs/frontier [--probe-choice outputs/bench/probe_choice/probe_choice.json]

``--probe-choice`` adds the probe settings ``bench_probe_choice.py`` compared (TrajVal at other
probe fractions, lengths and n); ``--replot --probe-choice ...`` adds them to a finished
``frontier.json`` without sampling again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def early_pass(rows, n: int, seed: int, model: str, verifier: tuple) -> tuple[np.ndarray, int]:
    """The base model's pass rates at ``n`` rollouts per task, and the completions spent."""
    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.pass_rates import RolloutPass, pass_rate
    from trajval_ops.rollout.session import EngineSession
    from trajval_ops.rollout.verifiers import build_verifier

    checker = build_verifier(verifier[0], **verifier[1])
    with EngineSession("transformers", resolve_model(model), torch_threads=2) as session:
        results = RolloutPass(session, DecodingConfig(n=n, max_new_tokens=8, seed=seed), checker,
                              prompts_per_generate=64, what="frontier").results(rows, 0)
    checker.close()
    return np.array([pass_rate(r) for r in results]), sum(r["cost"]["completions"] for r in results)


def sampled_points(point, rows, column, score, families, fractions, short_passes) -> list[dict]:
    """TrajVal measured on a stratified sample, the rest predicted (see the module docstring)."""
    from trajval_ops import fields
    from trajval_ops.prior_cost import recorded_cost
    from trajval_ops.priors.sampled import predict_scores, stratified_sample

    probe = recorded_cost(column, [fields.R_EARLY], [fields.R_LATE])["stages"].get("probe", {}).get("completions", 0)
    per_row = np.zeros(len(rows))
    for key in (fields.R_EARLY, fields.R_LATE):
        per_row += [((p or {}).get("cost") or {}).get("completions", 0) for p in column(f"{key}_provenance")]
    ids = [row["id"] for row in rows]
    points = []
    for fraction in fractions:
        for kind in ("sampled-group", "sampled-short"):
            repeats = []
            for seed, (short, short_spent) in enumerate(short_passes):
                measured = stratified_sample(ids, fraction, seed, families)
                features = short[:, None] if kind == "sampled-short" else None
                predicted = predict_scores(score, measured, features, families, seed=seed)
                spent = probe + int(per_row[measured].sum()) + (short_spent if kind == "sampled-short" else 0)
                repeats.append(point(f"{kind} f={fraction:.2f}", predicted.score, spent))
            points.append(mean_of_repeats(repeats))
    return points


def mean_of_repeats(repeats: list[dict]) -> dict:
    """One point from seeded repeats: the mean of each figure, the range of the agreements with
    the oracle."""
    point = dict(repeats[0])
    for key in ("completions", "cost_epochs", *AGREEMENTS):
        point[key] = float(np.mean([p[key] for p in repeats]))
    point["completions"] = int(point["completions"])
    for key in ("spearman_task", "spearman_family"):
        point[f"{key}_range"] = [min(p[key] for p in repeats), max(p[key] for p in repeats)]
    return point


#: each point's agreements: with oracle A's gain and with the full passes' TrajVal score, per task and per family
AGREEMENTS = ("spearman_task", "spearman_family", "spearman_full_task", "spearman_full_family")


def one_run(run: Path, ns: list[int], seeds: int, fractions: list[float]) -> dict:
    from scipy.stats import spearmanr

    from trajval_ops import core, fields
    from trajval_ops.analysis.agreement import group_spearman
    from trajval_ops.prior_cost import recorded_cost
    from trajval_ops.experiment.validation_config import load_config
    from trajval_ops.experiment.validation_config import regime_verifier
    from trajval_ops.experiment.results import oracle_figures
    from trajval_ops.pools.io import read_rows
    from trajval_ops.rows import get_path

    protocol = json.loads((run / "protocol.json").read_text())
    config = load_config(protocol["source"]) if Path(protocol["source"]).is_file() else None
    grpo = protocol["config"]["grpo"]
    rows = list(read_rows(run / "probe" / "weighted.jsonl"))
    oracle = oracle_figures(run, "context-a", protocol["config"]["oracle"]["window"])
    at = {task: i for i, task in enumerate(oracle["ids"])}
    gain = oracle["delta"][[at[row["id"]] for row in rows]]
    families = [get_path(row, "extra_info.family", None) for row in rows]
    epoch = len(rows) * grpo["num_generations"]

    column = lambda name: [get_path(row, name, None) for row in rows]  # noqa: E731
    score = np.array(column(fields.SCORE), dtype=np.float64)  # the full passes' TrajVal score

    def point(name, prior_score, completions):
        return {"prior": name, "cost_epochs": completions / epoch, "completions": completions,
                "spearman_task": float(spearmanr(prior_score, gain).statistic),
                "spearman_family": group_spearman(np.asarray(prior_score), gain, families),
                "spearman_full_task": float(spearmanr(prior_score, score).statistic),
                "spearman_full_family": group_spearman(np.asarray(prior_score), score, families)}

    trajval_cost = recorded_cost(column, [fields.R_EARLY], [fields.R_LATE])["completions"]
    early_cost = recorded_cost(column, [fields.R_EARLY], None)["completions"]
    r_early = np.array(column(fields.R_EARLY), dtype=np.float64)
    points = [point("trajval", score, trajval_cost),
              point(f"variance n={protocol['config']['probe']['n']} (the run's early pass)",
                    core.variance_score(r_early), early_cost)]
    verifier = regime_verifier(config) if config else ("math", {"fallback_last_number": True})
    passes_at = {}
    for n in ns:
        passes = passes_at[n] = [early_pass(rows, n, 1000 + seed, protocol["config"]["model"], verifier)
                                 for seed in range(seeds)]
        for kind, score_of in (("variance", core.variance_score), ("bandpass", core.bandpass_score)):
            points.append(mean_of_repeats([point(f"{kind} n={n}", score_of(rates), spent) for rates, spent in passes]))
    points += sampled_points(point, rows, column, score, families, fractions, passes_at[min(ns)])
    return {"run": str(run), "split_seed": protocol["config"]["tasks"]["seed"], "pool_rows": len(rows),
            "main_epoch_completions": epoch, "points": points}


def add_probe_points(results: list[dict], probe_choice: dict) -> None:
    """Each split's probe settings from bench_probe_choice.py (TrajVal at other probe fractions,
    lengths and n; the same agreements with oracle A, the same cost unit) as ``probe_points``."""
    by_split = {split["split_seed"]: split for split in probe_choice["splits"]}
    for result in results:
        split = by_split.get(result["split_seed"])
        if split is not None:
            result["probe_points"] = [{"prior": f"trajval, probe {p['probe']}", **p}
                                      for candidate in split["candidates"] for p in candidate["points"]]


def plot(results: list[dict], path: Path) -> None:
    """Colour = prior, marker = split (TrajVal's full prior in black: a star, a cross); each
    prior's points joined across n or sample fraction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"variance": "C1", "bandpass": "C2", "sampled-group": "C3", "sampled-short": "C4"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "spearman_task", "per task"), (axes[1], "spearman_family", "per family")):
        for result, marker, full_marker in zip(results, "os^D", "*XPd"):
            probes = result.get("probe_points", [])  # other probe settings (bench_probe_choice.py)
            if probes:
                ax.plot([p["cost_epochs"] for p in probes], [p[key] for p in probes], marker=marker, color="C5",
                        linestyle="none", markersize=6, label=f"trajval, other probes, split {result['split_seed']}")
            full = next(p for p in result["points"] if p["prior"] == "trajval")  # drawn over sampled f = 1
            ax.plot([full["cost_epochs"]], [full[key]], marker=full_marker, color="black", markersize=11, zorder=5,
                    linestyle="none", label=f"trajval (full), split {result['split_seed']}")
            for kind, color in colors.items():
                sampled = [p for p in result["points"] if p["prior"].startswith(kind) and "(" not in p["prior"]]
                sampled.sort(key=lambda p: p["cost_epochs"])
                ax.plot([p["cost_epochs"] for p in sampled], [p[key] for p in sampled], marker=marker, color=color,
                        linewidth=0.8, markersize=6, label=f"{kind}, split {result['split_seed']}")
        ax.set_xscale("log")
        ax.set_xlabel("cost of the prior (main-run epochs of completions)")
        ax.set_title(f"Spearman against oracle A's gain, {title}")
        ax.axhline(0, color="grey", linewidth=0.6)
    axes[0].set_ylabel("Spearman")
    axes[1].legend(fontsize=6.5, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", help="finished trajval validate output folders (not with --replot)")
    parser.add_argument("--ns", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seeds", type=int, default=3, help="repeats of each sampled early pass and sample")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.25, 0.5, 1.0],
                        help="shares of the pool the sampled prior measures")
    parser.add_argument("--out", default="outputs/bench/frontier")
    parser.add_argument("--probe-choice", type=Path, default=None,
                        help="a probe_choice.json of bench_probe_choice.py: its probes' points join the frontier")
    parser.add_argument("--replot", action="store_true", help="redraw frontier.png from --out's frontier.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        results = json.loads((out / "frontier.json").read_text())
    elif not args.runs:
        parser.error("--runs is required (or --replot)")
    else:
        results = [one_run(Path(run), args.ns, args.seeds, args.fractions) for run in args.runs]
    if args.probe_choice:
        add_probe_points(results, json.loads(args.probe_choice.read_text()))
    (out / "frontier.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "frontier.png")
    for result in results:
        print(f"split {result['split_seed']} ({result['pool_rows']} tasks; a main-run epoch = "
              f"{result['main_epoch_completions']:,} completions)")
        print(f"  {'prior':42} {'epochs':>7} {'per task':>9} {'(range)':>15} {'per family':>11} {'(range)':>15}"
              f" {'vs full passes: task':>21} {'family':>7}")
        for p in result["points"] + result.get("probe_points", []):  # probe points: no full-pass column
            spread = lambda key: "[{:.3f}, {:.3f}]".format(*p[key]) if key in p else ""  # noqa: E731
            print(f"  {p['prior']:42} {p['cost_epochs']:7.2f} {p['spearman_task']:9.3f} "
                  f"{spread('spearman_task_range'):>15} {p['spearman_family']:11.3f} {spread('spearman_family_range'):>15}"
                  f" {p.get('spearman_full_task', math.nan):21.3f} {p.get('spearman_full_family', math.nan):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
