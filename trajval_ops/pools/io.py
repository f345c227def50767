"""Reading pools (JSONL or parquet, streamed) and naming their files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterator

from trajval_ops.jsontable import iter_jsonl
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


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
