"""Core weighted sampler: proportions, determinism across ranks, resume, bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest

from trajval_ops.samplers import WeightedIndexSampler, weighted, weights_from_column, weights_from_dataset
from trajval_ops.errors import TrajvalInputError


def test_frequencies_match_the_weights():
    weights = np.array([1.0, 0.05, 0.5, 0.05, 2.0])
    p = weights / weights.sum()
    n = 200_000
    counts = np.bincount(WeightedIndexSampler(weights, seed=1).draw(n), minlength=5)
    # 5 standard deviations of a binomial count
    assert np.all(np.abs(counts - n * p) <= 5 * np.sqrt(n * p * (1 - p)))


@pytest.mark.parametrize("zero_share", [0.0, 0.9])
def test_guide_table_draws_exactly_what_binary_search_draws(monkeypatch, zero_share):
    rng = np.random.default_rng(4)
    weights = np.where(rng.random(5000) < zero_share, 0.0, rng.random(5000) + 0.01)
    plain = WeightedIndexSampler(weights, seed=6)
    monkeypatch.setattr(weighted, "GUIDE_MIN_ROWS", 1)
    guided = WeightedIndexSampler(weights, seed=6)
    assert guided._guide is not None and plain._guide is None
    assert np.array_equal(plain.draw(100_000), guided.draw(100_000))


def test_zero_weight_rows_never_drawn_and_indices_in_range():
    weights = np.array([0.0, 3.0, 0.0, 1.0, 0.0])
    out = WeightedIndexSampler(weights, seed=0).draw(10_000)
    assert set(np.unique(out)) == {1, 3}


def test_same_seed_and_epoch_same_stream_on_every_rank():
    w = np.random.default_rng(0).random(1000) + 0.05
    ranks = [WeightedIndexSampler(w, seed=7, epoch=3) for _ in range(4)]
    draws = [np.concatenate([s.draw(64) for _ in range(5)]) for s in ranks]
    assert all(np.array_equal(draws[0], d) for d in draws[1:])
    other_epoch = WeightedIndexSampler(w, seed=7, epoch=4).draw(320)
    other_seed = WeightedIndexSampler(w, seed=8, epoch=3).draw(320)
    assert not np.array_equal(draws[0], other_epoch)
    assert not np.array_equal(draws[0], other_seed)


def test_set_epoch_replays_the_epoch():
    s = WeightedIndexSampler(np.arange(1, 50, dtype=float), seed=2)
    first = s.draw(100)
    s.set_epoch(0)
    assert np.array_equal(s.draw(100), first)


def test_state_dict_resumes_the_same_stream_even_through_json():
    w = np.random.default_rng(1).random(500)
    s = WeightedIndexSampler(w, seed=5)
    s.draw(37)
    state = json.loads(json.dumps(s.state_dict()))
    expected = np.concatenate([s.draw(64) for _ in range(3)])
    resumed = WeightedIndexSampler(w, seed=0)  # seed comes from the state
    resumed.load_state_dict(state)
    assert np.array_equal(np.concatenate([resumed.draw(64) for _ in range(3)]), expected)


def test_resume_with_other_weights_is_refused():
    s = WeightedIndexSampler(np.ones(10), seed=5)
    with pytest.raises(ValueError, match="same weights"):
        WeightedIndexSampler(np.arange(1, 11, dtype=float)).load_state_dict(s.state_dict())


def test_trajval_prob_and_weight_give_the_same_stream():
    w = np.array([0.2, 0.05, 1.0, 0.7])
    a = WeightedIndexSampler(w, seed=3).draw(50)
    b = WeightedIndexSampler(w / w.sum(), seed=3).draw(50)
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "column, message",
    [
        ([1.0, None, 0.5], "row 1: field 'trajval_weight'"),
        ([1.0, "0.3"], "row 1: field 'trajval_weight' must be a number"),
        ([0.1, float("nan")], "row 1: field 'trajval_weight' is nan"),
        ([0.1, -1.0], "row 1: field 'trajval_weight' = -1.0"),
        ([], "pool is empty"),
        ([0.0, 0.0], "every weight is zero"),
    ],
)
def test_bad_weight_columns_name_row_and_field(column, message):
    with pytest.raises(TrajvalInputError, match=message.replace("(", r"\(")):
        weights_from_column(column)


def test_missing_column_names_the_field():
    with pytest.raises(TrajvalInputError, match="field 'trajval_weight' is missing"):
        weights_from_dataset({"prompt": ["a"]})


def test_package_does_not_import_heavy_libraries():
    heavy = ("data_juicer", "torch", "trl", "verl", "trinity", "openrlhf", "transformers")
    code = f"import sys, trajval_ops.samplers; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_weights_whose_sum_overflows_draw_by_their_ratios():
    """[1e308, 1e308, 1] are finite weights, but their sum overflowed to inf: every probability
    became 0 and every draw went to the last row. They are scaled by the largest first; any other
    weights are divided by their sum as before (pinned against the earlier code)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        sampler = WeightedIndexSampler([1e308, 1e308, 1.0], seed=0)
        assert sampler.prob.tolist() == [0.5, 0.5, 5e-309]
        counts = np.bincount(sampler.draw(1000), minlength=3)
    assert counts[2] == 0 and 400 < counts[0] < 600
    w = np.random.default_rng(11).random(1000) * 3
    ordinary = WeightedIndexSampler(w, seed=2)
    assert ordinary.prob.tolist() == (w / w.sum()).tolist()
    assert ordinary.fingerprint == "67c0e84b3e7da663563a2487ddb3d979"
    assert ordinary.draw(8).tolist() == [266, 304, 823, 98, 593, 726, 194, 61]
    tiny = WeightedIndexSampler([1e-300, 2e-300, 5e-301], seed=2)
    assert tiny.fingerprint == "2c14f61b563a34815e83635f5e7ad763"


