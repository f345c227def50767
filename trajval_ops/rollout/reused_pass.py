"""An endpoint pass the pool already has: pass rates from a named field and the rollouts behind
them, read instead of sampled.

Pools often arrive with a model's pass rates from a difficulty filter (DAPO's, GURU's, Big-Math's,
Polaris's and Skywork-OR1's releases were filtered that way). When they were measured the way
the early pass measures (the base model, temperature 1.0, the same verifier), the early pass can
read them and only the late pass samples; a one-pass prior (variance, band-pass) then costs
nothing. A value may come in one of :data:`REUSE_FORMS` (a rate, a ``k/n`` string, a count of
correct samples out of n, a difficulty percent); :data:`REUSE_PRESETS` know the public pools'
columns, their form and the model and n behind them. Every row says how many rollouts stand
behind its value: one number for the pool (``reuse_n``, a preset's n, a ``k/n`` string's n), or
each row's own (``reuse_n_key``: a count, or a list whose length is the count, as OpenR1-Math's
``generations``); the learnability mapper reads each row's n from the pass's ``<key>_n``. A row
whose value is missing stops the pass naming it (``reuse_missing: error``), or is measured by the
pass's own model (``measure``). Anything else is refused naming the row and the field.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import ID_CANDIDATES
from trajval_ops.input_checks import float_column
from trajval_ops.rows import get_path, path_root, row_label
from trajval_ops.settings import check_settings, setting

#: Status of a row whose pass rate was read, not sampled.
STATUS_REUSED = "reused"
#: How a reused value reads as a pass rate: ``rate`` (in [0, 1]), ``fraction_string`` (``"k/n"``,
#: k correct of n), ``count`` (k correct of n), ``difficulty_percent`` (``100 (1 - k / n)``).
REUSE_FORMS = ("rate", "fraction_string", "count", "difficulty_percent")
#: What a reused pass does with a row whose value is missing (null): stop naming it, or sample it.
REUSE_MISSING = ("error", "measure")


@dataclass(frozen=True)
class ReusePreset:
    """A public pool's difficulty column: where it is, its form, and what produced it."""

    field: str | None        #: None: the column's name is not published; the recipe gives reuse_key
    form: str
    n: int | None            #: None: a ``k/n`` string carries it, ``n_key`` gives it, or the card does not say
    model: str
    source: str              #: where the form and n were read (docs/pools.md cites it)
    n_key: str | None = None  #: each row's n: a count, or a list whose length is the count


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
    "deepscaler": ReusePreset(None, "difficulty_percent", 128, "Qwen/Qwen2.5-Math-7B",
                              "lime-nlp/DeepScaleR_Difficulty card: 100 (1 - successes / 128) of Qwen2.5-Math-7B at "
                              "temperature 0.6, top_p 0.9; the CSV's column name is not on the card"),
    "openr1_math": ReusePreset("correctness_count", "count", None, "deepseek-ai/DeepSeek-R1",
                               "open-r1/OpenR1-Math-220k card: two to four DeepSeek R1 generations per problem, each "
                               "problem with at least one correct; correctness_count of len(generations)",
                               n_key="generations"),
    "intellect2": ReusePreset("solve_rate_qwen_r1_distill_7b", "rate", None, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                              "PrimeIntellect/INTELLECT-2-RL-Dataset card: a float64 solve rate (its schema only); "
                              "the card does not state n"),
    **{f"intellect3_avg{n}_qwen3_4b_{kind}": ReusePreset(
        f"avg@{n}_qwen3_4b_{kind}_2507", "rate", n, f"Qwen/Qwen3-4B-{kind.capitalize()}-2507",
        f"PrimeIntellect/INTELLECT-3-RL card: float64 avg@{n}_qwen3_4b_{kind}_2507 ({configs}); n and the model read "
        "from the column's name (the card has no prose)")
       for n, kind, configs in ((8, "thinking", "math"), (8, "instruct", "math, code"),
                                (16, "instruct", "logic, science"))},
}


