"""trajval_learnability_mapper: endpoint rewards -> learnability score, weight and profile."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
from data_juicer.ops.base_op import OPERATORS, Mapper
from loguru import logger
from pydantic import Field, PositiveFloat, PositiveInt
from typing_extensions import Annotated

from trajval_ops import __version__, core, fields
from trajval_ops.ops.dj_adapter import (
    TableMapper, append_columns, run_whole_pool, safe_op_kwargs,
)
from trajval_ops.summary import group_noise, log_group_noise, log_rollout_noise, log_weight_summary, rollout_noise
from trajval_ops.table_checks import arrow_numeric_column, check_unique_ids
from trajval_ops.validation import TrajvalInputError

OP_NAME = "trajval_learnability_mapper"


@OPERATORS.register_module(OP_NAME)
class TrajvalLearnabilityMapper(TableMapper, Mapper):
    """Turn each task's early and late pass rates into TrajVal's learnability score and weight.

    Reads ``trajval_r_early`` and ``trajval_r_late`` (floats in [0, 1]), or, when
    ``early_window_keys`` / ``late_window_keys`` are given, the per-checkpoint pass rates of a
    K-checkpoint window, averages them and writes the means back as ``trajval_r_early`` /
    ``trajval_r_late``. Writes ``trajval_delta``, ``trajval_score`` (s), ``trajval_weight``
    (w, unnormalised: samplers normalise), ``trajval_profile`` (endpoint-only profile, rule
    ``saturation_first``) and ``trajval_score_provenance`` (alpha, eps, source fields).

    Rows keep their order and count; a missing, non-numeric, NaN or out-of-range reward stops
    the run with an error naming the row and the field.
    """

    _batched_op = True

    def __init__(
        self,
        alpha: PositiveFloat = core.DEFAULT_ALPHA,
        eps: Annotated[float, Field(gt=0, le=1)] = core.DEFAULT_EPS,
        r_early_key: str = fields.R_EARLY,
        r_late_key: str = fields.R_LATE,
        window_k: Optional[PositiveInt] = None,
        early_window_keys: Optional[List[str]] = None,
        late_window_keys: Optional[List[str]] = None,
        delta_key: str = fields.DELTA,
        score_key: str = fields.SCORE,
        weight_key: str = fields.WEIGHT,
        profile_key: str = fields.PROFILE,
        provenance_key: str = fields.SCORE_PROVENANCE,
        id_key: Optional[str] = None,
        group_key: Optional[str] = None,
        *args,
        **kwargs,
    ):
        """
        Initialization method.

        :param alpha: power-compression exponent in ``w = max(s**alpha, eps)``; < 1 flattens the
            score range (paper default 0.3).
        :param eps: probability floor in ``w = max(s**alpha, eps)``, in (0, 1] (paper: 0.05).
        :param r_early_key: field holding the early-window mean pass rate; written when
            ``early_window_keys`` is given, read otherwise.
        :param r_late_key: the same for the late window.
        :param window_k: K > 1: average the endpoint mapper's per-checkpoint fields of each
            window, named from its ``window``/``window_index`` (``trajval_r_early_0`` ...
            ``trajval_r_early_<K-1>``, likewise late). None or 1: read ``r_early_key`` /
            ``r_late_key`` (K = 1). Explicit ``early_window_keys``/``late_window_keys`` override.
        :param early_window_keys: per-checkpoint pass-rate fields of the early window (K fields,
            e.g. the outputs of K endpoint-reward mapper instances); averaged into
            ``r_early_key``. None: read ``r_early_key`` directly.
        :param late_window_keys: the same for the late window.
        :param delta_key: output field for ``r_late - r_early``.
        :param score_key: output field for ``s = (1 - r_early) * max(0, delta)``.
        :param weight_key: output field for ``w = max(s**alpha, eps)`` (unnormalised).
        :param profile_key: output field for the endpoint-only trajectory profile.
        :param provenance_key: output field recording how the weight was made.
        :param id_key: dotted path of the row id used in error messages; None tries common id
            fields (``id``, ``extra_info.index``, ...) and always gives the row position.
        :param group_key: dotted path of a task group (a family, ``data_source``): the end-of-run
            log then shows the mean pass rates, delta (with its SE from the rollouts) and weight
            per group, and says whether the gain differs between groups beyond the rollout
            noise (needs the endpoint mapper's ``<key>_n`` columns). Rows without it form the
            group ``None``.
        """
        super().__init__(*args, **safe_op_kwargs(kwargs))
        core.check_alpha_eps(alpha, eps)
        for name, keys in (("early_window_keys", early_window_keys), ("late_window_keys", late_window_keys)):
            if keys is not None and len(keys) == 0:
                raise ValueError(f"{name} must list at least one field, or be omitted")
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.r_early_key = r_early_key
        self.r_late_key = r_late_key
        if window_k and window_k > 1:
            early_window_keys = early_window_keys or fields.window_keys("early", window_k)
            late_window_keys = late_window_keys or fields.window_keys("late", window_k)
        self.early_window_keys = list(early_window_keys) if early_window_keys else None
        self.late_window_keys = list(late_window_keys) if late_window_keys else None
        self.delta_key = delta_key
        self.score_key = score_key
        self.weight_key = weight_key
        self.profile_key = profile_key
        self.provenance_key = provenance_key
        self.id_key = id_key
        self.group_key = group_key
        self.provenance = {
            "alpha": self.alpha,
            "eps": self.eps,
            "r_early_source": self.early_window_keys or [self.r_early_key],
            "r_late_source": self.late_window_keys or [self.r_late_key],
            "profile_rule": core.PROFILE_RULE,
            "trajval_ops_version": __version__,
        }
        self.bind_table_process()

    def _window(self, read, keys: Optional[List[str]], key: str) -> np.ndarray:
        if keys is None:
            return read(key)
        return core.window_mean(np.stack([read(k) for k in keys], axis=1))

    def score_columns(self, read) -> tuple[np.ndarray, np.ndarray, dict]:
        """(r_early, r_late, output columns) from ``read(field) -> float array in [0, 1]``."""
        r_early = self._window(read, self.early_window_keys, self.r_early_key)
        r_late = self._window(read, self.late_window_keys, self.r_late_key)
        score = core.learnability_score(r_early, r_late)
        columns = {}
        if self.early_window_keys:
            columns[self.r_early_key] = r_early
        if self.late_window_keys:
            columns[self.r_late_key] = r_late
        columns[self.delta_key] = core.reward_delta(r_early, r_late)
        columns[self.score_key] = score
        columns[self.weight_key] = core.sampling_weight(score, self.alpha, self.eps)
        columns[self.profile_key] = core.endpoint_profiles(r_early, r_late)
        return r_early, r_late, columns

    def input_columns(self) -> list[str]:
        keys = (self.early_window_keys or [self.r_early_key]) + (self.late_window_keys or [self.r_late_key])
        ids = [self.id_key] if self.id_key else list(fields.ID_CANDIDATES)
        return list(dict.fromkeys(keys + [key.split(".")[0] for key in ids]))

    def transform_table(self, table, first_row: int | None = None):
        """The reward columns read from Arrow (errors name the first bad row), the outputs
        appended; every other column untouched."""
        import pyarrow as pa

        def read(key):
            return arrow_numeric_column(table, key, lower=0.0, upper=1.0, id_key=self.id_key,
                                        position_offset=first_row)

        r_early, r_late, columns = self.score_columns(read)
        new = {name: pa.array(values) for name, values in columns.items()}
        new[self.provenance_key] = pa.repeat(pa.scalar(self.provenance), table.num_rows)
        self._last = (r_early, r_late, columns)
        return append_columns(table, new)

    def run(self, dataset, *, exporter=None, tracer=None):
        """Default executor: one vectorised pass over the whole pool's reward columns.

        Reading only the reward columns from Arrow and appending the outputs leaves the other
        columns (prompts, ground truths) untouched and uncopied; a row-wise map would convert
        every column to Python and back (measured: ~1000x the numpy time, tools/bench).
        """
        return run_whole_pool(self, dataset, self.score_pool, exporter=exporter, tracer=tracer)

    def score_pool(self, table):
        """The whole pool scored at once, with the end-of-run summary and noise report."""
        if table.num_rows == 0:
            raise TrajvalInputError(f"{OP_NAME}: the pool is empty (0 rows): nothing to score")
        check_unique_ids(table, self.id_key, what=OP_NAME)
        logger.info(f"{OP_NAME}: scoring {table.num_rows} rows (alpha={self.alpha}, eps={self.eps})")
        table = self.transform_table(table, 0)
        r_early, r_late, columns = self._last
        log_weight_summary(OP_NAME, weight=columns[self.weight_key], eps=self.eps,
                           profiles=columns[self.profile_key], r_early=r_early, r_late=r_late)
        counts = self._rollout_counts(table)
        if counts is not None:
            log_rollout_noise(OP_NAME, rollout_noise(r_early, r_late, *counts, columns[self.score_key]))
            if self.group_key:
                from trajval_ops.jsontable import table_path_values

                groups = table_path_values(table, self.group_key) or [None] * table.num_rows
                log_group_noise(OP_NAME, self.group_key,
                                group_noise(groups, r_early, r_late, *counts, columns[self.weight_key]))
        elif self.group_key:
            logger.warning(f"{OP_NAME}: group_key {self.group_key!r} is set but the pool has no rollout counts "
                           "(<key>_n columns of the endpoint mapper): no per-group noise report")
        return table

    def _rollout_counts(self, table) -> tuple[np.ndarray, np.ndarray] | None:
        """Rollouts behind r_early and r_late (the endpoint mapper's ``<key>_n`` columns; a
        K-window mean stands on K times the rollouts), or None where the pool lacks them."""
        def total(keys):
            names = [f"{key}_n" for key in keys]
            if not all(name in table.column_names for name in names):
                return None
            return sum(np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)
                       for name in names)

        early = total(self.early_window_keys or [self.r_early_key])
        late = total(self.late_window_keys or [self.r_late_key])
        return None if early is None or late is None else (early, late)
