"""Benchmark: the endpoint-reward mapper against a bare ``model.generate`` loop, in the same run.

Every measurement runs in its own process, one after the other (never two at once), on the
same rows, chunks (``--prompts-per-generate`` prompts x n completions per generate call) and
sampling settings:

1. ``bare``: the baseline. transformers' ``AutoModelForCausalLM.generate`` in a plain loop over
   the rendered prompts (no verification, no cache, no Data-Juicer), once per torch thread
   count in ``--threads``;
2. ``engine``: the same loop through the project's engine (``TransformersEngine.generate``)
   and then the operator in-process (``process_batched``, fresh cache): the operator's own
   overhead (prompting, verification, cache writes) as a share of its generate time;
3. ``--dj-process``: the operator through ``dj-process`` on the same rows, for each
   ``--dj-configs`` entry ``NP:THREADS`` (Data-Juicer worker processes x torch threads each):
   wall time, and from the worker log the operator's completions/s (without engine start-up),
   printed as a ratio against the bare loop with as many torch threads as the workers have in
   all (the same cores).

``--repeats`` rounds (default 3) run every measurement once each, interleaved; the figures are
medians with their range, the ratios medians over medians (one process against another moved
by 15% on shared cores).

    python tools/bench/bench_endpoint_rewards.py --model tiny-arith \\
        --pool trajval_ops/data/demo_arith_pool.jsonl --rows 600 --n 16 --max-new-tokens 8 \\
        --prompts-per-generate 64 --dj-process               # the demo's endpoint pass
    python tools/bench/bench_endpoint_rewards.py --rows 16 --n 8          # SmolLM2, 64 tokens
    python tools/bench/bench_endpoint_rewards.py --engine vllm --rows 16 --n 8 --dj-process --dj-configs 1:2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROBLEMS = [
    ("What is 2 + 3?", "5"), ("What is 7 - 4?", "3"), ("What is 3 * 3?", "9"),
    ("What is 10 + 10?", "20"), ("What is 8 / 2?", "4"), ("What is 1 + 1?", "2"),
    ("What is 6 + 1?", "7"), ("What is 5 * 2?", "10"),
]
VERIFIER_OPTIONS = {"fallback_last_number": True}


def load_rows(pool: str | None, count: int) -> list[dict]:
    if pool is None:
        return [{"id": f"q{i}", "prompt": f"{PROBLEMS[i % len(PROBLEMS)][0]} (problem {i})",
                 "reward_model": {"ground_truth": PROBLEMS[i % len(PROBLEMS)][1]}} for i in range(count)]
    from trajval_ops.pools.io import read_rows

    rows = []
    for row in read_rows(pool):
        if len(rows) == count:
            break
        rows.append(row)
    if len(rows) < count:
        raise SystemExit(f"{pool} has {len(rows)} rows, fewer than --rows {count}")
    return rows


def rendered_prompts(tokenizer, rows: list[dict], template: str) -> list[str]:
    from trajval_ops.rollout.prompts import build_messages, render_prompt

    return [render_prompt(tokenizer, build_messages(row, template)) for row in rows]


def chunks(items: list, size: int):
    for first in range(0, len(items), size):
        yield items[first:first + size]


def measure_bare(args, rows) -> dict:
    """The baseline: transformers' generate in a plain loop, as a user would write it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajval_ops.hardware import auto_dtype
    from trajval_ops.models import resolve_model

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, auto_dtype("cpu"))).eval()
    prompts = rendered_prompts(tokenizer, rows, args.template)
    torch.manual_seed(0)
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for chunk in chunks(prompts, args.prompts_per_generate):
            inputs = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            output = model.generate(**inputs, do_sample=True, temperature=1.0, top_p=1.0, top_k=None,
                                    num_return_sequences=args.n, max_new_tokens=args.max_new_tokens,
                                    pad_token_id=tokenizer.pad_token_id)
            tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    seconds = time.perf_counter() - start
    return {"threads": args.threads, "generate_s": round(seconds, 3),
            "completions_per_s": round(len(rows) * args.n / seconds, 1),
            "cpu_share": round((time.process_time() - cpu_start) / seconds, 3)}  # cores this process got


