"""Benchmark: the adaptive rollout budget against the fixed n, on the demo regime, both scored
against a high-n reference measured in the same run.

1. The demo's probe (recipes/demo_trajval.yaml's settings: tiny-arith, 3% of the 600-task pool,
   30 epochs) is trained once into ``--out`` (reused when it is there).
2. Reference: the early (base model) and late (probe) passes at ``--reference-n`` (64)
   rollouts per task; its TrajVal score and weight are the truth the others are scored against.
3. ``fixed``: both passes at ``--n`` (16).
4. ``adaptive``: both passes with ``budget: adaptive`` at the cap ``--n`` (rounds of
   ``--round-size``, weight tolerance ``--tolerance``); the late pass reads the adaptive early
   pass's rates.

Fixed and adaptive are run ``--repeats`` times (3) with the same seeds per repeat: the spread of
the fixed pass's Spearman over repeats is the sampling noise any difference has to clear. Each
pass runs through :class:`trajval_ops.rollout.pass_rates.RolloutPass` (the endpoint mapper's
own) in this process, one after the other, without a cache. Printed: completions and wall time
of fixed and adaptive as ratios against each other (means over repeats), and the Spearman of s
and of the weight of each against the reference, with its range over repeats.

    python tools/bench/bench_adaptive_budget.py [--out outputs/bench/adaptive] [--n 16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[2]
POOL = REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl"
VERIFIER = ("math", {"fallback_last_number": True})


def demo_probe(out: Path) -> dict:
    """The demo recipe's probe, trained once (its manifest)."""
    import yaml

    from trajval_ops.ops.probe_trainer import PROBE_SETTINGS
    from trajval_ops.pools.io import read_rows
    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.probe_set import probe_size_for, sample_probe_positions
    from trajval_ops.probe.run import run_probe

    recipe = yaml.safe_load((REPO / "recipes" / "demo_trajval.yaml").read_text())
    settings = recipe["process"][0]["trajval_probe_trainer"]
    config = ProbeConfig(**{k: v for k, v in settings.items() if k in PROBE_SETTINGS})
    rows = list(read_rows(POOL))
    ids = [row["id"] for row in rows]
    positions = sample_probe_positions(ids, probe_size_for(len(rows), None, settings["probe_fraction"]), config.seed)
    return run_probe([rows[p] for p in positions], [ids[p] for p in positions], config, out / "probe",
                     show_progress=False)


def one_pass(model_path: Path, rows: list[dict], n: int, seed: int, budget=None, early_key=None) -> dict:
    """One pass over the pool: per-row pass rates and counts, completions and seconds."""
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.pass_rates import RolloutPass, pass_rate
    from trajval_ops.rollout.session import EngineSession
    from trajval_ops.rollout.verifiers import build_verifier

    verifier = build_verifier(VERIFIER[0], **VERIFIER[1])
    with EngineSession("transformers", model_path, torch_threads=int(os.environ.get("BENCH_THREADS", "2"))) as session:
        rollout = RolloutPass(session, DecodingConfig(n=n, max_new_tokens=8, seed=seed), verifier,
                              prompts_per_generate=64, budget=budget, early_key=early_key, what="bench")
        start = time.perf_counter()
        results = rollout.results(rows, 0)
        seconds = time.perf_counter() - start
    verifier.close()
    return {"rates": [pass_rate(r) for r in results], "n": [r["cost"]["completions"] for r in results],
            "completions": sum(r["cost"]["completions"] for r in results), "seconds": seconds}


