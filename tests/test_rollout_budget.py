"""The adaptive rollout budget: its stopping rule by hand, and an adaptive pass of the endpoint
mapper (late rows skipped exactly where the rule says, deterministic, resumable)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_rollout_mapper import _batch, _op
from trajval_ops import core
from trajval_ops.rollout.budget import AdaptiveBudget

LATE = AdaptiveBudget("late", cap=16, round_size=4, tolerance=0.05)


@pytest.mark.parametrize("r_early, successes, rollouts, decided", [
    (1.0, 0, 0, True),      # s = 0 whatever the late pass gives: not sampled at all
    (0.75, 0, 4, True),     # decided after one round: 4 more of 12 can reach at most 12/16 = r_early
    (0.5, 0, 8, True),      # at most 8/16 = r_early: s = 0
    (0.5, 0, 4, False),     # up to 12/16: s up to 0.125, w up to 0.54
    (0.0, 12, 12, False),   # all correct so far: w in [0.75 ** 0.3, 1], wider than 0.05
    (0.0, 2, 12, False),    # never decided before the cap
    (0.0, 2, 16, True),     # the cap
])
def test_late_rule_by_hand(r_early, successes, rollouts, decided):
    assert LATE.decided([successes], rollouts, np.array([r_early]))[0] == decided


def test_the_weight_range_is_the_weights_at_the_two_ends_of_the_pass_rate():
    low, high = LATE.weight_range([12], 12, np.array([0.0]))
    assert low[0] == pytest.approx(core.sampling_weight([0.75])[0]) and high[0] == pytest.approx(1.0)
    early = AdaptiveBudget("early", cap=16, round_size=4)
    low, high = early.weight_range([4], 4)  # 4 of 4 correct: r_early at least 4/16
    assert low[0] == 0.05 and high[0] == pytest.approx(core.sampling_weight([(1 - 4 / 16) ** 2])[0])
    assert early.decided([16], 16)[0] and not early.decided([4], 4)[0]
    assert AdaptiveBudget("late", 16, 4, tolerance=0.1).decided([12], 12, np.array([0.0]))[0]  # a looser tolerance


def test_a_bad_budget_is_refused():
    with pytest.raises(ValueError, match="round_size"):
        AdaptiveBudget("late", cap=16, round_size=32)
    with pytest.raises(ValueError, match="early or the late"):
        AdaptiveBudget("middle", cap=16, round_size=4)


def _late_rows():
    from tests.conftest import arithmetic_rows

    rows = arithmetic_rows()[:6]
    for row, rate in zip(rows, (1.0, 1.0, 0.9375, 0.5, 0.0, 0.0)):
        row["trajval_r_early"] = rate
    return rows


def test_an_adaptive_late_pass_skips_exactly_the_rows_the_rule_names_and_reproduces(tmp_path):
    options = dict(window="late", output_key=None, n=8, budget="adaptive", round_size=2, max_new_tokens=6,
                   verifier="custom", verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    op = _op(tmp_path, **options)
    out = op.process_batched(_batch(_late_rows()))
    op.release()
    statuses, counts = out["trajval_r_late_status"], out["trajval_r_late_n"]
    assert statuses[:2] == ["skipped_early_saturated"] * 2 and counts[:2] == [0, 0]
    assert out["trajval_r_late"][:2] == [1.0, 1.0]  # no change assumed: s = 0 either way
    assert all(status != "skipped_early_saturated" for status in statuses[2:])
    assert all(c % 2 == 0 and 0 < c <= 8 for c in counts[2:])  # whole rounds, the cap at most
    for rate, status, count in zip(out["trajval_r_late"], statuses, counts):
        if status == "stopped_weight_bounded":
            assert count < 8
    costs = [p["cost"]["completions"] for p in out["trajval_r_late_provenance"]]
    assert costs == counts and out["trajval_r_late_provenance"][0]["budget"]["rule"] == "weight_bounded"
    again = _op(tmp_path / "other", **options).process_batched(_batch(_late_rows()))  # no cache shared
    assert json.dumps(again, sort_keys=True, default=str) == json.dumps(out, sort_keys=True, default=str)


def odd_length(completion, ground_truth, row):
    return float(len(completion) % 2)


def test_a_resumed_adaptive_pass_writes_the_uninterrupted_bytes(tmp_path):
    options = dict(window="late", output_key=None, n=8, budget="adaptive", round_size=2, max_new_tokens=6,
                   prompts_per_generate=2, verifier="custom",
                   verifier_options={"function": "tests.test_rollout_budget:odd_length"})
    full = _op(tmp_path, **options)
    uninterrupted = full.process_batched(_batch(_late_rows()))
    full.release()
    [log] = list((tmp_path / "rollouts").rglob("results-*.jsonl"))
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:1]) + lines[1][:30])  # killed while writing the second record
    resumed_op = _op(tmp_path, **options)
    resumed = resumed_op.process_batched(_batch(_late_rows()))
    resumed_op.release()
    assert json.dumps(resumed, sort_keys=True, default=str) == json.dumps(uninterrupted, sort_keys=True, default=str)


def test_adaptive_budget_needs_a_window_and_sampling(tmp_path):
    with pytest.raises(ValueError, match="set window"):
        _op(tmp_path, budget="adaptive")
    with pytest.raises(ValueError, match="temperature > 0"):
        _op(tmp_path, window="late", output_key=None, budget="adaptive", temperature=0)._prepare()
