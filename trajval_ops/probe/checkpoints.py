"""Checkpoint folders of a probe run: which are complete, which can resume, what to keep.

The trainer writes ``checkpoint-<step>`` at the end of every epoch (model, tokenizer, optimizer,
scheduler, RNG and trainer state; ``trainer_state.json`` is written last, and not atomically, so
a folder without it, or with one that does not parse or names no epoch, is a save that was cut
short). Policy: the newest resumable checkpoint (complete, with optimizer state) keeps everything
(resume); the others keep only model weights when their epoch is kept (windows, ``keep_epochs``)
and are deleted otherwise.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from trajval_ops.errors import CheckpointWithoutModel

#: Folder of a LoRA checkpoint holding the merged full model.
MERGED_DIR = "merged"
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
# Files and folders only needed to resume training: optimizer moments (2x the model's size),
# scheduler, RNG and scaler state, and the training engines' own copies (as transformers' Trainer
# saves them): accelerate's FSDP model and optimizer state (``pytorch_model_fsdp*``,
# ``optimizer*``: a file with FULL_STATE_DICT, a folder with SHARDED_STATE_DICT) and DeepSpeed's
# engine checkpoint (``global_step<N>/`` with its ``latest`` pointer and ``zero_to_fp32.py``).
_RESUME_ONLY_PREFIXES = ("optimizer", "scheduler", "rng_state", "scaler", "pytorch_model_fsdp", "global_step")
_RESUME_ONLY_NAMES = ("latest", "zero_to_fp32.py")
# What holds the optimizer state a resume needs: the Trainer's own, accelerate's FSDP, or DeepSpeed's.
_OPTIMIZER_STATE = ("optimizer*", "global_step*")
# Weights ``from_pretrained`` loads (not the training engines' copies above).
_MODEL_WEIGHTS = ("model*.safetensors", "pytorch_model.bin", "pytorch_model-*.bin")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    epoch: int | None  # None for an incomplete folder
    cut_short: str = ""  # why an incomplete folder is one

    @property
    def complete(self) -> bool:
        return self.epoch is not None

    @property
    def resumable(self) -> bool:
        return self.complete and _holds(self.path, _OPTIMIZER_STATE)


def _holds(folder: Path, patterns: tuple[str, ...]) -> bool:
    """Whether ``folder`` holds an entry matching one of ``patterns``."""
    return any(any(folder.glob(pattern)) for pattern in patterns)


def list_checkpoints(output_dir: str | Path) -> list[Checkpoint]:
    """Checkpoint folders of ``output_dir`` ordered by step."""
    found = []
    directory = Path(output_dir)
    if not directory.is_dir():
        return found
    for child in directory.iterdir():
        match = _CHECKPOINT_DIR.match(child.name)
        # a link named like a checkpoint is not one of ours: never read, resume from or delete it
        if not match or child.is_symlink() or not child.is_dir():
            continue
        epoch, cut_short = _epoch_of(child / TRAINER_STATE)
        found.append(Checkpoint(step=int(match.group(1)), path=child.resolve(), epoch=epoch, cut_short=cut_short))
    return sorted(found, key=lambda c: c.step)


def _epoch_of(state_file: Path) -> tuple[int | None, str]:
    """The epoch a checkpoint's trainer state records, or None and why it records none (the
    trainer writes the file in place: a kill may leave it empty or truncated)."""
    if not state_file.is_file():
        return None, f"no {TRAINER_STATE}"
    try:
        epoch = json.loads(state_file.read_text(encoding="utf-8"))["epoch"]
        return int(round(float(epoch))), ""
    except (ValueError, OverflowError) as exc:  # a JSONDecodeError, UnicodeDecodeError, a NaN or infinite epoch
        return None, f"{TRAINER_STATE} does not parse: {exc}"
    except (KeyError, TypeError):
        return None, f"{TRAINER_STATE} names no epoch"


def last_resumable(output_dir: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint that still holds optimizer state, or None."""
    resumable = [c for c in list_checkpoints(output_dir) if c.resumable]
    return resumable[-1] if resumable else None


