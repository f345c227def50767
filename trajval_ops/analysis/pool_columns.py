"""Reading pools and trajectories for the diagnostics, and writing figures atomically.

Bad input raises :class:`trajval_ops.errors.TrajvalInputError` naming the file line or the
row (id or position) and the field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from trajval_ops import core, fields
from trajval_ops.atomic import atomic_open
from trajval_ops.errors import TrajvalInputError
from trajval_ops.input_checks import float_column
from trajval_ops.rows import get_path, path_root, row_label

#: Default field of a dense trajectory row: the list of per-checkpoint accuracies.
TRAJECTORY_KEY = "accuracies"


def write_figure_atomic(path: str | os.PathLike, figure) -> Path:
    """Save a matplotlib figure as PNG atomically."""
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=110, bbox_inches="tight")
    return Path(path)


def _id_columns(rows: Sequence[Mapping], id_key: str | None) -> dict[str, list]:
    keys = (id_key,) if id_key else fields.ID_CANDIDATES
    top_level = {path_root(key) for key in keys}
    return {key: [row.get(key) for row in rows] for key in top_level}


def row_ids(rows: Sequence[Mapping], id_key: str | None = None) -> list:
    """The id of each row (``id_key`` or the first of ``fields.ID_CANDIDATES`` present), or its
    position when it has none."""
    keys = (id_key,) if id_key else fields.ID_CANDIDATES
    ids = [_row_id(row, keys) for row in rows]
    return [position if value is None else value for position, value in enumerate(ids)]


def _row_id(row: Mapping, keys: Sequence[str]):
    """The value of the first of ``keys`` the row holds, None where it holds none."""
    return next((value for value in (get_path(row, key, None) for key in keys) if value is not None), None)


def measured_rows(rows: list[dict], path, option: str, stage: str = "report") -> tuple[list[dict], int]:
    """The rows whose pass rates were measured, and how many a sampled prior predicted instead
    (their pass rates are null; every analysis reads measured ones).

    :raises TrajvalInputError: naming ``option`` and ``path`` when every row was predicted (else
        the analysis would call the pool empty).
    """
    from loguru import logger

    measured = [row for row in rows if row.get(fields.PREDICTED) is not True]
    predicted = len(rows) - len(measured)
    if rows and not measured:
        raise TrajvalInputError(f"{option} {path}: all {predicted} rows are predicted ({fields.PREDICTED}: a "
                                f"sampled prior predicted their scores, their pass rates were not measured): "
                                f"nothing measured to analyse")
    if predicted:
        logger.info(f"{stage}: {predicted} rows of {path} whose score was predicted ({fields.PREDICTED}) are left "
                    f"out: the {stage} reads measured pass rates")
    return measured, predicted


def check_joinable(rows: Sequence[Mapping], id_key: str | None, where: str) -> None:
    """Refuse rows to be joined on id where one has none: :func:`row_ids` gives it its position,
    which would pair it with whatever row of the other input has that number as id.

    :raises TrajvalInputError: naming ``where`` and the first row without an id.
    """
    keys = (id_key,) if id_key else fields.ID_CANDIDATES
    for position, row in enumerate(rows):
        if _row_id(row, keys) is None:
            raise TrajvalInputError(
                f"{where}: row {position} has no id ({' or '.join(keys)}): its rows are joined with the other "
                "input's on id, and a row's position is no id; give every row an id (or name it with --id-key)")


def rows_column(rows: Sequence[Mapping], field: str, id_key: str | None = None,
                upper: float | None = 1.0) -> np.ndarray:
    """``field`` (a dotted path) of every row as floats in [0, upper]; ``upper=None`` for weights.
    Errors name the row and the field."""
    samples = _id_columns(rows, id_key)
    samples[field] = [get_path(row, field, None) for row in rows]
    return float_column(samples, field, upper=upper, id_key=id_key)


def provenance_eps_alpha(rows: Sequence[Mapping], provenance_key: str = fields.SCORE_PROVENANCE) -> dict:
    """``alpha``, ``eps`` and the prior (``score``: its name) the learnability mapper recorded for
    the pool's rows, each where recorded ({} where no row records them).

    A file may concatenate runs (each row carries its own run's provenance): one value for the
    pool exists only when every run recorded the same prior, alpha and eps.

    :raises TrajvalInputError: the rows hold runs whose priors, alpha or eps differ, each named
        with its rows.
    """
    runs: dict[tuple, list[int]] = {}
    for position, row in enumerate(rows):
        prov = row.get(provenance_key)
        if isinstance(prov, str):
            try:
                prov = json.loads(prov)
            except ValueError:
                continue
        if not isinstance(prov, Mapping):
            continue
        settings = tuple((k, prov[k]) for k in ("score", "alpha", "eps")
                         if isinstance(prov.get(k), (str, int, float)) and not isinstance(prov.get(k), bool))
        runs.setdefault(settings, []).append(position)
    if len(runs) > 1:
        described = "; ".join(
            f"{', '.join(f'{k} {v}' for k, v in settings) or 'no settings recorded'}: {len(positions)} rows, "
            f"the first row {positions[0]}" for settings, positions in runs.items())
        raise TrajvalInputError(
            f"the pool holds rows of {len(runs)} runs scored differently ({described}); one alpha and eps cannot "
            "describe them: report each run's rows apart, or give alpha and eps (--alpha, --eps) to read every "
            "row alike")
    if not runs:
        return {}
    return {k: v if k == "score" else float(v) for k, v in next(iter(runs))}


def pool_columns(
    rows: Sequence[Mapping],
    *,
    alpha: float | None = None,
    eps: float | None = None,
    id_key: str | None = None,
    r_early_key: str = fields.R_EARLY,
    r_late_key: str = fields.R_LATE,
    score_key: str = fields.SCORE,
    weight_key: str = fields.WEIGHT,
    profile_key: str = fields.PROFILE,
) -> dict:
    """The diagnostic columns of a pool.

    ``r_early`` and ``r_late`` are required.  ``score``, ``weight`` and ``profile`` are read when
    every row has them, computed when no row has them (a pool that has some rows annotated and
    others not is an error) with the numeric core (``learnability_score``,
    ``sampling_weight``, ``endpoint_profiles``); ``computed`` lists which were.  ``alpha``/``eps``
    default to the pool's recorded provenance (refused when the file's runs recorded different
    ones), then to the paper's 0.3 / 0.05. A pool another prior scored (variance, band-pass) is
    refused unless both are given: its score and weight are not TrajVal's, which every column
    here describes.
    """
    if not rows:
        raise TrajvalInputError("the pool is empty (0 rows): nothing to analyse")
    recorded = provenance_eps_alpha(rows) if alpha is None or eps is None else {}
    if recorded.get("score", "trajval") != "trajval":
        raise TrajvalInputError(
            f"the pool was scored by the {recorded['score']} prior (its rows' {fields.SCORE_PROVENANCE}): its "
            f"'{score_key}' and '{weight_key}' are that prior's, not TrajVal's s = (1 - r_early) max(0, delta) and "
            "w = max(s^alpha, eps), which this analysis reads them as; analyse a pool the trajval prior scored")
    alpha = recorded.get("alpha", core.DEFAULT_ALPHA) if alpha is None else alpha
    eps = recorded.get("eps", core.DEFAULT_EPS) if eps is None else eps
    core.check_alpha_eps(alpha, eps)
    out: dict = {
        "id": row_ids(rows, id_key),
        "r_early": rows_column(rows, r_early_key, id_key),
        "r_late": rows_column(rows, r_late_key, id_key),
        "alpha": alpha,
        "eps": eps,
        "computed": [],
    }
    out["delta"] = core.reward_delta(out["r_early"], out["r_late"])

    def present(key):
        """True if every row has ``key``, False if none has; a partly annotated pool is an error."""
        missing = [i for i, row in enumerate(rows) if get_path(row, key, None) is None]
        if missing and len(missing) < len(rows):
            raise TrajvalInputError(
                f"{row_label(rows[missing[0]], missing[0], id_key)}: field '{key}' is missing while other "
                f"rows have it ({len(missing)} of {len(rows)} rows lack it); annotate the whole pool"
            )
        return not missing

    if present(score_key):
        out["score"] = rows_column(rows, score_key, id_key)
    else:
        out["score"] = core.learnability_score(out["r_early"], out["r_late"])
        out["computed"].append("score")
    if present(weight_key):
        out["weight"] = rows_column(rows, weight_key, id_key, upper=None)
    else:
        out["weight"] = core.sampling_weight(out["score"], alpha, eps)
        out["computed"].append("weight")
    if present(profile_key):
        labels = [get_path(row, profile_key) for row in rows]
        for position, label in enumerate(labels):
            if label not in core.PROFILES:
                raise TrajvalInputError(
                    f"{row_label(rows[position], position, id_key)}: field '{profile_key}' = {label!r} "
                    f"is not one of {list(core.PROFILES)}"
                )
        out["profile"] = np.asarray(labels, dtype=object)
    else:
        out["profile"] = core.endpoint_profiles(out["r_early"], out["r_late"])
        out["computed"].append("profile")
    return out


def trajectory_matrix(
    rows: Sequence[Mapping], key: str = TRAJECTORY_KEY, id_key: str | None = None
) -> tuple[list, np.ndarray]:
    """``(ids, acc)`` from dense-trajectory rows ``{"id": ..., key: [a_1, ..., a_T]}``.

    Every row must hold a list of the same length T >= 2 of numbers in [0, 1].
    """
    if not rows:
        raise TrajvalInputError("the trajectory file is empty (0 rows)")
    length = None
    matrix = []
    for position, row in enumerate(rows):
        values = get_path(row, key, None)
        label = row_label(row, position, id_key)
        if not isinstance(values, list) or len(values) < 2:
            raise TrajvalInputError(f"{label}: field '{key}' must be a list of >= 2 accuracies, got {values!r:.80}")
        if length is None:
            length = len(values)
        elif len(values) != length:
            raise TrajvalInputError(f"{label}: field '{key}' has {len(values)} checkpoints, the first row has {length}")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                raise TrajvalInputError(f"{label}: field '{key}' holds {value!r}; accuracies must be numbers in [0, 1]")
        matrix.append(values)
    return row_ids(rows, id_key), np.asarray(matrix, dtype=np.float64)


def join_on_id(ids_a: Sequence, ids_b: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(ia, ib)`` of the ids present in both sequences, in ``ids_a`` order.

    Duplicate ids on either side are an error: a join on them would be ambiguous.
    """
    for name, ids in (("first", ids_a), ("second", ids_b)):
        seen = set()
        for value in ids:
            key = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
            if key in seen:
                raise TrajvalInputError(f"duplicate id {value!r} in the {name} input: cannot join on id")
            seen.add(key)
    where_b = {value: i for i, value in enumerate(ids_b)}
    pairs = [(i, where_b[value]) for i, value in enumerate(ids_a) if value in where_b]
    if not pairs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    ia, ib = zip(*pairs)
    return np.asarray(ia, dtype=np.int64), np.asarray(ib, dtype=np.int64)
