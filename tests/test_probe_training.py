"""Real GRPO probe runs on the tiny random-weight Llama (SmolLM2 tokenizer) on CPU: checkpoints,
manifest, reuse, refusal, interruption and resume, and the operator under dj-process."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import dj_process, read_jsonl, write_jsonl
from trajval_ops.probe.checkpoints import list_checkpoints
from trajval_ops.probe.config import ProbeConfig
from trajval_ops.probe_manifest import load_manifest, resolve_checkpoint
from trajval_ops.probe.run import ProbeDirectoryError, run_probe

pytestmark = pytest.mark.slow


def letter_share(completion, ground_truth, row):
    """Custom reward that varies between a random model's rollouts (so GRPO has a gradient):
    the share of letters in the completion."""
    return sum(ch.isalpha() for ch in completion) / max(1, len(completion))


def pool(size=8):
    return [
        {"id": f"t{i}", "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
         "reward_model": {"ground_truth": str(2 * i)}}
        for i in range(size)
    ]


def tiny_config(**overrides):
    values = dict(
        model="tiny-random-llama", epochs=2, prompts_per_batch=2, num_generations=2, micro_batch_size=4,
        max_completion_length=8, learning_rate=1e-2, weight_decay=0.0, verifier="custom",
        verifier_options={"function": "tests.test_probe_training:letter_share"},
    )
    values.update(overrides)
    return ProbeConfig(**values)


def loguru_messages():
    from loguru import logger

    messages = []
    handler = logger.add(lambda m: messages.append(m.record["message"]), level="INFO")
    return messages, lambda: logger.remove(handler)


def run_counting_steps(rows, ids, config, out):
    """``run_probe`` with the steps it trains and the messages it logs: ``(manifest, steps, messages)``."""
    from transformers import TrainerCallback

    class CountSteps(TrainerCallback):
        def __init__(self):
            self.steps = []

        def on_step_end(self, args, state, control, **kwargs):
            self.steps.append(state.global_step)

    counter = CountSteps()
    messages, stop = loguru_messages()
    try:
        manifest = run_probe(rows, ids, config, out, show_progress=False, extra_callbacks=[counter])
    finally:
        stop()
    return manifest, counter.steps, messages


def test_probe_run_checkpoints_manifest_reuse_and_refusal(tmp_path):
    from transformers import AutoModelForCausalLM

    rows = pool(2)
    ids = [r["id"] for r in rows]
    out = tmp_path / "probe"
    config = tiny_config(keep_epochs=[1])
    manifest = run_probe(rows, ids, config, out, show_progress=False)

    assert manifest == load_manifest(out)
    assert manifest["status"] == "complete" and manifest["probe_ids"] == ids
    assert [c["name"] for c in manifest["checkpoints"]] == ["base", "epoch-1", "epoch-2"]
    assert manifest["windows"] == {"early": ["base"], "late": ["epoch-2"]}
    assert manifest["steps_per_epoch"] == 1 and manifest["checkpoints"][-1]["step"] == 2
    rewards = manifest["train_reward_per_epoch"]
    assert len(rewards) == 2 and all(0.0 < r < 1.0 for r in rewards)
    assert set(manifest["versions"]) >= {"trl", "transformers", "torch", "trajval_ops"}
    from trajval_ops.probe.run import probe_examples, tasks_digest

    assert manifest["tasks_sha256"] == tasks_digest(probe_examples(rows, config))  # what a rerun compares
    # only model weights are left once the run is finished; nothing for unkept epochs
    for checkpoint in list_checkpoints(out):
        assert (checkpoint.path / "model.safetensors").exists()
        assert not list(checkpoint.path.glob("optimizer*")) and not list(checkpoint.path.glob("rng_state*"))

    # the endpoint mapper's lookup: late[0] is a loadable model that training changed (no
    # weight decay here, so a change means the policy gradient reached the weights)
    late = resolve_checkpoint(out, "late[0]")
    base = resolve_checkpoint(out, "early[0]")
    trained = AutoModelForCausalLM.from_pretrained(late["path"])
    original = AutoModelForCausalLM.from_pretrained(base["path"])
    diffs = [(a - b).abs().max().item() for a, b in zip(trained.parameters(), original.parameters())]
    assert max(diffs) > 0

    # same config: not repeated (no new checkpoint, log says so)
    messages, stop = loguru_messages()
    try:
        again = run_probe(rows, ids, config, out, show_progress=False)
    finally:
        stop()
    assert again == manifest
    assert any("already complete" in m and "not repeating" in m for m in messages)

    # a different config refuses to reuse the directory, naming what differs
    with pytest.raises(ProbeDirectoryError, match=r"config\.learning_rate"):
        run_probe(rows, ids, tiny_config(keep_epochs=[1], learning_rate=1e-3), out, show_progress=False)
    with pytest.raises(ProbeDirectoryError, match="probe_ids"):
        run_probe(pool(3)[1:], ["t1", "t2"], config, out, show_progress=False)


def test_interrupted_probe_resumes_from_last_checkpoint_in_the_uninterrupted_order(tmp_path):
    """Killed in epoch 2 (2 steps per epoch) and resumed from epoch 1's checkpoint, the probe
    trains its other epochs on the prompts, in the order, the uninterrupted run drew: every kept
    checkpoint's weights are bit-identical to those of a run never interrupted. (Before, a resumed
    run's fresh sampler replayed epoch 1's permutation in epoch 2, and so on.)"""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:  # in epoch 2, after epoch 1's checkpoint (step 2)
                raise KeyboardInterrupt("simulated kill")

    rows = pool(4)
    ids = [r["id"] for r in rows]
    out, whole = tmp_path / "probe", tmp_path / "uninterrupted"
    config = tiny_config(epochs=3, keep_epochs=[1, 2])
    with pytest.raises(KeyboardInterrupt):
        run_probe(rows, ids, config, out, show_progress=False, extra_callbacks=[Crash()])
    interrupted = json.loads((out / "manifest.json").read_text())
    assert interrupted["status"] == "running"
    assert [c.step for c in list_checkpoints(out)] == [2]
    assert list((out / "checkpoint-2").glob("optimizer*"))  # resume state kept on the newest

    manifest, steps, messages = run_counting_steps(rows, ids, config, out)
    assert any("resuming from checkpoint-2" in m for m in messages)
    assert steps == [3, 4, 5, 6]  # epoch 1 was not trained again
    assert manifest["status"] == "complete" and manifest["resumed_from"] == ["checkpoint-2"]
    assert manifest["windows"] == {"early": ["base"], "late": ["epoch-3"]}
    assert len(manifest["train_reward_per_epoch"]) == 3  # epoch 1's rewards survive via trainer state
    assert manifest["wall_time_s"] > interrupted["wall_time_s"]

    reference = run_probe(rows, ids, config, whole, show_progress=False)
    assert [c["name"] for c in reference["checkpoints"]] == ["base", "epoch-1", "epoch-2", "epoch-3"]
    for entry in reference["checkpoints"][1:]:
        trained = load_file(out / f"checkpoint-{entry['step']}" / "model.safetensors")
        expected = load_file(whole / f"checkpoint-{entry['step']}" / "model.safetensors")
        assert all(torch.equal(trained[name], expected[name]) for name in expected), entry["name"]
    assert manifest["train_reward_per_epoch"] == reference["train_reward_per_epoch"]


def test_a_probe_stopped_while_finishing_finishes_without_training_again(tmp_path, monkeypatch):
    """Killed when it writes the complete manifest (after the last epoch, resume state stripped), the probe run again trains no step: its last checkpoint ends epoch T, so it
    goes straight to finishing. (Before, it found nothing to resume from and trained from the
    start, each save stripping the new checkpoint's resume state.)"""
    import trajval_ops.probe.run as run

    def dying(output_dir, manifest):
        if manifest["status"] == "complete":
            raise KeyboardInterrupt("killed while finishing")
        return real(output_dir, manifest)

    rows = pool(2)
    ids = [r["id"] for r in rows]
    out = tmp_path / "probe"
    config = tiny_config(epochs=3)
    real = run.write_manifest
    monkeypatch.setattr(run, "write_manifest", dying)
    with pytest.raises(KeyboardInterrupt, match="while finishing"):
        run_probe(rows, ids, config, out, show_progress=False)
    monkeypatch.setattr(run, "write_manifest", real)
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    assert [(c.step, c.resumable) for c in list_checkpoints(out)] == [(3, False)]  # stripped before the kill

    manifest, steps, messages = run_counting_steps(rows, ids, config, out)
    assert steps == []
    assert any("checkpoint-3" in m and "training is done" in m for m in messages), messages
    assert manifest == load_manifest(out) and manifest["status"] == "complete" and manifest["resumed_from"] == []
    assert manifest["windows"] == {"early": ["base"], "late": ["epoch-3"]}
    assert len(manifest["train_reward_per_epoch"]) == 3  # from the checkpoint's trainer state
    assert not list((out / "checkpoint-3").glob("optimizer*"))


def test_probe_endpoint_learnability_pipeline_under_dj_process_and_probe_under_ray(tmp_path):
    rows = pool(6)
    data = write_jsonl(tmp_path / "pool.jsonl", rows)
    probe_dir = tmp_path / "probe"
    probe_op = {
        "trajval_probe_trainer": {
            "output_dir": str(probe_dir), "model": "tiny-random-llama", "probe_size": 2, "seed": 1,
            "forced_ids": ["t5"], "epochs": 1, "prompts_per_batch": 2, "num_generations": 2,
            "micro_batch_size": 4, "max_completion_length": 8, "verifier": "math",
            "verifier_options": {"fallback_last_number": True}, "show_progress": False,
        }
    }

    def endpoint(ref, key):
        return {"trajval_endpoint_reward_mapper": {
            "model": f"manifest:{probe_dir}#{ref}", "output_key": key, "engine": "transformers", "n": 2,
            "max_new_tokens": 8, "verifier": "math", "verifier_options": {"fallback_last_number": True},
            "cache_dir": str(tmp_path / "rollout_cache"),
        }}

    recipe = {
        "project_name": "probe_e2e", "dataset_path": str(data), "export_path": str(tmp_path / "out.jsonl"),
        "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [
            probe_op,
            endpoint("early[0]", "trajval_acc_early"),
            endpoint("late[0]", "trajval_acc_late"),
            {"trajval_learnability_mapper": {"early_window_keys": ["trajval_acc_early"],
                                             "late_window_keys": ["trajval_acc_late"]}},
        ],
    }
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [{k: r[k] for k in rows[0]} for r in out] == rows  # every row, unchanged, in order
    marked = [r["id"] for r in out if r["trajval_in_probe"]]
    manifest = load_manifest(probe_dir)
    assert len(marked) == 2 and "t5" in marked and marked == manifest["probe_ids"]
    late = resolve_checkpoint(probe_dir, "late[-1]")
    assert late["name"] == "epoch-1"
    for row in out:
        assert 0.0 <= row["trajval_acc_early"] <= 1.0 and row["trajval_acc_late_n"] == 2
        assert row["trajval_weight"] >= 0.05
    assert late["path"] in json.dumps(out[0]["trajval_acc_late_provenance"])

    # the probe alone under the Ray executor: same marks, rows in order, finished probe reused
    ray_recipe = dict(recipe, executor_type="ray", ray_address="local", process=[probe_op],
                      export_path=str(tmp_path / "ray_out.jsonl"))
    result = dj_process(ray_recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"already complete .*not repeating", result.stdout + result.stderr)
    ray_out = read_jsonl(tmp_path / "ray_out.jsonl")
    assert [r["id"] for r in ray_out] == [r["id"] for r in rows]
    assert [r["id"] for r in ray_out if r["trajval_in_probe"]] == marked


