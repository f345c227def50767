"""Checks on whole Arrow tables (pools read by :mod:`trajval_ops.jsontable`): numeric columns
and task ids, with messages that name the row and the field like :mod:`trajval_ops.validation`.
"""

from __future__ import annotations

import numpy as np

from trajval_ops.fields import ID_CANDIDATES
from trajval_ops.jsontable import decoded_values, is_json_type, table_path_values, table_row
from trajval_ops.validation import TrajvalInputError, first_out_of_bounds, get_path, row_label, value_problem


def arrow_numeric_column(
    table,
    field: str,
    *,
    lower: float = 0.0,
    upper: float | None = None,
    id_key: str | None = None,
    position_offset: int | None = 0,
) -> np.ndarray:
    """Read a column of a ``pyarrow.Table`` as float64, checked like the batch readers.

    Vectorised for large pools; on a bad value the message names the first offending row.

    :param position_offset: position of the table's first row in the pool, for messages; None
        when unknown (a Ray batch): the message then relies on the row's id.
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
    if is_json_type(column.type) or not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)) \
            or column.null_count:
        values = decoded_values(column) if is_json_type(column.type) else column.to_pylist()
        for position, value in enumerate(values):
            problem = value_problem(value, lower, upper)
            if problem is not None:
                fail(position, problem)
        values = np.asarray(values, dtype=np.float64)
    else:
        values = np.asarray(column.to_numpy(), dtype=np.float64)
    bad = first_out_of_bounds(values, lower, upper)
    if bad is not None:
        fail(bad, value_problem(values[bad], lower, upper))
    return values


def id_key_of(table, id_key: str | None) -> str | None:
    """``id_key``, or else the first of :data:`ID_CANDIDATES` the first row holds, or None."""
    if id_key:
        return id_key
    if table.num_rows == 0:
        return None
    first = table_row(table, 0)
    for candidate in ID_CANDIDATES:
        if get_path(first, candidate, None) is not None:
            return candidate
    return None


def check_unique_ids(table, id_key: str | None = None, what: str = "") -> None:
    """Refuse a pool in which two rows share a task id (the id key or the first id field the
    pool has; rows without one are not compared): the error names both rows."""
    key = id_key_of(table, id_key)
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
