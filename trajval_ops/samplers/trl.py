"""TRL adapter: ``GRPOTrainer._get_train_sampler`` (and ``RLOOTrainer``'s, the same shape)
drawing prompts by ``trajval_weight``.

Keeps TRL's ``RepeatSampler`` structure (checked against trl 1.16.0): chunks of
``generation_batch_size // num_generations`` prompts, each prompt repeated ``num_generations``
times, each chunk repeated ``num_iterations * steps_per_generation`` times. Only the choice of
the prompts changes: drawn with replacement by weight instead of a permutation. Every process
draws the same stream (seed and epoch), so repeated groups line up across processes. Every
checkpoint holds the sampler's state (:data:`SAMPLER_STATE_FILE`: the online scheduler, the
stream, the epoch's prompts so far), so a resumed run serves the uninterrupted run's prompts.

``trl.experimental.async_grpo.AsyncGRPOTrainer`` takes no sampler: its rollout worker reads the
training set in order and resumes at a row position. The mixin refuses it
(:data:`ASYNC_GRPO_ROUTE`); it is fed a resampled pool instead.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sized

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer, RLOOTrainer
from trl.trainer.utils import RepeatSampler

from trajval_ops.atomic import atomic_open, jsonable
from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import TRAIN_POSITION, WEIGHT
from trajval_ops.samplers.online import ComposedSampler
from trajval_ops.samplers.weighted import weights_from_dataset
from trajval_ops.settings import value_problem, whole_number

#: trl 1.16's async GRPO: its rollout worker (``async_rollout_worker.py``) iterates the training
#: set in order and resumes with ``dataset.select(range(start, len(dataset)))``; no sampler hook.
ASYNC_GRPO_MODULE = "trl.experimental.async_grpo"
ASYNC_GRPO_ROUTE = (
    "TrajvalSamplerMixin cannot weight trl's AsyncGRPOTrainer: its rollout worker reads the training set in "
    "order (and resumes at a row position), so no sampler is ever asked for prompts. Train it on the pool "
    "resampled by weight instead: dj-process --config recipes/resample_pool.yaml with mode: multinomial "
    "(or systematic), num_samples: the prompts the run will read, shuffle: true; then pass "
    "load_dataset('json', data_files=<the export>, split='train') as train_dataset to the plain "
    "AsyncGRPOTrainer (docs/howto/trainers.md, 'TRL async GRPO'). Online composition (GRESO, BOTS) is not "
    "available on that route.")

#: The weighted sampler's state in every checkpoint folder: the composed source (scheduler and
#: stream) and the prompts drawn so far in the epoch; a resume reads it back.
SAMPLER_STATE_FILE = "trajval_sampler_state.json"
SAMPLER_STATE_VERSION = 1


class WeightedRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` with prompts drawn by weight.

    :param data_source: the training dataset.
    :param source: a :class:`ComposedSampler` over the dataset's rows.
    :param mini_repeat_count: times each prompt is repeated (``num_generations``).
    :param batch_size: distinct draws per chunk.
    :param repeat_count: times each chunk is repeated.
    """

    def __init__(self, data_source: Sized, source: ComposedSampler, mini_repeat_count: int,
                 batch_size: int = 1, repeat_count: int = 1):
        if source.num_tasks != len(data_source):
            raise ValueError(f"{source.num_tasks} weights for a dataset of {len(data_source)} rows")
        super().__init__(data_source, mini_repeat_count=mini_repeat_count, batch_size=batch_size,
                         repeat_count=repeat_count, shuffle=False, seed=source.sampler.seed)
        self.source = source
        self.epoch = 0
        self._chunks_epoch, self._epoch_chunks = 0, []  # the prompts drawn so far in the running epoch
        self._replay: tuple[int, list[list[int]]] | None = None  # set by load_state_dict

    def set_epoch(self, epoch: int) -> None:
        """Called by Trainer/accelerate at each epoch start."""
        self.epoch = whole_number(epoch, "epoch")

    def __iter__(self):
        replay = self._take_replay()
        if replay is None:
            self.source.set_epoch(self.epoch)
        self._chunks_epoch, self._epoch_chunks = self.epoch, list(replay or [])
        for position in range(self.num_samples // self.batch_size):
            if replay is not None and position < len(replay):
                chunk = replay[position]
            else:
                chunk = self.source.draw(self.batch_size).tolist()  # drawn lazily: feedback shapes later chunks
                self._epoch_chunks.append(chunk)
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index
        self.epoch += 1

    def _take_replay(self) -> list[list[int]] | None:
        """The chunks a resumed epoch serves again, once; None unless a state saved inside this
        epoch was loaded."""
        replay, self._replay = self._replay, None
        return replay[1] if replay is not None and replay[0] == self.epoch else None

    def state_dict(self) -> dict:
        """The source's state and the prompts drawn so far in the epoch. A resume inside the
        epoch serves those again before drawing on, as the batches ``Trainer`` skips and any its
        loader fetched ahead: drawing them anew would give other prompts where the feedback
        since moved the weights, and would move the stream on (BOTS's Thompson samples)."""
        return {"version": SAMPLER_STATE_VERSION, "source": jsonable(self.source.state_dict()),
                "epoch": self._chunks_epoch, "chunks": self._epoch_chunks}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != SAMPLER_STATE_VERSION:
            raise ValueError(f"unknown trajval sampler state version {state.get('version')!r}")
        self.source.load_state_dict(state["source"])
        self._replay = (int(state["epoch"]), [[int(i) for i in chunk] for chunk in state["chunks"]])


# ----------------------------------------------------------------------------- dynamic sampling
# DAPO's rule: a group whose rewards are all equal has zero advantage and gives no gradient; drop
# it and generate more prompts until the batch holds its number of informative groups. What it
# costs (every completion generated, the dropped ones included) is logged per step.

#: Keys of TRL's generation output padded on the left (the prompts); other 2-D tensors pad right.
_LEFT_PADDED = ("prompt_ids", "prompt_mask")


def informative_groups(advantages: torch.Tensor, group_size: int) -> torch.Tensor:
    """One bool per group of ``group_size`` consecutive completions: whether its advantages
    differ (rewards all equal give every completion the same zero advantage)."""
    grouped = advantages.reshape(-1, group_size)
    return (grouped.max(dim=1).values - grouped.min(dim=1).values) > 1e-6


def select_groups(output: dict, keep: torch.Tensor, group_size: int) -> dict:
    """The rows of a generation output that belong to the kept groups (per-row tensors and lists
    indexed; batch-level scalars left as they are)."""
    rows = keep.repeat_interleave(group_size)
    count = rows.numel()
    chosen = {}
    for key, value in output.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == count:
            chosen[key] = value[rows.to(value.device)]
        elif isinstance(value, list) and len(value) == count:
            chosen[key] = [item for item, kept in zip(value, rows.tolist()) if kept]
        else:
            chosen[key] = value
    return chosen


def concat_outputs(parts: list[dict], pad_token_id: int) -> dict:
    """Generation outputs of several rounds as one: per-row tensors concatenated, sequence
    tensors re-padded to a common width (prompts on the left, the rest on the right)."""
    from trl.trainer.utils import pad

    merged = {}
    for key, first in parts[0].items():
        values = [part[key] for part in parts]
        if isinstance(first, torch.Tensor) and first.ndim >= 2:
            fill = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            side = "left" if key in _LEFT_PADDED else "right"
            merged[key] = pad([row for value in values for row in value], padding_value=fill, padding_side=side)
        elif isinstance(first, torch.Tensor) and first.ndim == 1:
            merged[key] = torch.cat(values)
        elif isinstance(first, list):
            merged[key] = [item for value in values for item in value]
        else:
            merged[key] = first
    return merged


class TrajvalSamplerMixin:
    """Mixin for a ``GRPOTrainer`` or ``RLOOTrainer`` (sub)class: put it first in the bases.

    Extra constructor keywords: ``weight_column`` (default ``trajval_weight``; None: no prior,
    TRL's own sampler unless an online scheduler is given) and
    ``online_scheduler`` (a :class:`~trajval_ops.samplers.online.GresoScheduler` /
    :class:`~trajval_ops.samplers.online.BotsScheduler`, or None). The built
    :class:`ComposedSampler` is ``self.trajval_source``.

    With an online scheduler, the training set gets a ``trajval_position`` column (the row position)
    and every training generation batch feeds the scheduler: the rows and the weighted sum of
    the reward functions, gathered from all processes (TRL gathers the rewards itself), so
    every process applies the same feedback and the streams stay aligned.
    """

    def __init__(self, *args, weight_column: str | None = WEIGHT, online_scheduler=None, dynamic_sampling: bool = False,
                 max_generation_rounds: int = 8, **kwargs):
        if any(cls.__module__.startswith(ASYNC_GRPO_MODULE) for cls in type(self).__mro__):
            raise TypeError(ASYNC_GRPO_ROUTE)
        problem = value_problem(max_generation_rounds, int, {"ge": 1})
        if problem:
            raise ValueError(f"max_generation_rounds {problem}")
        self.trajval_weight_column = weight_column
        self.trajval_online_scheduler = online_scheduler
        self.trajval_dynamic_sampling = bool(dynamic_sampling)
        self.trajval_max_rounds = int(max_generation_rounds)
        self.trajval_source: ComposedSampler | None = None
        self.trajval_sampler: WeightedRepeatSampler | None = None
        super().__init__(*args, **kwargs)
        if self.trajval_dynamic_sampling and self.accelerator.num_processes > 1:
            raise NotImplementedError("dynamic_sampling drops groups per process; it runs on one process only "
                                      "(use verl's filter_groups or OpenRLHF's dynamic filtering on several)")
        if self.trajval_dynamic_sampling and isinstance(self, RLOOTrainer) and self.beta != 0.0:
            raise ValueError(f"dynamic_sampling drops the groups whose advantages are all equal, but RLOOTrainer with "
                             f"beta={self.beta} (RLOOConfig's default is 0.05) subtracts beta * KL from each reward "
                             f"before its leave-one-out baseline, so a group of equal task rewards still has "
                             f"differing advantages and would be kept: set RLOOConfig(beta=0.0) for dynamic_sampling")
        if online_scheduler is not None:
            if TRAIN_POSITION in self.train_dataset.column_names:
                raise ValueError(f"the training set already has a '{TRAIN_POSITION}' column")
            self.train_dataset = self.train_dataset.add_column(TRAIN_POSITION, list(range(len(self.train_dataset))))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.trajval_online_scheduler is not None and self.model.training:
            rows = np.asarray(gather_object([example[TRAIN_POSITION] for example in inputs]), dtype=np.int64)
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
            rewards = (rewards_per_func * weights).nansum(dim=1)
            scorable = ~torch.isnan(rewards_per_func).all(dim=1)  # TRL's unscorable completions
            rewards, scorable = rewards.float().cpu().numpy(), scorable.cpu().numpy()
            groups = np.arange(rows.size) // self.num_generations  # TRL's layout: each prompt's group in a row
            if scorable.any():
                self.trajval_source.feedback(rows[scorable], rewards[scorable], group_ids=groups[scorable])
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        """With ``dynamic_sampling``, DAPO's rule on each training generation batch: keep the
        groups whose rewards differ, generate fresh groups (prompts drawn from the same weighted
        source) until the batch is full of informative groups or ``max_generation_rounds`` is
        reached (then the rest of the batch is filled with uninformative groups), and log what
        the step generated (``dynamic_sampling/completions``, ``/rounds``, ``/informative_share``)."""
        if not (self.trajval_dynamic_sampling and self.model.training):
            return super()._generate_and_score_completions(inputs)
        if any(key in inputs[0] for key in ("image", "images")):
            raise NotImplementedError("dynamic_sampling covers text prompts only")
        size = self.num_generations
        wanted, batch = len(inputs) // size, inputs
        kept, dropped, generated, rounds, informative = [], [], 0, 0, 0
        while True:
            output = super()._generate_and_score_completions(batch)
            keep = informative_groups(output["advantages"], size)
            kept.append(select_groups(output, keep, size))
            dropped.append(select_groups(output, ~keep, size))
            generated, rounds, informative = generated + len(batch), rounds + 1, informative + int(keep.sum())
            if informative >= wanted or rounds >= self.trajval_max_rounds:
                break
            batch = self._trajval_fresh_groups(len(inputs) // size)
        groups = self._trajval_fill(kept, dropped, wanted, size)
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/completions"].append(generated)
        metrics["dynamic_sampling/rounds"].append(rounds)
        metrics["dynamic_sampling/informative_share"].append(informative / (generated // size))
        return groups

    def _trajval_fresh_groups(self, prompts: int) -> list[dict]:
        """``prompts`` rows drawn from the weighted source, each repeated for its group."""
        rows = [dict(self.train_dataset[int(index)]) for index in self.trajval_source.draw(prompts)]
        return [row for row in rows for _ in range(self.num_generations)]

    def _trajval_fill(self, kept: list[dict], dropped: list[dict], wanted: int, size: int) -> dict:
        """The batch of ``wanted`` groups: informative ones first, uninformative ones only to fill
        what the round cap left empty; the loss normaliser recomputed for the rows kept."""
        merged = concat_outputs(kept + dropped, self.processing_class.pad_token_id
                                if hasattr(self.processing_class, "pad_token_id") else 0)
        rows = wanted * size
        batch = {key: (value[:rows] if isinstance(value, (torch.Tensor, list)) and not
                       (isinstance(value, torch.Tensor) and value.ndim == 0) else value)
                 for key, value in merged.items()}
        mask = batch["completion_mask"] if batch.get("tool_mask") is None else batch["completion_mask"] * batch["tool_mask"]
        batch["num_items_in_batch"] = mask.sum()
        return batch

    def _get_train_sampler(self, dataset=None):
        if dataset is None:
            dataset = self.train_dataset
        if self.trajval_weight_column is None and self.trajval_online_scheduler is None:
            return super()._get_train_sampler(dataset)  # no prior, no scheduler: TRL's own sampler
        if self.trajval_weight_column is None:  # an online scheduler over a uniform prior
            weights = np.ones(len(dataset))
        else:
            weights = weights_from_dataset(dataset, self.trajval_weight_column)
        if self.trajval_source is None:  # built once: keeps online state across re-creations
            self.trajval_source = ComposedSampler(weights, online=self.trajval_online_scheduler, seed=self.args.seed)
        self.trajval_sampler = WeightedRepeatSampler(
            dataset,
            self.trajval_source,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
        )
        return self.trajval_sampler

    # Checkpoints: the hooks trl 1.16's GRPOTrainer uses for its own extra state (transformers 5's
    # Trainer calls _load_optimizer_and_scheduler on every resume, after building the sampler).
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.trajval_sampler is not None and self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            with atomic_open(os.path.join(folder, SAMPLER_STATE_FILE)) as out:
                json.dump(self.trajval_sampler.state_dict(), out)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None or self.trajval_sampler is None:
            return
        path = os.path.join(checkpoint, SAMPLER_STATE_FILE)
        if not os.path.exists(path):
            if self.trajval_online_scheduler is None:
                return  # prior only: epoch e's stream is (seed, e), which Trainer's skip replays
            raise TrajvalInputError(
                f"checkpoint {checkpoint} has no {SAMPLER_STATE_FILE} (saved before trajval_ops kept the online "
                f"scheduler's state in checkpoints): resuming it would start {type(self.trajval_online_scheduler).__name__} "
                f"afresh and serve other prompts. Resume from a checkpoint that has the file, or train from the start")
        with open(path, encoding="utf-8") as handle:
            self.trajval_sampler.load_state_dict(json.load(handle))


@dataclass
class TrajvalScriptArguments:
    """What ``trajval validate --trainer trl`` gives each run of a TRL script: its pool, its
    held-out set and the weight column of its prior. Add the class to the script's ``TrlParser``
    and train with :class:`TrajvalGRPOTrainer`::

        parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig, TrajvalScriptArguments))
        script_args, training_args, model_args, trajval_args = parser.parse_args_and_config()
        train, held_out = trajval_args.datasets(default_train, default_eval)
        trainer = TrajvalGRPOTrainer(..., train_dataset=train, eval_dataset=held_out,
                                     weight_column=trajval_args.trajval_weight_column)

    Unset (the script run by hand), the script's own datasets and TRL's own sampler serve.
    """

    trajval_train_file: str | None = field(default=None, metadata={
        "help": "The run's pool (JSON lines or parquet), in place of the script's training set."})
    trajval_eval_file: str | None = field(default=None, metadata={
        "help": "The held-out set the run is evaluated on (JSON lines or parquet)."})
    trajval_weight_column: str | None = field(default=None, metadata={
        "help": "The pool's weight column prompts are drawn by; unset: TRL's own uniform sampler (the uniform arm)."})

    def datasets(self, train=None, eval_set=None) -> tuple:
        """``(train, eval)``: the files given, read with ``datasets``, else ``train`` / ``eval_set``."""
        return _file_dataset(self.trajval_train_file, train), _file_dataset(self.trajval_eval_file, eval_set)


def _file_dataset(path: str | None, default):
    if path is None:
        return default
    from datasets import load_dataset

    kind = "parquet" if path.endswith(".parquet") else "json"
    return load_dataset(kind, data_files=path, split="train")


class TrajvalGRPOTrainer(TrajvalSamplerMixin, GRPOTrainer):
    """``GRPOTrainer`` whose training prompts are drawn by the ``trajval_weight`` column."""


class TrajvalRLOOTrainer(TrajvalSamplerMixin, RLOOTrainer):
    """``RLOOTrainer`` whose training prompts are drawn by the ``trajval_weight`` column."""


#: datasets 5's generator-built IterableDataset starts its generator afresh on every pass and its
#: set_epoch reaches no generator (it only reseeds shuffles), so a finite stream would serve a
#: trainer's second pass the first pass's draws.
FINITE_EPOCHS_REFUSED = (
    "weighted_iterable_dataset: epochs={epochs} is refused: a trainer that reaches the end of a finite stream "
    "iterates it again (Trainer's next epoch), and the stream restarts at its first draw, so every pass would "
    "serve the same rows. Leave epochs unset (an endless stream: each epoch of draws_per_epoch rows is its own "
    "(seed, epoch) draw) and end the run with max_steps; for a finite list of draws use .take(n)")


def weighted_iterable_dataset(dataset, *, weight_column: str = WEIGHT, seed: int = 0,
                              draws_per_epoch: int | None = None, epochs: int | None = None):
    """An endless ``datasets.IterableDataset`` that streams ``dataset``'s rows drawn by weight.

    For trainers that take an iterable training set, where no sampler applies (TRL's
    ``GRPOTrainer`` accepts one and rebuilds its prompt grouping on the stream; set
    ``max_steps``, and ``shuffle_dataset=False`` since the draws are already random). Each
    epoch draws ``draws_per_epoch`` rows (default: the pool size) with replacement in
    proportion to ``weight_column``, from the stream ``(seed, epoch)`` of
    :class:`~trajval_ops.samplers.weighted.WeightedIndexSampler`: every process yields the same
    rows in the same order, as TRL's iterable path expects. A finite ``epochs`` is refused (see
    :data:`FINITE_EPOCHS_REFUSED`); ``.take(n)`` gives the first ``n`` draws.
    Online composition (GRESO, BOTS) needs feedback into a sampler: use
    :class:`TrajvalGRPOTrainer` on the map-style dataset for that.
    """
    from datasets import IterableDataset

    if epochs is not None:
        raise ValueError(FINITE_EPOCHS_REFUSED.format(epochs=epochs))
    weights = weights_from_dataset(dataset, weight_column)  # errors name the row and the field
    draws = len(dataset) if draws_per_epoch is None else whole_number(draws_per_epoch, "draws_per_epoch", 1)
    seed = whole_number(seed, "seed")
    return IterableDataset.from_generator(
        _weighted_rows, gen_kwargs={"dataset": dataset, "weights": weights, "seed": seed, "draws": draws},
        features=dataset.features,
    )


def _weighted_rows(dataset, weights, seed: int, draws: int):
    from itertools import count

    from trajval_ops.samplers.weighted import WeightedIndexSampler

    sampler = WeightedIndexSampler(weights, seed=seed)
    for epoch in count():
        sampler.set_epoch(epoch)
        for first in range(0, draws, 1024):  # draw in blocks: rows are read one at a time
            for index in sampler.draw(min(1024, draws - first)):
                yield dataset[int(index)]
