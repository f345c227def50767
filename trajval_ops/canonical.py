"""Canonical JSON and its hash: the one definition behind every content hash of the package
(rollout-cache keys, row hashes, probe config hashes, ground-truth strings)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces and UTF-8 text kept as is (``default=str`` for the
    odd non-JSON value, e.g. a Path): equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stable_hash(value: Any) -> str:
    """sha256 hex of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