def test_pass_rates_from_dataset_names_the_row_and_the_field():
    from datasets import Dataset

    from trajval_ops.samplers.weighted import pass_rates_from_dataset

    data = Dataset.from_dict({"id": ["a", "b", "c"], "ok": [0.0, 0.5, 1.0], "null": [0.1, None, 0.2],
                              "high": [0.1, 0.2, 1.5], "nan": [float("nan"), 0.1, 0.2]})
    assert pass_rates_from_dataset(data, "ok").tolist() == [0.0, 0.5, 1.0]
    for field, says in (("null", r"row 1 \(id='b'\): field 'null' is missing \(null\)"),
                        ("high", r"row 2 \(id='c'\): field 'high' = 1.5 is outside \[0, 1\]"),
                        ("nan", r"row 0 \(id='a'\): field 'nan' is nan"),
                        ("absent", r"row 0: field 'absent' is missing from the dataset")):
        with pytest.raises(TrajvalInputError, match=says):
            pass_rates_from_dataset(data, field)
    with pytest.raises(TrajvalInputError, match=r"row 1 \(task_id='y'\): field 'f' is missing"):
        pass_rates_from_dataset({"f": [0.5, None], "task_id": ["x", "y"]}, "f")


def test_an_epoch_or_count_that_is_not_a_whole_number_is_refused_not_truncated():
    """int() read an epoch of 2.7 as 2 (and a count of 2.5 rollouts as 2): every sampler's epoch,
    count and seed is checked as a count setting is, the value and its name in the error."""
    from trajval_ops.samplers.online import ComposedSampler, GresoScheduler
    from trajval_ops.samplers.torch_sampler import TrajvalSampler

    weights = [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="epoch must be an integer, got float 2.7"):
        WeightedIndexSampler(weights, epoch=2.7)
    with pytest.raises(ValueError, match="epoch must be an integer, got float nan"):
        WeightedIndexSampler(weights).set_epoch(float("nan"))
    with pytest.raises(ValueError, match=r"epoch must be .*, got -1"):
        WeightedIndexSampler(weights).set_epoch(-1)
    with pytest.raises(ValueError, match="epoch must be an integer, got float 1.5"):
        TrajvalSampler(weights).set_epoch(1.5)
    with pytest.raises(ValueError, match="epoch must be an integer, got float 1.5"):
        GresoScheduler(3).set_epoch(1.5)
    with pytest.raises(ValueError, match="num_tasks must be an integer, got float 3.5"):
        GresoScheduler(3.5)
    composed = ComposedSampler(weights, online=GresoScheduler(3))
    with pytest.raises(ValueError, match="num_rollouts must be an integer, got float 2.7"):
        composed.feedback_pass_rates([0, 1], [0.5, 1.0], num_rollouts=2.7)
    sampler = WeightedIndexSampler(weights, epoch=np.int64(2))  # numpy's integers are whole numbers
    assert sampler.epoch == 2 and type(sampler.epoch) is int
