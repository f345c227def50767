"""LIMR's Learning Impact Measurement as a prior (issue 55): its score against the paper's own
formula written out, its soft weight and the paper's hard cut, the registry's arms that come from
it, and `trajval validate`'s LIMR from a full run's trajectory."""

from __future__ import annotations

import numpy as np
import pytest

from trajval_ops.priors import PRIORS, arm_priors, build_prior
from trajval_ops.priors.base import PassRates
from trajval_ops.priors.limr import PAPER_THRESHOLD, Limr, lim_scores


def _paper_score(sequence, baseline) -> float:
    """GAIR-NLP/LIMR ``lim/lim_selection.py``'s ``calculate_similarity_score``, written out here
    from the paper's equation (section 2.2.1) as a loop over epochs."""
    squared = sum((acc - base) ** 2 for acc, base in zip(sequence, baseline))
    scale = sum((1 - base) ** 2 for base in baseline)
    return 1 - squared / scale


def test_the_score_is_the_papers_learning_impact_measurement():
    rng = np.random.default_rng(0)
    trajectories = rng.integers(0, 9, size=(50, 7)) / 8
    baseline = trajectories.mean(axis=0).tolist()
    expected = [_paper_score(row.tolist(), baseline) for row in trajectories]
    assert lim_scores(trajectories) == pytest.approx(expected, abs=1e-12)


def test_the_average_curve_scores_one_and_a_task_solved_throughout_zero():
    # a task on the pool's mean curve, two either side of it
    trajectories = np.array([[0.2, 0.4, 0.6], [0.0, 0.2, 0.4], [0.4, 0.6, 0.8]])
    scores = lim_scores(trajectories)
    assert scores[0] == pytest.approx(1.0) and scores[1] == scores[2] < 1
    solved = lim_scores(np.array([[1.0, 1.0], [0.0, 0.5]]))  # mean [0.5, 0.75]
    assert solved[0] == pytest.approx(0.0)


def test_the_soft_weight_floors_the_score_and_the_cut_is_the_papers_selection():
    score = np.array([-0.5, 0.0, 0.3, PAPER_THRESHOLD, 0.61, 1.0])
    assert Limr().weight(score).tolist() == [0.05, 0.05, 0.3, 0.6, 0.61, 1.0]
    assert Limr(eps=0.1).weight(score)[:2].tolist() == [0.1, 0.1]
    # s > threshold, strictly (the paper's s_i > theta); the rest dropped (weight 0)
    assert Limr(cut=True).weight(score).tolist() == [0, 0, 0, 0, 1, 1]
    assert Limr(cut=True, threshold=0.2).weight(score).tolist() == [0, 0, 1, 1, 1, 1]


def test_scores_read_every_checkpoint_else_the_two_windows():
    rng = np.random.default_rng(1)
    trajectories = rng.integers(0, 17, size=(30, 5)) / 16
    rates = PassRates(trajectories[:, 0], trajectories[:, -1], trajectories)
    scored = Limr().scores(rates)
    assert scored.score.tolist() == lim_scores(trajectories).tolist()
    assert scored.weight.tolist() == np.maximum(scored.score, 0.05).tolist()
    endpoints = Limr().scores(PassRates(trajectories[:, 0], trajectories[:, -1]))
    assert endpoints.score.tolist() == lim_scores(trajectories[:, [0, -1]]).tolist()


def test_what_cannot_be_scored_is_said():
    with pytest.raises(ValueError, match="two checkpoints or more"):
        lim_scores(np.array([[0.5], [0.25]]))
    with pytest.raises(ValueError, match="mean pass rate is 1 at every checkpoint"):
        lim_scores(np.ones((3, 4)))
    flat = np.array([[0.0, 1.0], [1.0, 0.0]])  # both as far from the mean curve as can be
    with pytest.raises(ValueError, match="no task's LIM score exceeds threshold 0.6"):
        Limr(cut=True).scores(PassRates(flat[:, 0], flat[:, 1], flat))
    with pytest.raises(ValueError, match=r"threshold must be in \(-inf, 1\)"):
        Limr(threshold=1.0)
    with pytest.raises(ValueError, match="pool's mean curve"):
        Limr().weight_range((np.zeros(1), np.ones(1)), (np.zeros(1), np.ones(1)))
    assert not Limr().per_row  # so the adaptive budget refuses it


def test_the_registry_gives_limr_its_arms_and_weight_columns():
    from trajval_ops.experiment.priors import PRIOR_COLUMNS
    from trajval_ops.experiment.validation_config import ARMS

    assert PRIORS["limr"] is Limr and Limr.reads_checkpoints
    assert arm_priors()["limr"] == ("limr", {}) and arm_priors()["limr_cut"] == ("limr", {"cut": True})
    for arm in ("limr", "limr_cut", "limr_full_run", "limr_full_run_cut"):
        assert ARMS[arm] == (arm, None) and PRIOR_COLUMNS[arm] == f"trajval_{arm}_weight"
    assert build_prior("limr", {"threshold": 0.5, "alpha": 0.3}).spec() == {
        "prior": "limr", "eps": 0.05, "threshold": 0.5, "cut": False}


def test_validate_weights_limr_from_the_probes_checkpoints_and_from_a_full_run():
    """The registry's arms read the probe unit's passes in training order (early, the kept
    epochs', late); the full-run arms read oracle A's trajectory of each task, in pool order."""
    from trajval_ops.experiment.priors import prior_weights

    rng = np.random.default_rng(2)
    n = 40
    passes = rng.integers(0, 17, size=(n, 3)) / 16
    rows = [{"id": f"t{i}", "trajval_r_early": passes[i, 0], "trajval_acc_epoch_1": passes[i, 1],
             "trajval_r_late": passes[i, 2], "trajval_score_provenance": {"alpha": 0.3, "eps": 0.05}}
            for i in range(n)]
    acc = rng.integers(0, 9, size=(n, 7)) / 8
    order = rng.permutation(n)  # the oracle's own task order
    oracle = {"ids": [f"t{i}" for i in order], "acc": acc[order]}
    weights = prior_weights(rows, {"limr", "limr_cut", "limr_full_run", "limr_full_run_cut"}, oracle,
                            prior_settings={"limr": {"threshold": 0.5}},
                            checkpoint_keys=["trajval_acc_epoch_1"])
    soft, cut = Limr(threshold=0.5), Limr(threshold=0.5, cut=True)
    assert weights["limr"].tolist() == soft.weight(lim_scores(passes)).tolist()
    assert weights["limr_cut"].tolist() == cut.weight(lim_scores(passes)).tolist()
    assert weights["limr_full_run"].tolist() == soft.weight(lim_scores(acc)).tolist()
    assert weights["limr_full_run_cut"].tolist() == cut.weight(lim_scores(acc)).tolist()
    assert 0 < weights["limr_full_run_cut"].sum() < n