@dataclass(frozen=True)
class ReuseSettings:
    """A pass the pool already has."""

    reuse_key: Optional[str] = setting(
        None, "read this pass from a field the pool already has (e.g. the base model's pass rates from a difficulty "
        "filter) instead of sampling: no model loads, every row's status is ``reused``, its cost 0, and provenance "
        "names the field. Values must be pass rates in [0, 1].")
    reuse_n: Optional[int] = setting(None, "with ``reuse_key``: the rollouts behind every reused pass rate (one "
                                     "number).", ge=1)
    reuse_n_key: Optional[str] = setting(
        None, "with ``reuse_key``: the field holding each row's rollout count, a whole number or a list whose length "
        "is the count (OpenR1-Math's ``generations``); rows may differ (a missing or empty n is refused naming the "
        "row and the field).")
    reuse_form: Optional[str] = setting(
        None, "how a reused value reads as a pass rate: ``rate`` (default), ``fraction_string`` (``\"k/n\"``, k "
        "correct of n), ``count`` (k correct of the row's n) or ``difficulty_percent`` (``100 (1 - k / n)``); "
        "a value outside its form's range is refused naming the row and the field.", choices=(None, *REUSE_FORMS))
    reuse_preset: Optional[str] = setting(
        None, "a public pool's difficulty column by name (" + ", ".join(f"``{name}``" for name in REUSE_PRESETS)
        + "): its field, form and the model and n behind it (docs/pools.md cites each pool's card); ``reuse_key``, "
        "``reuse_form``, ``reuse_n`` and ``reuse_n_key`` override it (``orz`` and ``deepscaler`` need "
        "``reuse_key``: their column's name is not published; ``intellect2`` needs ``reuse_n``: its card does not "
        "state it).", choices=(None, *REUSE_PRESETS))
    reuse_missing: str = setting(
        "error", "a row whose reused value is missing (null, as Big-Math's ``llama8b_solve_rate`` is on some rows): "
        "``error`` stops the run naming the row; ``measure`` samples just those rows with the pass's own model and "
        "settings (``n`` rollouts each): their status is the sampled one, their provenance says ``source: "
        "measured`` and records their cost, which ``trajval cost`` counts.", choices=REUSE_MISSING)

    def __post_init__(self):
        check_settings(self)
        self.settings()  # what does not go together is refused when the pass is built

    def settings(self) -> dict | None:
        """The reused pass, its preset resolved: ``{"key", "n", "n_key", "form", "preset", "model",
        "missing"}`` (None: the pass samples)."""
        preset = REUSE_PRESETS.get(self.reuse_preset)
        key = self.reuse_key or (preset.field if preset else None)
        if key is None:
            if preset is not None:
                raise ValueError(f"reuse_preset {self.reuse_preset!r}: the column's name is not published; give "
                                 "reuse_key")
            return None
        form = self.reuse_form or (preset.form if preset else "rate")
        given = self.reuse_n is not None or self.reuse_n_key is not None
        n = self.reuse_n if given else (preset.n if preset else None)
        n_key = self.reuse_n_key if given else (preset.n_key if preset else None)
        if form != "fraction_string" and (n is None) == (n_key is None):
            unsaid = (f"reuse_preset {self.reuse_preset!r}: its card does not state the rollouts behind {key!r}; "
                      if preset is not None and n is None and n_key is None else f"reuse_key {key!r} needs the "
                      "rollouts behind its pass rates: ")
            raise ValueError(f"{unsaid}give exactly one of reuse_n (one number for the pool) and reuse_n_key (a "
                             "field of each row)")
        return {"key": key, "n": n, "n_key": n_key, "form": form, "preset": self.reuse_preset,
                "model": preset.model if preset else None, "missing": self.reuse_missing}


def missing_rows(rows: Sequence[Mapping[str, Any]], key: str) -> list[int]:
    """Positions of the rows whose value at ``key`` is missing (absent or null)."""
    return [i for i, row in enumerate(rows) if get_path(row, key, None) is None]


