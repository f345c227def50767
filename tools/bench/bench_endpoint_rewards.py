"""Benchmark: the endpoint-reward mapper against the raw engine's generate, in the same run.

1. raw engine: ``engine.generate`` on the rendered prompts, in the mapper's chunks (the baseline);
2. the operator in-process (``process_batched``, model already loaded, no cache): the same
   prompts, seeds and chunks, so the same sampling work; overhead = prompting, verification,
   cache writes and bookkeeping, as a fraction of the engine's generate time;
3. (``--dj-process``) the operator through ``dj-process`` on the same pool: wall time including
   Data-Juicer start-up and model load, and from the worker's log the operator's throughput
   there (process_batched time without the engine start) against its generate time and
   against the raw generate of step 1.

    python tools/bench/bench_endpoint_rewards.py --engine transformers --rows 16 --n 8
    /work/venv-vllm/bin/python tools/bench/bench_endpoint_rewards.py --engine vllm --rows 16 --n 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROBLEMS = [
    ("What is 2 + 3?", "5"), ("What is 7 - 4?", "3"), ("What is 3 * 3?", "9"),
    ("What is 10 + 10?", "20"), ("What is 8 / 2?", "4"), ("What is 1 + 1?", "2"),
    ("What is 6 + 1?", "7"), ("What is 5 * 2?", "10"),
]


def make_rows(count: int) -> list[dict]:
    return [{"id": f"q{i}", "prompt": f"{PROBLEMS[i % len(PROBLEMS)][0]} (problem {i})",
             "reward_model": {"ground_truth": PROBLEMS[i % len(PROBLEMS)][1]}} for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--engine", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-generate", type=int, default=4)
    parser.add_argument("--enforce-eager", action="store_true", help="(vllm) skip compilation")
    parser.add_argument("--dj-process", action="store_true", help="also time the operator under dj-process")
    args = parser.parse_args()

    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
    from trajval_ops.rollout.prompts import build_messages, render_prompt

    rows = make_rows(args.rows)
    workdir = Path(tempfile.mkdtemp(prefix="bench_endpoint_"))
    op = TrajvalEndpointRewardMapper(
        model=args.model, output_key="acc", engine=args.engine, n=args.n,
        max_new_tokens=args.max_new_tokens, prompts_per_generate=args.prompts_per_generate,
        verifier_options={"fallback_last_number": True}, cache_dir=str(workdir / "rollouts"),
        enforce_eager=args.enforce_eager, max_model_len=1024,
    )
    start = time.perf_counter()
    op._prepare()
    engine = op._ensure_engine()
    load_s = time.perf_counter() - start

    # 1. raw engine, same chunks and seeds as the operator
    prompts = [render_prompt(engine.tokenizer, build_messages(row)) for row in rows]
    tokens_before = engine.generated_tokens
    start = time.perf_counter()
    for first in range(0, len(prompts), args.prompts_per_generate):
        engine.generate(prompts[first:first + args.prompts_per_generate], op.sampling)
    raw_s = time.perf_counter() - start
    tokens = engine.generated_tokens - tokens_before

    # 2. the operator on a fresh cache (every row sampled)
    batch = {key: [row[key] for row in rows] for key in rows[0]}
    start = time.perf_counter()
    out = op.process_batched(batch)
    op_s = time.perf_counter() - start
    generate_s = op._stats["generate_s"]
    op.release()
    completions = args.rows * args.n
    figures = {
        "engine": args.engine, "model": args.model, "rows": args.rows, "n": args.n,
        "max_new_tokens": args.max_new_tokens, "prompts_per_generate": args.prompts_per_generate,
        "model_load_s": round(load_s, 1),
        "raw_generate_s": round(raw_s, 2), "raw_completions_per_s": round(completions / raw_s, 2),
        "raw_tokens_per_s": round(tokens / raw_s, 1),
        "operator_s": round(op_s, 2), "operator_completions_per_s": round(completions / op_s, 2),
        "operator_generate_s": round(generate_s, 2),
        "operator_overhead_vs_its_generate": round((op_s - generate_s) / generate_s, 4),
        "operator_time_vs_raw_generate": round(op_s / raw_s, 3),
        "mean_pass_rate": round(sum(out["acc"]) / len(out["acc"]), 3),
    }

    if args.dj_process:
        figures.update(run_dj_process(args, rows, workdir, raw_s))
    print(json.dumps(figures, indent=2))


def run_dj_process(args, rows, workdir: Path, raw_s: float) -> dict:
    """Wall time of dj-process and, from the operator's log lines, its throughput there."""
    import re

    import yaml

    pool = workdir / "pool.jsonl"
    pool.write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = {
        "project_name": "bench_endpoint_rewards", "dataset_path": str(pool),
        "export_path": str(workdir / "out" / "scored.jsonl"), "np": 1, "text_keys": None,
        "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_endpoint_reward_mapper": {
            "model": args.model, "output_key": "acc", "engine": args.engine, "n": args.n,
            "max_new_tokens": args.max_new_tokens, "prompts_per_generate": args.prompts_per_generate,
            "verifier_options": {"fallback_last_number": True}, "enforce_eager": args.enforce_eager,
            "max_model_len": 1024, "cache_dir": str(workdir / "rollouts_dj"),
        }}],
    }
    path = workdir / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    dj = Path(sys.executable).with_name("dj-process")
    start = time.perf_counter()
    result = subprocess.run([str(dj), "--config", str(path)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"dj-process failed:\n{result.stderr[-3000:]}")
    log = result.stdout + result.stderr
    engine_start_s = float(re.search(r" engine: .*\((?:started|loaded) in ([\d.]+) s", log).group(1))
    # the worker's last batch line: completions so far, seconds in generate and in the operator
    *_, last = re.finditer(r"\[acc\]: batch of .* so far (\d+) completions, ([\d.]+) s in generate, "
                           r"([\d.]+) s in the operator", log)
    completions, generate_s, operator_s = int(last.group(1)), float(last.group(2)), float(last.group(3))
    return {"dj_process_wall_s": round(wall, 1),
            "dj_process_completions_per_s_wall": round(completions / wall, 2),
            "dj_process_engine_start_s": engine_start_s,
            "dj_process_operator_s": operator_s, "dj_process_generate_s": generate_s,
            "dj_process_operator_completions_per_s": round(completions / operator_s, 2),
            "dj_process_operator_overhead_vs_its_generate": round((operator_s - generate_s) / generate_s, 4),
            "dj_process_operator_time_vs_raw_generate": round(operator_s / raw_s, 3)}

if __name__ == "__main__":
    main()
