"""Input checks that name the row and the field, shared by every operator and tool.

Batches arrive as dicts of lists (Data-Juicer's batched format) or as Arrow tables (pools read
by :mod:`trajval_ops.pools.io`). A bad value raises :class:`~trajval_ops.errors.TrajvalInputError`
whose message names the row (its id when the row has one, else its position) and the field, so
that ``dj-process`` stops with a message a user can act on.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from trajval_ops.errors import TrajvalInputError, first_few
from trajval_ops.fields import ID_CANDIDATES
from trajval_ops.pools.io import decoded_values, is_json_type, struct_path_array, table_path_values, table_row
from trajval_ops.rows import batch_row, path_root, row_label


def value_problem(value: Any, lower: float = 0.0, upper: float | None = None) -> str | None:
    """What is wrong with one numeric field value (the wording every reader uses), or None.

    Strings are rejected even when they hold a number: a reward written as text is a bug upstream.
    """
    if value is None:
        return "is missing (null)"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"must be a number, got {type(value).__name__} {value!r}"
    value = float(value)
    if not math.isfinite(value):
        return f"is {value}"
    if upper is not None and not lower <= value <= upper:
        return f"= {value} is outside [{lower:g}, {upper:g}]"
    if value < lower:
        return f"= {value} is not a finite number >= {lower:g}"
    return None


def float_column(
    samples: Mapping[str, Sequence[Any]],
    field: str,
    *,
    lower: float = 0.0,
    upper: float | None = None,
    id_key: str | None = None,
    position_offset: int | None = 0,
) -> np.ndarray:
    """Read ``field`` of every row in a batch (dict of lists) as floats in [lower, upper].

    :param upper: None for no upper bound (weights); 1.0 for rewards and scores.
    :param position_offset: position of the batch's first row in the pool, for messages; None
        when the global position is unknown (the message then relies on the row's id).
    :raises TrajvalInputError: naming the first bad row: field absent, None, a non-number,
        NaN/inf, or a value out of bounds.
    """
    if field not in samples:
        # field absent from the whole batch: name the first row.
        raise TrajvalInputError(f"{_label(samples, 0, id_key, position_offset)}: field '{field}' is missing")
    column = samples[field]
    out = np.empty(len(column), dtype=np.float64)
    for i, value in enumerate(column):
        if type(value) is float or type(value) is int:  # the common case, checked in bulk below
            out[i] = value
            continue
        problem = value_problem(value, lower, upper)
        if problem is not None:
            earlier = first_out_of_bounds(out[:i], lower, upper)
            if earlier is not None:  # report the first bad row, not the first non-number
                i, problem = earlier, value_problem(out[earlier], lower, upper)
            raise TrajvalInputError(f"{_label(samples, i, id_key, position_offset)}: field '{field}' {problem}")
        out[i] = float(value)
    bad = first_out_of_bounds(out, lower, upper)
    if bad is not None:
        raise TrajvalInputError(
            f"{_label(samples, bad, id_key, position_offset)}: field '{field}' {value_problem(out[bad], lower, upper)}"
        )
    return out


def first_out_of_bounds(values: np.ndarray, lower: float, upper: float | None) -> int | None:
    bad = ~np.isfinite(values) | (values < lower)
    if upper is not None:
        bad |= values > upper
    return int(np.argmax(bad)) if bad.any() else None


def _label(samples, i, id_key, position_offset) -> str:
    position = None if position_offset is None else position_offset + i
    try:
        row = batch_row(samples, i)
    except IndexError:
        row = {}
    return row_label(row, position, id_key)


def arrow_numeric_column(
    table,
    field: str,
    *,
    lower: float = 0.0,
    upper: float | None = None,
    id_key: str | None = None,
    position_offset: int | None = 0,
    unread: np.ndarray | None = None,
) -> np.ndarray:
    """Read a column of a ``pyarrow.Table`` as float64, checked like the batch readers.

    Vectorised for large pools; on a bad value the message names the first offending row.

    :param position_offset: position of the table's first row in the pool, for messages; None
        when unknown (a Ray batch): the message then relies on the row's id.
    :param unread: bool per row: rows left unread and unchecked (NaN), e.g. those a sampled pass
        did not measure; None: every row.
    """
    import pyarrow as pa

    def fail(position: int, problem: str):
        row = table_row(table, position)
        where = None if position_offset is None else position_offset + position
        raise TrajvalInputError(f"{row_label(row, where, id_key)}: field '{field}' {problem}")

    if field not in table.column_names:
        if table.num_rows == 0:
            raise TrajvalInputError(f"field '{field}' is missing (the pool is empty)")
        fail(0, "is missing")
    column = table.column(field)
    skip = unread is not None and bool(np.any(unread))
    if skip or is_json_type(column.type) or not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)) \
            or column.null_count:
        values = decoded_values(column) if is_json_type(column.type) else column.to_pylist()
        for position, value in enumerate(values):
            if skip and unread[position]:
                values[position] = math.nan
                continue
            problem = value_problem(value, lower, upper)
            if problem is not None:
                fail(position, problem)
        values = np.asarray(values, dtype=np.float64)
    else:
        values = np.asarray(column.to_numpy(), dtype=np.float64)
    if skip:
        checked = first_out_of_bounds(values[~unread], lower, upper)
        bad = None if checked is None else int(np.flatnonzero(~unread)[checked])
    else:
        bad = first_out_of_bounds(values, lower, upper)
    if bad is not None:
        fail(bad, value_problem(values[bad], lower, upper))
    return values


def id_key_of(table, id_key: str | None) -> str | None:
    """``id_key``, or else the first of :data:`ID_CANDIDATES` any row holds (not the first row
    alone: a pool whose first rows lack ids still has its ids checked), or None."""
    if id_key:
        return id_key
    for candidate in ID_CANDIDATES:
        values = table_path_values(table, candidate)
        if values is not None and any(value is not None for value in values):
            return candidate
    return None


def _distinct_by_arrow(table, key: str) -> bool:
    """Whether a native string or integer id column is free of repeats (counted in Arrow; the
    row-by-row check names the rows when it is not)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = table.column(key) if key in table.column_names else struct_path_array(table, key)
    if array is None or not (pa.types.is_string(array.type) or pa.types.is_integer(array.type)):
        return False
    return pc.count_distinct(array, mode="only_valid").as_py() == len(array) - array.null_count


def check_unique_ids(table, id_key: str | None = None, what: str = "") -> None:
    """Refuse a pool in which two rows share a task id (the id key or the first id field the
    pool has; rows without one are not compared): the error names both rows."""
    key = id_key_of(table, id_key)
    if key and _distinct_by_arrow(table, key):
        return
    values = table_path_values(table, key) if key else None
    if values is None:
        return
    seen: dict[str, int] = {}
    for position, value in enumerate(values):
        if value is None:
            continue
        text = str(value)
        if text in seen:
            prefix = f"{what}: " if what else ""
            raise TrajvalInputError(
                f"{prefix}row {position} ({key}={value!r}): id field '{key}' = {text!r} repeats row {seen[text]}; "
                "task ids must be unique (deduplicate the pool, or set id_key to a field that is unique)"
            )
        seen[text] = position


def group_values(table, key: str, what: str, id_key: str | None = None) -> list:
    """Every row's group at the dotted path ``key`` (a ``group_key``): a path no row holds is an
    error naming it (a misspelled child of an existing struct included); rows lacking it among
    rows that have it are counted and the first named in a warning (they form the group None)."""
    from loguru import logger

    values = table_path_values(table, key)
    if values is None:
        root = path_root(key)
        known = ""
        if root in table.column_names and root != key:
            children = sorted({child for row in table_path_values(table, root) or [] if isinstance(row, Mapping)
                               for child in row})
            known = f"; the rows' '{root}' holds {first_few(map(repr, children), 20) or 'nothing'}"
        raise TrajvalInputError(f"{what}: group_key '{key}' is not found on any row{known}")
    missing = [position for position, value in enumerate(values) if value is None]
    if missing:
        logger.warning(f"{what}: {len(missing)} of {len(values)} rows lack group_key '{key}' (the first: "
                       f"{row_label(table_row(table, missing[0]), missing[0], id_key)}); they form one group, None")
    return values
