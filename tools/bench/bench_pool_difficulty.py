#!/usr/bin/env python
"""A model's base pass rates per family/tier on one split of a generated pool: the tuning study
that chooses a real model's task mix (docs/validation.md, "A real model").

It rolls out one split: a file ``trajval make-pool --splits`` wrote (``--split-file``), or
``--split`` (default ``tuning``) of the splits ``trajval make-pool --mix MIX --splits SPLITS
--seed SEED`` would write, generated in memory (:func:`trajval_ops.pools.generate.generate_splits`).
The rollouts are the project's endpoint pass (``RolloutPass``, the transformers engine, the chat
template, the given verifier). A held-out split is refused: choices made on it would leak into the
evaluation.

It prints, per family/tier and in all: tasks, mean pass rate, the share of tasks strictly
between 0 and 1 (the groups GRPO learns from), all-0 and all-1 tasks, mean completion tokens,
the share of hits found by the last-number fallback, the share of completions cut at
``--max-new-tokens``, and the throughput; ``--json`` writes them.

    python tools/bench/bench_pool_difficulty.py --mix "basic_arithmetic/easy=1,chain_sum/easy=1" \\
        --splits tuning=64 --seed 0 --n 8 --max-new-tokens 128
    python tools/bench/bench_pool_difficulty.py --split-file recipes/data/real_smollm2/tuning.jsonl
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: The split the study must never read (docs/validation.md: the held-out split is for evaluation only).
HELDOUT = "heldout"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model reference (trajval_ops.models)")
    parser.add_argument("--split-file", help="a split file trajval make-pool --splits wrote (instead of --mix and "
                        "--splits); a file of held-out rows (extra_info.split) is refused")
    parser.add_argument("--mix", help="family/tier=share,... (as trajval make-pool --mix)")
    parser.add_argument("--splits", help="name=size,... (as trajval make-pool --splits)")
    parser.add_argument("--seed", type=int, default=0, help="the pool's seed (as trajval make-pool --seed)")
    parser.add_argument("--no-answer-instruction", action="store_true",
                        help="(with --mix) questions without the \\boxed{} instruction (as trajval make-pool "
                             "--no-answer-instruction)")
    parser.add_argument("--split", default="tuning", help="the split rolled out (default tuning)")
    parser.add_argument("--n", type=int, default=8, help="rollouts per task")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rollout-seed", type=int, default=0, help="seed of the samples")
    parser.add_argument("--verifier", default="math")
    parser.add_argument("--no-fallback", action="store_true",
                        help="score \\boxed{} answers only (default: the last number when no \\boxed{})")
    parser.add_argument("--prompts-per-generate", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--dtype", default="auto", help="engine dtype (auto: bf16 where supported)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if (args.split_file is None) == (args.mix is None or args.splits is None):
        parser.error("give --split-file, or --mix and --splits")
    if args.split_file and args.no_answer_instruction:
        parser.error("--no-answer-instruction shapes generated questions; a --split-file has its own")
    if args.split == HELDOUT:
        parser.error(f"--split {HELDOUT}: the held-out split is for the evaluation only; tune on another split")
    return args


def summarise(rates: list[float]) -> dict:
    n = len(rates)
    return {"tasks": n, "mean": sum(rates) / n if n else None,
            "between": sum(0 < r < 1 for r in rates) / n if n else None,
            "all_zero": sum(r == 0 for r in rates), "all_one": sum(r == 1 for r in rates)}


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from trajval_ops.models import resolve_model
    from trajval_ops.pools.generate import generate_splits, parse_mix, parse_splits
    from trajval_ops.pools.identity import PROMPT_HASH
    from trajval_ops.pools.io import read_rows
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.pass_rates import RolloutPass, pass_rate
    from trajval_ops.rollout.session import EngineSession
    from trajval_ops.rollout.verifiers import build_verifier

    torch.set_num_threads(args.threads)
    if args.split_file:
        rows = list(read_rows(args.split_file))
        if any(row.get("extra_info", {}).get("split") == HELDOUT for row in rows):
            raise SystemExit(f"{args.split_file} holds held-out rows (extra_info.split); tune on another split")
    else:
        splits = parse_splits(args.splits)
        if args.split not in splits:
            raise SystemExit(f"--split {args.split!r} is not one of --splits {list(splits)}")
        rows = generate_splits(parse_mix(args.mix), splits, args.seed,
                               answer_instruction=not args.no_answer_instruction)[args.split]
    options = {} if args.no_fallback else {"fallback_last_number": True}
    verifier = build_verifier(args.verifier, **options)
    decoding = DecodingConfig(n=args.n, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                              seed=args.rollout_seed)
    start = time.perf_counter()
    with EngineSession("transformers", resolve_model(args.model), torch_threads=args.threads,
                       dtype=args.dtype) as session:
        rollout = RolloutPass(session, decoding, verifier, prompts_per_generate=args.prompts_per_generate,
                              keep_completions=True, what="tuning study")
        results = rollout.results(rows, 0)
        engine = f"{session.name} {session.dtype}"
        # completions that reached the length limit (cut mid-answer: what max_new_tokens costs)
        at_limit = sum(len(session.tokenizer.encode(text, add_special_tokens=False)) >= args.max_new_tokens
                       for result in results for text in result["completions"])
    verifier.close()
    wall = time.perf_counter() - start

    by_bucket: dict[str, list[float]] = defaultdict(list)
    tokens: dict[str, int] = defaultdict(int)
    methods: Counter = Counter()
    for row, result in zip(rows, results):
        key = f"{row['extra_info']['family']}/{row['extra_info']['difficulty']}"
        by_bucket[key].append(pass_rate(result))
        tokens[key] += result["cost"]["generated_tokens"]
        methods.update(m for m, reward in zip(result["methods"], result["rewards"]) if reward)
    every = [r for key in by_bucket for r in by_bucket[key]]
    completions = len(rows) * args.n
    report = {
        "model": args.model, "engine": engine, "split_file": args.split_file, "mix": args.mix,
        "splits": args.splits, "seed": args.seed, "split": args.split,
        "answer_instruction": None if args.split_file else not args.no_answer_instruction,
        "n": args.n, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
        "verifier": args.verifier, "verifier_options": options, "threads": args.threads,
        "buckets": {key: summarise(rates) | {"mean_tokens": tokens[key] / (len(rates) * args.n)}
                    for key, rates in sorted(by_bucket.items())},
        "all": summarise(every) | {"mean_tokens": sum(tokens.values()) / completions},
        # what the study read: no later split may hold it (trajval make-pool --exclude)
        "prompt_hashes": [row[PROMPT_HASH] for row in rows],
        "hits_by_method": dict(methods), "completions": completions, "at_limit": at_limit / completions,
        "wall_s": round(wall, 1),
        "completions_per_s": round(completions / rollout.counters.generate_s, 2),
    }
    source = args.split_file or f"split {args.split!r} of {args.splits} seed {args.seed}"
    print(f"{args.model} ({engine}, {args.threads} thread(s)), {source}, {len(rows)} tasks, "
          f"n = {args.n}, T = {args.temperature}, max_new_tokens {args.max_new_tokens}, verifier {args.verifier} "
          f"{options or ''}{'' if not args.no_answer_instruction else ', no answer instruction'}")
    print(f"{'family/tier':26s} {'tasks':>5s} {'mean':>6s} {'in (0,1)':>8s} {'all-0':>5s} {'all-1':>5s} {'tokens':>6s}")
    for key, s in list(report["buckets"].items()) + [("all", report["all"])]:
        print(f"{key:26s} {s['tasks']:5d} {s['mean']:6.3f} {s['between']:8.2f} {s['all_zero']:5d} {s['all_one']:5d} "
              f"{s['mean_tokens']:6.1f}")
    hits = sum(methods.values())
    print(f"hits by answer form: {dict(methods)} ({methods.get('last_number', 0) / hits if hits else 0:.0%} by the "
          f"last-number fallback)")
    print(f"{at_limit / completions:.1%} of the completions reached max_new_tokens")
    print(f"{completions} completions in {wall:.0f} s ({report['completions_per_s']} completions/s while generating)")
    if args.json:
        from trajval_ops.atomic import write_json

        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
