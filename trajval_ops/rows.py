"""Reading fields of a row (a dict, dotted paths through nested and JSON-string levels) and
naming a row in messages."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from trajval_ops.fields import ID_CANDIDATES

_MISSING = object()


def path_parts(path: str) -> list[str]:
    """The keys of a dotted path, for every dotted path the package reads (fields, ids, groups,
    reused passes): ``reward_model.ground_truth`` is two keys; a key that itself contains dots
    goes in brackets, quoted: ``extra_info.model_difficulty["DeepSeek-R1-Distill-Qwen-1.5B"]``
    (or single quotes), three keys.

    :raises ValueError: an unclosed bracket or quote, or an empty key, naming the path.
    """
    parts: list[str] = []
    i, key = 0, ""
    while i < len(path):
        char = path[i]
        if char == ".":
            if not key and (not parts or path[i - 1] != "]"):
                raise ValueError(f"field path {path!r}: an empty key before position {i}")
            if key:
                parts.append(key)
            key, i = "", i + 1
        elif char == "[":
            quote = path[i + 1:i + 2]
            end = path.find(quote + "]", i + 2) if quote in ("'", '"') else -1
            if end < 0:
                raise ValueError(f"field path {path!r}: a bracket at position {i} must hold a quoted key, "
                                 "e.g. [\"a.b\"]")
            if key:
                parts.append(key)
            parts.append(path[i + 2:end])
            key, i = "", end + 2
        else:
            key, i = key + char, i + 1
    if key:
        parts.append(key)
    if not parts:
        raise ValueError(f"field path {path!r} names no key")
    return parts


def path_root(path: str) -> str:
    """The top-level field of a dotted path (the pool column it lives in)."""
    return path_parts(path)[0]


def get_path(row: Mapping[str, Any], path: str, default: Any = _MISSING) -> Any:
    """Read a dotted path (``reward_model.ground_truth``; :func:`path_parts`) from a row.

    Intermediate values may be dicts or JSON strings holding a dict (GURU stores
    ``reward_model`` and ``extra_info`` that way). A top-level key containing dots is tried
    first. Returns ``default`` when the path is absent; raises KeyError when no default is given.
    """
    if path in row:
        return row[path]
    node: Any = row
    for part in path_parts(path):
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
