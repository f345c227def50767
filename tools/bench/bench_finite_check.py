"""Benchmark: what the transformers engine's non-finite logits check costs a generate call
(:func:`trajval_ops.rollout.engines.finite_logits_check`, used in float16 and for greedy
decoding), against the same ``model.generate`` without it, in the same run.

For each model: ``--prompts`` prompts x ``--n`` completions of exactly ``--new-tokens`` tokens
(``min_new_tokens`` keeps every call the same length), sampled from the same seed, with and
without the check, interleaved over ``--rounds`` rounds; prints the medians and their ratio.
The model runs in float32 (float16 on a CPU would measure torch's slow half-precision kernels,
not the check; the check's work is one max per row and one host read per new token).

    python tools/bench/bench_finite_check.py [--models tiny-arith tiny-random-llama] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def generate_seconds(engine, inputs, options: dict, logits_processor) -> float:
    import torch

    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.inference_mode():
        engine.model.generate(**inputs, **options, logits_processor=logits_processor)
    return time.perf_counter() - start


def measure(model: str, args) -> dict:
    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.engines import TransformersEngine, finite_logits_check

    engine = TransformersEngine(resolve_model(model), dtype="float32", device=args.device, torch_threads=args.threads)
    prompts = [f"What is {i} + {2 * i + 1}? Answer:" for i in range(args.prompts)]
    inputs = engine.tokenizer(prompts, return_tensors="pt", padding=True).to(engine.device)
    options = dict(do_sample=True, num_return_sequences=args.n, max_new_tokens=args.new_tokens,
                   min_new_tokens=args.new_tokens, pad_token_id=engine.tokenizer.pad_token_id)
    check = finite_logits_check("float32", inputs["input_ids"].shape[1])
    generate_seconds(engine, inputs, options, None)  # warm-up, not counted
    times = {"plain": [], "checked": []}
    for _ in range(args.rounds):
        times["plain"].append(generate_seconds(engine, inputs, options, None))
        times["checked"].append(generate_seconds(engine, inputs, options, check))
    plain, checked = (statistics.median(times[name]) for name in ("plain", "checked"))
    return {"model": model, "vocab": engine.model.config.vocab_size, "sequences": args.prompts * args.n,
            "new_tokens": args.new_tokens, "plain_s": round(plain, 4), "checked_s": round(checked, 4),
            "ratio": round(checked / plain, 3), "rounds": times}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny-arith", "tiny-random-llama"])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    results = [measure(model, args) for model in args.models]
    for result in results:
        print(f"{result['model']} (vocab {result['vocab']}, {result['sequences']} sequences x {result['new_tokens']} "
              f"new tokens): without the check {result['plain_s']:.3f} s, with it {result['checked_s']:.3f} s, "
              f"ratio {result['ratio']:.3f} (medians of {args.rounds} rounds)")
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "threads": args.threads, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
