"""Trinity-RFT adapter against trinity-rft 0.6.0's real SELECTORS, BaseSelector, _HFBatchReader."""

import json

import numpy as np
import pytest

pytest.importorskip("trinity.buffer.selector", reason="needs trinity-rft==0.6.0 (see docs/downstream.md)")

from datasets import Dataset  # noqa: E402
from trinity.buffer.reader.file_reader import _HFBatchReader  # noqa: E402
from trinity.buffer.selector import SELECTORS  # noqa: E402
from trinity.buffer.selector.selector import BaseSelector  # noqa: E402
from trinity.common.config import DataSelectorConfig  # noqa: E402

from trajval_ops.samplers.trinity import REGISTRY_NAME, TrajvalSelector  # noqa: E402

N = 20
HEAVY = [0, 1, 2]


def _reader():
    weights = [1.0 if i in HEAVY else 0.05 for i in range(N)]
    data = Dataset.from_dict({"question": [f"q{i}" for i in range(N)], "trajval_weight": weights,
                              "weak_pass_rate": [0.1] * N, "strong_pass_rate": [0.9] * N})
    return _HFBatchReader(data, name="pool", default_batch_size=8, total_epochs=100, enable_progress_bar=False)


def _selector(selector_type=REGISTRY_NAME, feature_keys=("trajval_weight",), **kwargs):
    config = DataSelectorConfig(selector_type=selector_type, seed=7, feature_keys=list(feature_keys), kwargs=kwargs)
    reader = _reader()
    return SELECTORS.get(selector_type)(reader, config), reader


def test_registered_under_its_name_and_by_dotted_path():
    assert SELECTORS.get(REGISTRY_NAME) is TrajvalSelector
    assert SELECTORS.get("trajval_ops.samplers.trinity.TrajvalSelector") is TrajvalSelector
    assert issubclass(TrajvalSelector, BaseSelector)


def test_get_indices_draws_by_weight_through_the_reader():
    selector, reader = _selector()
    rows = []
    for _ in range(50):
        rows += reader.select_batch(selector.get_indices(8))  # what TasksetScheduler does
    share = np.mean([int(r["question"][1:]) in HEAVY for r in rows])
    assert share == pytest.approx(3 / (3 + 17 * 0.05), abs=0.06)
    indices, extra = selector.get_indices(4, return_extra_info=True)
    assert extra["indices"] == list(indices) and len(extra["prob"]) == 4


def test_state_dict_is_json_and_resumes():
    selector, _ = _selector(online="bots")
    selector.get_indices(8)
    selector.feedback([0, 5], [1.0, 0.5])
    state = json.loads(json.dumps(selector.state_dict()))
    expected = [selector.get_indices(8).tolist() for _ in range(3)]
    resumed, _ = _selector(online="bots")
    resumed.load_state_dict(state)
    assert [resumed.get_indices(8).tolist() for _ in range(3)] == expected


def test_feedback_moves_mass_away_from_solved_tasks():
    selector, _ = _selector(online="greso")
    for _ in range(6):
        selector.feedback([0, 1], [1.0, 0.5])  # task 0 always solved
    keep = selector.source.online.online_weights()
    assert keep[0] < 0.1 and keep[1] == 1.0
    counts = np.bincount(np.concatenate([selector.get_indices(8) for _ in range(100)]), minlength=N)
    assert counts[0] < 0.25 * counts[1]


def test_unknown_online_scheduler_is_refused():
    with pytest.raises(ValueError, match="greso"):
        _selector(online="nope")


