"""Noise-aware learnability scores: the beta-binomial posterior (pool prior) and pooled (group
prior) estimators, against hand-computed cases and as properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajval_ops import core


def test_n_equal_one_against_the_exact_integral():
    """Prior Beta(1, 1), early 0 of 1, late 1 of 1: X ~ Beta(1, 2), Y ~ Beta(2, 1) and
    E[(1 - X) max(0, Y - X)] = 4 * int_0^1 (1-x)^2 int_x^1 (y - x) y dy dx = 13/45."""
    import sympy

    x, y = sympy.symbols("x y")
    exact = sympy.integrate(4 * (1 - x) ** 2 * sympy.integrate((y - x) * y, (y, x, 1)), (x, 0, 1))
    mean, low, high = core.posterior_score([0.0], [1], [1.0], [1], (1.0, 1.0), (1.0, 1.0))
    assert exact == sympy.Rational(13, 45)
    assert mean[0] == pytest.approx(float(exact), abs=2e-3)
    assert 0.0 <= low[0] < mean[0] < high[0] <= 1.0


def test_pools_all_wrong_or_all_right_give_scores_near_zero_and_weights_at_the_floor():
    for rate in (0.0, 1.0):
        r = np.full(20, rate)
        mean, low, high, fitted = core.noise_aware_score("posterior", r, 16, r, 16)
        assert mean.max() < 0.01 and high.max() < 0.05, (rate, fitted)
        assert (core.sampling_weight(mean) == core.sampling_weight(np.zeros(20))).all() or mean.max() < 1e-4


def test_the_fitted_prior_reads_the_spread_beyond_the_binomial_noise():
    rng = np.random.default_rng(0)
    true = rng.beta(2.0, 6.0, size=4000)
    n = np.full(true.size, 16)
    rates = rng.binomial(n, true) / n
    a, b = core.fit_beta_prior(rates, n)
    assert a / (a + b) == pytest.approx(0.25, abs=0.02) and a + b == pytest.approx(8.0, rel=0.25)
    assert core.fit_beta_prior([0.5, 0.5, 0.5], [16, 16, 16])[0] > 100  # no spread beyond noise: a strong prior
    assert core.fit_beta_prior([0.3], [16]) == pytest.approx((0.3, 0.7))  # one row: weak, at its rate


def test_one_rollout_per_row_cannot_fit_the_prior():
    """At n = 1 the rates' spread is the binomial noise whatever the prior: the fit took rho =
    0.999 (a + b = 0.001) and the 'noise-aware' score was the paper's exactly where noise is
    largest. Refused; a pooled group measured at n = 1 takes the pool's prior."""
    rng = np.random.default_rng(0)
    rates = rng.integers(0, 2, 50).astype(float)
    with pytest.raises(ValueError, match="one rollout per row cannot show"):
        core.fit_beta_prior(rates, np.ones(50))
    with pytest.raises(ValueError, match="measure n >= 2"):
        core.noise_aware_score("posterior", rates, 1, rates[::-1], 1)
    n = np.where(np.arange(50) < 25, 1, 16)
    groups = ["single" if i < 25 else "many" for i in range(50)]
    _, fitted = core.group_beta_priors(np.where(n == 1, rates, rates / 2), n, groups)
    assert fitted["'single'"] == core.fit_beta_prior(np.where(n == 1, rates, rates / 2), n)


def test_pooled_with_one_task_per_group_is_the_pool_posterior():
    rng = np.random.default_rng(1)
    r_early, r_late = rng.integers(0, 17, 30) / 16, rng.integers(0, 17, 30) / 16
    pooled = core.noise_aware_score("pooled", r_early, 16, r_late, 16, groups=list(range(30)))
    pool = core.noise_aware_score("posterior", r_early, 16, r_late, 16)
    for a, b in zip(pooled[:3], pool[:3]):
        assert np.array_equal(a, b)


def test_pooled_shrinks_a_noisy_row_toward_its_group():
    # group "gain": every task improves 2/8 -> 6/8; group "flat": 2/8 -> 2/8; one odd flat task 2/8 -> 4/8
    r_early = np.array([0.25] * 10 + [0.25] * 10)
    r_late = np.array([0.75] * 10 + [0.25] * 9 + [0.5])
    groups = ["gain"] * 10 + ["flat"] * 10
    pooled, *_ = core.noise_aware_score("pooled", r_early, 8, r_late, 8, groups)
    pool, *_ = core.noise_aware_score("posterior", r_early, 8, r_late, 8)
    paper = core.learnability_score(r_early, r_late)
    assert pooled[-1] < pool[-1]  # the odd flat task: shrunk toward its flat group
    assert pooled[0] > pool[0]  # a gaining task keeps more of its gain in its gaining group
    assert pooled[-1] < pooled[0] and paper[-1] < paper[0]


@settings(max_examples=40, deadline=None)
@given(k_early=st.integers(0, 16), k_late=st.integers(0, 16), scale=st.sampled_from([1, 4, 16]),
       a=st.floats(0.2, 5.0), b=st.floats(0.2, 5.0))
def test_posterior_properties(k_early, k_late, scale, a, b):
    n = 16 * scale
    r_early, r_late = np.array([k_early / 16]), np.array([k_late / 16])
    mean, low, high = core.posterior_score(r_early, n, r_late, n, (a, b), (a, b))
    assert 0.0 <= low[0] <= high[0] <= 1.0 and 0.0 <= mean[0] <= 1.0  # s has an atom at 0: the mean may
    # lie below a central interval [0, 0]
    if scale == 16:  # 256 rollouts: the posterior mean is near the paper's score
        assert mean[0] == pytest.approx(core.learnability_score(r_early, r_late)[0], abs=0.05)
    wide = core.posterior_score(r_early, 16, r_late, 16, (a, b), (a, b))
    assert high[0] - low[0] <= wide[2][0] - wide[1][0] + 1e-9  # more rollouts, a narrower interval
