"""Online schedulers the TrajVal prior composes with: ``w_final(x, t) = w_trajval(x) * w_online(x, t)``.

Reference implementations driven by per-step rollout feedback (numpy only):

- :class:`GresoScheduler` -- GRESO-style pre-rollout skipping (Zheng et al., 2025). A task whose
  rollout groups were all-correct (or all-wrong) for ``c`` consecutive observations is kept with
  probability ``max(p ** c, min_keep)`` (skip probability ``1 - max(p ** c, 0.01)``); ``p_easy``
  and ``p_hard`` start at 0.5 and move by 0.01 per step toward target zero-variance ratios
  ``tzv / 3`` (easy) and ``2 * tzv / 3`` (hard), ``tzv = 0.25``, clipped to [0.05, 0.95].
  Its online weight is the keep probability, so composing it multiplies the prior by the chance
  the task survives GRESO's filter (skipping in expectation); :meth:`GresoScheduler.keep_mask`
  does the literal per-candidate coin flip.
- :class:`BotsScheduler` -- BOTS-style Bayesian selection (Trinity-RFT ``difficulty_based``): a
  Beta posterior of each task's pass rate (pseudo-counts of successes and failures), updated
  with discount ``lam`` and pseudo-count weight ``rho`` over ``m`` rollouts; a Thompson sample ``p~`` per task gives the
  online weight ``exp(-|p~ - target| / tau)``, i.e. the numerator of BOTS's
  ``softmax(-|p~ - p*| / tau)``, so composing it is BOTS sampling tilted by the prior. A new
  Thompson sample is taken once per weight update (after each feedback), not per draw, so a
  draw stays a binary search.
- :func:`zero_variance_mask` -- DAPO dynamic sampling: keep a task's group only if its rollout
  rewards are not all equal.

Feedback is what a trainer has after a step: one task index and one reward per rollout
(:func:`group_feedback` groups them by drawn group: draws are with replacement, so a task drawn
twice in a step has two groups, each judged on its own). Rewards are reduced to binary accuracy with
``success_threshold`` (reward > threshold counts as solved), so shaped rewards such as
DAPO's -1/1 work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from trajval_ops.core import compose_online
from trajval_ops.samplers.weighted import WeightedIndexSampler
from trajval_ops.settings import check_settings, setting, value_problem, whole_number

DEFAULT_SUCCESS_THRESHOLD = 0.5


@dataclass(frozen=True)
class GresoSettings:
    """GRESO's settings; the defaults are its paper's."""

    target_zero_variance: float = setting(0.25, "tzv: the share of zero-variance groups a step aims at; the targets "
                                          "are tzv / 3 (all correct, easy) and 2 tzv / 3 (all wrong, hard).", ge=0, le=1)
    p_init: float = setting(0.5, "initial p_easy and p_hard.", ge=0, le=1)
    p_step: float = setting(0.01, "per-step move of p_easy / p_hard.", ge=0, le=1)
    p_min: float = setting(0.05, "lower clip of p.", ge=0, le=1)
    p_max: float = setting(0.95, "upper clip of p.", ge=0, le=1)
    min_keep: float = setting(0.01, "floor of the keep probability (GRESO's 0.01).", gt=0, le=1)

    def __post_init__(self):
        check_settings(self)
        if self.p_min > self.p_max:
            raise ValueError(f"p_min {self.p_min} must not exceed p_max {self.p_max}")


@dataclass(frozen=True)
class BotsSettings:
    """BOTS's settings; the defaults are its paper's (as the TrajVal paper runs it), not
    Trinity-RFT's ``difficulty_based`` defaults."""

    m: int = setting(16, "rollouts per task: one observation adds m pseudo-counts.", ge=1)
    lam: float = setting(0.1, "discount of the history, lambda (Trinity: lamb): each update keeps 1 - lam of the "
                         "pseudo-counts (0: nothing forgotten, 1: only the prior and the last step).", ge=0, le=1)
    rho: float = setting(0.1, "weight of the implicit (reference) evidence against the observed.", ge=0, le=1,
                         why="the evidence is (1 - rho) observed + rho implicit: outside, a pseudo-count turns negative")
    target: float = setting(0.5, "target pass rate p* (Trinity: target_reward).", ge=0, le=1,
                            why="a pass rate")
    tau: float = setting(0.5, "temperature of the weight exp(-|p~ - target| / tau).", gt=0)
    thompson: bool = setting(True, "sample p~ from each task's posterior (True) or use its mean (Trinity: "
                             "do_sample).")
    adaptive_rho: bool = setting(False, "halve rho on a step whose implicit pass rates miss the observed ones "
                                 "(Trinity's adaptive_rho).")

    def __post_init__(self):
        check_settings(self)


