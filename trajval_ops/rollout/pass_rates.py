"""One rollout pass: rows -> prompts and ground truths -> truth check -> cache -> generate calls
-> verify -> each row's result. No Data-Juicer here: the endpoint-reward mapper, the trajectory
callback (evaluation during training) and the probe's example building all use it.

A row's result is ``{"rewards", "methods", "engine", "dtype", "status", "cost"}`` (plus
``"completions"`` when kept): the verifier's reward of each of its completions, how each was
decided, what sampled it, ``ok`` / ``truncated_prompt`` / ``bad_ground_truth``, and the
completions and tokens generated for it. The pass rate is the mean score.

Generate calls: the rows in order, ``prompts_per_generate`` at a time, each distinct (prompt,
ground truth) once. An engine that samples a call as a whole (transformers: one generator
seeded from the call's prompts) repeats the calls of an uninterrupted run when resuming from
the cache, so a resumed pass gives the same completions; an engine with a seed per prompt
(vLLM) samples only the missing rows.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
from loguru import logger

from trajval_ops.errors import DeviceOutOfMemory, NonFiniteLogits, TrajvalInputError, first_few
from trajval_ops.rollout.budget import STATUS_SKIPPED, STATUS_STOPPED
from trajval_ops.rollout.engines import DecodingConfig, derive_seed
from trajval_ops.rollout.prompts import (
    DEFAULT_CATEGORY_KEY, DEFAULT_GROUND_TRUTH_KEY, DEFAULT_PROMPT_KEY, POOL_TEMPLATE, TEMPLATES, build_messages,
    fit_prompt, render_prompt,
)
from trajval_ops.rows import get_path, row_label
from trajval_ops.settings import check_settings, setting

STATUS_OK = "ok"
STATUS_BAD_TRUTH = "bad_ground_truth"
STATUS_TRUNCATED = "truncated_prompt"
#: A row a sampled pass left out (``sample_fraction`` < 1): no pass rate, no rollouts.
STATUS_NOT_SAMPLED = "not_sampled"
#: The cost of a row that generated nothing (a repeated row, an unusable ground truth, a reused pass).
NO_COST = {"completions": 0, "generated_tokens": 0}
#: The chat template call's own arguments, which ``chat_template_kwargs`` cannot set.
RENDERING_ARGUMENTS = frozenset({"conversation", "messages", "tokenize", "add_generation_prompt"})
#: How many warnings of each kind a pass logs before it only counts.
WARN_LIMIT = 20
#: rows a stopped generate call's message names (a call may hold hundreds)
MAX_ROWS_NAMED = 4


@dataclass(frozen=True)
class PromptSettings:
    """How a row becomes a prompt and a ground truth (the probe, every pass and the evaluation
    use the same)."""

    template: str = setting("auto", "prompt template: auto, chat, math, dapo_math, logic_arc, logic_ordering, "
                            "logic_graph, or pool (the row's own chat list rendered as verl renders it: the prompt "
                            "the main run trains on).", choices=TEMPLATES)
    prompt_key: str = setting(DEFAULT_PROMPT_KEY, "dotted path of the prompt (task text or chat message list).")
    ground_truth_key: str = setting(DEFAULT_GROUND_TRUTH_KEY, "dotted path of the ground truth.")
    category_key: str = setting(DEFAULT_CATEGORY_KEY, "dotted path of the item category (logic_ordering only).")
    chat_template_kwargs: Optional[dict] = setting(
        None, "(template pool) keyword arguments of the model's chat template, as the main run's verl "
        "``data.apply_chat_template_kwargs`` (e.g. ``{enable_thinking: false}`` for Qwen3 with thinking off); None: "
        "none, verl's default. The other templates render with thinking mode off.")

    def __post_init__(self):
        check_settings(self)
        if self.chat_template_kwargs is not None:
            if self.template != POOL_TEMPLATE:
                raise ValueError(f"chat_template_kwargs goes with template: {POOL_TEMPLATE} (the main run's rendering); "
                                 f"template {self.template!r} renders with thinking mode off")
            reserved = sorted(set(self.chat_template_kwargs) & RENDERING_ARGUMENTS)
            if reserved:
                raise ValueError(f"chat_template_kwargs: {reserved} are set by the rendering itself (as verl sets them)")

    def render_kwargs(self) -> dict | None:
        """The chat template's keyword arguments for :func:`render_prompt` (None: the paper's
        rendering, thinking off)."""
        return dict(self.chat_template_kwargs or {}) if self.template == POOL_TEMPLATE else None

    def as_dict(self) -> dict:
        # chat_template_kwargs only where set: the caches and records of passes without it keep their key
        extra = {"chat_template_kwargs": self.chat_template_kwargs} if self.chat_template_kwargs is not None else {}
        return {"template": self.template, "prompt_key": self.prompt_key,
                "ground_truth_key": self.ground_truth_key, "category_key": self.category_key, **extra}


@dataclass(frozen=True)
class Task:
    """One row as the pass sees it: its name in messages, chat messages, ground truth and the
    hash of what decides its result (messages and truth)."""

    label: str
    messages: list
    ground_truth: Any
    hash: str


def build_task(row: Mapping[str, Any], position: int | None, settings: PromptSettings,
               id_key: str | None = None, what: str = "") -> Task:
    """A row's messages and ground truth, or an error naming the row and the field."""
    from trajval_ops.canonical import stable_hash

    prefix = f"{what}: " if what else ""
    label = row_label(row, position, id_key)
    try:
        messages = build_messages(dict(row), settings.template, settings.prompt_key, settings.category_key)
    except TrajvalInputError as exc:
        raise TrajvalInputError(f"{prefix}{label}: {exc}") from None
    truth = get_path(row, settings.ground_truth_key, None)
    if truth is None:
        raise TrajvalInputError(f"{prefix}{label}: field '{settings.ground_truth_key}' is missing (the ground truth)")
    return Task(label, messages, truth, stable_hash([messages, truth]))


