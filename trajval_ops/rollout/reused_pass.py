"""An endpoint pass the pool already has: pass rates from a named field and the rollouts behind
them, read instead of sampled.

Pools often arrive with a model's pass rates from a difficulty filter (DAPO's, GURU's, Big-Math's,
Polaris's and Skywork-OR1's releases were filtered that way). When they were measured the way
the early pass measures (the base model, temperature 1.0, the same verifier), the early pass can
read them and only the late pass samples; a one-pass prior (variance, band-pass) then costs
nothing. A value may come in one of :data:`REUSE_FORMS` (a rate, a ``k/n`` string, a count of
correct samples out of n, a difficulty percent); :data:`REUSE_PRESETS` know the public pools'
columns, their form and the model and n behind them. Every row must say how many rollouts stand
behind its value, the same number for the whole pool (a mixed n would weigh rows' noise
differently without the prior knowing); anything else is refused naming the row and the field.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import ID_CANDIDATES
from trajval_ops.input_checks import float_column
from trajval_ops.rows import get_path, path_root, row_label

#: Status of a row whose pass rate was read, not sampled.
STATUS_REUSED = "reused"
#: How a reused value reads as a pass rate: ``rate`` (in [0, 1]), ``fraction_string`` (``"k/n"``,
#: k correct of n), ``count`` (k correct of ``reuse_n``), ``difficulty_percent`` (``100 (1 - k / n)``).
REUSE_FORMS = ("rate", "fraction_string", "count", "difficulty_percent")


@dataclass(frozen=True)
class ReusePreset:
    """A public pool's difficulty column: where it is, its form, and what produced it."""

    field: str | None        #: None: the column's name is not published; the recipe gives reuse_key
    form: str
    n: int | None            #: None: the value carries its n (``k/n`` strings)
    model: str
    source: str              #: where the form and n were read (docs/pools.md cites it)


#: The public pools' difficulty columns (docs/pools.md, "Difficulty columns", gives the evidence).
REUSE_PRESETS = {
    "big_math": ReusePreset("llama8b_solve_rate", "rate", 64, "meta-llama/Meta-Llama-3.1-8B-Instruct",
                            "SynthLabsAI/big-math: 64 rollouts of Llama-3.1-8B-Instruct per problem"),
    "polaris": ReusePreset("difficulty", "fraction_string", None, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                           "POLARIS-Project/Polaris-Dataset-53K card: the pass rate estimated by R1-Distill-Qwen-7B, "
                           "k correct of 8"),
    **{f"skywork_{size.lower().replace('.', '_')}": ReusePreset(
        f'extra_info.model_difficulty["DeepSeek-R1-Distill-Qwen-{size}"]', "count", 16,
        f"deepseek-ai/DeepSeek-R1-Distill-Qwen-{size}",
        "Skywork-OR1: integer counts whose filters keep 1..15 (of 16 samples); read as correct samples, a direction "
        "the card does not state") for size in ("1.5B", "7B", "32B")},
    "guru_qwen2_5_7b": ReusePreset("qwen2.5_7b_pass_rate", "rate", 16, "Qwen/Qwen2.5-7B-Instruct",
                                   "LLM360/Reasoning360 model_filtering: pass rates of 16 samples"),
    "guru_qwen3_30b": ReusePreset("qwen3_30b_pass_rate", "rate", 16, "Qwen/Qwen3-30B-A3B",
                                  "LLM360/Reasoning360 model_filtering: pass rates of 16 samples"),
    "orz": ReusePreset(None, "difficulty_percent", 128, "Qwen/Qwen2.5-Math-7B",
                       "lime-nlp/orz_math_difficulty: 100 (1 - successes / 128) of Qwen2.5-Math-7B"),
}


