"""Carry the TrajVal weights of an annotated pool onto another copy (or an overlapping pool).

Examples:
    # same pool, new model: match by prompt content, fail if any target task is unmatched
    trajval transfer-prior annotated_qwen1p7b.jsonl pool.jsonl pool_with_prior.jsonl \
        --source-regime "Qwen3-1.7B/GRPO/math"
    # the target already has its own trajval_weight: keep it, write the carried one beside it
    trajval transfer-prior annotated.jsonl target.jsonl out.jsonl --source-regime R \
        --weight-column trajval_weight_from_qwen1p7b --unmatched median

Every carried weight gets <weight_column>_provenance (regime, source file and hash, match, source
row). A column that already holds weights is never mixed with another regime's (see
docs/pools.md).
"""

from __future__ import annotations

import argparse
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.fields import WEIGHT
    from trajval_ops.pools.transfer import MATCH_BY, UNMATCHED_POLICIES

    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="annotated pool (JSONL/parquet) holding the weights to carry")
    parser.add_argument("target", help="pool (JSONL/parquet) to carry them onto")
    parser.add_argument("output", help="JSONL to write (atomically): the target rows plus the carried weights")
    parser.add_argument("--source-regime", help="label of the regime the source prior was estimated under "
                        "(required unless the source's weights record one)")
    parser.add_argument("--match", default="prompt_hash", choices=MATCH_BY,
                        help="match rows by prompt-content hash (default) or by task id")
    parser.add_argument("--source-key", help="dotted field matched in the source (default prompt / task_id)")
    parser.add_argument("--target-key", help="dotted field matched in the target (default: as --source-key)")
    parser.add_argument("--source-weight-column", default=WEIGHT, help=f"source weight field (default {WEIGHT})")
    parser.add_argument("--weight-column", default=WEIGHT, help=f"target column to write (default {WEIGHT})")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing weight column in every row (never mixes regimes)")
    parser.add_argument("--unmatched", default="error", choices=UNMATCHED_POLICIES,
                        help="unmatched target rows: fail (default), null weight, the source's floor eps, "
                             "or the median source weight")
    parser.add_argument("--report", help="report JSON path (default <output>.report.json)")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0, or 2 on bad input (unmatched rows under ``--unmatched error``, mixed regimes)."""
    args = parser(prog).parse_args(argv)
    from trajval_ops.atomic import check_outputs_spare_inputs, write_json
    from trajval_ops.pools.io import write_rows
    from trajval_ops.canonical import file_sha256
    from trajval_ops.pools.io import check_pool_file, read_rows
    from trajval_ops.pools.transfer import transfer_prior
    from trajval_ops.errors import TrajvalInputError

    report_path = args.report or f"{args.output}.report.json"
    try:
        check_outputs_spare_inputs({"output": args.output, "--report": report_path},
                                   {"source pool": args.source, "target pool": args.target})
        check_pool_file(args.source)  # before it is hashed: the reader's message, not open()'s
        rows, report = transfer_prior(
            read_rows(args.source), read_rows(args.target), regime=args.source_regime, match=args.match,
            source_key=args.source_key, target_key=args.target_key,
            source_weight_column=args.source_weight_column, weight_column=args.weight_column,
            unmatched=args.unmatched, overwrite=args.overwrite, source_name=str(args.source),
            source_sha256=file_sha256(args.source), target_name=str(args.target))
    except (TrajvalInputError, OSError) as err:  # OSError: an unreadable input (no permission)
        print(f"transfer_prior: error: {err}", file=sys.stderr)
        return 2
    write_rows(args.output, rows)
    write_json(report_path, report.as_dict())
    print(f"matched {report.matched_rows} of {report.target_rows} target rows ({report.matched_fraction:.1%}); "
          f"unmatched {report.unmatched_rows} ({report.unmatched_policy}); wrote {args.output}")
    return 0
