"""Trinity-RFT adapter against trinity-rft 0.6.0's real SELECTORS, BaseSelector, _HFBatchReader."""

import json

import numpy as np
import pytest

pytest.importorskip("trinity.buffer.selector", reason="needs trinity-rft==0.6.0 (see docs/howto/trainers.md)")

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


def test_greso_adapts_once_the_draws_pass_a_pool_size():
    selector, _ = _selector(online="greso")
    for _ in range(20):  # 160 draws: 8 passes over the pool of 20
        indices = selector.get_indices(8)
        selector.feedback(indices.tolist(), [1.0] * len(indices))  # every task always solved
    greso = selector.source.online
    assert greso.epoch == 7 and greso.p_easy < 0.5


def test_a_resumed_selector_goes_on_counting_the_epochs():
    selector, _ = _selector(online="greso")
    for _ in range(3):  # 24 draws: 4 into the second pass over the pool
        selector.get_indices(8)
    state = json.loads(json.dumps(selector.state_dict()))
    expected = [selector.get_indices(8).tolist() for _ in range(5)]
    resumed, _ = _selector(online="greso")
    resumed.load_state_dict(state)
    assert [resumed.get_indices(8).tolist() for _ in range(5)] == expected
    assert resumed.source.online.epoch == selector.source.online.epoch == 3


def test_a_state_saved_before_draws_were_counted_resumes_on_epoch_0s_stream():
    selector, _ = _selector(online="greso")
    selector.get_indices(8)
    legacy = json.loads(json.dumps(selector.state_dict()["source"]))  # what earlier releases saved
    expected = [selector.get_indices(8).tolist() for _ in range(3)]
    resumed, _ = _selector(online="greso")
    resumed.load_state_dict(legacy)
    assert resumed.draws == 8 and [resumed.get_indices(8).tolist() for _ in range(3)] == expected


def test_feedback_moves_mass_away_from_solved_tasks():
    selector, _ = _selector(online="greso")
    for _ in range(6):
        selector.feedback([0, 1], [1.0, 0.5])  # task 0 always solved
    keep = selector.source.online.online_weights()
    assert keep[0] < 0.1 and keep[1] == 1.0
    counts = np.bincount(np.concatenate([selector.get_indices(8) for _ in range(100)]), minlength=N)
    assert counts[0] < 0.25 * counts[1]


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


# The task_selector block of Trinity-RFT's own examples/bots/bots.yaml (modelscope/Trinity-RFT at
# 0381d17ae74b09a20747b6b72539dde7b69e6867), verbatim: the settings docs/howto/trainers.md says carry over.
BOTS_YAML = """
task_selector:
  selector_type: difficulty_based
  feature_keys: [ "qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate" ]
  kwargs:
    m: 16
    lamb: 0.1
    rho: 0.1
    target_reward: 0.5
    tau: 0
    do_sample: true
"""
REFERENCES = ("qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate")


def _bots_reader():
    rng = np.random.default_rng(0)
    weak = rng.uniform(0.0, 0.5, N)
    data = Dataset.from_dict({"question": [f"q{i}" for i in range(N)], "trajval_weight": [1.0] * N,
                              REFERENCES[0]: weak.tolist(), REFERENCES[1]: (weak + 0.4).tolist()})
    return _HFBatchReader(data, name="pool", default_batch_size=8, total_epochs=100, enable_progress_bar=False)


def _bots_yaml_selectors(**changes):
    """Trinity's own difficulty_based selector and ours, built from bots.yaml's kwargs (with changes)."""
    import yaml

    block = yaml.safe_load(BOTS_YAML)["task_selector"]
    assert tuple(block["feature_keys"]) == REFERENCES
    kwargs = {**block["kwargs"], **changes}
    theirs = SELECTORS.get(block["selector_type"])(
        _bots_reader(), DataSelectorConfig(selector_type=block["selector_type"], seed=7,
                                           feature_keys=list(REFERENCES), kwargs=dict(kwargs)))
    ours = TrajvalSelector(_bots_reader(), DataSelectorConfig(
        selector_type=REGISTRY_NAME, seed=7, feature_keys=["trajval_weight", *REFERENCES],
        kwargs={"online": "bots", "reward_mapping": "pass_rate", **kwargs}))
    return theirs, ours


