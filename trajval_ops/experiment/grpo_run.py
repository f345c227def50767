"""One GRPO training run of the validation protocol, in its own process.

``python -m trajval_ops.experiment.grpo_run SPEC.json`` trains the regime's model on a pool
with TRL's GRPO, drawing prompts through :class:`~trajval_ops.samplers.trl.TrajvalGRPOTrainer`
(a static prior column, optionally composed with GRESO or BOTS), and records trajectories with
:class:`~trajval_ops.experiment.trajectory_callback.TrajectoryCallback` (held-out accuracy for the
A/B arms; every pool task for the oracle runs). The unit is done when ``result.json`` exists
(written last, atomically); the protocol reruns an unfinished unit from its beginning so its
result equals an uninterrupted run's.

The spec (written by :mod:`trajval_ops.experiment.protocol`):
``{"model", "pool", "weight_column" (null: uniform), "online" (null|"greso"|"bots"),
"bots_reference_columns" (BOTS's weaker / stronger reference pass-rate columns), "steps",
"dynamic_sampling", "max_generation_rounds",
"seed", "grpo": {...}, "template", "verifier", "verifier_options", "threads",
"device", "precision", "generation" (the validation config's; resolved here, on the one GPU the
protocol lets this process see, or on CPU), "evaluations": [{"tasks", "output", "every_steps",
"n", "batch_size"}], "output_dir"}``. Where TRL generates with vLLM, the evaluations sample from
its colocated engine as well (:class:`~trajval_ops.rollout.trl_vllm_engine.TrainerVllmEngine`),
else with transformers ``generate`` over the live model. The result records the device, the
precision, the generation engine, the wall time and the peak memory (GPU allocation, or the
CPU process's resident set).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"


def unit_file(folder: Path, kind: str) -> Path:
    """A validation unit's ``log`` or ``spec.json``, kept beside its folder."""
    return folder.parent / f"{folder.name}.{kind}"


def finished_results(run: Path) -> dict[str, dict]:
    """Every finished training unit's result in a validation run's folder, by unit name
    (``oracle/context-a``, ``arms/...``)."""
    return {str(path.parent.relative_to(run)): json.loads(path.read_text())
            for path in sorted(run.glob(f"*/**/{RESULT_FILE}"))}


UNIFORM_COLUMN = "trajval_uniform_weight"


