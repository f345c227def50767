"""``trajval validate --trainer verl|trl``: the protocol's arms as the user's own trainer runs.

From a validation config (its pool files, arms and seeds: :mod:`.validation_config`) and the
user's base recipe (:mod:`.trainer_recipes`), one run per arm and seed: the same recipe, with

- the arm's pool: the config's ``data.pool`` as it is for ``uniform``; for a prior, the pool
  carrying the prior's weight column (``--pool ARM=PATH``, or the export of the recipe in
  :data:`POOL_RECIPES` that writes it), drawn by weight through verl's ``data.custom_cls``
  (:class:`~trajval_ops.samplers.verl_dataset.TrajvalVerlDataset`) or TRL's
  ``TrajvalGRPOTrainer`` (``--trajval_weight_column``);
- the config's ``data.heldout`` as the held-out set;
- the seed (verl ``data.seed``, TRL ``--seed``);
- the log the verdict reads: verl's file logger (``trainer.logger`` with ``file``,
  ``VERL_FILE_LOGGER_PATH``), TRL's output folder (``trainer_state.json`` in its checkpoints);
- a run name per arm and seed (verl ``trainer.experiment_name``, TRL ``--run_name``).

The output folder (``--out``) gets a shell script per run (``runs/<arm>-seed<s>.sh``), one that
writes the missing weighted pools and then runs them all (``run_all.sh``), and the manifest
:data:`MANIFEST` that ``trajval verdict <folder>`` reads (:func:`manifest`, its schema in
docs/howto/check_a_prior.md). ``--submit ray`` submits each run as a Ray job (:mod:`.ray_jobs`); no
scheduler of ours places anything.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trajval_ops import fields
from trajval_ops.experiment.trainer_recipes import (VERL_DATASET, VERL_LOG_ENV, Recipe, read_recipe, trl_counts,
                                                    trl_run_args, verl_counts, verl_logger, verl_run_args,
                                                    verl_setting, verl_values)
from trajval_ops.experiment.validation_config import ARMS, BASELINE_ARM, ConfigError, ValidationConfig, data_file

#: the run manifest in the output folder, read by ``trajval verdict`` and ``--status``
MANIFEST = "runs.json"
MANIFEST_KIND = "trajval.trainer_runs"
MANIFEST_VERSION = 1
#: the log format of each trainer's runs, as the verdict names them
LOG_FORMATS = {"verl": "verl", "trl": "trl"}
#: arm -> the Data-Juicer recipe that writes its weighted pool (``trajval_weight``) from the config's pool
POOL_RECIPES = {"trajval": "recipes/dapo_trajval.yaml", "variance": "recipes/dapo_variance.yaml"}


@dataclass
class ArmPool:
    """Where an arm's runs read their pool: the file, its weight column (None: uniform draws),
    and the command that writes it when it is not there yet."""

    path: str
    weight_key: str | None = None
    written_by: str | None = None


@dataclass
class TrainerRun:
    name: str
    arm: str
    seed: int
    trainer: str
    argv: list[str]
    env: dict[str, str]
    log: str                      #: relative to the output folder where it lies inside it
    log_format: str
    pool: str
    weight_key: str | None
    script: str
    counts: dict[str, int]
    replaced: list[str] = field(default_factory=list)  #: the recipe's keys this run sets otherwise
    job_id: str | None = None
    state: str | None = None

    def command(self) -> str:
        """The run as one shell line (environment assignments first)."""
        return shlex.join([f"{k}={v}" for k, v in self.env.items()] + self.argv)


def check_trainer_config(config: ValidationConfig) -> None:
    """A config whose arms a trainer's runs can be: the user's pool files, static priors."""
    where = config.source or config.name
    if config.data is None:
        raise ConfigError(f"{where}: --trainer runs train on your pool: give 'data' (pool, heldout), not generated "
                          "'tasks'")
    online = [arm for arm in config.training.arms if ARMS[arm][1] is not None]
    if online:
        raise ConfigError(f"{where}: --trainer writes uniform and static-prior arms; {online} schedule prompts online "
                          "(GRESO, BOTS), which the harness's own runs measure: leave them out of training.arms")
    if config.training.sampling != ("standard",):
        raise ConfigError(f"{where}: --trainer runs the recipe as it samples (verl's algorithm.filter_groups is DAPO's "
                          "dynamic sampling): set training.sampling: [standard]")


def arm_pools(config: ValidationConfig, out: Path, given: dict[str, str],
              weight_keys: dict[str, str]) -> dict[str, ArmPool]:
    """Every arm's pool: ``data.pool`` for uniform; for a prior, ``given[arm]`` (checked: it exists,
    carries its weight column and holds as many rows as ``data.pool``), else the export of its
    :data:`POOL_RECIPES` recipe, written first."""
    unknown = sorted((set(given) | set(weight_keys)) - set(config.training.arms))
    if unknown:
        raise ConfigError(f"--pool/--weight-key name arm(s) {unknown} the config does not train: "
                          f"{list(config.training.arms)}")
    if BASELINE_ARM in given or BASELINE_ARM in weight_keys:
        raise ConfigError(f"the {BASELINE_ARM} arm trains on data.pool as it is: give no --pool or --weight-key for it")
    pool = str(data_file(config, "pool").resolve())
    pools = {}
    for arm in config.training.arms:
        if arm == BASELINE_ARM:
            pools[arm] = ArmPool(pool)
            continue
        key = weight_keys.get(arm, fields.WEIGHT)
        if arm in given:
            pools[arm] = ArmPool(str(Path(given[arm]).resolve()), key)
            _check_weighted_pool(arm, pools[arm], pool)
        elif arm in POOL_RECIPES:
            export = str((out / "pools" / f"{arm}.jsonl").resolve())
            recipe = Path(__file__).resolve().parents[2] / POOL_RECIPES[arm]
            pools[arm] = ArmPool(export, key, shlex.join(["dj-process", "--config", str(recipe), "--dataset_path", pool,
                                                          "--export_path", export]))
        else:
            raise ConfigError(f"arm {arm}: no shipped recipe writes its weights for your pool; give --pool {arm}=PATH, "
                              f"a pool carrying its weight column ({key})")
    return pools


def _check_weighted_pool(arm: str, pool: ArmPool, uniform_pool: str) -> None:
    from trajval_ops.pools.io import count_rows

    path = Path(pool.path)
    if not path.is_file():
        raise ConfigError(f"--pool {arm}={path}: file not found")
    if pool.weight_key not in pool_columns(path):
        raise ConfigError(f"--pool {arm}={path}: its first row has no '{pool.weight_key}' column (the arm's weight; "
                          f"--weight-key {arm}=KEY names another)")
    rows, base = count_rows(path), count_rows(uniform_pool)
    if rows != base:
        raise ConfigError(f"--pool {arm}={path} holds {rows} rows and data.pool {uniform_pool} {base}: the arms would "
                          "train on different tasks; weight the same pool")


def pool_columns(path: Path) -> set[str]:
    """The columns of a pool file's first row (the parquet schema's)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    from trajval_ops.pools.io import read_rows

    return set(next(iter(read_rows(path)), {}))


