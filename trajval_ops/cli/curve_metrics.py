"""Best Acc, AUC and Steps-to-Baseline of evaluation curves (the paper's appendix metrics).

    trajval curve-metrics --method trajval.json [--baseline random.json] \
        [--eval-every 12] [--first-step 0] [--window 5] [--out metrics.json]

Each JSON file maps a benchmark name to its accuracy curve: a list (one value per evaluation
step) or a list of lists (one curve per seed; averaged over seeds first).  Prints one line per
benchmark and the macro average ``avg`` (metrics on the benchmark-averaged curve).
"""

from __future__ import annotations

import argparse
import json
import sys


def _load(path: str) -> dict:
    with open(path, encoding="utf-8-sig") as handle:  # -sig: a byte-order mark is read past
        data = json.load(handle)
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a JSON object mapping benchmark -> curve")
    return data


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.analysis import curves

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", required=True, help="JSON {benchmark: curve} of the method")
    parser.add_argument("--baseline", help="JSON {benchmark: curve} of its baseline (for S2B)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="training steps between evaluations; default: the evaluation index (1, 2, ...)")
    parser.add_argument("--first-step", type=int, default=None,
                        help="the step of the first evaluation (default: --eval-every, or 1): 0 for curves that "
                             "begin with the base model, as trajval validate writes them. S2B is a ratio of "
                             "steps, so the offset changes it")
    parser.add_argument("--window", type=int, default=curves.DEFAULT_WINDOW,
                        help=f"evaluations in the sliding-window mean Best Acc and S2B read (default "
                             f"{curves.DEFAULT_WINDOW})")
    parser.add_argument("--out", help="write the metrics as JSON here")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0, or 2 on a missing or malformed curve file."""
    from trajval_ops.analysis import curves

    args = parser(prog).parse_args(argv)

    import numpy as np

    from trajval_ops.atomic import check_output_is_writable_as_a_file, check_output_spares_inputs, write_json

    try:
        if args.out:
            check_output_spares_inputs(args.out, {"--method file": args.method, "--baseline file": args.baseline},
                                       output_name="--out")
            check_output_is_writable_as_a_file(args.out, "--out")
        method = _load(args.method)
        baseline = _load(args.baseline) if args.baseline else None
        steps = None
        if args.eval_every is not None or args.first_step is not None:
            every = 1 if args.eval_every is None else args.eval_every
            if every <= 0:
                raise ValueError("--eval-every must be > 0")
            first = every if args.first_step is None else args.first_step
            if first < 0:
                raise ValueError("--first-step must be >= 0")
            n = curves.seed_average(next(iter(method.values()))).size
            steps = first + every * np.arange(n)
        metrics = curves.curve_metrics(method, baseline, steps=steps, window=args.window)
    except (ValueError, OSError) as err:  # OSError: a missing file, a folder, no permission
        print(f"curve_metrics: error: {err}", file=sys.stderr)
        return 2
    print(f"{'benchmark':16} {'Best Acc':>9} {'AUC':>8}" + (f" {'S2B %':>8}" if baseline else ""))
    for name, row in metrics.items():
        line = f"{name:16} {row['best_acc']:9.4f} {row['auc']:8.4f}"
        if baseline:
            line += f" {row['s2b']:8.1f}"
        print(line)
    if args.out:
        write_json(args.out, metrics)
    return 0
