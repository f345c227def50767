"""Canonical JSON and its hash: the one definition behind every content hash of the package
(rollout-cache keys, row hashes, probe config hashes, ground-truth strings), and a file's hash."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces and UTF-8 text kept as is: equal values give equal text.
    A value JSON has no type for is written as its ``str`` where that text is exact (a path, a
    date or time, a decimal, bytes, a numpy scalar); any other is a TypeError, since its ``str``
    could elide (an array), reorder (a set) or hold a memory address, and a hash must not."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_exact_text)


def _exact_text(value: Any) -> str:
    import datetime
    import decimal

    exact = (os.PathLike, datetime.date, datetime.time, decimal.Decimal, bytes)
    if isinstance(value, exact) or (type(value).__module__ == "numpy" and getattr(value, "shape", None) == ()):
        return str(value)
    raise TypeError(f"canonical_json cannot write {type(value).__name__} {value!r} as JSON exactly")


def stable_hash(value: Any) -> str:
    """sha256 hex of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def short_id(value: Any, chars: int = 6) -> str:
    """The first ``chars`` characters of the URL-safe base64 of :func:`stable_hash`'s digest
    (6 characters: 36 bits), for references written on every row of a pool."""
    return base64.urlsafe_b64encode(bytes.fromhex(stable_hash(value))).decode("ascii")[:chars]
