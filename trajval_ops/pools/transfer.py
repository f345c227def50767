"""Carry a TrajVal prior estimated under one regime onto another copy of the pool.

The paper (appendix, cross-regime reuse) reuses a prior estimated with one model/regime to guide
RL of another. Learnability is regime-conditional, so every carried weight records where it came
from, and one weight column never holds weights of two regimes: writing into a column that
already has weights is refused unless the user names a new column or replaces the whole column.

Rows are matched by task id or by prompt-content hash (:func:`~trajval_ops.pools.identity.prompt_hash`).
Each target row gets ``<weight_column>`` and ``<weight_column>_provenance``; target rows are
never dropped or reordered. Target rows without a source match are an error by default, or get
a documented fill value (null, the source's floor eps, or the median source weight).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

import numpy as np
from loguru import logger

from trajval_ops import core
from trajval_ops.canonical import canonical_json
from trajval_ops.fields import SCORE_PROVENANCE, WEIGHT
from trajval_ops.pools.identity import TASK_ID, prompt_hash
from trajval_ops.errors import TrajvalInputError
from trajval_ops.rows import get_path, row_label

MATCH_BY = ("prompt_hash", "task_id")
UNMATCHED_POLICIES = ("error", "null", "floor", "median")
REGIME = "regime"


def provenance_column(weight_column: str) -> str:
    """Name of the column holding the provenance of ``weight_column``'s carried values."""
    return f"{weight_column}_provenance"


@dataclass
class TransferReport:
    """Figures of one transfer, logged and written beside the output."""

    source: str
    target: str
    regime: str
    match: str
    weight_column: str
    source_rows: int = 0
    source_tasks: int = 0
    target_rows: int = 0
    matched_rows: int = 0
    unmatched_rows: int = 0
    matched_fraction: float = 0.0
    source_tasks_not_in_target: int = 0
    unmatched_policy: str = "error"
    fill_value: Optional[float] = None
    first_unmatched: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _SourceTask:
    weight: float
    position: int
    task_id: Any
    score_provenance: Any


def default_key(match: str) -> str:
    """The field a match mode reads when no key is given."""
    return "prompt" if match == "prompt_hash" else TASK_ID


