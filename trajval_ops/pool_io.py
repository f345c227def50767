"""The one reader and writer of pools (JSON lines or parquet), rows or Arrow tables, without
rewriting a value.

- rows: :func:`read_rows` (streamed) and :func:`write_rows` (atomic);
- Arrow tables: :func:`read_table` and :func:`write_table` (atomic), what the operators use.

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

from __future__ import annotations

import json
import os
import re
import sys
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Iterator

from trajval_ops.atomic import atomic_open, jsonable
from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF, RUN_PROVENANCE
from trajval_ops.provenance_records import (
    compact_rows, expand_rows, not_a_string, record_id, record_missing, register_record, run_starts,
)
from trajval_ops.rows import get_path, row_label

JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")
#: Rows parsed before their columns are converted to Arrow (bounds the Python objects held).
CHUNK_ROWS = 32768

class _AbsentType:
    """The value of a key a row lacks (distinct from JSON null)."""


ABSENT = _AbsentType()
#: 19 digits in a row may be an integer beyond 64 bits, which orjson reads as a float; such
#: lines are parsed by the standard library instead.
_LONG_DIGITS = re.compile(rb"\d{19}")
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _may_hold_long_integer(data: bytes) -> bool:
    """Whether ``data`` has a run of 19 digits (a substring search, ~8x faster than the regex)."""
    return b"0000000000000000000" in data.translate(_DIGITS_TO_ZERO)


# ----------------------------------------------------------------------------- reading


def pool_files(path: str | os.PathLike) -> list[Path]:
    """The pool files of ``path``: the file itself, or a folder's JSONL (also gzipped) and
    parquet files (recursively, sorted), leaving out hidden files (an interrupted atomic write)
    and the work folders Data-Juicer leaves beside an export (their event logs are not rows)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        work = {folder for folder in path.rglob("*") if folder.is_dir() and _is_data_juicer_work_folder(folder)}
        files = sorted(p for p in path.rglob("*") if p.is_file() and _pool_kind(p) is not None
                       and not p.name.startswith(".") and not any(parent in work for parent in p.parents))
        if not files:
            raise TrajvalInputError(f"{path}: no .jsonl, .json or .parquet file in this folder (nor a gzipped one)")
        return files
    raise TrajvalInputError(f"pool file not found: {path}")


