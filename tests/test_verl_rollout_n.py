"""Rollouts per prompt from the prior (``data.trajval.rollout_n_from_prior``): the numeric core
:func:`rollout_n_per_prompt` and the option's checks, in this process (no verl 0.9 needed).

verl 0.9.1's own path (dataset, collate, the V1 trainer's batch and the agent loop that reads
``__rollout_n__``) is driven in ``tests/test_verl_rollout_n_e2e.py``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from trajval_ops.samplers.rollout_n import group_variance_probability, rollout_n_per_prompt

try:  # the option's tests need verl; the numeric core's run in the base install too
    from omegaconf import OmegaConf

    from trajval_ops.samplers.verl_dataset import RolloutNFromPrior, trajval_options
except ImportError:
    OmegaConf = RolloutNFromPrior = trajval_options = None
needs_verl = pytest.mark.skipif(RolloutNFromPrior is None, reason="verl is not installed (the extended install "
                                "brings it)")
from trajval_ops.settings import declared, default_of, help_text

REPO = Path(__file__).resolve().parents[1]
WORKED_RATES = (0.02, 0.1, 0.5, 0.9, 0.98)


def _pools():
    rng = np.random.default_rng(5)
    return {
        "worked": np.array(WORKED_RATES),
        "k_of_16": rng.binomial(16, rng.beta(0.5, 0.5, 600)) / 16,  # many exact 0 and 1
        "continuous": rng.beta(0.7, 0.7, 600),
        "repeats": np.repeat([0.05, 0.3, 0.5, 0.97], [7, 5, 3, 9]),  # a weighted draw serves rows twice
        "one_rate": np.full(50, 0.25),
    }


@pytest.mark.parametrize("name", sorted(_pools()))
@pytest.mark.parametrize("n, min_n, max_n", [(8, 2, 32), (16, 2, 64), (4, 4, 4), (16, 8, 17), (2, 2, 9)])
def test_total_kept_bounds_held_integers(name, n, min_n, max_n):
    rates = _pools()[name]
    counts = rollout_n_per_prompt(rates, n, min_n, max_n)
    assert counts.dtype == np.int64 and counts.shape == rates.shape
    assert int(counts.sum()) == n * rates.size
    assert counts.min() >= min_n and counts.max() <= max_n
    np.testing.assert_array_equal(counts, rollout_n_per_prompt(rates.copy(), n, min_n, max_n))  # deterministic


@pytest.mark.parametrize("name", ["worked", "k_of_16", "continuous", "repeats"])
@pytest.mark.parametrize("n, max_n", [(8, 32), (16, 64)])
def test_no_single_move_raises_the_least_chance_of_a_signal(name, n, max_n):
    """The max-min certificate, up to the rounding: a rollout taken from any prompt j (above
    min_n) and given to any prompt i (below max_n) leaves j at a chance of a non-degenerate group
    no higher than i reaches with it. A uniform n fails it where rates differ."""
    rates = _pools()[name]
    open_rate = (rates > 0) & (rates < 1)

    def certificate(counts):
        give = open_rate & (counts < max_n)
        take = open_rate & (counts > 2)
        if not give.any() or not take.any():
            return True
        raised = group_variance_probability(rates[give], counts[give] + 1).min()
        lowered = group_variance_probability(rates[take], counts[take] - 1).max()
        return lowered <= raised + 1e-12

    assert certificate(rollout_n_per_prompt(rates, n, 2, max_n))
    assert not certificate(np.full(rates.size, n))


def test_the_worked_example_and_the_table_in_the_docs():
    rates = np.array(WORKED_RATES)
    assert rollout_n_per_prompt(rates, 8, 2, 32).tolist() == [16, 3, 2, 3, 16]
    assert rollout_n_per_prompt(rates, 16, 2, 64).tolist() == [33, 6, 2, 6, 33]
    # docs/howto/trainers.md gives P(group has variance) to three places and the allocations above
    text = (REPO / "docs" / "howto" / "trainers.md").read_text()
    for n in (8, 16):
        row = re.search(rf"^\| P\(variance\), n = {n} \|(.*)\|$", text, re.MULTILINE)
        assert row, f"the docs table has no row for n = {n}"
        shown = [float(cell) for cell in row.group(1).split("|")]
        assert shown == [round(float(p), 3) for p in group_variance_probability(rates, n)]
    for n, max_n in ((8, 32), (16, 64)):
        counts = rollout_n_per_prompt(rates, n, 2, max_n)
        row = re.search(rf"^\| rollouts, n = {n}, max_n = {max_n} \|(.*)\|$", text, re.MULTILINE)
        assert row, f"the docs table has no allocation row for n = {n}"
        assert [int(cell) for cell in row.group(1).split("|")] == counts.tolist()
        row = re.search(rf"^\| P\(variance\) with them, n = {n} \|(.*)\|$", text, re.MULTILINE)
        assert row, f"the docs table has no row for the chances at n = {n}"
        assert [float(cell) for cell in row.group(1).split("|")] == [
            round(float(p), 3) for p in group_variance_probability(rates, counts)]


@needs_verl
def test_the_settings_table_in_the_docs_is_the_declaration():
    text = (REPO / "docs" / "howto" / "trainers.md").read_text()
    for field in declared(RolloutNFromPrior):
        default = default_of(field)
        shown = "required" if default is dataclasses.MISSING else f"`{default}`"
        assert f"| `{field.name}` | {shown} | {help_text(field)} |" in text, field.name


def test_more_rollouts_the_further_the_rate_from_one_half():
    rates = np.array([0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.02, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98])
    counts = rollout_n_per_prompt(rates, 12, 2, 64)
    order = np.argsort(np.abs(rates - 0.5), kind="stable")
    assert np.all(np.diff(counts[order]) >= -1)  # within the rounding
    assert counts[rates == 0.5][0] == 2 and counts[rates == 0.02][0] > counts[rates == 0.1][0] > counts[rates == 0.3][0]
    # P is symmetric in r and 1 - r, and so is the allocation
    assert counts[rates == 0.1][0] == counts[rates == 0.9][0] and counts[rates == 0.02][0] == counts[rates == 0.98][0]


def test_rates_of_exactly_zero_or_one_get_min_n_until_the_rest_is_full():
    # P = 0 at any n for r in {0, 1}: a rollout more cannot help, the others take the budget
    assert rollout_n_per_prompt([0.0, 1.0, 0.5, 0.5], 8, 2, 32).tolist() == [2, 2, 14, 14]
    # the others at max_n: the rest is shared evenly by the degenerate prompts
    assert rollout_n_per_prompt([0.0, 1.0, 0.3, 0.7], 8, 2, 9).tolist() == [7, 7, 9, 9]
    assert rollout_n_per_prompt([0.0, 1.0, 0.0], 8, 2, 32).tolist() == [8, 8, 8]


def test_largest_remainder_rounding_is_exact_and_by_position_on_ties():
    # 0.3 is at max_n = 5; three degenerate prompts share the other 11 evenly, 3.67 each: the
    # floors give 9, and the two units left go to the first two positions
    assert rollout_n_per_prompt([0.0, 1.0, 0.0, 0.3], 4, 2, 5).tolist() == [4, 4, 3, 5]
    assert rollout_n_per_prompt([0.3, 0.0, 1.0, 0.0], 4, 2, 5).tolist() == [5, 4, 4, 3]


def test_pass_rates_near_zero_get_their_rollouts_instead_of_an_internal_error():
    """The level was bisected on s with an absolute resolution of ~1e-18: a rate <= ~1e-19 rises
    from min_n to max_n inside one step, the bisection ended at s = 0 and the rounding raised
    "a bug, not an input" on valid rates."""
    assert rollout_n_per_prompt([0.5, 1e-300], 5, 3, 27).tolist() == [3, 7]
    assert rollout_n_per_prompt([0.5, 1e-300, 1.0], 5, 3, 27).tolist() == [3, 9, 3]
    assert rollout_n_per_prompt([1e-300], 5, 3, 27).tolist() == [5]
    assert rollout_n_per_prompt([0.5, 5e-324, 1e-310, 1e-200, 1e-19, 1e-18, 1e-20], 8, 2, 64).tolist() == [
        2, 44, 2, 2, 2, 2, 2]  # the least rate takes what the others leave (max-min)
    rng = np.random.default_rng(0)
    for _ in range(300):
        size = int(rng.integers(1, 20))
        rates = 10.0 ** rng.uniform(-323, 0, size)
        rates = np.where(rng.random(size) < 0.3, 1 - rates, rates)
        min_n = int(rng.integers(1, 5))
        n = int(rng.integers(min_n, min_n + 8))
        max_n = int(rng.integers(n, n + 40))
        counts = rollout_n_per_prompt(rates, n, min_n, max_n)
        assert counts.sum() == n * size and counts.min() >= min_n and counts.max() <= max_n


def test_ordinary_rates_keep_their_counts():
    """Pinned against the allocation before the level was refined in ln s for rates near 0."""
    import hashlib

    r = [0.02, 0.1, 0.5, 0.9, 0.98]
    assert rollout_n_per_prompt(r, 8, 2, 32).tolist() == [16, 3, 2, 3, 16]
    assert rollout_n_per_prompt(r, 16, 2, 64).tolist() == [33, 6, 2, 6, 33]
    assert rollout_n_per_prompt([0.5, 1e-12], 5, 3, 27).tolist() == [3, 7]
    assert rollout_n_per_prompt([0.3, 0.7, 1e-17], 8, 2, 32).tolist() == [2, 2, 20]
    assert rollout_n_per_prompt(np.random.default_rng(3).random(12), 6, 2, 20).tolist() == [
        14, 5, 5, 3, 12, 3, 3, 7, 4, 10, 3, 3]
    assert rollout_n_per_prompt([0.5, 0.5, 1 - 1e-15, 1.0, 0.0, 0.25], 8, 2, 32).tolist() == [3, 3, 32, 2, 2, 6]
    rng = np.random.default_rng(7)
    digest = hashlib.sha256()
    for trial in range(400):
        size = int(rng.integers(1, 30))
        rates = [rng.random(size), rng.integers(0, 17, size) / 16, rng.beta(0.3, 0.3, size),
                 rng.choice([0.0, 1.0, 1e-12, 1 - 1e-12, 0.5, 1e-9, 0.02], size)][trial % 4]
        min_n = int(rng.integers(2, 5))
        n = int(rng.integers(min_n, min_n + 10))
        max_n = int(rng.integers(n, n + 40))
        digest.update(rollout_n_per_prompt(rates, n, min_n, max_n).tobytes())
    assert digest.hexdigest() == "10f16e8c43828f7daabe9bc8748a5d1461a5913d67903fee089813e8be015187"


def test_empty_pass():
    assert rollout_n_per_prompt([], 8, 2, 32).tolist() == []


@pytest.mark.parametrize("rates, says", [
    ([0.5, float("nan")], "rates[1] = nan"), ([0.5, 0.2, 1.5], "rates[2] = 1.5"), ([-0.1], "rates[0] = -0.1"),
])
def test_rates_outside_zero_one_are_refused_by_position(rates, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        rollout_n_per_prompt(rates, 8, 2, 32)


def test_bounds_that_cannot_hold_the_total_are_refused():
    with pytest.raises(ValueError, match="min_n <= n <= max_n"):
        rollout_n_per_prompt([0.5], 8, 2, 6)


# ------------------------------------------------------------------------------- the option


def _data_config(**trajval):
    root = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 6}},
                             "data": {"seed": None, "trajval": trajval}})
    return root.data  # verl hands the dataset this node; interpolations still see the root


@needs_verl
def test_off_by_default_and_interpolation_from_verls_rollout_n():
    assert trajval_options(_data_config())["rollout_n_from_prior"] is None
    settings = trajval_options(_data_config(rollout_n_from_prior={"n": "${actor_rollout_ref.rollout.n}",
                                                                  "max_n": 24}))["rollout_n_from_prior"]
    assert settings == RolloutNFromPrior(n=6, max_n=24, min_n=2, rate_key="trajval_r_early")


@needs_verl
@pytest.mark.parametrize("given, error, says", [
    ({"n": 8, "max_n": 32, "min_n": 1}, ValueError,
     "rollout_n_from_prior.min_n must be in [2, inf) (a group of one never has variance"),
    ({"n": 8, "max_n": 6}, ValueError, "min_n <= n <= max_n is needed"),
    ({"n": 8}, ValueError, "n and max_n are required"),
    ({"n": 8, "max_n": 32, "max": 40}, ValueError, "unknown option(s) ['max']"),
    ({"n": "8", "max_n": 32}, ValueError, "rollout_n_from_prior.n must be an integer"),
    (8, TypeError, "rollout_n_from_prior must be a mapping"),
])
def test_bad_settings_are_refused_naming_the_setting(given, error, says):
    with pytest.raises(error, match=re.escape(says)):
        trajval_options(_data_config(rollout_n_from_prior=given))


@needs_verl
@pytest.mark.parametrize("threshold, says", [(float("nan"), "must be a finite number, got nan"),
                                             (float("inf"), "must be a finite number, got inf"),
                                             ("0.5", "must be a number, got str '0.5'")])
def test_a_reward_threshold_that_is_no_finite_number_is_refused(threshold, says):
    """A NaN threshold counted every rollout unsolved (reward > nan is false), silently."""
    with pytest.raises(ValueError, match=re.escape(f"data.trajval.reward_threshold {says}")):
        trajval_options(_data_config(online="greso", reward_threshold=threshold))


@needs_verl
def test_online_draws_are_refused_with_rollouts_from_the_prior():
    with pytest.raises(ValueError, match="legacy trainer, which ignores __rollout_n__"):
        trajval_options(_data_config(online="greso", rollout_n_from_prior={"n": 8, "max_n": 32}))
