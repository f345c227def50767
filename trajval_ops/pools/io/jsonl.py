"""Reading JSON lines exactly: a pool's files, its lines parsed with orjson (the standard
library where orjson would change a value: integers beyond 64 bits, lone surrogates), each bad
line named by file, line, row and byte."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

from trajval_ops.errors import TrajvalInputError


JSONL_SUFFIXES = (".jsonl", ".json")


PARQUET_SUFFIXES = (".parquet", ".pq")


#: Rows parsed before their columns are converted to Arrow (bounds the Python objects held).
CHUNK_ROWS = 32768


#: 19 digits in a row may be an integer beyond 64 bits, which orjson reads as a float; such
#: lines are parsed by the standard library instead.
LONG_DIGITS = re.compile(rb"\d{19}")


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")


def may_hold_long_integer(data: bytes) -> bool:
    """Whether ``data`` has a run of 19 digits (a substring search, ~8x faster than the regex)."""
    return b"0000000000000000000" in data.translate(_DIGITS_TO_ZERO)


def pool_files(path: str | os.PathLike) -> list[Path]:
    """The pool files of ``path``: the file itself, or a folder's JSONL (also gzipped) and
    parquet files (recursively, sorted), leaving out hidden files (an interrupted atomic write)
    and everything in hidden folders (``.ipynb_checkpoints``, ``.git``: copies, not rows) below
    it, and the work folders Data-Juicer leaves beside an export (their event logs are not rows)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        work = {folder for folder in path.rglob("*") if folder.is_dir() and _is_data_juicer_work_folder(folder)}
        files = sorted(p for p in path.rglob("*") if p.is_file() and _pool_kind(p) is not None
                       and not _hidden_below(p, path) and not any(parent in work for parent in p.parents))
        if not files:
            raise TrajvalInputError(f"{path}: no .jsonl, .json or .parquet file in this folder (nor a gzipped one)")
        return files
    raise TrajvalInputError(f"pool file not found: {path}")


def _hidden_below(path: Path, folder: Path) -> bool:
    """Whether a part of ``path`` below ``folder`` (the file's name or a folder's) starts with ``.``."""
    return any(part.startswith(".") for part in path.relative_to(folder).parts)


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


#: The UTF-8 byte-order mark some editors and Windows tools write at the start of a text file.
UTF8_BOM = b"\xef\xbb\xbf"


def _open_binary(path: Path):
    """A pool file for reading bytes, from after its UTF-8 byte-order mark where it has one (it
    marks the encoding, it is no part of the first row; ``tell()`` still gives file offsets);
    gzipped ones decompressed on the fly."""
    if path.name.lower().endswith(".gz"):
        import gzip

        handle = gzip.open(path, "rb")
    else:
        handle = open(path, "rb")
    if handle.read(len(UTF8_BOM)) != UTF8_BOM:
        handle.seek(0)
    return handle


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
            raise TrajvalInputError(f"{path}: element {position} of the array is a JSON {json_kind(row)}, "
                                    "not a JSON object (a row must be an object)")
    return rows


def iter_json_blocks(path: str | os.PathLike, first_row: int = 0,
                     block_rows: int | None = None) -> Iterator[tuple[int, list[dict]]]:
    """``(position of the block's first row, rows)`` for blocks of up to ``block_rows``
    (default :data:`CHUNK_ROWS`, read at the call) non-blank lines of a JSON-lines file.

    A block is parsed in one pass; only a block holding a bad line (or a 19-digit run, which
    may be an integer beyond 64 bits) is walked line by line to parse it exactly or name the
    line.

    :raises TrajvalInputError: a line that is not UTF-8 (byte offset in the file and in the
        line), not valid JSON, ``null``, or not a JSON object.
    """
    import orjson

    block_rows = block_rows or CHUNK_ROWS
    loads = orjson.loads
    position = first_row
    line_number = offset = 0
    if _is_json_array(Path(path)):
        rows = _json_array_rows(Path(path))
        for start in range(0, len(rows), block_rows):
            yield position + start, rows[start:start + block_rows]
        return
    with _open_binary(Path(path)) as handle:
        offset = handle.tell()  # past a byte-order mark
        while True:
            lines = handle.readlines(1 << 22)
            if not lines:
                return
            block_start, block_line = offset, line_number
            offset += sum(map(len, lines))
            line_number += len(lines)
            data = [line for line in lines if not line.isspace()]
            rows = None
            if not may_hold_long_integer(b"".join(data)):
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
            row = _slow_parse(line, where, start) if LONG_DIGITS.search(line) else orjson.loads(line)
        except orjson.JSONDecodeError:
            row = _slow_parse(line, where, start)
        if row is None:
            raise TrajvalInputError(f"{where} is null, not a JSON object (a row must be an object)")
        if not isinstance(row, dict):
            raise TrajvalInputError(f"{where} is a JSON {json_kind(row)}, not a JSON object")
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

def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__
