"""verl 0.9+ adapter: a ``data.custom_cls`` dataset that serves a ``trajval_weight``-weighted draw.

verl 0.8.0 removed ``data.sampler.class_path`` (the hook :mod:`trajval_ops.samplers.verl` uses
on verl 0.7.1), and verl 0.9's default V1 trainer always samples with verl's own
``create_rl_sampler`` (``verl/trainer/ppo/utils.py``): a torchdata ``RandomSampler`` over
``range(len(dataset))`` when ``data.shuffle`` (the default), else a ``SequentialSampler``. The
dataset class is still pluggable, so the weighting moves into the dataset ("virtual epochs"):

- ``len(dataset) = epochs * n``, with ``n`` the rows kept by verl's overlong-prompt filter;
- virtual index ``i`` lies in block ``b = i // n``; block ``b`` holds ``n`` rows drawn with
  replacement in proportion to the weight column
  (:func:`trajval_ops.core.multinomial_indices` seeded by ``SeedSequence((seed, b))``), in a
  seeded order (so that ``data.shuffle=False`` does not serve the block in pool order, all
  copies of a row back to back).

The map from index to row is a pure function of the weights, the seed and the block, fixed when
the dataset is built, so verl's ``RandomSampler``, which permutes ``range(len(dataset))``, serves
each block's multiset of rows exactly: one pass of verl's dataloader serves ``epochs``
independent weighted draws of ``n`` rows, i.e. a weighted draw of ``epochs * n`` rows, in
random order (blocks are slices of the index space, not time slices: the shuffle interleaves
them). Dataloader checkpoints (``StatefulDataLoader.state_dict``, saved by verl as ``data.pt``)
resume mid-epoch on the same rows; the dataset's own ``state_dict`` records a digest of the map
and a resume with other weights, seed or epochs is refused.

Configuration (hydra; ``+`` adds keys verl's schema does not list)::

    data.custom_cls.path=pkg://trajval_ops.samplers.verl_dataset
    data.custom_cls.name=TrajvalVerlDataset
    +data.trajval.epochs=3                 # weighted draws of n rows served per pass (default 1)
    +data.trajval.seed=42                  # optional: default data.seed, else 0
    +data.trajval.weight_key=trajval_weight  # optional
    trainer.total_epochs=1                 # the epochs live inside the dataset

Steps: verl 0.9.1's V1 trainer sets ``steps_per_epoch = len(train_dataset) // train_batch_size``
(``epochs * n // train_batch_size`` here) and runs ``steps_per_epoch * trainer.total_epochs``
steps unless ``trainer.total_training_steps`` is set (the loop then stops at the smaller of the
two). Keep ``trainer.total_epochs=1``: a second verl epoch permutes the same virtual indices
again, so it repeats the same draws in another order instead of drawing new ones (as does verl's
restart of the dataloader when DAPO refills or async modes take more prompts than one pass).
``data.dataloader_num_workers`` may stay at verl's default.

Train or validation: verl builds the train and the validation set with the same class
(``create_rl_dataset`` does not pass ``is_train`` on). The dataset is weighted only when its
data files are ``data.train_files`` (compared as configured, before verl copies them to local
disk); any other files, such as ``data.val_files``, are served exactly as ``RLHFDataset`` serves
them, whether or not they carry a weight column. ``data.train_files`` equal to
``data.val_files`` is refused (the two sets could not be told apart): point one of them at a
copy of the file.

Online composition (GRESO/BOTS, ``w_trajval * w_online``): ``+data.trajval.online=greso|bots``.
verl's legacy trainer (``trainer.use_v1=False``, still in 0.9.1) calls
``train_dataset.on_batch_end(batch=batch)`` after every step; :meth:`TrajvalVerlDataset.on_batch_end`
reads each response's reward (``token_level_scores`` summed; solved when above
``+data.trajval.reward_threshold``, default 0.5, which fits 0/1 and -1/1 rewards) and the pool row it answered (the item's
``trajval_position``) and feeds the scheduler. With an online scheduler the rows are drawn
lazily, one per fetched index from the current ``w_trajval * w_online`` (a stream seeded by
``seed`` and the epoch, counted in draws, resumed with the dataloader), so later batches follow the feedback; this needs
``data.dataloader_num_workers=0`` (a worker's copy of the dataset would not see the feedback,
refused otherwise). The V1 trainer gives the dataset no feedback (its
``trainer.v1.sampler.custom_sampler`` chooses among finished rollouts in the replay buffer, not
which prompts to draw): there the prior is static. Tested against verl 0.9.1
(``create_rl_dataset``, ``create_rl_sampler``, ``collate_fn``, ``DataProto``, torchdata's
``StatefulDataLoader``).

Rollouts per prompt from the prior (V1 trainer): with ``+data.trajval.rollout_n_from_prior``
(:class:`RolloutNFromPrior`: ``n``, ``max_n``, optional ``min_n`` and ``rate_key``) every train
item carries ``__rollout_n__``, which verl 0.9.1's V1 agent loop pops as that prompt's number of
rollouts (``AgentLoopWorkerTQ._run_prompt``, default ``actor_rollout_ref.rollout.n``). The counts
are :func:`rollout_n_per_prompt` of the served rows' pass rates over the whole pass (the virtual
index space), so the pass holds exactly ``n * len(dataset)`` rollouts. Not per step: verl's
``RandomSampler`` permutes the indices after the dataset fixed them, and in async or DAPO modes
the replay buffer forms a step from whichever groups finished first; a step's count is a sum over
its prompts, ``n * train_batch_size`` on average. The legacy trainer ignores the key (it repeats
every prompt ``rollout.n`` times), hence the refusal with ``online``; validation sets never carry it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset

from trajval_ops.core import multinomial_indices
from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import ID_CANDIDATES, R_EARLY, WEIGHT
from trajval_ops.input_checks import float_column
from trajval_ops.rows import path_root
from trajval_ops.samplers.rollout_n import rollout_n_per_prompt, variance_summary
from trajval_ops.samplers.online import (
    DEFAULT_SUCCESS_THRESHOLD,
    BotsScheduler,
    ComposedSampler,
    GresoScheduler,
)
from trajval_ops.samplers.weighted import weights_from_dataset
from trajval_ops.settings import check_settings, declared, setting, value_problem

logger = logging.getLogger(__name__)

#: Where the options live in verl's data config: ``+data.trajval.<option>=...``.
OPTIONS_KEY = "trajval"
OPTION_DEFAULTS = {"epochs": 1, "seed": None, "weight_key": WEIGHT, "online": None,
                   "reward_threshold": DEFAULT_SUCCESS_THRESHOLD, "rollout_n_from_prior": None}
#: The column an item carries with its pool row, for the feedback of the legacy trainer.
POSITION_KEY = "trajval_position"
#: The non_tensor_batch key verl gives every response of one prompt alike (its GRPO group).
GROUP_KEY = "uid"
#: The item key verl 0.9's V1 agent loop reads as the prompt's number of rollouts
#: (``AgentLoopWorkerTQ._run_prompt`` in ``verl/trainer/ppo/v1/agent_loop_tq.py``).
ROLLOUT_N_KEY = "__rollout_n__"
STATE_VERSION = 1
#: Third entropy word of the seed of a block's serving order (the draw itself uses (seed, block)).
_ORDER_STREAM = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutNFromPrior:
    """``data.trajval.rollout_n_from_prior``: each served prompt's ``__rollout_n__`` from the
    prior's pass rate, the pass's total kept at ``n`` per prompt (off when the key is absent)."""

    n: int = setting(help="rollouts per prompt on average over a pass: verl's actor_rollout_ref.rollout.n "
                          "(write '${actor_rollout_ref.rollout.n}' to take it from there).",
                     ge=2, why="GRPO needs a group of two or more")
    max_n: int = setting(help="most rollouts one prompt gets.", ge=2)
    min_n: int = setting(2, "fewest rollouts one prompt gets.", ge=2,
                         why="a group of one never has variance: 1 - r - (1 - r) = 0")
    rate_key: str = setting(R_EARLY, "column holding the pass rate the prior recorded, in [0, 1].")

    def __post_init__(self):
        check_settings(self)
        if not self.min_n <= self.n <= self.max_n:
            raise ValueError(f"min_n <= n <= max_n is needed for the total n x prompts to be reachable, "
                             f"got min_n={self.min_n}, n={self.n}, max_n={self.max_n}")


def _rollout_n_settings(given: Any) -> RolloutNFromPrior | None:
    where, known = f"data.{OPTIONS_KEY}.rollout_n_from_prior", [f.name for f in declared(RolloutNFromPrior)]
    if given is None:
        return None
    if isinstance(given, DictConfig):
        given = OmegaConf.to_container(given, resolve=True)  # '${actor_rollout_ref.rollout.n}' resolves here
    if not isinstance(given, Mapping):
        raise TypeError(f"{where} must be a mapping of {known}, got {given!r}")
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {unknown}; known: {known}")
    try:
        return RolloutNFromPrior(**given)
    except TypeError as err:  # a required setting left out
        raise ValueError(f"{where}: {err}; n and max_n are required") from err
    except ValueError as err:
        raise ValueError(f"{where}.{err}") from err


def trajval_options(data_config: Mapping[str, Any]) -> dict:
    """The validated ``data.trajval`` options: ``epochs`` (int >= 1), ``seed`` (int >= 0;
    default ``data.seed``, else 0), ``weight_key``, ``online``, ``reward_threshold`` and
    ``rollout_n_from_prior`` (a :class:`RolloutNFromPrior`, or None: off).

    :raises ValueError: for an unknown option (a typo would otherwise be ignored) or a bad value.
    """
    given = data_config.get(OPTIONS_KEY, None) or {}
    unknown = sorted(set(given) - set(OPTION_DEFAULTS))
    if unknown:
        raise ValueError(f"data.{OPTIONS_KEY}: unknown option(s) {unknown}; known: {sorted(OPTION_DEFAULTS)}")
    options = {key: given.get(key, None) for key in OPTION_DEFAULTS}
    epochs = OPTION_DEFAULTS["epochs"] if options["epochs"] is None else options["epochs"]
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"data.{OPTIONS_KEY}.epochs must be an integer >= 1, got {epochs!r}")
    seed = options["seed"] if options["seed"] is not None else data_config.get("seed", None)
    seed = 0 if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"data.{OPTIONS_KEY}.seed (or data.seed) must be an integer >= 0, got {seed!r}")
    weight_key = options["weight_key"] or OPTION_DEFAULTS["weight_key"]
    online = options["online"]
    if online not in (None, "greso", "bots"):
        raise ValueError(f"data.{OPTIONS_KEY}.online must be greso or bots (or unset), got {online!r}")
    threshold = OPTION_DEFAULTS["reward_threshold"] if options["reward_threshold"] is None else options["reward_threshold"]
    problem = value_problem(threshold, float, {})
    if problem:
        raise ValueError(f"data.{OPTIONS_KEY}.reward_threshold {problem}")
    rollout_n = _rollout_n_settings(options["rollout_n_from_prior"])
    if rollout_n is not None and online:
        raise ValueError(
            f"data.{OPTIONS_KEY}.rollout_n_from_prior needs the fixed map of a static draw, and online draws feed back "
            f"only under the legacy trainer, which ignores {ROLLOUT_N_KEY}: drop one of the two")
    return {"epochs": epochs, "seed": seed, "weight_key": str(weight_key), "online": online,
            "reward_threshold": float(threshold), "rollout_n_from_prior": rollout_n}


def _file_list(files: Any) -> list[str] | None:
    if files is None:
        return None
    if isinstance(files, (list, tuple, ListConfig)):
        return [str(f) for f in files]
    return [str(files)]


def is_train_files(data_files: Any, data_config: Mapping[str, Any]) -> bool:
    """True when ``data_files`` are the configured ``data.train_files`` (the set to weight).

    :raises ValueError: when ``data.train_files`` equals ``data.val_files``.
    """
    train = _file_list(data_config.get("train_files", None))
    if train is None:
        return False
    if train == _file_list(data_config.get("val_files", None)):
        raise ValueError(
            "data.train_files equals data.val_files: TrajvalVerlDataset weights the train files "
            "and serves the validation files unchanged, and cannot tell the two apart; point "
            "data.val_files at a copy of the file"
        )
    return _file_list(data_files) == train


def virtual_epoch_rows(weights, epochs: int, seed: int) -> np.ndarray:
    """The map from virtual index to pool row: ``epochs`` blocks of ``len(weights)`` rows.

    Block ``b`` is :func:`~trajval_ops.core.multinomial_indices` of the weights seeded by
    ``SeedSequence((seed, b))``, served in the order of a permutation seeded by
    ``(seed, b, 1)``. Pure: the same weights, seed and block give the same rows.
    """
    weights = np.asarray(weights, dtype=np.float64)
    n = weights.size
    dtype = np.int32 if n < 2**31 else np.int64
    rows = np.empty(epochs * n, dtype=dtype)
    for block in range(epochs):
        drawn = multinomial_indices(weights, n, seed=np.random.SeedSequence((seed, block)))
        order = np.random.default_rng(np.random.SeedSequence((seed, block, _ORDER_STREAM))).permutation(n)
        rows[block * n:(block + 1) * n] = drawn[order]
    return rows


def _with_ids(dataframe, field: str) -> dict[str, list]:
    """``field`` (when present) and the columns holding row ids, as lists: what
    :func:`~trajval_ops.input_checks.float_column` needs to name a bad row by position and id."""
    columns = set(getattr(dataframe, "column_names", None) or [])
    samples = {field: list(dataframe[field])} if field in columns else {}
    for key in {path_root(candidate) for candidate in ID_CANDIDATES} & columns:
        samples[key] = list(dataframe[key])
    return samples


def _read_rates(dataframe, field: str) -> np.ndarray:
    """The pass-rate column of the filtered rows, each in [0, 1]; errors name the row (position
    and id) and field."""
    try:
        return float_column(_with_ids(dataframe, field), field, lower=0.0, upper=1.0)
    except TrajvalInputError as err:
        raise TrajvalInputError(
            f"{err} (train files, rows counted after verl's overlong-prompt filter; the pass rate "
            f"data.{OPTIONS_KEY}.rollout_n_from_prior reads)"
        ) from err


def _read_weights(dataframe, field: str) -> np.ndarray:
    """The weight column of the filtered rows; errors name the row (position and id) and field."""
    try:
        return weights_from_dataset(dataframe, field)
    except TrajvalInputError as err:
        message = str(err)
        columns = getattr(dataframe, "column_names", None) or []
        if field in columns:
            try:
                float_column(_with_ids(dataframe, field), field)  # the same check, now with the row's id in the message
            except TrajvalInputError as named:
                message = str(named)
            else:  # every weight valid but zero
                message = f"rows 0 to {len(dataframe) - 1}: {message}"
        raise TrajvalInputError(
            f"{message} (train files, rows counted after verl's overlong-prompt filter)"
        ) from err


class TrajvalVerlDataset(RLHFDataset):
    """verl's ``RLHFDataset`` whose train set serves ``epochs`` weighted draws of its rows.

    Built by verl's ``create_rl_dataset`` from ``data.custom_cls``, for the train and the
    validation files alike; only ``data.train_files`` are weighted (see the module docstring).
    Items are ``RLHFDataset.__getitem__`` of the drawn row (``raw_prompt``, ``index``,
    ``extra_info``, ...), so the rest of verl sees ordinary rows, a row drawn twice twice.

    :ivar trajval_weighted: whether this dataset serves the weighted draw.
    :ivar trajval_options: ``epochs``, ``seed`` and ``weight_key`` in force.
    :ivar trajval_weights: the validated weights of the filtered rows (None when not weighted).
    :ivar trajval_rollout_n: with ``rollout_n_from_prior``, the ``__rollout_n__`` each virtual index
        carries (:func:`rollout_n_per_prompt` of its row's pass rate); else None.
    """

    def __init__(self, data_files, tokenizer, config: DictConfig, processor=None, max_samples: int = -1):
        self.trajval_options = trajval_options(config)
        self.trajval_weighted = is_train_files(data_files, config)
        if self.trajval_weighted and self.trajval_options["online"] and int(config.get("dataloader_num_workers", 0) or 0):
            raise ValueError(
                f"data.{OPTIONS_KEY}.online feeds each step's rewards back into the draws, which a dataloader worker's "
                "copy of the dataset would not see: set data.dataloader_num_workers=0")
        self.trajval_source = None
        self._trajval_drawn = 0
        self.trajval_weights: np.ndarray | None = None
        self._trajval_rows: np.ndarray | None = None
        self._trajval_digest: str | None = None
        self.trajval_rollout_n: np.ndarray | None = None
        super().__init__(data_files, tokenizer, config, processor=processor, max_samples=max_samples)

    def _read_files_and_tokenize(self):
        # RLHFDataset reads, subsamples (max_samples) and filters overlong prompts here, also on
        # resume_dataset_state: the map is rebuilt from the rows it keeps.
        super()._read_files_and_tokenize()
        if not self.trajval_weighted:
            logger.info("TrajvalVerlDataset: %s are not data.train_files, served unchanged", self.original_data_files)
            return
        options = self.trajval_options
        self.trajval_weights = _read_weights(self.dataframe, options["weight_key"])
        if options["online"]:
            self.trajval_source = _composed_source(self.trajval_weights, options)
        self._trajval_rows = virtual_epoch_rows(self.trajval_weights, options["epochs"], options["seed"])
        digest = hashlib.blake2b(self._trajval_rows.tobytes(), digest_size=16)
        logger.info(
            "TrajvalVerlDataset: %d rows, %d weighted draws of %d (seed %d, field %r)",
            len(self._trajval_rows), options["epochs"], len(self.dataframe), options["seed"], options["weight_key"],
        )
        rollouts = options["rollout_n_from_prior"]
        if rollouts is not None:
            served_rates = _read_rates(self.dataframe, rollouts.rate_key)[self._trajval_rows]
            self.trajval_rollout_n = rollout_n_per_prompt(served_rates, rollouts.n, rollouts.min_n, rollouts.max_n)
            self.trajval_rollout_n.flags.writeable = False
            digest.update(self.trajval_rollout_n.tobytes())  # a resume keeps the pass's allocation
            logger.info(
                "TrajvalVerlDataset: %s per prompt from %r in [%d, %d], %d in all (%d x %d prompts); "
                "P(group has variance) mean %.3f, min %.3f (uniform %d: mean %.3f, min %.3f)",
                ROLLOUT_N_KEY, rollouts.rate_key, rollouts.min_n, rollouts.max_n, int(self.trajval_rollout_n.sum()),
                rollouts.n, served_rates.size, *variance_summary(served_rates, self.trajval_rollout_n), rollouts.n,
                *variance_summary(served_rates, np.full(served_rates.size, rollouts.n)),
            )
        self._trajval_digest = digest.hexdigest()

    def __len__(self) -> int:
        if self._trajval_rows is None:
            return super().__len__()
        return int(self._trajval_rows.size)

    def pool_row(self, index: int) -> int:
        """The position in ``self.dataframe`` that virtual index ``index`` serves (with an online
        scheduler: the next draw of the composed stream, whatever the index)."""
        if self._trajval_rows is None:
            return int(index)
        row = int(self._trajval_rows[index])  # IndexError past the end, as a dataset should
        if self.trajval_source is None:
            return row
        # The sampler may shuffle the indices: the epoch is the count of draws so far, in pool sizes.
        drawn = self.trajval_source.draw_counting_epochs(1, self._trajval_drawn)
        self._trajval_drawn += 1
        return int(drawn[0])

    def epoch_rows(self, epoch: int) -> np.ndarray:
        """Positions in ``self.dataframe`` of virtual epoch block ``epoch``, in index order."""
        if self._trajval_rows is None:
            raise ValueError("this dataset is not weighted (its files are not data.train_files)")
        n = len(self.dataframe)
        if not 0 <= epoch < self.trajval_options["epochs"]:
            raise IndexError(f"epoch block {epoch} outside [0, {self.trajval_options['epochs']})")
        view = self._trajval_rows[epoch * n:(epoch + 1) * n].view()
        view.flags.writeable = False
        return view

    def __getitem__(self, item):
        if self._trajval_rows is None:
            return super().__getitem__(item)
        row = self.pool_row(item)
        served = {**super().__getitem__(row), POSITION_KEY: row}
        if self.trajval_rollout_n is not None:
            # a plain int: collate_fn keeps it in an object array, the agent loop takes range() of it
            served[ROLLOUT_N_KEY] = int(self.trajval_rollout_n[item])
        return served

    def on_batch_end(self, batch) -> None:
        """verl's legacy trainer, after every step: each response's reward (its token-level
        scores summed) fed to the online scheduler for the pool row it answered."""
        if self.trajval_source is None:
            return
        if POSITION_KEY not in batch.non_tensor_batch:
            raise ValueError(f"the step's batch has no '{POSITION_KEY}' column: it was not drawn from this dataset")
        rows = np.asarray(batch.non_tensor_batch[POSITION_KEY], dtype=np.int64)
        scores = batch.batch["token_level_scores"].sum(dim=-1).float().cpu().numpy()
        if rows.shape != scores.shape:
            raise ValueError(f"{rows.size} pool rows for {scores.size} rewards in the step's batch")
        # verl tags each prompt's responses with one uid (balance_batch may reorder them)
        self.trajval_source.feedback(rows, scores, group_ids=batch.non_tensor_batch.get(GROUP_KEY))

    # Saved with the dataloader state (torchdata's StatefulDataLoader checks for these methods).
    def state_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "weighted": self.trajval_weighted,
            "num_rows": len(self.dataframe),
            "length": len(self),
            "digest": self._trajval_digest,
            "online": None if self.trajval_source is None else {"drawn": self._trajval_drawn,
                                                                 "source": self.trajval_source.state_dict()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Refuse to resume a dataloader saved for another map (other weights, seed or epochs)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown TrajvalVerlDataset state version {state.get('version')!r}")
        mine = self.state_dict()
        if any(state.get(key) != mine[key] for key in ("weighted", "num_rows", "length", "digest")):
            raise ValueError(
                f"the dataloader state was saved for a dataset of {state.get('length')} indices over "
                f"{state.get('num_rows')} rows (map {state.get('digest')}), but this one has "
                f"{mine['length']} over {mine['num_rows']} (map {mine['digest']}): resume with the same "
                f"train files, weights and data.{OPTIONS_KEY} options"
            )
        if self.trajval_source is not None and state.get("online") is not None:
            # the stream and the scheduler where they were
            self._trajval_drawn = int(state["online"]["drawn"])
            self.trajval_source.load_state_dict(state["online"]["source"])


def _composed_source(weights: np.ndarray, options: Mapping[str, Any]):
    """The prior composed with the configured online scheduler (one stream, seeded)."""
    scheduler = {"greso": GresoScheduler, "bots": BotsScheduler}[options["online"]](weights.size)
    return ComposedSampler(weights, online=scheduler, seed=options["seed"],
                           success_threshold=options["reward_threshold"])