def measure_engine(args, rows, workdir: Path) -> dict:
    """The project's engine on the same chunks, then the operator in-process on a fresh cache."""
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    op = TrajvalEndpointRewardMapper(
        model=args.model, output_key="acc", engine=args.engine, n=args.n, template=args.template,
        max_new_tokens=args.max_new_tokens, prompts_per_generate=args.prompts_per_generate,
        verifier_options=VERIFIER_OPTIONS, cache_dir=str(workdir / "rollouts"), torch_threads=args.threads,
        enforce_eager=args.enforce_eager, max_model_len=1024,
    )
    start = time.perf_counter()
    op.endpoint._prepare()
    session = op.endpoint._ensure_session()
    load_s = time.perf_counter() - start
    prompts = rendered_prompts(session.tokenizer, rows, args.template)
    start = time.perf_counter()
    for chunk in chunks(prompts, args.prompts_per_generate):
        session.generate(chunk, op.endpoint.decoding)
    engine_s = time.perf_counter() - start
    batch = {key: [row.get(key) for row in rows] for key in rows[0]}
    start = time.perf_counter()
    out = op.process_batched(batch)
    op_s = time.perf_counter() - start
    generate_s = op.endpoint.stats["generate_s"]
    op.release()
    completions = len(rows) * args.n
    return {"threads": args.threads, "model_load_s": round(load_s, 1),
            "engine_generate_s": round(engine_s, 3), "engine_completions_per_s": round(completions / engine_s, 1),
            "operator_s": round(op_s, 3), "operator_completions_per_s": round(completions / op_s, 1),
            "operator_overhead_vs_its_generate": round((op_s - generate_s) / generate_s, 4),
            "mean_pass_rate": round(sum(out["acc"]) / len(out["acc"]), 3)}


