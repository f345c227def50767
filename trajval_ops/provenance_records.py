"""Run provenance stored once per JSON-lines pool file, a short reference on every row.

The learnability score's and the resampler's provenance (``fields.RUN_PROVENANCE``) is one value
for a whole run. Written in full on every row it would double the size of a million-row pool. In a
JSON-lines file a row therefore carries ``trajval_provenance``: the 6-character content id
(:func:`~trajval_ops.canonical.short_id`) of a record ``{column: value}`` of its run provenance
columns, and the first row of the file with that id also carries the record itself in
``trajval_provenance_record``. Because the id is the record's content hash, files written by
different runs can be concatenated (``cat``), shuffled or filtered as long as each id's first
row stays: every reader resolves each row to its own run's record, and a record edited by hand
or a reference whose record was cut away is an error naming the row.

:func:`compact_rows` / :func:`expand_rows` convert streamed rows; the Arrow-table forms are
:func:`trajval_ops.pools.io.compact_provenance` / :func:`~trajval_ops.pools.io.expand_provenance`.
In memory (operators, tools) the run provenance columns are always expanded. Parquet keeps
them as native columns (its dictionary encoding already stores a repeated value once).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Iterator

from trajval_ops.canonical import canonical_json, short_id
from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF, RUN_PROVENANCE
from trajval_ops.rows import row_label


def record_id(record: dict) -> str:
    """The reference a row writes for its run provenance record."""
    return short_id(record)


def run_starts(array) -> list[int]:
    """Starts of blocks of equal values covering an Arrow array (adjacent blocks may be equal
    too): slices compared in Arrow, no Python value per row."""
    starts: list[int] = []
    stack = [(0, len(array))]
    while stack:
        low, high = stack.pop()
        if high - low <= 1 or array.slice(low + 1, high - low - 1).equals(array.slice(low, high - low - 1)):
            starts.append(low)
        else:
            middle = (low + high) // 2
            stack.extend([(middle, high), (low, middle)])
    return starts


def register_record(records: dict, record: Any, ref: Any, label, where: str) -> None:
    """Add a record read from a row to ``records`` (id -> record), checked against the row's
    reference; ``label()`` names the row."""
    if not isinstance(record, dict) or not record:
        raise TrajvalInputError(f"{where}: {label()}: field '{PROVENANCE_RECORD}' must be a non-empty object")
    if ref != record_id(record):
        raise TrajvalInputError(
            f"{where}: {label()}: field '{PROVENANCE_RECORD}' does not match the row's '{PROVENANCE_REF}' "
            f"{ref!r} (its content id is {record_id(record)!r}): the record was edited")
    if ref in records and canonical_json(records[ref]) != canonical_json(record):
        raise TrajvalInputError(f"{where}: {label()}: two different provenance records share the id {ref!r}")
    records[ref] = record


#: Said wherever a reserved name may be a user's own column.
RESERVED = (f"'{PROVENANCE_REF}' and '{PROVENANCE_RECORD}' are reserved for the run provenance references of "
            "trajval pools: a column of your own by either name must be renamed")


def not_a_string(where: str, label: str, ref: Any) -> TrajvalInputError:
    return TrajvalInputError(f"{where}: {label}: field '{PROVENANCE_REF}' must be a string, got {ref!r} ({RESERVED})")


def record_missing(where: str, label: str, ref: str) -> TrajvalInputError:
    return TrajvalInputError(
        f"{where}: {label}: field '{PROVENANCE_REF}' = {ref!r} names a provenance record that no row of "
        f"this pool carries (the first row of its run, with '{PROVENANCE_RECORD}', was left out; {RESERVED})")


# ----------------------------------------------------------------------------- streamed rows


def compact_rows(rows: Iterable[dict]) -> Iterator[dict]:
    """Rows with their run provenance replaced by a reference, the record on the first row of
    each (the row form of :func:`trajval_ops.pools.io.compact_provenance`)."""
    emitted: set[str] = set()
    last_text, last_ref = None, None
    for row in rows:
        names = [name for name in row if name in RUN_PROVENANCE]
        if not names:
            yield row
            continue
        record = {name: row[name] for name in names}
        text = canonical_json(record)
        if text != last_text:
            last_text, last_ref = text, record_id(record)
        out = {}
        for key, value in row.items():
            if key == names[0]:
                out[PROVENANCE_REF] = last_ref
                if last_ref not in emitted:
                    emitted.add(last_ref)
                    out[PROVENANCE_RECORD] = record
            elif key not in record:
                out[key] = value
        yield out


def expand_rows(rows: Iterable[dict], where: str = "the pool") -> Iterator[dict]:
    """Rows with their references resolved (the row form of
    :func:`trajval_ops.pools.io.expand_provenance`), in order; a
    row whose record comes later in the file waits for it.

    :raises TrajvalInputError: as :func:`trajval_ops.pools.io.expand_provenance`.
    """
    records: dict[str, dict] = {}
    waiting: deque = deque()
    for position, row in enumerate(rows):
        if row.get(PROVENANCE_REF, ...) is None or row.get(PROVENANCE_RECORD, ...) is None:
            row = _without_nulls(row)  # a null reserved field reads as absent, as the Arrow reader reads it
        if PROVENANCE_RECORD in row:
            if PROVENANCE_REF not in row:
                raise TrajvalInputError(f"{where}: {row_label(row, position)}: field '{PROVENANCE_RECORD}' "
                                        f"without '{PROVENANCE_REF}'")
            register_record(records, row[PROVENANCE_RECORD], row[PROVENANCE_REF], lambda: row_label(row, position),
                            where)
        if PROVENANCE_REF in row and not isinstance(row[PROVENANCE_REF], str):
            raise not_a_string(where, row_label(row, position), row[PROVENANCE_REF])
        waiting.append((position, row))
        while waiting and (PROVENANCE_REF not in waiting[0][1] or waiting[0][1][PROVENANCE_REF] in records):
            yield _expanded_row(waiting.popleft()[1], records)
    if waiting:
        position, row = waiting[0]
        raise record_missing(where, row_label(row, position), row[PROVENANCE_REF])


def _without_nulls(row: dict) -> dict:
    """The row without a null reference or record (what a pandas round trip writes on the rows
    that had none)."""
    return {key: value for key, value in row.items()
            if not (key in (PROVENANCE_REF, PROVENANCE_RECORD) and value is None)}


def _expanded_row(row: dict, records: dict[str, dict]) -> dict:
    if PROVENANCE_REF not in row:
        return row
    out = {}
    for key, value in row.items():
        if key == PROVENANCE_REF:
            out.update(records[value])
        elif key != PROVENANCE_RECORD:
            out[key] = value
    return out