@dataclass
class PassCounters:
    """What a pass did in this process (for its logs and throughput figures)."""

    completions: int = 0
    generate_s: float = 0.0
    bad_truth: int = 0
    truncated: int = 0
    problems: dict = field(default_factory=dict)  # ground truth -> the verifier's problem with it


class RolloutPass:
    """One checkpoint's pass over rows (see the module docstring).

    :param session: the engine (an :class:`~trajval_ops.rollout.session.EngineSession` or an
        engine object): ``tokenizer``, ``max_context``, ``name``, ``dtype``,
        ``seeds_each_prompt``, ``generate_counted``; or a callable returning one, called when
        the first row missing from the cache needs it.
    :param decoding: how to sample (n, temperature, ...).
    :param verifier: a :mod:`trajval_ops.rollout.verifiers` verifier.
    :param cache: a :class:`~trajval_ops.rollout.cache.RolloutCache`, or None.
    :param max_bad_truth_share: > 0: a row whose ground truth the verifier cannot read is
        counted (status ``bad_ground_truth``, no rollout) instead of stopping the pass.
    :param overlong_prompt: ``error`` or ``truncate_left`` for prompts over the context.
    :param budget: an :class:`~trajval_ops.rollout.budget.AdaptiveBudget` (rollouts in rounds, a
        row stopped once its weight is pinned), or None for a fixed ``n``.
    :param early_key: (an adaptive late pass) the field holding each row's early pass rate.
    :param cut_context: the context ``truncate_left`` cuts prompts to at most (what the rollout
        cache's key records; None: the engine's own).
    """

    def __init__(self, session, decoding: DecodingConfig, verifier, settings: PromptSettings = PromptSettings(),
                 cache=None, *, prompts_per_generate: int = 4, keep_completions: bool = False,
                 max_bad_truth_share: float = 0.0, overlong_prompt: str = "error", id_key: str | None = None,
                 what: str = "", budget=None, early_key: str | None = None, cut_context: int | None = None):
        if budget is not None and (decoding.temperature == 0 or budget.cap != decoding.n):
            raise ValueError("an adaptive budget samples in rounds at temperature > 0 up to its cap, the pass's n")
        self._session = session
        self.decoding, self.verifier, self.settings, self.cache = decoding, verifier, settings, cache
        self.prompts_per_generate = int(prompts_per_generate)
        self.keep_completions = keep_completions
        self.max_bad_truth_share = float(max_bad_truth_share)
        self.overlong_prompt, self.cut_context = overlong_prompt, cut_context
        self.id_key, self.what = id_key, what
        self.budget, self.early_key = budget, early_key
        self.counters = PassCounters()

    @property
    def session(self):
        if callable(self._session) and not hasattr(self._session, "generate_counted"):
            self._session = self._session()
        return self._session

    def results(self, rows: Sequence[Mapping[str, Any]], first_row: int | None = 0,
                on_rows_done: Callable[[int], None] | None = None) -> list[dict]:
        """Each row's result, in row order (see the module docstring).

        :param first_row: the first row's position in the pool, for messages (None: unknown).
        :param on_rows_done: called with the number of rows each step finished (progress).
        """
        tasks = [build_task(row, None if first_row is None else first_row + i, self.settings, self.id_key,
                            self.what) for i, row in enumerate(rows)]
        r_early = self._early_rates(rows, first_row)
        if r_early is not None:
            tasks = _keyed_by_early_rates(tasks, r_early)
        results = self._cached(tasks)
        for i, task in enumerate(tasks):
            if results[i] is None and self._bad_truth(task):
                results[i] = {"rewards": [], "methods": [], "engine": None, "dtype": None,
                              "status": STATUS_BAD_TRUTH, "cost": NO_COST}
        first_of = {}
        for i, task in enumerate(tasks):
            first_of.setdefault(task.hash, i)
        samplable = [i for i, task in enumerate(tasks) if first_of[task.hash] == i
                     and (results[i] is None or results[i]["status"] != STATUS_BAD_TRUTH)]
        missing = {i for i in samplable if results[i] is None}
        if on_rows_done:
            on_rows_done(len(rows) - len(missing))
        if self.budget is not None:
            self._rounds(tasks, rows, results, samplable, missing, None if r_early is None else r_early[samplable])
            if on_rows_done:
                on_rows_done(len(missing))
        for call in (self._calls(samplable, missing) if self.budget is None else []):
            for i, result in zip(call, self._sample_call([tasks[i] for i in call], [rows[i] for i in call],
                                                         [i in missing for i in call])):
                if i in missing:
                    results[i] = result
            if on_rows_done:
                on_rows_done(sum(i in missing for i in call))
        # a repeated row shares its first copy's rollouts and costs nothing of its own
        out = [result if first_of[task.hash] == i else
               {**(result or results[first_of[task.hash]]), "cost": NO_COST}
               for i, (task, result) in enumerate(zip(tasks, results))]
        if r_early is not None:  # a late row the budget skipped: no change assumed (s = 0 either way)
            out = [{**result, "pass_rate": float(rate)} if result["status"] == STATUS_SKIPPED else result
                   for result, rate in zip(out, r_early)]
        return out

    # ------------------------------------------------------------------ steps

    def _cached(self, tasks: list[Task]) -> list[dict | None]:
        if self.cache is None:
            return [None] * len(tasks)
        if any(self.cache.get(task.hash) is None for task in tasks):
            self.cache.reload()  # rows another worker or actor sampled since (a retried batch)
        results = []
        for task in tasks:
            record = self.cache.get(task.hash)
            if record is not None and self.keep_completions and "completions" not in record:
                record = None  # cached without texts: sample again to keep them
            results.append(record)
        return results

    def _bad_truth(self, task: Task) -> bool:
        """Check a ground truth once per distinct value; True when it is unusable and the pass
        tolerates it (counted and logged), an error naming the row when it does not."""
        key = repr(task.ground_truth)
        if key not in self.counters.problems:
            self.counters.problems[key] = self.verifier.truth_problem(task.ground_truth)
        problem = self.counters.problems[key]
        if problem is None:
            return False
        message = f"{self._prefix}{task.label}: field '{self.settings.ground_truth_key}': {problem}"
        if self.max_bad_truth_share <= 0:
            raise TrajvalInputError(
                f"{message}; fix or remove the row, or allow a share of such rows with max_bad_truth_share")
        self.counters.bad_truth += 1
        if self.counters.bad_truth <= WARN_LIMIT:
            logger.warning(f"{message}: not sampled, pass rate 0, status {STATUS_BAD_TRUTH}")
        return True

    def _calls(self, samplable: list[int], missing: set[int]) -> list[list[int]]:
        """The rows of each generate call (see the module docstring)."""
        if not missing:
            return []
        rows = samplable if not self.session.seeds_each_prompt else [i for i in samplable if i in missing]
        calls = [rows[start:start + self.prompts_per_generate] for start in range(0, len(rows), self.prompts_per_generate)]
        return [call for call in calls if any(i in missing for i in call)]

    def _rounds(self, tasks: list[Task], rows, results: list, samplable: list[int], missing: set[int],
                r_early: np.ndarray | None) -> None:
        """An adaptive pass over the batch: rounds of ``round_size`` rollouts for the rows whose
        weight is not yet pinned (every samplable row takes part, cached ones included, so each
        round's generate calls are the uninterrupted run's; only the missing rows' results are
        kept and cached). ``r_early``: the samplable rows' early pass rates (a late pass)."""
        if not missing:
            return
        budget, session = self.budget, self.session
        render = self.settings.render_kwargs()
        fitted = {i: self._fit(render_prompt(session.tokenizer, tasks[i].messages, render), tasks[i]) for i in samplable}
        drawn = {i: {"rewards": [], "methods": [], "tokens": 0, "texts": []} for i in samplable}
        done, round_index = 0, 0
        while True:
            successes = np.array([sum(drawn[i]["rewards"]) for i in samplable])
            active = [i for i, stop in zip(samplable, budget.decided(successes, done, r_early)) if not stop]
            if not active:
                break
            decoding = dataclasses.replace(self.decoding, n=min(budget.round_size, budget.cap - done),
                                           seed=derive_seed(self.decoding.seed, "round", str(round_index)))
            for start in range(0, len(active), self.prompts_per_generate):
                self._round_call(active[start:start + self.prompts_per_generate], tasks, rows, fitted, decoding, drawn)
            done, round_index = done + decoding.n, round_index + 1
        new = []
        for i in samplable:
            got = drawn[i]
            # a cut prompt is said whether or not its row stopped early (its _n says that)
            status = STATUS_SKIPPED if not got["rewards"] else fitted[i][1] if (
                len(got["rewards"]) == budget.cap or fitted[i][1] == STATUS_TRUNCATED) else STATUS_STOPPED
            result = {"rewards": got["rewards"], "methods": got["methods"], "engine": session.name,
                      "dtype": session.dtype, "status": status,
                      "cost": {"completions": len(got["rewards"]), "generated_tokens": got["tokens"]}}
            if self.keep_completions:
                result["completions"] = got["texts"]
            if i in missing:
                results[i] = result
                new.append((tasks[i].hash, result))
        if self.cache is not None:
            self.cache.put_many(new)

    def _round_call(self, call: list[int], tasks, rows, fitted, decoding, drawn) -> None:
        """One generate call of a round: sample, verify, add to each row's draws."""
        completions, tokens = self._generate([fitted[i][0] for i in call], [tasks[i] for i in call], decoding)
        for i, texts, row_tokens in zip(call, completions, tokens):
            checks = self._check(texts, tasks[i], rows[i])
            drawn[i]["rewards"] += [c.reward for c in checks]
            drawn[i]["methods"] += [c.method for c in checks]
            drawn[i]["tokens"] += int(row_tokens)
            drawn[i]["texts"] += texts

    @property
    def _prefix(self) -> str:
        """``"<what>: "`` ahead of a message that names rows (empty when the pass has no name)."""
        return f"{self.what}: " if self.what else ""

    def _generate(self, prompts: list[str], tasks: list[Task], decoding) -> tuple[list[list[str]], list[int]]:
        """One generate call, timed and counted; an engine stopped by non-finite logits or out of
        memory names the call's rows (an overflow, or a long prompt, can depend on the row)."""
        start = time.perf_counter()
        try:
            completions, tokens = self.session.generate_counted(prompts, decoding)
        except (NonFiniteLogits, DeviceOutOfMemory) as exc:
            shown = first_few((task.label for task in tasks), MAX_ROWS_NAMED)
            raise type(exc)(f"{self._prefix}the generate call of {shown}: {exc}") from exc
        self.counters.generate_s += time.perf_counter() - start
        self.counters.completions += sum(len(c) for c in completions)
        return completions, tokens

    def _early_rates(self, rows, first_row: int | None) -> np.ndarray | None:
        """The early pass rates of the batch's rows that an adaptive late pass reads (None for
        any other pass)."""
        if self.budget is None or self.budget.window != "late":
            return None
        from trajval_ops.input_checks import float_column

        samples = {key: [row.get(key) for row in rows] for key in {k for row in rows for k in row}}
        samples[self.early_key] = [get_path(row, self.early_key, None) for row in rows]
        return float_column(samples, self.early_key, upper=1.0, id_key=self.id_key, position_offset=first_row)

    def _check(self, texts: list[str], task: Task, row) -> list:
        """The verifier's checks of one row's completions (an unreadable truth named)."""
        try:
            return self.verifier.check_many(texts, task.ground_truth, row)
        except ValueError as exc:  # a ground truth the verifier cannot read
            field_name = self.settings.ground_truth_key
            raise TrajvalInputError(f"{self._prefix}{task.label}: field '{field_name}': {exc}") from None

    def _fit(self, prompt: str, task: Task) -> tuple[str, str]:
        """The prompt within the model's context (minus ``max_new_tokens``) and its status."""
        session = self.session
        context = session.max_context if self.cut_context is None else min(session.max_context, self.cut_context)
        try:
            prompt, cut_from = fit_prompt(session.tokenizer, prompt, context,
                                          self.decoding.max_new_tokens, self.overlong_prompt)
        except OverflowError as exc:
            raise TrajvalInputError(f"{self._prefix}{task.label}: field '{self.settings.prompt_key}': {exc}") from None
        if cut_from is None:
            return prompt, STATUS_OK
        self.counters.truncated += 1
        if self.counters.truncated <= WARN_LIMIT:
            logger.warning(f"{self.what}: {task.label}: prompt of {cut_from} tokens cut to its last "
                           f"{context - self.decoding.max_new_tokens}")
        return prompt, STATUS_TRUNCATED

    def _sample_call(self, tasks: list[Task], rows: list[Mapping], fresh: list[bool]) -> list[dict]:
        """Sample the tasks in one generate call and verify; ``fresh`` marks the results new to
        the cache (written with one write when the call is done)."""
        session = self.session
        render = self.settings.render_kwargs()
        fitted = [self._fit(render_prompt(session.tokenizer, task.messages, render), task) for task in tasks]
        completions, tokens = self._generate([prompt for prompt, _ in fitted], tasks, self.decoding)
        generated = 1 if self.decoding.temperature == 0 else self.decoding.n  # greedy: one, counted n times
        results, new = [], []
        for task, row, texts, (_, status), is_new, row_tokens in zip(tasks, rows, completions, fitted, fresh, tokens):
            checks = self._check(texts, task, row)
            result = {"rewards": [c.reward for c in checks], "methods": [c.method for c in checks],
                      "engine": session.name, "dtype": session.dtype, "status": status,
                      "cost": {"completions": generated, "generated_tokens": int(row_tokens)}}
            if self.keep_completions:
                result["completions"] = texts
            if is_new:
                new.append((task.hash, result))
            results.append(result)
        if self.cache is not None:
            self.cache.put_many(new)
        return results


def _keyed_by_early_rates(tasks: list[Task], r_early: np.ndarray) -> list[Task]:
    """The tasks of an adaptive late pass, each keyed also by its own early pass rate and those of
    its batch: the stopping rule reads a row's own rate, and which rows are still active in a round
    (the rows of each generate call) follows the others', so a changed early pass gets fresh
    rollouts instead of rows decided on other rates. Two copies of a task with other early rates (a
    reused early pass, merged pools) are two tasks: one copy's decision is not the other's."""
    from trajval_ops.canonical import stable_hash

    rates = stable_hash([float(rate) for rate in r_early])
    return [dataclasses.replace(task, hash=stable_hash([task.hash, rates, float(rate)]))
            for task, rate in zip(tasks, r_early)]


def pass_rate(result: Mapping[str, Any]) -> float:
    """A row result's pass rate: the mean verifier score; for a late row an adaptive budget
    skipped, its early pass rate; 0 for a row not sampled (an unusable ground truth)."""
    if "pass_rate" in result:
        return float(result["pass_rate"])
    return sum(result["rewards"]) / len(result["rewards"]) if result["rewards"] else 0.0
