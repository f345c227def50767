"""Atomic file writes and the one JSONL reader, shared by operators and tools."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from trajval_ops.validation import TrajvalInputError


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


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Rows of a JSONL file; blank lines skipped; a bad line is an error naming its line and row."""
    position = 0
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise TrajvalInputError(f"{path}: line {line_number} (row {position}) is not valid JSON: {err}") from None
            if not isinstance(row, dict):
                raise TrajvalInputError(
                    f"{path}: line {line_number} (row {position}) is a {type(row).__name__}, not a JSON object"
                )
            position += 1
            yield row
