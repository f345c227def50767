"""The prior registry (issue 34): every prior once, each prior's weight by hand, the range of its
weight that the adaptive budget stops on against a brute-force search, the learnability mapper
and `trajval validate`'s harness giving the same weights for the same passes, and the docs'
table generated from the registry."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from tests.conftest import REPO
from trajval_ops import priors
from trajval_ops.priors import PRIORS, BandPass, TrajVal, Variance, build_prior, prior_from_spec
from trajval_ops.rollout.budget import AdaptiveBudget


def test_every_prior_module_is_listed_once_under_its_own_name():
    # sampled: the prediction of the scores of rows a sampled pass left out (any prior's), no prior of its own
    shared = ("__init__", "base", "sampled")
    modules = sorted(p.stem for p in (REPO / "trajval_ops" / "priors").glob("*.py") if p.stem not in shared)
    classes = list(priors.BUILT_IN)  # this package's; an installed package's entry points may add more
    assert len(set(classes)) == len(classes) and all(name == cls.name for name, cls in PRIORS.items())
    assert sorted(inspect.getmodule(cls).__name__.rsplit(".", 1)[1] for cls in classes) == modules
    assert priors.ONE_PASS_PRIORS == {name for name, cls in PRIORS.items() if cls.passes == ("early",)}
    assert set(classes) <= set(PRIORS.values())


@pytest.mark.parametrize("prior, r_early, r_late, weight", [
    (TrajVal(), [0.0, 1.0, 0.5, 0.5], [1.0, 1.0, 1.0, 0.5], [1.0, 0.05, 0.25 ** 0.3, 0.05]),
    (TrajVal(alpha=0.5, eps=0.1), [0.0, 0.5], [0.25, 0.25], [0.5, 0.1]),
    (Variance(), [0.0, 1.0, 0.5, 0.25], None, [0.05, 0.05, 1.0, 0.75]),
    (Variance(eps=0.2), [0.5, 0.5, 0.5], None, [1.0, 1.0, 1.0]),  # all rows equal
    (BandPass(), [0.0, 1.0, 0.5], None, [0.05, 0.05, 1.0]),
    (BandPass(band_low=0.3, band_high=0.6), [0.3, 0.5, 0.6], None, [0.05, 1.0, 0.05]),  # edges exclusive
])
def test_each_priors_weight_by_hand(prior, r_early, r_late, weight):
    assert prior.weights(np.array(r_early), None if r_late is None else np.array(r_late)) == pytest.approx(weight)


@pytest.mark.parametrize("prior", [TrajVal(), TrajVal(alpha=0.5, eps=0.1), Variance(), Variance(eps=0.3),
                                   BandPass(), BandPass(band_low=0.25, band_high=0.75)], ids=repr)
def test_the_weight_range_is_the_extremes_over_the_intervals(prior):
    """What the adaptive budget stops on: the lowest and highest weight over pass-rate intervals,
    against the weights at every k/16 inside them."""
    grid = np.arange(17) / 16
    rng = np.random.default_rng(0)
    for _ in range(200):
        lo, hi = np.sort(rng.choice(grid, 2))
        early = (np.array([lo]), np.array([hi]))
        inside = grid[(grid >= lo) & (grid <= hi)]
        if prior.one_pass:
            weights = prior.weights(inside)
            low, high = prior.weight_range(early)
        else:
            late_lo, late_hi = np.sort(rng.choice(grid, 2))
            late_inside = grid[(grid >= late_lo) & (grid <= late_hi)]
            e, lt = np.meshgrid(inside, late_inside)
            weights = prior.weights(e.ravel(), lt.ravel())
            low, high = prior.weight_range(early, (np.array([late_lo]), np.array([late_hi])))
        assert low[0] == pytest.approx(weights.min()) and high[0] == pytest.approx(weights.max())


def test_the_old_budget_stopped_rows_whose_variance_weight_was_not_pinned():
    """The mismatch the registry removes: 14 successes in 14 of 16 rollouts pin TrajVal's weight
    within 0.3 (it can only fall to the floor from 0.29), not the variance prior's (0.05 to 0.44)."""
    assert AdaptiveBudget("early", 16, 4, prior=TrajVal(), tolerance=0.3).decided([14], 14)[0]
    assert not AdaptiveBudget("early", 16, 4, prior=Variance(), tolerance=0.3).decided([14], 14)[0]


@pytest.mark.parametrize("spec, unknown, declared", [
    ({"prior": "trajval", "passes": ["early"]}, "['passes']", "['alpha', 'eps', 'estimator']"),
    ({"prior": "variance", "name": "x", "formula": "y"}, "['formula', 'name']", "['eps']"),
    ({"prior": "bandpass", "passes": ["early"], "band_low": 0.2}, "['passes']", "['band_high', 'band_low', 'eps']"),
])
def test_a_class_attribute_is_no_setting_of_a_prior(tmp_path, spec, unknown, declared):
    """Issue 57: a ``budget_prior`` spec with ``passes`` or ``name`` (each prior's class attributes)
    was a raw TypeError from the constructor: the ClassVars were counted as settings. Such a key is
    an unknown setting, named with the prior's settings, wherever a spec or a mapper's settings
    build a prior (an endpoint pass's budget_prior included); a mapper's settings keep only the
    prior's own."""
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    message = rf"prior '{spec['prior']}' has no setting\(s\) {re.escape(unknown)}; its settings: {re.escape(declared)}"
    with pytest.raises(ValueError, match=message):
        prior_from_spec(spec)
    with pytest.raises(ValueError, match=rf"trajval_endpoint_reward_mapper: {message}"):
        TrajvalEndpointRewardMapper(model="tiny-arith", window="early", budget="adaptive", budget_prior=spec,
                                    cache_dir=str(tmp_path))
    own = {key: value for key, value in spec.items() if key not in ("passes", "name", "formula")}
    assert build_prior(spec["prior"], {**spec, "eps": 0.1}) == prior_from_spec({**own, "eps": 0.1})