def test_trinitys_bots_yaml_settings_carry_over_and_its_greedy_tau_is_refused():
    with pytest.raises(ValueError, match="greedy top-k"):
        _bots_yaml_selectors()  # bots.yaml as shipped: tau 0
    theirs, ours = _bots_yaml_selectors(tau=0.5)
    bots = ours.source.online
    assert (bots.m, bots.lam, bots.rho, bots.target, bots.tau) == (16, 0.1, 0.1, 0.5, 0.5)
    assert bots.thompson is True and theirs.do_sample is True  # do_sample: Thompson sampling on both sides
    estimator = theirs.diff_estimator
    assert (estimator.m, estimator.lamb, estimator.rho) == (bots.m, bots.lam, bots.rho)


def test_do_sample_draws_the_posterior_and_false_uses_its_mean():
    _, sampled = _bots_yaml_selectors(tau=0.5)
    _, mean = _bots_yaml_selectors(tau=0.5, do_sample=False)
    for selector in (sampled, mean):
        selector.feedback([0, 1, 2], [1.0, 0.5, 0.0])
    bots = mean.source.online
    assert not bots.thompson
    expected = np.exp(-np.abs(bots.posterior_mean() - 0.5) / 0.5)
    assert np.array_equal(bots.online_weights(np.random.default_rng(1)), expected)
    thompson = sampled.source.online
    for seed in (1, 2):  # a pass rate drawn from each task's Beta posterior, not its mean
        rate = np.random.default_rng(seed).beta(thompson.pseudo_successes, thompson.pseudo_failures)
        assert np.array_equal(thompson.online_weights(np.random.default_rng(seed)), np.exp(-np.abs(rate - 0.5) / 0.5))
    assert not np.array_equal(thompson.online_weights(np.random.default_rng(1)),
                              thompson.online_weights(np.random.default_rng(2)))


def test_adaptive_rho_updates_exactly_as_trinitys_estimator():
    """Trinity 0.6.0's InterpolationBetaPREstimator with adaptive_rho halves rho when the
    interpolated pass rates miss the observed ones by a mean absolute error >= 0.25: the same
    feedback through its selector and ours gives the same posterior and rho at every step."""
    theirs, ours = _bots_yaml_selectors(tau=0.5, adaptive_rho=True)
    bots, estimator = ours.source.online, theirs.diff_estimator
    assert bots.adaptive_rho and estimator.adaptive_rho
    steps = [([2, 3, 5, 9], [1.0, 1.0, 0.0, 0.0]),  # the references' easiest failed, hardest solved: rho halves
             ([0, 6, 7, 8], [0.5, 0.5, 0.5, 0.5]),  # close to their prediction: rho kept
             ([4, 10, 12], [0.0, 0.0, 0.0]),
             ([11, 13, 15], [1.0, 1.0, 1.0])]
    rhos = []
    for indices, rates in steps:
        theirs.feedback(indices, rates)
        ours.feedback(indices, rates)
        rhos.append(bots.rho)
        assert bots.rho == pytest.approx(estimator.rho)
        assert np.allclose(bots.pseudo_successes, estimator.alphas) and np.allclose(bots.pseudo_failures, estimator.betas)
    assert rhos == pytest.approx([0.05, 0.05, 0.025, 0.0125])  # halved, not on every step
    _, resumed = _bots_yaml_selectors(tau=0.5, adaptive_rho=True)
    resumed.load_state_dict(json.loads(json.dumps(ours.state_dict())))
    assert resumed.source.online.rho == bots.rho  # the halved rho travels with a resume
    theirs, ours = _bots_yaml_selectors(tau=0.5)  # without the key: rho stays, on both sides
    theirs.feedback(*steps[0])
    ours.feedback(*steps[0])
    assert ours.source.online.rho == theirs.diff_estimator.rho == 0.1


