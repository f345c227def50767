"""The core weighted index sampler every trainer adapter wraps (numpy only).

Draws task indices with replacement in proportion to a weight vector (``trajval_weight`` or
``trajval_prob``). The random stream depends only on ``(seed, epoch)``, never on the rank, so
every process of a distributed run draws the same indices; ``state_dict`` records the exact
generator state so a resumed run continues the same stream.

Cost: one ``O(n)`` cumulative sum per weight update; a draw of ``k`` indices is ``k`` uniforms
and a binary search in the cumulative weights (``O(k log n)``), nothing proportional to ``n``.
Pools of ``GUIDE_MIN_ROWS`` rows or more, whose cumulative table no longer fits in cache, also
get a guide table (one start row per ``1/n`` slice of [0, 1), Chen and Asau's indexed search):
a draw then walks forward a few rows from its guide instead of a cache-missing binary search.
Both give exactly ``searchsorted(cumulative, u, side="right")``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from trajval_ops.core import normalize
from trajval_ops.fields import ID_CANDIDATES, PROB, PROVENANCE_RECORD, PROVENANCE_REF, RESAMPLE_PROVENANCE, WEIGHT
from trajval_ops.errors import TrajvalInputError
from trajval_ops.input_checks import float_column
from trajval_ops.rows import path_root
from trajval_ops.settings import whole_number

STATE_VERSION = 1
#: Pool size from which draws use the guide table.
GUIDE_MIN_ROWS = 1 << 20
#: Forward steps from the guide before falling back to a binary search for the rest.
_GUIDE_STEPS = 4


def weights_from_column(column: Sequence[Any], field: str = WEIGHT) -> np.ndarray:
    """Validate a weight column read from a dataset (list, array, Arrow column).

    :raises TrajvalInputError: naming the row position and the field for a missing, non-numeric,
        non-finite or negative weight, or an empty column.
    """
    values = column if isinstance(column, np.ndarray) else list(column)
    if len(values) == 0:
        raise TrajvalInputError(f"field '{field}': the pool is empty, nothing to sample")
    weights = np.asarray(values)
    clean = weights.dtype.kind in "fiu" and np.isfinite(weights).all() and (weights >= 0).all()
    if not clean:  # slow path only to name the first bad row
        weights = float_column({field: list(values)}, field)
    weights = weights.astype(np.float64, copy=False)
    if not weights.sum() > 0:
        raise TrajvalInputError(f"field '{field}': every weight is zero, no row can be sampled")
    return weights


#: the resampler's modes that draw rows in proportion to the weight (the subset modes keep rows once)
DRAWING_MODES = ("multinomial", "systematic")


def weights_from_dataset(dataset: Any, field: str = WEIGHT) -> np.ndarray:
    """Read and validate ``field`` from a map-style dataset (datasets.Dataset, pandas, dict).

    :raises TrajvalInputError: also for a pool any of whose rows the weighted resampler already
        drew by ``field`` (:func:`weight_draws`): drawn by it again, row i would come in proportion
        to its weight squared.
    """
    try:
        column = dataset[field]
    except (KeyError, ValueError) as err:
        raise TrajvalInputError(f"row 0: field '{field}' is missing from the dataset") from err
    draws = weight_draws(dataset)
    # the weight it drew by, or the probability it wrote from that weight (the same draw)
    by_field = [draw for draw in draws.records if field in (draw["weight_key"], PROB)]
    if by_field:
        raise TrajvalInputError(
            f"field '{field}': this pool was drawn by that weight already (trajval_weighted_resampler, mode "
            f"{by_field[0]['mode']}: {draws.described()}); drawn by it again, each task would come in proportion to "
            "its weight squared. Train on the resampled pool uniformly (a plain sampler), or sample the weighted pool "
            "before it was resampled")
    return weights_from_column(column, field)


def pass_rates_from_dataset(dataset: Any, field: str) -> np.ndarray:
    """Read ``field`` from a map-style dataset as pass rates in [0, 1] (e.g. BOTS's reference
    columns).

    :raises TrajvalInputError: naming the row (its position, and its id when the dataset has an id
        column) and the field for a missing column, a null, a non-number, NaN or a value outside [0, 1].
    """
    try:
        column = dataset[field]
    except (KeyError, ValueError) as err:
        raise TrajvalInputError(f"row 0: field '{field}' is missing from the dataset") from err
    samples = {field: list(column)}
    columns = set(getattr(dataset, "column_names", None) or getattr(dataset, "keys", lambda: [])())
    for key in {path_root(candidate) for candidate in ID_CANDIDATES} & columns:
        samples[key] = list(dataset[key])  # so a bad row is named by its id as well
    return float_column(samples, field, lower=0.0, upper=1.0)


@dataclass(frozen=True)
class WeightDraws:
    """The weighted resampler's draws by a weight (:data:`DRAWING_MODES`) that a pool's rows record.

    :param records: each distinct draw, ``{"mode", "weight_key"}``.
    :param rows: how many rows such a draw gave; ``pool_rows``: the pool's rows.
    :param key: the field holding the records.
    """

    records: list[dict]
    rows: int
    pool_rows: int
    key: str = RESAMPLE_PROVENANCE

    def described(self) -> str:
        """``48 of 96 rows carry 'trajval_resample_provenance'`` and, for a part of the pool, why."""
        part = "" if self.rows == self.pool_rows else " (a drawn pool concatenated with another, or a folder holding both)"
        return f"{self.rows} of {self.pool_rows} rows carry '{self.key}'{part}"


def weight_draws(dataset: Any, key: str = RESAMPLE_PROVENANCE) -> WeightDraws:
    """The draws by weight recorded in the resampler's field ``key`` of any row of ``dataset`` (a
    map-style dataset, a dict of columns or a pyarrow.Table), read over the whole column in Arrow:
    a pool concatenated from a scored and a drawn one is drawn from its first undrawn row on. A
    JSON-lines pool read by a plain JSON reader (``json.loads``, ``datasets``' ``json``) stores the
    record once per run, in ``trajval_provenance_record``, each row naming it by reference: read
    there too, so such a pool is known as drawn as this package's reader knows it."""
    import pyarrow.compute as pc

    column = _arrow_column(dataset, key)
    drawn, records = _draw_mask(column)
    references, stored = _arrow_column(dataset, PROVENANCE_REF), _arrow_column(dataset, PROVENANCE_RECORD)
    if references is not None and stored is not None and _text(references) is not None:
        on_record_rows, more = _draw_mask(stored, within=key)
        if more:  # every row that references a drawn record was drawn
            references = _text(references)
            named = pc.is_in(references, value_set=pc.unique(pc.filter(references, on_record_rows)))
            drawn = named if drawn is None else pc.or_(drawn, named)
            records += [record for record in more if record not in records]
        column = references
    if column is None:
        return WeightDraws([], 0, 0, key)
    return WeightDraws(records, int(pc.sum(drawn).as_py() or 0) if records else 0, len(column), key)


def _arrow_column(dataset: Any, key: str):
    """A dataset's column as Arrow (for a ``datasets.Dataset``, the rows it serves: its indices
    applied), None where it has no such column."""
    import pyarrow as pa

    if isinstance(dataset, (pa.Table, pa.RecordBatch)):
        return dataset.column(key) if key in dataset.column_names else None
    if hasattr(dataset, "with_format") and getattr(dataset, "column_names", None) is not None:
        return dataset.with_format("arrow")[key] if key in dataset.column_names else None
    try:
        values = dataset[key]
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    try:
        return pa.array(values, from_pandas=True)  # a list, a pandas Series
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # values of mixed kinds: each as its JSON text
        from trajval_ops.pools.io import json_array

        return json_array(values)


def _text(column):
    """A column of JSON text (``arrow.json`` or plain strings) as strings, else None."""
    import pyarrow as pa

    from trajval_ops.pools.io import is_json_type

    if is_json_type(column.type):
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        return pa.chunked_array([chunk.storage for chunk in chunks], type=column.type.storage_type)
    return column if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) else None


