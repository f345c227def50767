"""The validation protocol as resumable units, from one config to ``results.json``.

Units (each its own folder under ``--out``; done when its marker file exists):

1. ``data``: the training contexts A and B (sharing ``shared_size`` tasks), the held-out and
   tuning splits; overlap between held-out and training tasks is an error here, before
   anything trains.
2. ``oracle/context-a``, ``oracle/context-b``: full-pool uniform GRPO on each context with dense
   per-task trajectories (the oracle); each run measures its own base (step 0) with its own
   sampling seed.
3. ``probe``: the real pipeline — ``dj-process`` on a generated recipe with the probe trainer,
   the endpoint-reward mappers and the learnability mapper — plus an endpoint pass per kept
   probe epoch for probe-epoch stability.
4. ``priors``: the training pool with the TrajVal weight and the training-free baselines'
   weights from the same endpoint passes.
5. ``arms/<arm>/seed-<s>``: GRPO on context A per arm and seed, held-out accuracy every
   ``evaluation.every_steps`` steps.

``results.json`` and ``index.html`` are then computed from the units' files
(:mod:`trajval_ops.experiment.results`). Training units run as child processes, ``workers`` at
a time, ``threads_per_worker`` torch threads each; a rerun skips finished units and restarts an
unfinished training unit from its beginning (a GRPO run is minutes here; restarting keeps its
result identical to an uninterrupted run's, online scheduler state included).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from loguru import logger

from trajval_ops import fields
from trajval_ops.atomic import write_json
from trajval_ops.errors import TrajvalInputError
from trajval_ops.generation_time import add_price_option, add_rate_option
from trajval_ops.pools.io import write_rows
from trajval_ops.experiment.validation_config import (ARMS, ConfigError, ValidationConfig, arm_reads_priors,
                                                     config_model, data_file, load_config, model_identity,
                                                     protocol_hash, recorded_settings, regime_verifier)
from trajval_ops.experiment.devices import UNITS_RECORD, record_unit
from trajval_ops.experiment.splits import ID_KEY, check_splits, ids_from
from trajval_ops.experiment.trainer_recipes import TRAINERS
from trajval_ops.experiment.grpo_run import RESULT_FILE, finished_results, unit_file
from trajval_ops.experiment import unit_process
from trajval_ops.experiment.priors import (
    ADAPTIVE_LATE, ORACLE_READERS, OTHER_MODEL_PASS, SAMPLED_SHORT, SAMPLED_SHORT_N, SHORT_PASS_READERS, arm_columns,
    epoch_pass_key, units_the_priors_wait_for, write_priors,
)
from trajval_ops.pools.io import read_rows
from trajval_ops.priors import ONE_PASS_PRIORS
from trajval_ops.rollout.verifiers import (recorded_revision, revision_record, unrecorded_reading,
                                          verifier_revision)

DATA_DONE = "data.json"
PROBE_OUTPUT = "weighted.jsonl"
ORACLE_CONTEXTS = ("context-a", "context-b")
#: ``trajval validate``'s exit status when ``--no-start-after`` paused it with units left
PAUSED_EXIT = 3


# ----------------------------------------------------------------------------- data


def prepare_data(config: ValidationConfig, out: Path) -> dict:
    """Write (once) the contexts and splits; return the data summary (``data/data.json``)."""
    folder = out / "data"
    marker = folder / DATA_DONE
    if marker.is_file():
        return json.loads(marker.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    if config.tasks is not None:
        splits = _generated_splits(config)
    else:
        splits = {"context-a": list(read_rows(data_file(config, "pool"))),
                  "heldout": list(read_rows(data_file(config, "heldout"))), "tuning": []}
        if config.data.context_b:
            splits["context-b"] = list(read_rows(data_file(config, "context_b")))
        if config.data.id_key != ID_KEY:
            splits = {name: ids_from(rows, config.data.id_key, name) for name, rows in splits.items()}
            logger.info(f"validate: the working copies of the data carry data.id_key '{config.data.id_key}' as "
                        f"'{ID_KEY}'")
    check_splits(splits, config)
    for name, rows in splits.items():
        write_rows(folder / f"{name}.jsonl", rows)
    ids_a = {row[ID_KEY] for row in splits["context-a"]}
    shared = [row[ID_KEY] for row in splits.get("context-b", []) if row[ID_KEY] in ids_a]
    summary = {name: len(rows) for name, rows in splits.items()} | {"shared": len(shared)}
    write_json(folder / "shared_ids.json", shared)
    write_json(marker, summary)
    logger.info(f"validate: data {summary} in {folder}")
    return summary


def _generated_splits(config: ValidationConfig) -> dict[str, list[dict]]:
    from trajval_ops.regime.tasks import generate_tasks

    t = config.tasks
    b_only = t.pool_size - t.shared_size
    total = t.pool_size + b_only + t.heldout_size + t.tuning_size
    rows = generate_tasks(total, seed=t.seed)
    order = np.random.default_rng(t.seed).permutation(len(rows))
    rows = [rows[i] for i in order]
    context_a = rows[:t.pool_size]
    cursor = t.pool_size
    context_b = context_a[:t.shared_size] + rows[cursor:cursor + b_only]
    cursor += b_only
    heldout = rows[cursor:cursor + t.heldout_size]
    cursor += t.heldout_size
    tuning = rows[cursor:cursor + t.tuning_size]
    order_b = np.random.default_rng(t.seed + 1).permutation(len(context_b))
    return {"context-a": context_a, "context-b": [context_b[i] for i in order_b], "heldout": heldout,
            "tuning": tuning}


# ----------------------------------------------------------------------------- units


@dataclass
class Unit:
    name: str
    folder: Path
    command: list[str]
    done: Callable[[], bool]
    after: tuple[str, ...] = ()
    restart: bool = True           #: remove the folder of an unfinished unit before rerunning it
    prepare: Callable[[], None] | None = None
    #: (module, args) of a command ``python -m module args``: on CPU the unit runs ``module.main(args)``
    #: in a fork of the process that imported the training stack once (:mod:`.unit_process`)
    entry: tuple[str, tuple[str, ...]] | None = None
    log: Path = field(init=False)

    def __post_init__(self):
        self.log = unit_file(self.folder, "log")


def _grpo_unit(name: str, folder: Path, spec: dict, after=()) -> Unit:
    spec_path = unit_file(folder, "spec.json")

    def prepare():
        folder.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(spec, indent=1))

    entry = ("trajval_ops.experiment.grpo_run", (str(spec_path),))
    return Unit(name, folder, unit_process.python_command(*entry), done=lambda: (folder / RESULT_FILE).is_file(),
                after=tuple(after), prepare=prepare, entry=entry)


def _base_spec(config: ValidationConfig, folder: Path, pool: Path, seed: int) -> dict:
    verifier, options = regime_verifier(config)
    return {"name": str(folder), "model": config_model(config, config.model), "pool": str(pool), "seed": seed,
            "grpo": config.to_dict()["grpo"], "template": config.template, "verifier": verifier,
            "verifier_options": options, **revision_record(verifier_revision(verifier)),  # --reuse-from compares
            "threads": config.threads_per_worker, "output_dir": str(folder),
            # as the config names them: the unit's process resolves them on the one GPU it sees (or none)
            "device": config.device, "precision": config.precision, "generation": config.generation}


def oracle_units(config: ValidationConfig, out: Path, data: dict) -> list[Unit]:
    units = []
    for k, context in enumerate(ORACLE_CONTEXTS):
        if context not in data:
            continue
        folder = out / "oracle" / context
        pool = out / "data" / f"{context}.jsonl"
        spec = _base_spec(config, folder, pool, seed=config.seed + 1000 + k) | {
            "weight_column": None, "online": None, "steps": config.oracle.steps,
            "evaluations": [{"tasks": str(pool), "output": str(folder / "trajectories.jsonl"),
                             "every_steps": config.oracle.every_steps, "n": config.oracle.n,
                             "batch_size": config.evaluation.batch_size}]}
        units.append(_grpo_unit(f"oracle/{context}", folder, spec))
    return units


def probe_recipe(config: ValidationConfig, out: Path) -> dict:
    """The ``dj-process`` recipe of the probe unit: probe -> endpoint passes -> weights."""
    from trajval_ops.experiment.results import probe_manifest_path

    verifier, options = regime_verifier(config)
    folder = out / "probe"
    probe_dir = probe_manifest_path(out).parent  # where results read the probe's cost
    g = config.grpo
    epochs = config.probe.epochs
    stability_epochs = sorted(config.probe.stability_epochs)
    # the passes sample at 1.0 whatever grpo.temperature trains at (the paper's pass-rate setting)
    endpoint = {"engine": config.probe.engine, "n": config.probe.n, "temperature": 1.0,
                "max_new_tokens": g.max_completion_length, "verifier": verifier, "verifier_options": options,
                "template": config.template, "prompts_per_generate": 64, "cache_dir": str(folder / "rollout_cache"),
                # the unit's thread count, as every training unit's: the mapper's own default shares out all
                # the cores, which oversubscribes them beside the other units (1 thread: 1.85x faster here,
                # equal pass rates)
                "torch_threads": config.threads_per_worker}
    process = [{"trajval_probe_trainer": {
        "output_dir": str(probe_dir), "model": config_model(config, config.model),
        "probe_fraction": config.probe.probe_fraction, "seed": config.seed, "epochs": epochs,
        **dataclasses.asdict(g), "window_k": config.probe.window_k,
        "keep_epochs": stability_epochs, "verifier": verifier, "verifier_options": options,
        "prompt_template": config.template, "show_progress": False, **_placement(config)}}]
    k = config.probe.window_k
    for offset, window in ((10, "early"), (20, "late")):
        for i in range(k):
            process.append({"trajval_endpoint_reward_mapper": endpoint | {
                "model": f"manifest:{probe_dir}#{window}[{i}]", "window": window,
                "window_index": None if k == 1 else i, "seed": config.seed + offset + i}})
    if config.probe.adaptive_late:
        process.append({"trajval_endpoint_reward_mapper": endpoint | {
            "model": f"manifest:{probe_dir}#late[-1]", "window": "late", "output_key": ADAPTIVE_LATE,
            "budget": "adaptive", "round_size": config.probe.round_size,
            "weight_tolerance": config.probe.weight_tolerance, "seed": config.seed + 20}})
    if config.probe.other_model:  # another model's pass: the *_other_model arms' prior
        process.append({"trajval_endpoint_reward_mapper": endpoint | {
            "model": config_model(config, config.probe.other_model), "output_key": OTHER_MODEL_PASS,
            "seed": config.seed + 50}})
    if set(config.training.arms) & SHORT_PASS_READERS:  # the short early pass, every row
        process.append({"trajval_endpoint_reward_mapper": endpoint | {
            "model": f"manifest:{probe_dir}#early[0]", "output_key": SAMPLED_SHORT, "n": SAMPLED_SHORT_N,
            "seed": config.seed + 40}})
    for epoch in stability_epochs:
        process.append({"trajval_endpoint_reward_mapper": endpoint | {
            "model": f"manifest:{probe_dir}#epoch-{epoch}", "output_key": epoch_pass_key(epoch),
            "seed": config.seed + 30 + epoch}})
    process.append({"trajval_learnability_mapper": {"window_k": k, **config.priors.get("trajval", {})}})
    return {"project_name": f"validate_{config.name}", "dataset_path": str(out / "data" / "context-a.jsonl"),
            "export_path": str(folder / PROBE_OUTPUT), "np": 1, "text_keys": None, "skip_op_error": False,
            "open_tracer": False, "op_fusion": False, "process": process}


def _placement(config: ValidationConfig) -> dict:
    """The probe trainer's device, precision and generation where the config sets them (at their
    defaults the recipe, and so a finished probe's identity, stays as before they existed)."""
    defaults = {f.name: f.default for f in dataclasses.fields(ValidationConfig)}
    return {key: getattr(config, key) for key in ("device", "precision", "generation")
            if getattr(config, key) != defaults[key]}


