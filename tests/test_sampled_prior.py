"""The sampled prior's pure core: the stratified sample and the predicted scores."""

from __future__ import annotations

import numpy as np
import pytest

from trajval_ops import core
from trajval_ops.priors.sampled import predict_scores, sample_key, stratified_sample


def test_the_sample_is_per_group_deterministic_and_blind_to_row_order():
    ids = [f"t{i}" for i in range(100)]
    groups = ["a"] * 60 + ["b"] * 37 + ["c"] * 3
    chosen = stratified_sample(ids, 0.1, seed=4, groups=groups)
    by_group = {g: int(chosen[[x == g for x in groups]].sum()) for g in "abc"}
    assert by_group == {"a": 6, "b": 4, "c": 1}  # ceil(0.1 x size), at least one per group
    order = np.random.default_rng(0).permutation(100)
    shuffled = stratified_sample([ids[i] for i in order], 0.1, seed=4, groups=[groups[i] for i in order])
    assert {ids[i] for i, c in zip(order, shuffled) if c} == {ids[i] for i in np.flatnonzero(chosen)}
    # within a group, the rows of smallest key
    keys_a = sorted((sample_key(ids[i], 4), ids[i]) for i in range(60))
    assert {t for _, t in keys_a[:6]} == {ids[i] for i in range(60) if chosen[i]}
    assert not np.array_equal(chosen, stratified_sample(ids, 0.1, seed=5, groups=groups))  # another seed
    assert stratified_sample(ids, 1.0, seed=4).all()


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, True, "0.1", None])
def test_a_bad_fraction_is_refused(fraction):
    with pytest.raises(ValueError, match="sample_fraction must be a number in \\(0, 1\\]"):
        stratified_sample(["a", "b"], fraction, seed=0)


def test_repeated_ids_are_refused():
    with pytest.raises(ValueError, match="unique task ids"):
        stratified_sample(["a", "a"], 0.5, seed=0)


def _regime(rows=400, seed=0):
    """Rows whose score follows their group and a short pass's noisy pass rate."""
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 4, rows)
    r_early = np.clip(rng.beta(1 + groups, 4, rows), 0, 1)
    r_late = np.clip(r_early + 0.1 * groups + rng.normal(0, 0.05, rows), 0, 1)
    score = core.learnability_score(r_early, r_late)
    short = rng.binomial(4, r_early) / 4
    return score, short, [f"g{g}" for g in groups]


def test_measured_rows_keep_their_score_and_the_others_are_flagged_with_an_interval():
    score, short, groups = _regime()
    measured = stratified_sample([f"t{i}" for i in range(len(score))], 0.25, seed=1, groups=groups)
    out = predict_scores(score, measured, short[:, None], groups, seed=0)
    assert out.predictor == "gradient_boosting"
    assert np.array_equal(out.score[measured], score[measured]) and not out.predicted[measured].any()
    assert out.predicted[~measured].all() and not out.fallback.any()
    assert ((out.low <= out.score) & (out.score <= out.high)).all()
    assert ((0 <= out.low) & (out.high <= 1)).all() and out.interval_halfwidth > 0
    assert (out.high[~measured] > out.low[~measured]).any()
    # the interval covers about `coverage` of the predicted rows' true scores
    covered = ((out.low <= score) & (score <= out.high))[~measured].mean()
    assert covered > 0.8
    # better than the group alone at ranking the rows it did not measure
    from scipy.stats import spearmanr

    alone = predict_scores(score, measured, None, groups)
    assert alone.predictor == "group_mean"
    assert spearmanr(out.score[~measured], score[~measured]).statistic > \
        spearmanr(alone.score[~measured], score[~measured]).statistic
    again = predict_scores(score, measured, short[:, None], groups, seed=0)
    assert np.array_equal(again.score, out.score) and np.array_equal(again.high, out.high)  # same seed


def test_a_group_without_a_measured_row_gets_the_pool_mean_flagged():
    score = np.array([0.2, 0.4, 0.9, 0.0, 0.0])
    measured = np.array([True, True, False, False, False])
    groups = ["a", "a", "a", "b", "b"]
    out = predict_scores(score, measured, None, groups)
    assert out.fallback.tolist() == [False, False, False, True, True]
    assert out.score.tolist() == pytest.approx([0.2, 0.4, 0.3, 0.3, 0.3])
    with pytest.raises(ValueError, match="at least one measured row"):
        predict_scores(score, np.zeros(5, dtype=bool))
    with pytest.raises(ValueError, match="coverage"):
        predict_scores(score, measured, coverage=1.0)


def test_one_measured_row_gives_its_predictions_the_whole_range_as_interval():
    """One measured row predicts every other as its own score and no error can be measured: the
    interval was [s, s] (a certainty nothing showed), now [0, 1]."""
    prediction = predict_scores([0.6, 0, 0, 0], [True, False, False, False])
    assert prediction.score.tolist() == [0.6] * 4
    assert prediction.low.tolist() == [0.6, 0.0, 0.0, 0.0] and prediction.high.tolist() == [0.6, 1.0, 1.0, 1.0]
    assert prediction.interval_halfwidth == 1.0
    two = predict_scores([0.6, 0.2, 0, 0], [True, True, False, False], coverage=0.5)
    assert two.interval_halfwidth < 1.0  # two rows measure each other's error
    # but no 90% interval: its rank, ceil(3 x 0.9) = 3, lies beyond the two errors measured
    assert predict_scores([0.6, 0.2, 0, 0], [True, True, False, False]).interval_halfwidth == 1.0


def test_the_interval_is_the_split_conformal_rank_of_the_errors():
    """An interpolated quantile of n errors covers a new row's error less often than stated
    (0.863 for 0.9 at n = 20); the ceil((n + 1) coverage)-th smallest covers at least that."""
    from trajval_ops.priors.sampled import _conformal_halfwidth

    errors = np.arange(1, 21) / 100  # 0.01 ... 0.20
    assert _conformal_halfwidth(errors, 0.9) == 0.19  # rank ceil(21 x 0.9) = 19
    assert _conformal_halfwidth(errors, 0.95) == 0.20 and _conformal_halfwidth(errors, 0.96) == 1.0
    rng = np.random.default_rng(0)
    draws = rng.random((20000, 21))
    covered = np.mean([draw[20] <= _conformal_halfwidth(draw[:20], 0.9) for draw in draws])
    assert covered >= 0.895
