"""The one reader and writer of pools (JSON lines or parquet), rows or Arrow tables, without
rewriting a value.

- rows: :func:`read_rows` (streamed) and :func:`write_rows` (atomic);
- Arrow tables: :func:`read_table` and :func:`write_table` (atomic), what the operators use.

Three jobs, a module each: :mod:`.jsonl` reads JSON lines exactly, :mod:`.arrow` proves the Arrow
columns exact (and reads a table by dotted path), :mod:`.write` writes; :mod:`.read` puts the
reading together. This module is their public surface.

A pool is JSON lines (or parquet); operators work on Arrow tables. Arrow needs one type per
column, JSON does not: a column may hold a chat list in one row and a string in the next, a
``reward_model`` may be an object in one row and a JSON string in another, ``1`` and ``1.5``
share a column, and objects may differ in their keys. Inferring one Arrow type for such a
column rewrites values (``1`` becomes ``1.0``, a missing key becomes ``null``, an object becomes
a string). :func:`read_table` therefore keeps a column native only when every row has it and
Arrow gives back exactly the values it was given; any other column becomes an ``arrow.json``
extension column (``datasets``' ``Json`` feature) holding each value's exact JSON text, with
Arrow null for a row that lacks the key. ``datasets`` decodes such columns to the original
Python values, and :func:`write_table` writes their text back verbatim and omits absent keys,
so every value comes out as it came in.

In a JSON-lines file the run provenance columns (``fields.RUN_PROVENANCE``) are stored once per
file, each row keeping a 6-character reference (:mod:`trajval_ops.provenance_records`); every
reader here resolves them, every writer here stores them so.

Bad input raises :class:`~trajval_ops.errors.TrajvalInputError` naming the file, the line
(and byte offset for text that is not UTF-8) and the row.
"""

from trajval_ops.pools.io.jsonl import (  # noqa: F401
    JSONL_SUFFIXES, PARQUET_SUFFIXES, CHUNK_ROWS, pool_files, count_rows,
    iter_json_blocks,
)
from trajval_ops.pools.io.arrow import (  # noqa: F401
    ABSENT, concat_tables, table_from_columns, json_type, is_json_type, json_text, json_array,
    decoded_values, table_row, table_path_values, struct_path_array, distinct_path_values, table_rows,
    expand_provenance, append_columns,
)
from trajval_ops.pools.io.write import (  # noqa: F401
    write_table, write_rows, write_json_lines, compact_provenance,
)
from trajval_ops.pools.io.read import (  # noqa: F401
    check_pool_file, read_rows, read_table,
)
