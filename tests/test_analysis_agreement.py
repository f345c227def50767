"""Spearman, Cohen's kappa, the per-profile score table and probe-epoch stability."""

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from trajval_ops import core
from trajval_ops.analysis import agreement as ag


def test_spearman_hand_value():
    # rank differences d = (0, 1, 1, 0): rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert ag.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert ag.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)


def test_spearman_matches_scipy_with_ties():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 8, 300) / 8  # pass rates on a grid: many ties
    b = np.clip(a + rng.normal(0, 0.2, 300), 0, 1).round(1)
    assert ag.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)


def test_spearman_constant_input_is_nan_with_warning():
    with pytest.warns(RuntimeWarning):
        assert np.isnan(ag.spearman([0.5, 0.5, 0.5], [1, 2, 3]))


def test_spearman_refuses_mismatched_or_short_input():
    with pytest.raises(ValueError):
        ag.spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        ag.spearman([1], [1])


def test_kappa_hand_value():
    # confusion [[20, 5], [10, 15]]: p_o = 0.7, p_e = (25*30 + 25*20) / 2500 = 0.5 -> kappa 0.4
    a = ["x"] * 25 + ["y"] * 25
    b = ["x"] * 20 + ["y"] * 5 + ["x"] * 10 + ["y"] * 15
    assert ag.confusion_matrix(a, b, ["x", "y"]).tolist() == [[20, 5], [10, 15]]
    assert ag.cohens_kappa(a, b) == pytest.approx(0.4)


def test_kappa_matches_sklearn_six_way():
    rng = np.random.default_rng(5)
    a = rng.choice(core.PROFILES, 256)
    b = np.where(rng.random(256) < 0.7, a, rng.choice(core.PROFILES, 256))
    assert ag.cohens_kappa(a, b, core.PROFILES) == pytest.approx(cohen_kappa_score(a, b))


def test_kappa_undefined_when_one_label_throughout():
    with pytest.warns(RuntimeWarning):
        assert np.isnan(ag.cohens_kappa(["stable"] * 4, ["stable"] * 4))


def test_profile_agreement_binary_matches_sklearn():
    rng = np.random.default_rng(7)
    a = rng.choice(core.PROFILES, 200)
    b = np.where(rng.random(200) < 0.6, a, rng.choice(core.PROFILES, 200))
    out = ag.profile_agreement(a, b)
    la, lb = core.is_learnable(a), core.is_learnable(b)
    assert out["kappa_binary"] == pytest.approx(cohen_kappa_score(la, lb))
    assert out["kappa_six_way"] == pytest.approx(cohen_kappa_score(a, b))
    assert out["confusion_six_way"].sum() == 200 and out["n_shared"] == 200


def test_unknown_label_is_refused():
    with pytest.raises(ValueError, match="bogus"):
        ag.profile_agreement(["stable", "bogus"], ["stable", "stable"])


def test_score_distribution_hand_values():
    profiles = ["stable", "stable", "mastered", "unlearned"]
    score = core.learnability_score([0.0, 0.5, 0.95, 0.0], [0.5, 0.6, 0.97, 0.0])  # 0.5, 0.05, 0.001, 0
    weight = core.sampling_weight(score, alpha=1.0, eps=0.05)  # 0.5, 0.05, 0.05, 0.05
    table = ag.score_distribution(profiles, score, weight, eps=0.05)
    total = 0.65
    assert table["stable"]["n"] == 2
    assert table["stable"]["weight_share"] == pytest.approx(0.55 / total)
    assert table["stable"]["mean_score"] == pytest.approx(0.275)
    assert table["stable"]["floor_fraction"] == pytest.approx(0.5)
    assert table["mastered"]["floor_fraction"] == 1.0
    assert table["learnable"]["weight_share"] == pytest.approx(0.55 / total)
    assert table["non-learnable"]["n"] == 2 and table["non-learnable"]["share_of_pool"] == 0.5
    assert table["forgetting"]["n"] == 0 and np.isnan(table["forgetting"]["mean_score"])
    assert sum(table[p]["weight_share"] for p in core.PROFILES) == pytest.approx(1.0)


def test_score_distribution_refuses_bad_weights():
    with pytest.raises(ValueError):
        ag.score_distribution(["stable"], [0.1], [-1.0])
    with pytest.raises(ValueError, match="unknown profile"):
        ag.score_distribution(["nope"], [0.1], [0.5])


def test_probe_epoch_stability_against_scipy():
    rng = np.random.default_rng(11)
    pre = rng.uniform(0, 0.8, 100)
    final = np.clip(pre + rng.uniform(-0.1, 0.5, 100), 0, 1)
    late = np.stack([np.clip(pre + (final - pre) * k / 5 + rng.normal(0, 0.1 / k, 100), 0, 1) for k in range(1, 6)], 1)
    late[:, -1] = final
    rho = ag.probe_epoch_stability(pre, late)
    assert rho[-1] == pytest.approx(1.0)
    s_final = core.learnability_score(pre, final)
    for k in range(5):
        expected = stats.spearmanr(core.learnability_score(pre, late[:, k]), s_final).statistic
        assert rho[k] == pytest.approx(expected)


def test_probe_epoch_stability_nan_for_epoch_without_gain():
    pre = np.array([0.5, 0.4, 0.3])
    late = np.array([[0.5, 0.9], [0.4, 0.5], [0.3, 0.6]])  # epoch 1: no gain anywhere -> s constant 0
    rho = ag.probe_epoch_stability(pre, late)
    assert np.isnan(rho[0]) and rho[1] == pytest.approx(1.0)


def test_estimate_agreement_keys():
    probe = {"r_early": [0.1, 0.2, 0.3], "r_late": [0.2, 0.5, 0.3], "profile": ["sluggish", "sluggish", "ineffective"]}
    oracle = {"r_early": [0.1, 0.25, 0.35], "r_late": [0.3, 0.4, 0.2], "profile": ["sluggish", "stable", "forgetting"]}
    out = ag.estimate_agreement(probe, oracle)
    assert out["spearman_r_early"] == pytest.approx(1.0)
    assert {"spearman_r_late", "kappa_six_way", "kappa_binary"} <= set(out)


def test_group_spearman_ranks_the_group_means():
    from trajval_ops.analysis.agreement import group_spearman

    groups = ["b", "a", "c", "a", "b", "c"]
    a = [2.0, 1.0, 3.0, 1.0, 2.0, 3.0]      # means a 1, b 2, c 3
    rising = [0.2, 0.0, 0.9, 0.2, 0.4, 0.1]  # means a 0.1, b 0.3, c 0.5: same order
    falling = [-x for x in rising]
    assert group_spearman(a, rising, groups) == pytest.approx(1.0)
    assert group_spearman(a, falling, groups) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="groups"):
        group_spearman(a, rising, groups[:-1])