def test_an_autocast_the_precision_does_not_name_stops_the_probe_before_it_writes(tmp_path):
    """With no bf16 in TRL's arguments (precision fp32), accelerate takes its mixed precision from
    the environment (what ``accelerate launch`` fills from a distributed_config, or a cluster's
    default): the probe would train in bf16 autocast and record fp32. It stops with one error,
    exit 2, before the output folder is touched; without the variable the same recipe trains."""
    rows = pool(4)
    probe_dir = tmp_path / "probe"
    recipe = {
        "project_name": "probe_autocast", "dataset_path": str(write_jsonl(tmp_path / "pool.jsonl", rows)),
        "export_path": str(tmp_path / "out.jsonl"), "np": 1, "text_keys": None, "skip_op_error": False,
        "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_probe_trainer": {
            "output_dir": str(probe_dir), "model": "tiny-random-llama", "probe_size": 2, "epochs": 1,
            "prompts_per_batch": 2, "num_generations": 2, "micro_batch_size": 4, "max_completion_length": 8,
            "precision": "fp32", "verifier": "math", "show_progress": False}}],
    }
    refused = dj_process(recipe, tmp_path, env={"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert re.search(r"precision is fp32, but accelerate would train with mixed_precision bf16, set by "
                     r"ACCELERATE_MIXED_PRECISION in the environment", refused.stderr)
    assert "Traceback" not in refused.stderr
    assert not probe_dir.exists() or not any(probe_dir.iterdir())
    trained = dj_process(recipe, tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert load_manifest(probe_dir)["config"]["precision"] == "fp32"


def test_lora_probe_writes_merged_model_folders(tmp_path):
    from transformers import AutoModelForCausalLM

    rows = pool(2)
    out = tmp_path / "probe"
    config = tiny_config(epochs=1, use_lora=True, lora_r=4, lora_alpha=8, learning_rate=5e-2)
    manifest = run_probe(rows, [r["id"] for r in rows], config, out, show_progress=False)
    late = resolve_checkpoint(out, "late[0]")
    assert late["path"].endswith("/merged") and (out / "checkpoint-1" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(late["path"])  # a plain model folder, no peft needed
    base = AutoModelForCausalLM.from_pretrained(manifest["base_model"])
    assert type(merged) is type(base)
    assert max((a - b).abs().max().item() for a, b in zip(merged.parameters(), base.parameters())) > 0


def test_probe_trains_with_gradient_checkpointing_on_cpu(tmp_path):
    """The GPU recipes' probe turns gradient checkpointing on (``device: auto`` on a GPU); the
    same path runs on CPU when asked: checkpointing is on while the model trains, and it learns."""
    from transformers import AutoModelForCausalLM, TrainerCallback

    class Checkpointing(TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.seen.append(bool(model.is_gradient_checkpointing) and model.training)

    rows = pool(2)
    out = tmp_path / "probe"
    probe = Checkpointing()
    config = tiny_config(epochs=1, gradient_checkpointing=True, learning_rate=5e-2)
    manifest = run_probe(rows, [r["id"] for r in rows], config, out, show_progress=False, extra_callbacks=[probe])
    assert probe.seen and all(probe.seen)
    late = AutoModelForCausalLM.from_pretrained(resolve_checkpoint(out, "late[0]")["path"])
    base = AutoModelForCausalLM.from_pretrained(manifest["base_model"])
    assert max((a - b).abs().max().item() for a, b in zip(late.parameters(), base.parameters())) > 0


@pytest.mark.parametrize("precision, weights", [("bf16", "bfloat16"), ("bf16-mixed", "float32")])
def test_probe_trains_in_bf16_on_cpu(tmp_path, precision, weights):
    """The GPU paths on CPU: ``precision: bf16-mixed`` (a GPU's ``auto``) keeps fp32 weights and
    checkpoints under bf16 autocast; ``precision: bf16`` trains bf16 weights and writes bf16
    checkpoints; autocast at every step, and the weights move."""
    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback

    class Precision(TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.seen.append((args.bf16, {p.dtype for p in model.parameters()}))

    rows = pool(2)
    out = tmp_path / "probe"
    probe = Precision()
    config = tiny_config(epochs=1, precision=precision, learning_rate=5e-2)
    manifest = run_probe(rows, [r["id"] for r in rows], config, out, show_progress=False, extra_callbacks=[probe])
    dtype = getattr(torch, weights)
    assert probe.seen and all(bf16 and dtypes == {dtype} for bf16, dtypes in probe.seen)
    late = AutoModelForCausalLM.from_pretrained(resolve_checkpoint(out, "late[0]")["path"], dtype="auto")
    assert late.dtype == dtype
    base = AutoModelForCausalLM.from_pretrained(manifest["base_model"], dtype=dtype)
    assert max((a - b).abs().max().item() for a, b in zip(late.parameters(), base.parameters())) > 0


def test_a_poisoned_step_stops_the_probe_before_a_nan_checkpoint(tmp_path):
    """Issue 37, item 1: a step whose gradient goes non-finite (a poisoned batch: a hook turns one
    parameter's gradient to NaN in the second step) stops the probe at that step with the error
    naming it, before the next generation would sample from NaN weights; no checkpoint is written."""
    from transformers import TrainerCallback

    from trajval_ops.errors import TrainingDiverged

    class Poison(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step == 1:
                next(model.parameters()).register_hook(lambda grad: grad * float("nan"))

    rows = pool(4)
    out = tmp_path / "probe"
    with pytest.raises(TrainingDiverged, match=r"probe: step 2: a weight after the update is not finite \(precision "
                                               r"fp32"):
        run_probe(rows, [r["id"] for r in rows], tiny_config(epochs=1), out, show_progress=False,
                  extra_callbacks=[Poison()])
    assert not list(out.glob("checkpoint-*")) and not list(out.glob("epoch-*"))


def test_a_step_out_of_gpu_memory_names_the_step_and_the_settings_that_lower_it(tmp_path):
    """A training step that runs out of GPU memory (raised here in the second step as torch raises
    it on a GPU) stops the probe with the step and the settings to lower, not the allocator's
    traceback; no checkpoint is written."""
    import torch
    from transformers import TrainerCallback

    from trajval_ops.errors import DeviceOutOfMemory

    class Exhaust(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of "
                    "which 1.06 GiB is free. Of the allocated memory 75.1 GiB is allocated by PyTorch, ...")

    rows = pool(4)
    out = tmp_path / "probe"
    with pytest.raises(DeviceOutOfMemory, match=(
            r"probe: out of memory on cpu at step 2 \(CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
            r"total capacity of 79.19 GiB of which 1.06 GiB is free\); lower micro_batch_size \(now 4\), "
            r"max_completion_length \(now 8\) or num_generations \(now 2\), or set gradient_checkpointing: true or "
            r"use_lora: true \(a LoRA adapter trains far fewer weights\)$")):
        run_probe(rows, [r["id"] for r in rows], tiny_config(epochs=1), out, show_progress=False,
                  extra_callbacks=[Exhaust()])
    assert not list(out.glob("checkpoint-*")) and not list(out.glob("epoch-*"))


def test_a_probe_whose_weights_cannot_sample_fails_and_is_never_reused(tmp_path):
    """Issue 57: at learning_rate 1e12 the demo probe's weights stay finite (up to 1e12) and its
    logits are NaN. The guard passed it, checkpoint-1 was written, the manifest said complete and
    the late pass died in torch; every rerun reused it. Now the step stops with the learning rate
    named, no checkpoint is written, the manifest says failed and why, and neither a rerun nor an
    endpoint pass uses it."""
    import yaml

    from tests.conftest import REPO
    from trajval_ops.errors import TrainingDiverged
    from trajval_ops.probe_manifest import ManifestError

    recipe = yaml.safe_load((REPO / "recipes" / "demo_trajval.yaml").read_text())
    settings = recipe["process"][0]["trajval_probe_trainer"]
    config = ProbeConfig(**{**{k: v for k, v in settings.items() if k in ProbeConfig.__dataclass_fields__},
                            "learning_rate": 1e12})
    rows = read_jsonl(REPO / recipe["dataset_path"])[:8]  # one step of 8 prompts
    out = tmp_path / "probe"
    diverged = r"probe: step 1: the next-token distribution .* learning rate 1e\+12\); likely cause: the learning rate"
    with pytest.raises(TrainingDiverged, match=diverged):
        run_probe(rows, [r["id"] for r in rows], config, out, show_progress=False)
    assert not list(out.glob("checkpoint-*"))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and re.search(diverged, manifest["failure"])
    with pytest.raises(ProbeDirectoryError, match=r"holds a probe with these settings that failed, so its checkpoints "
                                                  r"are not used: .* Its error: " + diverged):
        run_probe(rows, [r["id"] for r in rows], config, out, show_progress=False)
    with pytest.raises(ManifestError, match="the probe run failed, so its checkpoints are not used: " + diverged):
        resolve_checkpoint(out, "late[0]")
