"""Writing a pool atomically, every value as it was read: Arrow tables and rows as JSON lines
(the run provenance stored once per file) or parquet."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from trajval_ops.atomic import atomic_open, jsonable
from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF, RUN_PROVENANCE
from trajval_ops.provenance_records import (
    compact_rows, record_id, run_starts,
)
from trajval_ops.pools.io.arrow import (
    ABSENT, is_json_type, json_array, json_text, json_type, table_from_columns, value_at,
)
from trajval_ops.pools.io.jsonl import PARQUET_SUFFIXES


BATCH_ROWS = 8192


def write_table(table, path: str | os.PathLike) -> None:
    """Write a table atomically as JSON lines (``.jsonl``/``.json``) or parquet (``.parquet``).

    JSON lines: one object per row, columns in table order, UTF-8, compact; ``arrow.json``
    values are written as their stored JSON text and an absent one omits its key, so a table
    from :func:`read_table` writes back the values it read; run provenance is stored once
    (:func:`compact_provenance`). Parquet keeps native columns
    (nested ones stay nested) and stores ``arrow.json`` columns as parquet JSON.
    """
    suffix = Path(path).suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        import pyarrow.parquet as pq

        with atomic_open(path, "wb") as handle:
            pq.write_table(table, handle)
        return
    with atomic_open(path, "wb") as handle:
        write_json_lines(compact_provenance(table), handle)


def write_rows(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Write rows atomically as JSON lines (values through :func:`trajval_ops.atomic.jsonable`,
    UTF-8) or, for a ``.parquet`` path, as parquet (columns as :func:`read_table` builds them);
    returns the number of rows."""
    if Path(path).suffix.lower() in PARQUET_SUFFIXES:
        rows = [jsonable(row) for row in rows]
        names = list(dict.fromkeys(name for row in rows for name in row))
        columns = {name: [row.get(name, ABSENT) for row in rows] for name in names}
        write_table(table_from_columns(columns, len(rows)), path)
        return len(rows)
    count = 0
    with atomic_open(path) as out:
        for row in compact_rows(jsonable(row) for row in rows):
            out.write(json.dumps(row, ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


def write_json_lines(table, handle) -> None:
    """Write a table's rows as JSON lines to a binary handle (see :func:`write_table`)."""
    import orjson

    names = table.column_names
    json_columns = {name for name in names if is_json_type(table.schema.field(name).type)}
    options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    if not names:
        handle.write(b"{}\n" * table.num_rows)
        return
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        columns = []
        for name, column in zip(names, batch.columns):
            if name in json_columns:
                columns.append([None if text is None else orjson.Fragment(text) for text in column.storage.to_pylist()])
            else:
                columns.append(column.to_pylist())
        lines = []
        for values in zip(*columns):
            row = {name: value for name, value in zip(names, values)
                   if not (value is None and name in json_columns)}
            lines.append(orjson.dumps(row, default=_to_json, option=options))
        if lines:
            handle.write(b"\n".join(lines) + b"\n")


def _to_json(value: Any) -> Any:
    """JSON for Arrow values JSON has no type for (dates, decimals, bytes)."""
    import datetime
    import decimal

    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as JSON")


def compact_provenance(table):
    """The table with its run provenance columns replaced by references and records, as a
    JSON-lines file stores them (:mod:`trajval_ops.provenance_records`).

    Runs of equal values are found by comparing Arrow slices (no Python value per row), so a
    column repeating one value over a million rows costs one record and one comparison pass.
    """
    import numpy as np
    import pyarrow as pa

    names = [name for name in table.column_names if name in RUN_PROVENANCE]
    if not names or table.num_rows == 0:
        return table
    columns = {name: table.column(name).combine_chunks() for name in names}
    starts = sorted({start for column in columns.values() for start in run_starts(column)})
    lengths = np.diff(np.append(starts, table.num_rows))
    ids: dict[str, int] = {}
    records: dict[int, str] = {}  # first row of each id -> the record's JSON text
    segment_ids = []
    for start in starts:
        record = {name: value for name in names if (value := value_at(columns[name], start)) is not ABSENT}
        if not record:
            segment_ids.append(-1)
            continue
        ref = record_id(record)
        if ref not in ids:
            ids[ref] = len(ids)
            records[start] = json_text(record)
        segment_ids.append(ids[ref])
    row_ids = np.repeat(np.asarray(segment_ids, dtype=np.int64), lengths)
    refs = list(ids)
    if (row_ids < 0).any():  # rows without run provenance: no reference key at all
        ref_column = json_array([ABSENT if i < 0 else refs[i] for i in row_ids.tolist()])
    else:
        ref_column = pa.DictionaryArray.from_arrays(pa.array(row_ids, pa.int32()), pa.array(refs)).cast(pa.string())
    texts = [None] * table.num_rows
    for row, text in records.items():
        texts[row] = text
    position = table.column_names.index(names[0])
    table = table.drop_columns(names)
    table = table.add_column(position, PROVENANCE_REF, ref_column)
    return table.add_column(position + 1, PROVENANCE_RECORD,
                            pa.ExtensionArray.from_storage(json_type(), pa.array(texts, pa.string())))
