"""Data-Juicer operators of trajval_ops.

Data-Juicer imports this module through the ``data_juicer.ops`` entry point; importing an
operator module registers it. Keep module-level imports light: heavy libraries load lazily.
An unsupported Data-Juicer release stops the plugin here with a message saying which releases
are supported (Data-Juicer logs it and skips the plugin).
"""

from trajval_ops.ops.dj.plugin import install
from trajval_ops.ops.dj.version import check_data_juicer

check_data_juicer()

from trajval_ops.ops import (  # noqa: E402
    endpoint_reward_mapper,
    learnability_mapper,
    probe_trainer,
    weighted_resampler,
)

#: the operators' modules in a recipe's order (each registers one operator, named by its OP_NAME)
OPERATOR_MODULES = (probe_trainer, endpoint_reward_mapper, learnability_mapper, weighted_resampler)

install(module.OP_NAME for module in OPERATOR_MODULES)