def trainer_runs(config: ValidationConfig, recipe: Recipe, out: Path, pools: dict[str, ArmPool]) -> list[TrainerRun]:
    """One run per arm and training seed, in the config's order."""
    heldout = str(data_file(config, "heldout").resolve())
    pool_rows, heldout_rows = check_heldout(config)
    build = _verl_run if recipe.trainer == "verl" else _trl_run
    return [build(config, recipe, out.resolve(), arm, seed, pools[arm], heldout, pool_rows, heldout_rows)
            for arm in config.training.arms for seed in config.training_seeds()]


def check_heldout(config: ValidationConfig) -> tuple[int, int]:
    """The pool's and the held-out set's rows, checked as the harness checks its own (ids present
    and unique, held-out tasks disjoint from the pool by id and prompt, ``min_heldout`` of them)."""
    from trajval_ops.experiment.splits import ID_KEY, check_splits, ids_from
    from trajval_ops.pools.io import read_rows

    splits = {"context-a": list(read_rows(data_file(config, "pool"))),
              "heldout": list(read_rows(data_file(config, "heldout")))}
    if config.data.id_key != ID_KEY:
        splits = {name: ids_from(rows, config.data.id_key, name) for name, rows in splits.items()}
    check_splits(splits, config)
    return len(splits["context-a"]), len(splits["heldout"])


