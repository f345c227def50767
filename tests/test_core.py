"""The numeric core against hand-computed values and properties."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajval_ops import core

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def test_score_and_weight_hand_computed():
    # r_early 0.25, r_late 0.75: delta 0.5, s = 0.75 * 0.5 = 0.375, w = 0.375 ** 0.3
    assert core.learnability_score([0.25], [0.75])[0] == pytest.approx(0.375)
    # 0.375 ** 0.3 = exp(0.3 * ln 0.375) = exp(-0.294249) = 0.745091
    assert core.sampling_weight([0.375])[0] == pytest.approx(0.745091, abs=1e-6)


def test_floor_applies_below_eps_to_the_alpha():
    # s ** 0.3 <= 0.05  <=>  s <= 0.05 ** (1 / 0.3) ~= 4.6e-5
    s_edge = 0.05 ** (1 / 0.3)
    w = core.sampling_weight([0.0, s_edge / 2, s_edge * 2])
    assert w[0] == 0.05 and w[1] == 0.05
    assert w[2] == pytest.approx((s_edge * 2) ** 0.3) and w[2] > 0.05


def test_alpha_compresses_the_ratio():
    s = np.array([0.01, 0.64])
    ratio_1 = np.divide(*core.sampling_weight(s[::-1], alpha=1.0, eps=1e-9))
    ratio_03 = np.divide(*core.sampling_weight(s[::-1], alpha=0.3, eps=1e-9))
    assert ratio_1 == pytest.approx(64.0)
    assert ratio_03 == pytest.approx(64.0 ** 0.3)  # = 3.48


def test_negative_delta_scores_zero():
    assert core.learnability_score([0.6], [0.2])[0] == 0.0
    assert core.reward_delta([0.6], [0.2])[0] == pytest.approx(-0.4)


def test_r_early_one_scores_zero_whatever_late():
    assert core.learnability_score([1.0, 1.0], [1.0, 0.0]).tolist() == [0.0, 0.0]


def test_window_mean_over_k_checkpoints():
    acc = [[0.0, 0.5, 1.0], [0.25, 0.25, 0.25]]
    assert core.window_mean(acc).tolist() == [0.5, 0.25]
    assert core.window_mean([0.3, 0.7]).tolist() == [0.3, 0.7]  # K = 1
    with pytest.raises(ValueError, match="position 1"):
        core.window_mean([[0.0, 0.5], [0.5, 1.5]])
    with pytest.raises(ValueError, match="non-finite"):
        core.window_mean([[0.0, math.nan]])


def test_normalize_and_compose():
    p = core.normalize([1.0, 3.0])
    assert p.tolist() == [0.25, 0.75]
    assert core.compose_online([0.5, 1.0], [2.0, 0.0]).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="empty"):
        core.normalize([])
    with pytest.raises(ValueError, match="all weights are zero"):
        core.normalize([0.0, 0.0])
    with pytest.raises(ValueError, match="negative"):
        core.compose_online([1.0], [-1.0])


@pytest.mark.parametrize("alpha,eps", [(0, 0.05), (-1, 0.05), (0.3, 0), (0.3, 1.5), (math.nan, 0.05)])
def test_bad_parameters_refused(alpha, eps):
    with pytest.raises(ValueError):
        core.sampling_weight([0.5], alpha, eps)


@pytest.mark.parametrize(
    "r_early,r_late,profile",
    [
        (0.95, 0.97, "mastered"),
        (0.95, 0.50, "mastered"),      # saturation first: also matches forgetting
        (0.00, 0.05, "unlearned"),     # also matches ineffective
        (0.30, 0.05, "unlearned"),     # also matches forgetting
        (0.50, 0.30, "forgetting"),
        (0.10, 0.60, "stable"),
        (0.20, 0.55, "sluggish"),
        (0.20, 0.60, "sluggish"),      # delta == 0.4 is sluggish (0.15, 0.4]
        (0.40, 0.50, "ineffective"),
        (0.50, 0.45, "ineffective"),   # delta == -0.05: the band gap, put in ineffective
        (0.95, 1.00, "mastered"),      # delta 0.05 < 0.1
        (0.85, 1.00, "ineffective"),   # delta 0.15 is ineffective (-0.05, 0.15]
    ],
)
def test_endpoint_profiles(r_early, r_late, profile):
    assert core.endpoint_profiles([r_early], [r_late])[0] == profile


def test_learnable_grouping():
    assert core.is_learnable(["stable", "sluggish", "ineffective", "mastered", "unlearned", "forgetting"]).tolist() == [
        True, True, True, False, False, False]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(unit, unit), min_size=1, max_size=200))
def test_probabilities_sum_to_one(pairs):
    r_early, r_late = map(np.array, zip(*pairs))
    p = core.normalize(core.sampling_weight(core.learnability_score(r_early, r_late)))
    assert p.sum() == pytest.approx(1.0)
    assert (p > 0).all()


@settings(max_examples=200, deadline=None)
@given(unit, unit, unit)
def test_weight_non_decreasing_in_delta_at_fixed_r_early(r_early, d1, d2):
    lo, hi = sorted((d1 * (1 - r_early), d2 * (1 - r_early)))  # keep r_late in [0, 1]
    w = core.sampling_weight(core.learnability_score([r_early, r_early], [r_early + lo, r_early + hi]))
    assert w[0] <= w[1] + 1e-12


@settings(max_examples=200, deadline=None)
@given(unit, unit, st.floats(min_value=1e-3, max_value=1.0))
def test_weight_non_increasing_in_r_early_at_fixed_positive_delta(e1, e2, delta):
    lo, hi = sorted((e1, e2))
    delta = delta * (1 - hi) if hi < 1 else 0.0
    w = core.sampling_weight(core.learnability_score([lo, hi], [lo + delta, hi + delta]))
    assert w[0] >= w[1] - 1e-12


def test_multinomial_is_seeded_and_sorted():
    p = core.normalize([1, 2, 3, 4])
    a = core.multinomial_indices(p, 1000, seed=3)
    assert a.tolist() == core.multinomial_indices(p, 1000, seed=3).tolist()
    assert a.tolist() != core.multinomial_indices(p, 1000, seed=4).tolist()
    assert (np.diff(a) >= 0).all() and a.size == 1000


def test_multinomial_frequencies_match_p():
    # 200,000 draws: each frequency's standard error is <= sqrt(0.25 / 2e5) = 0.0011; a
    # tolerance of 5 standard errors (0.0056) fails by chance with probability < 1e-6.
    rng = np.random.default_rng(0)
    p = core.normalize(rng.random(20) + 0.05)
    n = 200_000
    counts = np.bincount(core.multinomial_indices(p, n, seed=11), minlength=p.size)
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(counts / n - p) <= 5 * se)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=1, max_size=60).filter(lambda w: sum(w) > 0),
       st.integers(min_value=1, max_value=500), st.integers(min_value=0, max_value=2**32 - 1))
def test_systematic_counts_are_floor_or_ceil(weights, n, seed):
    p = core.normalize(weights)
    counts = core.systematic_counts(p, n, seed)
    expected = n * p
    assert counts.sum() == n
    assert np.all(counts >= np.floor(expected - 1e-9)) and np.all(counts <= np.ceil(expected + 1e-9))


def test_systematic_exact_counts():
    # expected counts 1.5, 2.5, 6.0 -> 1 or 2, 2 or 3, exactly 6
    counts = core.systematic_counts([0.15, 0.25, 0.6], 10, seed=0)
    assert counts[2] == 6 and counts.sum() == 10 and set(counts[:2]) <= {1, 2, 3}
    assert core.systematic_counts([1, 1, 1, 1], 8, seed=5).tolist() == [2, 2, 2, 2]


def test_hard_cut_mask():
    assert core.hard_cut_mask([0.0, 0.1, 0.5], 0.1).tolist() == [False, False, True]


def test_equal_window_means_are_no_gain_whatever_the_float_noise():
    """Window means of k/10 rates can differ in the last bit where the windows are equal: that was
    a positive score (2.4e-17), kept by a hard cut at 0 and counted as a positive score."""
    r_early = core.window_mean([[0.1, 0.2]])  # 0.15 on one side ...
    r_late = core.window_mean([[0.0, 0.3]])   # ... and on the other, one bit apart
    assert r_late[0] != r_early[0]
    assert core.reward_delta(r_early, r_late)[0] == 0.0
    assert core.learnability_score(r_early, r_late)[0] == 0.0
    assert not core.hard_cut_mask(core.learnability_score(r_early, r_late), 0.0)[0]
    assert core.reward_delta([0.5], [0.5 + 1e-6])[0] == pytest.approx(1e-6)  # a real gain stays


@pytest.mark.parametrize("r_early, r_late, message", [([np.nan], [0.5], "r_early: non-finite"),
                                                      ([0.2], [None], "r_late: non-finite"),
                                                      ([0.2], [1.5], "r_late: value outside")])
def test_the_score_refuses_rates_that_are_no_rates(r_early, r_late, message):
    with pytest.raises(ValueError, match=message):
        core.learnability_score(r_early, r_late)


def test_the_weight_refuses_a_score_that_is_no_number():
    with pytest.raises(ValueError, match="score: non-finite"):
        core.sampling_weight([0.5, np.nan])


def test_a_window_mean_landing_on_a_level_is_on_its_documented_side():
    """Window means of k/n rates carry float noise: mean(0, 0, 0.3) = 0.09999999999999999 read as
    below 0.1 (unlearned, not forgetting), mean(16, 18, 19, 19)/20 = 0.9000000000000001 as above
    0.9 (mastered, not ineffective), mean(0.5, 5/6) as above 2/3 (the high within-bin bin)."""
    from trajval_ops.analysis import trajectories, within_bin

    early, late = np.array([0.3, np.mean(np.array([16, 18, 19, 19]) / 20)]), np.array([np.mean([0.0, 0.0, 0.3]), 0.95])
    assert late[0] < 0.1 and early[1] > 0.9  # the float noise itself
    assert core.endpoint_profiles(early, late).tolist() == ["forgetting", "ineffective"]
    criteria = trajectories.profile_criteria(early, late, np.zeros(2), np.ones(2))
    assert not criteria[:, core.PROFILES.index("unlearned")][0] and not criteria[:, core.PROFILES.index("mastered")][1]
    assert within_bin.tercile_bins(np.array([np.mean([0.5, 5 / 6]), 2 / 3, 0.7]), "fixed").tolist() == [1, 1, 2]
