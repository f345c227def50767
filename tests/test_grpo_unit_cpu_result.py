"""One ``trajval validate`` training unit on CPU gives the committed result to the last digit
(issue 37, item 3: running units on GPUs must not move a CPU figure).

``tests/data/grpo_unit_cpu_result.json`` was written by this module's ``_unit_figures`` on the
code before the device settings existed (``python -m tests.test_grpo_unit_cpu_result``); the
unit runs in its own process with one torch thread, both ways the protocol starts one: a fresh
interpreter, and on CPU a fork of the process that imported the training stack once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from tests.conftest import REPO  # noqa: E402

COMMITTED = REPO / "tests" / "data" / "grpo_unit_cpu_result.json"


def _spec(folder: Path) -> dict:
    from trajval_ops.experiment.validation_config import GrpoSettings
    from trajval_ops.pools.io import write_rows
    from trajval_ops.regime.tasks import VERIFIER, generate_tasks

    rows = generate_tasks(48, seed=11)
    for i, row in enumerate(rows):
        row["weight"] = 0.05 + (i % 5) / 5
    write_rows(folder / "pool.jsonl", rows[:32])
    write_rows(folder / "heldout.jsonl", rows[32:])
    verifier, options = VERIFIER
    grpo = dict(vars(GrpoSettings(prompts_per_batch=4, num_generations=4, micro_batch_size=16)))
    unit = folder / "unit"
    return {"name": "cpu-reference", "model": "tiny-arith", "pool": str(folder / "pool.jsonl"), "seed": 3,
            "grpo": grpo, "template": "auto", "verifier": verifier, "verifier_options": dict(options),
            "threads": 1, "output_dir": str(unit), "weight_column": "weight", "online": None, "steps": 3,
            "dynamic_sampling": True, "max_generation_rounds": 2,
            "evaluations": [{"tasks": str(folder / "heldout.jsonl"), "output": str(unit / "heldout.jsonl"),
                             "every_steps": 2, "n": 2, "batch_size": 16}]}


def _unit_figures(folder: Path, forked: bool = False) -> dict:
    """Run the unit in a child process and return the figures it wrote (no wall times, no paths).

    :param forked: start it as the protocol does on CPU, a fork of the preloaded training
        process (``run_units``), instead of a fresh interpreter."""
    spec = _spec(folder)
    if forked:
        from trajval_ops.experiment.protocol import _grpo_unit, run_units

        run_units([_grpo_unit("cpu-reference", Path(spec["output_dir"]), spec)], 1, set(), {})
    else:
        spec_path = folder / "spec.json"
        spec_path.write_text(json.dumps(spec))
        subprocess.run([sys.executable, "-m", "trajval_ops.experiment.grpo_run", str(spec_path)], check=True,
                       cwd=REPO, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    result = json.loads((Path(spec["output_dir"]) / "result.json").read_text())
    heldout = [json.loads(line) for line in Path(spec["evaluations"][0]["output"]).read_text().splitlines()]
    keep = ("steps", "train_reward", "completions_per_step", "zero_variance_share")
    return {"result": {k: result[k] for k in keep}, "heldout": heldout}


@pytest.mark.parametrize("forked", [False, True], ids=["fresh interpreter", "forked"])
def test_a_cpu_unit_gives_the_committed_result(tmp_path, forked):
    """About 10 s: the unit trains 3 steps of tiny-arith with dynamic sampling and evaluates twice.
    Started either way, it gives the same figures."""
    assert _unit_figures(tmp_path, forked) == json.loads(COMMITTED.read_text())
    result = json.loads((tmp_path / "unit" / "result.json").read_text())
    assert result["device"] == "cpu" and result["precision"] == "fp32" and result["peak_memory_gib"] > 0
    assert result["generation"] == "transformers"  # training and the held-out evaluations


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        COMMITTED.write_text(json.dumps(_unit_figures(Path(tmp)), indent=1) + "\n")
    print(f"wrote {COMMITTED}")