def _verl_run(config, recipe, out, arm, seed, pool, heldout, pool_rows, heldout_rows) -> TrainerRun:
    stem = f"{arm}-seed{seed}"
    log = out / "logs" / f"{stem}.jsonl"
    sets = {"data.train_files": pool.path, "data.val_files": heldout, "data.seed": seed,
            "trainer.experiment_name": f"{config.name}-{stem}", "trainer.logger": verl_logger(recipe)}
    if pool.weight_key is not None:
        theirs = verl_values(recipe).get("data.custom_cls.path")
        if theirs not in (None, VERL_DATASET["data.custom_cls.path"]):
            raise ConfigError(f"--recipe {recipe.source}: data.custom_cls.path={theirs}: arm {arm} draws by weight "
                              "through TrajvalVerlDataset, which that key names: remove it from the recipe")
        # the recipe's epochs become weighted draws inside one pass (TrajvalVerlDataset's doc)
        sets |= VERL_DATASET | {"+data.trajval.weight_key": pool.weight_key,
                                "+data.trajval.epochs": verl_setting(recipe, "trainer.total_epochs"),
                                "trainer.total_epochs": 1}
    args, replaced = verl_run_args(recipe, sets)
    return TrainerRun(f"{config.name}-{stem}", arm, seed, "verl", recipe.launcher + args,
                      recipe.env | {VERL_LOG_ENV: str(log)}, _inside(log, out), LOG_FORMATS["verl"], pool.path,
                      pool.weight_key, f"runs/{stem}.sh",
                      verl_counts(recipe, pool_rows, heldout_rows, weighted=pool.weight_key is not None), replaced)


def _trl_run(config, recipe, out, arm, seed, pool, heldout, pool_rows, heldout_rows) -> TrainerRun:
    stem = f"{arm}-seed{seed}"
    folder = out / "runs" / stem
    sets = {"output_dir": str(folder), "seed": seed, "run_name": f"{config.name}-{stem}",
            "trajval_train_file": pool.path, "trajval_eval_file": heldout}
    if pool.weight_key is not None:
        sets["trajval_weight_column"] = pool.weight_key
    args, replaced = trl_run_args(recipe, sets, drops=("trajval_weight_column",))
    return TrainerRun(f"{config.name}-{stem}", arm, seed, "trl", recipe.launcher + args, dict(recipe.env),
                      _inside(folder, out), LOG_FORMATS["trl"], pool.path, pool.weight_key, f"runs/{stem}.sh",
                      trl_counts(recipe, args, heldout_rows), replaced)


def _inside(path: Path, out: Path) -> str:
    try:
        return str(path.relative_to(out))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- the folder


def manifest(config: ValidationConfig, recipe: Recipe, pools: dict[str, ArmPool], runs: list[TrainerRun]) -> dict:
    """What ``runs.json`` holds (docs/howto/check_a_prior.md, "The run manifest")."""
    return {"kind": MANIFEST_KIND, "version": MANIFEST_VERSION, "name": config.name, "trainer": recipe.trainer,
            "config": str(Path(config.source).resolve()) if config.source else None,
            "recipe": str(Path(recipe.source).resolve()), "baseline": BASELINE_ARM,
            "heldout": str(data_file(config, "heldout").resolve()), "ray_address": None,
            "pools": {arm: asdict(pool) for arm, pool in pools.items()},
            "runs": [asdict(run) | {"command": run.command()} for run in runs],
            "verdict_command": verdict_command(recipe.trainer, pools, runs)}


def verdict_command(trainer: str, pools: dict[str, ArmPool], runs: list[TrainerRun]) -> str:
    """The ``trajval verdict`` command over these runs once they have run: each arm's logs (a glob
    relative to the output folder), the baseline, the format, and each prior's pool (its price)."""
    words = ["trajval", "verdict"]
    for arm in dict.fromkeys(run.arm for run in runs):
        pattern = "logs/{arm}-seed*.jsonl" if trainer == "verl" else "runs/{arm}-seed*"
        words += ["--run", f"{arm}={pattern.format(arm=arm)}"]
    words += ["--baseline", BASELINE_ARM, "--format", LOG_FORMATS[trainer]]
    for arm, pool in pools.items():
        if pool.weight_key is not None:
            words += ["--pool", f"{arm}={pool.path}"]
    return shlex.join(words + ["--out", "verdict"])


