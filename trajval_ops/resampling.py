"""A weighted pool resampled (or cut) by its weights: the weighted resampler's work, without
Data-Juicer.

:class:`ResampleSettings` declares the resampler's settings (the mode, the draw, the fields read
and written); :class:`PoolResampler` plans the rows of the output from an Arrow table (each
output row's source row and probability) and writes them with their provenance, every other
column untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from loguru import logger

from trajval_ops import __version__, core, fields
from trajval_ops.errors import TrajvalInputError
from trajval_ops.input_checks import arrow_numeric_column
from trajval_ops.samplers.weighted import DRAWING_MODES
from trajval_ops.settings import check_settings, setting
from trajval_ops.summary import log_weight_summary

#: The resampler's modes: the drawing modes (with replacement, by the weight), then the subset
#: modes (each kept row once).
MODES = (*DRAWING_MODES, "learnable_subset", "hard_cut")


@dataclass(frozen=True)
class ResampleSettings:
    """The weighted resampler's settings: how the rows are drawn or kept, and the fields it reads
    and writes."""

    mode: str = setting("multinomial", "``multinomial`` (draws with replacement, p = w / sum(w)), ``systematic`` "
                        "(low-variance: each row floor or ceil of its expected count), ``learnable_subset`` (the "
                        "rows whose ``profile_key`` is Stable, Sluggish or Ineffective, each once) or ``hard_cut`` "
                        "(the rows whose ``score_key`` exceeds ``threshold``, each once).", choices=MODES)
    num_samples: Optional[int] = setting(None, "rows to draw in the sampling modes; None: the pool size. Ignored by "
                                         "the subset modes.", ge=1)
    seed: int = setting(0, "random seed; the same seed gives the same output.")
    weight_key: str = setting(fields.WEIGHT, "field holding the unnormalised weight w (written by "
                              "trajval_learnability_mapper).")
    online_weight_key: Optional[str] = setting(None, "field holding an online scheduler's weight; the sampling weight "
                                               "becomes ``w * w_online``. None: none.")
    score_key: str = setting(fields.SCORE, "field compared with ``threshold`` in ``hard_cut`` mode.")
    threshold: float = setting(0.0, "``hard_cut`` keeps rows with ``score > threshold``; 0 keeps every row with a "
                               "positive learnability score.")
    profile_key: str = setting(fields.PROFILE, "field holding the endpoint profile, read by ``learnable_subset``.")
    shuffle: bool = setting(False, "shuffle the output rows (seeded) instead of keeping the pool's order.")
    eps: float = setting(core.DEFAULT_EPS, "the floor used when the weights were made; only used to report how many "
                         "rows sit at the floor (and to warn when all do).", gt=0, le=1)
    prob_key: str = setting(fields.PROB, "output field for the row's normalised sampling probability.")
    source_row_key: str = setting(fields.SOURCE_ROW, "output field for the row's position in the input pool.")
    provenance_key: str = setting(fields.RESAMPLE_PROVENANCE, "output field recording how the resample was made.")
    id_key: Optional[str] = setting(None, "dotted path of the row id used in error messages.")

    def __post_init__(self):
        check_settings(self)
        # a YAML integer for a number is that number (the provenance records 0.0, not 0)
        object.__setattr__(self, "threshold", float(self.threshold))
        object.__setattr__(self, "eps", float(self.eps))


class PoolResampler:
    """A pool resampled by :class:`ResampleSettings` (the operator's work, both executors).

    :param what: the name errors and logs begin with (the operator's).
    """

    def __init__(self, settings: ResampleSettings, what: str = "resample"):
        self.settings, self.what = settings, what

    def plan(self, table) -> tuple[np.ndarray, np.ndarray]:
        """Source-row indices of the output and each output row's probability, from a pyarrow.Table."""
        s = self.settings
        if table.num_rows == 0:
            raise TrajvalInputError(f"{self.what}: the pool is empty (0 rows): nothing to resample")
        self._check_not_drawn(table)
        weight = arrow_numeric_column(table, s.weight_key, lower=0.0, id_key=s.id_key)
        log_weight_summary(f"{self.what} input", weight, s.eps)
        if s.online_weight_key:
            online = arrow_numeric_column(table, s.online_weight_key, lower=0.0, id_key=s.id_key)
            weight = core.compose_online(weight, online)
        if s.mode in DRAWING_MODES:
            if not weight.sum() > 0:
                raise TrajvalInputError(f"{self.what}: every weight is zero: no row can be sampled")
            prob = core.normalize(weight)
            n = s.num_samples if s.num_samples is not None else table.num_rows
            draw = core.multinomial_indices if s.mode == "multinomial" else core.systematic_indices
            indices = draw(prob, n, s.seed)
        else:
            indices = self._kept_rows(table)
            prob = np.zeros_like(weight)
            prob[indices] = core.normalize(weight[indices])
        if s.shuffle:
            indices = np.random.default_rng([s.seed, 1]).permutation(indices)
        return indices, prob[indices]

    def _kept_rows(self, table) -> np.ndarray:
        """The rows a subset mode keeps (each once), in pool order."""
        s = self.settings
        if s.mode == "hard_cut":
            score = arrow_numeric_column(table, s.score_key, lower=0.0, upper=1.0, id_key=s.id_key)
            indices = np.flatnonzero(core.hard_cut_mask(score, s.threshold))
            empty = f"the largest '{s.score_key}' is {score.max():.4g}, the threshold {s.threshold}"
        else:
            indices = np.flatnonzero(core.is_learnable(self._profiles(table)))
            empty = f"no row's '{s.profile_key}' is one of {sorted(core.LEARNABLE_PROFILES)}"
        if indices.size == 0:
            raise TrajvalInputError(f"{self.what}: {s.mode} kept no row: {empty}")
        return indices

    def _check_not_drawn(self, table) -> None:
        """A pool any of whose rows this operator already drew by a weight is not resampled: drawn
        again, each task would come in proportion to the product of both weights (its weight
        squared for one key); cut, its record would name the cut, and the weighted samplers would
        draw it once more. Every row's record is read (a drawn pool concatenated after a scored one)."""
        from trajval_ops.samplers.weighted import weight_draws

        draws = weight_draws(table, self.settings.provenance_key)
        if not draws.records:
            return
        before, mode = draws.records[0], self.settings.mode
        then = (f"drawn by a weight again, each task would come in proportion to both draws (its weight squared for "
                f"'{before['weight_key']}')" if mode in DRAWING_MODES else
                f"cut now, it would be recorded as a {mode} pool, which weighted samplers would draw by the "
                "weight once more")
        raise TrajvalInputError(
            f"{self.what}: this pool was drawn by its weight '{before['weight_key']}' already (mode {before['mode']}: "
            f"{draws.described()}); {then}. Resample the pool as it was before the draw (to cut and draw, cut first)")

    def _profiles(self, table) -> np.ndarray:
        key = self.settings.profile_key
        if key not in table.column_names:
            one_pass = _one_pass_priors(table)
            if one_pass:
                raise TrajvalInputError(
                    f"{self.what}: learnable_subset keeps rows by their '{key}', and the pool was scored by the "
                    f"{' and '.join(one_pass)} prior (its rows' {fields.SCORE_PROVENANCE}), which reads the early "
                    "pass alone and writes no profile: use hard_cut or a drawing mode, or score the pool with prior: "
                    "trajval")
            raise TrajvalInputError(f"{self.what}: learnable_subset reads field '{key}', which the pool lacks (run "
                                    "trajval_learnability_mapper first)")
        profiles = np.asarray(table.column(key).to_pylist(), dtype=object)
        bad = [i for i, p in enumerate(profiles) if p not in core.PROFILES]
        if bad:
            from trajval_ops.pools.io import table_row
            from trajval_ops.rows import row_label

            row = table_row(table, bad[0])
            label = row_label(row, bad[0], self.settings.id_key)
            raise TrajvalInputError(f"{self.what}: {label}: field '{key}' = {profiles[bad[0]]!r} is not a profile "
                                    f"({', '.join(core.PROFILES)}){_why_no_profile(row)}")
        return profiles

    def resample_table(self, table):
        """Apply :meth:`plan` to a pyarrow.Table: the output rows, with the probability, the source
        row and the provenance appended."""
        import pyarrow as pa

        from trajval_ops.pools.io import append_columns

        s = self.settings
        indices, prob = self.plan(table)
        out = table.take(pa.array(indices, type=pa.int64()))
        provenance = {
            "mode": s.mode,
            "seed": s.seed,
            "num_samples": int(indices.size),
            "pool_rows": int(table.num_rows),
            "weight_key": s.weight_key,
            "online_weight_key": s.online_weight_key,
            "threshold": s.threshold if s.mode == "hard_cut" else None,
            "profiles": sorted(core.LEARNABLE_PROFILES) if s.mode == "learnable_subset" else None,
            "shuffle": s.shuffle,
            "trajval_ops_version": __version__,
        }
        out = append_columns(out, {
            s.prob_key: pa.array(prob, type=pa.float64()),
            s.source_row_key: pa.array(indices, type=pa.int64()),
            s.provenance_key: pa.repeat(pa.scalar(provenance), len(indices)),
        })
        unique = np.unique(indices).size
        logger.info(f"{self.what}: mode={s.mode} seed={s.seed}: {table.num_rows} rows in, {out.num_rows} out "
                    f"({unique} distinct, {table.num_rows - unique} pool rows not drawn)")
        return out


def _one_pass_priors(table) -> list[str]:
    """The one-pass priors (no profile) that scored any row of the pool, as its rows' score
    provenance records them."""
    from trajval_ops.pools.io import distinct_path_values
    from trajval_ops.priors import ONE_PASS_PRIORS

    return [name for name in distinct_path_values(table, f"{fields.SCORE_PROVENANCE}.score") if name in ONE_PASS_PRIORS]


def _why_no_profile(row: dict) -> str:
    """Why a row has no profile, where it says so: a predicted score, or a one-pass prior's."""
    from trajval_ops.priors import ONE_PASS_PRIORS

    if row.get(fields.PREDICTED) is True:
        return (" (a sampled prior predicted this row's score: it has no profile; use hard_cut or a drawing mode, or "
                "leave the predicted rows out first)")
    provenance = row.get(fields.SCORE_PROVENANCE)
    prior = provenance.get("score") if isinstance(provenance, dict) else None
    if prior in ONE_PASS_PRIORS:
        return (f" (the {prior} prior scored this row: it writes no profile; use hard_cut or a drawing mode, or leave "
                "such rows out first)")
    return ""
