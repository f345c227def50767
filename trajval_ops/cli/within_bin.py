"""Within-pre-bin sub-pools (paper section 5.3): terciles of r_early, each split into a high- and
a low-delta half with matched mean r_early.

    trajval within-bin --pool pooled.jsonl --out subpools/ [--binning quantile|fixed] \
        [--split paired|median]

Writes six JSONL sub-pools (rows unchanged, pool order), e.g. ``low_pre_high_delta.jsonl``, and
``within_bin_stats.json``; prints the statistics table.
"""

from __future__ import annotations

import argparse
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.analysis import within_bin

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", required=True, help="pool JSONL with trajval_r_early / trajval_r_late")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--binning", choices=within_bin.BINNINGS, default="quantile")
    parser.add_argument("--split", choices=within_bin.SPLITS, default="paired")
    parser.add_argument("--id-key", default=None, help="dotted id field used to name rows in errors")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0, or 2 on bad input."""
    from pathlib import Path

    from trajval_ops.analysis import pool_columns, within_bin
    from trajval_ops.atomic import check_output_spares_inputs
    from trajval_ops.pools.io import read_rows
    from trajval_ops.errors import TrajvalInputError

    args = parser(prog).parse_args(argv)
    try:
        names = [within_bin.subpool_filename(b, h) for b in within_bin.BIN_NAMES for h in within_bin.HALVES]
        for name in names + [within_bin.STATS_FILE]:
            check_output_spares_inputs(Path(args.out) / name, {"pool": args.pool}, output_name="output file")
        rows, predicted = pool_columns.measured_rows(list(read_rows(args.pool)), args.pool, "--pool", "within_bin")
        cols = pool_columns.pool_columns(rows, id_key=args.id_key)
        subpools = within_bin.within_bin_split(
            cols["r_early"], cols["delta"], cols["score"], cols["weight"], binning=args.binning, split=args.split
        )
        stats_path = within_bin.write_within_bin(
            rows, subpools, args.out, meta={"pool": args.pool, "binning": args.binning, "split": args.split,
                                            "predicted_rows_left_out": predicted}
        )
    except (TrajvalInputError, ValueError, OSError) as err:  # OSError: an unreadable input (a folder)
        print(f"within_bin: error: {err}", file=sys.stderr)
        return 2
    empty = [f"{p['bin']} {p['half']}" for p in subpools if p["n"] == 0]
    if empty:  # written all the same (0 rows, null statistics), so the six files are always there
        print(f"within_bin: warning: {len(empty)} of {len(subpools)} sub-pools are empty ({', '.join(empty)}): too "
              f"few rows' r_early fall in their bin (--binning {args.binning}), so their statistics are null and "
              "that bin compares nothing", file=sys.stderr)
    print(f"{'bin':5} {'half':10} {'n':>6} {'mean r_early':>12} {'mean delta':>10} {'mean score':>10}")
    for p in subpools:
        print(f"{p['bin']:5} {p['half']:10} {p['n']:6d} {p['mean_r_early']:12.4f} {p['mean_delta']:10.4f} "
              f"{p['mean_score']:10.4f}")
    print(f"statistics: {stats_path}")
    return 0
