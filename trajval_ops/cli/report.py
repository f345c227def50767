"""Turn a weighted TrajVal pool into an HTML report with PNG figures.

    trajval report --pool pooled.jsonl [--manifest manifest.json] \
        [--trajectories trajectories.jsonl] [--compare other_pool.jsonl] --out report_dir

Writes ``report_dir/index.html``, the figures it references and ``summary.json``.  Exit code 2
with a message naming the row/line and field on bad input.
"""

from __future__ import annotations

import argparse
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.analysis.pool_columns import TRAJECTORY_KEY
    from trajval_ops.settings import finite_float

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", required=True, help="pool JSONL with trajval_r_early/trajval_r_late "
                        "(trajval_score, trajval_weight, trajval_profile used when present)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--manifest", help="probe manifest.json (training-reward curve)")
    parser.add_argument("--trajectories", help="dense trajectories JSONL: {id, accuracies: [...]} per line")
    parser.add_argument("--compare", help="a second pool over the same tasks (another probe set or the "
                        "oracle run): Spearman and Cohen's kappa on shared ids")
    parser.add_argument("--trajectory-key", default=TRAJECTORY_KEY, help="field holding the accuracy list")
    parser.add_argument("--id-key", default=None, help="dotted id field used to join and to name rows "
                        "(default: id, task_id, extra_info.index, ...)")
    parser.add_argument("--window", type=int, default=1, help="K checkpoints averaged into a trajectory's "
                        "r_early / r_late (default 1)")
    parser.add_argument("--alpha", type=finite_float, default=None, help="default: pool provenance, else 0.3")
    parser.add_argument("--eps", type=finite_float, default=None, help="default: pool provenance, else 0.05")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    args = parser(prog).parse_args(argv)

    from trajval_ops.analysis.pool_report import build_report
    from trajval_ops.errors import TrajvalInputError

    try:
        summary = build_report(
            args.pool, args.out, args.manifest, args.trajectories, args.compare,
            alpha=args.alpha, eps=args.eps, id_key=args.id_key,
            trajectory_key=args.trajectory_key, window=args.window,
        )
    except (TrajvalInputError, ValueError, OSError) as err:  # OSError: a missing input, a folder, no permission
        print(f"report: error: {err}", file=sys.stderr)
        return 2
    print(f"{args.out}/index.html ({summary['rows']} rows, {len(summary['figures'])} figures)")
    return 0
