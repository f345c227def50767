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

Not possible on this route: online composition (GRESO/BOTS, ``w_trajval * w_online``). The V1
trainer gives the dataset no feedback after a step (its ``trainer.v1.sampler.custom_sampler``
chooses among finished rollouts in the replay buffer, not which prompts to draw), and the draw
is fixed when the dataset is built. For online composition use verl 0.7.1 with
``TrajvalVerlCurriculumSampler`` (:mod:`trajval_ops.samplers.verl`), or the TRL or Trinity-RFT
adapters. Tested against verl 0.9.1 (``create_rl_dataset``, ``create_rl_sampler``,
``collate_fn``, torchdata's ``StatefulDataLoader``).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Mapping

import numpy as np
from omegaconf import DictConfig, ListConfig
from verl.utils.dataset.rl_dataset import RLHFDataset

from trajval_ops.core import multinomial_indices
from trajval_ops.fields import ID_CANDIDATES, WEIGHT
from trajval_ops.samplers.weighted import weights_from_dataset
from trajval_ops.validation import TrajvalInputError, float_column

logger = logging.getLogger(__name__)

#: Where the options live in verl's data config: ``+data.trajval.<option>=...``.
OPTIONS_KEY = "trajval"
OPTION_DEFAULTS = {"epochs": 1, "seed": None, "weight_key": WEIGHT}
STATE_VERSION = 1
#: Third entropy word of the seed of a block's serving order (the draw itself uses (seed, block)).
_ORDER_STREAM = 1


def trajval_options(data_config: Mapping[str, Any]) -> dict:
    """The validated ``data.trajval`` options: ``epochs`` (int >= 1), ``seed`` (int >= 0;
    default ``data.seed``, else 0) and ``weight_key``.

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
    return {"epochs": epochs, "seed": seed, "weight_key": str(weight_key)}


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


def _read_weights(dataframe, field: str) -> np.ndarray:
    """The weight column of the filtered rows; errors name the row (position and id) and field."""
    try:
        return weights_from_dataset(dataframe, field)
    except TrajvalInputError as err:
        message = str(err)
        columns = getattr(dataframe, "column_names", None) or []
        if field in columns:
            samples = {field: list(dataframe[field])}
            for key in {candidate.split(".")[0] for candidate in ID_CANDIDATES} & set(columns):
                samples[key] = list(dataframe[key])
            try:
                float_column(samples, field)  # the same check, now with the row's id in the message
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
    """

    def __init__(self, data_files, tokenizer, config: DictConfig, processor=None, max_samples: int = -1):
        self.trajval_options = trajval_options(config)
        self.trajval_weighted = is_train_files(data_files, config)
        self.trajval_weights: np.ndarray | None = None
        self._trajval_rows: np.ndarray | None = None
        self._trajval_digest: str | None = None
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
        self._trajval_rows = virtual_epoch_rows(self.trajval_weights, options["epochs"], options["seed"])
        self._trajval_digest = hashlib.blake2b(self._trajval_rows.tobytes(), digest_size=16).hexdigest()
        logger.info(
            "TrajvalVerlDataset: %d rows, %d weighted draws of %d (seed %d, field %r)",
            len(self._trajval_rows), options["epochs"], len(self.dataframe), options["seed"], options["weight_key"],
        )

    def __len__(self) -> int:
        if self._trajval_rows is None:
            return super().__len__()
        return int(self._trajval_rows.size)

    def pool_row(self, index: int) -> int:
        """The position in ``self.dataframe`` that virtual index ``index`` serves."""
        if self._trajval_rows is None:
            return int(index)
        return int(self._trajval_rows[index])  # IndexError past the end, as a dataset should

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
        return super().__getitem__(self.pool_row(item))

    # Saved with the dataloader state (torchdata's StatefulDataLoader checks for these methods).
    def state_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "weighted": self.trajval_weighted,
            "num_rows": len(self.dataframe),
            "length": len(self),
            "digest": self._trajval_digest,
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
