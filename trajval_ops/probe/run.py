"""The GRPO probe run: train the base model on the probe set P with TRL's GRPOTrainer.

``run_probe`` is idempotent per output directory: a finished run with the same config hash is
reused (not repeated), an interrupted one resumes from its newest checkpoint, and a directory
holding a different probe is refused. With ``num_processes`` > 1 every rank of an ``accelerate
launch`` (:mod:`trajval_ops.probe.launch`) runs it; only the main process writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from loguru import logger

from trajval_ops.probe.checkpoints import (
    MERGED_DIR, base_entry, checkpoint_entries, last_resumable, list_checkpoints, prune_checkpoints, trained_to,
)
from trajval_ops.probe.config import (
    EXECUTION_SETTINGS, UNHASHED_DEFAULTS, ProbeConfig, check_autocast, describe_numerics, grpo_arguments,
    lora_config, numerics_differ, precision_note, resolve_device, resolve_generation, resolve_precision,
    resolved_numerics, strategy_mismatch, torch_dtype,
)
from trajval_ops.probe_manifest import (
    FORMAT,
    STATUS_COMPLETE,
    STATUS_FAILED,
    STATUS_RUNNING,
    config_hash,
    manifest_numerics,
    read_manifest,
    write_manifest,
)
from trajval_ops.fields import TRAIN_GROUND_TRUTH, TRAIN_ROW_JSON
from trajval_ops.probe.rewards import verifier_reward
from trajval_ops.errors import TrainingDiverged, TrajvalInputError
from trajval_ops.rows import row_label


class ProbeDirectoryError(TrajvalInputError):
    """The output directory holds a different probe run (or something that is not a probe): under
    ``dj-process`` one readable block and exit 2, as for bad input."""


def run_probe(
    rows: Sequence[Mapping[str, Any]],
    probe_ids: Sequence[str],
    config: ProbeConfig,
    output_dir: str | os.PathLike,
    *,
    show_progress: bool = True,
    extra_callbacks: Sequence[Any] = (),
) -> dict:
    """Train on the probe rows and return the finished manifest.

    :param rows: the probe set P (full pool rows).
    :param probe_ids: ids of ``rows`` in the same order (recorded in the manifest and hash).
    :param output_dir: checkpoints and ``manifest.json`` go here.
    :param extra_callbacks: more ``transformers.TrainerCallback`` objects (tests use one to
        interrupt a run).
    :raises ProbeDirectoryError: ``output_dir`` holds another probe or unrelated files.

    In a launched run (``config.num_processes`` ranks) only the main process prunes checkpoints
    and writes the manifest; the other ranks wait for it and return the manifest it wrote.
    """
    output_dir = Path(output_dir).resolve()
    examples, steps_per_epoch, previous = _check_probe_inputs(rows, probe_ids, config, output_dir)
    device = resolve_device(config.device)
    engine, reason = resolve_generation(config.generation, device)  # before any model loads
    logger.info(f"probe: generation with {engine} ({reason})")
    identity = {"config": config.identity(), "probe_ids": list(probe_ids), "device": device,
                "trl": library_versions()["trl"]}
    digest, tasks = config_hash(identity), tasks_digest(examples)
    if previous is not None:
        _check_same_probe(output_dir, previous, identity, digest)
        _check_same_tasks(output_dir, previous, tasks)
        _check_not_failed(output_dir, previous)
        if previous["status"] == STATUS_COMPLETE:
            logger.info(f"probe: run in {output_dir} is already complete (config {digest[:19]}); not repeating it")
            return previous
        _check_same_numerics(output_dir, previous, resolved_numerics(config.precision, config.generation, device))
        _check_same_reading(output_dir, previous, config.verifier)

    from trajval_ops.models import resolve_model

    base_model = resolve_model(config.model).resolve()
    tokenizer = load_tokenizer(base_model)
    dataset = training_dataset(examples, tokenizer, config, max_context_of(base_model))
    args = _grpo_config(config, output_dir, device, show_progress)  # sets up a launched run's process group
    main = args.process_index == 0
    manifest = _start_manifest(config, probe_ids, base_model, digest, device, steps_per_epoch, previous)
    manifest["tasks_sha256"] = tasks
    from trajval_ops.probe.progress import NonFiniteGuard, ProbeProgress, SamplingCheck, quiet_trainer

    progress = ProbeProgress(config, output_dir, base_model, steps_per_epoch, manifest, show_progress)
    precision = resolve_precision(config.precision, device)
    guard = NonFiniteGuard("probe", precision, config.learning_rate,
                           SamplingCheck(tokenizer, dataset["prompt"], config.temperature))
    trainer = _grpo_trainer(config, args, base_model, device, tokenizer, dataset, manifest,
                            [guard, progress, *extra_callbacks])
    quiet_trainer(trainer)
    # every rank, before the output folder is touched: a run refused here leaves it as it was
    check_autocast(precision, trainer.accelerator.mixed_precision, config.distributed_config)
    resume, trained = _prepare_resume(output_dir, config, manifest, base_model, args)
    if main:
        strategy = trainer.accelerator.distributed_type.value
        logger.info(
            f"probe: GRPO on {len(rows)} prompts x {config.num_generations} rollouts, {config.epochs} epochs of "
            f"{steps_per_epoch} steps, {config.model} on {device} ({manifest['generation_engine']} generation"
            f"{f', {config.num_processes} processes, {strategy}' if config.num_processes > 1 else ''})"
        )
        for warning in (strategy_mismatch(config.distributed_config, strategy),
                        precision_note(config.precision, device)):
            if warning:
                logger.warning(f"probe: {warning}")
    try:
        _train(trainer, config, device, resume, trained, steps_per_epoch)
    except TrainingDiverged as error:  # the same settings diverge again: never resumed nor reused
        if main:
            write_manifest(output_dir, {**manifest, "status": STATUS_FAILED, "failure": str(error)})
        raise
    return _finish_probe(trainer, args, config, output_dir, base_model, device, manifest, progress)


def _check_probe_inputs(rows, probe_ids, config: ProbeConfig, output_dir: Path) -> tuple[list[dict], int, dict | None]:
    """Before anything loads: the rows build examples, P fills a batch, the directory holds this
    probe or nothing. Returns the examples, steps per epoch and the previous manifest (or None)."""
    if len(rows) != len(probe_ids):
        raise ValueError(f"{len(rows)} probe rows but {len(probe_ids)} probe ids")
    _check_world_size(int(os.environ.get("WORLD_SIZE", "1")), config)
    examples = probe_examples(rows, config)
    steps_per_epoch = len(rows) // config.prompts_per_batch
    if steps_per_epoch < 1:
        raise ValueError(
            f"the probe has {len(rows)} rows, fewer than prompts_per_batch ({config.prompts_per_batch}); "
            "raise probe_size/probe_fraction or lower prompts_per_batch"
        )
    previous = read_manifest(output_dir)
    if previous is None and output_dir.is_dir() and any(output_dir.iterdir()):
        raise ProbeDirectoryError(f"{output_dir} is not empty and holds no probe manifest; choose an empty output_dir")
    return examples, steps_per_epoch, previous


def _grpo_config(config: ProbeConfig, output_dir: Path, device: str, show_progress: bool):
    """TRL's ``GRPOConfig``; building it sets up the process group of a launched run (every rank
    has read the directory by now: the main process may write from here on, after a barrier)."""
    from trl import GRPOConfig

    return GRPOConfig(**grpo_arguments(config, str(output_dir), device, show_progress))


def _start_manifest(config: ProbeConfig, probe_ids, base_model: Path, digest: str, device: str,
                    steps_per_epoch: int, previous: dict | None) -> dict:
    """The manifest of a run starting (or resuming: wall time and resume history carried over)."""
    from trajval_ops.rollout.verifiers import verifier_revision

    return {
        "format": FORMAT,
        "base_model": str(base_model),
        "model_ref": config.model,
        "seed": config.seed,
        "probe_ids": list(probe_ids),
        "probe_size": len(probe_ids),
        "config": config.to_dict(),
        "config_hash": digest,
        "device": device,
        "generation_engine": resolve_generation(config.generation, device)[0],
        "precision": resolve_precision(config.precision, device),
        "versions": library_versions(),
        "verifier_revision": verifier_revision(config.verifier),  # how the rewards were read
        "steps_per_epoch": steps_per_epoch,
        "checkpoints": [base_entry(base_model)],
        "windows": {"early": [], "late": []},
        "train_reward_per_epoch": [],
        "wall_time_s": (previous or {}).get("wall_time_s", 0.0),
        "resumed_from": (previous or {}).get("resumed_from", []),
        "status": STATUS_RUNNING,
    }


def _prepare_resume(output_dir: Path, config: ProbeConfig, manifest: dict, base_model: Path, args):
    """Remove a save cut short, find the checkpoint to resume from and the one of the last epoch
    (each or None) and write the starting manifest (main process; every rank waits for it)."""
    barrier = args.distributed_state.wait_for_everyone
    main = args.process_index == 0
    kept = set(config.kept_epochs())
    barrier()
    if main:
        prune_checkpoints(output_dir, kept)  # a kill may have left a save cut short
    barrier()
    resume, trained = last_resumable(output_dir), trained_to(output_dir, config.epochs)
    if main:
        if trained is not None:
            logger.info(f"probe: {trained.path.name} in {output_dir} ends epoch {trained.epoch} of {config.epochs}: "
                        "training is done (the run was stopped while finishing); finishing it")
        elif resume is not None:
            logger.info(f"probe: resuming from {resume.path.name} (epoch {resume.epoch}) in {output_dir}")
            manifest["resumed_from"].append(resume.path.name)
        manifest["checkpoints"] += checkpoint_entries(output_dir, kept, config)
        write_manifest(output_dir, manifest)
    return resume, trained


def _train(trainer, config: ProbeConfig, device: str, resume, trained, steps_per_epoch: int) -> None:
    """Train from checkpoint ``resume`` (None: from the start); where checkpoint ``trained`` ends
    the last epoch, train nothing and take up its trainer state (the log the manifest's figures
    come from)."""
    from trajval_ops.probe.progress import training_memory

    if trained is not None:
        trainer.take_state_from(trained.path)
        return
    with training_memory("probe", config, device, trainer):
        trainer.train_from(resume.path if resume else None, resume.step // steps_per_epoch if resume else 0)


def _grpo_trainer(config: ProbeConfig, args, base_model: Path, device: str, tokenizer, dataset, manifest: dict,
                  callbacks):
    """TRL's ``GRPOTrainer`` over the policy, rewarded by the probe's verifier (resuming in the
    uninterrupted run's prompt order: :mod:`trajval_ops.probe.trl_trainer`)."""
    from trajval_ops.probe.trl_trainer import ProbeGRPOTrainer
    from trajval_ops.rollout.verifiers import build_verifier

    verifier = build_verifier(config.verifier, **config.verifier_options)
    manifest["verifier"] = verifier.spec
    return ProbeGRPOTrainer(
        model=load_policy(base_model, device, config.precision),
        reward_funcs=[verifier_reward(verifier)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config),
        callbacks=list(callbacks),
    )


def _finish_probe(trainer, args, config: ProbeConfig, output_dir: Path, base_model: Path, device: str,
                  manifest: dict, progress) -> dict:
    """After training: drop resume state, merge LoRA, name the windows and write the complete
    manifest (main process); the other ranks return what it wrote."""
    barrier = args.distributed_state.wait_for_everyone
    barrier()  # every rank has written its part of the last checkpoint (its RNG state)
    if args.process_index != 0:
        barrier()  # the main process has finished the manifest
        return read_manifest(output_dir)
    kept = set(config.kept_epochs())
    prune_checkpoints(output_dir, kept, keep_resume_state=False)
    if config.use_lora:
        merge_lora_checkpoints(output_dir, base_model, device, config.precision)
    manifest["checkpoints"] = [base_entry(base_model)] + checkpoint_entries(output_dir, kept, config)
    by_epoch = {entry["epoch"]: entry["name"] for entry in manifest["checkpoints"]}
    manifest["windows"] = {
        "early": [by_epoch[e] for e in config.early_epochs()],
        "late": [by_epoch[e] for e in config.late_epochs()],
    }
    progress.record(trainer.state.log_history)
    manifest["status"] = STATUS_COMPLETE
    write_manifest(output_dir, manifest)
    logger.info(
        f"probe: done in {manifest['wall_time_s']:.1f} s; reward per epoch "
        f"{[round(r, 4) for r in manifest['train_reward_per_epoch']]}; manifest {output_dir / 'manifest.json'}"
    )
    barrier()
    return manifest


def probe_examples(rows: Sequence[Mapping[str, Any]], config: ProbeConfig) -> list[dict]:
    """Check every probe row and build its chat messages and ground truth (no model needed, so
    bad rows fail before heavy libraries load or anything is written).

    :raises TrajvalInputError: a missing or unreadable ground truth (the verifier could give no
        reward for it) or a bad prompt, naming the row and field.
    """
    from trajval_ops.rollout.pass_rates import build_task
    from trajval_ops.rollout.verifiers import build_verifier

    settings = config.prompt_settings()
    verifier = build_verifier(config.verifier, **config.verifier_options)
    examples = []
    try:
        for position, row in enumerate(rows):
            task = build_task(row, position, settings, what="probe")
            problem = verifier.truth_problem(task.ground_truth)
            if problem is not None:
                raise TrajvalInputError(f"probe {task.label}: field '{config.ground_truth_key}': {problem}")
            examples.append({"messages": task.messages, "truth": task.ground_truth, "row": dict(row),
                             "position": position})
    finally:
        verifier.close()
    return examples


def training_dataset(examples: Sequence[dict], tokenizer, config: ProbeConfig, max_context: int):
    """A ``datasets.Dataset`` of text prompts (chat template applied by the endpoint mapper's
    ``render_prompt``; a prompt longer than ``max_context`` minus the completion length is an
    error or cut, by ``config.overlong_prompt``), JSON ground truths and JSON rows."""
    from datasets import Dataset

    from trajval_ops.rollout.prompts import fit_prompt, render_prompt

    records, cut = [], 0
    rendering = config.prompt_settings().render_kwargs()
    adds_specials = tokenizer("")["input_ids"] != tokenizer("", add_special_tokens=False)["input_ids"]
    for example in examples:
        try:
            prompt, cut_from = fit_prompt(tokenizer, render_prompt(tokenizer, example["messages"], rendering),
                                          max_context, config.max_completion_length, config.overlong_prompt)
            if adds_specials:
                prompt = text_trl_tokenizes_alike(tokenizer, prompt)
        except (OverflowError, ValueError) as exc:
            raise TrajvalInputError(
                f"probe {row_label(example['row'], example['position'])}: field '{config.prompt_key}': {exc}"
            ) from None
        cut += cut_from is not None
        records.append({
            "prompt": prompt,
            TRAIN_GROUND_TRUTH: json.dumps(example["truth"], default=str),
            TRAIN_ROW_JSON: json.dumps(example["row"], default=str),
        })
    if cut:
        logger.warning(f"probe: {cut} of {len(records)} prompts were cut from the left to fit the model's context")
    return Dataset.from_list(records)


def text_trl_tokenizes_alike(tokenizer, text: str) -> str:
    """The prompt text TRL's GRPOTrainer tokenizes into the ids the endpoint passes evaluate.

    TRL tokenizes a text prompt with the tokenizer's special tokens added
    (``processing_class(text=prompts)``), the passes and the length check without (the chat
    template writes them). A tokenizer that adds BOS to a template that writes it (Llama 3) would
    train the probe on prompts the passes never see, two BOS; the template's BOS is then left out
    of the text TRL gets. ``ValueError`` when no such text exists (a tokenizer adding other tokens).
    """
    wanted = tokenizer(text, add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token
    for candidate in (text, text[len(bos):] if bos and text.startswith(bos) else None):
        if candidate is not None and tokenizer(candidate)["input_ids"] == wanted:
            return candidate
    added = tokenizer("")["input_ids"]
    raise ValueError(f"the tokenizer adds special tokens {added} to a text, and TRL's GRPO trainer tokenizes the "
                     "probe's prompts with them: it would train on other tokens than the endpoint passes evaluate; "
                     "use a tokenizer whose chat template writes the special tokens it adds, or none")


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("trl", "transformers", "torch", "peft", "trajval_ops"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def merge_lora_checkpoints(output_dir: Path, base_model: Path, device: str, precision: str) -> None:
    """Write ``<checkpoint>/merged``: base weights + LoRA adapter as a plain model folder that
    any engine loads (the endpoint mapper evaluates full models)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch_dtype(precision, device)
    for checkpoint in list_checkpoints(output_dir):
        target = checkpoint.path / MERGED_DIR
        if target.is_dir():
            continue
        base = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
        merged = PeftModel.from_pretrained(base, checkpoint.path).merge_and_unload()
        tmp = checkpoint.path / (MERGED_DIR + ".tmp")
        merged.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(base_model).save_pretrained(tmp)
        os.replace(tmp, target)
        logger.info(f"probe: merged LoRA adapter of {checkpoint.path.name} into {target}")


def _check_world_size(world_size: int, config: ProbeConfig) -> None:
    """The processes running the trainer (``WORLD_SIZE``, set by the launcher) must be the
    ``num_processes`` the batch was split for."""
    if world_size != config.num_processes:
        raise RuntimeError(
            f"num_processes is {config.num_processes} but the trainer runs in {world_size} process(es); a probe on "
            "several processes is started by trajval_ops.probe.launch.launch_probe (the operator does), not by "
            "calling run_probe directly"
        )


def _check_same_probe(output_dir: Path, previous: dict, identity: dict, digest: str) -> None:
    if previous.get("config_hash") == digest:
        return
    # as the identity reads a config: a setting at its unhashed default is no difference
    recorded = {k: v for k, v in previous.get("config", {}).items() if k not in EXECUTION_SETTINGS
                and not (k in UNHASHED_DEFAULTS and v == UNHASHED_DEFAULTS[k])}
    before = {"config": recorded, "probe_ids": previous.get("probe_ids"),
              "device": previous.get("device"), "trl": previous.get("versions", {}).get("trl")}
    changed = sorted(
        [f"config.{k}" for k in set(before["config"]) | set(identity["config"])
         if before["config"].get(k) != identity["config"].get(k)]
        + [k for k in ("probe_ids", "device", "trl") if before[k] != identity[k]]
    )
    raise ProbeDirectoryError(
        f"{output_dir} holds a probe run with a different configuration (hash {previous.get('config_hash')} "
        f"vs {digest}; differs in {changed or 'unknown fields'}); use another output_dir or delete it"
    )


def tasks_digest(examples: Sequence[dict]) -> str:
    """The sha256 of what the probe trains on (each example's messages and ground truth, in
    order): the ids the config hash holds do not say that a row's prompt or truth changed."""
    from trajval_ops.canonical import stable_hash

    return stable_hash([[example["messages"], example["truth"]] for example in examples])


def _check_same_tasks(output_dir: Path, previous: dict, tasks: str) -> None:
    """A probe of the same ids whose tasks' content changed (a fixed prompt or ground truth) is
    another probe: a finished one is not reused, an unfinished one does not go on on the new
    tasks. ``tasks``: :func:`tasks_digest` of this run's examples. A manifest written before the
    digest existed is not compared."""
    recorded = previous.get("tasks_sha256")
    if recorded is not None and recorded != tasks:
        raise ProbeDirectoryError(
            f"{output_dir} holds a probe of the same task ids whose prompts or ground truths were others (tasks "
            f"sha256 {recorded[:12]}... vs {tasks[:12]}...): its checkpoints trained on those; "
            "use another output_dir, or delete it to train on the tasks as they are now")


def _check_not_failed(output_dir: Path, previous: dict) -> None:
    """A probe that stopped on a diverged step (:class:`~trajval_ops.errors.TrainingDiverged`,
    recorded in its manifest) would diverge alike when resumed with the same settings."""
    if previous.get("status") == STATUS_FAILED:
        raise ProbeDirectoryError(
            f"{output_dir} holds a probe with these settings that failed, so its checkpoints are not used: change the "
            f"setting its error names and use another output_dir, or delete this one. Its error: {previous.get('failure')}")


def _check_same_numerics(output_dir: Path, previous: dict, here: dict[str, str]) -> None:
    """An unfinished probe goes on only where its ``auto`` precision and generation resolve as they
    did where it started (the config's identity holds them as set, so a GPU probe resumed on a
    node without vLLM, or without native bf16, would train its other steps otherwise)."""
    if differ := numerics_differ(manifest_numerics(previous), here):
        raise ProbeDirectoryError(
            f"{output_dir} holds an unfinished probe whose steps so far trained otherwise than this machine would "
            f"train the rest: {describe_numerics(differ)}; resume it on a machine like the one it started on, or "
            f"use another output_dir")


def _check_same_reading(output_dir: Path, previous: dict, verifier: str) -> None:
    """An unfinished probe goes on only where the verifier reads answers as it did for the steps
    so far (:attr:`~trajval_ops.rollout.verifiers.Verifier.revision`), or its steps would train on
    two readings. A manifest that records none was read by revision 1, or, for the math verifier,
    by 1 or 2 (:func:`~trajval_ops.rollout.verifiers.unrecorded_revision`): not known, so it is
    refused too. A finished probe is a trained model whatever read its rewards: its passes are
    scored by this release."""
    from trajval_ops.rollout.verifiers import recorded_revision, unrecorded_reading, verifier_revision

    then, now = recorded_revision(previous, verifier), verifier_revision(verifier)
    if then is None:
        raise ProbeDirectoryError(
            f"{output_dir} holds an unfinished probe whose manifest {unrecorded_reading(verifier)}, so the rest "
            "of its steps might train on another reading than its steps so far: use another output_dir, or "
            "delete this one to start the probe over")
    if then != now:
        raise ProbeDirectoryError(
            f"{output_dir} holds an unfinished probe whose rewards so far were read by revision {then} of the "
            f"{verifier} verifier; this release reads answers as revision {now}, so the rest of its steps would "
            f"train on another reading: finish it with the release that started it, or use another output_dir")


def max_context_of(base_model: Path) -> int:
    from transformers import AutoConfig

    return int(getattr(AutoConfig.from_pretrained(base_model), "max_position_embeddings", None) or 2048)


def load_tokenizer(base_model: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(base_model: Path, device: str, precision: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base_model, dtype=torch_dtype(precision, device))