def reused_pass_rates(rows: Sequence[Mapping[str, Any]], key: str, *, n: int | None = None,
                      n_key: str | None = None, form: str = "rate", id_key: str | None = None,
                      first_row: int | None = 0, what: str = "",
                      skip_missing: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The pass rates of ``rows`` at ``key`` and the rollouts behind each.

    :param n: the rollouts behind every value (one number for the pool), or
    :param n_key: the field holding each row's rollout count (a whole number, or a list whose
        length is the count); a ``fraction_string`` carries its n, one for the pool (``reuse_n``,
        when given, must agree).
    :param form: how a value reads as a pass rate (:data:`REUSE_FORMS`).
    :param first_row: the first row's position in the pool, for messages (None: unknown).
    :param skip_missing: a row whose value is missing gets rate NaN and count 0 (it is measured
        elsewhere) instead of stopping the pass.
    :raises TrajvalInputError: a value missing, not of its form or out of its form's range; a row
        without its n; an n that is not a positive whole number (or a ``k/n`` n other than the pool's).
    """
    prefix = f"{what}: " if what else ""
    if form not in REUSE_FORMS:
        raise TrajvalInputError(f"{prefix}reuse_form must be one of {', '.join(REUSE_FORMS)}, got {form!r}")
    missing = np.zeros(len(rows), dtype=bool)
    if skip_missing:
        missing[missing_rows(rows, key)] = True
    if form == "fraction_string":
        if n_key is not None:
            raise TrajvalInputError(f"{prefix}a 'k/n' string carries its n: drop reuse_n_key")
        return _fraction_strings(rows, key, n, id_key, first_row, prefix, missing)
    if (n is None) == (n_key is None):
        raise TrajvalInputError(f"{prefix}a reused pass needs the rollouts behind its pass rates: give exactly one "
                                f"of reuse_n (one number for the pool) and reuse_n_key (a field of each row)")
    if n_key is None:
        counts = np.full(len(rows), _checked_n(n, f"{prefix}reuse_n"), dtype=np.int64)
    else:
        counts = _row_counts(rows, key, n_key, id_key, first_row, prefix, missing)
    counts[missing] = 0
    upper = {"rate": 1.0, "count": None if n_key else float(n), "difficulty_percent": 100.0}[form]
    roots = {path_root(name) for name in ((id_key,) if id_key else ID_CANDIDATES)}
    samples = {root: [row.get(root) for row in rows] for root in roots}  # for the row's name in messages
    # a missing row the pass measures reads as 0 here (any value of its form), then as NaN
    samples["__rates__"] = [0 if skip else get_path(row, key, None) for row, skip in zip(rows, missing)]
    meaning = {"rate": "the reused pass rate", "count": f"correct samples of {n_key and 'its n' or n}",
               "difficulty_percent": f"100 (1 - correct / {n_key and 'its n' or n})"}[form]
    try:
        values = float_column(samples, "__rates__", upper=upper, id_key=id_key, position_offset=first_row)
    except TrajvalInputError as exc:
        raise TrajvalInputError(prefix + str(exc).replace("'__rates__'", f"'{key}' ({meaning})")) from None
    if form == "count":
        _check_counts(rows, key, n_key, values, counts, id_key, first_row, prefix)
        rates = values / np.maximum(counts, 1)
    else:
        rates = 1.0 - values / 100.0 if form == "difficulty_percent" else values
    rates[missing] = np.nan
    return rates, counts


def _label(rows, position: int, first_row, id_key) -> str:
    return row_label(rows[position], None if first_row is None else first_row + position, id_key)


def _check_counts(rows, key: str, n_key: str | None, values: np.ndarray, counts: np.ndarray, id_key, first_row,
                  prefix: str) -> None:
    """Counts of correct samples are whole and at most the row's n."""
    fractional = np.flatnonzero(values != np.floor(values))
    if fractional.size:
        position = int(fractional[0])
        raise TrajvalInputError(f"{prefix}{_label(rows, position, first_row, id_key)}: field '{key}' = "
                                f"{float(values[position]):g} is not a whole count of correct samples")
    over = np.flatnonzero(values > counts)
    if n_key is not None and over.size:  # a fixed n is the bound float_column checked
        position = int(over[0])
        raise TrajvalInputError(f"{prefix}{_label(rows, position, first_row, id_key)}: field '{key}' = "
                                f"{float(values[position]):g} correct samples is more than the "
                                f"{int(counts[position])} rollouts its field '{n_key}' gives")


def _row_counts(rows, key: str, n_key: str, id_key, first_row, prefix: str, missing: np.ndarray) -> np.ndarray:
    """Each row's rollout count from ``n_key``: a whole number, or a list's length."""
    counts = np.zeros(len(rows), dtype=np.int64)
    for position, row in enumerate(rows):
        if missing[position]:
            continue
        value = get_path(row, n_key, None)
        label = _label(rows, position, first_row, id_key)
        if value is None:
            raise TrajvalInputError(f"{prefix}{label}: field '{n_key}' (the rollouts behind '{key}') is missing")
        if isinstance(value, (list, tuple)):
            if not value:
                raise TrajvalInputError(f"{prefix}{label}: field '{n_key}' is an empty list: no rollouts stand "
                                        f"behind '{key}'")
            counts[position] = len(value)
        else:
            counts[position] = _checked_n(value, f"{prefix}{label}: field '{n_key}'")
    return counts


def _fraction_strings(rows, key: str, n: int | None, id_key, first_row, prefix: str,
                      missing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pass rates from ``"k/n"`` strings (k correct of n), one n for the pool."""
    rates = np.full(len(rows), np.nan)
    pool_n = None if n is None else _checked_n(n, f"{prefix}reuse_n")
    for position, row in enumerate(rows):
        if missing[position]:
            continue
        value = get_path(row, key, None)
        label = _label(rows, position, first_row, id_key)
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
        rates[position] = int(correct) / int(total)
    counts = np.where(missing, 0, pool_n or 0).astype(np.int64)
    return rates, counts


def _checked_n(value: Any, where: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, np.integer, float))
            or (isinstance(value, float) and not math.isfinite(value))  # int() of NaN or inf is a bare error
            or value != int(value) or value < 1):
        raise TrajvalInputError(f"{where} = {value!r} must be a positive whole number of rollouts")
    if value >= 2 ** 53:  # beyond what a float counts exactly, and no pass's size
        raise TrajvalInputError(f"{where} = {value!r} is not a rollout count (2^53 or more)")
    return int(value)