def read_manifest(out: Path) -> dict:
    path = Path(out) / MANIFEST
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no run manifest here (trajval validate --trainer ... --out {out} writes it)") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not JSON: {error}") from None
    if record.get("kind") != MANIFEST_KIND:
        raise ConfigError(f"{path}: not a trajval run manifest (kind {record.get('kind')!r})")
    return record


def write_runs(out: Path, record: dict) -> dict:
    """The scripts and the manifest in ``out``. A folder holding the same runs keeps their job ids
    and states (so ``--submit`` again submits only the rest); one holding other runs is refused."""
    from trajval_ops.atomic import write_json, write_text

    out = Path(out)
    if (out / MANIFEST).is_file():
        previous = read_manifest(out)
        if [(r["name"], r["command"]) for r in previous["runs"]] != [(r["name"], r["command"]) for r in record["runs"]]:
            raise ConfigError(f"{out} holds other runs (config {previous.get('config')}, recipe "
                              f"{previous.get('recipe')}); use another --out or remove it")
        record = previous
    elif out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty and holds no run manifest; choose an empty --out")
    (out / "logs").mkdir(parents=True, exist_ok=True)  # verl's file logger opens its file, not its folder
    for run in record["runs"]:
        write_text(out / run["script"], _script(run, record))
        os.chmod(out / run["script"], 0o755)
    write_text(out / "run_all.sh", _run_all(record))
    os.chmod(out / "run_all.sh", 0o755)
    write_json(out / MANIFEST, record)
    return record


def _script(run: dict, record: dict) -> str:
    pool = record["pools"][run["arm"]]
    missing = "echo " + shlex.quote(f"the pool of arm {run['arm']} is not written yet: {pool['written_by']}"
                                    if pool["written_by"] else f"pool not found: {pool['path']}")
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# {run['name']}: arm {run['arm']}, seed {run['seed']} ({record['trainer']}; config {record['config']}, "
        f"recipe {record['recipe']}); written by trajval validate --trainer",
        "set -euo pipefail",
        f"test -f {shlex.quote(pool['path'])} || {{ {missing} >&2; exit 2; }}",
        run["command"], ""])


def _run_all(record: dict) -> str:
    lines = ["#!/usr/bin/env bash", f"# every run of {record['name']} in turn ({record['trainer']}), after the weighted "
             "pools they read (each written once)", "set -euo pipefail", 'cd "$(dirname "$0")"']
    for arm, pool in record["pools"].items():
        if pool["written_by"]:
            lines.append(f"test -f {shlex.quote(pool['path'])} || {pool['written_by']}  # arm {arm}'s weights")
    lines += [f"bash {shlex.quote(run['script'])}" for run in record["runs"]]
    return "\n".join(lines) + "\n"


def missing_pools(record: dict) -> dict[str, str]:
    """``{arm: what writes it}`` for each pool a run reads that does not exist yet."""
    return {arm: pool["written_by"] or f"(give --pool {arm}=PATH)" for arm, pool in record["pools"].items()
            if not Path(pool["path"]).is_file()}


def priced(counts: dict[str, int], rate: float | None, price: float | None) -> dict[str, Any]:
    """A run's completions (:func:`.dry_run.unit_cost`), and at ``rate`` completions/s per GPU
    (its GPUs together: :func:`trajval_ops.generation_time.run_generation`) its generation time and
    GPU-hours, at ``price`` per GPU-hour their cost."""
    from trajval_ops.experiment.dry_run import unit_cost
    from trajval_ops.generation_time import run_generation

    cost = unit_cost(counts["training_completions"], counts["evaluation_completions"], counts["max_completion_tokens"])
    cost |= {"steps": counts["steps"], "evaluations": counts["evaluations"], "gpus": counts["gpus"]}
    if rate is not None:
        cost |= run_generation(cost["completions"], rate, counts["gpus"])
        if price is not None:
            cost["price"] = cost["gpu_hours"] * price
    return cost


