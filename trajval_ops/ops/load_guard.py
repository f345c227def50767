"""Clear errors for empty and malformed JSONL pools, raised where Data-Juicer loads them.

Data-Juicer loads JSONL through Hugging Face ``datasets``: an empty file ends in a bare
``StopIteration`` and a malformed line in ``DatasetGenerationError`` with the cause buried in
a long traceback. Both happen before any operator runs, so no operator can check them. When
this plugin loads, ``JsonFormatter.load_dataset`` is wrapped: an empty pool is refused before
loading, and when loading fails the file is scanned line by line so the error names the file
and line. The happy path costs one read of each file's first bytes.

A third trap: ``datasets`` loads a column holding numbers in some rows and strings in others
(``0.5`` and ``"0.5"``) as a JSON column and silently turns ``"0.5"`` into 0.5. After loading,
such mixed columns are located in the raw file: a ``trajval_*`` column (ours are all numbers,
strings or dicts, never a mix) stops the run with the row and field; another column is
reported with a warning, since pools may legitimately mix types (ground truths).
"""

from __future__ import annotations

import functools
import json
import os

from trajval_ops.atomic import iter_jsonl
from trajval_ops.validation import TrajvalInputError

_PLAIN_JSON_SUFFIXES = (".jsonl", ".json")


def _plain_json_files(formatter) -> list[str]:
    files = []
    for paths in getattr(formatter, "data_files", {}).values():
        files.extend(p for p in paths if str(p).endswith(_PLAIN_JSON_SUFFIXES))
    return files


def _is_blank(path: str) -> bool:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return False
    return True


def first_malformed_line(path: str) -> str | None:
    """The reader's error for the first line that is not a JSON object, or None."""
    try:
        for _ in iter_jsonl(path):
            pass
    except TrajvalInputError as error:
        return str(error)
    return None


def _kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def first_mixed_type_row(path: str, column: str) -> tuple[int, dict, str] | None:
    """(0-based row, row, kind) of the first row whose ``column`` kind differs from the first row's."""
    first_kind = None
    with open(path, encoding="utf-8") as f:
        rows = (json.loads(line) for line in f if line.strip())
        for position, row in enumerate(rows):
            if row.get(column) is None:
                continue
            kind = _kind(row[column])
            if first_kind is None:
                first_kind = kind
            elif kind != first_kind:
                return position, row, f"{kind} {row[column]!r} where earlier rows hold a {first_kind}"
    return None


def check_mixed_type_columns(dataset, files: list[str]) -> None:
    """Refuse (trajval_*) or report (other) top-level columns that mix value types."""
    from datasets.features import Json
    from loguru import logger

    from trajval_ops.validation import row_label

    mixed = [name for name, feature in getattr(dataset, "features", {}).items() if isinstance(feature, Json)]
    for column in mixed:
        for path in (p for p in files if p.endswith(".jsonl")):
            found = first_mixed_type_row(path, column)
            if found is None:
                continue
            position, row, problem = found
            message = f"{path}: {row_label(row, position)}: field '{column}' holds {problem}"
            if column.startswith("trajval_"):
                raise TrajvalInputError(message)
            logger.warning(f"{message}; datasets loads such a column as JSON values")
            break


def guard_json_loading() -> None:
    """Wrap Data-Juicer's JsonFormatter.load_dataset once (idempotent)."""
    from data_juicer.format.json_formatter import JsonFormatter

    original = JsonFormatter.load_dataset
    if getattr(original, "_trajval_guarded", False):
        return

    @functools.wraps(original)
    def load_dataset(self, *args, **kwargs):
        files = _plain_json_files(self)
        if files and all(os.path.getsize(p) == 0 or _is_blank(p) for p in files):
            raise TrajvalInputError(f"the pool is empty (0 rows): {', '.join(files)}")
        try:
            dataset = original(self, *args, **kwargs)
        except Exception as error:
            for path in files:
                if path.endswith(".jsonl"):
                    bad = first_malformed_line(path)
                    if bad is not None:
                        raise TrajvalInputError(bad) from error
            raise
        check_mixed_type_columns(dataset, files)
        return dataset

    load_dataset._trajval_guarded = True
    JsonFormatter.load_dataset = load_dataset