def test_a_prior_is_built_from_its_own_settings_and_specs_round_trip():
    mapper_settings = {"alpha": 0.5, "eps": 0.1, "estimator": "paper", "band_low": 0.0, "band_high": 1.0}
    assert build_prior("variance", mapper_settings).spec() == {"prior": "variance", "eps": 0.1}
    for prior in (TrajVal(alpha=0.5), Variance(eps=0.2), BandPass(band_low=0.1)):
        assert prior_from_spec(prior.spec()) == prior
    with pytest.raises(ValueError, match="has no setting"):
        prior_from_spec({"prior": "variance", "alpha": 0.3})
    with pytest.raises(ValueError, match=f"prior must be one of {re.escape(', '.join(PRIORS))}, got 'uniform'"):
        build_prior("uniform")
    with pytest.raises(ValueError, match=r"eps must be in \(0, 1\]"):
        Variance(eps=0.0)


def test_the_docs_table_of_priors_is_the_registrys():
    assert priors.priors_table() in (REPO / "docs" / "architecture.md").read_text()


def test_the_mapper_and_the_harness_give_the_same_weights_for_the_same_passes():
    """`trajval validate`'s arms weight the pool through the registry with the settings the probe
    unit's learnability mapper recorded (alpha 0.5, eps 0.1 here), as the mapper writes them."""
    import pyarrow as pa

    from trajval_ops.experiment.priors import prior_weights
    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import table_rows

    rng = np.random.default_rng(5)
    rows = [{"id": f"t{i}", "family": "ab"[i % 2], "trajval_r_early": int(rng.integers(0, 17)) / 16,
             "trajval_r_late": int(rng.integers(0, 17)) / 16, "trajval_r_early_n": 16, "trajval_r_late_n": 16}
            for i in range(40)]
    settings = {"alpha": 0.5, "eps": 0.1}

    def mapper(**params):  # alpha is TrajVal's alone: given to another prior it is refused
        own = settings if params.get("prior", "trajval") == "trajval" else {"eps": settings["eps"]}
        out = TrajvalLearnabilityMapper(**own, **params).score_pool(pa.Table.from_pylist(rows))
        return np.array(out.column("trajval_weight").to_pylist())

    scored = table_rows(TrajvalLearnabilityMapper(**settings).score_pool(pa.Table.from_pylist(rows)))
    harness = prior_weights(scored, {"variance", "bandpass", "trajval_posterior", "trajval_pooled"},
                            group_key="family")
    assert np.array_equal(harness["variance"], mapper(prior="variance"))
    assert np.array_equal(harness["bandpass"], mapper(prior="bandpass"))
    assert np.array_equal(harness["trajval_posterior"], mapper(estimator="posterior"))
    assert np.array_equal(harness["trajval_pooled"], mapper(estimator="pooled", group_key="family"))


def test_the_harness_counts_a_windows_rollouts_over_its_own_passes_only():
    """With K = 2 the pool has no ``trajval_r_early_n``: the harness summed every ``_n`` column
    whose name began like the window's, the protocol's extra passes included (short, other model,
    adaptive late), so its posterior weights were not the mapper's (38 of 40 rows differed)."""
    import pyarrow as pa

    from trajval_ops.experiment.priors import prior_weights
    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import table_rows

    rng = np.random.default_rng(0)
    rows = [{"id": f"t{i}", **{f"trajval_r_{window}_{k}": int(rng.integers(0, 9)) / 8
                               for window in ("early", "late") for k in (0, 1)},
             **{f"trajval_r_{window}_{k}_n": 8 for window in ("early", "late") for k in (0, 1)},
             "trajval_r_early_short": 0.5, "trajval_r_early_short_n": 4, "trajval_r_early_other_model": 0.5,
             "trajval_r_early_other_model_n": 8, "trajval_r_late_adaptive": 0.5, "trajval_r_late_adaptive_n": 64}
            for i in range(40)]
    settings = {"alpha": 0.5, "eps": 0.1, "window_k": 2}
    scored = table_rows(TrajvalLearnabilityMapper(**settings).score_pool(pa.Table.from_pylist(rows)))
    mapper = TrajvalLearnabilityMapper(**settings, estimator="posterior").score_pool(pa.Table.from_pylist(rows))
    assert np.array_equal(prior_weights(scored, {"trajval_posterior"})["trajval_posterior"],
                          np.array(mapper.column("trajval_weight").to_pylist()))