def transfer_prior(source_rows: Iterable[dict], target_rows: Iterable[dict], *, regime: Optional[str],
                   match: str = "prompt_hash", source_key: Optional[str] = None,
                   target_key: Optional[str] = None, source_weight_column: str = WEIGHT,
                   weight_column: str = WEIGHT, unmatched: str = "error", overwrite: bool = False,
                   source_name: str = "", source_sha256: Optional[str] = None,
                   target_name: str = "") -> tuple[list[dict], TransferReport]:
    """Return the target rows with the carried weights and provenance, and a report.

    :param regime: label of the regime the source prior was estimated under (model, algorithm,
        ...). Required unless the source's weights were themselves carried and record it.
    :param match: ``prompt_hash`` (content hash of the prompt field) or ``task_id``.
    :param source_key: field the source is matched on (default ``prompt`` / ``task_id``).
    :param target_key: field the target is matched on (default as ``source_key``).
    :param weight_column: target column to write; refused when it already holds weights unless
        ``overwrite`` (then every row's value is replaced, so the column keeps one regime).
    :param unmatched: what a target row without a source match gets (see UNMATCHED_POLICIES).
    :raises TrajvalInputError: naming the row and field for bad input and for mixing regimes.
    """
    if match not in MATCH_BY:
        raise TrajvalInputError(f"match must be one of {MATCH_BY}, got {match!r}")
    if unmatched not in UNMATCHED_POLICIES:
        raise TrajvalInputError(f"unmatched must be one of {UNMATCHED_POLICIES}, got {unmatched!r}")
    source_key = source_key or default_key(match)
    target_key = target_key or source_key
    source_rows = list(source_rows)
    target_rows = list(target_rows)
    if not source_rows:
        raise TrajvalInputError(f"source pool {source_name} is empty")
    regime = _source_regime(source_rows, source_weight_column, regime)
    scoring = _source_scoring(source_rows, source_weight_column)
    tasks = _source_tasks(source_rows, match, source_key, source_weight_column)
    _refuse_mixing(target_rows, weight_column, regime, overwrite)

    report = TransferReport(source=source_name, target=target_name, regime=regime, match=match,
                            weight_column=weight_column, source_rows=len(source_rows),
                            source_tasks=len(tasks), target_rows=len(target_rows),
                            unmatched_policy=unmatched)
    report.fill_value = _fill_value(unmatched, tasks, scoring)
    base = {REGIME: regime, "source_pool": source_name, "source_sha256": source_sha256, "match": match,
            "source_key": source_key, "target_key": target_key, "source_weight_column": source_weight_column}
    out_rows, used = [], set()
    for position, row in enumerate(target_rows):
        key = _match_key(row, position, match, target_key, "target")
        task = tasks.get(key)
        out = dict(row)
        if task is not None:
            used.add(key)
            report.matched_rows += 1
            out[weight_column] = task.weight
            out[provenance_column(weight_column)] = {
                **base, "matched": True, "fill": None, "source_row": task.position,
                "source_task_id": task.task_id, "source_score_provenance": task.score_provenance}
        else:
            report.unmatched_rows += 1
            if len(report.first_unmatched) < 5:
                report.first_unmatched.append(row_label(row, position))
            out[weight_column] = report.fill_value
            out[provenance_column(weight_column)] = {
                **base, "matched": False, "fill": unmatched, "source_row": None,
                "source_task_id": None, "source_score_provenance": None}
        out_rows.append(out)
    report.source_tasks_not_in_target = len(tasks) - len(used)
    report.matched_fraction = report.matched_rows / len(target_rows) if target_rows else 0.0
    logger.info(f"carried regime {regime!r} weights: {report.matched_rows} of {report.target_rows} target rows "
                f"matched by {match} ({report.matched_fraction:.1%}); {report.unmatched_rows} unmatched "
                f"({unmatched}); {report.source_tasks_not_in_target} source tasks not in the target")
    if report.unmatched_rows and unmatched == "error":
        raise TrajvalInputError(
            f"{report.unmatched_rows} of {report.target_rows} target rows have no match in the source by "
            f"{match} (first: {', '.join(report.first_unmatched)}); pass --unmatched null|floor|median to "
            f"fill them"
        )
    return out_rows, report


def _source_regime(rows: list[dict], weight_column: str, regime: Optional[str]) -> str:
    """The source's regime: the given label, checked against any regime the source records."""
    recorded = {}
    for position, row in enumerate(rows):
        value = get_path(row, f"{provenance_column(weight_column)}.{REGIME}", None)
        if value is not None:
            recorded.setdefault(value, f"source {row_label(row, position)}")
    if len(recorded) > 1:
        raise TrajvalInputError(
            f"source column '{weight_column}' mixes regimes {sorted(recorded)} "
            f"(e.g. {', '.join(sorted(recorded.values())[:2])}); it cannot be carried as one prior")
    if recorded:
        (found, label), = recorded.items()
        if regime and regime != found:
            raise TrajvalInputError(
                f"{label}: source weights record regime {found!r} in "
                f"'{provenance_column(weight_column)}', not the given {regime!r}")
        return found
    if not regime or not str(regime).strip():
        raise TrajvalInputError("name the regime the source prior was estimated under (--source-regime, "
                                "e.g. 'Qwen3-1.7B/GRPO/math'); every carried weight records it")
    return str(regime)


def _source_scoring(rows: list[dict], weight_column: str) -> Any:
    """The one score provenance behind the source weights (:func:`score_provenance`; rows without
    one are not counted), None when no row has one.

    :raises TrajvalInputError: naming two rows whose score provenances differ (e.g. two scored
        files concatenated): their weights were made under different regimes or runs.
    """
    found = None  # (canonical text, position, row, provenance)
    for position, row in enumerate(rows):
        provenance = score_provenance(row, weight_column)
        if provenance is None:
            continue
        text = canonical_json(_scoring_settings(provenance))
        if found is None:
            found = (text, position, row, provenance)
        elif text != found[0]:
            raise TrajvalInputError(
                f"source column '{weight_column}' mixes score provenances: source {row_label(found[2], found[1])} "
                f"and source {row_label(row, position)} differ ({_difference(found[3], provenance)}; two scored "
                f"pools concatenated?); it cannot be carried as one prior: carry each scored pool on its own")
    return None if found is None else found[3]