def _pool_kind(path: Path) -> str | None:
    """``jsonl``, ``parquet`` or None by the file name (``.jsonl.gz`` / ``.json.gz``: gzipped JSON lines)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = Path(name).suffix
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES and not path.name.lower().endswith(".gz"):
        return "parquet"
    return None


def _is_data_juicer_work_folder(folder: Path) -> bool:
    """A folder Data-Juicer made for a run (``cli.yaml`` and ``events_*.jsonl`` in it)."""
    return (folder / "cli.yaml").is_file() and any(folder.glob("events_*.jsonl"))


def _open_binary(path: Path):
    """A pool file for reading bytes; gzipped ones decompressed on the fly."""
    if path.name.lower().endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")


def count_rows(path: str | os.PathLike) -> int:
    """Rows of a pool (a file or a folder of them) without parsing it: parquet metadata, the
    non-blank lines of JSON lines."""
    total = 0
    for file in pool_files(path):
        if file.suffix.lower() in PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            total += pq.ParquetFile(file).metadata.num_rows
            continue
        if _is_json_array(file):
            total += sum(1 for _ in _json_array_rows(file))
            continue
        with _open_binary(file) as handle:
            total += sum(1 for line in handle if not line.isspace())
    return total


def _is_json_array(path: Path) -> bool:
    """Whether a JSON file holds one array (a ``.json`` export of Data-Juicer's own writer),
    not JSON lines."""
    with _open_binary(path) as handle:
        head = handle.read(4096).lstrip()
    return head.startswith(b"[")


def _json_array_rows(path: Path) -> list:
    """The objects of a JSON-array file (parsed exactly), each checked to be an object."""
    with _open_binary(path) as handle:
        try:
            rows = json.loads(handle.read().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as bad:
            raise TrajvalInputError(f"{path}: not a valid JSON array of rows: {bad}") from None
    for position, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TrajvalInputError(f"{path}: element {position} of the array is a JSON {_json_kind(row)}, "
                                    "not a JSON object (a row must be an object)")
    return rows


def read_rows(path: str | os.PathLike) -> Iterator[dict]:
    """The rows of a pool file, in order, streamed: JSON lines (``.jsonl``/``.json``) or parquet
    (``.parquet``/``.pq``), whatever the tool.

    :raises TrajvalInputError: a missing file, or a bad JSON line (named as
        :func:`iter_json_blocks` names it).
    """
    path = Path(path)
    if not path.is_file():
        raise TrajvalInputError(f"pool file not found: {path}")
    if path.suffix.lower() in PARQUET_SUFFIXES:
        import pyarrow as pa  # only parquet readers pay for pyarrow
        import pyarrow.parquet as pq

        batches = pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS)
        # JSON columns decoded, absent keys left out
        yield from expand_rows((row for batch in batches for row in table_rows(pa.Table.from_batches([batch]))),
                               where=str(path))
        return
    yield from expand_rows((row for _, rows in iter_json_blocks(path) for row in rows), where=str(path))


def iter_json_blocks(path: str | os.PathLike, first_row: int = 0,
                     block_rows: int = CHUNK_ROWS) -> Iterator[tuple[int, list[dict]]]:
    """``(position of the block's first row, rows)`` for blocks of up to ``block_rows``
    non-blank lines of a JSON-lines file.

    A block is parsed in one pass; only a block holding a bad line (or a 19-digit run, which
    may be an integer beyond 64 bits) is walked line by line to parse it exactly or name the
    line.

    :raises TrajvalInputError: a line that is not UTF-8 (byte offset in the file and in the
        line), not valid JSON, ``null``, or not a JSON object.
    """
    import orjson

    loads = orjson.loads
    position = first_row
    line_number = offset = 0
    if _is_json_array(Path(path)):
        rows = _json_array_rows(Path(path))
        for start in range(0, len(rows), block_rows):
            yield position + start, rows[start:start + block_rows]
        return
    with _open_binary(Path(path)) as handle:
        while True:
            lines = handle.readlines(1 << 22)
            if not lines:
                return
            block_start, block_line = offset, line_number
            offset += sum(map(len, lines))
            line_number += len(lines)
            data = [line for line in lines if not line.isspace()]
            rows = None
            if not _may_hold_long_integer(b"".join(data)):
                try:
                    rows = [loads(line) for line in data]
                except orjson.JSONDecodeError:
                    rows = None
            if rows is None or not all(type(row) is dict for row in rows):
                rows = _parse_lines_exactly(path, lines, position, block_line, block_start)
            while rows:
                yield position, rows[:block_rows]
                position += min(len(rows), block_rows)
                rows = rows[block_rows:]


def _parse_lines_exactly(path, lines: list[bytes], position: int, line_number: int, offset: int) -> list[dict]:
    import orjson

    rows = []
    for line in lines:
        line_number += 1
        start, offset = offset, offset + len(line)
        if line.isspace():
            continue
        where = f"{path}: line {line_number} (row {position})"
        try:
            row = _slow_parse(line, where, start) if _LONG_DIGITS.search(line) else orjson.loads(line)
        except orjson.JSONDecodeError:
            row = _slow_parse(line, where, start)
        if row is None:
            raise TrajvalInputError(f"{where} is null, not a JSON object (a row must be an object)")
        if not isinstance(row, dict):
            raise TrajvalInputError(f"{where} is a JSON {_json_kind(row)}, not a JSON object")
        rows.append(row)
        position += 1
    return rows


def _slow_parse(line: bytes, where: str, start: int) -> Any:
    """Parse a line with the standard library (exact for integers beyond 64 bits, and lenient
    with NaN / Infinity like Python's own JSON writer), or say why it is not JSON."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as bad:
        raise TrajvalInputError(
            f"{where} is not valid UTF-8: byte {bad.start} of the line (byte offset {start + bad.start} in "
            f"the file) is {line[bad.start:bad.start + 1]!r}; re-encode the file as UTF-8"
        ) from None
    try:
        value = json.loads(text)  # big integers, which orjson refuses
    except ValueError as bad:
        raise TrajvalInputError(f"{where} is not valid JSON: {bad}") from None
    except RecursionError:
        raise TrajvalInputError(f"{where} is nested deeper than can be read (objects or arrays inside each other "
                                f"more than {sys.getrecursionlimit()} levels deep)") from None
    surrogate = _LONE_SURROGATE.search(text) and _first_surrogate(value)
    if surrogate:
        raise TrajvalInputError(f"{where} holds a lone surrogate escape ({surrogate}), which is no Unicode character "
                                "and cannot be written as UTF-8; fix the text (a broken emoji or a cut string)")
    return value


#: A \uD800-\uDFFF escape in JSON text (a surrogate; orjson refuses it, the standard library keeps it).
_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _first_surrogate(value: Any) -> str | None:
    """The first string in ``value`` (keys included) holding an unpaired surrogate, escaped."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as bad:
                return f"\\u{ord(item[bad.start]):04x} in {item[max(0, bad.start - 10):bad.start + 10]!r}"
    return None


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def read_table(path: str | os.PathLike, *, owned_prefix: str = "trajval_"):
    """Read a pool (JSON lines or parquet file, or a folder of them) into one ``pyarrow.Table``.

    JSON columns are native Arrow where that is exact, ``arrow.json`` otherwise (module doc).
    Columns named ``owned_prefix*`` are written by trajval_ops and always hold one kind of value;
    one that mixes numbers with strings (``0.5`` and ``"0.5"``) is an error naming the row.

    :raises TrajvalInputError: missing file, empty pool, or a bad line (see
        :func:`iter_json_lines`).
    """
    tables = []
    position = 0
    files = pool_files(path)
    for file in files:
        if file.suffix.lower() in PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            table = pq.read_table(file)
        else:
            table = _read_json_lines(file, position, owned_prefix)
        position += table.num_rows
        tables.append(table)
    if position == 0:
        raise TrajvalInputError(f"the pool is empty (0 rows): {', '.join(str(f) for f in files)}")
    table = tables[0] if len(tables) == 1 else concat_tables(tables)
    return expand_provenance(table, where=str(path))


def concat_tables(tables):
    """Concatenate tables by column name; a column whose types differ between tables becomes
    ``arrow.json`` (exact), and a column some tables lack is absent (null) in their rows."""
    import pyarrow as pa

    names: list[str] = []
    for table in tables:
        names.extend(n for n in table.column_names if n not in names)
    columns = {}
    for name in names:
        parts = [t.column(name) if name in t.column_names else None for t in tables]
        types = {p.type for p in parts if p is not None and p.type != pa.null()}
        if all(p is not None for p in parts) and len(types) <= 1:
            target = types.pop() if types else pa.null()
            columns[name] = pa.chunked_array([_cast(c, target) for p in parts for c in p.chunks], target)
        else:
            chunks = []
            for table, part in zip(tables, parts):
                if part is None:
                    chunks.append(json_array([ABSENT] * table.num_rows))
                else:
                    chunks.extend(_as_json_array(c) for c in part.chunks)
            columns[name] = pa.chunked_array(chunks, json_type())
    return pa.table(columns)


def _read_json_lines(path: Path, first_row: int, owned_prefix: str):
    import pyarrow as pa

    columns: dict[str, list] = {}  # name -> list of chunk arrays (native or json)
    kinds: dict[str, tuple[str, int, dict]] = {}  # owned column -> (kind, first position, row)
    rows_done = 0

    def flush(first_position: int, rows: list[dict]):
        nonlocal rows_done
        names = list(columns)
        for row in rows:
            for key in row:
                if key not in columns:
                    columns[key] = [json_array([ABSENT] * rows_done)] if rows_done else []
                    names.append(key)
        for name in names:
            try:
                values = list(map(itemgetter(name), rows))
            except KeyError:  # some rows lack the key
                values = [row.get(name, ABSENT) for row in rows]
            if name.startswith(owned_prefix):
                _check_owned_kinds(path, name, values, first_position, rows, kinds)
            columns[name].append(_chunk_array(values))
        rows_done += len(rows)

    for first_position, rows in iter_json_blocks(path, first_row):
        flush(first_position, rows)
    if not columns:  # rows without a single field keep their count
        return pa.table({"_": pa.nulls(rows_done)}).drop_columns(["_"])
    return pa.table({name: _join_chunks(chunks) for name, chunks in columns.items()})


def _check_owned_kinds(path, name, values, first_position, rows, kinds) -> None:
    types = set(map(type, values)) - {_AbsentType, type(None)}
    if not types or (name in kinds and {_value_kind_of_type(t) for t in types} == {kinds[name][0]}):
        return  # the block holds the column's kind only: nothing to name
    for position, (value, row) in enumerate(zip(values, rows), start=first_position):
        if value is ABSENT or value is None:
            continue
        kind = "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else _json_kind(value)
        if name not in kinds:
            kinds[name] = (kind, position, row)
        elif kind != kinds[name][0] and "number" in (kind, kinds[name][0]):
            raise TrajvalInputError(
                f"{path}: {row_label(row, position)}: field '{name}' holds {type(value).__name__} {value!r} "
                f"where earlier rows hold a {kinds[name][0]}"
            )


def _value_kind_of_type(kind: type) -> str:
    return "number" if kind in (int, float) else {str: "string", bool: "boolean", list: "array"}.get(kind, kind.__name__)


_PRIMITIVE_TYPES = {str: "string", bool: "bool", int: "int64", float: "float64"}


def _chunk_array(values: list):
    """One chunk of a column: native when every row has the key and Arrow round-trips the
    values exactly, else ``arrow.json``."""
    import pyarrow as pa

    kinds = set(map(type, values))
    if _AbsentType in kinds:
        return json_array(values)
    kinds.discard(type(None))
    if not kinds:
        return pa.nulls(len(values))
    if len(kinds) == 1:
        (kind,) = kinds
        if kind in _PRIMITIVE_TYPES:
            try:
                return pa.array(values, type=_PRIMITIVE_TYPES[kind])
            except (pa.ArrowInvalid, OverflowError):  # integers beyond 64 bits
                return json_array(values)
        if kind in (dict, list):
            return _nested_array(values)
    return json_array(values)


def _nested_array(values: list):
    """A native array of objects / arrays when Arrow gives every value back exactly.

    Arrow can change a value in two ways only: an object lacking a key gets it as null, and an
    integer in a float field becomes a float. An array with no integral value in a float field
    and no null inside its objects is therefore exact as built (:func:`_exact_by_construction`, metadata only).
    Otherwise the values are compared after a round trip; exactness depends only on the
    inferred type, so that is done on the distinct values (by canonical JSON text)."""
    import orjson
    import pyarrow as pa

    arrow_errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
    try:
        array = pa.array(values)
    except arrow_errors:
        return json_array(values)
    if _exact_by_construction(array):
        return array
    try:
        dumps, option = orjson.dumps, orjson.OPT_SORT_KEYS
        distinct = list(dict(zip([dumps(v, option=option) for v in values], values)).values())
    except (TypeError, orjson.JSONEncodeError):  # integers beyond 64 bits
        distinct = values
    probe = array if distinct is values else pa.array(distinct, type=array.type)
    return array if _same_json(distinct, probe.to_pylist()) else json_array(values)


def _exact_by_construction(array) -> bool:
    """No integral value in a float field (it may have been an integer) and no null inside any
    object (it may have been an absent key); see :func:`_nested_array`."""
    import pyarrow as pa

    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_floating(kind):  # an integral float may have been an integer
        return len(array) == array.null_count or not pc.any(pc.equal(array, pc.floor(array))).as_py()
    if pa.types.is_struct(kind):
        return all(child.null_count == 0 and _exact_by_construction(child) for child in array.flatten())
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _exact_by_construction(array.flatten())
    return True


def _same_json(original: list, round_tripped: list) -> bool:
    """Whether two value lists are the same JSON (types kept: 1 != 1.0 != true; a key with a
    null value != an absent key; object key order ignored)."""
    import orjson

    option = orjson.OPT_SORT_KEYS
    try:
        return orjson.dumps(original, option=option) == orjson.dumps(round_tripped, option=option)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(original, sort_keys=True) == json.dumps(round_tripped, sort_keys=True)


def _join_chunks(chunks: list):
    """A column from its chunks: native when every chunk has one native type (null chunks
    adapt), else every chunk as ``arrow.json``."""
    import pyarrow as pa

    types = {c.type for c in chunks if c.type != pa.null()}
    if len(types) <= 1 and not any(is_json_type(t) for t in types):
        target = types.pop() if types else pa.null()
        return pa.chunked_array([_cast(c, target) for c in chunks], target)
    return pa.chunked_array([_as_json_array(c) for c in chunks], json_type())


def _cast(array, target):
    # casting to the type an array already has can corrupt it (pyarrow, list<null>)
    return array if array.type == target else array.cast(target)


def table_from_columns(columns: dict, num_rows: int | None = None):
    """A table from Python column lists (a batch), each column native where exact, else
    ``arrow.json`` (as :func:`read_table` decides)."""
    import pyarrow as pa

    if not columns:
        return pa.table({"_": pa.nulls(num_rows or 0)}).drop_columns(["_"])
    return pa.table({name: _chunk_array(list(values)) for name, values in columns.items()})


# ----------------------------------------------------------------------------- json columns


def json_type():
    """The Arrow ``arrow.json`` extension type (``datasets.Json`` in a dataset)."""
    import pyarrow as pa

    return pa.json_(pa.string())


def is_json_type(arrow_type) -> bool:
    import pyarrow as pa

    return isinstance(arrow_type, pa.JsonType)


def json_text(value: Any) -> str:
    """The exact JSON text of one value."""
    import orjson

    try:
        return orjson.dumps(value).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):  # integers beyond 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_array(values: Iterable[Any]):
    """An ``arrow.json`` array of the values' JSON text; the absent-key marker becomes null."""
    import pyarrow as pa

    storage = pa.array([None if v is ABSENT else json_text(v) for v in values], pa.string())
    return pa.ExtensionArray.from_storage(json_type(), storage)


def _as_json_array(array):
    import pyarrow as pa

    if is_json_type(array.type):
        return array
    if array.type == pa.null():
        return json_array([None] * len(array))
    return json_array(array.to_pylist())


def decoded_values(column) -> list:
    """Python values of a column; ``arrow.json`` text is decoded (an absent key reads None)."""
    import orjson

    if is_json_type(column.type):
        chunks = column.chunks if hasattr(column, "chunks") else [column]
        texts = [text for chunk in chunks for text in chunk.storage.to_pylist()]
        loads = orjson.loads
        if _may_hold_long_integer("".join(t for t in texts if t is not None).encode()):
            loads = _exact_loads  # orjson reads an integer beyond 64 bits as a float
        return [None if text is None else loads(text) for text in texts]
    return column.to_pylist()


def _exact_loads(text: str):
    """One JSON text; the standard library where it may hold an integer beyond 64 bits."""
    import orjson

    return json.loads(text) if _LONG_DIGITS.search(text.encode()) else orjson.loads(text)


# ----------------------------------------------------------------------------- row access


def table_row(table, position: int) -> dict:
    """Row ``position`` of a ``pyarrow.Table`` as Python values (``arrow.json`` text decoded, a
    key the row lacks left out)."""
    row = {}
    for name, column in zip(table.column_names, table.slice(position, 1).columns):
        if is_json_type(column.type):
            if column.chunk(0).storage[0].is_valid:
                row[name] = decoded_values(column)[0]
        else:
            row[name] = column.to_pylist()[0]
    return row


def table_path_values(table, path: str) -> list | None:
    """Every row's value at a dotted path of a ``pyarrow.Table`` (None where a row lacks it), or
    None when no row holds the path: no column, or a column whose rows all lack the leaf
    (``extra_info.famly`` where ``extra_info`` exists), so that a misspelled path is "not found"
    the same way whichever level is misspelled."""
    if path in table.column_names:
        return decoded_values(table.column(path))
    root, _, rest = path.partition(".")
    if not rest or root not in table.column_names:
        return None
    nested = struct_path_array(table, path)
    if nested is not None:
        return None if _struct_lacks(table.schema.field(root).type, rest) else nested.to_pylist()
    absent = object()
    values = [get_path({root: value}, path, absent) for value in decoded_values(table.column(root))]
    if all(value is absent for value in values):
        return None
    return [None if value is absent else value for value in values]


def _struct_lacks(arrow_type, rest: str) -> bool:
    """Whether a native struct type has no field at the dotted path ``rest`` below it."""
    import pyarrow as pa

    for part in rest.split("."):
        if not pa.types.is_struct(arrow_type) or arrow_type.get_field_index(part) < 0:
            return True
        arrow_type = arrow_type.field(part).type
    return False


def struct_path_array(table, path: str):
    """The values at a dotted path through native struct columns as one Arrow array (None where
    a row or a level is null, or the struct lacks the field), or None when the path leaves
    native structs (a JSON column or JSON text on the way: :func:`table_path_values` reads it
    row by row as :func:`~trajval_ops.rows.get_path` does)."""
    import pyarrow as pa

    root, *parts = path.split(".")
    if root not in table.column_names:
        return None
    array = table.column(root).combine_chunks()
    for part in parts:
        if not pa.types.is_struct(array.type):
            return None
        index = array.type.get_field_index(part)
        if index < 0:
            return pa.nulls(len(array))
        array = array.flatten()[index]  # flatten: the parent's nulls carried into the child
    return None if is_json_type(array.type) else array


def table_rows(table) -> list[dict]:
    """Every row of a ``pyarrow.Table`` as Python values (``arrow.json`` text decoded, a key the
    row lacks left out)."""
    names = table.column_names
    columns = [decoded_values(table.column(name)) for name in names]
    absent = [is_json_type(table.schema.field(name).type) for name in names]
    storage = [_json_presence(table.column(name)) if flag else None for name, flag in zip(names, absent)]
    rows = []
    for i in range(table.num_rows):
        rows.append({name: column[i] for name, column, present in zip(names, columns, storage)
                     if present is None or present[i]})
    return rows


def _json_presence(column) -> list[bool]:
    return [text is not None for chunk in column.chunks for text in chunk.storage.to_pylist()]


# ----------------------------------------------------------------------------- writing

_BATCH_ROWS = 8192


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
    for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
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


# ----------------------------------------------------------------------------- run provenance


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
        record = {name: value for name in names if (value := _value_at(columns[name], start)) is not ABSENT}
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


def expand_provenance(table, where: str = "the pool"):
    """The table with references resolved back into the run provenance columns (inverse of
    :func:`compact_provenance`); a table without references is returned as it is.

    :raises TrajvalInputError: a record that does not match its id, a reference without a
        record, naming the row.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if PROVENANCE_REF not in table.column_names:
        if PROVENANCE_RECORD in table.column_names:
            raise TrajvalInputError(f"{where}: field '{PROVENANCE_RECORD}' without '{PROVENANCE_REF}'")
        return table
    ref_column = table.column(PROVENANCE_REF)
    if is_json_type(ref_column.type) or not pa.types.is_string(ref_column.type):
        values = decoded_values(ref_column)
        for position, ref in enumerate(values):
            if ref is not None and not isinstance(ref, str):
                raise not_a_string(where, row_label(table_row(table, position), position), ref)
        ref_column = pa.chunked_array([pa.array(values, pa.string())])
    encoded = pc.dictionary_encode(ref_column).combine_chunks()
    refs = encoded.dictionary.to_pylist()
    records: dict[str, dict] = {}
    if PROVENANCE_RECORD in table.column_names:
        for position, record in enumerate(decoded_values(table.column(PROVENANCE_RECORD))):
            if record is not None:
                register_record(records, record, ref_column[position].as_py(),
                                lambda: row_label(table_row(table, position), position), where)
    for ref in refs:
        if ref not in records:
            position = pc.index(ref_column, ref).as_py()
            raise record_missing(where, row_label(table_row(table, position), position), ref)
    indices = encoded.indices.fill_null(len(refs)).to_numpy(zero_copy_only=False).astype(np.int64)
    names = list(dict.fromkeys(name for ref in refs for name in records[ref]))
    distinct = [records[ref] for ref in refs]
    if encoded.indices.null_count:
        distinct.append({})  # rows without a reference (their indices point here)
    expanded = table_from_columns({name: [record.get(name, ABSENT) for record in distinct] for name in names})
    position = table.column_names.index(PROVENANCE_REF)
    table = table.drop_columns([c for c in (PROVENANCE_REF, PROVENANCE_RECORD) if c in table.column_names])
    take = pa.array(indices)
    for offset, name in enumerate(names):
        if name in table.column_names:
            raise TrajvalInputError(f"{where}: field '{name}' is both a column and in '{PROVENANCE_RECORD}'")
        table = table.add_column(position + offset, name, expanded.column(name).take(take))
    return table


def _value_at(array, position: int):
    """A column's Python value at a row; ABSENT for a key an ``arrow.json`` row lacks."""
    value = array.slice(position, 1)
    if is_json_type(value.type) and value.storage[0].as_py() is None:
        return ABSENT
    return decoded_values(value)[0]