def run(spec: dict[str, Any]) -> dict:
    """Train one run as ``spec`` says and return (and write) its result summary."""
    import torch

    torch.set_num_threads(int(spec.get("threads", 1)))
    from trl import GRPOConfig

    from trajval_ops.pools.io import read_rows
    from trajval_ops.models import resolve_model
    from trajval_ops.hardware import device_name, peak_memory_gib
    from trajval_ops.probe.config import (ProbeConfig, check_autocast, grpo_arguments, resolve_device,
                                          resolve_generation, resolve_precision)
    from trajval_ops.probe.progress import NonFiniteGuard, SamplingCheck, training_memory
    from trajval_ops.probe.rewards import verifier_reward
    from trajval_ops.probe.run import load_policy, load_tokenizer, max_context_of, probe_examples, training_dataset
    from trajval_ops.rollout.verifiers import build_verifier
    from trajval_ops.samplers.trl import TrajvalGRPOTrainer

    out = Path(spec["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    rows = list(read_rows(spec["pool"]))
    grpo = spec["grpo"]
    # the protocol's GRPO settings are ProbeConfig settings; the A/B and oracle runs add no weight decay
    placement = {key: spec[key] for key in ("device", "precision", "generation") if key in spec}
    config = ProbeConfig(**grpo, model=spec["model"], epochs=1, seed=spec["seed"], verifier=spec["verifier"],
                         verifier_options=spec["verifier_options"], prompt_template=spec["template"],
                         weight_decay=0.0, **({"device": "cpu"} | placement))
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    base = resolve_model(spec["model"])
    tokenizer = load_tokenizer(base)
    dataset = training_dataset(probe_examples(rows, config), tokenizer, config, max_context_of(base))
    weight_column = spec.get("weight_column")
    if weight_column is None:
        weight_column, weights = UNIFORM_COLUMN, [1.0] * len(rows)
    else:
        weights = [float(row[weight_column]) for row in rows]
    dataset = dataset.add_column(weight_column, weights)
    online = _online_scheduler(spec, rows)
    # the probe's guard, sampling check included: weights finite but too large to sample from
    # (a learning rate too high) stop the step that made them, not the next step's generation
    guard = NonFiniteGuard(f"grpo_run {spec.get('name', out.name)}", precision, config.learning_rate,
                           SamplingCheck(tokenizer, dataset["prompt"], config.temperature))
    evaluations = _evaluation_callbacks(spec)
    callbacks = [guard, *evaluations]
    args = grpo_arguments(config, str(out / "trainer"), device, show_progress=False)
    args.update(max_steps=int(spec["steps"]), num_train_epochs=1, save_strategy="no", logging_steps=1)
    verifier = build_verifier(spec["verifier"], **spec["verifier_options"])
    trainer = TrajvalGRPOTrainer(
        model=load_policy(base, device, config.precision),
        reward_funcs=[verifier_reward(verifier)],
        args=GRPOConfig(**args),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
        weight_column=weight_column,
        online_scheduler=online,
        dynamic_sampling=bool(spec.get("dynamic_sampling")),
        max_generation_rounds=int(spec.get("max_generation_rounds", 8)),
    )
    check_autocast(precision, trainer.accelerator.mixed_precision)
    generation, why = resolve_generation(config.generation, device)
    if generation == "vllm":
        _evaluate_with_trainers_vllm(trainer, evaluations)
    start = time.monotonic()
    _announce(spec, out, len(rows), device, (config.precision, precision), generation, why)
    with training_memory(f"grpo_run {spec.get('name', out.name)}", config, device, trainer):
        trainer.train()
    verifier.close()
    result = {"name": spec.get("name", out.name), "steps": trainer.state.global_step,
              "wall_time_s": round(time.monotonic() - start, 2),
              **step_record(trainer.state.log_history, grpo["prompts_per_batch"] * grpo["num_generations"]),
              "evaluations": [e["output"] for e in spec["evaluations"]],
              "device": device_name(device), "precision": precision, "generation": generation,
              "peak_memory_gib": peak_memory_gib(device)}
    from trajval_ops.atomic import write_json

    write_json(out / RESULT_FILE, result)
    return result


def _announce(spec: dict, out: Path, tasks: int, device: str, precision: tuple[str, str], generation: str,
              why: str) -> None:
    """The unit's start line, and a warning where this GPU has no native bf16 for its precision.

    :param precision: the setting and what it resolved to on ``device``.
    """
    from loguru import logger

    from trajval_ops.hardware import device_name
    from trajval_ops.probe.config import precision_note

    asked, resolved = precision
    logger.info(f"grpo_run: {spec.get('name', out.name)}: {spec['steps']} steps on {tasks} tasks "
                f"(prior {spec.get('weight_column') or 'uniform'}, online {spec.get('online') or 'none'}, "
                f"dynamic sampling {'on' if spec.get('dynamic_sampling') else 'off'}, seed {spec['seed']}) on "
                f"{device_name(device)}, precision {resolved}; training and evaluations generate with "
                f"{generation} ({why})")
    if note := precision_note(asked, device):
        logger.warning(f"grpo_run: {note}")


def step_record(log_history: list[dict], batch_completions: int) -> dict:
    """Per training step: the mean reward, the completions generated (the batch, or what dynamic
    sampling generated to fill it) and the share of groups whose rewards were all equal."""
    steps = [entry for entry in log_history if "reward" in entry]
    return {
        "train_reward": [entry["reward"] for entry in steps],
        "completions_per_step": [int(entry.get("dynamic_sampling/completions", batch_completions)) for entry in steps],
        "zero_variance_share": [entry.get("frac_reward_zero_std") for entry in steps],
    }


def _online_scheduler(spec: dict[str, Any], rows: list[dict]):
    """The run's online scheduler (GRESO, BOTS) or None."""
    from trajval_ops.samplers.online import BotsScheduler, GresoScheduler

    if spec.get("online") == "greso":
        return GresoScheduler(len(rows))
    if spec.get("online") == "bots":
        # BOTS's implicit evidence: two reference models' pass rates, weaker then stronger. In the
        # protocol these are the probe's own endpoint passes (base model, probe-trained model).
        references = spec.get("bots_reference_columns")
        return BotsScheduler(len(rows), m=spec["grpo"]["num_generations"],
                             reference_pass_rates=None if not references else
                             tuple([float(row[key]) for row in rows] for key in references))
    return None


def _evaluate_with_trainers_vllm(trainer, evaluations: list) -> None:
    """The held-out evaluations sample from the trainer's own colocated vLLM engine, as its
    training does (no second engine on the GPU)."""
    from trajval_ops.rollout.trl_vllm_engine import TrainerVllmEngine

    engine = TrainerVllmEngine(trainer)
    for evaluation in evaluations:
        evaluation.use_engine(engine)


def _evaluation_callbacks(spec: dict[str, Any]) -> list:
    """One :class:`TrajectoryCallback` per evaluation of the spec (held-out or every pool task)."""
    from trajval_ops.experiment.trajectory_callback import TrajectoryCallback
    from trajval_ops.pools.io import read_rows

    # temperature 1.0 whatever grpo.temperature trains at: the paper's pass-rate setting, so every
    # config measures alike (docs/validation.md)
    return [
        TrajectoryCallback(
            tasks=list(read_rows(evaluation["tasks"])), output_path=evaluation["output"],
            every_steps=evaluation["every_steps"], n=evaluation["n"], temperature=1.0,
            max_new_tokens=spec["grpo"]["max_completion_length"], seed=spec["seed"], verifier=spec["verifier"],
            verifier_options=spec["verifier_options"], template=spec["template"],
            batch_size=evaluation.get("batch_size", 256),
        )
        for evaluation in spec["evaluations"]
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m trajval_ops.experiment.grpo_run SPEC.json", file=sys.stderr)
        return 2
    run(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
