"""The probe manifest: ``<output_dir>/manifest.json`` (format in docs/probe.md).

The probe trainer writes it (atomically, at start, after every kept checkpoint and at the end);
the endpoint passes read it to find ``early[i]`` / ``late[i]`` checkpoints
(:func:`resolve_model_reference`). It sits below both, beside the model resolver, so that neither
imports the other's layer.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from trajval_ops.canonical import stable_hash
from trajval_ops.atomic import atomic_open

FORMAT = "trajval-probe-manifest/1"
MANIFEST_NAME = "manifest.json"
STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
#: stopped on a diverged step; ``failure`` says why (its checkpoints are never used)
STATUS_FAILED = "failed"
WINDOWS = ("early", "late")

_REQUIRED_KEYS = (
    "format", "base_model", "seed", "probe_ids", "config", "config_hash", "versions",
    "checkpoints", "windows", "train_reward_per_epoch", "wall_time_s", "status",
)
_WINDOW_REF = re.compile(r"^(early|late)\[(-?\d+)\]$")


class ManifestError(ValueError):
    """A manifest that is missing, malformed, incomplete, or lacks the requested checkpoint."""


def manifest_path(path_or_dir: str | os.PathLike) -> Path:
    """``path_or_dir`` itself when it names a file, else ``<dir>/manifest.json``."""
    path = Path(path_or_dir)
    return path / MANIFEST_NAME if path.is_dir() else path


def config_hash(payload: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``payload`` (:mod:`trajval_ops.canonical`)."""
    return "sha256:" + stable_hash(payload)


def write_manifest(output_dir: str | os.PathLike, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest`` to ``<output_dir>/manifest.json`` atomically (tmp file + os.replace)."""
    target = Path(output_dir) / MANIFEST_NAME
    with atomic_open(target) as handle:
        json.dump(manifest, handle, indent=2, sort_keys=False)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())  # the checkpoints it names are on disk: so is the manifest
    return target


def manifest_numerics(manifest: Mapping[str, Any]) -> dict:
    """The precision and generation engine a probe run recorded, keyed as the resolvers key them
    (:data:`trajval_ops.probe.config.NUMERICS`); None where a manifest predates them."""
    return {"precision": manifest.get("precision"), "generation": manifest.get("generation_engine")}


def read_manifest(path_or_dir: str | os.PathLike) -> dict | None:
    """The raw manifest, or None when there is none (used to decide resume / reuse / refuse)."""
    path = manifest_path(path_or_dir)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ManifestError(f"probe manifest {path} is not valid JSON: {exc}") from exc


def load_manifest(path_or_dir: str | os.PathLike, require_complete: bool = True) -> dict:
    """Read and validate a probe manifest.

    :param path_or_dir: the manifest file or the probe output directory holding it.
    :param require_complete: refuse a manifest whose run has not finished (the default: window
        checkpoints of an unfinished run do not exist yet).
    :raises ManifestError: missing file, bad JSON, wrong format, missing keys, unfinished run, a
        window naming an unknown checkpoint.
    """
    path = manifest_path(path_or_dir)
    manifest = read_manifest(path)
    if manifest is None:
        raise ManifestError(f"no probe manifest at {path} (run trajval_probe_trainer first)")
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{path}: format is {manifest.get('format')!r}, expected {FORMAT!r}")
    missing = [key for key in _REQUIRED_KEYS if key not in manifest]
    if missing:
        raise ManifestError(f"{path}: manifest lacks keys {missing}")
    if require_complete and manifest["status"] == STATUS_FAILED:
        raise ManifestError(f"{path}: the probe run failed, so its checkpoints are not used: {manifest.get('failure')}")
    if require_complete and manifest["status"] != STATUS_COMPLETE:
        raise ManifestError(
            f"{path}: probe run status is {manifest['status']!r}, not {STATUS_COMPLETE!r} "
            "(the run was interrupted or is still going; rerun the probe trainer to finish it)"
        )
    names = set()
    for index, checkpoint in enumerate(manifest["checkpoints"]):
        for key in ("name", "epoch", "step", "path"):
            if key not in checkpoint:
                raise ManifestError(f"{path}: checkpoint {index} lacks '{key}'")
        names.add(checkpoint["name"])
    if require_complete:
        for window in WINDOWS:
            refs = manifest["windows"].get(window)
            if not refs:
                raise ManifestError(f"{path}: window '{window}' is empty or missing")
            unknown = [name for name in refs if name not in names]
            if unknown:
                raise ManifestError(f"{path}: window '{window}' names unknown checkpoints {unknown}")
    return manifest


def resolve_checkpoint(path_or_dir: str | os.PathLike, ref: str) -> dict:
    """Look up one checkpoint of a finished probe run.

    :param ref: ``"early[0]"``, ``"late[-1]"`` (Python indexing into the window) or a checkpoint
        name such as ``"base"`` / ``"epoch-20"``.
    :returns: the checkpoint dict (name, epoch, step, path, ...) plus ``window`` (the window the
        ref went through, or the first window holding the name, or None), ``manifest`` (absolute
        path of the manifest file) and ``config_hash``.
    :raises ManifestError: invalid manifest, unknown ref, index out of range, or a checkpoint
        folder that no longer exists.
    """
    path = manifest_path(path_or_dir).resolve()
    manifest = load_manifest(path)
    by_name = {checkpoint["name"]: checkpoint for checkpoint in manifest["checkpoints"]}
    match = _WINDOW_REF.match(ref.strip())
    if match:
        window, index = match.group(1), int(match.group(2))
        members = manifest["windows"][window]
        if not -len(members) <= index < len(members):
            raise ManifestError(f"{path}: {ref!r} is out of range (window '{window}' has {len(members)} checkpoints)")
        name = members[index]
    elif ref in by_name:
        name = ref
        window = next((w for w in WINDOWS if name in manifest["windows"].get(w, [])), None)
    else:
        raise ManifestError(
            f"{path}: unknown checkpoint reference {ref!r}; use early[i], late[i] or one of {sorted(by_name)}"
        )
    checkpoint = dict(by_name[name])
    if not Path(checkpoint["path"]).exists():
        raise ManifestError(f"{path}: checkpoint {name!r} folder {checkpoint['path']} does not exist")
    checkpoint.update(window=window, manifest=str(path), config_hash=manifest["config_hash"])
    return checkpoint


def resolve_model_reference(model: str) -> tuple[Path, dict]:
    """(model folder, checkpoint description for provenance) of any ``model`` setting: a probe
    checkpoint ``manifest:<probe dir or manifest.json>#<ref>`` looked up in its manifest
    (:func:`resolve_checkpoint`), or a folder or short reference
    (:func:`trajval_ops.models.resolve_model_description`)."""
    from trajval_ops.models import MANIFEST_PREFIX, model_folder, resolve_model_description

    if not isinstance(model, str) or not model.startswith(MANIFEST_PREFIX):
        return resolve_model_description(model)
    location, sep, ref = model[len(MANIFEST_PREFIX):].partition("#")
    if not sep or not location or not ref:
        raise ValueError(
            f"model {model!r}: a manifest reference reads 'manifest:<probe dir or manifest.json>#<ref>' "
            f"with ref early[i], late[i] or a checkpoint name"
        )
    checkpoint = resolve_checkpoint(location, ref)
    path = model_folder(str(checkpoint["path"]))
    return path, {
        "name": checkpoint["name"], "source": "manifest", "ref": ref, "window": checkpoint.get("window"),
        "epoch": checkpoint.get("epoch"), "step": checkpoint.get("step"),
        "manifest": checkpoint.get("manifest"), "config_hash": checkpoint.get("config_hash"),
    }
