"""Online composition w_final = w_trajval * w_online with simulated rollout feedback."""

import json

import numpy as np
import pytest

from trajval_ops.samplers import BotsScheduler, ComposedSampler, GresoScheduler, group_feedback, zero_variance_mask

G = 16  # rollouts per task (paper: n = 16)


def _rollouts(tasks, pass_prob, rng):
    """Simulated binary rewards: G rollouts per task with the task's true pass probability."""
    ids = np.repeat(tasks, G)
    return ids, (rng.random(ids.size) < pass_prob[ids]).astype(float)


def _run(composed, pass_prob, steps, batch=16, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.zeros(composed.num_tasks, dtype=np.int64)
    for _ in range(steps):
        tasks = composed.draw(batch)
        counts += np.bincount(tasks, minlength=composed.num_tasks)
        composed.feedback(*_rollouts(tasks, pass_prob, rng))
    return counts


def test_group_feedback_and_dapo_mask():
    ids = [3, 3, 3, 1, 1, 1, 0, 0]
    rewards = [1, 0, 1, -1, -1, -1, 1, 1]  # DAPO-style -1/1 rewards work with the threshold
    tasks, rate, counts, zero_var = group_feedback(ids, rewards, num_tasks=4)
    assert tasks.tolist() == [0, 1, 3]
    assert rate.tolist() == [1.0, 0.0, pytest.approx(2 / 3)]
    assert counts.tolist() == [2, 3, 3]
    assert zero_var.tolist() == [True, True, False]
    assert zero_variance_mask(ids, rewards).tolist() == [True] * 3 + [False] * 5


def test_feedback_rejects_bad_input():
    composed = ComposedSampler(np.ones(4))
    with pytest.raises(ValueError, match="task index 9"):
        composed.feedback([0, 9], [1.0, 0.0])
    with pytest.raises(ValueError, match="differ in length"):
        composed.feedback([0, 1], [1.0])
    with pytest.raises(ValueError, match="not finite"):
        composed.feedback([0, 1], [1.0, float("nan")])


def test_greso_keep_probability_follows_the_streak():
    greso = GresoScheduler(3)
    greso.set_epoch(1)  # p adapts from the second epoch on
    for _ in range(3):  # task 0 always solved, task 1 never, task 2 mixed
        greso.update(np.array([0, 1, 2]), np.array([1.0, 0.0, 0.5]), np.full(3, G), np.array([True, True, False]))
    keep = greso.online_weights()
    assert keep[0] == pytest.approx(max(greso.p_easy ** 3, 0.01))
    assert keep[1] == pytest.approx(max(greso.p_hard ** 3, 0.01))
    assert keep[2] == 1.0
    # two of three groups zero-variance every step: above both targets, so both p fell by 0.01 a step
    assert greso.p_easy == pytest.approx(0.47) and greso.p_hard == pytest.approx(0.47)
    greso.update(np.array([0]), np.array([0.5]), np.array([G]), np.array([False]))
    assert greso.online_weights()[0] == 1.0  # streak broken


def test_greso_p_is_frozen_in_the_first_epoch_and_adapts_with_greater_or_equal():
    greso = GresoScheduler(12)
    tasks, rates, zero = np.arange(12), np.full(12, 0.5), np.zeros(12, dtype=bool)
    rates[0], zero[0] = 1.0, True  # 1 of 12 all-correct = 0.0833 = the easy target tzv/3 exactly
    rates[1:3], zero[1:3] = 0.0, True  # 2 of 12 all-wrong = 0.1667 = the hard target exactly
    greso.update(tasks, rates, np.full(12, 8), zero)
    assert greso.p_easy == 0.5 and greso.p_hard == 0.5  # epoch 0: frozen
    assert greso.easy_streak[0] == 1 and greso.hard_streak[1] == 1  # ...but traces are recorded
    greso.set_epoch(1)
    greso.update(tasks, rates, np.full(12, 8), zero)
    assert greso.p_easy == pytest.approx(0.49) and greso.p_hard == pytest.approx(0.49)  # >= target: skip more


@pytest.mark.parametrize("n", [8, 16])
def test_greso_easy_and_hard_are_zero_variance_groups_at_any_n(n):
    """One correct rollout of n has reward spread: neither easy nor hard, at n = 8 and at n = 16
    (GRESO's mean <= 0.11 rule would call 1/16 = 0.0625 all-wrong)."""
    greso = GresoScheduler(3)
    one_correct = 1 / n
    greso.update(np.array([0, 1, 2]), np.array([one_correct, 0.0, 1.0]), np.full(3, n),
                 np.array([False, True, True]))
    assert greso.hard_streak.tolist() == [0, 1, 0]
    assert greso.easy_streak.tolist() == [0, 0, 1]
    assert greso.online_weights()[0] == 1.0


def test_greso_keep_mask_flips_coins_with_the_keep_probability():
    greso = GresoScheduler(2)
    for _ in range(2):
        greso.update(np.array([0, 1]), np.array([1.0, 0.5]), np.full(2, G), np.array([True, False]))
    candidates = np.repeat([0, 1], 20_000)
    kept = greso.keep_mask(candidates, np.random.default_rng(0))
    assert kept[20_000:].all()
    assert kept[:20_000].mean() == pytest.approx(greso.online_weights()[0], abs=0.01)


def test_greso_probabilities_stay_clipped():
    greso = GresoScheduler(1)
    greso.set_epoch(1)
    for _ in range(200):
        greso.update(np.array([0]), np.array([0.5]), np.array([G]), np.array([False]))
    assert greso.p_easy == pytest.approx(0.95) and greso.p_hard == pytest.approx(0.95)


def test_greso_skips_an_always_solved_task_more_and_prior_still_shifts_mass():
    n = 40
    pass_prob = np.full(n, 0.5)
    pass_prob[:10] = 1.0  # always solved
    prior = np.ones(n)
    prior[20:30] = 4.0  # TrajVal prior favours tasks 20-29 (all mixed difficulty)
    uniform = _run(ComposedSampler(np.ones(n), seed=1), pass_prob, steps=150)
    greso = _run(ComposedSampler(np.ones(n), online=GresoScheduler(n), seed=1), pass_prob, steps=150)
    composed = _run(ComposedSampler(prior, online=GresoScheduler(n), seed=1), pass_prob, steps=150)
    share = lambda c, sl: c[sl].sum() / c.sum()  # noqa: E731
    assert share(greso, slice(0, 10)) < 0.5 * share(uniform, slice(0, 10))  # solved tasks skipped
    assert share(composed, slice(0, 10)) < 0.5 * share(uniform, slice(0, 10))
    # the prior still shifts mass: tasks 20-29 get far more than the other mixed tasks
    assert composed[20:30].mean() > 2.5 * composed[np.r_[10:20, 30:40]].mean()


def test_bots_posterior_follows_feedback():
    bots = BotsScheduler(2, thompson=False)
    for _ in range(30):
        bots.update(np.array([0, 1]), np.array([1.0, 0.5]), np.full(2, G), np.array([True, False]))
    mean = bots.posterior_mean()
    assert mean[0] > 0.95 and mean[1] == pytest.approx(0.5, abs=0.01)
    w = bots.online_weights()
    assert w[1] == pytest.approx(1.0, abs=0.03) and w[0] == pytest.approx(np.exp(-(mean[0] - 0.5) / 0.5))


def test_bots_update_matches_the_formula_by_hand():
    bots = BotsScheduler(2, m=16, lam=0.1, rho=0.1, thompson=False)
    bots.update(np.array([0]), np.array([0.75]), np.array([16]), np.array([False]))
    # observed task: 0.9*1 + 0.1 + 0.9*12 + 0.1*0.75*16 = 13.0 ; beta: 0.9 + 0.1 + 0.9*4 + 0.1*0.25*16 = 5.0
    assert bots.pseudo_successes[0] == pytest.approx(13.0) and bots.pseudo_failures[0] == pytest.approx(5.0)
    # unobserved task: p_ref = posterior mean 0.5 -> 0.9 + 0.1 + 0.1*0.5*16 = 1.8 each
    assert bots.pseudo_successes[1] == pytest.approx(1.8) and bots.pseudo_failures[1] == pytest.approx(1.8)


def test_bots_prefers_tasks_near_the_target_and_prior_still_shifts_mass():
    n = 30
    pass_prob = np.concatenate([np.full(10, 1.0), np.full(10, 0.0), np.full(10, 0.5)])
    prior = np.ones(n)
    prior[20:25] = 4.0
    bots = _run(ComposedSampler(np.ones(n), online=BotsScheduler(n), seed=3), pass_prob, steps=120)
    composed = _run(ComposedSampler(prior, online=BotsScheduler(n), seed=3), pass_prob, steps=120)
    assert bots[20:].sum() > 1.5 * bots[:10].sum() and bots[20:].sum() > 1.5 * bots[10:20].sum()
    assert composed[20:25].mean() > 2.5 * composed[25:30].mean()


def test_composed_state_dict_resumes_exactly():
    n = 50
    pass_prob = np.random.default_rng(0).random(n)
    for online in (GresoScheduler(n), BotsScheduler(n)):
        a = ComposedSampler(np.linspace(0.05, 1, n), online=online, seed=4)
        _run(a, pass_prob, steps=5)
        state = json.loads(json.dumps(a.state_dict(), default=lambda x: x.tolist()))
        b = ComposedSampler(np.linspace(0.05, 1, n), online=type(online)(n), seed=4)
        b.load_state_dict(state)
        assert np.array_equal(_run(a, pass_prob, steps=4, seed=9), _run(b, pass_prob, steps=4, seed=9))


@pytest.mark.parametrize("scheduler", [GresoScheduler, BotsScheduler])
def test_composed_resumes_exactly_when_saved_between_draw_and_feedback(scheduler):
    n = 50
    pass_prob = np.random.default_rng(0).random(n)
    a = ComposedSampler(np.linspace(0.05, 1, n), online=scheduler(n), seed=4)
    _run(a, pass_prob, steps=3)
    a.draw(16)  # weights rebuilt (a Thompson sample for BOTS), no feedback yet
    state = json.loads(json.dumps(a.state_dict(), default=lambda x: x.tolist()))
    b = ComposedSampler(np.linspace(0.05, 1, n), online=scheduler(n), seed=4)
    b.load_state_dict(state)
    assert np.array_equal(a.draw(16), b.draw(16))
    assert np.array_equal(_run(a, pass_prob, steps=3, seed=2), _run(b, pass_prob, steps=3, seed=2))


def test_composed_refuses_a_state_with_another_prior():
    a = ComposedSampler(np.ones(5), online=GresoScheduler(5))
    b = ComposedSampler(np.arange(1, 6, dtype=float), online=GresoScheduler(5))
    with pytest.raises(ValueError, match="different prior"):
        b.load_state_dict(a.state_dict())


def test_pass_rate_feedback_trinity_form():
    composed = ComposedSampler(np.ones(3), online=BotsScheduler(3, thompson=False))
    composed.feedback_pass_rates([0, 2], [1.0, 0.5], num_rollouts=G)
    assert composed.online.posterior_mean()[0] > composed.online.posterior_mean()[2]
    with pytest.raises(ValueError, match="outside"):
        composed.feedback_pass_rates([0], [1.5], num_rollouts=G)


def test_bots_interpolates_reference_pass_rates_for_unobserved_tasks():
    """Hand-computed BOTS update (Trinity-RFT's InterpolationBetaPREstimator), m=16, lam=rho=0.1."""
    f0 = np.array([0.2, 0.4, 0.0, 0.5])  # weaker reference model
    f1 = np.array([0.6, 0.8, 1.0, 0.5])  # stronger reference model
    bots = BotsScheduler(4, m=16, lam=0.1, rho=0.1, reference_pass_rates=(f0, f1), thompson=False)
    # batch: tasks 0 and 1 observed at 0.5 and 0.75 -> mean 0.625; f0 mean 0.3, f1 mean 0.7
    bots.update(np.array([0, 1]), np.array([0.5, 0.75]), np.full(2, 16), np.array([False, False]))
    c = (0.625 - 0.3) / (0.7 - 0.3 + 1e-6)  # first batch: c taken as is
    assert bots.capability == pytest.approx(c)
    # observed: alpha = 0.9*1 + 0.1 + 16 r (rho has no effect on observed tasks)
    assert bots.pseudo_successes[0] == pytest.approx(1.0 + 8.0) and bots.pseudo_failures[0] == pytest.approx(1.0 + 8.0)
    assert bots.pseudo_successes[1] == pytest.approx(1.0 + 12.0) and bots.pseudo_failures[1] == pytest.approx(1.0 + 4.0)
    # unobserved task 2: p~ = clip(0 + c * 1) = 0.8125; alpha = 1 + 0.1*16*p~
    p2 = min(max(0.0 + c * 1.0, 0.0), 1.0)
    assert bots.pseudo_successes[2] == pytest.approx(1.0 + 1.6 * p2) and bots.pseudo_failures[2] == pytest.approx(1.0 + 1.6 * (1 - p2))
    # task 3: f0 == f1 -> p~ = 0.5 whatever c
    assert bots.pseudo_successes[3] == pytest.approx(1.8) and bots.pseudo_failures[3] == pytest.approx(1.8)
    # second batch: c is smoothed, c <- 0.9 c + 0.1 c_batch
    bots.update(np.array([2]), np.array([1.0]), np.array([16]), np.array([True]))
    c_batch = (1.0 - 0.0) / (1.0 - 0.0 + 1e-6)
    assert bots.capability == pytest.approx(0.9 * c + 0.1 * c_batch)
    state = bots.state_dict()
    again = BotsScheduler(4, reference_pass_rates=(f0, f1))
    again.load_state_dict(state)
    assert again.capability == bots.capability


def test_bots_reference_pass_rates_are_checked():
    with pytest.raises(ValueError, match="f1 must be pass rates"):
        BotsScheduler(2, reference_pass_rates=([0.1, 0.2], [0.5, 1.5]))
    with pytest.raises(ValueError, match="weaker model"):
        BotsScheduler(2, reference_pass_rates=([0.1, 0.2],))


def test_bots_adaptive_rho_halves_rho_when_the_implicit_pass_rates_miss_by_a_quarter():
    """Trinity's adaptive_rho, by hand: rho halves before the update when the implicit pass rates
    of the observed tasks (here the posterior mean, 0.5) miss their observed rates by >= 0.25."""
    bots = BotsScheduler(2, m=16, lam=0.1, rho=0.2, thompson=False, adaptive_rho=True)
    fixed = BotsScheduler(2, m=16, lam=0.1, rho=0.2, thompson=False)
    for scheduler in (bots, fixed):
        scheduler.update(np.array([0]), np.array([1.0]), np.array([16]), np.array([True]))  # |0.5 - 1| = 0.5
    assert bots.rho == pytest.approx(0.1) and fixed.rho == 0.2
    # unobserved task 1: 0.9 + 0.1 + rho * 0.5 * 16, with the halved rho
    assert bots.pseudo_successes[1] == pytest.approx(1.8) and fixed.pseudo_successes[1] == pytest.approx(2.6)
    assert bots.pseudo_successes[0] == pytest.approx(17.0) == fixed.pseudo_successes[0]  # observed: m r either way
    bots.update(np.array([1]), np.array([0.5]), np.array([16]), np.array([False]))  # predicted 0.5 exactly
    assert bots.rho == pytest.approx(0.1)
    restored = BotsScheduler(2, rho=0.2, adaptive_rho=True)
    restored.load_state_dict(bots.state_dict())
    assert restored.rho == pytest.approx(0.1)


def test_draws_counted_in_pool_sizes_start_each_epochs_own_stream():
    weights = np.arange(1, 6, dtype=float)
    counted = ComposedSampler(weights, seed=3)
    drawn = np.concatenate([counted.draw_counting_epochs(k, so_far) for k, so_far in ((3, 0), (4, 3), (6, 7))])
    by_epoch = ComposedSampler(weights, seed=3)
    expected = []
    for epoch, count in ((0, 5), (1, 5), (2, 3)):  # 13 draws over a pool of 5
        by_epoch.set_epoch(epoch)
        expected.append(by_epoch.draw(count))
    assert drawn.tolist() == np.concatenate(expected).tolist()
    assert counted.draw_counting_epochs(0, 13).size == 0


def test_greso_adapts_when_the_epochs_are_counted_in_draws():
    greso = GresoScheduler(10)
    source = ComposedSampler(np.ones(10), online=greso, seed=0)
    for step in range(10):  # 50 draws: 5 passes over the pool of 10
        tasks = source.draw_counting_epochs(5, 5 * step)
        source.feedback(np.repeat(tasks, 4), np.ones(20))  # every task always solved
    assert greso.epoch == 4 and greso.p_easy < 0.5


def test_a_task_drawn_twice_in_a_step_is_two_groups():
    """Draws are with replacement: task 2 drawn twice, one group all solved and one all failed.
    Grouped by task, the two merged into one group with spread (kept by DAPO's mask, no GRESO
    observation); with the layout given each drawn group is judged on its own. Without one, no
    order can tell two draws apart: one group per task, as before."""
    ids = np.repeat([2, 0, 2], 4)
    rewards = np.r_[np.ones(4), [1, 0, 1, 0], np.zeros(4)]
    assert zero_variance_mask(ids, rewards).tolist() == [True] * 12
    assert zero_variance_mask(ids, rewards, group_size=4).tolist() == [False] * 4 + [True] * 4 + [False] * 4
    tasks, rate, counts, zero_var = group_feedback(ids, rewards, num_tasks=3, group_size=4)
    assert tasks.tolist() == [0, 2, 2] and rate.tolist() == [0.5, 1.0, 0.0]
    assert counts.tolist() == [4, 4, 4] and zero_var.tolist() == [False, True, True]
    greso = GresoScheduler(3)
    composed = ComposedSampler(np.ones(3), online=greso, seed=0)
    keep = composed.feedback(ids, rewards, group_size=4)
    assert keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4
    assert greso.easy_streak.tolist() == [0, 0, 0] and greso.hard_streak.tolist() == [0, 0, 0]
    composed.feedback(np.repeat([1, 1], 3), np.ones(6), group_size=3)  # two all-solved groups: two observations
    assert greso.easy_streak[1] == 2


def test_groups_reordered_or_side_by_side_are_told_apart_by_group_ids():
    """verl tags each prompt's responses with a uid and may reorder them (balance_batch); a task
    drawn twice is one group unless the layout is given, in any order (a tiled layout, a group
    split by a reorder: read per task, as before 2026-11-28)."""
    ids = np.array([1, 1, 1, 1, 1, 1])
    rewards = np.array([1, 1, 1, 0, 0, 0])
    assert zero_variance_mask(ids, rewards).tolist() == [True] * 6  # no layout: one group per task
    assert zero_variance_mask(ids, rewards, group_size=3).tolist() == [False] * 6
    uid = np.array(["a", "b", "a", "b", "a", "b"], dtype=object)
    assert zero_variance_mask(ids, [1, 0, 1, 0, 1, 0], group_ids=uid).tolist() == [False] * 6
    assert zero_variance_mask([1, 2, 1, 2], [1, 0, 1, 0]).tolist() == [False] * 4  # np.tile's layout
    assert zero_variance_mask([0, 0, 1, 1, 0, 0], [1, 1, 0, 1, 0, 0]).tolist() == [True] * 6  # a split group
    with pytest.raises(ValueError, match="rollout 1: task 2 in the group of rollout 0"):
        zero_variance_mask([1, 2], [1, 0], group_size=2)
    with pytest.raises(ValueError, match="group_size=3 does not divide the 4 rollouts"):
        zero_variance_mask([1, 1, 2, 2], [1, 0, 1, 0], group_size=3)
    # 2.5 was read as groups of 2, and a None label failed in numpy's sort with a bare TypeError
    with pytest.raises(ValueError, match="group_size must be a whole number of rollouts, got 2.5"):
        zero_variance_mask([1, 1, 2, 2], [1, 0, 1, 0], group_size=2.5)
    with pytest.raises(ValueError, match="rollout 2: group_ids holds None"):
        zero_variance_mask([1, 1, 2, 2], [1, 0, 1, 0], group_ids=np.array(["a", "a", None, "b"], dtype=object))
    assert zero_variance_mask([1, 1, 2, 2], [1, 0, 1, 1], group_size=2.0).tolist() == [True, True, False, False]


def test_bots_observes_a_task_drawn_twice_once_at_its_pooled_rate():
    pooled = BotsScheduler(3, thompson=False)
    pooled.update(np.array([0, 2, 2]), np.array([0.5, 1.0, 0.0]), np.array([4, 4, 4]), np.array([False, True, True]))
    once = BotsScheduler(3, thompson=False)
    once.update(np.array([0, 2]), np.array([0.5, 0.5]), np.array([4, 8]), np.array([False, False]))
    assert pooled.state_dict()["pseudo_successes"].tolist() == once.state_dict()["pseudo_successes"].tolist()
    assert pooled.state_dict()["pseudo_failures"].tolist() == once.state_dict()["pseudo_failures"].tolist()


@pytest.mark.parametrize("scheduler, settings, message", [
    (BotsScheduler, {"m": 2.7}, r"m must be an integer, got float 2\.7"),  # was read as 2
    (BotsScheduler, {"rho": 1.5}, r"rho must be in \[0, 1\] \(the evidence is .*\), got 1\.5"),  # ran on
    (BotsScheduler, {"rho": -0.1}, r"rho must be in \[0, 1\]"),
    (BotsScheduler, {"lam": 1.2}, r"lam must be in \[0, 1\]"),
    (BotsScheduler, {"m": 0}, r"m must be in \[1, inf\)"),
    (BotsScheduler, {"target": 1.5}, r"target must be in \[0, 1\]"),
    (BotsScheduler, {"tau": 0}, r"tau must be in \(0, inf\)"),
    (BotsScheduler, {"tau": "0.5"}, r"tau must be a number, got str '0\.5'"),
    (BotsScheduler, {"thompson": "yes"}, r"thompson must be true or false"),
    (GresoScheduler, {"min_keep": 0}, r"min_keep must be in \(0, 1\]"),
    (GresoScheduler, {"p_step": 2}, r"p_step must be in \[0, 1\]"),
    (GresoScheduler, {"p_min": 0.9, "p_max": 0.1}, r"p_min 0\.9 must not exceed p_max 0\.1"),
])
def test_a_scheduler_setting_outside_its_declaration_is_refused_when_built_naming_it(scheduler, settings, message):
    """The settings failed only at the first feedback, naming none (or never: m 2.7 was read as 2,
    rho 1.5 made pseudo-counts negative)."""
    with pytest.raises(ValueError, match=message):
        scheduler(4, **settings)


def test_a_success_threshold_must_be_a_finite_number():
    for threshold in (float("nan"), float("inf"), "0.5"):
        with pytest.raises(ValueError, match="success_threshold must be a"):
            ComposedSampler(np.ones(3), success_threshold=threshold)
