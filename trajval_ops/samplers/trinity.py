"""Trinity-RFT adapter: a task selector registered in ``SELECTORS`` (targets trinity-rft 0.6.0).

Trinity's ``TasksetScheduler`` calls ``get_indices(batch_size)`` and routes the explorer's
per-task feedback to ``feedback(indices, values)`` (values: mean reward per task, read as a
pass rate in [0, 1]). Config (taskset)::

    data_selector:
      selector_type: trajval_ops.samplers.trinity.TrajvalSelector   # or "trajval" after register()
      seed: 42
      feature_keys: [trajval_weight]        # the weight column (default trajval_weight)
      kwargs: {online: bots, m: 16}          # optional: greso | bots, rollouts per task

BOTS as its paper runs it takes two reference models' pass rates (weaker, stronger) as implicit
evidence for unobserved tasks: list them after the weight column, as BOTS's own selector lists
its two feature keys::

      feature_keys: [trajval_weight, qwen2.5_7b_pass_rate, qwen3_32b_pass_rate]
      kwargs: {online: bots, m: 16, lam: 0.1, rho: 0.1, target: 0.5, tau: 0.5}
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

import numpy as np
from trinity.buffer.selector import SELECTORS
from trinity.buffer.selector.selector import BaseSelector

from trajval_ops.fields import WEIGHT
from trajval_ops.samplers.online import BotsScheduler, ComposedSampler, GresoScheduler
from trajval_ops.samplers.weighted import weights_from_dataset

REGISTRY_NAME = "trajval"
TRINITY_VERSION = "0.6.0"
ONLINE_SCHEDULERS = {"greso": GresoScheduler, "bots": BotsScheduler}


def _jsonable(value: Any) -> Any:
    # Trinity checkpoints selector state with the explorer's state: keep it plain Python.
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


class TrajvalSelector(BaseSelector):
    """Draws tasks in proportion to ``trajval_weight`` (times GRESO/BOTS online weights).

    ``get_indices`` costs one binary search per index (plus one O(n) table rebuild after
    feedback when an online scheduler is set).
    """

    def __init__(self, data_source, config):
        super().__init__(data_source, config)
        keys = list(config.feature_keys or [])
        weight_key = keys[0] if keys else WEIGHT
        weights = weights_from_dataset(data_source.dataset, weight_key)
        kwargs = dict(config.kwargs or {})
        online_name = kwargs.pop("online", None)
        if len(keys) not in (0, 1, 3):
            raise ValueError(f"feature_keys must be [weight] or [weight, weaker model's pass rate, stronger model's "
                             f"pass rate] (BOTS's references), got {keys}")
        if len(keys) == 3:
            if online_name != "bots":
                raise ValueError("reference pass-rate feature keys are BOTS's evidence: set kwargs.online: bots")
            kwargs["reference_pass_rates"] = tuple(
                np.asarray(data_source.dataset[key], dtype=np.float64) for key in keys[1:])
        self.num_rollouts = int(kwargs.pop("m", 16))
        online = None
        if online_name is not None:
            if online_name not in ONLINE_SCHEDULERS:
                raise ValueError(f"kwargs.online must be one of {sorted(ONLINE_SCHEDULERS)}, got {online_name!r}")
            if online_name == "bots":
                kwargs.setdefault("m", self.num_rollouts)
            online = ONLINE_SCHEDULERS[online_name](weights.size, **kwargs)
        self.source = ComposedSampler(weights, online=online, seed=int(config.seed))

    def get_indices(self, batch_size: int, return_extra_info: bool = False):
        indices = self.source.draw(batch_size)
        if return_extra_info:
            return indices, {"indices": indices.tolist(), "prob": self.source.sampler.prob[indices].tolist()}
        return indices

    def feedback(self, indices: List[int], values: List[float]) -> None:
        self.source.feedback_pass_rates(indices, values, self.num_rollouts)

    def state_dict(self) -> Dict:
        return _jsonable(self.source.state_dict())

    def load_state_dict(self, state_dict: Dict) -> None:
        self.source.load_state_dict(state_dict)


def register(name: str = REGISTRY_NAME) -> None:
    """Register :class:`TrajvalSelector` as ``selector_type: <name>`` (idempotent)."""
    if SELECTORS.modules.get(name) is not TrajvalSelector:
        SELECTORS.register_module(name, TrajvalSelector)


register()
