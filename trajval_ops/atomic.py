"""Atomic file writes, shared by operators and tools."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed.

    A crash leaves either the old file or the complete new one, never a truncated output.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def jsonable(obj: Any, nan_as_null: bool = False) -> Any:
    """Plain JSON values, recursively: numpy scalars and arrays to Python, bytes to text, and
    with ``nan_as_null`` NaN to None (strict JSON has no NaN; reports use it, pool rows keep
    their values)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v, nan_as_null) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, nan_as_null) for v in obj]
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    if hasattr(obj, "tolist") and not isinstance(obj, (str, int, float, bool)):
        return jsonable(obj.tolist(), nan_as_null)  # numpy arrays and scalars
    if nan_as_null and isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Write rows as JSON lines (UTF-8, values through :func:`jsonable`) atomically; returns the
    number of rows."""
    count = 0
    with atomic_open(path) as out:
        for row in rows:
            out.write(json.dumps(jsonable(row), ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


def write_json(path: str | os.PathLike, payload: Any) -> Path:
    """Write one JSON document (a report: indented, NaN as null) atomically."""
    with atomic_open(path) as out:
        json.dump(jsonable(payload, nan_as_null=True), out, ensure_ascii=False, indent=2)
        out.write("\n")
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically."""
    with atomic_open(path) as out:
        out.write(text)
    return Path(path)
