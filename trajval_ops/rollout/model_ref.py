"""What the endpoint mapper's ``model`` parameter may name, resolved to a model folder.

- a model folder path;
- a short reference of :mod:`trajval_ops.models` (``smollm2-135m-instruct``, ...);
- ``manifest:<probe output dir or manifest.json>#<checkpoint ref>``: a checkpoint of a finished
  probe run, looked up by :func:`trajval_ops.probe.manifest.resolve_checkpoint`; the ref is
  ``early[i]``, ``late[i]`` (Python indexing into the window) or a checkpoint name (``base``).
"""

from __future__ import annotations

from pathlib import Path

from trajval_ops.models import resolve_model

MANIFEST_PREFIX = "manifest:"


def resolve_model_reference(model: str) -> tuple[Path, dict]:
    """(model folder, checkpoint description for provenance)."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be a path, a short model reference or 'manifest:<dir>#<ref>', got {model!r}")
    if not model.startswith(MANIFEST_PREFIX):
        path = resolve_model(model)
        return path, {"name": model, "source": "path" if Path(model).expanduser().is_dir() else "short_ref"}
    location, sep, ref = model[len(MANIFEST_PREFIX):].partition("#")
    if not sep or not location or not ref:
        raise ValueError(
            f"model {model!r}: a manifest reference reads 'manifest:<probe dir or manifest.json>#<ref>' "
            f"with ref early[i], late[i] or a checkpoint name"
        )
    from trajval_ops.probe.manifest import resolve_checkpoint

    checkpoint = resolve_checkpoint(location, ref)
    path = resolve_model(str(checkpoint["path"]))
    return path, {
        "name": checkpoint["name"], "source": "manifest", "ref": ref, "window": checkpoint.get("window"),
        "epoch": checkpoint.get("epoch"), "step": checkpoint.get("step"),
        "manifest": checkpoint.get("manifest"), "config_hash": checkpoint.get("config_hash"),
    }
