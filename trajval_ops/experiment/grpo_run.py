"""One GRPO training run of the validation protocol, in its own process.

``python -m trajval_ops.experiment.grpo_run SPEC.json`` trains the regime's model on a pool
with TRL's GRPO, drawing prompts through :class:`~trajval_ops.samplers.trl.TrajvalGRPOTrainer`
(a static prior column, optionally composed with GRESO or BOTS), and records trajectories with
:class:`~trajval_ops.probe.trajectory_callback.TrajectoryCallback` (held-out accuracy for the
A/B arms; every pool task for the oracle runs). The unit is done when ``result.json`` exists
(written last, atomically); the protocol reruns an unfinished unit from its beginning so its
result equals an uninterrupted run's.

The spec (written by :mod:`trajval_ops.experiment.protocol`):
``{"model", "pool", "weight_column" (null: uniform), "online" (null|"greso"|"bots"),
"bots_reference_columns" (BOTS's weaker / stronger reference pass-rate columns), "steps",
"seed", "grpo": {...}, "template", "verifier", "verifier_options", "threads",
"evaluations": [{"tasks", "output", "every_steps", "n", "batch_size"}], "output_dir"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"
UNIFORM_COLUMN = "trajval_uniform_weight"


def run(spec: dict[str, Any]) -> dict:
    """Train one run as ``spec`` says and return (and write) its result summary."""
    import torch

    torch.set_num_threads(int(spec.get("threads", 1)))
    from loguru import logger
    from trl import GRPOConfig

    from trajval_ops.jsontable import iter_jsonl
    from trajval_ops.models import resolve_model
    from trajval_ops.probe.config import ProbeConfig, grpo_arguments
    from trajval_ops.probe.rewards import verifier_reward
    from trajval_ops.probe.trainer import _load_policy, _load_tokenizer, _max_context, probe_examples, training_dataset
    from trajval_ops.probe.trajectory_callback import TrajectoryCallback
    from trajval_ops.rollout.verifiers import build_verifier
    from trajval_ops.samplers.online import BotsScheduler, GresoScheduler
    from trajval_ops.samplers.trl import TrajvalGRPOTrainer

    out = Path(spec["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    rows = list(iter_jsonl(spec["pool"]))
    grpo = spec["grpo"]
    config = ProbeConfig(
        model=spec["model"], epochs=1, learning_rate=grpo["learning_rate"],
        prompts_per_batch=grpo["prompts_per_batch"], num_generations=grpo["num_generations"],
        micro_batch_size=grpo["micro_batch_size"], epsilon=grpo["epsilon"], temperature=grpo["temperature"],
        beta=grpo["beta"], loss_type=grpo["loss_type"], max_completion_length=grpo["max_completion_length"],
        seed=spec["seed"], verifier=spec["verifier"], verifier_options=spec["verifier_options"],
        prompt_template=spec["template"], device="cpu", weight_decay=0.0,
    )
    base = resolve_model(spec["model"])
    tokenizer = _load_tokenizer(base)
    dataset = training_dataset(probe_examples(rows, config), tokenizer, config, _max_context(base))
    weight_column = spec.get("weight_column")
    if weight_column is None:
        weight_column, weights = UNIFORM_COLUMN, [1.0] * len(rows)
    else:
        weights = [float(row[weight_column]) for row in rows]
    dataset = dataset.add_column(weight_column, weights)
    online = None
    if spec.get("online") == "greso":
        online = GresoScheduler(len(rows))
    elif spec.get("online") == "bots":
        # BOTS's implicit evidence: two reference models' pass rates, weaker then stronger. In the
        # protocol these are the probe's own endpoint passes (base model, probe-trained model).
        references = spec.get("bots_reference_columns")
        online = BotsScheduler(len(rows), m=grpo["num_generations"], reference_pass_rates=None if not references else
                               tuple([float(row[key]) for row in rows] for key in references))

    callbacks = [
        TrajectoryCallback(
            tasks=list(iter_jsonl(evaluation["tasks"])), output_path=evaluation["output"],
            every_steps=evaluation["every_steps"], n=evaluation["n"], temperature=1.0,
            max_new_tokens=grpo["max_completion_length"], seed=spec["seed"], verifier=spec["verifier"],
            verifier_options=spec["verifier_options"], template=spec["template"],
            batch_size=evaluation.get("batch_size", 256),
        )
        for evaluation in spec["evaluations"]
    ]
    args = grpo_arguments(config, str(out / "trainer"), "cpu", show_progress=False)
    args.update(max_steps=int(spec["steps"]), num_train_epochs=1, save_strategy="no", logging_steps=1)
    verifier = build_verifier(spec["verifier"], **spec["verifier_options"])
    trainer = TrajvalGRPOTrainer(
        model=_load_policy(base, "cpu"),
        reward_funcs=[verifier_reward(verifier)],
        args=GRPOConfig(**args),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
        weight_column=weight_column,
        online_scheduler=online,
    )
    start = time.monotonic()
    logger.info(f"grpo_run: {spec.get('name', out.name)}: {spec['steps']} steps on {len(rows)} tasks "
                f"(prior {spec.get('weight_column') or 'uniform'}, online {spec.get('online') or 'none'}, seed {spec['seed']})")
    trainer.train()
    verifier.close()
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    result = {"name": spec.get("name", out.name), "steps": trainer.state.global_step,
              "wall_time_s": round(time.monotonic() - start, 2), "train_reward": rewards,
              "evaluations": [e["output"] for e in spec["evaluations"]]}
    from trajval_ops.atomic import write_json

    write_json(out / RESULT_FILE, result)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m trajval_ops.experiment.grpo_run SPEC.json", file=sys.stderr)
        return 2
    parent = os.environ.get("TRAJVAL_PARENT_PID")
    if parent:
        from trajval_ops.lifetime import die_with_parent

        die_with_parent(expected_parent=int(parent))
    run(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