def test_bots_takes_the_weight_and_two_reference_pass_rates():
    keys = ("trajval_weight", "weak_pass_rate", "strong_pass_rate")
    selector, _ = _selector(feature_keys=keys, online="bots", lam=0.1, rho=0.1, target=0.5, tau=0.5)
    bots = selector.source.online
    assert bots.reference is not None and bots.reference[1][0] == 0.9
    selector.get_indices(8)
    selector.feedback([0, 5], [1.0, 0.5])
    assert bots.capability == pytest.approx((0.75 - 0.1) / (0.9 - 0.1 + 1e-6))
    state = json.loads(json.dumps(selector.state_dict()))  # the scheduler's state travels with a resume
    expected = [selector.get_indices(8).tolist() for _ in range(3)]
    resumed, _ = _selector(feature_keys=keys, online="bots", lam=0.1, rho=0.1, target=0.5, tau=0.5)
    resumed.load_state_dict(state)
    assert resumed.source.online.capability == bots.capability
    assert [resumed.get_indices(8).tolist() for _ in range(3)] == expected
    with pytest.raises(ValueError, match="online: bots"):
        _selector(feature_keys=keys, online="greso")
    with pytest.raises(ValueError, match="feature_keys must be"):
        _selector(feature_keys=keys[:2], online="bots")


def test_feedback_through_trinitys_own_scheduler_updates_the_composed_selector():
    """Trinity 0.6.0's TasksetScheduler.feedback, with the metric its pass_rate_calculator sends,
    reaches the selector; a DAPO-style -1/+1 mean reward maps to solved/unsolved by the threshold,
    a NaN is skipped and counted."""
    from trinity.buffer.operators.mappers.pass_rate_calculator import PassRateCalculator
    from trinity.buffer.task_scheduler import TasksetScheduler
    from trinity.common.constants import SELECTOR_METRIC

    selector, _ = _selector(online="greso")

    class Exp:  # what the explorer hands the experience pipeline
        def __init__(self, index, reward):
            self.info = {"task_index": {"taskset_id": 0, "index": index}}
            self.reward = reward

    _, metric = PassRateCalculator().process([Exp(0, 1.0), Exp(0, 1.0), Exp(5, -1.0), Exp(5, 1.0), Exp(7, float("nan"))])
    from trinity.buffer.reader.file_reader import FileReader

    taskset = FileReader.__new__(FileReader)  # Trinity's taskset reader routes feedback to its selector
    taskset.reader = type("TaskFileReader", (), {"selector": selector})()
    scheduler = TasksetScheduler.__new__(TasksetScheduler)  # its feedback routing, without a buffer
    scheduler.tasksets = [taskset]
    TasksetScheduler.feedback(scheduler, metric)
    assert SELECTOR_METRIC not in metric  # consumed by the scheduler
    greso = selector.source.online
    assert greso.easy_streak[0] == 1  # mean reward 1.0: solved by every rollout (an easy task)
    assert greso.hard_streak[5] == 1  # auto mapping: a mean of 0 reads as a pass rate of 0
    assert selector.feedback_skipped == 1  # the NaN
    signed, _ = _selector(online="greso", reward_mapping="signed")  # for DAPO's -1 / +1 reward
    signed.feedback([5], [0.0])
    assert signed.source.online.hard_streak[5] == 0  # half solved: not a zero-variance group


@pytest.mark.parametrize("mapping, values, rates", [
    ("auto", [0.25, 1.1, -0.1, -1.0], [0.25, 1.0, 0.0, 0.0]),   # in [0, 1] a pass rate; else solved if > 0
    ("threshold", [0.25, 0.0, 1.0], [1.0, 0.0, 1.0]),
    ("signed", [-1.0, 0.0, 0.5, 1.0], [0.0, 0.5, 0.75, 1.0]),
])
def test_rewards_that_are_not_pass_rates_map_by_the_stated_rule(mapping, values, rates):
    from trajval_ops.samplers.trinity import feedback_pass_rates

    mapped, usable = feedback_pass_rates(values, mapping)
    assert mapped.tolist() == rates and usable.all()


def test_trinitys_bots_names_are_accepted_and_greedy_tau_is_refused_with_the_reason():
    selector, _ = _selector(online="bots", lamb=0.2, target_reward=0.4)
    assert selector.source.online.lam == 0.2 and selector.source.online.target == 0.4
    with pytest.raises(ValueError, match="greedy top-k"):
        _selector(online="bots", tau=0)