def rollout_groups(task_ids, group_size: int | None = None, group_ids=None) -> np.ndarray:
    """The drawn group of each rollout: one number per rollout, groups numbered from 0 by task and
    then by their first rollout.

    Draws are with replacement, so a task can be drawn twice in a step; each draw's rollouts are a
    group of their own. ``group_size``: the rollouts come in consecutive groups of that many (TRL's
    ``num_generations``, ``np.repeat(tasks, n)``); ``group_ids``: one label per rollout naming its
    group (verl's ``uid``), for batches whose rollouts were reordered. With neither, a group is a
    task's rollouts (a task drawn twice is one group), whatever their order.
    """
    ids = np.asarray(task_ids, dtype=np.int64).reshape(-1)
    if group_size is not None and group_ids is not None:
        raise ValueError("give group_size or group_ids, not both")
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if group_ids is not None:
        labels = np.asarray(group_ids).reshape(-1)
        if labels.shape != ids.shape:
            raise ValueError(f"task_ids and group_ids differ in length: {ids.size} vs {labels.size}")
        missing = [at for at, label in enumerate(labels.tolist()) if label is None] if labels.dtype == object else []
        if missing:
            raise ValueError(f"rollout {missing[0]}: group_ids holds None; every rollout names its group")
        _, first, raw = np.unique(labels, return_index=True, return_inverse=True)
        raw = raw.reshape(-1)
    elif group_size is not None:
        if isinstance(group_size, bool) or not float(group_size).is_integer():  # 2.5 would be read as 2
            raise ValueError(f"group_size must be a whole number of rollouts, got {group_size!r}")
        if int(group_size) < 1 or ids.size % int(group_size):
            raise ValueError(f"group_size={group_size} does not divide the {ids.size} rollouts into groups")
        raw = np.arange(ids.size) // int(group_size)
        first = np.arange(0, ids.size, int(group_size))
    else:  # the layout unknown: one group per task, as no order can tell two draws apart
        _, first, raw = np.unique(ids, return_index=True, return_inverse=True)
        raw = raw.reshape(-1)
    mixed = np.flatnonzero(ids != ids[first][raw])
    if mixed.size:
        at = int(mixed[0])
        raise ValueError(f"rollout {at}: task {int(ids[at])} in the group of rollout {int(first[raw[at]])}, "
                         f"which answers task {int(ids[first[raw[at]]])}: a group is one task's rollouts")
    order = np.lexsort((first, ids[first]))  # by task, then by where the group starts
    number = np.empty(order.size, dtype=np.int64)
    number[order] = np.arange(order.size)
    return number[raw]


def group_feedback(task_ids, rewards, num_tasks: int, success_threshold: float = DEFAULT_SUCCESS_THRESHOLD,
                   group_size: int | None = None, group_ids=None):
    """Group per-rollout feedback by drawn group (see :func:`rollout_groups`).

    :param task_ids: one task index per rollout.
    :param rewards: one reward per rollout, same length.
    :param group_size: consecutive groups of this many rollouts, or
    :param group_ids: one group label per rollout; with neither, one group per task.
    :return: ``(tasks, pass_rate, num_rollouts, zero_variance)``, one entry per group, ordered by
        task (a task drawn twice in the step has two entries): its task, its fraction of rollouts
        with reward > ``success_threshold``, its rollouts, and whether all its raw rewards are equal.
    """
    return _grouped_feedback(task_ids, rewards, num_tasks, success_threshold, group_size, group_ids)[:4]


