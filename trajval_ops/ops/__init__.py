"""Data-Juicer operators of trajval_ops.

Data-Juicer imports this module through the ``data_juicer.ops`` entry point; importing an
operator module registers it. Keep module-level imports light: heavy libraries load lazily.
"""

from trajval_ops.ops import learnability_mapper, weighted_resampler  # noqa: F401
from trajval_ops.ops import probe_trainer  # noqa: F401
from trajval_ops.ops import endpoint_reward_mapper  # noqa: F401
from trajval_ops.ops.load_guard import guard_json_loading

# Loading happens before any operator exists, so the loader guard goes in at import time. (The
# atomic JSONL export is installed when a trajval operator is built: importing Data-Juicer's
# exporter here would be a circular import while Data-Juicer loads its plugins.)
guard_json_loading()