def probe_unit(config: ValidationConfig, out: Path) -> Unit:
    import yaml

    folder = out / "probe"
    recipe_path = out / "probe.recipe.yaml"

    def prepare():
        folder.mkdir(parents=True, exist_ok=True)
        recipe_path.write_text(yaml.safe_dump(probe_recipe(config, out), sort_keys=False))

    from trajval_ops.commands import dj_process_path

    dj = dj_process_path()
    # not restarted: the probe trainer and the rollout cache resume by themselves
    return Unit("probe", folder, [dj, "--config", str(recipe_path)], done=lambda: (folder / PROBE_OUTPUT).is_file(),
                restart=False, prepare=prepare)


def arm_units(config: ValidationConfig, out: Path) -> list[Unit]:
    """An arm run per arm, sampling mode and seed. Those that read a prior train on the priors'
    pool once it exists; the others (uniform, GRESO) on the pool's own rows, whose order and
    content the priors' pool keeps, from the start."""
    units = []
    for name, arm, mode in config.training_runs():
        weight_column, reference_columns = arm_columns(arm)
        reads_priors = arm_reads_priors(arm)
        pool = out / "priors" / "train_pool.jsonl" if reads_priors else out / "data" / "context-a.jsonl"
        for seed in config.training_seeds():
            folder = out / "arms" / name / f"seed-{seed}"
            spec = _base_spec(config, folder, pool, seed=seed) | {
                "weight_column": weight_column, "online": ARMS[arm][1],
                "bots_reference_columns": list(reference_columns) or None,
                "steps": config.training.steps, "dynamic_sampling": mode == "dynamic",
                "max_generation_rounds": config.training.max_generation_rounds,
                "evaluations": [{"tasks": str(out / "data" / "heldout.jsonl"), "output": str(folder / "heldout.jsonl"),
                                 "every_steps": config.evaluation.every_steps, "n": config.evaluation.n,
                                 "batch_size": config.evaluation.batch_size}]}
            units.append(_grpo_unit(f"arms/{name}/seed-{seed}", folder, spec,
                                    after=("priors",) if reads_priors else ()))
    return units


