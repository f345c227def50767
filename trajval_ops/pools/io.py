"""Reading pools (JSONL or parquet, streamed) and writing JSONL atomically."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from trajval_ops.atomic import atomic_open, iter_jsonl
from trajval_ops.validation import TrajvalInputError

PARQUET_SUFFIXES = (".parquet", ".pq")
PARQUET_BATCH_ROWS = 8192


def read_rows(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the rows of a JSONL (``.jsonl``/``.json`` lines) or parquet file, in order.

    :raises TrajvalInputError: for a malformed JSONL line (naming the line) or a line that is not
        a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise TrajvalInputError(f"pool file not found: {path}")
    if path.suffix.lower() in PARQUET_SUFFIXES:
        yield from _read_parquet(path)
    else:
        yield from iter_jsonl(path)


def _read_parquet(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq  # only parquet readers pay for pyarrow

    parquet = pq.ParquetFile(path)
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
        yield from batch.to_pylist()


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows as JSONL atomically (see :func:`trajval_ops.atomic.atomic_open`).

    :return: the number of rows written.
    """
    count = 0
    with atomic_open(path) as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, default=_json_default))
            out.write("\n")
            count += 1
    return count


def write_json_atomic(path: str | os.PathLike, payload: Any) -> None:
    """Write one JSON document atomically (reports)."""
    with atomic_open(path) as out:
        json.dump(payload, out, ensure_ascii=False, indent=2, default=_json_default)
        out.write("\n")


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _json_default(value: Any) -> Any:
    # parquet rows can hold numpy scalars/arrays and bytes; JSON has no such types.
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as JSON")
