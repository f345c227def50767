"""Dense-trajectory descriptors and the Figure-1 profiles on constructed trajectories."""

import numpy as np
import pytest
from scipy import stats

from trajval_ops import core
from trajval_ops.analysis import trajectories as tr

T = 11
RAMP = np.linspace(0.0, 1.0, T)


def line(start, end):
    return start + (end - start) * RAMP


def test_linear_fit_hand_values():
    slope, r2 = tr.linear_fit([[0.0, 0.5, 1.0], [0.0, 1.0, 0.0]])
    assert slope[0] == pytest.approx(0.5) and r2[0] == pytest.approx(1.0)
    assert slope[1] == pytest.approx(0.0) and r2[1] == pytest.approx(0.0)
    # [0,1,0,1]: x-mean 1.5, Sxy = 1, Sxx = 5, Syy = 1 -> slope 0.2, R^2 = 1 / 5.
    slope, r2 = tr.linear_fit([[0.0, 1.0, 0.0, 1.0]])
    assert slope[0] == pytest.approx(0.2) and r2[0] == pytest.approx(0.2)


def test_linear_fit_matches_scipy_linregress():
    rng = np.random.default_rng(1)
    acc = rng.uniform(0, 1, (20, 9))
    epochs = np.array([1, 2, 3, 5, 8, 10, 12, 15, 20], dtype=float)
    slope, r2 = tr.linear_fit(acc, x=epochs)
    for i in range(acc.shape[0]):
        fit = stats.linregress(epochs, acc[i])
        assert slope[i] == pytest.approx(fit.slope)
        assert r2[i] == pytest.approx(fit.rvalue**2)


def test_constant_trajectory_has_zero_r2_and_slope():
    slope, r2 = tr.linear_fit([[0.4] * 6])
    assert slope[0] == 0.0 and r2[0] == 0.0


def test_descriptors_hand_values_and_window():
    acc = np.array([[0.1, 0.3, 0.5, 0.7, 0.9, 0.5]])
    d = tr.trajectory_descriptors(acc, window=2)
    assert d["r_early"][0] == pytest.approx(0.2)
    assert d["r_late"][0] == pytest.approx(0.7)
    assert d["delta"][0] == pytest.approx(0.5)
    assert d["sigma"][0] == pytest.approx(np.std(acc[0]))
    d1 = tr.trajectory_descriptors([[0.0, 1.0, 0.0, 1.0]])
    assert d1["sigma"][0] == pytest.approx(0.5)
    assert d1["delta"][0] == pytest.approx(1.0)


@pytest.mark.parametrize("window", [0, 4])
def test_window_out_of_range_is_refused(window):
    with pytest.raises(ValueError, match="window"):
        tr.trajectory_descriptors(np.full((2, 6), 0.5), window=window)


def test_accuracy_outside_unit_interval_names_position():
    acc = np.full((3, 5), 0.5)
    acc[2, 1] = 1.5
    with pytest.raises(ValueError, match="position 2"):
        tr.trajectory_profiles(acc)


def oscillating(first, last):
    values = np.array([float(i % 2) for i in range(T)])
    values[0], values[-1] = first, last
    return values


SHAPES = {
    "stable": line(0.1, 0.7),  # steady rise: delta 0.6, R^2 = 1
    "sluggish": line(0.2, 0.45),  # gradual rise: delta 0.25
    "ineffective": 0.5 + 0.02 * np.sin(np.arange(T)),  # flat / noisy around 0.5
    "mastered": np.full(T, 0.95),
    "unlearned": np.full(T, 0.02),
    "forgetting": line(0.8, 0.3),
}


@pytest.mark.parametrize("expected", list(SHAPES))
def test_each_constructed_shape_gets_its_profile(expected):
    out = tr.trajectory_profiles(np.stack([SHAPES[expected]]))
    assert out["profile"][0] == expected
    assert out["learnable"][0] == (expected in core.LEARNABLE_PROFILES)


def test_noisy_trajectory_is_sluggish_by_sigma():
    # 0/1 oscillation with equal endpoints: delta 0, sigma ~0.5 > 0.35 -> not ineffective.
    out = tr.trajectory_profiles(np.stack([oscillating(0.5, 0.5)]))
    assert out["sigma"][0] > 0.35 and abs(out["delta"][0]) < 1e-12
    assert out["profile"][0] == "sluggish"


def test_large_gain_without_trend_or_low_sigma_is_sluggish_not_stable():
    traj = oscillating(0.0, 0.6)
    out = tr.trajectory_profiles(np.stack([traj]))
    assert out["delta"][0] > 0.4 and out["r2"][0] <= 0.4 and out["sigma"][0] > 0.35
    assert out["profile"][0] == "sluggish"


def test_stable_branch_by_sigma_with_weak_trend():
    # delta > 0.4, R^2 <= 0.4 but sigma <= 0.35 -> stable by the "or" branch of Figure 1.
    crit = tr.profile_criteria([0.1], [0.6], sigma=[0.2], r2=[0.1])
    assert tr.resolve_profiles(crit)[0] == "stable"


def test_overlap_resolved_saturation_first_and_counted():
    out = tr.trajectory_profiles(np.stack([SHAPES["mastered"], SHAPES["unlearned"], SHAPES["stable"]]))
    # flat near-ceiling/near-floor rows also meet the ineffective criterion
    assert out["n_matched"].tolist() == [2, 2, 1]
    assert out["profile"].tolist() == ["mastered", "unlearned", "stable"]


def test_row_matching_no_criterion_gets_fallback_label():
    thresholds = tr.ProfileThresholds(flat_delta=-0.25)
    traj = line(0.5, 0.25)  # delta exactly -0.25: neither forgetting (<) nor ineffective (>)
    out = tr.trajectory_profiles(np.stack([traj]), thresholds=thresholds)
    assert out["delta"][0] == -0.25
    assert out["n_matched"][0] == 0
    assert out["profile"][0] == tr.UNMATCHED_LABEL == "ineffective"


def test_noisy_decline_is_forgetting_not_sluggish():
    traj = oscillating(0.9, 0.5)  # delta -0.4 with sigma > 0.35 matches both
    out = tr.trajectory_profiles(np.stack([traj]))
    assert out["n_matched"][0] == 2
    assert out["profile"][0] == "forgetting"


def test_slope_r2_projection_labels_are_endpoint_profiles():
    acc = np.stack(list(SHAPES.values()))
    proj = tr.slope_r2_projection(acc)
    assert proj["profile"].tolist() == core.endpoint_profiles(acc[:, 0], acc[:, -1]).tolist()
    assert proj["slope"][0] > 0 > proj["slope"][-1]
    given = tr.slope_r2_projection(acc, r_early=np.full(6, 0.95), r_late=np.full(6, 0.96))
    assert set(given["profile"]) == {"mastered"}
    with pytest.raises(ValueError):
        tr.slope_r2_projection(acc, r_early=np.zeros(6))


def test_dense_and_endpoint_profiles_share_the_band_edge_rule():
    """0.7 -> 0.85 is delta 0.15 exactly on the k/n grid: 'ineffective' on both paths."""
    from trajval_ops import core
    from trajval_ops.analysis.trajectories import trajectory_profiles

    acc = np.array([[0.7, 0.75, 0.8, 0.85]])
    assert core.endpoint_profiles([0.7], [0.85])[0] == "ineffective"
    assert trajectory_profiles(acc)["profile"][0] == "ineffective"
