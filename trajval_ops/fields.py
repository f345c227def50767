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
PROB = "trajval_prob"
SOURCE_ROW = "trajval_source_row"

#: Provenance written with the learnability score (alpha, eps, source fields, rule, version).
SCORE_PROVENANCE = "trajval_score_provenance"
#: Provenance written by the weighted resampler (mode, seed, keys, sizes, version).
RESAMPLE_PROVENANCE = "trajval_resample_provenance"

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
