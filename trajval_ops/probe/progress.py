"""The probe run's ``TrainerCallback``: a progress line per step with the time left, and after each
epoch's save the pruned checkpoints and the updated manifest (main process only: the trainer
saves there too). Imported only when a probe trains (transformers at import)."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping, Sequence

from loguru import logger
from transformers import TrainerCallback

from trajval_ops.probe.checkpoints import base_entry, checkpoint_entries, prune_checkpoints
from trajval_ops.probe_manifest import write_manifest


def reward_per_epoch(log_history: Sequence[Mapping[str, Any]], steps_per_epoch: int) -> list[float]:
    """Mean logged training reward of each finished or started epoch (one log entry per step)."""
    sums: dict[int, list[float]] = {}
    for entry in log_history:
        if "reward" in entry and "step" in entry:
            epoch = math.ceil(entry["step"] / steps_per_epoch)
            sums.setdefault(epoch, []).append(float(entry["reward"]))
    return [sum(v) / len(v) for _, v in sorted(sums.items())]


def training_cost(log_history: Sequence[Mapping[str, Any]], completions_per_step: int, wall_time_s: float) -> dict:
    """What the probe's training generated: completions (steps x the global batch), completion
    tokens (each step's logged mean length x its completions; TRL logs every step here) and the
    wall time of every session."""
    steps = [entry for entry in log_history if "completions/mean_length" in entry and "step" in entry]
    return {
        "completions": len(steps) * completions_per_step,
        "generated_tokens": int(round(sum(entry["completions/mean_length"] for entry in steps) * completions_per_step)),
        "wall_time_s": wall_time_s,
    }


class ProbeProgress(TrainerCallback):
    """Shows the probe's progress and keeps ``manifest`` (a dict it updates in place) current on
    disk. The trainer's own printers (TRL's per-step dictionaries) are removed
    (:func:`quiet_trainer`): with ``show_progress`` a bar with the reward and the time left, else a
    log line per epoch with its mean reward and the time left.

    :param manifest: the run's manifest; its ``wall_time_s`` is the time of earlier sessions.
    """

    def __init__(self, config, output_dir: Path, base_model: Path, steps_per_epoch: int, manifest: dict,
                 show_progress: bool = True):
        self.config, self.output_dir, self.base_model = config, output_dir, base_model
        self.steps_per_epoch, self.manifest = steps_per_epoch, manifest
        self.kept = set(config.kept_epochs())
        self.wall_before = manifest["wall_time_s"]
        self.session_start = time.monotonic()
        self.first_step = 0
        self.show_progress = show_progress
        self.bar = None
        self.epoch_rewards: list[float] = []

    def wall_time_s(self) -> float:
        """Training wall time of every session of this probe so far."""
        return round(self.wall_before + time.monotonic() - self.session_start, 3)

    def on_train_begin(self, args, state, control, **kwargs):
        self.first_step = state.global_step
        if self.show_progress and state.is_world_process_zero:
            from tqdm import tqdm

            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="probe", unit="step",
                            dynamic_ncols=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or not state.is_world_process_zero:
            return
        done = state.global_step - self.first_step
        elapsed = time.monotonic() - self.session_start
        left = (state.max_steps - state.global_step) * elapsed / done if done else float("nan")
        epoch = math.ceil(state.global_step / self.steps_per_epoch)
        self.epoch_rewards.append(float(logs["reward"]))
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)
            self.bar.set_postfix(epoch=f"{epoch}/{self.config.epochs}", reward=f"{logs['reward']:.4f}",
                                 left=f"{left:.0f}s")
        elif state.global_step % self.steps_per_epoch == 0 or state.global_step == state.max_steps:
            logger.info(
                f"probe: epoch {epoch}/{self.config.epochs} done (step {state.global_step}/{state.max_steps}), mean "
                f"reward {sum(self.epoch_rewards) / len(self.epoch_rewards):.4f} ({elapsed:.0f} s elapsed, "
                f"~{left:.0f} s left)")
        if state.global_step % self.steps_per_epoch == 0:
            self.epoch_rewards = []

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        prune_checkpoints(self.output_dir, self.kept)
        self.manifest["checkpoints"] = ([base_entry(self.base_model)]
                                        + checkpoint_entries(self.output_dir, self.kept, self.config))
        self.record(state.log_history)
        write_manifest(self.output_dir, self.manifest)

    def record(self, log_history: Sequence[Mapping[str, Any]]) -> None:
        """The manifest's figures from the trainer's log so far: reward per epoch, wall time, cost."""
        self.manifest["train_reward_per_epoch"] = reward_per_epoch(log_history, self.steps_per_epoch)
        self.manifest["wall_time_s"] = self.wall_time_s()
        per_step = self.config.prompts_per_batch * self.config.num_generations
        self.manifest["cost"] = training_cost(log_history, per_step, self.manifest["wall_time_s"])


class SamplingCheck:
    """The policy's next-token distribution on a few of the run's own prompts, at the temperature
    it samples with, required finite. Weights can stay finite yet so large that a forward pass
    overflows (``learning_rate: 1e12`` on tiny-arith: weights up to 1e12, NaN logits), and every
    later sampling dies on torch's "probability tensor contains either inf, nan or element < 0".

    :param prompts: the run's prompts as its trainer tokenizes them (the first :attr:`PROMPTS` are used).
    """

    PROMPTS = 4

    def __init__(self, tokenizer, prompts, temperature: float):
        self.inputs = tokenizer(list(prompts)[:self.PROMPTS], return_tensors="pt", padding=True)
        self.temperature = temperature

    def problem(self, model, device) -> str | None:
        """What is not finite in ``model``'s distribution (one forward pass, in eval mode: no
        dropout, no random numbers drawn), or None."""
        import torch

        inputs = {key: value.to(device) for key, value in self.inputs.items()}
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(**inputs, use_cache=False).logits[inputs["attention_mask"].bool()]
        finally:
            model.train(training)
        if not bool(torch.isfinite(logits).all()):
            return "logits NaN or inf"
        if not bool(torch.isfinite(torch.softmax(logits.float() / self.temperature, dim=-1)).all()):
            return f"probabilities at temperature {self.temperature:g} NaN or inf"
        return None


class NonFiniteGuard(TrainerCallback):
    """Stops a GRPO run at the first step whose logged loss or gradient norm, updated weights, or
    (with ``sampling``) next-token distribution is not finite, with an error naming the step, the
    precision and the remedy. Logging comes before saving within a step, so no checkpoint of that
    step is written (a NaN model would otherwise be saved and carry on into generation, which dies
    later on a device-side assert).

    :param what: the run's name in the message (``probe``, a validation unit).
    :param precision: the resolved precision (``bf16-mixed``, ``bf16``, ``fp32``), named in the message.
    :param sampling: the distribution check (:class:`SamplingCheck`) run after each step's update.
    """

    WATCHED = ("loss", "grad_norm")

    def __init__(self, what: str, precision: str, learning_rate: float, sampling: SamplingCheck | None = None):
        self.what, self.precision, self.learning_rate, self.sampling = what, precision, learning_rate, sampling

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # the step's log comes after every callback's on_step_end, and a held-out evaluation there
        # (a validation unit's) would sample from non-finite weights first: checked here too, once
        # per step (one device sync), ahead of the callbacks after this one
        import torch

        if model is None:
            return
        weights = [p for p in model.parameters() if p.is_floating_point()]
        finite = [torch.isfinite(p).all() for p in weights]
        if finite and not bool(torch.stack(finite).all()):
            self._stop(state.global_step, "a weight after the update", "not finite")
        problem = self.sampling.problem(model, args.device) if self.sampling is not None else None
        if problem:
            largest = max(float(p.detach().abs().max()) for p in weights)
            self._stop(state.global_step, f"the next-token distribution on {len(self.sampling.inputs['input_ids'])} "
                       f"of the run's own prompts", f"not finite ({problem}) though every weight is finite (the "
                       f"largest |weight| is {largest:.3g}), so sampling from this model would fail",
                       cause="the learning rate is too high")

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in self.WATCHED:
            value = (logs or {}).get(key)
            if value is not None and not math.isfinite(float(value)):
                self._stop(state.global_step, key, value)

    def _stop(self, step: int, what: str, value, cause: str = "") -> None:
        from trajval_ops.errors import TrainingDiverged

        remedy = "a lower learning_rate or max_grad_norm"
        if not cause:  # what went non-finite may be the precision's doing
            remedy = {"bf16": "precision: bf16-mixed or fp32 (fp32 master weights)",
                      "bf16-mixed": "precision: fp32, or a lower learning_rate or max_grad_norm"}.get(self.precision, remedy)
        raise TrainingDiverged(
            f"{self.what}: step {step}: {what} is {value} (precision {self.precision}, learning "
            f"rate {self.learning_rate:g}){f'; likely cause: {cause}' if cause else ''}; training stopped before a "
            f"checkpoint of this step was written. Remedy: {remedy}")


@contextmanager
def training_memory(what: str, config, device: str, trainer):
    """Around ``trainer.train()``: a GPU out-of-memory error becomes :class:`DeviceOutOfMemory`
    naming the step and the settings of ``config`` (a :class:`ProbeConfig`) that lower the need."""
    import torch

    try:
        yield
    except torch.OutOfMemoryError as error:
        from trajval_ops.errors import DeviceOutOfMemory
        from trajval_ops.hardware import out_of_memory_summary

        levers = [f"micro_batch_size (now {config.micro_batch_size})",
                  f"max_completion_length (now {config.max_completion_length})",
                  f"num_generations (now {config.num_generations})"]
        others = [] if getattr(trainer.args, "gradient_checkpointing", False) else ["gradient_checkpointing: true"]
        others += [] if config.use_lora else ["use_lora: true (a LoRA adapter trains far fewer weights)"]
        if getattr(trainer.args, "use_vllm", False):
            others.append(f"a lower vllm_gpu_memory_utilization (now {config.vllm_gpu_memory_utilization}: vLLM's "
                          "share of the GPU)")
        raise DeviceOutOfMemory(
            f"{what}: out of memory on {device} at step {trainer.state.global_step + 1} "
            f"({out_of_memory_summary(error)}); lower {', '.join(levers[:-1])} or {levers[-1]}"
            + (f", or set {' or '.join(others)}" if others else "")) from error


def quiet_trainer(trainer) -> None:
    """Remove the transformers printers that write every log dictionary (TRL logs each step):
    :class:`ProbeProgress` says what a reader needs."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for printer in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(printer)
