#!/usr/bin/env python
"""Benchmark the GRPO probe on CPU: seconds per GRPO step and peak RSS, against baselines
measured in the same process on the same shapes:

- ``generate``: one ``model.generate`` of the step's rollouts (prompts x n, same max tokens,
  same temperature) with transformers, the CPU engine TRL uses;
- ``fwd+bwd``: one forward + backward pass over the same number of sequences of the same
  total length (the policy-gradient update without GRPO's bookkeeping).

The ratio ``step / (generate + fwd_bwd)`` is TRL's overhead around the two unavoidable parts.
From the measured generation throughput it also projects the probe's share of the pipeline on
the demo pool (probe training + two endpoint inference passes of n rollouts over the pool).
Each model runs in a child process so its peak RSS is its own.

    python tools/bench/bench_probe.py                    # tiny random Llama and SmolLM2-135M
    python tools/bench/bench_probe.py --models tiny-random-llama --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
DEMO_POOL = REPO / "trajval_ops" / "data" / "demo_math_pool.jsonl"


def bench_one(model_ref: str, steps: int, prompts: int, n: int, max_tokens: int, micro: int) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajval_ops.models import resolve_model
    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.run import run_probe
    from trajval_ops.rollout.prompts import build_messages, render_prompt

    from trajval_ops.pools.io import read_rows

    rows = list(read_rows(DEMO_POOL))[: prompts * steps]
    # the real thing first (so peak RSS is the probe's own): run_probe for `steps` steps, one epoch
    config = ProbeConfig(model=model_ref, epochs=1, prompts_per_batch=prompts, num_generations=n,
                         micro_batch_size=micro, max_completion_length=max_tokens,
                         verifier_options={"fallback_last_number": True})
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Wall time of each optimizer step (generation + loss + update; no load or save)."""

        def __init__(self):
            self.marks = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

    clock = StepClock()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        manifest = run_probe(rows, [str(i) for i in range(len(rows))], config, Path(tmp) / "probe",
                             show_progress=False, extra_callbacks=[clock])
        total_s = time.perf_counter() - start
    step_times = [b - a for a, b in zip(clock.marks, clock.marks[1:])]
    peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    path = resolve_model(model_ref)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(0)

    # baseline 1: generation of one step's rollouts
    texts = [render_prompt(tokenizer, build_messages(row)) for row in rows[:prompts]]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    generate_s = []
    for _ in range(2):
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 max_new_tokens=max_tokens, num_return_sequences=n,
                                 pad_token_id=tokenizer.pad_token_id)
        generate_s.append(time.perf_counter() - start)
    completions = prompts * n
    sequence_length = out.shape[1]

    # baseline 2: forward + backward over the same sequences, in micro-batches like the trainer
    fwd_bwd_s = []
    for _ in range(2):
        start = time.perf_counter()
        for first in range(0, completions, micro):
            chunk = out[first:first + micro]
            loss = model(input_ids=chunk, labels=chunk).loss
            loss.backward()
        model.zero_grad(set_to_none=True)
        fwd_bwd_s.append(time.perf_counter() - start)
    params_m = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)

    return {
        "model": model_ref,
        "params_m": params_m,
        "steps": steps, "prompts_per_step": prompts, "n": n, "max_tokens": max_tokens,
        "sequence_length": sequence_length,
        "generate_s": min(generate_s), "fwd_bwd_s": min(fwd_bwd_s),
        "probe_wall_s": total_s, "probe_train_s": manifest["wall_time_s"],
        "step_s": statistics.median(step_times), "step_times_s": step_times,
        "peak_rss_gb": peak_rss_gb,
        "train_reward_per_epoch": manifest["train_reward_per_epoch"],
    }


def report(r: dict) -> None:
    baseline = r["generate_s"] + r["fwd_bwd_s"]
    print(f"\n== {r['model']} ({r['params_m']}M params), {r['prompts_per_step']} prompts x n={r['n']}, "
          f"{r['max_tokens']} new tokens, {r['steps']} steps")
    print(f"  GRPO step            {r['step_s']:8.2f} s   (median of {len(r['step_times_s'])} steps;"
          f" whole probe incl. load and saves {r['probe_wall_s']:.1f} s; peak RSS {r['peak_rss_gb']:.2f} GB)")
    print(f"  generate (baseline)  {r['generate_s']:8.2f} s")
    print(f"  fwd+bwd  (baseline)  {r['fwd_bwd_s']:8.2f} s")
    print(f"  step / (generate + fwd+bwd) = {r['step_s'] / baseline:.2f}x")


def project(r: dict, pool_size: int, probe_fraction: float, epochs: int) -> None:
    # projection: probe = |P| prompts x epochs, each prompt costs a step's share; endpoint
    # passes = 2 x pool prompts x n rollouts at the measured generation throughput.
    from trajval_ops.probe.probe_set import probe_size_for

    probe_prompts = probe_size_for(pool_size, probe_fraction=probe_fraction)
    per_prompt_train = r["step_s"] / r["prompts_per_step"]
    per_prompt_generate = r["generate_s"] / r["prompts_per_step"]
    probe_s = probe_prompts * epochs * per_prompt_train
    endpoint_s = 2 * pool_size * per_prompt_generate
    print(f"  projection on a {pool_size}-row pool, |P|={probe_prompts}, T={epochs}: probe {probe_s:.0f} s, "
          f"two endpoint passes {endpoint_s:.0f} s -> probe share {probe_s / (probe_s + endpoint_s):.0%}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny-random-llama", "smollm2-135m-instruct"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per GRPO step")
    parser.add_argument("--n", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--micro", type=int, default=8, help="completions per forward/backward")
    parser.add_argument("--epochs", type=int, default=20, help="T for the projection")
    parser.add_argument("--probe-fraction", type=float, default=512 / 17398, help="|P| share for the projection")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = bench_one(args.child, args.steps, args.prompts, args.n, args.max_tokens, args.micro)
        print("RESULT " + json.dumps(result))
        return 0
    with open(DEMO_POOL) as handle:
        pool_size = sum(1 for line in handle if line.strip())
    for model in args.models:
        cmd = [sys.executable, __file__, "--child", model, "--steps", str(args.steps), "--prompts", str(args.prompts),
               "--n", str(args.n), "--max-tokens", str(args.max_tokens), "--micro", str(args.micro)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode or not lines:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        result = json.loads(lines[-1][len("RESULT "):])
        report(result)
        for size in (pool_size, 17398):  # the demo pool, and the paper's pool size
            project(result, size, args.probe_fraction, args.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
