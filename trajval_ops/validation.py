"""Input checks that name the row and the field, shared by every operator and tool.

Operators receive batches as dicts of lists (Data-Juicer's batched format). A bad value raises
:class:`TrajvalInputError` whose message names the row (its id when the row has one, else its
position) and the field, so that ``dj-process`` stops with a message a user can act on.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

import numpy as np

from trajval_ops.fields import ID_CANDIDATES


class TrajvalInputError(ValueError):
    """Bad input data: the message names the row and the field."""


_MISSING = object()


def get_path(row: Mapping[str, Any], path: str, default: Any = _MISSING) -> Any:
    """Read a dotted path (``reward_model.ground_truth``) from a row.

    Intermediate values may be dicts or JSON strings holding a dict (GURU stores
    ``reward_model`` and ``extra_info`` that way). A top-level key containing dots is tried
    first. Returns ``default`` when the path is absent; raises KeyError when no default is given.
    """
    if path in row:
        return row[path]
    node: Any = row
    for part in path.split("."):
        if isinstance(node, str):
            try:
                node = json.loads(node)
            except ValueError:
                node = _MISSING
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            if default is _MISSING:
                raise KeyError(path)
            return default
    return node


def batch_row(samples: Mapping[str, Sequence[Any]], i: int) -> dict:
    """Row ``i`` of a batched dict-of-lists as a plain dict."""
    return {key: values[i] for key, values in samples.items()}


def row_label(row: Mapping[str, Any], position: int | None, id_key: str | None = None) -> str:
    """Human-readable name of a row for error messages: ``row 12 (id=abc)``."""
    keys = (id_key,) if id_key else ID_CANDIDATES
    for key in keys:
        value = get_path(row, key, None)
        if value is not None:
            where = f"row {position} " if position is not None else "row "
            return f"{where}({key}={value!r})"
    if position is not None:
        return f"row {position}"
    return "row (no id field; set id_key)"


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
