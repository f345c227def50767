"""Generate a real RL task pool offline with reasoning-gym (verl-style JSONL), or check one.

Examples:
    trajval make-pool --preset math --size 48 --seed 0 --out trajval_ops/data/demo_math_pool.jsonl
    trajval make-pool --preset logic --size 64 --seed 0 --out trajval_ops/data/demo_logic_pool.jsonl
    trajval make-pool --mix "basic_arithmetic/easy=3,gsm_symbolic/hard=1" --size 500 --out pool.jsonl
    trajval make-pool --preset math --splits pool=512,heldout=256,tuning=128 --seed 0 --out pools/math
    trajval make-pool --check trajval_ops/data/demo_math_pool.jsonl
    trajval make-pool --list

Families, tiers and presets are documented in docs/pools.md.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_SIZE = 128
#: written after the split files, so its presence says the set is complete
SPLITS_MANIFEST = "splits.json"


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.pools.generate import PRESETS

    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", help="JSONL pool to write (atomically); with --splits, the folder of the split files")
    action.add_argument("--check", metavar="POOL",
                        help="re-check every row's ground truth with reasoning-gym's score_answer")
    action.add_argument("--list", action="store_true", help="list families, tiers and presets")
    parser.add_argument("--preset", default="math", choices=sorted(PRESETS), help="preset mix (default math)")
    parser.add_argument("--mix", help="custom mix 'family/tier=share,...' (replaces the preset)")
    parser.add_argument("--size", type=int, help=f"number of tasks (default {DEFAULT_SIZE})")
    parser.add_argument("--splits", metavar="NAME=SIZE,...",
                        help="disjoint splits (by prompt and id) of one generated pool, each with the mix's "
                             "shares, e.g. pool=512,heldout=256,tuning=128: --out DIR gets DIR/<name>.jsonl "
                             f"per split and DIR/{SPLITS_MANIFEST} (sizes, mix, seed) last")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0): same seed, same pool")
    parser.add_argument("--exclude", action="append", default=[], metavar="POOL",
                        help="draw no task whose prompt is in this pool file (repeatable; e.g. the tasks a "
                             "tuning study already read, so that no later split holds them)")
    parser.add_argument("--no-answer-instruction", action="store_true",
                        help="do not append the \\boxed{} / <answer> instruction to each question")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0; 1 when ``--check`` finds rows that fail; 2 on a bad mix or size."""
    args = parser(prog).parse_args(argv)
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.pools.generate import (
        FAMILIES,
        PRESETS,
        generate_pool,
        mix_summary,
        preset_mix,
    )
    from trajval_ops.atomic import check_outputs_spare_inputs
    from trajval_ops.errors import first_few
    from trajval_ops.pools.io import read_rows, write_rows
    from trajval_ops.rows import row_label

    if args.list:
        for name, family in FAMILIES.items():
            print(f"{name:22s} {family.domain:6s} {family.category:13s} tiers: {', '.join(family.tiers)}")
        for name, mix in PRESETS.items():
            print(f"preset {name}: " + ", ".join(f"{f}/{t}={s:g}" for (f, t), s in mix.items()))
        return 0
    if args.check:
        try:
            failures = [row_label(row, i) for i, row in enumerate(read_rows(args.check)) if _checked(row, i) != 1.0]
        except TrajvalInputError as err:
            print(f"make_pool: error: --check {args.check}: {err}", file=sys.stderr)
            return 2
        if failures:
            print(f"{len(failures)} rows fail reasoning-gym's score_answer: {first_few(failures, 10)}", file=sys.stderr)
            return 1
        print(f"all rows of {args.check} verify with reasoning-gym")
        return 0
    if args.splits is not None:
        return _write_splits(args)
    try:
        check_outputs_spare_inputs({"--out": args.out}, excluded_inputs(args.exclude))
        exclude, excluded_generated, excluded_others = read_excluded(args.exclude)
        rows = generate_pool(preset_mix(args.preset, args.mix), DEFAULT_SIZE if args.size is None else args.size,
                             args.seed, answer_instruction=not args.no_answer_instruction, exclude=exclude)
        if args.exclude:
            measure_shared_problems({"pool": rows}, excluded_generated, excluded_others)
    except (ValueError, TrajvalInputError) as err:
        print(f"make_pool: error: {err}", file=sys.stderr)
        return 2
    write_rows(args.out, rows)
    print(f"wrote {len(rows)} tasks to {args.out}: {mix_summary(rows)}")
    return 0


def _checked(row: dict, position: int) -> float:
    """reasoning-gym's score of one row of ``--check``; a row ``trajval make-pool`` did not
    generate (no ``extra_info.generator``, an unknown family) is a user error naming it."""
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.pools.generate import check_row
    from trajval_ops.rows import row_label

    try:
        return check_row(row)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise TrajvalInputError(f"{row_label(row, position)} is not a row trajval make-pool generated (it regenerates "
                                f"each row from extra_info.generator): {type(err).__name__}: {err}") from None


