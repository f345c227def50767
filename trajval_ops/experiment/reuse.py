"""Another validation run's finished units, reused (``trajval validate --reuse-from DIR``).

Comparing a new arm or probe against a finished run should not retrain the arms the two share.
A training unit of the source run is copied into this run when all of these hold:

- it finished there (its ``result.json`` exists);
- the source run trained the model this run trains, by content (the sha256 its
  ``protocol.json`` records; a spec names the model only by name, so another build under the
  same name would pass the spec's check): a run of other weights is refused whole;
- its spec equals this run's, the two run folders' paths aside (same model, GRPO settings,
  seed, steps, sampling, evaluation);
- both runs' data splits are byte-identical (the specs name the files, not their contents);
- for an arm, every column of the training pool it reads (its prior's weight, BOTS's reference
  pass rates) holds the same values in the same row order in both pools, so an arm waits for
  this run's priors before it can be compared.
- it trained with the precision and generation engine that this machine resolves the config's
  to (``auto`` resolves per machine: a CPU run's fp32 units do not join a GPU run in bf16).

The probe unit is never copied (its files hold their own run's paths; it takes minutes). Units
here are run as child processes, so a copied unit's files are exactly what a rerun would write
on the same machine and code; reuse runs made with the same version of trajval_ops.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from loguru import logger

from trajval_ops.experiment.validation_config import (ConfigError, ValidationConfig, model_identity,
                                                     recorded_model_sha256, regime_verifier)
from trajval_ops.experiment.grpo_run import RESULT_FILE, unit_file

TRAIN_POOL = Path("priors") / "train_pool.jsonl"
RUN_ROOT = "<run>"


def check_reusable_run(source: Path, out: Path, config: ValidationConfig) -> None:
    """``source`` must be another finished-or-partial validation run of ``config``'s model (by
    content) on byte-identical data."""
    if not (source / "protocol.json").is_file():
        raise ConfigError(f"--reuse-from {source}: not a validation run (no protocol.json)")
    if source.resolve() == out.resolve():
        raise ConfigError(f"--reuse-from {source}: the run's own folder; a rerun resumes it already")
    _check_same_model(source, config)
    _report_other_reading(source, config)
    mine, theirs = _data_files(out), _data_files(source)
    if mine.keys() != theirs.keys() or any(mine[name] != theirs[name] for name in mine):
        differ = sorted(name for name in mine.keys() | theirs.keys() if mine.get(name) != theirs.get(name))
        raise ConfigError(f"--reuse-from {source}: its data splits differ from this run's ({', '.join(differ)}); "
                          f"its units trained on other tasks (another tasks.seed or --split-seed?)")


def _check_same_model(source: Path, config: ValidationConfig) -> None:
    mine = model_identity(config)
    record = json.loads((source / "protocol.json").read_text())
    theirs = recorded_model_sha256(record, config)
    if theirs == mine["sha256"]:
        return
    here = f"this run trains '{mine['name']}' (content sha256 {mine['sha256'][:12]}...)"
    if theirs is None:
        raise ConfigError(
            f"--reuse-from {source}: cannot tell which model its units trained: its protocol.json records no "
            f"model content, and its hash holds neither the content nor the folder of this run's model; "
            f"{here}. It trained other weights, or this model from another folder, which its record cannot tell "
            f"apart: none of its units is reused; leave out --reuse-from")
    name = (record.get("model") or {}).get("name") or (record.get("config") or {}).get("model")
    raise ConfigError(
        f"--reuse-from {source}: its units trained '{name}' with content sha256 {theirs[:12]}... and {here}: "
        f"other weights give other results, so none of its units is reused; reuse a run of this model, or "
        f"leave out --reuse-from")


def _report_other_reading(source: Path, config: ValidationConfig) -> None:
    """A run whose units another revision of this run's verifier scored (or whose protocol.json
    records none where that is not known: the math verifier) shares no unit spec with this run:
    said here naming the revision, since a unit whose spec differs is left out without a word."""
    from trajval_ops.regime.tasks import VERIFIER
    from trajval_ops.rollout.verifiers import recorded_revision, unrecorded_reading, verifier_revision

    record = json.loads((source / "protocol.json").read_text())
    verifier = regime_verifier(config)[0]
    if ((record.get("config") or {}).get("verifier", config.verifier) or VERIFIER[0]) != verifier:
        return  # another verifier: the specs differ by it, whatever its revision
    then, now = recorded_revision(record, verifier), verifier_revision(verifier)
    if then is None:
        logger.warning(f"validate: --reuse-from {source}: its protocol.json {unrecorded_reading(verifier)}: none "
                       "of its units is reused (their specs hold no revision)")
    elif then != now:
        logger.warning(f"validate: --reuse-from {source}: revision {then} of the {verifier} verifier scored its "
                       f"units, and this release reads answers as revision {now}: none of its units is reused "
                       "(their specs differ)")


def _data_files(run: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((run / "data").glob("*")) if path.is_file()}


def without_run_paths(value: Any, run: Path) -> Any:
    """``value`` (a unit's spec) with ``run``'s folder replaced by a placeholder in every path."""
    root = str(run)
    if isinstance(value, dict):
        return {key: without_run_paths(item, run) for key, item in value.items()}
    if isinstance(value, list):
        return [without_run_paths(item, run) for item in value]
    if isinstance(value, str) and (value == root or value.startswith(root + "/")):
        return RUN_ROOT + value[len(root):]
    return value


def pool_columns(spec: dict) -> list[str] | None:
    """The training-pool columns a unit reads, or None when it does not read the training pool."""
    if spec.get("pool") != f"{RUN_ROOT}/{TRAIN_POOL.as_posix()}":
        return None
    return [column for column in [spec.get("weight_column"), *(spec.get("bots_reference_columns") or [])] if column]


def _column_values(pool: Path, columns: list[str]) -> list:
    from trajval_ops.pools.io import read_rows
    from trajval_ops.rows import get_path

    return [(row.get("id"), *[get_path(row, column, None) for column in columns]) for row in read_rows(pool)]


def reuse_units(units, source: Path, out: Path, here: dict[str, str]) -> list[str]:
    """Copy every unit of ``units`` that the rules above allow and that is not done here yet;
    arms that read the training pool are skipped until this run has written it. Returns the
    copied units' names.

    :param here: the numerics units resolve to on this machine (:func:`.devices.numerics_here`).
    """
    from trajval_ops.probe.config import describe_numerics, numerics_differ

    copied, columns_equal = [], {}
    for unit in units:
        folder = source / unit.folder.relative_to(out)
        source_spec = unit_file(folder, "spec.json")
        if unit.done() or unit.prepare is None or not (folder / RESULT_FILE).is_file() or not source_spec.is_file():
            continue
        if differ := numerics_differ(json.loads((folder / RESULT_FILE).read_text()), here):
            logger.info(f"validate: {unit.name} not reused from {source}: it trained with {describe_numerics(differ)}")
            continue
        theirs = without_run_paths(json.loads(source_spec.read_text()), source)
        columns = pool_columns(theirs)
        if columns is not None and not (out / TRAIN_POOL).is_file():
            continue
        unit.prepare()  # writes this run's spec
        if without_run_paths(json.loads(unit_file(unit.folder, "spec.json").read_text()), out) != theirs:
            continue
        if columns:
            key = tuple(columns)
            if key not in columns_equal:
                columns_equal[key] = _column_values(out / TRAIN_POOL, columns) == _column_values(
                    source / TRAIN_POOL, columns)
            if not columns_equal[key]:
                continue
        _copy_unit(folder, unit.folder)
        if unit_file(folder, "log").is_file():
            shutil.copy2(unit_file(folder, "log"), unit.log)
        copied.append(unit.name)
    if copied:
        logger.info(f"validate: reused from {source}: {', '.join(copied)}")
    return copied


def _copy_unit(source: Path, target: Path) -> None:
    """Copy a finished unit's folder, its result last and atomically: a unit is done once its
    result is there, so a kill mid-copy leaves it unfinished, not finished with a cut trajectory."""
    from trajval_ops.atomic import atomic_open

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=lambda folder, names: [RESULT_FILE] if Path(folder) == source else [])
    with atomic_open(target / RESULT_FILE, "wb") as handle:
        handle.write((source / RESULT_FILE).read_bytes())
