"""An endpoint pass the pool already has: pass rates from a named field and the rollouts behind
them, read instead of sampled.

Pools often arrive with the base model's pass rates from a difficulty filter (DAPO's and
GURU's releases were filtered that way). When they were measured the way the early pass
measures (the base model, temperature 1.0, the same verifier), the early pass can read them and
only the late pass samples. Every value must be a pass rate in [0, 1], and every row must say how
many rollouts stand behind it, the same number for the whole pool (a mixed n would weigh rows'
noise differently without the prior knowing); anything else is refused naming the row and the
field.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import ID_CANDIDATES
from trajval_ops.input_checks import float_column
from trajval_ops.rows import get_path, row_label

#: Status of a row whose pass rate was read, not sampled.
STATUS_REUSED = "reused"


def reused_pass_rates(rows: Sequence[Mapping[str, Any]], key: str, *, n: int | None = None,
                      n_key: str | None = None, id_key: str | None = None,
                      first_row: int | None = 0, what: str = "") -> tuple[np.ndarray, int]:
    """The pass rates of ``rows`` at ``key`` and the one rollout count behind them.

    :param n: the rollouts behind every value (one number for the pool), or
    :param n_key: the field holding each row's rollout count (which must be the same for all).
    :param first_row: the first row's position in the pool, for messages (None: unknown).
    :raises TrajvalInputError: a value missing, not a number or outside [0, 1]; a row without
        its n; an n that is not a positive integer or differs from the first row's.
    """
    prefix = f"{what}: " if what else ""
    if (n is None) == (n_key is None):
        raise TrajvalInputError(f"{prefix}a reused pass needs the rollouts behind its pass rates: give exactly one "
                                f"of reuse_n (one number for the pool) and reuse_n_key (a field of each row)")
    roots = {name.split(".")[0] for name in ((id_key,) if id_key else ID_CANDIDATES)}
    samples = {root: [row.get(root) for row in rows] for root in roots}  # for the row's name in messages
    samples["__rates__"] = [get_path(row, key, None) for row in rows]
    try:
        rates = float_column(samples, "__rates__", upper=1.0, id_key=id_key, position_offset=first_row)
    except TrajvalInputError as exc:
        raise TrajvalInputError(prefix + str(exc).replace("'__rates__'", f"'{key}' (the reused pass rate)")) from None
    if n_key is None:
        return rates, _checked_n(n, f"{prefix}reuse_n")
    counts = []
    for position, row in enumerate(rows):
        value = get_path(row, n_key, None)
        where = None if first_row is None else first_row + position
        label = row_label(row, where, id_key)
        if value is None:
            raise TrajvalInputError(f"{prefix}{label}: field '{n_key}' (the rollouts behind '{key}') is missing")
        count = _checked_n(value, f"{prefix}{label}: field '{n_key}'")
        if counts and count != counts[0]:
            raise TrajvalInputError(f"{prefix}{label}: field '{n_key}' = {count} differs from the first row's "
                                    f"{counts[0]}: the reused pass rates must all stand on the same n")
        counts.append(count)
    return rates, counts[0] if counts else 0


def _checked_n(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or value != int(value) or value < 1:
        raise TrajvalInputError(f"{where} = {value!r} must be a positive whole number of rollouts")
    return int(value)
