"""Choosing the probe set P: a seeded uniform sample of the pool, with optional forced tasks.

:class:`ProbeSetSettings` declares how P is chosen and marked; :func:`probe_positions` reads the
ids from the pool (an Arrow table) and draws P with the pure functions over row ids below.

Size rule: ``probe_size`` (rows) wins when given; otherwise ``probe_fraction * pool_size``
rounded to the nearest integer, halves rounded up, and at least 1 row. The default fraction
is the paper's 512 / 17,398 (about 2.9 %), so a 17,398-row pool gives exactly 512 probe rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np
from loguru import logger

from trajval_ops import fields
from trajval_ops.errors import TrajvalInputError
from trajval_ops.input_checks import id_key_of
from trajval_ops.rows import get_path, path_root, row_label
from trajval_ops.settings import check_settings, setting

#: The paper's probe: 512 tasks of the 17,398-task math pool.
DEFAULT_PROBE_FRACTION = 512 / 17398


@dataclass(frozen=True)
class ProbeSetSettings:
    """Which rows of the pool form the probe set P, and the field that marks them."""

    probe_size: Optional[int] = setting(None, "rows in P; overrides ``probe_fraction``.", ge=1)
    probe_fraction: Optional[float] = setting(None, "share of the pool in P (default 512/17398, about 2.9 %), rounded "
                                              "to the nearest row (halves up), at least 1. A probe larger than the "
                                              "pool is an error.", gt=0, le=1)
    forced_ids: Optional[List[Union[str, int]]] = setting(None, "row ids always put in P (e.g. to share tasks between "
                                                          "two probes).")
    id_key: Optional[str] = setting(None, "dotted path of the row id; None: the first of id, task_id, "
                                    "extra_info.index, extra_info.id, index, uid present, else the row position.")
    in_probe_key: str = setting(fields.IN_PROBE, "output field, True for rows of P.")

    def __post_init__(self):
        check_settings(self)

    @property
    def forced(self) -> list[str]:
        """The forced ids as the probe names rows (strings)."""
        return [str(i) for i in (self.forced_ids or [])]


def probe_positions(table, settings: ProbeSetSettings, seed: int, what: str = "probe") -> tuple[np.ndarray, list[str]]:
    """Sorted positions of P in a pyarrow.Table of the pool, and their ids (logged: how many, from
    how many rows, by which rule).

    :param what: the name the log line begins with (the operator's)."""
    size = probe_size_for(table.num_rows, settings.probe_size, settings.probe_fraction)
    id_key = id_key_of(table, settings.id_key)  # any row's id field, as the passes read it, not the first row's
    if id_key is None:
        ids = [str(i) for i in range(table.num_rows)]
    else:
        root = path_root(id_key) if id_key not in table.column_names else id_key
        ids = unique_row_ids(table.select([root]).to_pylist(), id_key)
    positions = sample_probe_positions(ids, size, seed, settings.forced)
    fraction = settings.probe_fraction if settings.probe_fraction is not None else DEFAULT_PROBE_FRACTION
    logger.info(
        f"{what}: probe of {size} rows from {table.num_rows} "
        f"({'probe_size' if settings.probe_size else f'fraction {fraction:.4g}'}, seed {seed}, "
        f"{len(settings.forced)} forced, ids from {id_key or 'row position'})"
    )
    return positions, [ids[p] for p in positions]


def probe_size_for(pool_size: int, probe_size: int | None = None, probe_fraction: float | None = None) -> int:
    """Number of probe rows for a pool of ``pool_size`` rows (rounding rule in the module doc).

    :raises ValueError: for a pool that is empty, a size or fraction out of range, or a probe
        larger than the pool.
    """
    if pool_size <= 0:
        raise ValueError("the pool is empty: there is nothing to probe")
    if probe_size is not None:
        if isinstance(probe_size, bool) or int(probe_size) != probe_size or probe_size < 1:
            raise ValueError(f"probe_size must be a positive integer, got {probe_size!r}")
        size = int(probe_size)
    else:
        fraction = DEFAULT_PROBE_FRACTION if probe_fraction is None else float(probe_fraction)
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"probe_fraction must be in (0, 1], got {probe_fraction!r}")
        # nearest integer, halves up; the small epsilon absorbs float error in products like
        # (512 / 17398) * 17398 = 511.99999999999994.
        size = max(1, math.floor(fraction * pool_size + 0.5 + 1e-9))
    if size > pool_size:
        raise ValueError(f"probe of {size} rows is larger than the pool ({pool_size} rows)")
    return size


def unique_row_ids(rows: Iterable[Mapping[str, Any]], id_key: str | None) -> list[str]:
    """Every row's id as a string (its position when ``id_key`` is None).

    :raises TrajvalInputError: a row without the id field, or two rows with the same id (the
        manifest and forced ids refer to tasks by id, so ids must be unique).
    """
    ids: list[str] = []
    seen: dict[str, int] = {}
    for position, row in enumerate(rows):
        if id_key is None:
            ids.append(str(position))
            continue
        value = get_path(row, id_key, None)
        if value is None:
            raise TrajvalInputError(f"{row_label(row, position, id_key)}: id field '{id_key}' is missing")
        text = str(value)
        if text in seen:
            raise TrajvalInputError(
                f"{row_label(row, position, id_key)}: id field '{id_key}' = {text!r} repeats row "
                f"{seen[text]}; probe ids must be unique (deduplicate the pool or choose id_key)"
            )
        seen[text] = position
        ids.append(text)
    return ids


def sample_probe_positions(
    ids: Sequence[str],
    size: int,
    seed: int,
    forced_ids: Sequence[Any] = (),
) -> np.ndarray:
    """Positions (sorted ascending) of a probe of ``size`` rows drawn uniformly without
    replacement with ``seed``; every forced id is included and the rest is drawn from the others.

    :raises ValueError: a forced id not in the pool, more forced ids than ``size``, or
        ``size`` larger than the pool.
    """
    if size > len(ids):
        raise ValueError(f"probe of {size} rows is larger than the pool ({len(ids)} rows)")
    position_of = {row_id: position for position, row_id in enumerate(ids)}
    forced = []
    for forced_id in dict.fromkeys(str(f) for f in forced_ids):
        if forced_id not in position_of:
            raise ValueError(f"forced probe id {forced_id!r} is not in the pool")
        forced.append(position_of[forced_id])
    if len(forced) > size:
        raise ValueError(f"{len(forced)} forced probe ids exceed the probe size ({size})")
    forced_mask = np.zeros(len(ids), dtype=bool)
    forced_mask[forced] = True
    candidates = np.flatnonzero(~forced_mask)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(candidates, size=size - len(forced), replace=False)
    return np.sort(np.concatenate([np.asarray(forced, dtype=np.int64), drawn.astype(np.int64)]))
