"""Generate a real RL task pool offline with reasoning-gym (verl-style JSONL), or check one.

Examples:
    trajval make-pool --preset math --size 128 --seed 0 --out trajval_ops/data/demo_math_pool.jsonl
    trajval make-pool --preset logic --size 64 --seed 0 --out trajval_ops/data/demo_logic_pool.jsonl
    trajval make-pool --mix "basic_arithmetic/easy=3,gsm_symbolic/hard=1" --size 500 --out pool.jsonl
    trajval make-pool --check trajval_ops/data/demo_math_pool.jsonl
    trajval make-pool --list

Families, tiers and presets are documented in docs/pools.md.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str] | None = None, *, prog: str | None = None) -> argparse.Namespace:
    from trajval_ops.pools.generate import PRESETS

    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", help="JSONL pool to write (atomically)")
    action.add_argument("--check", metavar="POOL",
                        help="re-check every row's ground truth with reasoning-gym's score_answer")
    action.add_argument("--list", action="store_true", help="list families, tiers and presets")
    parser.add_argument("--preset", default="math", choices=sorted(PRESETS), help="preset mix (default math)")
    parser.add_argument("--mix", help="custom mix 'family/tier=share,...' (replaces the preset)")
    parser.add_argument("--size", type=int, default=128, help="number of tasks (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0): same seed, same pool")
    parser.add_argument("--no-answer-instruction", action="store_true",
                        help="do not append the \\boxed{} / <answer> instruction to each question")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0; 1 when ``--check`` finds rows that fail; 2 on a bad mix or size."""
    args = parse_args(argv, prog=prog)
    from trajval_ops.pools.io import write_rows
    from trajval_ops.pools.generate import FAMILIES, PRESETS, check_row, generate_pool, mix_summary, preset_mix
    from trajval_ops.pools.io import read_rows
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.rows import row_label

    if args.list:
        for name, family in FAMILIES.items():
            print(f"{name:22s} {family.domain:6s} {family.category:13s} tiers: {', '.join(family.tiers)}")
        for name, mix in PRESETS.items():
            print(f"preset {name}: " + ", ".join(f"{f}/{t}={s:g}" for (f, t), s in mix.items()))
        return 0
    if args.check:
        failures = [row_label(row, i) for i, row in enumerate(read_rows(args.check)) if check_row(row) != 1.0]
        if failures:
            print(f"{len(failures)} rows fail reasoning-gym's score_answer: {', '.join(failures[:10])}", file=sys.stderr)
            return 1
        print(f"all rows of {args.check} verify with reasoning-gym")
        return 0
    try:
        rows = generate_pool(preset_mix(args.preset, args.mix), args.size, args.seed,
                             answer_instruction=not args.no_answer_instruction)
    except (ValueError, TrajvalInputError) as err:
        print(f"make_pool: error: {err}", file=sys.stderr)
        return 2
    write_rows(args.out, rows)
    print(f"wrote {len(rows)} tasks to {args.out}: {mix_summary(rows)}")
    return 0