# ----------------------------------------------------------------------------- running


def run_units(units: list[Unit], workers: int, finished: set[str], on_done: dict[str, Callable[[], None]],
              gpus: list[str] | None = None, records: Path | None = None,
              no_start_after: float | None = None, launch: Callable[[Unit, dict], Any] | None = None) -> list[str]:
    """Run every unfinished unit, ``workers`` at a time, in dependency order. On CPU a unit with
    an ``entry`` starts as a fork of the preloaded training process (:mod:`.unit_process`).

    :param finished: names done already (also extra names, e.g. ``priors``, that gate others).
    :param on_done: work done in this process after a unit finishes (keyed by unit name).
    :param gpus: the GPUs units are pinned to, one per running unit (:mod:`.devices`); empty or
        None: CPU, and the children see no GPU.
    :param records: a JSON file that gets each finished unit's GPU and wall time (``units.json``).
    :param no_start_after: a ``time.monotonic()`` instant after which no unit starts; the units
        running then finish (a job's time limit: a unit is restarted from its beginning).
    :param launch: starts a prepared unit with an environment and returns its handle (``poll``,
        ``kill``, ``returncode``): :meth:`.ray_units.RayUnits.launch`; None: a child process here.
    :return: the units left unstarted at that instant (empty when every unit finished).
    """
    from trajval_ops.lifetime import guard_descendants

    guard_descendants()  # the units die with this process, however it ends (run_protocol's, or a caller's)
    for unit in units:
        if unit.done() and unit.name not in finished:
            finished.add(unit.name)
            logger.info(f"validate: {unit.name}: finished already (an earlier run, or copied by --reuse-from), skipped")
            if unit.name in on_done:
                on_done[unit.name]()
    pending = [u for u in units if u.name not in finished]
    running: dict[str, tuple[Unit, Any, float, str | None]] = {}
    try:
        return _run_pending(pending, running, workers, finished, on_done, gpus or [], records, no_start_after,
                            launch)
    finally:
        for _, process, _, _ in running.values():  # stopped by an error: no unit outlives the run
            process.kill()