# ----------------------------------------------------------------------------- the command


def arm_pairs(values: list[str] | None, option: str, what: str = "VALUE") -> list[tuple[str, str]]:
    """``ARM=VALUE`` options as (arm, value) pairs, in order; a malformed one is an error naming it."""
    out = []
    for value in values or []:
        arm, sep, rest = value.partition("=")
        if not sep or not arm or not rest:
            raise ConfigError(f"{option} {value}: expected ARM={what}")
        out.append((arm, rest))
    return out


def pairs(values: list[str] | None, option: str, what: str = "VALUE") -> dict[str, str]:
    """``ARM=VALUE`` options, one per arm, as a mapping; a malformed or repeated one is an error naming it."""
    out: dict[str, str] = {}
    for arm, value in arm_pairs(values, option, what):
        if arm in out:
            raise ConfigError(f"{option} names arm {arm} twice")
        out[arm] = value
    return out


def run_trainer_command(config: ValidationConfig, args) -> Path | None:
    """``--trainer``: print the runs and write them to ``--out`` (returned); ``--dry-run``: print
    only, every command."""
    from trajval_ops.generation_time import check_rate

    check_trainer_config(config)
    try:
        check_rate(args.rate, args.price)  # the rules validate --dry-run and trajval cost follow
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    recipe = read_recipe(args.recipe, args.trainer)
    out = Path(args.out)
    pools = arm_pools(config, out, pairs(args.pool, "--pool"), pairs(args.weight_key, "--weight-key"))
    runs = trainer_runs(config, recipe, out, pools)
    if args.gpus is not None:
        differ = sorted({run.counts["gpus"] for run in runs} - {args.gpus})
        if differ:
            raise ConfigError(f"--gpus {args.gpus}, but the recipe runs on {differ[0]} GPU(s) "
                              "(verl: trainer.n_gpus_per_node x trainer.nnodes; TRL: the launcher's processes)")
    record = manifest(config, recipe, pools, runs)
    costs = [priced(run.counts, args.rate, args.price) for run in runs]
    if args.json:
        print(json.dumps({"runs": [r | {"cost": c} for r, c in zip(record["runs"], costs)], "pools": record["pools"]}))
    else:
        print_runs(record, costs, commands=args.dry_run)
    if args.dry_run:
        return None
    write_runs(out, record)
    if not args.json:
        print(f"written to {out}: runs/*.sh (one per run), run_all.sh, {MANIFEST}; once the runs have run: "
              f"trajval verdict {out}")
    return out


def print_runs(record: dict, costs: list[dict], commands: bool) -> None:
    """A line per run (and its command with ``commands``), the pools still to write, the totals."""
    print(f"{'run':40} {'steps':>7} {'completions':>14} {'GPUs':>5} {'GPU-hours':>10} {'price':>10}")
    for run, cost in zip(record["runs"], costs):
        hours = f"{cost['gpu_hours']:,.1f}" if "gpu_hours" in cost else "-"
        price = f"{cost['price']:,.2f}" if "price" in cost else "-"
        print(f"{run['name']:40} {cost['steps']:>7,} {cost['completions']:>14,} {cost['gpus']:>5} {hours:>10} {price:>10}")
        if commands:
            print(f"  {run['command']}")
            if run["replaced"]:
                print(f"  (set in place of the recipe's: {', '.join(run['replaced'])})")
    for arm, command in missing_pools(record).items():
        print(f"arm {arm}: its pool needs its weights first: {command}")
    total = sum(cost["completions"] for cost in costs)
    line = f"{len(costs)} run(s), {total:,} completions"
    if "gpu_hours" in costs[0]:
        line += f", {sum(c['gpu_hours'] for c in costs):,.1f} GPU-hours of generation"
        if "price" in costs[0]:
            line += f", {sum(c['price'] for c in costs):,.2f} at the given price"
        line += " (training's backward passes come on top)"
    else:
        line += "; give --rate (completions per second per GPU) to price them"
    print(line)