def trained_to(output_dir: str | Path, epochs: int) -> Checkpoint | None:
    """The complete checkpoint of epoch ``epochs`` (training is done), or None."""
    done = [c for c in list_checkpoints(output_dir) if c.complete and c.epoch >= epochs]
    return done[-1] if done else None


def prune_checkpoints(output_dir: str | Path, kept_epochs: set[int] | list[int], keep_resume_state: bool = True) -> None:
    """Apply the keep policy (module doc). Idempotent; also removes saves that were cut short.

    :param keep_resume_state: keep optimizer state of the newest resumable checkpoint (False
        once the run is finished).
    """
    checkpoints = list_checkpoints(output_dir)
    root = Path(output_dir).resolve()
    outside = [c.path for c in checkpoints if c.path.parent != root]
    if outside:  # defence in depth: nothing outside the output folder is ever deleted
        raise RuntimeError(f"probe: refusing to prune checkpoints outside {root}: {outside}")
    resumable = [c for c in checkpoints if c.resumable]
    newest = resumable[-1] if resumable else None
    for checkpoint in checkpoints:
        if not checkpoint.complete:
            logger.info(f"probe: removing incomplete checkpoint {checkpoint.path.name} ({checkpoint.cut_short})")
            shutil.rmtree(checkpoint.path)
        elif checkpoint is newest and keep_resume_state:
            continue
        elif checkpoint.epoch in kept_epochs:
            _strip_resume_state(checkpoint.path)
        else:
            logger.info(f"probe: deleting checkpoint {checkpoint.path.name} (epoch {checkpoint.epoch} not kept)")
            shutil.rmtree(checkpoint.path)


def _strip_resume_state(path: Path) -> None:
    for child in path.iterdir():
        if child.name.startswith(_RESUME_ONLY_PREFIXES) or child.name in _RESUME_ONLY_NAMES:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def base_entry(base_model: Path) -> dict:
    """The manifest entry of the base model (epoch 0)."""
    return {"name": "base", "epoch": 0, "step": 0, "path": str(base_model)}


def checkpoint_entries(output_dir: Path, kept: set[int], config) -> list[dict]:
    """Manifest entries of the complete, kept checkpoints after epoch 0 (with LoRA: the merged
    folder as the path, the adapter beside it)."""
    entries = []
    for checkpoint in list_checkpoints(output_dir):
        if not checkpoint.complete or checkpoint.epoch not in kept or checkpoint.epoch == 0:
            continue
        if not config.use_lora:
            check_loadable_model(checkpoint.path)
        path = checkpoint.path / MERGED_DIR if config.use_lora else checkpoint.path
        entry = {"name": f"epoch-{checkpoint.epoch}", "epoch": checkpoint.epoch, "step": checkpoint.step,
                 "path": str(path)}
        if config.use_lora:
            entry["adapter_path"] = str(checkpoint.path)
        entries.append(entry)
    return entries


def check_loadable_model(path: Path) -> None:
    """A kept checkpoint must hold a model ``from_pretrained`` loads (``config.json`` and
    weights): the endpoint passes read it. Sharded training engines save one only when told to.

    :raises CheckpointWithoutModel: naming the checkpoint and the setting that makes one.
    """
    if (path / "config.json").is_file() and _holds(path, _MODEL_WEIGHTS):
        return
    raise CheckpointWithoutModel(
        f"probe: {path} holds no model the endpoint passes can load (config.json and model weights), only the "
        "training engine's sharded state: in the accelerate config of distributed_config set "
        "fsdp_state_dict_type: FULL_STATE_DICT (FSDP), or stage3_gather_16bit_weights_on_model_save: true in "
        "the DeepSpeed ZeRO-3 config"
    )
