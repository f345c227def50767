"""Import an RL task pool (JSONL or parquet) into canonical verl-style JSONL, deduplicated.

Examples:
    trajval import-pool dapo-math-17k.parquet pools/dapo.jsonl            # format detected
    trajval import-pool gsm8k_train.jsonl pools/gsm8k.jsonl --format gsm8k
    trajval import-pool data.jsonl out.jsonl --prompt-key meta.question \
        --answer-key meta.final --id-key meta.uid

Fields, formats and the report are described in docs/pools.md.
"""

from __future__ import annotations

import argparse
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.pools.answers import ANSWER_EXTRACTORS
    from trajval_ops.pools.importers import FORMATS, ID_FALLBACKS, ON_CONFLICT, ON_DUPLICATE

    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="pool file: .jsonl/.json (one object per line) or .parquet")
    parser.add_argument("output", help="canonical JSONL to write (atomically)")
    parser.add_argument("--format", default="auto", choices=["auto", *FORMATS],
                        help="source format preset (default: detected from the first row; where none fits and "
                             "both --prompt-key and --answer-key are given, the keys alone: format custom)")
    parser.add_argument("--prompt-key", help="dotted path of the prompt (overrides the preset)")
    parser.add_argument("--answer-key", help="dotted path of the ground truth (overrides the preset)")
    parser.add_argument("--id-key", action="append", dest="id_keys",
                        help="dotted path of the task id, repeatable (tried in order); 'none' ignores ids")
    parser.add_argument("--answer-extract", choices=ANSWER_EXTRACTORS,
                        help="how to cut the ground truth out of the answer field (preset default)")
    parser.add_argument("--id-fallback", default="hash", choices=ID_FALLBACKS,
                        help="task id of rows without an id: prompt-content hash (default) or row-<position>")
    parser.add_argument("--on-conflict", default="error", choices=ON_CONFLICT,
                        help="copies of one prompt with different ground truths: fail (default) or keep the first")
    parser.add_argument("--on-duplicate", default="keep-first", choices=ON_DUPLICATE,
                        help="a copy of an earlier prompt under another id: keep the first and list which id "
                             "collapsed into which in --duplicates (default), or fail naming both rows")
    parser.add_argument("--duplicates", help="side file of collapsed ids (default <output>.duplicates.jsonl)")
    parser.add_argument("--data-source", help="data_source of the rows that have none (a row's own is kept): verl "
                        "picks a row's reward by it, e.g. math_dapo for its DAPO reward (the 'Answer:' line); "
                        "without it such rows get none")
    parser.add_argument("--report", help="report JSON path (default <output>.report.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0, or 2 on bad input (the message names the file, line and row)."""
    args = parser(prog).parse_args(argv)
    from trajval_ops.pools.importers import import_pool
    from trajval_ops.errors import TrajvalInputError

    id_keys = None
    if args.id_keys:
        id_keys = () if args.id_keys == ["none"] else tuple(args.id_keys)
    try:
        report = import_pool(args.input, args.output, format_name=args.format, prompt_key=args.prompt_key,
                             answer_key=args.answer_key, id_keys=id_keys, answer_extract=args.answer_extract,
                             id_fallback=args.id_fallback, on_conflict=args.on_conflict, on_duplicate=args.on_duplicate,
                             duplicates_path=args.duplicates,
                             data_source=args.data_source, report_path=args.report,
                             progress=not args.no_progress)
    except TrajvalInputError as err:
        print(f"import_pool: error: {err}", file=sys.stderr)
        return 2
    print(f"rows read {report.rows_read}, written {report.rows_written}, "
          f"duplicates removed {report.duplicates_removed}")
    return 0