def _run_pending(pending: list[Unit], running: dict, workers: int, finished: set[str],
                 on_done: dict[str, Callable[[], None]], gpus: list[str], records: Path | None,
                 no_start_after: float | None, launch: Callable[[Unit, dict], Any] | None) -> list[str]:
    from trajval_ops.experiment.devices import GpuSlots
    from trajval_ops.hardware import cpu_kernels

    slots = GpuSlots(gpus)
    total = len(pending)
    env = unit_process.environment()
    # a CPU unit started here inherits this environment, so runs these kernels; one ``launch``
    # starts (a Ray task) runs where it is placed, whose kernels this machine cannot tell
    kernels = cpu_kernels() if launch is None else None
    while pending or running:
        copied_meanwhile = False
        starting = no_start_after is None or time.monotonic() < no_start_after
        for unit in list(pending):
            if len(running) >= workers or not starting:
                break
            if not all(dep in finished for dep in unit.after):
                continue
            pending.remove(unit)
            if unit.done():  # copied meanwhile (--reuse-from, once the run's priors were known)
                finished.add(unit.name)
                copied_meanwhile = True
                if unit.name in on_done:
                    on_done[unit.name]()
                continue
            gpu = slots.take()
            running[unit.name] = (unit, _start_unit(unit, env | slots.environment(gpu), fork=not gpus, launch=launch),
                                  time.monotonic(), gpu)
            logger.info(f"validate: {unit.name}: started{'' if gpu is None else f' on GPU {gpu}'} "
                        f"({total - len(pending) - len(running) + 1}/{total} queued so far; log {unit.log})")
        if not running and not starting:
            return [u.name for u in pending]
        if copied_meanwhile and not running:
            continue  # what waited on the copied units may start now
        if not running:
            blocked = [u.name for u in pending]
            raise RuntimeError(f"units {blocked} wait on units that never finish")
        time.sleep(0.5)
        for name, (unit, process, started, gpu) in list(running.items()):
            if process.poll() is None:
                continue
            del running[name]
            slots.give_back(gpu)
            if process.returncode != 0 or not unit.done():
                tail = unit.log.read_text(errors="replace")[-4000:] if unit.log.is_file() else ""
                raise RuntimeError(f"validation unit {name} failed (exit {process.returncode}); log {unit.log}:\n{tail}")
            finished.add(name)
            seconds = time.monotonic() - started
            logger.info(f"validate: {name}: done in {seconds:.0f} s")
            if records is not None:
                record_unit(records, name, {"gpu": gpu, "wall_time_s": round(seconds, 1),
                                            **({} if gpu or kernels is None else {"cpu_kernels": kernels})})
            if name in on_done:
                on_done[name]()
    return []


