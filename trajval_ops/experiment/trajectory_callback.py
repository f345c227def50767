"""Dense per-task trajectories during GRPO training: a ``transformers``/TRL ``TrainerCallback``.

Every ``every_steps`` optimizer steps, :class:`TrajectoryCallback` samples ``n`` completions for
every task of a fixed set with the trainer's live model, scores them with the project's
verifiers and appends each task's pass rate and the step to a trajectories JSONL, one task per
line, in the order the tasks were given::

    {"id": "task-1", "accuracies": [0.25, 0.5, 0.5], "steps": [0, 10, 20]}

This is the format ``tools/report.py --trajectories`` and
:func:`trajval_ops.analysis.pool_columns.trajectory_matrix` read (``accuracies`` and the id; the extra
``steps`` is read by :func:`read_trajectories`). The file is rewritten atomically after every
evaluation, so a reader never sees half a file.

It works with any ``transformers.Trainer``: the probe run
(``run_probe(..., extra_callbacks=[cb])``), :class:`trajval_ops.samplers.trl.TrajvalGRPOTrainer`
and a plain ``trl.GRPOTrainer`` (``callbacks=[cb]`` or ``trainer.add_callback(cb)``).

Each evaluation is one rollout pass (:class:`~trajval_ops.rollout.pass_rates.RolloutPass`, the
endpoint mapper's own: prompts built, rendered with the model's chat template and fitted to its
context, sampled in calls of ``batch_size`` prompts, scored by the project's verifiers) over the
trainer's live model through :class:`~trajval_ops.rollout.engines.TransformersEngine` (transformers
``generate``), or, after :meth:`TrajectoryCallback.use_engine`, through another engine: the
trainer's own colocated vLLM (:class:`~trajval_ops.rollout.trl_vllm_engine.TrainerVllmEngine`,
which copies the live weights into it first), as ``trajval validate`` does where TRL generates
with vLLM.

Determinism: the samples of step ``s`` are seeded from ``(seed, s)`` (and, as in the engine, the
prompts of each generate call), so the same run writes the same file; the evaluation runs
inside ``torch.random.fork_rng``, so it leaves the training's random streams untouched.

Resuming: on train begin an existing file is loaded and only its evaluations at steps
``<= state.global_step`` are kept (a run resumed from ``checkpoint-N`` continues its file;
evaluations after N written by the killed run are dropped and the file is rewritten at once).
A file holding other task ids is an error.

Several processes (DDP): only the world-main process (``state.is_world_process_zero``) evaluates
and writes; the others go on and wait for it at their next collective operation, so one
evaluation must take less than the distributed timeout (``TrainingArguments.ddp_timeout``,
30 min by default). Sharded models (FSDP, DeepSpeed ZeRO-3) are refused: generating on the main
process alone would wait forever for the other shards.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from loguru import logger
from transformers import TrainerCallback

from trajval_ops.analysis import pool_columns
from trajval_ops.atomic import jsonable
from trajval_ops.rollout.engines import DecodingConfig, TransformersEngine, derive_seed
from trajval_ops.rollout.pass_rates import PromptSettings, RolloutPass, build_task, pass_rate
from trajval_ops.rollout.prompts import DEFAULT_CATEGORY_KEY, DEFAULT_GROUND_TRUTH_KEY, DEFAULT_PROMPT_KEY
from trajval_ops.rollout.verifiers import build_verifier
from trajval_ops.errors import TrajvalInputError
from trajval_ops.pools.io import read_rows, write_rows
from trajval_ops.rows import get_path, row_label

#: Field of a trajectory row holding the training step of each accuracy.
STEPS_KEY = "steps"
#: Field of a trajectory row holding the task id (always written).
ID_KEY = "id"


class TrajectoryCallback(TrainerCallback):
    """Evaluate a fixed task set every ``every_steps`` steps and keep per-task pass-rate trajectories.

    :param tasks: the tasks, rows in pool format: a chat-message list or text prompt at
        ``prompt_key``, a ground truth at ``ground_truth_key``, an id at ``id_key``. Checked here
        (prompt shape, ground truth readable by the verifier, unique ids), before training starts.
    :param output_path: the trajectories JSONL (one line per task, in ``tasks`` order).
    :param every_steps: evaluate after every k-th optimizer step (``state.global_step % k == 0``).
    :param n: completions sampled per task and evaluation; the pass rate is their mean score.
    :param temperature: sampling temperature (0 = greedy: one completion counted ``n`` times).
    :param top_p: nucleus sampling threshold.
    :param max_new_tokens: completion length limit.
    :param seed: base seed; step ``s`` is sampled with a seed derived from ``(seed, s)``.
    :param verifier: verifier name (``math``, ``answer_tag``, ``custom``).
    :param verifier_options: its options (``{"function": "module:fn"}`` for ``custom``, ...).
    :param prompt_key: field of the prompt (dotted paths allowed).
    :param ground_truth_key: field of the ground truth.
    :param id_key: field of the task id; None: the first of ``fields.ID_CANDIDATES`` present, else
        the task's position. The id is written as ``id`` and, when ``id_key`` is set to another
        field, also under that (flat, possibly dotted) key, so ``report.py --id-key`` finds it.
    :param template: prompt template (``auto``, ``chat``, ``math``, ``logic_*``).
    :param category_key: field naming what ``logic_ordering`` orders.
    :param overlong_prompt: ``error`` or ``truncate_left`` for prompts longer than the model's
        context minus ``max_new_tokens``.
    :param batch_size: prompts per ``generate`` call (each with ``n`` completions).
    :param at_start: also evaluate at step 0, before the first update (the base model; the
        paper's trajectories start there).
    """

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]],
        output_path: str | os.PathLike,
        *,
        every_steps: int = 1,
        n: int = 8,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 512,
        seed: int = 0,
        verifier: str = "math",
        verifier_options: Mapping[str, Any] | None = None,
        prompt_key: str = DEFAULT_PROMPT_KEY,
        ground_truth_key: str = DEFAULT_GROUND_TRUTH_KEY,
        id_key: str | None = None,
        template: str = "auto",
        category_key: str = DEFAULT_CATEGORY_KEY,
        overlong_prompt: str = "error",
        batch_size: int = 8,
        at_start: bool = True,
    ):
        if every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {every_steps}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if overlong_prompt not in ("error", "truncate_left"):
            raise ValueError(f"overlong_prompt must be 'error' or 'truncate_left', got {overlong_prompt!r}")
        if id_key is not None and id_key in (pool_columns.TRAJECTORY_KEY, STEPS_KEY):
            raise ValueError(f"id_key {id_key!r} collides with a field of the trajectory file")
        if not tasks:
            raise TrajvalInputError("trajectories: no tasks to evaluate (0 rows)")
        self.output_path = Path(output_path)
        self.every_steps = int(every_steps)
        self.decoding = DecodingConfig(n=n, temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens, seed=seed)
        self.seed = int(seed)
        self.prompt_key, self.ground_truth_key, self.id_key = prompt_key, ground_truth_key, id_key
        self.template, self.category_key, self.overlong_prompt = template, category_key, overlong_prompt
        self.settings = PromptSettings(template, prompt_key, ground_truth_key, category_key)
        self.batch_size = int(batch_size)
        self.at_start = bool(at_start)
        self.verifier = build_verifier(verifier, **dict(verifier_options or {}))
        try:
            self._rows, self.ids = self._check_tasks(tasks)
        except BaseException:
            self.verifier.close()
            raise
        self.steps: list[int] = []
        self.accuracies: list[list[float]] = [[] for _ in self.ids]
        self.engine = None  # None: transformers generate over the live model, built per evaluation

    def use_engine(self, engine) -> None:
        """Evaluate with ``engine`` (a :class:`~trajval_ops.rollout.engines.RolloutEngine` that
        generates with the live policy, e.g. ``TrainerVllmEngine(trainer)``) instead of
        transformers ``generate``. Its samples differ from transformers' (another sampler and
        seeding), so one trajectory file should be written by one engine throughout."""
        self.engine = engine

    # ------------------------------------------------------------------ TrainerCallback events

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        _refuse_sharded(args)
        if not state.is_world_process_zero:
            return
        self._load(state.global_step)
        step = state.global_step
        if step not in self.steps and ((step == 0 and self.at_start) or (step > 0 and step % self.every_steps == 0)):
            self._evaluate_and_write(model, processing_class, step)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = state.global_step
        if state.is_world_process_zero and step % self.every_steps == 0 and step not in self.steps:
            self._evaluate_and_write(model, processing_class, step)

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.is_world_process_zero and state.global_step not in self.steps:
            self._evaluate_and_write(model, processing_class, state.global_step)
        self.verifier.close()  # restarted on demand if training goes on

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, model, processing_class, step: int) -> list[float]:
        """Pass rate of every task (in task order) with ``model`` at training step ``step``
        (which seeds the samples); records nothing.

        The model is put in eval mode for it and back in train mode after if it was; the global
        random state (CPU and the model's GPU) is restored afterwards.
        """
        import torch

        tokenizer = getattr(processing_class, "tokenizer", processing_class)  # a processor holds one
        if model is None or tokenizer is None:
            raise ValueError("trajectories: the trainer passed no model or processing_class to the callback")
        device = _model_device(model)
        engine = self.engine if self.engine is not None else TransformersEngine.from_loaded(model, tokenizer, device)
        decoding = dataclasses.replace(self.decoding, seed=derive_seed(self.seed, "trajectory-step", str(step)))
        rollout = RolloutPass(engine, decoding, self.verifier, self.settings, prompts_per_generate=self.batch_size,
                              overlong_prompt=self.overlong_prompt, id_key=self.id_key, what="trajectories")
        was_training = model.training
        padding_side = tokenizer.padding_side
        gpus = []  # CUDA generators to save and restore with the CPU one
        if device.type == "cuda":
            gpus = [device.index if device.index is not None else torch.cuda.current_device()]
        try:
            model.eval()
            tokenizer.padding_side = "left"
            with torch.random.fork_rng(devices=gpus):
                results = rollout.results(self._rows, 0)
        finally:
            tokenizer.padding_side = padding_side
            if was_training:
                model.train()
        return [pass_rate(result) for result in results]

    def _evaluate_and_write(self, model, processing_class, step: int) -> None:
        engine = self.engine.name if self.engine is not None else "transformers"
        logger.info(f"trajectories: step {step}: evaluating {len(self.ids)} tasks x {self.decoding.n} samples with "
                    f"{engine} (temperature {self.decoding.temperature:g}, max {self.decoding.max_new_tokens} new tokens)")
        start = time.perf_counter()
        rates = self.evaluate(model, processing_class, step)
        self.steps.append(int(step))
        for history, rate in zip(self.accuracies, rates):
            history.append(rate)
        self._write()
        logger.info(f"trajectories: step {step}: mean pass rate {float(np.mean(rates)):.4f} in "
                    f"{time.perf_counter() - start:.1f} s; {len(self.steps)} evaluations in {self.output_path}")

    # ------------------------------------------------------------------ tasks and the file

    def _check_tasks(self, tasks):
        """The tasks as rows and their ids, each row's prompt, ground truth and id checked."""
        rows, problems = [], {}
        for position, task in enumerate(tasks):
            row = dict(task)
            built = build_task(row, position, self.settings, self.id_key, what="trajectories")
            key = repr(built.ground_truth)
            if key not in problems:
                problems[key] = self.verifier.truth_problem(built.ground_truth)
            if problems[key] is not None:
                raise TrajvalInputError(f"trajectories: {built.label}: field '{self.ground_truth_key}': {problems[key]}")
            if self.id_key is not None and get_path(row, self.id_key, None) is None:
                raise TrajvalInputError(f"trajectories: {built.label}: field '{self.id_key}' (the task id) is missing")
            rows.append(row)
        ids = jsonable(pool_columns.row_ids(rows, self.id_key))
        seen: dict[str, int] = {}
        for position, value in enumerate(ids):
            key = repr(value)
            if key in seen:
                raise TrajvalInputError(f"trajectories: rows {seen[key]} and {position} share the id {value!r}; "
                                        "task ids must be unique (set id_key)")
            seen[key] = position
        return rows, ids

    def _load(self, global_step: int) -> None:
        """Start from the file's evaluations at steps <= ``global_step`` (nothing when absent)."""
        self.steps, self.accuracies = [], [[] for _ in self.ids]
        if not self.output_path.exists():
            return
        ids, steps, matrix = _parse_trajectories(list(read_rows(self.output_path)), str(self.output_path),
                                                 min_checkpoints=0)
        if ids != self.ids:
            difference = next((i for i, (a, b) in enumerate(zip(ids, self.ids)) if a != b),
                              min(len(ids), len(self.ids)))
            found = repr(ids[difference]) if difference < len(ids) else "nothing"
            wanted = repr(self.ids[difference]) if difference < len(self.ids) else "nothing"
            raise TrajvalInputError(
                f"trajectories: {self.output_path} holds {len(ids)} tasks that are not the {len(self.ids)} tasks "
                f"given (line {difference + 1}: id {found}, expected {wanted}); it belongs to another run: "
                "choose another output_path or delete the file"
            )
        keep = [i for i, step in enumerate(steps) if step <= global_step]
        self.steps = [steps[i] for i in keep]
        self.accuracies = [[float(row[i]) for i in keep] for row in matrix]
        dropped = [step for step in steps if step > global_step]
        logger.info(f"trajectories: resuming {self.output_path} at step {global_step} with {len(self.steps)} "
                    f"evaluations (steps {self.steps})"
                    + (f"; dropped evaluations after step {global_step} (steps {dropped})" if dropped else ""))
        if dropped:
            self._write()

    def _write(self) -> None:
        rows = []
        for task_id, history in zip(self.ids, self.accuracies):
            row = {ID_KEY: task_id}
            if self.id_key is not None and self.id_key != ID_KEY:
                row[self.id_key] = task_id
            row[pool_columns.TRAJECTORY_KEY] = history
            row[STEPS_KEY] = self.steps
            rows.append(row)
        write_rows(self.output_path, rows)


# ---------------------------------------------------------------------- reading the file


def read_trajectories(
    source: str | os.PathLike | Sequence[Mapping[str, Any]],
    key: str = pool_columns.TRAJECTORY_KEY,
    steps_key: str = STEPS_KEY,
    id_key: str | None = None,
) -> tuple[list, np.ndarray, np.ndarray]:
    """``(ids, steps, acc)`` of a trajectories file (a path) or its rows.

    ``ids`` and ``acc`` (tasks x T) are what :func:`pool_columns.trajectory_matrix` reads (same
    checks: T >= 2, numbers in [0, 1]); ``steps`` (T integers, increasing) must be the same list on
    every row. Errors name the line and the field.
    """
    where = str(source) if isinstance(source, (str, os.PathLike)) else "trajectories"
    rows = list(read_rows(source)) if isinstance(source, (str, os.PathLike)) else list(source)
    ids, acc = pool_columns.trajectory_matrix(rows, key, id_key)
    steps = _steps_column(rows, where, steps_key, id_key, acc.shape[1])
    return ids, np.asarray(steps, dtype=np.int64), acc


def _parse_trajectories(rows, where: str, min_checkpoints: int):
    """Lenient reader for resuming: any T >= ``min_checkpoints`` (a run killed after its first
    evaluation has T = 1, which the report's reader refuses)."""
    if not rows:
        raise TrajvalInputError(f"{where}: the trajectory file is empty (0 rows)")
    matrix = []
    for position, row in enumerate(rows):
        values = row.get(pool_columns.TRAJECTORY_KEY)
        label = f"{where}: {row_label(row, position, ID_KEY)}"
        if not isinstance(values, list) or len(values) < min_checkpoints:
            raise TrajvalInputError(f"{label}: field '{pool_columns.TRAJECTORY_KEY}' must be a list of accuracies, "
                                    f"got {values!r:.80}")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                raise TrajvalInputError(f"{label}: field '{pool_columns.TRAJECTORY_KEY}' holds {value!r}; "
                                        "accuracies must be numbers in [0, 1]")
        matrix.append(values)
    steps = _steps_column(rows, where, STEPS_KEY, ID_KEY, len(matrix[0]))
    for position, values in enumerate(matrix):
        if len(values) != len(steps):
            raise TrajvalInputError(f"{where}: {row_label(rows[position], position, ID_KEY)}: field "
                                    f"'{pool_columns.TRAJECTORY_KEY}' has {len(values)} entries for {len(steps)} steps")
    return pool_columns.row_ids(rows, ID_KEY), steps, matrix


def _steps_column(rows, where: str, steps_key: str, id_key: str | None, length: int) -> list[int]:
    first = None
    for position, row in enumerate(rows):
        steps = get_path(row, steps_key, None)
        label = f"{where}: {row_label(row, position, id_key)}"
        if (not isinstance(steps, list) or len(steps) != length
                or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in steps)):
            raise TrajvalInputError(f"{label}: field '{steps_key}' must be a list of {length} step numbers "
                                    f"(integers >= 0), got {steps!r:.80}")
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise TrajvalInputError(f"{label}: field '{steps_key}' must increase, got {steps!r:.80}")
        if first is None:
            first = steps
        elif steps != first:
            raise TrajvalInputError(f"{label}: field '{steps_key}' is {steps!r:.80}, the first row has {first!r:.80}")
    return list(first)


# ---------------------------------------------------------------------- helpers


def _refuse_sharded(args) -> None:
    """Evaluation runs on the main process alone: a sharded model would deadlock it."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled() or getattr(args, "fsdp", None):
        raise NotImplementedError(
            "TrajectoryCallback evaluates on the main process only, which a sharded model (FSDP / DeepSpeed "
            "ZeRO-3) cannot do; evaluate the saved checkpoints instead (endpoint mapper)"
        )


def _model_device(model):
    import torch

    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