def _grouped_feedback(task_ids, rewards, num_tasks, success_threshold, group_size, group_ids):
    """:func:`group_feedback`'s four arrays and the group of each rollout."""
    ids = np.asarray(task_ids, dtype=np.int64).reshape(-1)
    values = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if ids.shape != values.shape:
        raise ValueError(f"task_ids and rewards differ in length: {ids.size} vs {values.size}")
    if ids.size == 0:
        raise ValueError("empty feedback: no rollouts")
    if not np.isfinite(values).all():
        raise ValueError(f"reward of rollout {int(np.flatnonzero(~np.isfinite(values))[0])} is not finite")
    if ids.min() < 0 or ids.max() >= num_tasks:
        bad = int(np.flatnonzero((ids < 0) | (ids >= num_tasks))[0])
        raise ValueError(f"rollout {bad}: task index {int(ids[bad])} outside the pool [0, {num_tasks})")
    group = rollout_groups(ids, group_size, group_ids)
    counts = np.bincount(group)
    tasks = np.zeros(counts.size, dtype=np.int64)
    tasks[group] = ids
    solved = np.bincount(group, weights=(values > success_threshold).astype(np.float64))
    low = np.full(counts.size, np.inf)
    high = np.full(counts.size, -np.inf)
    np.minimum.at(low, group, values)
    np.maximum.at(high, group, values)
    return tasks, solved / counts, counts, low == high, group


def zero_variance_mask(task_ids, rewards, group_size: int | None = None, group_ids=None) -> np.ndarray:
    """DAPO dynamic sampling, per rollout: True where the rollout's group has reward spread.

    Drop the rollouts where this is False: with identical rewards the group advantage is zero. The
    groups are the drawn groups (``group_size`` / ``group_ids`` as in :func:`rollout_groups`).
    """
    ids = np.asarray(task_ids, dtype=np.int64).reshape(-1)
    num_tasks = int(ids.max()) + 1 if ids.size else 0
    *_, zero_var, group = _grouped_feedback(ids, rewards, num_tasks, DEFAULT_SUCCESS_THRESHOLD, group_size, group_ids)
    return ~zero_var[group]