def _start_unit(unit: Unit, env: dict[str, str], fork: bool, launch: Callable[[Unit, dict], Any] | None = None):
    """A unit's child process (or ``launch``'s handle), its output in the unit's log; an
    unfinished earlier attempt of a restartable unit is removed first."""
    if unit.restart and unit.folder.exists():
        logger.info(f"validate: {unit.name}: unfinished in an earlier run, restarting it")
        shutil.rmtree(unit.folder)
    if unit.prepare:
        unit.prepare()
    unit.log.parent.mkdir(parents=True, exist_ok=True)
    if launch is not None:
        return launch(unit, env)
    return unit_process.start(unit.command, unit.entry, env, unit.log, Path(__file__).resolve().parents[2], fork)


def trained_numerics(out: Path) -> dict[str, dict]:
    """What each unit that trained in ``out`` resolved its numerics to: every finished training
    unit's result, and the probe's manifest while the probe is unfinished (a finished probe is
    only read, wherever the run goes on)."""
    from trajval_ops.experiment.results import probe_manifest_path
    from trajval_ops.probe_manifest import STATUS_COMPLETE, manifest_numerics

    records = finished_results(out)
    manifest = probe_manifest_path(out)
    if manifest.is_file():
        probe = json.loads(manifest.read_text())
        if probe.get("status") != STATUS_COMPLETE:
            records["probe"] = manifest_numerics(probe)
    return records


def run_protocol(config: ValidationConfig, out: Path, reuse_from: Path | None = None,
                 no_start_after_s: float | None = None) -> dict | None:
    """Run (or resume) every unit, then write ``results.json`` and ``index.html``.

    :param reuse_from: another validation run whose finished units equal to this run's are
        copied instead of trained (:mod:`trajval_ops.experiment.reuse`).
    :param no_start_after_s: start no unit once this many seconds have passed; the running
        units finish, and the run pauses (returns None, no results) when units are left: run it
        again on the same ``out`` to go on.
    """
    from trajval_ops.lifetime import guard_descendants

    guard_descendants()
    with unit_executor(config) as executor:  # a local Ray (executor: ray) stops when the run does
        return _run_protocol_on(executor, config, out, reuse_from, no_start_after_s)


