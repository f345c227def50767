"""Reading a pool: rows streamed (:func:`read_rows`) or one Arrow table (:func:`read_table`), JSON
lines or parquet, the run provenance resolved."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from trajval_ops.errors import TrajvalInputError
from trajval_ops.provenance_records import (
    expand_rows,
)
from trajval_ops.pools.io.arrow import (
    concat_tables, expand_provenance, provenance_records, read_json_lines, table_rows,
)
from trajval_ops.pools.io.jsonl import PARQUET_SUFFIXES, iter_json_blocks, pool_files
from trajval_ops.pools.io.write import BATCH_ROWS


def check_pool_file(path: str | os.PathLike) -> Path:
    """``path`` when it is one pool file, as :func:`read_rows` reads it (for a caller that opens
    the file before reading its rows: read_rows checks only when its first row is asked for).

    :raises TrajvalInputError: a folder, or a missing file.
    """
    path = Path(path)
    if path.is_dir():
        raise TrajvalInputError(f"{path} is a folder; this reads one pool file (.jsonl, .json or .parquet)")
    if not path.is_file():
        raise TrajvalInputError(f"pool file not found: {path}")
    return path


def read_rows(path: str | os.PathLike) -> Iterator[dict]:
    """The rows of a pool file, in order, streamed: JSON lines (``.jsonl``/``.json``) or parquet
    (``.parquet``/``.pq``), whatever the tool.

    :raises TrajvalInputError: a missing file, or a bad JSON line (named as
        :func:`iter_json_blocks` names it).
    """
    path = check_pool_file(path)
    if path.suffix.lower() in PARQUET_SUFFIXES:
        import pyarrow as pa  # only parquet readers pay for pyarrow
        import pyarrow.parquet as pq

        batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
        # JSON columns decoded, absent keys left out
        yield from expand_rows((row for batch in batches for row in table_rows(pa.Table.from_batches([batch]))),
                               where=str(path))
        return
    yield from expand_rows((row for _, rows in iter_json_blocks(path) for row in rows), where=str(path))


def read_table(path: str | os.PathLike, *, owned_prefix: str = "trajval_"):
    """Read a pool (JSON lines or parquet file, or a folder of them) into one ``pyarrow.Table``.

    JSON columns are native Arrow where that is exact, ``arrow.json`` otherwise (module doc).
    Columns named ``owned_prefix*`` are written by trajval_ops and always hold one kind of value;
    one that mixes numbers with strings (``0.5`` and ``"0.5"``) is an error naming the row.

    :raises TrajvalInputError: missing file, empty pool, or a bad line (see
        :func:`iter_json_lines`).
    """
    tables = []
    starts = []  # the pool's position of each file's first row
    position = 0
    files = pool_files(path)
    for file in files:
        if file.suffix.lower() in PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            table = pq.read_table(file)
        else:
            table = read_json_lines(file, position, owned_prefix)
        starts.append(position)
        position += table.num_rows
        tables.append(table)
    if position == 0:
        raise TrajvalInputError(f"the pool is empty (0 rows): {', '.join(str(f) for f in files)}")
    # Each file is expanded on its own (a parquet file keeps native provenance columns, a JSON-lines
    # file references), with the records of every file: a file split by lines keeps its record once.
    records: dict = {}
    for file, table, start in zip(files, tables, starts):
        provenance_records(table, str(file), records, start)
    tables = [expand_provenance(table, str(file), records, start) for file, table, start in zip(files, tables, starts)]
    return tables[0] if len(tables) == 1 else concat_tables(tables)