def _write_splits(args: argparse.Namespace) -> int:
    """``--splits``: every split generated (and every error raised) before any file is written;
    each file written atomically, the manifest last."""
    from pathlib import Path

    from trajval_ops.atomic import check_outputs_spare_inputs, write_json
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.pools.generate import (
        REASONING_GYM_VERSION,
        generate_splits,
        mix_summary,
        parse_splits,
        preset_mix,
    )
    from trajval_ops.pools.io import write_rows

    try:
        if args.size is not None:
            raise ValueError("--size and --splits exclude each other (the splits' sizes are the pool's)")
        splits = parse_splits(args.splits)
        folder = Path(args.out)
        if folder.suffix in (".jsonl", ".json", ".parquet"):
            raise ValueError(f"with --splits, --out names a folder (it gets <name>.jsonl per split), got {args.out}")
        if folder.exists() and not folder.is_dir():  # checked before the splits are generated, not at mkdir
            raise ValueError(f"with --splits, --out names a folder (it gets <name>.jsonl per split); "
                             f"{args.out} is an existing file")
        check_outputs_spare_inputs({**{f"--splits file {name}.jsonl": folder / f"{name}.jsonl" for name in splits},
                                    f"--splits manifest {SPLITS_MANIFEST}": folder / SPLITS_MANIFEST},
                                   excluded_inputs(args.exclude))
        mix = preset_mix(args.preset, args.mix)
        exclude, excluded_generated, excluded_others = read_excluded(args.exclude)
        rows = generate_splits(mix, splits, args.seed, answer_instruction=not args.no_answer_instruction,
                               exclude=exclude)
        shared = measure_shared_problems(rows, excluded_generated, excluded_others)
    except (ValueError, TrajvalInputError) as err:
        print(f"make_pool: error: {err}", file=sys.stderr)
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / SPLITS_MANIFEST
    manifest.unlink(missing_ok=True)  # the set is incomplete until it is written again
    for name, split_rows in rows.items():
        write_rows(folder / f"{name}.jsonl", split_rows)
        print(f"wrote {len(split_rows)} tasks to {folder / f'{name}.jsonl'}: {mix_summary(split_rows)}")
    write_json(manifest, {
        "generator": "trajval make-pool", "reasoning_gym": REASONING_GYM_VERSION, "seed": args.seed,
        "mix": {f"{family}/{tier}": share for (family, tier), share in sorted(mix.items())},
        "answer_instruction": not args.no_answer_instruction,
        "excluded": {"files": list(args.exclude), "prompts": len(exclude)},
        "splits": {name: {"file": f"{name}.jsonl", "rows": len(split_rows), "mix": mix_summary(split_rows)}
                   for name, split_rows in rows.items()},
        "shared_problems": shared,
    })
    return 0


def excluded_inputs(paths: list[str]) -> dict[str, str]:
    """The ``--exclude`` files as inputs an output must spare (:func:`check_outputs_spare_inputs`)."""
    return {f"--exclude file {index + 1}" if len(paths) > 1 else "--exclude file": path
            for index, path in enumerate(paths)}


def excluded_prompts(paths: list[str]) -> set[str]:
    """The prompt hashes of the rows of ``paths`` (``--exclude``): the stored hash, else the
    prompt's (:func:`trajval_ops.pools.identity.prompt_hash`)."""
    return read_excluded(paths)[0]


def read_excluded(paths: list[str]) -> tuple[set[str], list[dict], int]:
    """``(prompt hashes, generated rows, other rows)`` of the ``--exclude`` files: the hashes as
    :func:`excluded_prompts`; the rows that carry ``extra_info.generator`` (make-pool rows, whose
    problems :func:`~trajval_ops.pools.generate.shared_problems` reads); how many rows do not
    (not kept)."""
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.pools.identity import PROMPT_HASH, prompt_hash
    from trajval_ops.pools.io import read_rows
    from trajval_ops.rows import get_path, row_label

    hashes: set[str] = set()
    generated, others = [], 0
    for path in paths:
        for position, row in enumerate(read_rows(path)):  # a missing file: read_rows's error
            try:
                hashes.add(row.get(PROMPT_HASH) or prompt_hash(row.get("prompt")))
            except ValueError as exc:
                raise TrajvalInputError(f"--exclude {path}: {row_label(row, position)}: field 'prompt': {exc}") from None
            if get_path(row, "extra_info.generator", None) is not None:
                generated.append(row)
            else:
                others += 1
    return hashes, generated, others


def measure_shared_problems(splits: dict[str, list[dict]], excluded_generated: list[dict], excluded_others: int) -> dict:
    """:func:`~trajval_ops.pools.generate.shared_problems` of the splits (and the ``--exclude``
    rows), with a warning logged when any split shares a problem under other wording."""
    from loguru import logger

    from trajval_ops.pools.generate import shared_problems, shared_problems_warning

    shared = shared_problems(splits, excluded_generated, not_generated=excluded_others)
    message = shared_problems_warning(shared, {name: len(rows) for name, rows in splits.items()})
    if message:
        logger.warning(message)
    return shared