def unit_executor(config: ValidationConfig):
    """What runs the units: :class:`.devices.ProcessUnits`, or with ``executor: ray`` a
    :class:`~trajval_ops.experiment.ray_units.RayUnits` (connected when entered)."""
    if config.executor == "ray":
        from trajval_ops.experiment.ray_units import RayUnits

        return RayUnits(config)
    from trajval_ops.experiment.devices import ProcessUnits

    return ProcessUnits(config)


def _run_protocol_on(executor, config: ValidationConfig, out: Path, reuse_from: Path | None,
                     no_start_after_s: float | None) -> dict | None:
    from trajval_ops.experiment.devices import check_same_numerics
    from trajval_ops.experiment.results import compute_results, write_index

    here = executor.numerics
    out = Path(out).resolve()  # the units run in other folders: every path they get is absolute
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    check_same_protocol(config, out)
    check_same_numerics(trained_numerics(out), here)
    data = prepare_data(config, out)
    finished: set[str] = set()
    units = oracle_units(config, out, data) + [probe_unit(config, out)] + arm_units(config, out)
    reuse = None
    if reuse_from is not None:
        from trajval_ops.experiment.reuse import check_reusable_run, reuse_units

        reuse_from = Path(reuse_from).resolve()
        check_reusable_run(reuse_from, out, config)
        # again for the arms, once the priors exist
        reuse = lambda: reuse_units(units, reuse_from, out, here)  # noqa: E731
        reuse()
    if (out / "priors" / "train_pool.jsonl").is_file():
        finished.add("priors")
    logger.info(f"validate: {executor.describe()}")
    deadline = None if no_start_after_s is None else started + no_start_after_s
    left = run_units(units, executor.workers, finished, _priors_when_ready(config, out, finished, reuse),
                     gpus=executor.gpus, records=out / UNITS_RECORD, no_start_after=deadline, launch=executor.launch)
    if left:
        _accumulated_wall_time(out, time.monotonic() - started)
        logger.info(f"validate: paused: no unit starts after {no_start_after_s:g} s; {len(left)} of {len(units)} "
                    f"unit(s) left ({', '.join(left)}); run the same command again to go on")
        return None
    results = compute_results(config, out, wall_time_s=_accumulated_wall_time(out, time.monotonic() - started))
    write_json(out / "results.json", results)
    write_index(results, config, out)
    logger.info(f"validate: results in {out / 'results.json'} and {out / 'index.html'}")
    return results


def _accumulated_wall_time(out: Path, seconds: float) -> float:
    """The wall time of every invocation on ``out``, this one's ``seconds`` included: a resumed
    run (or one that only recomputes its results) adds its own time instead of replacing the
    run's. A folder from before this record existed starts from its results' figure."""
    record = out / "wall_time.json"
    if record.is_file():
        previous = json.loads(record.read_text())["invocations_s"]
    elif (out / "results.json").is_file():
        previous = [json.loads((out / "results.json").read_text())["protocol"].get("wall_time_s")]
    else:
        previous = []
    invocations = [s for s in previous if isinstance(s, (int, float)) and math.isfinite(s)] + [round(seconds, 1)]
    write_json(record, {"invocations_s": invocations})
    return float(sum(invocations))


def _priors_when_ready(config: ValidationConfig, out: Path, finished: set[str],
                       then: Callable[[], Any] | None = None) -> dict[str, Callable[[], None]]:
    """Work to do after a unit finishes: the training pool with every prior's column, once the
    probe (and, for the ceiling arms, oracle A) has finished; the arms wait for it. ``then`` runs
    once the pool is written (reusing another run's arms)."""
    priors = {ARMS[arm][0] for arm in config.training.arms} - {None}
    needs = set(units_the_priors_wait_for(config.training.arms))

    def when_done():
        if "priors" in finished or not needs <= finished:
            return
        from trajval_ops.experiment.results import oracle_figures

        oracle = oracle_figures(out, "context-a", config.oracle.window) if priors & ORACLE_READERS else None
        write_priors(out, priors | ONE_PASS_PRIORS, oracle, config.group_key, config.priors,  # every one-pass prior: free
                     [epoch_pass_key(epoch) for epoch in sorted(config.probe.stability_epochs)])
        finished.add("priors")
        if then is not None:
            then()

    return {name: when_done for name in needs}