def reused_pass_rates(rows: Sequence[Mapping[str, Any]], key: str, *, n: int | None = None,
                      n_key: str | None = None, form: str = "rate", id_key: str | None = None,
                      first_row: int | None = 0, what: str = "") -> tuple[np.ndarray, int]:
    """The pass rates of ``rows`` at ``key`` and the one rollout count behind them.

    :param n: the rollouts behind every value (one number for the pool), or
    :param n_key: the field holding each row's rollout count (which must be the same for all);
        a ``fraction_string`` carries its n (``reuse_n``, when given, must agree).
    :param form: how a value reads as a pass rate (:data:`REUSE_FORMS`).
    :param first_row: the first row's position in the pool, for messages (None: unknown).
    :raises TrajvalInputError: a value missing, not of its form or out of its form's range; a row
        without its n; an n that is not a positive integer or differs from the first row's.
    """
    prefix = f"{what}: " if what else ""
    if form not in REUSE_FORMS:
        raise TrajvalInputError(f"{prefix}reuse_form must be one of {', '.join(REUSE_FORMS)}, got {form!r}")
    if form == "fraction_string":
        if n_key is not None:
            raise TrajvalInputError(f"{prefix}a 'k/n' string carries its n: drop reuse_n_key")
        return _fraction_strings(rows, key, n, id_key, first_row, prefix)
    if (n is None) == (n_key is None):
        raise TrajvalInputError(f"{prefix}a reused pass needs the rollouts behind its pass rates: give exactly one "
                                f"of reuse_n (one number for the pool) and reuse_n_key (a field of each row)")
    pool_n = _checked_n(n, f"{prefix}reuse_n") if n_key is None else _row_n(rows, key, n_key, id_key, first_row, prefix)
    upper = {"rate": 1.0, "count": float(pool_n), "difficulty_percent": 100.0}[form]
    roots = {path_root(name) for name in ((id_key,) if id_key else ID_CANDIDATES)}
    samples = {root: [row.get(root) for row in rows] for root in roots}  # for the row's name in messages
    samples["__rates__"] = [get_path(row, key, None) for row in rows]
    meaning = {"rate": "the reused pass rate", "count": f"correct samples of {pool_n}",
               "difficulty_percent": f"100 (1 - correct / {pool_n})"}[form]
    try:
        values = float_column(samples, "__rates__", upper=upper, id_key=id_key, position_offset=first_row)
    except TrajvalInputError as exc:
        raise TrajvalInputError(prefix + str(exc).replace("'__rates__'", f"'{key}' ({meaning})")) from None
    if form == "count":
        fractional = np.flatnonzero(values != np.floor(values))
        if fractional.size:
            position = int(fractional[0])
            label = row_label(rows[position], None if first_row is None else first_row + position, id_key)
            raise TrajvalInputError(f"{prefix}{label}: field '{key}' = {float(values[position]):g} is not a whole "
                                    "count of correct samples")
        return values / pool_n, pool_n
    return (1.0 - values / 100.0 if form == "difficulty_percent" else values), pool_n


def _row_n(rows, key: str, n_key: str, id_key, first_row, prefix: str) -> int:
    """The one rollout count every row's ``n_key`` gives."""
    counts = []
    for position, row in enumerate(rows):
        value = get_path(row, n_key, None)
        label = row_label(row, None if first_row is None else first_row + position, id_key)
        if value is None:
            raise TrajvalInputError(f"{prefix}{label}: field '{n_key}' (the rollouts behind '{key}') is missing")
        count = _checked_n(value, f"{prefix}{label}: field '{n_key}'")
        if counts and count != counts[0]:
            raise TrajvalInputError(f"{prefix}{label}: field '{n_key}' = {count} differs from the first row's "
                                    f"{counts[0]}: the reused pass rates must all stand on the same n")
        counts.append(count)
    return counts[0] if counts else 0


def _fraction_strings(rows, key: str, n: int | None, id_key, first_row, prefix: str) -> tuple[np.ndarray, int]:
    """Pass rates from ``"k/n"`` strings (k correct of n), one n for the pool."""
    rates, pool_n = [], None if n is None else _checked_n(n, f"{prefix}reuse_n")
    for position, row in enumerate(rows):
        value = get_path(row, key, None)
        label = row_label(row, None if first_row is None else first_row + position, id_key)
        correct, _, total = value.partition("/") if isinstance(value, str) else ("", "", "")
        # isdecimal, not isdigit: a superscript "²" is a digit int() cannot read
        if not (correct.strip().isdecimal() and total.strip().isdecimal() and 0 < int(total) and
                int(correct) <= int(total)):
            raise TrajvalInputError(f"{prefix}{label}: field '{key}' = {value!r} is not a 'k/n' string of k correct "
                                    "samples of n")
        pool_n = int(total) if pool_n is None else pool_n
        if int(total) != pool_n:
            raise TrajvalInputError(f"{prefix}{label}: field '{key}' = {value!r} stands on {int(total)} samples, not "
                                    f"{pool_n}: the reused pass rates must all stand on the same n")
        rates.append(int(correct) / int(total))
    return np.asarray(rates, dtype=np.float64), pool_n or 0


def _checked_n(value: Any, where: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, np.integer, float))
            or (isinstance(value, float) and not math.isfinite(value))  # int() of NaN or inf is a bare error
            or value != int(value) or value < 1):
        raise TrajvalInputError(f"{where} = {value!r} must be a positive whole number of rollouts")
    return int(value)
