"""OpenRLHF route: a weighted sampler for the prompts dataloader (checked against openrlhf 0.11.2).

OpenRLHF's ``prepare_datasets`` builds ``PromptDataset`` from the raw rows (one item per row, in
order, keeping only prompt, label, image and datasource) and calls
``strategy.setup_dataloader(..., sampler=None)``, which accepts a ``sampler`` nobody passes.
Read the weights from the raw rows before ``PromptDataset`` drops the column and pass
:func:`prompt_sampler`'s result as ``sampler=``. With no code change at all, train on the pool
resampled by the ``trajval_weighted_resampler`` operator instead (see docs/howto/trainers.md).
"""

from __future__ import annotations

from trajval_ops.fields import WEIGHT
from trajval_ops.samplers.torch_sampler import TrajvalSampler
from trajval_ops.samplers.weighted import weights_from_dataset


def prompt_sampler(raw_rows, seed: int, num_replicas: int = 1, rank: int = 0,
                   weight_key: str = WEIGHT, num_samples: int | None = None) -> TrajvalSampler:
    """A :class:`TrajvalSampler` over OpenRLHF's raw prompt rows (a ``datasets.Dataset``).

    :param raw_rows: the rows ``PromptDataset`` is built from, same order.
    :param seed: ``args.train.seed`` (same on every rank).
    :param num_replicas: data-parallel world size (each rank takes every ``num_replicas``-th draw).
    :param rank: data-parallel rank.
    """
    return TrajvalSampler(weights_from_dataset(raw_rows, weight_key), num_samples=num_samples,
                          seed=seed, num_replicas=num_replicas, rank=rank)
