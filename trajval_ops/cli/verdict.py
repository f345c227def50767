"""The verdict from training runs you already have: does a prior beat the baseline, and pay back its rollouts?

    trajval verdict --run uniform='logs/uniform-seed*.jsonl' --run trajval='logs/trajval-seed*.jsonl' \
        [--baseline uniform] [--metric KEY ...] [--pool trajval=pools/weighted.jsonl] [--format verl] --out DIR
    trajval verdict RUNS_DIR [--metric KEY ...]

RUNS_DIR is a folder ``trajval validate --trainer ...`` wrote: its runs.json names every run's arm,
seed, log and format, the baseline and each prior's pool, and the verdict goes to RUNS_DIR/verdict.

Each --run ARM=PATH names one run or a glob of runs (the arm's seeds); repeat it per arm. Runs
are read in their trainer's own format (detected, or named by --format): verl's file logger
(VERL_FILE_LOGGER_PATH), TRL's trainer_state.json or output folder, TensorBoard event files, or a
CSV / JSON lines table with a step column. Figures are those of ``trajval validate``: Best Acc,
AUC and S2B per arm, each arm's AUC minus the baseline's with 95% bootstrap intervals over seeds,
and, where the logs give each step's completions and a prior's price is known (--pool, or the
verl config saved beside the runs, or RUNS_DIR's written commands), the completions to the baseline's Best Acc and the runs to
break even. Writes DIR/results.json and DIR/index.html; prints a table.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.analysis.run_logs import FORMATS

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("runs_dir", nargs="?", metavar="RUNS_DIR",
                        help="a folder trajval validate --trainer wrote (its runs.json): every run, arm and pool "
                             "read from there")
    parser.add_argument("--run", action="append", metavar="ARM=PATH",
                        help="an arm's run: a file, folder or glob (several files: its seeds); repeatable")
    parser.add_argument("--baseline", help="the arm the others are measured against (default uniform, or the "
                                           "baseline runs.json names)")
    parser.add_argument("--metric", action="append", metavar="KEY",
                        help="held-out metric key, repeatable (several are macro-averaged); default: the one "
                             "held-out accuracy key all runs log")
    parser.add_argument("--pool", action="append", default=[], metavar="ARM=PATH",
                        help="the arm's weighted pool: its provenance names the prior and its price")
    parser.add_argument("--format", choices=FORMATS, help="the runs' format (default: detected per file)")
    parser.add_argument("--out", help="output folder (results.json, index.html, figures/); default RUNS_DIR/verdict")
    return parser


def read_arms(run_options: list[str], format: str | None) -> dict:
    """arm -> its runs, each --run's glob expanded (sorted); a pattern matching nothing is an error."""
    from trajval_ops.analysis.run_logs import read_run
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.experiment.trainer_runs import arm_pairs

    arms: dict[str, list] = {}
    named: dict[str, str] = {}  # path -> its arm: one run is one seed of one arm
    for arm, pattern in arm_pairs(run_options, "--run", "PATH"):  # several per arm: its seeds
        paths = sorted(glob.glob(pattern)) or ([pattern] if not glob.has_magic(pattern) else [])
        if not paths:
            raise TrajvalInputError(f"--run {arm}={pattern}: the pattern matches no file")
        for path in paths:
            resolved = os.path.realpath(path)
            if resolved in named:
                raise TrajvalInputError(f"--run {arm}: {path} is already a run of arm {named[resolved]}")
            named[resolved] = arm
            arms.setdefault(arm, []).append(read_run(path, format))
    return arms


def runs_dir_arms(args) -> tuple[dict, dict, str, "Path"]:
    """(arm -> its runs, arm -> its weighted pool, the baseline, the output folder) from the
    runs.json of a folder ``trajval validate --trainer`` wrote; a run whose log is not there yet
    (not run, or still starting) is named with how to see where the runs are."""
    from pathlib import Path

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.experiment.trainer_runs import read_manifest
    from trajval_ops.experiment.validation_config import ConfigError

    if args.run or args.pool or args.format:
        raise TrajvalInputError("RUNS_DIR names every run, format and pool itself: leave out --run, --pool and "
                                "--format")
    folder = Path(args.runs_dir)
    try:
        record = read_manifest(folder)
    except ConfigError as err:
        raise TrajvalInputError(str(err)) from None
    missing = [run["name"] for run in record["runs"] if not (folder / run["log"]).exists()]
    if missing:
        raise TrajvalInputError(f"{folder}: {len(missing)} of {len(record['runs'])} runs have no log yet "
                                f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): run them first "
                                f"(trajval validate --status --out {folder} shows where they are)")
    arms: dict[str, list] = {}
    for run in record["runs"]:
        arms.setdefault(run["arm"], []).append(manifest_run(folder, run))
    pools = {arm: pool["path"] for arm, pool in record["pools"].items() if pool.get("weight_key") is not None}
    return arms, pools, args.baseline or record["baseline"], Path(args.out) if args.out else folder / "verdict"