def _draw_mask(column, within: str | None = None) -> tuple[Any, list[dict]]:
    """Which rows of a column of resampler records (of records holding one under ``within``)
    record a draw by weight, and the distinct draws, ``{"mode", "weight_key"}``; ``(None, [])``
    where the column holds no record. Native structs are read in Arrow; JSON text is decoded once
    per distinct text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column is None:
        return None, []
    if within is not None and pa.types.is_struct(column.type):
        if column.type.get_field_index(within) < 0:
            return None, []
        column, within = pc.struct_field(column, within), None
    if pa.types.is_struct(column.type):
        if column.type.get_field_index("mode") < 0:
            return None, []
        modes = pc.struct_field(column, "mode")
        drawn = pc.is_in(modes, value_set=pa.array(DRAWING_MODES, type=modes.type))
        if not pc.any(drawn).as_py():
            return drawn, []
        keys = (pc.struct_field(column, "weight_key") if column.type.get_field_index("weight_key") >= 0 else
                pa.nulls(len(column), pa.string()))
        pairs = pa.table({"mode": pc.filter(modes, drawn), "weight_key": pc.filter(keys, drawn)})
        return drawn, pairs.group_by(["mode", "weight_key"]).aggregate([]).to_pylist()
    text = _text(column)
    if text is None:
        return None, []
    records = {}
    for value in pc.unique(text).drop_null().to_pylist():
        record = _decoded(value)
        if within is not None:
            record = _decoded(record.get(within)) if isinstance(record, Mapping) else None
        if isinstance(record, Mapping) and record.get("mode") in DRAWING_MODES:
            records[value] = {"mode": record["mode"], "weight_key": record.get("weight_key")}
    drawn = pc.is_in(text, value_set=pa.array(list(records), type=text.type))
    return drawn, [dict(pair) for pair in dict.fromkeys(tuple(r.items()) for r in records.values())]


def _decoded(value: Any) -> Any:
    """A stored value as Python: an Arrow scalar's value, a JSON string's object."""
    import json

    value = value.as_py() if hasattr(value, "as_py") else value
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _fingerprint(prob: np.ndarray) -> str:
    return hashlib.blake2b(prob.tobytes(), digest_size=16).hexdigest()


def _guide_table(cumulative: np.ndarray) -> np.ndarray:
    """``guide[b]``: a row at or before the answer for every uniform in ``[b/n, (b+1)/n)``.

    Row ``i`` is counted before bucket ``b`` only if ``floor(c_i n) + 1 <= b``, which implies
    ``c_i n < b <= u n`` for every ``u`` of the bucket, hence ``c_i < u``: the guide never
    overshoots, whatever the rounding.
    """
    n = cumulative.size
    keys = np.minimum(np.floor(cumulative * n).astype(np.int64) + 1, n)
    counts = np.bincount(keys, minlength=n + 1)[:n]
    return np.cumsum(counts, dtype=np.int32 if n < 2**31 else np.int64)


def _guided_search(cumulative: np.ndarray, guide: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """``cumulative.searchsorted(uniforms, side="right")`` via the guide table."""
    n = cumulative.size
    indices = guide[np.minimum((uniforms * n).astype(np.intp), n - 1)].astype(np.intp)
    for _ in range(_GUIDE_STEPS):
        behind = cumulative[indices] <= uniforms
        if not behind.any():
            return indices
        indices += behind
    behind = cumulative[indices] <= uniforms
    indices[behind] = cumulative.searchsorted(uniforms[behind], side="right")
    return indices


class WeightedIndexSampler:
    """Seeded weighted sampling of row indices, identical on every rank.

    :param weights: one non-negative weight per task (unnormalised ``trajval_weight`` or
        ``trajval_prob``; only ratios matter).
    :param seed: base seed; the stream of epoch ``e`` is seeded by ``(seed, e)``.
    :param epoch: epoch to start in.
    """

    def __init__(self, weights, seed: int = 0, epoch: int = 0):
        self.seed = whole_number(seed, "seed")
        self.set_weights(weights)
        self.set_epoch(epoch)

    # -- weights ---------------------------------------------------------------------------
    def set_weights(self, weights) -> None:
        """Replace the weights, keeping the random stream; rebuilds the cumulative table (the
        only O(n) step)."""
        prob = normalize(weights)
        cumulative = np.cumsum(prob)
        cumulative[-1] = 1.0  # remove float drift so every uniform in [0, 1) lands in a row
        self._prob = prob
        self._cumulative = cumulative
        self._guide = _guide_table(cumulative) if prob.size >= GUIDE_MIN_ROWS else None
        self._fingerprint: str | None = None

    @property
    def num_rows(self) -> int:
        return int(self._prob.size)

    @property
    def prob(self) -> np.ndarray:
        """The normalised sampling probabilities (read-only view)."""
        view = self._prob.view()
        view.flags.writeable = False
        return view

    @property
    def fingerprint(self) -> str:
        """Digest of the probabilities, checked on resume (computed on first use)."""
        if self._fingerprint is None:
            self._fingerprint = _fingerprint(self._prob)
        return self._fingerprint

    # -- stream ----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Restart the stream of ``epoch``: same seed and epoch give the same draws everywhere."""
        self._epoch = whole_number(epoch, "epoch")
        self._rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence((self.seed, self._epoch))))
        self._drawn = 0

    @property
    def rng(self) -> np.random.Generator:
        """The epoch's generator (online schedulers draw their Thompson samples from it)."""
        return self._rng

    def draw(self, k: int) -> np.ndarray:
        """``k`` row indices (int64) drawn with replacement in proportion to the weights."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        uniforms = self._rng.random(k)
        if self._guide is None:
            indices = self._cumulative.searchsorted(uniforms, side="right")
        else:
            indices = _guided_search(self._cumulative, self._guide, uniforms)
        self._drawn += k
        return indices

    # -- checkpointing ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue the same stream (plain Python types only)."""
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self._epoch,
            "drawn": self._drawn,
            "num_rows": self.num_rows,
            "fingerprint": self.fingerprint,
            "bit_generator": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any], check_weights: bool = True) -> None:
        """Continue the stream saved by :meth:`state_dict`.

        :param check_weights: refuse a state saved with other weights (resuming with other
            weights would silently change the stream); owners that rebuild changing weights
            themselves (online composition) check their own prior instead.
        :raises ValueError: when the saved state belongs to a different pool or weights.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown sampler state version {state.get('version')!r}")
        if state["num_rows"] != self.num_rows or (check_weights and state["fingerprint"] != self.fingerprint):
            raise ValueError(
                f"sampler state was saved for {state['num_rows']} rows with weights "
                f"{state['fingerprint']}, but this sampler has {self.num_rows} rows with weights "
                f"{self.fingerprint}: resume with the same weights"
            )
        self.seed = int(state["seed"])
        self.set_epoch(state["epoch"])
        self._rng.bit_generator.state = state["bit_generator"]
        self._drawn = int(state["drawn"])