@pytest.mark.parametrize("kwargs, message", [
    ({"online": "bots", "lamda": 0.1}, r"unknown kwargs\.lamda with kwargs\.online: bots; known: \[.*'lamb'"),
    ({"online": "greso", "do_sample": True}, (r"unknown kwargs\.do_sample with kwargs\.online: greso \(do_sample is "
                                              r"a setting of kwargs\.online: bots\)")),
    ({"adaptive_rho": True}, (r"unknown kwargs\.adaptive_rho without kwargs\.online \(adaptive_rho is a setting of "
                              r"kwargs\.online: bots\); known: \['m', 'online', 'reward_mapping', 'reward_threshold'\]")),
    ({"online": "bots", "lamb": 0.1, "lam": 0.2}, r"kwargs\.lamb \(Trinity's name\) and kwargs\.lam"),
    ({"online": "bots", "do_sample": "yes"}, r"kwargs\.do_sample must be true or false"),
    ({"online": "nope"}, r"kwargs\.online must be one of \['bots', 'greso'\], got 'nope'"),
])
def test_a_key_no_scheduler_takes_is_refused_naming_it_and_the_known_ones(kwargs, message):
    from trajval_ops.errors import TrajvalInputError

    with pytest.raises(TrajvalInputError, match=message):
        _selector(**kwargs)


def test_a_null_reference_pass_rate_is_named_by_its_row_and_feature_key():
    """BOTS's reference columns were read with np.asarray: a null became NaN and the error said
    "f1 must be pass rates in [0, 1]; position 19 is not", naming neither the key nor a row."""
    from trajval_ops.errors import TrajvalInputError

    data = Dataset.from_dict({"id": [f"t{i}" for i in range(N)], "trajval_weight": [1.0] * N,
                              "weak_pass_rate": [0.1] * N, "strong_pass_rate": [0.9] * (N - 1) + [None]})
    reader = _HFBatchReader(data, name="pool", default_batch_size=8, total_epochs=1, enable_progress_bar=False)
    config = DataSelectorConfig(selector_type=REGISTRY_NAME, seed=7, kwargs={"online": "bots"},
                                feature_keys=["trajval_weight", "weak_pass_rate", "strong_pass_rate"])
    with pytest.raises(TrajvalInputError, match=r"row 19 \(id='t19'\): field 'strong_pass_rate' is missing \(null\) "
                                                r"\(feature_keys: 'strong_pass_rate' is the stronger reference"):
        TrajvalSelector(reader, config)


@pytest.mark.parametrize("kwargs, message", [
    ({"online": "bots", "m": 2.7}, r"kwargs\.m must be an integer, got float 2\.7"),  # was read as 2
    ({"online": "greso", "m": 2.7}, r"kwargs\.m must be an integer"),  # the feedback's rollouts per task
    ({"online": "bots", "rho": 1.5}, r"kwargs\.rho must be in \[0, 1\] \(the evidence is"),  # ran on
    ({"online": "bots", "lamb": 1.5}, r"kwargs\.lamb must be in \[0, 1\], got 1\.5"),  # Trinity's name named
    ({"online": "bots", "target_reward": 2}, r"kwargs\.target_reward must be in \[0, 1\]"),
    ({"online": "bots", "tau": -1}, r"kwargs\.tau must be in \(0, inf\)"),
    ({"online": "bots", "tau": "0.5"}, r"kwargs\.tau must be a number, got str '0\.5'"),  # was a raw TypeError
    ({"online": "bots", "tau": float("nan")}, r"kwargs\.tau must be a finite number, got nan"),
    ({"online": "greso", "p_step": float("inf")}, r"kwargs\.p_step must be a finite number, got inf"),
    ({"reward_threshold": float("nan")}, r"kwargs\.reward_threshold must be a finite number, got nan"),
    ({"reward_threshold": "0.5"}, r"kwargs\.reward_threshold must be a number"),
    ({"reward_mapping": "sign"}, r"kwargs\.reward_mapping must be one of 'auto', 'pass_rate'"),
])
def test_a_setting_outside_its_declaration_is_refused_when_the_selector_is_built(kwargs, message):
    """BOTS's settings failed only at the first feedback, naming no setting (or never: m 2.7 was
    read as 2, rho 1.5 ran on with negative pseudo-counts); each is checked against its declaration
    (samplers.online.BotsSettings, GresoSettings, trinity.SelectorSettings) under the name the
    config gives it."""
    from trajval_ops.errors import TrajvalInputError

    with pytest.raises(TrajvalInputError, match=r"^trajval selector: " + message):
        _selector(**kwargs)