def manifest_run(folder, run: dict):
    """A run of a runs.json, read from its log; where the log does not say them, its planned steps
    and each step's completions are the written run's (verl: its command's settings; TRL: the
    dry run's count per step), so the folder's verdict has its equal-completions figures and break-even."""
    from trajval_ops.analysis.run_logs import fill_verl_completions, read_run
    from trajval_ops.experiment.trainer_recipes import verl_run_settings
    from trajval_ops.experiment.trainer_runs import MANIFEST

    log = read_run(folder / run["log"], run["log_format"])
    log.planned_steps = log.planned_steps or run["counts"]["steps"]
    if run["trainer"] == "verl" and log.config is None:
        log.config = verl_run_settings(run["argv"])
        log.config_source = f"the runs' written commands in {folder / MANIFEST} (their overrides over verl's defaults)"
        fill_verl_completions(log)
    elif run["trainer"] == "trl" and not log.completions:
        per_step = run["counts"]["training_completions"] / run["counts"]["steps"]
        log.completions = {step: per_step for step in range(1, log.last_step + 1)}
    return log


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit 0, or 2 on bad input (nothing written then)."""
    args = parser(prog).parse_args(argv)
    from pathlib import Path

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.experiment import verdict
    from trajval_ops.experiment.trainer_runs import pairs
    from trajval_ops.experiment.validation_config import ConfigError

    try:
        if args.runs_dir is not None:
            arms, pools, baseline, out = runs_dir_arms(args)
        elif not args.run or not args.out:
            raise TrajvalInputError("give RUNS_DIR (a folder trajval validate --trainer wrote), or --run ARM=PATH "
                                    "for each arm and --out")
        else:
            arms, pools = read_arms(args.run, args.format), pairs(args.pool, "--pool", "PATH")
            baseline, out = args.baseline or "uniform", Path(args.out)
        result, series = verdict.compare(arms, baseline, args.metric, pools)
    except (TrajvalInputError, ConfigError, OSError) as err:
        print(f"verdict: error: {err}", file=sys.stderr)
        return 2
    args.out = str(out)
    verdict.write(result, series, out)
    _print(result)
    print(f"written: {Path(args.out) / 'results.json'}, {Path(args.out) / 'index.html'}")
    return 0


def _interval(bounds, spec: str) -> str:
    if bounds is None or any(b is None or math.isnan(b) for b in bounds):
        return "no interval"
    return "[" + ", ".join("never" if math.isinf(b) else format(b, spec) for b in bounds) + "]"


def _print(result: dict) -> None:
    baseline = result["baseline"]
    costs = (result.get("cost") or {}).get("arms", {})
    print(f"{'arm':24} {'seeds':>5} {'Best Acc':>9} {'AUC':>8} {'AUC - ' + baseline:>14} {'95% CI':>20} {'S2B %':>7} "
          f"{'break-even runs':>16} {'95% CI':>16}")
    for arm, row in result["training"].items():
        cost = costs.get(arm, {}) if arm != baseline else {}
        runs = cost.get("break_even_runs")
        print(f"{arm:24} {len(row['seeds']):>5} {row['best_acc']:9.4f} {row['auc']:8.4f} "
              f"{row[f'auc_minus_{baseline}']:+14.4f} {_interval(row[f'auc_minus_{baseline}_ci95'], '+.4f'):>20} "
              f"{row['s2b']:7.1f} {'-' if not cost else 'never' if runs is None else format(runs, '.3g'):>16} "
              f"{_interval(cost['break_even_runs_ci95'], '.3g') if cost else '-':>16}")
    for line in verdict_lines(result):
        print(line)


def verdict_lines(result: dict) -> list[str]:
    from trajval_ops.experiment.verdict import run_lines

    return run_lines(result) + [f"{key}: {sentence}" for key, sentence in result["verdicts"].items()]