def prior(early: dict, late: dict) -> dict:
    import numpy as np

    from trajval_ops import core

    score = core.learnability_score(np.array(early["rates"]), np.array(late["rates"]))
    return {"score": score, "weight": core.sampling_weight(score)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="outputs/bench/adaptive", help="folder of the probe run (reused)")
    parser.add_argument("--n", type=int, default=16, help="rollouts per task (the adaptive cap)")
    parser.add_argument("--reference-n", type=int, default=64)
    parser.add_argument("--round-size", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3, help="seeded repeats of both arms")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    import numpy as np
    from scipy.stats import spearmanr

    from trajval_ops.probe_manifest import resolve_model_reference
    from trajval_ops.pools.io import read_rows
    from trajval_ops.priors import TrajVal
    from trajval_ops.rollout.budget import AdaptiveBudget

    out = Path(args.out)
    manifest = demo_probe(out)
    base, _ = resolve_model_reference("tiny-arith")
    late_model, _ = resolve_model_reference(f"manifest:{out / 'probe'}#late[0]")
    rows = list(read_rows(POOL))
    print(f"probe ready ({manifest['config']['epochs']} epochs); {len(rows)} tasks", file=sys.stderr)
    reference = prior(one_pass(base, rows, args.reference_n, seed=100),
                      one_pass(late_model, rows, args.reference_n, seed=101))

    def measured(early, late) -> dict:
        estimate = prior(early, late)
        return {"completions": early["completions"] + late["completions"],
                "seconds": early["seconds"] + late["seconds"],
                "spearman_score": float(spearmanr(estimate["score"], reference["score"]).statistic),
                "spearman_weight": float(spearmanr(estimate["weight"], reference["weight"]).statistic),
                "early_rows_stopped": sum(1 for n in early["n"] if n < args.n),
                "late_rows_skipped": sum(1 for n in late["n"] if n == 0),
                "late_rows_stopped": sum(1 for n in late["n"] if 0 < n < args.n)}

    # Each repeat samples both arms with the same seeds; the spread over repeats is the sampling
    # noise a Spearman difference has to clear.
    repeats = {"fixed": [], "adaptive": []}
    for repeat in range(args.repeats):
        early_seed, late_seed = 2 * repeat, 2 * repeat + 1
        repeats["fixed"].append(measured(one_pass(base, rows, args.n, seed=early_seed),
                                         one_pass(late_model, rows, args.n, seed=late_seed)))
        early = one_pass(base, rows, args.n, seed=early_seed,
                         budget=AdaptiveBudget("early", args.n, args.round_size, TrajVal(), args.tolerance))
        scored = [{**row, "trajval_r_early": rate} for row, rate in zip(rows, early["rates"])]
        late = one_pass(late_model, scored, args.n, seed=late_seed, early_key="trajval_r_early",
                        budget=AdaptiveBudget("late", args.n, args.round_size, TrajVal(), args.tolerance))
        repeats["adaptive"].append(measured(early, late))
    figures = {"repeats": repeats}
    for name, runs in repeats.items():
        figures[name] = {key: float(np.mean([run[key] for run in runs])) for key in runs[0]}
        figures[name]["spearman_score_range"] = [min(r["spearman_score"] for r in runs),
                                                 max(r["spearman_score"] for r in runs)]
    fixed, adaptive = figures["fixed"], figures["adaptive"]
    differences = [a["spearman_score"] - f["spearman_score"] for f, a in zip(repeats["fixed"], repeats["adaptive"])]
    figures["ratios"] = {"completions_adaptive_over_fixed": adaptive["completions"] / fixed["completions"],
                         "seconds_adaptive_over_fixed": adaptive["seconds"] / fixed["seconds"],
                         "spearman_score_difference": float(np.mean(differences)),
                         "spearman_score_difference_range": [min(differences), max(differences)],
                         "spearman_weight_difference": adaptive["spearman_weight"] - fixed["spearman_weight"]}
    figures["settings"] = vars(args)
    for name in ("fixed", "adaptive"):
        row = figures[name]
        low, high = row["spearman_score_range"]
        print(f"{name:9} {row['completions']:>9,.0f} completions {row['seconds']:7.1f} s   Spearman vs n = "
              f"{args.reference_n}: s {row['spearman_score']:.3f} (repeats {low:.3f}-{high:.3f}), "
              f"w {row['spearman_weight']:.3f}   early rows stopped {row['early_rows_stopped']:.0f}, late rows "
              f"skipped {row['late_rows_skipped']:.0f}, stopped {row['late_rows_stopped']:.0f}   (means of {args.repeats})")
    ratios = figures["ratios"]
    low, high = ratios["spearman_score_difference_range"]
    print(f"adaptive / fixed: completions {ratios['completions_adaptive_over_fixed']:.3f}x, wall time "
          f"{ratios['seconds_adaptive_over_fixed']:.3f}x; Spearman difference s {ratios['spearman_score_difference']:+.3f} "
          f"(per repeat {low:+.3f} to {high:+.3f}), w {ratios['spearman_weight_difference']:+.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
