"""Trinity-RFT adapter: a task selector registered in ``SELECTORS`` (targets trinity-rft 0.6.0).

Trinity's ``TasksetScheduler`` calls ``get_indices(batch_size)`` and, when the taskset's
experience pipeline holds the ``pass_rate_calculator`` operator
(``data_processor.experience_pipeline.operators: [{name: pass_rate_calculator}]``), routes the
explorer's per-task feedback to ``feedback(indices, values)``: each task's *mean reward* over its
rollouts. Without that operator no feedback arrives and an online scheduler never updates.

Trinity's rewards are not always pass rates (its math rewards add +-0.1 format scores, its DAPO
reward is -1 / +1). ``kwargs.reward_mapping`` says how a mean reward becomes a pass rate:
``auto`` (the default: a value in [0, 1] is a pass rate; any other value maps to solved (1) when
it exceeds ``reward_threshold`` (default 0), else unsolved (0)), ``pass_rate`` (values must be
pass rates), ``threshold`` (every value by the threshold) or ``signed`` (a -1 / +1 reward such as
DAPO's: the mean ``m`` is the pass rate ``(m + 1) / 2``). A NaN or missing value is counted,
logged and skipped, never fatal to the explorer. Config (taskset)::

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

Trinity's own ``bots.yaml`` (``examples/bots``) and its ``difficulty_based`` selector name three
of these ``lamb``, ``target_reward`` and ``do_sample`` (Thompson sampling: ``thompson``): all are
accepted, as is its estimator's ``adaptive_rho``. Its ``tau: 0`` means greedy top-k selection,
which this selector (a sampler) does not do: it is refused with that explanation. Any other key
is refused with the known ones listed (a typo would otherwise reach the scheduler as a bare
``TypeError``, or be ignored), and every value is checked against its declaration (type, range,
finite) when the selector is built, the error naming the key as the config writes it. Unset keys
take the BOTS paper's defaults (``BotsScheduler``'s), not Trinity's ``difficulty_based`` defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
from trinity.buffer.selector import SELECTORS
from trinity.buffer.selector.selector import BaseSelector

from loguru import logger

from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import WEIGHT
from trajval_ops.samplers.online import BotsScheduler, BotsSettings, ComposedSampler, GresoScheduler
from trajval_ops.samplers.weighted import pass_rates_from_dataset, weights_from_dataset
from trajval_ops.settings import check_settings, declared, declared_as, default_of, setting, type_hints, value_problem

REGISTRY_NAME = "trajval"
ONLINE_SCHEDULERS = {"greso": GresoScheduler, "bots": BotsScheduler}
#: Trinity's difficulty_based (BOTS) names, as its bots.yaml writes them -> BotsScheduler's
TRINITY_BOTS_NAMES = {"lamb": "lam", "target_reward": "target", "do_sample": "thompson"}
REWARD_MAPPINGS = ("auto", "pass_rate", "threshold", "signed")


@dataclass(frozen=True)
class SelectorSettings:
    """The kwargs the selector reads itself (``m`` also reaches BOTS); the others configure the
    online scheduler (:class:`~trajval_ops.samplers.online.GresoSettings`, :class:`BotsSettings`)."""

    online: Optional[str] = setting(None, "the online scheduler composed with the prior (none: the prior alone).",
                                    choices=(None, *ONLINE_SCHEDULERS))
    m: int = declared_as(BotsSettings, "m")
    reward_mapping: str = setting("auto", "how a task's mean reward reads as a pass rate (the module docstring).",
                                  choices=REWARD_MAPPINGS)
    reward_threshold: float = setting(0.0, "a mean reward above it counts as solved (reward_mapping auto, "
                                      "threshold).")

    def __post_init__(self):
        check_settings(self)


#: kwargs the selector reads itself
SELECTOR_SETTINGS = tuple(f.name for f in declared(SelectorSettings))


def scheduler_settings(online: str) -> dict[str, Any]:
    """The kwargs an online scheduler takes from the selector config, with their defaults (its
    declared settings; for BOTS also Trinity's names)."""
    fields = declared(ONLINE_SCHEDULERS[online].Settings)
    settings = {f.name: default_of(f) for f in fields if f.name not in SELECTOR_SETTINGS}
    if online == "bots":
        settings.update({trinity: settings[ours] for trinity, ours in TRINITY_BOTS_NAMES.items()})
    return settings


def feedback_pass_rates(values, mapping: str = "auto", threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Trinity's per-task mean rewards as pass rates (the rule in the module docstring), and
    which values are usable (finite)."""
    values = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    usable = np.isfinite(values)
    if mapping == "pass_rate":
        outside = usable & ((values < 0) | (values > 1))
        if outside.any():
            raise ValueError(f"reward_mapping pass_rate: value {values[outside][0]} is not a pass rate in [0, 1]")
        return np.where(usable, values, 0.0), usable
    solved = (values > threshold).astype(np.float64)
    if mapping == "threshold":
        return np.where(usable, solved, 0.0), usable
    if mapping == "signed":  # a -1 / +1 reward (DAPO's): its mean m is a pass rate (m + 1) / 2
        return np.where(usable, np.clip((values + 1.0) / 2.0, 0.0, 1.0), 0.0), usable
    in_range = usable & (values >= 0) & (values <= 1)
    return np.where(in_range, values, np.where(usable, solved, 0.0)), usable


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


def _reference_column(dataset, key: str, which: str) -> np.ndarray:
    """A BOTS reference column named in ``feature_keys``: pass rates in [0, 1], a bad value
    named by its row and the key."""
    try:
        return pass_rates_from_dataset(dataset, key)
    except TrajvalInputError as err:
        raise TrajvalInputError(f"{err} (feature_keys: '{key}' is the {which} reference model's pass rate "
                                "BOTS interpolates)") from err


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
        _check_kwargs(kwargs)
        own = SelectorSettings(**{key: kwargs.pop(key) for key in SELECTOR_SETTINGS if key in kwargs})
        online_name = own.online
        if len(keys) not in (0, 1, 3):
            raise ValueError(f"feature_keys must be [weight] or [weight, weaker model's pass rate, stronger model's "
                             f"pass rate] (BOTS's references), got {keys}")
        references = None
        if len(keys) == 3:
            if online_name != "bots":
                raise ValueError("reference pass-rate feature keys are BOTS's evidence: set kwargs.online: bots")
            references = tuple(_reference_column(data_source.dataset, key, which)
                               for key, which in zip(keys[1:], ("weaker", "stronger")))
        self.num_rollouts, self.reward_mapping, self.reward_threshold = own.m, own.reward_mapping, own.reward_threshold
        self.feedback_skipped = 0
        online = None
        if online_name == "bots":
            online = BotsScheduler(weights.size, m=self.num_rollouts, reference_pass_rates=references,
                                   **_bots_kwargs(kwargs))
        elif online_name is not None:
            online = ONLINE_SCHEDULERS[online_name](weights.size, **kwargs)
        self.source = ComposedSampler(weights, online=online, seed=config.seed)  # checked there (int() truncated)
        self.draws = 0  # Trinity calls no set_epoch: the epoch is counted in draws (GRESO needs it)

    def get_indices(self, batch_size: int, return_extra_info: bool = False):
        indices = self.source.draw_counting_epochs(batch_size, self.draws)
        self.draws += int(batch_size)
        if return_extra_info:
            return indices, {"indices": indices.tolist(), "prob": self.source.sampler.prob[indices].tolist()}
        return indices

    def feedback(self, indices: List[int], values: List[float]) -> None:
        """Trinity's per-task mean rewards (see the module docstring); unusable values skipped."""
        if values is None or indices is None or len(indices) != len(values):
            self._skip(len(indices or []), "the feedback's indices and values do not pair up")
            return
        rates, usable = feedback_pass_rates(values, self.reward_mapping, self.reward_threshold)
        if not usable.all():
            self._skip(int((~usable).sum()), "NaN or missing mean reward")
        if usable.any():
            self.source.feedback_pass_rates(np.asarray(indices)[usable], rates[usable], self.num_rollouts)

    def _skip(self, count: int, why: str) -> None:
        self.feedback_skipped += count
        logger.warning(f"trajval selector: {count} feedback value(s) skipped ({why}); {self.feedback_skipped} so far")

    def state_dict(self) -> Dict:
        return {"source": _jsonable(self.source.state_dict()), "draws": self.draws}

    def load_state_dict(self, state_dict: Dict) -> None:
        if "source" not in state_dict:
            # saved before draws were counted (the source's state alone): every draw was epoch 0's
            self.source.load_state_dict(state_dict)
            self.draws = int(state_dict["sampler"]["drawn"])
            return
        self.source.load_state_dict(state_dict["source"])
        self.draws = int(state_dict["draws"])


def _check_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Refuse, naming the key as the config writes it, a kwarg the selector and the chosen
    scheduler (if any) do not take (with the known ones), a value its declaration refuses (type,
    bounds, choices, NaN: when the selector is built, not at the first feedback), Trinity's greedy
    ``tau: 0`` (said why) and a setting given under both Trinity's name and ours."""
    online = kwargs.get("online")
    if online is not None and not (isinstance(online, str) and online in ONLINE_SCHEDULERS):
        raise TrajvalInputError(f"trajval selector: kwargs.online must be one of {sorted(ONLINE_SCHEDULERS)}, "
                                f"got {online!r}")
    known = {} if online is None else scheduler_settings(online)
    for key, value in kwargs.items():
        if key not in known and key not in SELECTOR_SETTINGS:
            owners = [name for name in ONLINE_SCHEDULERS if key in scheduler_settings(name)]
            hint = f" ({key} is a setting of kwargs.online: {' / '.join(owners)})" if owners else ""
            chosen = f"with kwargs.online: {online}" if online else "without kwargs.online"
            raise TrajvalInputError(f"trajval selector: unknown kwargs.{key} {chosen}{hint}; known: "
                                    f"{sorted(set(SELECTOR_SETTINGS) | set(known))}")
        if online == "bots" and key == "tau" and value == 0 and not isinstance(value, bool):
            raise TrajvalInputError("trajval selector: kwargs.tau 0 is Trinity's greedy top-k selection; this "
                                    "selector samples tasks (BOTS's exp(-|p - target| / tau) with tau > 0, e.g. "
                                    "0.5): set tau > 0")
        declaring = SelectorSettings if key in SELECTOR_SETTINGS else ONLINE_SCHEDULERS[online].Settings
        name = TRINITY_BOTS_NAMES.get(key, key) if online == "bots" else key
        field = {f.name: f for f in declared(declaring)}[name]
        problem = value_problem(value, type_hints(declaring)[name], field.metadata)
        if problem:
            raise TrajvalInputError(f"trajval selector: kwargs.{key} {problem}")
    for trinity, ours in TRINITY_BOTS_NAMES.items():
        if online == "bots" and trinity in kwargs and ours in kwargs:
            raise TrajvalInputError(f"trajval selector: kwargs.{trinity} (Trinity's name) and kwargs.{ours} set the "
                                    f"same BOTS setting: give one")


def _bots_kwargs(kwargs: dict) -> dict:
    """BOTS settings with Trinity's own names read as ours."""
    return {TRINITY_BOTS_NAMES.get(key, key): value for key, value in kwargs.items()}


def register(name: str = REGISTRY_NAME) -> None:
    """Register :class:`TrajvalSelector` as ``selector_type: <name>`` (idempotent)."""
    if SELECTORS.modules.get(name) is not TrajvalSelector:
        SELECTORS.register_module(name, TrajvalSelector)


register()
