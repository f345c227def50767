"""The Arrow proofs: JSON rows as Arrow columns that give back exactly the values they were given.
A column stays native only where Arrow returns every value as read; any other becomes an
``arrow.json`` column holding each value's exact JSON text (module doc of
:mod:`trajval_ops.pools.io`). Also: reading a table's values by dotted path, and the run
provenance's references resolved into columns."""

from __future__ import annotations

import json
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable

from trajval_ops.canonical import canonical_json
from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF
from trajval_ops.provenance_records import (
    not_a_string, record_missing, register_record, run_starts,
)
from trajval_ops.rows import get_path, path_parts, row_label
from trajval_ops.pools.io.jsonl import LONG_DIGITS, iter_json_blocks, json_kind, may_hold_long_integer


class _AbsentType:
    """The value of a key a row lacks (distinct from JSON null)."""


ABSENT = _AbsentType()




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


def read_json_lines(path: Path, first_row: int, owned_prefix: str):
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
        kind = "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else json_kind(value)
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
    values exactly (and parquet can store the type: no struct without fields), else ``arrow.json``."""
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
    if _has_fieldless_struct(array.type):  # `{}` somewhere: parquet cannot write a struct without fields
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


def _has_fieldless_struct(arrow_type) -> bool:
    """Whether an Arrow type holds a struct without fields (what an empty object ``{}`` gives,
    at any depth), which parquet cannot store."""
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        return arrow_type.num_fields == 0 or any(_has_fieldless_struct(field.type) for field in arrow_type)
    if pa.types.is_map(arrow_type):
        return _has_fieldless_struct(arrow_type.key_type) or _has_fieldless_struct(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _has_fieldless_struct(arrow_type.value_type)
    return False


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
        if may_hold_long_integer("".join(t for t in texts if t is not None).encode()):
            loads = _exact_loads  # orjson reads an integer beyond 64 bits as a float
        return [None if text is None else loads(text) for text in texts]
    return column.to_pylist()


def _exact_loads(text: str):
    """One JSON text; the standard library where it may hold an integer beyond 64 bits."""
    import orjson

    return json.loads(text) if LONG_DIGITS.search(text.encode()) else orjson.loads(text)


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
    root, *rest = path_parts(path)
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


def _struct_lacks(arrow_type, rest: list[str]) -> bool:
    """Whether a native struct type has no field at the keys ``rest`` below it."""
    import pyarrow as pa

    for part in rest:
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

    root, *parts = path_parts(path)
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


def distinct_path_values(table, path: str, keys: Iterable[str] | None = None) -> list:
    """The distinct values at a dotted path of a ``pyarrow.Table``'s rows, in order of first
    appearance, nulls left out; ``keys``: of objects, only these keys (an object holding none of
    them reads as null). Every row is read: through native structs in Arrow, one Python value per
    run of equal values (a run's provenance is one value), not per row; JSON text row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = struct_path_array(table, path)
    if array is not None and keys is not None and pa.types.is_struct(array.type):
        kept = [key for key in keys if array.type.get_field_index(key) >= 0]
        if not kept:
            return []
        array = pc.make_struct(*[pc.struct_field(array, key) for key in kept], field_names=kept)
    if array is not None:
        values = [array[start].as_py() for start in run_starts(array)]
    else:
        values = table_path_values(table, path) or []
    if keys is not None:
        values = [{key: value[key] for key in keys if key in value} if isinstance(value, dict) else value
                  for value in values]
        values = [value for value in values if not isinstance(value, dict) or any(v is not None
                                                                                 for v in value.values())]
    distinct: dict[str, Any] = {}
    for value in values:
        if value is not None:
            distinct.setdefault(canonical_json(value), value)
    return list(distinct.values())


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


def provenance_records(table, where: str = "the pool", records: dict | None = None, first_row: int = 0) -> dict:
    """The run provenance records a table carries (id -> record), added to ``records`` when
    given (a folder's files share them: a record is stored once, in the first file that uses it).
    ``first_row`` is the pool's position of the table's first row, for naming rows.

    :raises TrajvalInputError: a record that does not match its id, naming the row.
    """
    records = {} if records is None else records
    if PROVENANCE_RECORD in table.column_names:
        if PROVENANCE_REF not in table.column_names:
            raise TrajvalInputError(f"{where}: field '{PROVENANCE_RECORD}' without '{PROVENANCE_REF}'")
        refs = _reference_column(table, where, first_row)
        for position, record in enumerate(decoded_values(table.column(PROVENANCE_RECORD))):
            if record is not None:
                register_record(records, record, refs[position].as_py(),
                                lambda: _label(table, position, first_row), where)
    return records


def _label(table, position: int, first_row: int) -> str:
    return row_label(table_row(table, position), first_row + position)


def _reference_column(table, where: str, first_row: int):
    """The reference column as strings; a reference that is not a string is an error naming the row."""
    import pyarrow as pa

    ref_column = table.column(PROVENANCE_REF)
    if is_json_type(ref_column.type) or not pa.types.is_string(ref_column.type):
        values = decoded_values(ref_column)
        for position, ref in enumerate(values):
            if ref is not None and not isinstance(ref, str):
                raise not_a_string(where, _label(table, position, first_row), ref)
        ref_column = pa.chunked_array([pa.array(values, pa.string())])
    return ref_column


def expand_provenance(table, where: str = "the pool", records: dict | None = None, first_row: int = 0):
    """The table with references resolved back into the run provenance columns (inverse of
    :func:`compact_provenance`); a table without references is returned as it is. ``records``
    (from :func:`provenance_records`, this table's included) resolves references whose record
    another file carries;
    ``first_row`` is the pool's position of the table's first row, for naming rows.

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
    ref_column = _reference_column(table, where, first_row)
    encoded = pc.dictionary_encode(ref_column).combine_chunks()
    refs = encoded.dictionary.to_pylist()
    if records is None:  # else gathered from every file by the caller, this one's included
        records = provenance_records(table, where, first_row=first_row)
    for ref in refs:
        if ref not in records:
            raise record_missing(where, _label(table, pc.index(ref_column, ref).as_py(), first_row), ref)
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


def value_at(array, position: int):
    """A column's Python value at a row; ABSENT for a key an ``arrow.json`` row lacks."""
    value = array.slice(position, 1)
    if is_json_type(value.type) and value.storage[0].as_py() is None:
        return ABSENT
    return decoded_values(value)[0]


def append_columns(table, columns: dict):
    """``table`` with ``columns`` (name -> Arrow array) appended; a same-named column is
    replaced where it stands (as ``datasets`` does), so both executors give one column order."""
    for name, values in columns.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, values)
        else:
            table = table.append_column(name, values)
    return table
