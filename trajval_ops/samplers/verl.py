"""verl adapter: ``data.sampler.class_path`` / ``class_name`` samplers reading ``trajval_weight``.

Targets verl 0.7.1, the last release with the dataset-sampler hook
(``verl.experimental.dataset.sampler.AbstractSampler``, built by ``create_rl_sampler`` in
``verl/trainer/main_ppo.py``; ``AbstractCurriculumSampler.update(batch)`` called by
``RayPPOTrainer`` after each step). verl 0.8.0 and 0.9.x removed that hook: there, use the
resampled pool written by ``trajval_weighted_resampler`` (see docs/howto/trainers.md).

Configuration (hydra, ``+`` adds keys verl's schema does not list)::

    data.sampler.class_path=pkg://trajval_ops.samplers.verl
    data.sampler.class_name=TrajvalVerlSampler        # or TrajvalVerlCurriculumSampler
    data.dataloader_num_workers=0                     # verl requires it for custom samplers
    +data.sampler.weight_key=trajval_weight           # optional
    +data.sampler.online=bots                         # curriculum only: greso | bots
    +data.sampler.id_key=extra_info.index             # curriculum only: task id (dotted path)
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, Mapping

import numpy as np
from omegaconf import DictConfig
from verl.experimental.dataset.sampler import AbstractCurriculumSampler, AbstractSampler

from trajval_ops.fields import WEIGHT
from trajval_ops.samplers.online import BotsScheduler, ComposedSampler, GresoScheduler
from trajval_ops.samplers.torch_sampler import TrajvalSampler
from trajval_ops.samplers.verl_dataset import GROUP_KEY
from trajval_ops.samplers.weighted import weights_from_dataset
from trajval_ops.errors import TrajvalInputError
from trajval_ops.rows import get_path, path_parts
from trajval_ops.settings import whole_number

ONLINE_SCHEDULERS = {"greso": GresoScheduler, "bots": BotsScheduler}
#: Where verl rows carry their task id (RLHFDataset also copies it to ``index``).
DEFAULT_ID_KEY = "extra_info.index"


def _sampler_option(data_config: DictConfig, key: str, default: Any = None) -> Any:
    sampler_config = data_config.get("sampler") or {}
    value = sampler_config.get(key, None)
    return default if value is None else value


def _dataset_rows(data_source: Sized):
    # RLHFDataset keeps its rows, after filter_overlong_prompts, in `.dataframe`.
    return getattr(data_source, "dataframe", data_source)


class TrajvalVerlSampler(AbstractSampler):
    """Draws ``len(dataset)`` rows per epoch by the weight column of ``RLHFDataset.dataframe``.

    The weights are read after verl's overlong-prompt filter, so positions match the rows the
    dataloader serves. Checkpointed with the dataloader state (``StatefulDataLoader``).
    """

    def __init__(self, data_source: Sized, data_config: DictConfig):
        weight_key = _sampler_option(data_config, "weight_key", WEIGHT)
        rows = _dataset_rows(data_source)
        weights = weights_from_dataset(rows, weight_key)
        if weights.size != len(data_source):
            raise TrajvalInputError(f"field '{weight_key}': {weights.size} weights for {len(data_source)} rows")
        seed = data_config.get("seed", None)
        online = self._build_online(data_source, weights.size, data_config)
        self.source = ComposedSampler(weights, online=online, seed=0 if seed is None else seed)  # checked there
        size = "gen_batch_size" if data_config.get("gen_batch_size", None) else "train_batch_size"
        self.batch_size = whole_number(data_config.get(size, 64), f"data.{size}", 1)
        self.inner = TrajvalSampler(source=self.source, chunk_size=self.batch_size)

    def _build_online(self, data_source: Sized, num_tasks: int, data_config: DictConfig):
        return None

    def __iter__(self):
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume; a state with no full batch left in its epoch starts the next one. verl's loop
        resumes at epoch ``global_steps // len(dataloader)`` (``drop_last``) and never calls
        ``set_epoch``: a state saved in an epoch's last step was read as the rest of that epoch,
        nothing, in the loop's next epoch, which was lost."""
        self.inner.load_state_dict(state)
        if self.inner.total_size - int(state["yielded"]) < self.batch_size:
            self.inner.set_epoch(int(state["epoch"]) + 1)


class TrajvalVerlCurriculumSampler(TrajvalVerlSampler, AbstractCurriculumSampler):
    """``w_trajval * w_online`` with GRESO or BOTS updated from each step's batch.

    ``update(batch)`` maps each rollout's task id back to its dataset row and its sequence score
    (``batch.batch["token_level_scores"].sum(-1)``) to a binary accuracy (score > 0.5). The id is
    read with the dotted ``id_key`` (default ``extra_info.index``): its first part names a
    dataset column / ``non_tensor_batch`` key, the rest a path inside it (dict or JSON string).
    ``extra_info`` is one of the keys verl 0.7.1 keeps in the training batch through generation
    (``RayPPOTrainer._get_gen_batch``), so the default works without extra configuration.
    """

    def _build_online(self, data_source: Sized, num_tasks: int, data_config: DictConfig):
        name = _sampler_option(data_config, "online", "bots")
        if name not in ONLINE_SCHEDULERS:
            raise ValueError(f"data.sampler.online must be one of {sorted(ONLINE_SCHEDULERS)}, got {name!r}")
        self.id_key = _sampler_option(data_config, "id_key", DEFAULT_ID_KEY)
        self._row_of_id = self._index_rows(data_source)
        return ONLINE_SCHEDULERS[name](num_tasks)

    def _ids(self, column) -> list:
        head, *rest = path_parts(self.id_key)
        values = list(column[head]) if not rest else [get_path({head: value}, self.id_key, None) for value in column[head]]
        return [value.item() if isinstance(value, np.generic) else value for value in values]

    def _index_rows(self, data_source: Sized) -> dict:
        try:
            ids = self._ids(_dataset_rows(data_source))
        except KeyError as err:
            raise TrajvalInputError(f"row 0: task id field '{self.id_key}' is missing from the dataset") from err
        row_of_id = {}
        for position, task_id in enumerate(ids):
            if task_id is None or task_id in row_of_id:
                what = "missing" if task_id is None else f"duplicate {task_id!r}"
                raise TrajvalInputError(
                    f"row {position}: task id '{self.id_key}' is {what}; online feedback needs unique ids"
                )
            row_of_id[task_id] = position
        return row_of_id

    def update(self, batch) -> None:
        try:
            ids = self._ids(batch.non_tensor_batch)
        except KeyError as err:
            raise TrajvalInputError(f"the training batch has no '{self.id_key}' (set data.sampler.id_key)") from err
        try:
            rows = np.fromiter((self._row_of_id[i] for i in ids), dtype=np.int64, count=len(ids))
        except KeyError as err:
            raise TrajvalInputError(f"task id {err.args[0]!r} in the batch is not in the training set") from err
        scores = batch.batch["token_level_scores"].sum(dim=-1).float().cpu().numpy()
        # verl tags each prompt's responses with one uid (balance_batch may reorder them)
        self.source.feedback(rows, scores, group_ids=batch.non_tensor_batch.get(GROUP_KEY))