def check_same_protocol(config: ValidationConfig, out: Path) -> None:
    """A folder holds one protocol's units: resuming with other settings is an error. A new folder
    is claimed for ``config`` (its ``protocol.json`` written)."""
    marker = out / "protocol.json"
    if marker.is_file():
        previous = json.loads(marker.read_text())
        recorded = recorded_settings(config, previous.get("config") or {})
        def recorded_with(revision: int | None = None) -> bool:
            return any(previous.get("hash") == protocol_hash(config, settings, by_location=by_location,
                                                             revision=revision)
                       for settings in (None, recorded) for by_location in (False, True))

        if recorded_with():
            return
        verifier = regime_verifier(config)[0]
        then, now = recorded_revision(previous, verifier), verifier_revision(verifier)
        if then is None and recorded_with(1):  # a hash made before revisions were recorded holds none
            raise ConfigError(f"{out} holds a validation run whose protocol.json {unrecorded_reading(verifier)}: "
                              "its units might be compared with units scored otherwise; start the run over in "
                              "another --out, or remove this one")
        if then is not None and then != now and recorded_with(then):
            raise ConfigError(f"{out} holds a validation run whose units revision {then} of the verifier scored, and "
                              f"this release reads answers as revision {now}: its units would be compared with "
                              "units scored otherwise; finish it with the release that started it, or use another "
                              "--out")
        raise ConfigError(f"{out} holds a validation run with other settings (config {previous.get('source')}); "
                          f"use another --out or remove it")
    if out.is_dir() and any(p.name != "validate.log" for p in out.iterdir()):
        raise ConfigError(f"{out} is not empty and holds no validation run; choose an empty --out")
    # the model's identity in the clear too: --reuse-from compares it with another run's
    write_json(marker, {"hash": protocol_hash(config), "source": config.source, "config": config.to_dict(),
                        "model": model_identity(config),
                        "verifier_revision": verifier_revision(regime_verifier(config)[0])})