class GresoScheduler:
    """GRESO-style probabilistic pre-rollout skipping of tasks with a zero-variance streak.

    :param num_tasks: pool size.
    :param settings: :class:`GresoSettings`, by name (checked: a bad value raises a ValueError
        naming the setting).
    """

    Settings = GresoSettings

    def __init__(self, num_tasks: int, **settings):
        self.settings = GresoSettings(**settings)
        self.num_tasks = whole_number(num_tasks, "num_tasks", 1)
        self.target_easy = self.settings.target_zero_variance / 3
        self.target_hard = 2 * self.settings.target_zero_variance / 3
        self.p_step, self.p_min, self.p_max = self.settings.p_step, self.settings.p_min, self.settings.p_max
        self.min_keep = self.settings.min_keep
        self.p_easy = self.p_hard = self.settings.p_init
        self.easy_streak = np.zeros(self.num_tasks, dtype=np.int64)
        self.hard_streak = np.zeros(self.num_tasks, dtype=np.int64)
        self.epoch = 0

    def update(self, tasks, pass_rate, num_rollouts, zero_variance) -> None:
        """Record one step's grouped feedback (see :func:`group_feedback`): one entry per drawn
        group, each an observation (a task drawn twice adds two to its streak when both its groups
        were all correct, and ends it when either was not)."""
        # Easy / hard are the zero-variance groups, all correct / all wrong, for any n. (GRESO's
        # code uses mean reward >= 0.98 / <= 0.11, which means exactly that at its n = 8 only:
        # at n = 16 one correct rollout in 16 has mean 0.0625 and would count as all wrong.)
        zero_variance = np.asarray(zero_variance, dtype=bool)
        easy = zero_variance & (pass_rate >= 1.0)
        hard = zero_variance & (pass_rate <= 0.0)
        task, of_group, groups = np.unique(np.asarray(tasks, dtype=np.int64), return_inverse=True, return_counts=True)
        of_group = of_group.reshape(-1)
        all_easy = np.bincount(of_group, weights=easy, minlength=task.size) == groups
        all_hard = np.bincount(of_group, weights=hard, minlength=task.size) == groups
        self.easy_streak[task] = np.where(all_easy, self.easy_streak[task] + groups, 0)
        self.hard_streak[task] = np.where(all_hard, self.hard_streak[task] + groups, 0)
        if self.epoch < 1:
            return  # GRESO adapts p from the second epoch on (nothing is skipped in the first)
        # Too many wasted easy (hard) groups this step -> skip them more (lower p), else explore
        # more; GRESO compares with >=.
        self.p_easy = self._moved(self.p_easy, float(np.mean(easy)) >= self.target_easy)
        self.p_hard = self._moved(self.p_hard, float(np.mean(hard)) >= self.target_hard)

    def set_epoch(self, epoch: int) -> None:
        """The data epoch (0-based); p adapts from epoch 1 on, as in GRESO."""
        self.epoch = whole_number(epoch, "epoch")

    def _moved(self, p: float, above_target: bool) -> float:
        return float(np.clip(p - self.p_step if above_target else p + self.p_step, self.p_min, self.p_max))

    def online_weights(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Keep probability of each task: ``max(p ** c, min_keep)`` (1 without a streak)."""
        keep = np.ones(self.num_tasks)
        easy = self.easy_streak > 0
        hard = self.hard_streak > 0
        keep[easy] = np.maximum(self.p_easy ** self.easy_streak[easy], self.min_keep)
        keep[hard] = np.maximum(self.p_hard ** self.hard_streak[hard], self.min_keep)
        return keep

    def keep_mask(self, candidates, rng: np.random.Generator) -> np.ndarray:
        """GRESO's literal filter: one coin per candidate, True = roll it out."""
        candidates = np.asarray(candidates, dtype=np.int64)
        return rng.random(candidates.size) < self.online_weights()[candidates]

    def state_dict(self) -> dict:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard, "epoch": self.epoch,
                "easy_streak": self.easy_streak.copy(), "hard_streak": self.hard_streak.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
        self.epoch = int(state.get("epoch", 0))
        self.easy_streak = np.array(state["easy_streak"], dtype=np.int64)
        self.hard_streak = np.array(state["hard_streak"], dtype=np.int64)


class BotsScheduler:
    """BOTS: a Beta posterior of each task's pass rate, Thompson-sampled toward a target.

    After a step observing pass rates ``r_i`` of tasks ``B`` every task is updated as BOTS's
    reference implementation does (Trinity-RFT's ``InterpolationBetaPREstimator``)::

        successes <- (1-lam) successes + lam + (1-rho) s + rho m p~
        failures  <- (1-lam) failures  + lam + (1-rho) f + rho m (1 - p~)

    with ``s = m r``, ``f = m (1 - r)`` for observed tasks (0 otherwise) and ``p~`` the implicit
    pass rate: the observed ``r_i`` for tasks in ``B``; for the others, BOTS interpolates between
    two reference models' pass rates ``f0`` (weaker) and ``f1`` (stronger),
    ``p~ = clip(f0 + c (f1 - f0), 0, 1)``, with the policy's capability coefficient ``c``
    estimated on each batch as ``(mean r_B - mean f0_B) / (mean f1_B - mean f0_B + 1e-6)`` (the
    first estimate taken as is, later ones smoothed ``c <- 0.9 c + 0.1 c_batch``). Without
    reference pass rates, ``prior_pass_rate`` (if given) or the current posterior mean serves as
    ``p~``. With ``adaptive_rho`` (Trinity's estimator option) ``rho`` is halved, before the
    update, on every step where the implicit pass rates of the observed tasks miss their observed
    rates by a mean absolute error of 0.25 or more: the implicit evidence then weighs less for the
    rest of the run (``rho`` is saved with the state).

    :param num_tasks: pool size.
    :param settings: :class:`BotsSettings`, by name (checked: a bad value raises a ValueError
        naming the setting).
    :param reference_pass_rates: ``(f0, f1)``, per-task pass rates of the weaker and the stronger
        reference model (BOTS's two feature columns), each in [0, 1].
    :param prior_pass_rate: per-task fallback ``p~`` for unobserved tasks when no reference pass
        rates are given (e.g. a probe's ``trajval_r_late``).
    """

    #: EMA factor of the capability coefficient (fixed in BOTS's code).
    CAPABILITY_DISCOUNT = 0.9
    #: adaptive_rho: the mean absolute error of the implicit pass rates that halves rho, and the
    #: factor (both fixed in Trinity-RFT 0.6.0's InterpolationBetaPREstimator).
    ADAPTIVE_RHO_ERROR = 0.25
    ADAPTIVE_RHO_FACTOR = 0.5

    Settings = BotsSettings

    def __init__(self, num_tasks: int, reference_pass_rates=None, prior_pass_rate=None, **settings):
        self.settings = BotsSettings(**settings)
        self.num_tasks = whole_number(num_tasks, "num_tasks", 1)
        self.m, self.lam, self.target, self.tau = self.settings.m, self.settings.lam, self.settings.target, self.settings.tau
        self.rho = self.settings.rho  # state: adaptive_rho halves it
        self.thompson, self.adaptive_rho = self.settings.thompson, self.settings.adaptive_rho
        self.prior_pass_rate = self._per_task(prior_pass_rate, "prior_pass_rate")
        self.reference = None
        if reference_pass_rates is not None:
            if len(reference_pass_rates) != 2:
                raise ValueError("reference_pass_rates must be (weaker model's, stronger model's) pass rates")
            self.reference = tuple(self._per_task(f, name) for f, name in zip(reference_pass_rates, ("f0", "f1")))
        self.capability: float | None = None
        self.pseudo_successes = np.ones(self.num_tasks)
        self.pseudo_failures = np.ones(self.num_tasks)

    def _per_task(self, values, name: str):
        if values is None:
            return None
        array = np.asarray(values, dtype=np.float64)
        if array.shape != (self.num_tasks,):
            raise ValueError(f"{name} must have shape ({self.num_tasks},), got {array.shape}")
        if not np.all((array >= 0) & (array <= 1)):
            raise ValueError(f"{name} must be pass rates in [0, 1]; position {int(np.flatnonzero(~((array >= 0) & (array <= 1)))[0])} is not")
        return array

    def implicit_pass_rate(self, tasks, pass_rate) -> np.ndarray:
        """``p~`` for every task after observing ``pass_rate`` on ``tasks`` (updates ``c``)."""
        p_ref = self._predicted_pass_rate(tasks, pass_rate)
        p_ref[tasks] = pass_rate
        return p_ref

    def _predicted_pass_rate(self, tasks, pass_rate) -> np.ndarray:
        """``p~`` for every task from the implicit evidence alone (observed tasks included);
        updates ``c``."""
        if self.reference is not None:
            f0, f1 = self.reference
            estimate = (float(np.mean(pass_rate)) - f0[tasks].mean()) / (f1[tasks].mean() - f0[tasks].mean() + 1e-6)
            discount = self.CAPABILITY_DISCOUNT
            self.capability = estimate if self.capability is None else discount * self.capability + (1 - discount) * estimate
            p_ref = np.clip(f0 + self.capability * (f1 - f0), 0.0, 1.0)
        elif self.prior_pass_rate is not None:
            p_ref = self.prior_pass_rate.copy()
        else:
            p_ref = self.posterior_mean()
        return p_ref

    def posterior_mean(self) -> np.ndarray:
        return self.pseudo_successes / (self.pseudo_successes + self.pseudo_failures)

    def update(self, tasks, pass_rate, num_rollouts, zero_variance) -> None:
        """One step's feedback (see :func:`group_feedback`). A task drawn in several groups is
        observed once, at its pass rate over all their rollouts."""
        tasks, pass_rate = self._per_task_rates(tasks, pass_rate, num_rollouts)
        successes = np.zeros(self.num_tasks)
        failures = np.zeros(self.num_tasks)
        successes[tasks] = pass_rate * self.m
        failures[tasks] = (1 - pass_rate) * self.m
        p_ref = self._predicted_pass_rate(tasks, pass_rate)
        if self.adaptive_rho and np.mean(np.abs(p_ref[tasks] - pass_rate)) >= self.ADAPTIVE_RHO_ERROR:
            self.rho *= self.ADAPTIVE_RHO_FACTOR  # the implicit evidence mispredicts: trust it less
        p_ref[tasks] = pass_rate
        keep = 1 - self.lam
        rho, m = self.rho, self.m  # rho * p~ * m: the pseudo-counts the implicit pass rate adds
        self.pseudo_successes = keep * self.pseudo_successes + self.lam + (1 - rho) * successes + rho * p_ref * m
        self.pseudo_failures = keep * self.pseudo_failures + self.lam + (1 - rho) * failures + rho * (1 - p_ref) * m

    @staticmethod
    def _per_task_rates(tasks, pass_rate, num_rollouts):
        tasks = np.asarray(tasks, dtype=np.int64)
        pass_rate = np.asarray(pass_rate, dtype=np.float64)
        task, of_group = np.unique(tasks, return_inverse=True)
        if task.size == tasks.size:
            return tasks, pass_rate  # one group per task: as given
        rollouts = np.asarray(num_rollouts, dtype=np.float64)
        of_group = of_group.reshape(-1)
        solved = np.bincount(of_group, weights=pass_rate * rollouts, minlength=task.size)
        return task, solved / np.bincount(of_group, weights=rollouts, minlength=task.size)

    def online_weights(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """``exp(-|p~ - target| / tau)``, ``p~`` a Thompson sample (needs ``rng``) or the mean."""
        if self.thompson:
            if rng is None:
                raise ValueError("Thompson sampling needs a generator")
            pass_rate = rng.beta(self.pseudo_successes, self.pseudo_failures)
        else:
            pass_rate = self.posterior_mean()
        return np.exp(-np.abs(pass_rate - self.target) / self.tau)

    def state_dict(self) -> dict:
        return {"pseudo_successes": self.pseudo_successes.copy(), "pseudo_failures": self.pseudo_failures.copy(),
                "rho": self.rho, "capability": self.capability}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # a state saved by an earlier release names the Beta posterior's parameters alpha and beta
        self.pseudo_successes = np.array(state.get("pseudo_successes", state.get("alpha")), dtype=np.float64)
        self.pseudo_failures = np.array(state.get("pseudo_failures", state.get("beta")), dtype=np.float64)
        self.rho = float(state["rho"])
        capability = state.get("capability")
        self.capability = None if capability is None else float(capability)


class ComposedSampler:
    """Weighted draws from ``w_trajval * w_online``, with per-step feedback.

    :param prior_weights: the TrajVal prior (``trajval_weight``), one per task.
    :param online: a :class:`GresoScheduler`, :class:`BotsScheduler` or None (prior only).
    :param seed: stream seed (same on every rank).
    :param success_threshold: reward > threshold counts a rollout as solved.

    In a multi-process run every process must receive the same (all-gathered) feedback, or the
    processes' streams diverge.
    """

    def __init__(self, prior_weights, online=None, seed: int = 0, success_threshold: float = DEFAULT_SUCCESS_THRESHOLD):
        self.sampler = WeightedIndexSampler(prior_weights, seed=seed)
        self.prior = self.sampler.prob.copy()  # normalised: only ratios matter
        self._prior_fingerprint = self.sampler.fingerprint
        if online is not None and online.num_tasks != self.prior.size:
            raise ValueError(f"online scheduler has {online.num_tasks} tasks, the prior {self.prior.size}")
        self.online = online
        problem = value_problem(success_threshold, float, {})
        if problem:
            raise ValueError(f"success_threshold {problem}")
        self.success_threshold = success_threshold
        self._stale = online is not None
        self._rebuild_rng_state = None

    @property
    def num_tasks(self) -> int:
        return int(self.prior.size)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        if hasattr(self.online, "set_epoch"):
            self.online.set_epoch(epoch)

    def _rebuild(self, rng: np.random.Generator) -> None:
        """Set ``w_final = prior * w_online`` (BOTS draws its Thompson sample from ``rng``)."""
        self.sampler.set_weights(compose_online(self.prior, self.online.online_weights(rng)))
        self._stale = False

    def draw(self, k: int) -> np.ndarray:
        """``k`` task indices; the cumulative table is rebuilt only after feedback changed ``w_final``."""
        if self._stale:
            # remember where the Thompson sample came from, so a checkpoint can rebuild it
            self._rebuild_rng_state = self.sampler.rng.bit_generator.state
            self._rebuild(self.sampler.rng)
        return self.sampler.draw(k)

    def draw_counting_epochs(self, k: int, drawn: int) -> np.ndarray:
        """``k`` task indices for a trainer that calls no ``set_epoch`` (Trinity's selector,
        verl's dataset), ``drawn`` being the draws so far: epoch ``e`` is the ``e``-th pool-sized
        run of draws, each on its own ``(seed, e)`` stream, so GRESO adapts from the second on."""
        parts = []
        while k > 0:
            if drawn % self.num_tasks == 0:
                self.set_epoch(drawn // self.num_tasks)
            take = min(k, self.num_tasks - drawn % self.num_tasks)
            parts.append(self.draw(take))
            drawn, k = drawn + take, k - take
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def feedback(self, task_ids, rewards, group_size: int | None = None, group_ids=None) -> np.ndarray:
        """Feed one step's rollouts (one task index and reward per rollout) to the scheduler.

        ``group_size`` / ``group_ids`` say which rollouts form one drawn group (see
        :func:`rollout_groups`; by default one group per task), so two draws
        of a task in one step are two observations.

        :return: the DAPO keep mask per rollout (False where its group's rewards have no spread).
        """
        tasks, pass_rate, counts, zero_var, group = _grouped_feedback(
            task_ids, rewards, self.num_tasks, self.success_threshold, group_size, group_ids)
        if self.online is not None:
            self.online.update(tasks, pass_rate, counts, zero_var)
            self._stale = True
        return ~zero_var[group]

    def feedback_pass_rates(self, task_ids, pass_rates, num_rollouts: int) -> None:
        """Feedback as one pass rate per task (Trinity-RFT's form); rates 0 or 1 count as zero-variance."""
        tasks = np.asarray(task_ids, dtype=np.int64).reshape(-1)
        rates = np.asarray(pass_rates, dtype=np.float64).reshape(-1)
        if tasks.shape != rates.shape:
            raise ValueError(f"task_ids and pass_rates differ in length: {tasks.size} vs {rates.size}")
        outside = ~((rates >= 0) & (rates <= 1))  # NaN included
        if outside.any():
            raise ValueError(f"pass rate at position {int(np.flatnonzero(outside)[0])} is outside [0, 1]")
        if tasks.size and (tasks.min() < 0 or tasks.max() >= self.num_tasks):
            raise ValueError(f"task index outside the pool [0, {self.num_tasks})")
        if self.online is not None:
            counts = np.full(tasks.size, whole_number(num_rollouts, "num_rollouts", 1))
            self.online.update(tasks, rates, counts, (rates == 0) | (rates == 1))
            self._stale = True

    def state_dict(self) -> dict:
        return {
            "prior_fingerprint": self._prior_fingerprint,
            "sampler": self.sampler.state_dict(),
            "online": None if self.online is None else self.online.state_dict(),
            "rebuild_rng_state": None if self._stale else self._rebuild_rng_state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved stream and scheduler state (same prior required)."""
        if state["prior_fingerprint"] != self._prior_fingerprint:
            raise ValueError("composed sampler state was saved with a different prior: resume with the same weights")
        if (state["online"] is None) != (self.online is None):
            raise ValueError("composed sampler state and this sampler differ in having an online scheduler")
        self._stale = self.online is not None
        if self.online is not None:
            self.online.load_state_dict(state["online"])
            if state["rebuild_rng_state"] is not None:  # weights in use when saved: rebuild them
                rng = np.random.Generator(np.random.PCG64())
                rng.bit_generator.state = state["rebuild_rng_state"]
                self._rebuild_rng_state = state["rebuild_rng_state"]
                self._rebuild(rng)
        self.sampler.load_state_dict(state["sampler"], check_weights=not self._stale)
