"""Canonical JSON and its hash: the one definition behind every content hash of the package
(rollout-cache keys, row hashes, probe config hashes, ground-truth strings), and a file's hash."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces and UTF-8 text kept as is (``default=str`` for the
    odd non-JSON value, e.g. a Path): equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


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
