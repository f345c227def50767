"""``trajval validate``'s charge per arm (``results.json`` -> ``cost``), by hand from a probe
unit's recorded costs."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from tests.conftest import REPO
from trajval_ops import fields
from trajval_ops.experiment.validation_config import load_config

SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"
PROBE, EARLY, LATE, ADAPTIVE, SHORT = 640, 16, 16, 10, 4  # completions: the probe's, then each row's per pass


def _probe_run(out, rows=8):
    """A probe unit's output: its manifest's cost and per-row pass costs (early, late, the adaptive
    late pass, the sampled prior's short pass), in the provenance the endpoint passes write."""
    from trajval_ops.experiment.priors import ADAPTIVE_LATE, SAMPLED_SHORT
    from trajval_ops.experiment.results import probe_manifest_path
    from trajval_ops.probe_manifest import write_manifest

    manifest = probe_manifest_path(out)
    write_manifest(manifest.parent, {"cost": {"completions": PROBE, "generated_tokens": 0, "wall_time_s": 1.0}})
    checkpoint = {"name": "epoch-2", "manifest": str(manifest)}

    def cost(completions, late=False):
        return {"cost": {"completions": completions, "generated_tokens": 0}} | ({"checkpoint": checkpoint} if late else {})

    lines = [json.dumps({"id": f"t{i}", "extra_info": {"family": "ab"[i % 2]},
                         fields.R_EARLY: 0.5, f"{fields.R_EARLY}_provenance": cost(EARLY),
                         fields.R_LATE: 0.5, f"{fields.R_LATE}_provenance": cost(LATE, late=True),
                         ADAPTIVE_LATE: 0.5, f"{ADAPTIVE_LATE}_provenance": cost(ADAPTIVE, late=True),
                         SAMPLED_SHORT: 0.5, f"{SAMPLED_SHORT}_provenance": cost(SHORT)}) + "\n" for i in range(rows)]
    (out / "probe" / "weighted.jsonl").write_text("".join(lines))
    return [json.loads(line) for line in lines]


def test_each_arm_is_charged_what_its_spec_reads_each_stage_once(tmp_path):
    """BOTS's reference models are the probe's two endpoint passes: BOTS is charged the probe and
    both passes as TrajVal is (it was charged nothing), BOTS+TrajVal pays for them once."""
    from trajval_ops.experiment.priors import sampled_rows
    from trajval_ops.experiment.results import prior_costs

    config = load_config(SMOKE)
    arms = ("uniform", "greso", "trajval", "variance", "bots", "bots_trajval", "greso_trajval", "trajval_adaptive",
            "trajval_sampled", "variance_other_model", "oracle")
    config = dataclasses.replace(config, training=dataclasses.replace(config.training, arms=arms))
    rows = _probe_run(tmp_path)
    passes = PROBE + len(rows) * (EARLY + LATE)
    measured = int(sampled_rows(rows, config.group_key).sum())
    oracle = config.oracle
    batch = config.grpo.prompts_per_batch * config.grpo.num_generations  # oracle A's record is absent: the batch
    expected = {
        "uniform": 0, "greso": 0, "variance_other_model": 0, "variance": len(rows) * EARLY,
        "trajval": passes, "greso_trajval": passes, "bots": passes, "bots_trajval": passes,
        "trajval_adaptive": PROBE + len(rows) * (EARLY + ADAPTIVE),
        "trajval_sampled": PROBE + measured * (EARLY + LATE) + len(rows) * SHORT,
        "oracle": oracle.steps * batch + (oracle.steps // oracle.every_steps + 1) * oracle.n * len(rows),
    }
    assert 0 < measured < len(rows)
    assert prior_costs(config, tmp_path)["by_arm"] == expected


def _steps_the_callback_evaluates(tmp_path, steps: int, every: int) -> list[int]:
    """The steps a TrajectoryCallback evaluates over a run of ``steps`` steps, driven through the
    trainer's events (the evaluation itself left out)."""
    from types import SimpleNamespace

    from trajval_ops.experiment.trajectory_callback import TrajectoryCallback
    from trajval_ops.regime.tasks import VERIFIER, generate_tasks

    callback = TrajectoryCallback(generate_tasks(2, seed=1), tmp_path / f"{steps}-{every}.jsonl", every_steps=every,
                                  n=1, verifier=VERIFIER[0], verifier_options=VERIFIER[1])
    callback._load = lambda step: None
    callback._evaluate_and_write = lambda model, processing_class, step: callback.steps.append(step)
    args, state = SimpleNamespace(fsdp=None), SimpleNamespace(global_step=0, is_world_process_zero=True)
    callback.on_train_begin(args, state, None)
    for step in range(1, steps + 1):
        state.global_step = step
        callback.on_step_end(args, state, None)
    callback.on_train_end(args, state, None)
    return callback.steps


def test_evaluations_are_counted_as_the_callback_writes_them(tmp_path):
    """The callback also evaluates the last step when every_steps does not divide the steps; the
    dry run and the ceilings' charge counted steps // every + 1 (audit B, finding 3)."""
    from trajval_ops.experiment.dry_run import unit_costs
    from trajval_ops.experiment.results import prior_costs
    from trajval_ops.experiment.validation_config import evaluation_count

    for steps, every in ((10, 4), (12, 4), (4, 2), (7, 10), (1, 1)):
        assert len(_steps_the_callback_evaluates(tmp_path, steps, every)) == evaluation_count(steps, every)
    assert _steps_the_callback_evaluates(tmp_path, 10, 4) == [0, 4, 8, 10]
    base = load_config(SMOKE)
    config = dataclasses.replace(
        base, oracle=dataclasses.replace(base.oracle, steps=10, every_steps=4),
        training=dataclasses.replace(base.training, steps=10, arms=("uniform", "oracle"), sampling=("standard",)),
        evaluation=dataclasses.replace(base.evaluation, every_steps=4))
    units = {unit["unit"]: unit for unit in unit_costs(config)}
    assert units["oracle/context-a"]["evaluation_completions"] == 4 * config.oracle.n * config.tasks.pool_size
    assert units["arms/uniform/seed-0"]["evaluation_completions"] == 4 * config.evaluation.n * config.tasks.heldout_size
    rows = _probe_run(tmp_path)
    batch = config.grpo.prompts_per_batch * config.grpo.num_generations
    assert prior_costs(config, tmp_path)["by_arm"]["oracle"] == 10 * batch + 4 * config.oracle.n * len(rows)


def test_the_oracle_window_check_counts_the_last_steps_evaluation(tmp_path):
    from trajval_ops.experiment.validation_config import ConfigError

    raw = yaml.safe_load(SMOKE.read_text())
    for window in (2, 3):
        raw["oracle"] |= {"steps": 10, "every_steps": 4, "window": window}  # evaluated at 0, 4, 8 and 10
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
        if window == 2:
            assert load_config(tmp_path / "c.yaml").oracle.window == 2
        else:
            with pytest.raises(ConfigError, match="oracle.window 3 needs at least 6 evaluations"):
                load_config(tmp_path / "c.yaml")


def test_one_main_run_is_plain_uniforms_whatever_the_order_of_the_sampling_modes(monkeypatch):
    """The cost in "main runs" read the first mode listed: [dynamic, standard] made uniform+dynamic's
    2.8x larger run the unit (audit B, finding 4)."""
    import numpy as np

    from trajval_ops.experiment import results

    monkeypatch.setattr(results, "prior_costs", lambda config, out: {"stages": {}, "by_arm": {"uniform": 0}})
    curve = np.array([[0.3, 0.32, 0.34, 0.36, 0.38, 0.40, 0.41]] * 2)
    per_step = {"uniform": 1920.0, "uniform+dynamic": 5427.0}
    data = {"curves": {name: curve for name in per_step},
            "completions": {name: np.arange(7) * spent for name, spent in per_step.items()}}
    base = load_config(SMOKE)
    for sampling, expected in ((("standard", "dynamic"), 6 * 1920.0), (("dynamic", "standard"), 6 * 1920.0),
                               (("dynamic",), 6 * 5427.0)):
        config = dataclasses.replace(base, training=dataclasses.replace(base.training, arms=("uniform",),
                                                                        sampling=sampling))
        assert results.accounting(config, None, data)["main_run_completions"] == expected
