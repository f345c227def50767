"""What a prior costs, in the main run's currency (completions), before anything runs.

    trajval cost --config recipes/dapo_trajval.yaml [--dataset_path POOL | --pool-rows N] \
        [--main-n 16] [--main-epochs 1] [--json]
    trajval cost --pool outputs/demo/weighted.jsonl [--json]     # what a finished run recorded
    trajval cost --config recipes/dapo_trajval.yaml --pool-rows 17398 --gpus 8 --rate 40   # GPU-hours

With ``--config``: per stage (the probe, each endpoint pass) the completions the recipe will
generate on its pool (exact for a fixed n) and their upper bound of generated tokens (every
completion at its length limit), and the total as a multiple of one main-run epoch over the
pool (``pool rows x --main-n`` completions). With ``--pool``: the completions and tokens the
weighted pool's provenance records: each run's ``prior_cost`` (a resampled or concatenated pool
counts each run once), per-row sums of the passes' costs only where no run record exists.
With ``--rate R`` (completions per second per GPU, measured on the GPUs the run will use) the
GPU-hours of that generation, by the rules ``trajval validate --dry-run`` plans with, and with
``--config`` the wall time on ``--gpus N`` (default 1): each stage over the GPUs its settings
spread it over, at most N, the stages one after another.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from trajval_ops.generation_time import add_rate_option


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="a dj-process recipe (probe trainer, endpoint passes)")
    source.add_argument("--pool", help="a weighted pool written by a recipe: report its recorded cost")
    parser.add_argument("--dataset_path", help="the pool the recipe will read (default: the recipe's dataset_path)")
    parser.add_argument("--pool-rows", type=int, help="price a pool of this many rows instead of reading one "
                        "(e.g. 17398 for DAPO-Math-17k)")
    parser.add_argument("--main-n", type=int, default=16, help="rollouts per prompt in the main run (default 16)")
    parser.add_argument("--main-epochs", type=float, default=1.0,
                        help="epochs of the main run over the pool (default 1)")
    add_rate_option(parser)
    parser.add_argument("--gpus", type=int, metavar="N", help="with --rate and --config: plan the wall time on N "
                        "GPUs (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Exit code 0, or 2 on a missing or unreadable recipe or pool, or a recipe dj-process refuses."""
    args = parser(prog).parse_args(argv)
    from trajval_ops.errors import TrajvalInputError

    try:
        from trajval_ops.generation_time import check_rate_and_gpus

        check_rate_and_gpus(args.rate, args.gpus)  # validate --dry-run's rules
        if args.gpus is not None and args.pool:
            raise ValueError("--gpus plans a recipe's stages: it goes with --config (with --pool, --rate alone "
                             "gives the GPU-hours)")
        report = _recorded(args.pool) if args.pool else _estimate(args)
        if args.rate is not None:
            report["plan"] = _plan(report, args)
    except (TrajvalInputError, ValueError, FileNotFoundError, OSError) as err:
        print(f"cost: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
        return 0
    if args.pool:
        _print_recorded(report)
    else:
        _print_estimate(report)
    if "plan" in report:
        _print_plan(report, None if args.pool else report["stages"])
    return 0


def _plan(report: dict, args) -> dict:
    """The generation's GPU-hours at ``--rate`` (and with ``--config`` its wall time on ``--gpus``)."""
    from trajval_ops.generation_time import generation_time
    from trajval_ops.prior_cost import gpu_plan

    if args.pool:  # what was generated; how the run spread it is not recorded
        return generation_time([{"unit": "recorded", "completions": report["completions"]}], args.rate, 1, 1)
    return gpu_plan(report["stages"], args.rate, args.gpus or 1)


def _print_plan(report: dict, stages: list[dict] | None) -> None:
    plan = report["plan"]
    line = (f"at {plan['rate_completions_per_s']:,g} completions/s per GPU: {plan['gpu_hours']:,.2f} GPU-hours of "
            "generation (training's backward passes and start-ups come on top)")
    if stages is not None:
        spread = ", ".join(f"{stage.get('output_key', stage['stage'])} {stage['gpus_used']}" for stage in stages)
        line += (f"; on {plan['gpus']} GPU(s) about {plan['generation_wall_time_s'] / 3600:,.2f} h, the stages one "
                 f"after another, each over the GPUs its settings give it ({spread})")
    print(line)


def _estimate(args) -> dict:
    import yaml

    from trajval_ops.prior_cost import measured_missing_keys, recipe_cost, sample_group_keys
    from trajval_ops.pools.io import count_rows

    from trajval_ops.ops.recipe_check import check_recipe

    with open(args.config, encoding="utf-8") as handle:
        recipe = yaml.safe_load(handle)
    if not isinstance(recipe, dict):
        raise ValueError(f"{args.config}: a recipe is a YAML mapping")
    for name, value, lowest in (("--main-n", args.main_n, 1), ("--main-epochs", args.main_epochs, None),
                                ("--pool-rows", args.pool_rows, 1)):
        if value is not None and not (math.isfinite(value) and (value >= lowest if lowest else value > 0)):
            raise ValueError(f"{name} {value} must be a finite number " + (f">= {lowest}" if lowest else "> 0"))
    check_recipe(recipe)  # price only what dj-process would run
    pool = args.dataset_path or recipe.get("dataset_path")
    if args.pool_rows is None and not pool:
        raise ValueError(f"{args.config} names no dataset_path; pass --dataset_path or --pool-rows")
    rows = args.pool_rows if args.pool_rows is not None else count_rows(pool)
    group_sizes = missing_counts = None
    # a sampled pass's exact size needs its groups; a reused pass measuring where the field is missing, those rows
    if args.pool_rows is None and (sample_group_keys(recipe) or measured_missing_keys(recipe)):
        from collections import Counter

        from trajval_ops.input_checks import group_values
        from trajval_ops.pools.io import read_table, table_path_values

        table = read_table(pool)
        group_sizes = {key: list(Counter(map(repr, group_values(table, key, f"{pool}: sample_group_key"))).values())
                       for key in sample_group_keys(recipe)}
        missing_counts = {key: (table_path_values(table, key) or [None] * table.num_rows).count(None)
                          for key in measured_missing_keys(recipe)}
    return recipe_cost(recipe, rows, main_n=args.main_n, main_epochs=args.main_epochs, group_sizes=group_sizes,
                       missing_counts=missing_counts)


def _recorded(path: str) -> dict:
    from trajval_ops.prior_cost import pool_cost
    from trajval_ops.pools.io import read_rows

    rows = list(read_rows(path))
    if not rows:
        raise ValueError(f"{path}: the pool is empty")
    return pool_cost(rows)


def _print_estimate(report: dict) -> None:
    print(f"pool: {report['pool_rows']:,} rows; one main-run epoch = {report['pool_rows']:,} x n = {report['main_n']} "
          f"= {report['pool_rows'] * report['main_n']:,} completions")
    priors = report.get("priors") or []
    if priors:
        print(f"prior{'s' if len(priors) > 1 else ''}: " + "; ".join(
            f"{prior['prior']} ({', '.join(f'{k} {v}' for k, v in prior.items() if k != 'prior')})"
            for prior in priors))
    print(f"{'stage':8} {'field':24} {'completions':>14} {'max new tokens':>18}")
    for stage in report["stages"]:
        field = stage.get("output_key", f"|P| = {stage.get('probe_rows')}, {stage.get('steps')} steps")
        note = ""
        if "run_elsewhere" in stage:
            field = "trained elsewhere"
            where = ", ".join(stage["run_elsewhere"])
            note = (f" (as recorded by the probe at {where}; its tokens generated, not a bound)" if stage["recorded"]
                    else f" (NOT PRICED: the passes read the probe at {where}, which has recorded no cost yet; price "
                         "the recipe that trains it, and add it)")
        if stage.get("reused"):
            source = stage["reused_from"]
            note = (f" (read from the pool's {source['field']}, {source['form']}"
                    + (f", {source['model']}" if source["model"] else "")
                    + (f", n = {source['n']}" if source["n"] else "")
                    + (f", each row's n from {source['n_field']}" if source.get("n_field") else "") + ")")
            if source.get("missing") == "measure":
                note += (f" (the {stage['measured_rows']:,} rows lacking it measured)" if stage["measured_rows_exact"]
                         else " (at most: every row lacking it is measured, and the pool is not at hand)")
        if "sample_fraction" in stage:
            note += (f" (sampled: {stage['measured_rows']:,} rows" if stage["measured_rows_exact"] else
                     f" (sampled at {stage['sample_fraction']:g}: about {stage['measured_rows']:,} rows, plus at most "
                     "one per group: group sizes unknown") + ")"
        if stage.get("read_by_prior") is False:
            note += (f" (the {priors[0]['prior']} prior does not read this stage)" if len(priors) == 1 else
                     " (no prior of the recipe reads this stage)")
        print(f"{stage['stage']:8} {field:24} {stage['completions']:>14,} {stage['max_new_tokens_total']:>18,}{note}")
    print(f"{'total':33} {report['completions']:>14,} {report['max_new_tokens_total']:>18,}")
    print(f"the prior costs {report['main_epochs_equivalent']:.3g} main-run epoch(s) "
          f"({report['main_runs_equivalent']:.3g} main run(s) of {report['main_epochs']:g} epoch(s))")


def _print_recorded(report: dict) -> None:
    runs = report["runs"]
    print(f"pool: {report['pool_rows']:,} rows of {len(runs)} run(s)")
    for run in runs:
        if run["source"] == "record":
            source = "the run's recorded prior_cost (each run counted once, whatever rows the pool repeats or drops)"
        else:
            source = ("per-row sums of the passes' costs (no prior_cost recorded: a resampled pool's repeated rows "
                      "count again, its dropped rows not at all)")
        if len(runs) > 1:
            print(f"run: {run['prior'] or 'unknown'} prior, {run['rows']:,} rows")
        print(f"  from {source}")
        for key, source in (run.get("reused_passes") or {}).items():
            n = f"each row's n from {source['n_field']}" if source.get("n_field") else f"n = {source['n']}"
            print(f"  {key}: read from the pool's {source['field']} ({source['form'] or 'rate'}"
                  + (f", {source['model']}" if source.get("model") else "") + f", {n}) on {source['rows_read']:,} "
                  "rows: 0 completions" + (f"; {source['rows_measured']:,} rows lacking it measured (their "
                                            "completions are in the stages below)" if source["rows_measured"] else ""))
        for name, stage in run["stages"].items():
            extra = f", {stage['wall_time_s']:.1f} s training" if "wall_time_s" in stage else ""
            unknown = (f" ({stage['rows_without_cost']} rows without a recorded cost)"
                       if stage.get("rows_without_cost") else "")
            print(f"{name:8} {stage['completions']:>14,} completions {stage['generated_tokens']:>14,} tokens"
                  f"{extra}{unknown}")
    unknown, note = report.get("rows_without_cost", 0), ""
    if unknown:  # a pass without a recorded cost is unknown, not free: the total is a lower bound, or nothing
        label = "at least" if report["completions"] else "NOT PRICED"
        note = f" ({label}: {unknown:,} pass rows without a recorded cost)"
    print(f"{'total':8} {report['completions']:>14,} completions {report['generated_tokens']:>14,} tokens{note}")
