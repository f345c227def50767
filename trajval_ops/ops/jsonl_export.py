"""Atomic, columnar JSONL export for Data-Juicer's default executor.

Data-Juicer writes a JSONL export row by row in Python straight into ``export_path``: a
killed run leaves a truncated file that looks like a finished one, and a million-row pool
takes minutes (measured: ~45 us of CPU per row). When this plugin loads,
``Exporter.to_jsonl`` is replaced for local paths by a writer that serialises the Arrow table
with polars' native NDJSON writer (columnar, ~20x faster) into a temporary file in the same
directory, renamed over ``export_path`` only when complete. Columns polars cannot take (Arrow
extension types) fall back to ``to_pylist`` + orjson, still atomic. The output is one UTF-8
JSON object per line, columns in dataset order, compact separators. Remote paths
(``storage_options``) keep Data-Juicer's writer.
"""

from __future__ import annotations

import functools

from trajval_ops.atomic import atomic_open
from trajval_ops.ops.common import dataset_table

_BATCH_ROWS = 8192


def _write_polars(table, handle) -> None:
    import polars as pl

    # One chunk per column first: polars given columns chunked differently (a memory-mapped
    # pool's columns next to freshly appended ones) used >20 GB on a million rows.
    pl.from_arrow(table.combine_chunks(), rechunk=False).write_ndjson(handle)


def _write_orjson(table, handle) -> None:
    import orjson
    from data_juicer.core.exporter import Exporter

    def default(value):  # numpy scalars/arrays, Arrow scalars: Data-Juicer's own conversion
        converted = Exporter._row_to_json_serializable(value)
        if converted is value:
            raise TypeError(f"cannot write {type(value).__name__} to JSON")
        return converted

    options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
        handle.write(b"".join(orjson.dumps(row, default=default, option=options) + b"\n"
                              for row in batch.to_pylist()))


def write_jsonl_atomic(table, export_path: str) -> None:
    """Write a pyarrow.Table as JSONL to ``export_path`` atomically."""
    from loguru import logger

    try:
        with atomic_open(export_path, "wb") as handle:
            _write_polars(table, handle)
    except Exception as error:  # polars cannot take every Arrow type; orjson takes them all
        logger.info(f"JSONL export: polars could not write this table ({error}); using orjson")
        with atomic_open(export_path, "wb") as handle:
            _write_orjson(table, handle)


def install_jsonl_export() -> None:
    """Replace Data-Juicer's local JSONL export (idempotent)."""
    from data_juicer.core.exporter import Exporter

    original = Exporter.to_jsonl
    if getattr(original, "_trajval_atomic", False):
        return

    @functools.wraps(original)
    def to_jsonl(dataset, export_path, num_proc=1, **kwargs):
        if kwargs.get("storage_options") is not None:
            return original(dataset, export_path, num_proc=num_proc, **kwargs)
        write_jsonl_atomic(dataset_table(dataset), export_path)

    to_jsonl._trajval_atomic = True
    Exporter.to_jsonl = staticmethod(to_jsonl)
