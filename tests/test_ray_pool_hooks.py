"""Which whole-pool hooks the Ray dataset calls on the pool at a mapper (no Ray needed)."""

import pytest

pytest.importorskip("data_juicer")

from trajval_ops.ops.dj.ray_dataset import _defines, pool_sides  # noqa: E402
from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper  # noqa: E402
from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper  # noqa: E402
from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer  # noqa: E402
from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler  # noqa: E402


def _bare(cls):
    return cls.__new__(cls)  # the hooks and sides are read from the class alone


def test_a_mapper_without_its_own_hook_is_not_gathered_for_it():
    # the learnability mapper has neither hook: gathering the pool for the no-op default would
    # cost a pass over the data (it gathers the pool once, to score it)
    assert not _defines(_bare(TrajvalLearnabilityMapper), "check_pool")
    assert not _defines(_bare(TrajvalLearnabilityMapper), "finish_pool")
    assert _defines(_bare(TrajvalEndpointRewardMapper), "check_pool")
    assert _defines(_bare(TrajvalEndpointRewardMapper), "finish_pool")


def test_pool_sides_names_the_operators_that_can_change_rows():
    class Filter:
        pass

    probe, early, score = (_bare(TrajvalProbeTrainer), _bare(TrajvalEndpointRewardMapper),
                           _bare(TrajvalLearnabilityMapper))
    resample = _bare(TrajvalWeightedResampler)
    sides = pool_sides([probe, early, score, resample])
    assert sides == {id(early): (False, True), id(score): (False, True)}
    sides = pool_sides([Filter(), early, score])
    assert sides == {id(early): (True, False), id(score): (True, False)}