#: What a score provenance records of its run rather than of how weights are made: shards of one
#: pool scored by separate runs with the same settings differ there, and are one prior.
RUN_RECORD_KEYS = ("prior_cost", "trajval_ops_version")


def _scoring_settings(provenance: Any) -> Any:
    """A score provenance without :data:`RUN_RECORD_KEYS`."""
    if not isinstance(provenance, dict):
        return provenance
    return {key: value for key, value in provenance.items() if key not in RUN_RECORD_KEYS}


def _difference(first: Any, second: Any) -> str:
    """The keys two score provenances differ in, with their values (shortened)."""
    first, second = _scoring_settings(first), _scoring_settings(second)
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return f"{canonical_json(first)[:80]} vs {canonical_json(second)[:80]}"
    keys = sorted(k for k in set(first) | set(second) if canonical_json(first.get(k)) != canonical_json(second.get(k)))
    return "; ".join(f"{k}: {canonical_json(first.get(k))[:60]} vs {canonical_json(second.get(k))[:60]}"
                     for k in keys[:3]) + ("; ..." if len(keys) > 3 else "")


def _source_tasks(rows: list[dict], match: str, key_field: str, weight_column: str) -> dict[str, _SourceTask]:
    tasks: dict[str, _SourceTask] = {}
    for position, row in enumerate(rows):
        key = _match_key(row, position, match, key_field, "source")
        weight = get_path(row, weight_column, None)
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(weight)) or float(weight) < 0:
            raise TrajvalInputError(f"source {row_label(row, position)}: field '{weight_column}' must be a "
                                    f"finite number >= 0, got {weight!r}")
        weight = float(weight)
        known = tasks.get(key)
        if known is not None:
            # a resampled pool repeats rows with equal weights; unequal weights are ambiguous.
            if known.weight != weight:
                raise TrajvalInputError(
                    f"source {row_label(row, position)}: same task as row {known.position} ({match}) but "
                    f"'{weight_column}' {weight} != {known.weight}")
            continue
        tasks[key] = _SourceTask(weight, position, get_path(row, TASK_ID, None),
                                 score_provenance(row, weight_column))
    return tasks


def score_provenance(row: dict, weight_column: str) -> Any:
    """The score provenance behind ``row[weight_column]``: when the column was itself carried
    (the row has ``<weight_column>_provenance``), the ``source_score_provenance`` it recorded (None
    for a filled row); else the row's ``trajval_score_provenance`` (what the learnability mapper
    writes, whatever its weight column is named), None when absent."""
    carried = get_path(row, provenance_column(weight_column), None)
    if isinstance(carried, dict):
        return carried.get("source_score_provenance")
    return get_path(row, SCORE_PROVENANCE, None)


def _match_key(row: dict, position: int, match: str, key_field: str, side: str) -> str:
    value = get_path(row, key_field, None)
    if value is None:
        raise TrajvalInputError(f"{side} {row_label(row, position)}: field '{key_field}' (matched by {match}) "
                                f"is missing")
    if match == "task_id":
        return str(value)
    try:
        return prompt_hash(value)
    except ValueError as err:
        raise TrajvalInputError(f"{side} {row_label(row, position)}: field '{key_field}': {err}") from None


def _refuse_mixing(rows: list[dict], weight_column: str, regime: str, overwrite: bool) -> None:
    if overwrite:
        return
    for position, row in enumerate(rows):
        if get_path(row, weight_column, None) is not None:
            existing = get_path(row, f"{provenance_column(weight_column)}.{REGIME}", None)
            origin = f"carried from regime {existing!r}" if existing else "estimated for this pool"
            raise TrajvalInputError(
                f"target {row_label(row, position)}: field '{weight_column}' already holds a weight "
                f"({origin}); carrying regime {regime!r} into it would mix regimes in one column. Pass "
                f"--weight-column NEW_COLUMN to write a separate column, or --overwrite to replace the "
                f"column in every row")


def _fill_value(unmatched: str, tasks: dict[str, _SourceTask], scoring: Any) -> Optional[float]:
    if unmatched == "median":
        return float(np.median([task.weight for task in tasks.values()]))
    if unmatched == "floor":  # the floor eps the source weights were made with, else the default
        eps = scoring.get("eps") if isinstance(scoring, dict) else None
        return core.DEFAULT_EPS if eps is None else float(eps)
    return None
