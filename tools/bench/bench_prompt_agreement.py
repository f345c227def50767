#!/usr/bin/env python
"""How far apart are a pool's pass rates under the paper's ``\\boxed{}`` prompt and under the
main run's own prompt and reward (docs/pools.md, "The main run's prompt and reward")?

Protocol, fixed before any run (committed with this file):

- Tasks: the embedded math pool (``trajval_ops/data/demo_math_pool.jsonl``, 48 reasoning-gym
  tasks), each problem rewrapped as a DAPO-Math-17k row: DAPO's instruction ("... The last line
  of your response should be of the form Answer: $Answer ...") around the problem (the pool's own
  ``\\boxed{}`` instruction taken off), ``data_source: math_dapo``.
- Model: SmolLM2-135M-Instruct, the transformers engine, ``dtype: auto``, one torch thread per arm;
  n = 8 rollouts per task at temperature 1.0, 256 new tokens, seed 0, 8 tasks per generate call.
- Arm ``boxed``: ``template: dapo_math`` (the paper's system prompt "... put your final answer
  within \\boxed{}", the problem without DAPO's wrapper) and ``verifier: math`` without the
  last-number fallback: what the DAPO recipes measured before ``template: pool``. The same
  completions are also scored with the fallback on (a secondary figure, no new rollouts).
- Arm ``pool``: ``template: pool`` (the row's own chat list, rendered as verl renders it) and
  ``verifier: dapo`` (verl's DAPO reward): what a verl run on the pool trains on.
- Figures: each arm's mean pass rate and tasks strictly between 0 and 1; Spearman's rho between
  the arms' per-task pass rates with a 95% percentile interval from 2,000 paired bootstrap
  resamples of the tasks (seed 0). A constant arm has no rank order: rho is then undefined, and
  said so.

    python tools/bench/bench_prompt_agreement.py run --arm boxed --json outputs/agreement/boxed.json
    python tools/bench/bench_prompt_agreement.py run --arm pool --json outputs/agreement/pool.json
    python tools/bench/bench_prompt_agreement.py compare outputs/agreement/boxed.json outputs/agreement/pool.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

POOL = Path(__file__).resolve().parents[2] / "trajval_ops" / "data" / "demo_math_pool.jsonl"
ARMS = {
    "boxed": {"template": "dapo_math", "verifier": "math", "options": {"fallback_last_number": False}},
    "pool": {"template": "pool", "verifier": "dapo", "options": {}},
}
N, TEMPERATURE, MAX_NEW_TOKENS, SEED, PER_CALL = 8, 1.0, 256, 0, 8


def dapo_rows(path: Path = POOL) -> list[dict]:
    """The pool's rows as DAPO-Math-17k writes its own: DAPO's instruction around the problem."""
    from trajval_ops.pools.generate import ANSWER_INSTRUCTIONS
    from trajval_ops.pools.io import read_rows
    from trajval_ops.rollout.prompts import DAPO_PREFIX, DAPO_SUFFIX

    rows = []
    for row in read_rows(str(path)):
        (message,) = row["prompt"]
        problem = message["content"].removesuffix(ANSWER_INSTRUCTIONS["math"]).strip()
        rows.append({**row, "data_source": "math_dapo",
                     "prompt": [{"role": "user", "content": f"{DAPO_PREFIX}\n\n{problem}\n\n{DAPO_SUFFIX}"}]})
    return rows


def run_arm(arm: str, out: str) -> int:
    import torch

    from trajval_ops.atomic import write_json
    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.pass_rates import PromptSettings, RolloutPass, pass_rate
    from trajval_ops.rollout.session import EngineSession
    from trajval_ops.rollout.verifiers import build_verifier

    torch.set_num_threads(1)
    spec, rows = ARMS[arm], dapo_rows()
    verifier = build_verifier(spec["verifier"], **spec["options"])
    decoding = DecodingConfig(n=N, temperature=TEMPERATURE, max_new_tokens=MAX_NEW_TOKENS, seed=SEED)
    start = time.perf_counter()
    with EngineSession("transformers", resolve_model("smollm2-135m-instruct"), torch_threads=1) as session:
        rollout = RolloutPass(session, decoding, verifier, PromptSettings(spec["template"]),
                              prompts_per_generate=PER_CALL, keep_completions=True, what=f"arm {arm}")
        results = rollout.results(rows, 0)
        engine = f"{session.name} {session.dtype}"
    verifier.close()
    report = {"arm": arm, **spec, "engine": engine, "n": N, "temperature": TEMPERATURE,
              "max_new_tokens": MAX_NEW_TOKENS, "seed": SEED, "tasks": [row["task_id"] for row in rows],
              "truths": [row["reward_model"]["ground_truth"] for row in rows],
              "pass_rates": [pass_rate(r) for r in results], "completions": [r["completions"] for r in results],
              "wall_s": round(time.perf_counter() - start, 1)}
    if arm == "boxed":  # the secondary figure: the same completions, the last number read where no box is
        fallback = build_verifier("math", fallback_last_number=True)
        report["pass_rates_with_fallback"] = [
            sum(check.reward for check in fallback.check_many(texts, truth)) / len(texts)
            for texts, truth in zip(report["completions"], report["truths"])]
        fallback.close()
    write_json(out, report)
    print(f"arm {arm}: mean pass rate {sum(report['pass_rates']) / len(rows):.3f} over {len(rows)} tasks in "
          f"{report['wall_s']} s ({engine})")
    return 0


def agreement(a: list[float], b: list[float]) -> dict:
    """Spearman's rho of two arms' per-task pass rates, with its paired bootstrap interval."""
    import warnings

    import numpy as np

    from trajval_ops.analysis.agreement import spearman
    from trajval_ops.experiment.results import bootstrap_ci

    a, b = np.asarray(a, float), np.asarray(b, float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a constant arm: said below, in words
        rho = spearman(a, b)
        interval = bootstrap_ci([np.arange(a.size)], lambda idx: spearman(a[idx], b[idx]), seed=0)
    return {"spearman": rho, "interval_95": interval,
            "undefined": "an arm is constant: no rank order to compare" if math.isnan(rho) else None}


def summary(rates: list[float]) -> dict:
    return {"mean": sum(rates) / len(rates), "between": sum(0 < r < 1 for r in rates),
            "all_zero": sum(r == 0 for r in rates), "tasks": len(rates)}


def compare(boxed_path: str, pool_path: str) -> int:
    boxed, pool = (json.loads(Path(p).read_text()) for p in (boxed_path, pool_path))
    if boxed["tasks"] != pool["tasks"]:
        raise SystemExit("the two arms measured other tasks")
    figures = {"boxed": summary(boxed["pass_rates"]), "boxed_with_fallback": summary(boxed["pass_rates_with_fallback"]),
               "pool": summary(pool["pass_rates"]),
               "agreement": agreement(boxed["pass_rates"], pool["pass_rates"]),
               "agreement_with_fallback": agreement(boxed["pass_rates_with_fallback"], pool["pass_rates"]),
               "wall_s": {"boxed": boxed["wall_s"], "pool": pool["wall_s"]}}
    print(json.dumps(figures, indent=2))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    running = sub.add_parser("run", help="one arm's pass over the tasks")
    running.add_argument("--arm", choices=sorted(ARMS), required=True)
    running.add_argument("--json", required=True, help="where the arm's pass rates and completions go")
    comparing = sub.add_parser("compare", help="the arms' figures and their rank agreement")
    comparing.add_argument("boxed")
    comparing.add_argument("pool")
    args = parser.parse_args(argv)
    return run_arm(args.arm, args.json) if args.step == "run" else compare(args.boxed, args.pool)


if __name__ == "__main__":
    sys.exit(main())