def parser(prog: str = "trajval validate"):
    """``trajval validate``'s argument parser (its flags, read by ``--help`` and the generated reference)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog=prog, description="Measure TrajVal's claims end to end in one regime (docs/validation.md), or launch "
                               "the arms as your own trainer's runs (--trainer, docs/howto/check_a_prior.md).")
    parser.add_argument("--config", help="validation config (e.g. recipes/validation/full.yaml); required unless --status")
    parser.add_argument("--out", type=Path, help="output folder (resumable; required unless --dry-run)")
    parser.add_argument("--seed", type=int, default=None, help="override the config's base seed")
    parser.add_argument("--split-seed", type=int, default=None,
                        help="override tasks.seed: the same protocol on another split of the generated regime")
    parser.add_argument("--reuse-from", type=Path, default=None, metavar="RUN",
                        help="another validation run on the same data: its finished oracle and arm units whose "
                             "settings (and prior weights) equal this run's are copied instead of trained")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="units side by side, over the config's workers (not part of the protocol: a run "
                             "resumes under any); on a GPU machine above the GPU count, units share cards")
    parser.add_argument("--no-start-after", type=float, default=None, metavar="SECONDS",
                        help="start no unit once SECONDS have passed (a job's time limit less the longest unit); "
                             f"the running ones finish, and with units left the run exits {PAUSED_EXIT}: the same "
                             "command again goes on")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the units, their completions and token bounds and the generation time at a "
                             "rate, and stop (nothing is written); with --trainer, every run's command and cost")
    add_rate_option(parser, "with --dry-run (default: measured on this machine; units that share a card share "
                            "its rate) or --trainer (a run generates at it times its GPUs)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="with --dry-run: plan the run for a machine with N GPUs (one unit each unless "
                             "--workers says otherwise), with --rate measured there; with --trainer: the GPUs each "
                             "run holds (checked against the recipe's)")
    parser.add_argument("--json", action="store_true", help="with --dry-run or --trainer: print one JSON object")
    trainer = parser.add_argument_group("your own trainer's runs (docs/howto/check_a_prior.md)")
    trainer.add_argument("--trainer", choices=TRAINERS, help="write the arms as runs of this trainer")
    trainer.add_argument("--recipe", help="your base recipe: verl Hydra overrides or command; the command of your "
                                          "TRL script with its arguments")
    trainer.add_argument("--pool", action="append", metavar="ARM=PATH",
                         help="a prior arm's weighted pool (repeatable; default: written by the arm's shipped recipe)")
    trainer.add_argument("--weight-key", action="append", metavar="ARM=KEY",
                         help=f"the weight column of an arm's pool (default {fields.WEIGHT})")
    add_price_option(trainer)
    trainer.add_argument("--submit", choices=("ray",), help="submit each run as a Ray job to RAY_ADDRESS's cluster")
    trainer.add_argument("--status", action="store_true", help="each run's job state and last logged step (--out)")
    return parser


def main(argv: list[str] | None = None, *, prog: str = "trajval validate") -> int:
    cli = parser(prog)
    args = cli.parse_args(argv)
    try:
        if args.status or args.trainer:
            return _trainer_main(cli, args)
        if args.config is None:
            cli.error("--config is required (unless --status)")
        if not args.dry_run and args.out is None:
            cli.error("--out is required (unless --dry-run)")
        if args.gpus is not None and not args.dry_run:
            cli.error("--gpus plans a run elsewhere: it goes with --dry-run (a run uses the GPUs it sees)")
        if args.recipe or args.pool or args.weight_key or args.price is not None or args.submit:
            cli.error("--recipe, --pool, --weight-key, --price and --submit go with --trainer")
        config = load_config(args.config, seed=args.seed, split_seed=args.split_seed)
        if args.workers is not None:
            if args.workers < 1:
                raise ConfigError(f"--workers {args.workers} must be at least 1")
            config = dataclasses.replace(config, workers=args.workers)
        if args.no_start_after is not None and not (math.isfinite(args.no_start_after) and args.no_start_after >= 0):
            raise ConfigError(f"--no-start-after {args.no_start_after} must be a number of seconds, 0 or more")
        if args.dry_run:
            return _dry_run(config, args)
        results = run_protocol(config, args.out, reuse_from=args.reuse_from, no_start_after_s=args.no_start_after)
    except (ConfigError, TrajvalInputError) as exc:
        print(f"validate: error: {exc}", file=sys.stderr)
        return 2
    return 0 if results is not None else PAUSED_EXIT


def _trainer_main(parser, args) -> int:
    """``--trainer`` (write, print, submit the runs) and ``--status``."""
    if args.out is None:
        parser.error("--trainer and --status need --out: the folder of the runs")
    if args.status:
        from trajval_ops.experiment.ray_jobs import print_status, status

        print_status(status(args.out))
        return 0
    if args.config is None or args.recipe is None:
        parser.error("--trainer needs --config (the arms, seeds and pool files) and --recipe (your base recipe)")
    if args.submit and args.dry_run:
        parser.error("--dry-run submits nothing: leave out --submit")
    if args.reuse_from or args.workers or args.no_start_after is not None or args.split_seed is not None:
        parser.error("--reuse-from, --workers, --no-start-after and --split-seed are the harness's own: not with --trainer")
    from trajval_ops.experiment.trainer_runs import MANIFEST, run_trainer_command

    out = run_trainer_command(load_config(args.config, seed=args.seed), args)
    if out is not None and args.submit == "ray":
        from trajval_ops.experiment.ray_jobs import submit

        submitted = submit(out)
        print(f"submitted {len(submitted)} job(s) to Ray; their ids are in {out / MANIFEST} "
              f"(trajval validate --status --out {out})")
    return 0


def _dry_run(config: ValidationConfig, args) -> int:
    from trajval_ops.experiment.dry_run import dry_run, print_dry_run
    from trajval_ops.generation_time import check_rate_and_gpus

    try:
        check_rate_and_gpus(args.rate, args.gpus)  # the rules trajval cost --gpus --rate follows
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    report = dry_run(config, args.rate, gpus=args.gpus)
    if args.json:
        print(json.dumps(report))
    else:
        print_dry_run(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
