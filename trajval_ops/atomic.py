"""Atomic file writes, shared by operators and tools."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from trajval_ops.errors import InputOverwriteError, TrajvalInputError


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed.

    A killed process leaves either the old file or the complete new one, never a truncated output;
    so does a power loss, as the new file's data is flushed to disk before it replaces ``path``
    and the folder's entry after.
    A ``path`` that is a symbolic link is written through: its target is replaced and the link
    kept. An existing file keeps its permissions; a new one gets the usual ``0666 & ~umask``.
    ``mode``: ``w`` or ``wb`` (what replaces a file is written whole).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole new file: mode 'w' or 'wb', not {mode!r}")
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        if path.is_file():
            permissions = path.stat().st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            permissions = 0o666 & ~umask
        os.chmod(tmp, permissions)  # mkstemp creates 0600
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _sync_folder(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the rename) to disk; a file system that cannot is left as it is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files earlier writes of ``path`` left when their process was killed
    (``.<name>.<pid>.<random>.tmp`` whose process is gone)."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            try:
                stale.unlink()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same file or folder (links and relative paths resolved)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def check_output_spares_inputs(output: str | os.PathLike, inputs: dict[str, str | os.PathLike | None],
                               output_name: str = "output") -> None:
    """Refuse an output path that would replace an input, before anything is read or written.

    :param inputs: name -> path of each input (None entries are skipped); a folder input also
        refuses an output inside it (the next run would read the output as part of the input).
    :raises InputOverwriteError: naming both paths.
    """
    out = Path(output).expanduser()
    for name, path in inputs.items():
        if path is None:
            continue
        source = Path(path).expanduser()
        if same_path(out, source):
            raise InputOverwriteError(f"{output_name} {str(output)!r} is the {name} {str(path)!r}: writing it would "
                                      f"replace the input; choose another {output_name}")
        if source.is_dir() and out.resolve().is_relative_to(source.resolve()):
            raise InputOverwriteError(f"{output_name} {str(output)!r} lies inside the {name} folder {str(path)!r}, "
                                      f"whose files are all read as input: a later run would read this output as "
                                      f"input; choose an {output_name} outside it")


def check_outputs_spare_inputs(outputs: dict[str, str | os.PathLike | None],
                               inputs: dict[str, str | os.PathLike | None]) -> None:
    """Refuse outputs that would replace an input (:func:`check_output_spares_inputs`) or one
    another (two outputs naming one file: the later write would replace the earlier one), or
    that cannot be written as a file (:func:`check_output_is_writable_as_a_file`), before
    anything is read or written.

    :param outputs: name -> path of each output (None entries are skipped).
    :raises InputOverwriteError: naming both paths.
    :raises TrajvalInputError: naming the output and the folder or file in its way.
    """
    named = [(name, path) for name, path in outputs.items() if path is not None]
    for index, (name, path) in enumerate(named):
        check_output_spares_inputs(path, inputs, output_name=name)
        for other, other_path in named[:index]:
            if same_path(path, other_path):
                raise InputOverwriteError(f"{name} {str(path)!r} is the {other} {str(other_path)!r}: one would "
                                          f"replace the other; choose another {name}")
    for name, path in named:
        check_output_is_writable_as_a_file(path, name)


def check_output_is_writable_as_a_file(output: str | os.PathLike, output_name: str = "output") -> None:
    """Refuse an output path that is an existing folder, or lies under an existing file: the
    write would fail only after the work (:func:`atomic_open` replaces a file, not a folder).

    :raises TrajvalInputError: naming the output and what is in its way.
    """
    path = Path(output).expanduser()
    if path.is_dir():
        raise TrajvalInputError(f"{output_name} {str(output)!r} is a folder: it names the file to write; "
                                f"give a file path")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise TrajvalInputError(f"{output_name} {str(output)!r} lies under {str(parent)!r}, which is a "
                                        f"file, not a folder; give a path in a folder")
            return


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