def measure_dj_process(args, rows, workdir: Path, num_proc: int, threads: int) -> dict:
    """dj-process on the rows: wall time, and the operator's throughput from the worker logs."""
    import yaml

    run = workdir / f"dj-np{num_proc}-t{threads}"
    run.mkdir(parents=True)
    pool = run / "pool.jsonl"
    pool.write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = {
        "project_name": "bench_endpoint_rewards", "dataset_path": str(pool),
        "export_path": str(run / "out" / "scored.jsonl"), "np": num_proc, "text_keys": None,
        "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_endpoint_reward_mapper": {
            "model": args.model, "output_key": "acc", "engine": args.engine, "n": args.n,
            "template": args.template, "max_new_tokens": args.max_new_tokens,
            "prompts_per_generate": args.prompts_per_generate, "verifier_options": VERIFIER_OPTIONS,
            "enforce_eager": args.enforce_eager, "max_model_len": 1024, "cache_dir": str(run / "rollouts"),
            "num_proc": num_proc, "torch_threads": threads,
        }}],
    }
    path = run / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    from trajval_ops.commands import dj_process_path

    dj = dj_process_path()
    start = time.perf_counter()
    result = subprocess.run([str(dj), "--config", str(path)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"dj-process failed:\n{result.stderr[-3000:]}")
    log = result.stdout + result.stderr
    # each worker's last batch line: its completions, seconds in generate and in the operator
    last: dict[str, tuple[int, float, float]] = {}
    for match in re.finditer(r"\[acc\]: batch of .* so far in worker (\d+) (\d+) completions, ([\d.]+) s in generate, "
                             r"([\d.]+) s in the operator", log):
        last[match.group(1)] = (int(match.group(2)), float(match.group(3)), float(match.group(4)))
    if not last:
        raise SystemExit("no batch line of the operator in dj-process's log")
    completions = sum(v[0] for v in last.values())
    generate_s = max(v[1] for v in last.values())
    operator_s = max(v[2] for v in last.values())  # workers run side by side: the slowest bounds it
    return {"np": num_proc, "threads": threads, "wall_s": round(wall, 1),
            "completions_per_s_wall": round(completions / wall, 1),
            "operator_s": operator_s, "generate_s": generate_s,
            "operator_completions_per_s": round(completions / operator_s, 1)}


def in_subprocess(argv: list[str]) -> dict:
    result = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"measurement {argv} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--engine", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument("--pool", default=None, help="JSONL pool to take the rows from (default: built-in problems)")
    parser.add_argument("--template", default="auto")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-generate", type=int, default=4)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads of the baselines")
    parser.add_argument("--enforce-eager", action="store_true", help="(vllm) skip compilation")
    parser.add_argument("--dj-process", action="store_true", help="also time the operator under dj-process")
    parser.add_argument("--dj-configs", nargs="+", default=["1:1", "1:2", "2:1"],
                        help="NP:THREADS per dj-process run (worker processes x torch threads each)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of every measurement; medians and ranges are reported")
    parser.add_argument("--measure", choices=["bare", "engine"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    rows = load_rows(args.pool, args.rows)
    if args.measure:  # one measurement in this process (called by the driver below)
        args.threads = args.threads[0]
        workdir = Path(tempfile.mkdtemp(prefix="bench_endpoint_"))
        figures = measure_bare(args, rows) if args.measure == "bare" else measure_engine(args, rows, workdir)
        print(json.dumps(figures))
        return

    passthrough = [a for a in sys.argv[1:] if a not in ("--dj-process",)]
    passthrough = _without_option(_without_option(_without_option(passthrough, "--threads"), "--dj-configs"),
                                  "--repeats")
    completions = args.rows * args.n
    dj_configs = [tuple(int(x) for x in spec.split(":")) for spec in args.dj_configs] if args.dj_process else []
    # Round after round, every measurement once per round, each in its own process: a single
    # process-to-process comparison moved by 15% on these shared cores, the medians do not.
    rounds: dict[str, list[dict]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench_endpoint_dj_"))
    for round_index in range(args.repeats):
        for threads in args.threads:
            if args.engine == "transformers":
                rounds.setdefault(f"bare/{threads}", []).append(
                    in_subprocess([*passthrough, "--measure", "bare", "--threads", str(threads)]))
            rounds.setdefault(f"engine/{threads}", []).append(
                in_subprocess([*passthrough, "--measure", "engine", "--threads", str(threads)]))
        for num_proc, threads in dj_configs:
            rounds.setdefault(f"dj/{num_proc}:{threads}", []).append(
                measure_dj_process(args, rows, workdir / f"round{round_index}", num_proc, threads))
    figures: dict = {"model": args.model, "engine": args.engine, "rows": args.rows, "n": args.n,
                     "completions": completions, "max_new_tokens": args.max_new_tokens,
                     "prompts_per_generate": args.prompts_per_generate, "repeats": args.repeats,
                     "bare": {}, "engine_in_process": {}, "dj_process": []}
    rate = {"bare": "completions_per_s", "engine": "operator_completions_per_s",
            "dj": "operator_completions_per_s"}
    for name, runs in rounds.items():
        kind, config = name.split("/")
        summary = {"median_" + rate[kind]: median([run[rate[kind]] for run in runs]),
                   "range": [min(run[rate[kind]] for run in runs), max(run[rate[kind]] for run in runs)],
                   "runs": runs}
        if kind == "engine":
            summary["median_engine_completions_per_s"] = median([run["engine_completions_per_s"] for run in runs])
            summary["median_operator_overhead_vs_its_generate"] = median(
                [run["operator_overhead_vs_its_generate"] for run in runs])
        if kind == "dj":
            num_proc, threads = (int(x) for x in config.split(":"))
            summary.update(np=num_proc, threads=threads,
                           median_completions_per_s_wall=median([run["completions_per_s_wall"] for run in runs]))
            bare = figures["bare"].get(str(num_proc * threads))
            if bare:  # the same cores: a bare loop with as many torch threads as the workers have in all
                summary[f"operator_vs_bare_{num_proc * threads}_threads"] = round(
                    summary["median_operator_completions_per_s"] / bare["median_completions_per_s"], 3)
            figures["dj_process"].append(summary)
        else:
            figures["bare" if kind == "bare" else "engine_in_process"][config] = summary
    for threads, engine in figures["engine_in_process"].items():
        bare = figures["bare"].get(threads)
        if bare:
            engine["engine_vs_bare_same_threads"] = round(
                engine["median_engine_completions_per_s"] / bare["median_completions_per_s"], 3)
    print(json.dumps(figures, indent=2))


def _without_option(argv: list[str], name: str) -> list[str]:
    """argv without ``name`` and the values that follow it."""
    out, skipping = [], False
    for arg in argv:
        if arg == name:
            skipping = True
            continue
        if skipping and not arg.startswith("--"):
            continue
        skipping = False
        out.append(arg)
    return out


if __name__ == "__main__":
    main()
