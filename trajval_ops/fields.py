"""Names of every field trajval_ops writes (the field contract; the README has the table).

Operators take these as defaults and let recipes rename them; tools and samplers import them
instead of spelling the strings again.
"""

R_EARLY = "trajval_r_early"
R_LATE = "trajval_r_late"
DELTA = "trajval_delta"
SCORE = "trajval_score"
WEIGHT = "trajval_weight"
PROFILE = "trajval_profile"
#: True where the learnability mapper predicted the score (a sampled pass left the row out).
PREDICTED = "trajval_predicted"
PROB = "trajval_prob"
SOURCE_ROW = "trajval_source_row"

#: Provenance written with the learnability score (alpha, eps, source fields, rule, version).
SCORE_PROVENANCE = "trajval_score_provenance"
#: Provenance written by the weighted resampler (mode, seed, keys, sizes, version).
RESAMPLE_PROVENANCE = "trajval_resample_provenance"
#: Provenance that is one value for a whole run: a JSON-lines pool stores it once per file
#: (:mod:`trajval_ops.provenance_records`), every row keeping a short reference to it.
RUN_PROVENANCE = (SCORE_PROVENANCE, RESAMPLE_PROVENANCE)
#: In a JSON-lines pool: the row's reference to its run provenance record (6 characters).
PROVENANCE_REF = "trajval_provenance"
#: In a JSON-lines pool: the record itself, on the first row that references it.
PROVENANCE_RECORD = "trajval_provenance_record"

#: Names the id of a row may have in the pool formats we read, tried in this order when an
#: error message must name the row; the position is used when none is present.
ID_CANDIDATES = ("id", "task_id", "extra_info.index", "extra_info.id", "index", "uid")

#: Written by the probe trainer: the row is in the probe set P.
IN_PROBE = "trajval_in_probe"

# Columns of the GRPO training sets we build (never written to a pool).
#: The training row's ground truth as JSON text (any type survives Arrow storage).
TRAIN_GROUND_TRUTH = "trajval_ground_truth"
#: The whole pool row as JSON text, for verifiers that read other fields.
TRAIN_ROW_JSON = "trajval_row_json"
#: The training row's position, which online schedulers' feedback is keyed by.
TRAIN_POSITION = "trajval_position"

#: Windows of endpoint passes (the endpoint mapper's ``window``).
WINDOWS = ("early", "late")
#: Where the endpoint mapper writes when neither ``window`` nor ``output_key`` is given.
DEFAULT_ACC = "trajval_acc"


def window_mean_key(window: str) -> str:
    """The window's mean pass rate: ``trajval_r_early`` / ``trajval_r_late``."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {WINDOWS}, got {window!r}")
    return R_EARLY if window == "early" else R_LATE


def window_checkpoint_key(window: str, index: int) -> str:
    """One checkpoint's pass rate inside a K-checkpoint window: ``trajval_r_early_0``, ..."""
    return f"{window_mean_key(window)}_{int(index)}"


def window_keys(window: str, k: int) -> list[str]:
    """The K per-checkpoint fields the learnability mapper averages for a window."""
    return [window_checkpoint_key(window, i) for i in range(int(k))]


def learnability_windows(early_window_keys: list[str] | None, late_window_keys: list[str] | None,
                         window_k: int | None) -> tuple[list[str] | None, list[str] | None]:
    """The per-checkpoint fields the learnability mapper averages for each window: the lists it
    is given, else ``window_k``'s derived fields (K > 1), else None (one field per window)."""
    if window_k and window_k > 1:
        early_window_keys = early_window_keys or window_keys("early", window_k)
        late_window_keys = late_window_keys or window_keys("late", window_k)
    return (list(early_window_keys) if early_window_keys else None,
            list(late_window_keys) if late_window_keys else None)


def compared_passes(early_window_keys: list[str] | None, late_window_keys: list[str] | None, r_early_key: str,
                    r_late_key: str, one_pass: bool) -> list[str]:
    """The pass-rate fields a prior reads: the early window's, and the late one's unless it is a
    one-pass prior."""
    early = early_window_keys or [r_early_key]
    return early if one_pass else early + (late_window_keys or [r_late_key])


def endpoint_output_key(window: str | None, window_index: int | None, output_key: str | None) -> str:
    """The endpoint mapper's output field: ``output_key`` when given (an override); else derived
    from the window (``window_index`` None: K = 1, the window mean itself); else ``trajval_acc``."""
    if output_key:
        return output_key
    if window is None:
        if window_index is not None:
            raise ValueError("window_index needs a window (early or late)")
        return DEFAULT_ACC
    return window_mean_key(window) if window_index is None else window_checkpoint_key(window, window_index)
