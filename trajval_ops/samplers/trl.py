"""TRL adapter: ``GRPOTrainer._get_train_sampler`` drawing prompts by ``trajval_weight``.

Keeps TRL's ``RepeatSampler`` structure (checked against trl 1.16.0): chunks of
``generation_batch_size // num_generations`` prompts, each prompt repeated ``num_generations``
times, each chunk repeated ``num_iterations * steps_per_generation`` times. Only the choice of
the prompts changes: drawn with replacement by weight instead of a permutation. Every process
draws the same stream (seed and epoch), so repeated groups line up across processes; the
stream of an epoch is fixed (``Trainer`` calls ``set_epoch``), so replaying an epoch's first
batches on resume gives the same prompts.
"""

from __future__ import annotations

from typing import Sized

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from trajval_ops.fields import TRAIN_POSITION, WEIGHT
from trajval_ops.samplers.online import ComposedSampler
from trajval_ops.samplers.weighted import weights_from_dataset



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

    def set_epoch(self, epoch: int) -> None:
        """Called by Trainer/accelerate at each epoch start."""
        self.epoch = int(epoch)

    def __iter__(self):
        self.source.set_epoch(self.epoch)
        for _ in range(self.num_samples // self.batch_size):
            chunk = self.source.draw(self.batch_size).tolist()  # drawn lazily: feedback shapes later chunks
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index
        self.epoch += 1


class TrajvalSamplerMixin:
    """Mixin for a ``GRPOTrainer`` (sub)class: put it first in the bases.

    Extra constructor keywords: ``weight_column`` (default ``trajval_weight``) and
    ``online_scheduler`` (a :class:`~trajval_ops.samplers.online.GresoScheduler` /
    :class:`~trajval_ops.samplers.online.BotsScheduler`, or None). The built
    :class:`ComposedSampler` is ``self.trajval_source``.

    With an online scheduler, the training set gets a ``trajval_position`` column (the row position)
    and every training generation batch feeds the scheduler: the rows and the weighted sum of
    the reward functions, gathered from all processes (TRL gathers the rewards itself), so
    every process applies the same feedback and the streams stay aligned.
    """

    def __init__(self, *args, weight_column: str = WEIGHT, online_scheduler=None, **kwargs):
        self.trajval_weight_column = weight_column
        self.trajval_online_scheduler = online_scheduler
        self.trajval_source: ComposedSampler | None = None
        super().__init__(*args, **kwargs)
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
            if scorable.any():
                self.trajval_source.feedback(rows[scorable], rewards[scorable])
        return rewards_per_func

    def _get_train_sampler(self, dataset=None):
        if dataset is None:
            dataset = self.train_dataset
        weights = weights_from_dataset(dataset, self.trajval_weight_column)
        if self.trajval_source is None:  # built once: keeps online state across re-creations
            self.trajval_source = ComposedSampler(weights, online=self.trajval_online_scheduler, seed=self.args.seed)
        return WeightedRepeatSampler(
            dataset,
            self.trajval_source,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
        )


class TrajvalGRPOTrainer(TrajvalSamplerMixin, GRPOTrainer):
    """``GRPOTrainer`` whose training prompts are drawn by the ``trajval_weight`` column."""


def weighted_iterable_dataset(dataset, *, weight_column: str = WEIGHT, seed: int = 0,
                              draws_per_epoch: int | None = None, epochs: int | None = None):
    """A ``datasets.IterableDataset`` that streams ``dataset``'s rows drawn by weight.

    For trainers that take an iterable training set, where no sampler applies (TRL's
    ``GRPOTrainer`` accepts one and rebuilds its prompt grouping on the stream; set
    ``max_steps``, and ``shuffle_dataset=False`` since the draws are already random). Each
    epoch draws ``draws_per_epoch`` rows (default: the pool size) with replacement in
    proportion to ``weight_column``, from the stream ``(seed, epoch)`` of
    :class:`~trajval_ops.samplers.weighted.WeightedIndexSampler`: every process yields the same
    rows in the same order, as TRL's iterable path expects. ``epochs=None`` streams without end.
    Online composition (GRESO, BOTS) needs feedback into a sampler: use
    :class:`TrajvalGRPOTrainer` on the map-style dataset for that.
    """
    from datasets import IterableDataset

    weights = weights_from_dataset(dataset, weight_column)  # errors name the row and the field
    draws = len(dataset) if draws_per_epoch is None else int(draws_per_epoch)
    if draws < 1:
        raise ValueError(f"draws_per_epoch must be >= 1, got {draws}")
    if epochs is not None and int(epochs) < 1:
        raise ValueError(f"epochs must be >= 1 or None, got {epochs}")
    return IterableDataset.from_generator(
        _weighted_rows, gen_kwargs={"dataset": dataset, "weights": weights, "seed": int(seed),
                                    "draws": draws, "epochs": epochs},
        features=dataset.features,
    )


def _weighted_rows(dataset, weights, seed: int, draws: int, epochs: int | None):
    from itertools import count

    from trajval_ops.samplers.weighted import WeightedIndexSampler

    sampler = WeightedIndexSampler(weights, seed=seed)
    for epoch in count() if epochs is None else range(epochs):
        sampler.set_epoch(epoch)
        for first in range(0, draws, 1024):  # draw in blocks: rows are read one at a time
            for index in sampler.draw(min(1024, draws - first)):
                yield dataset[int(index)]
