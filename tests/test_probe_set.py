"""Probe-set sampling, probe config, manifest and checkpoint policy (fast, no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trajval_ops.probe.checkpoints import (
    check_loadable_model, checkpoint_entries, last_resumable, list_checkpoints, prune_checkpoints, trained_to,
)
from trajval_ops.probe.config import ProbeConfig, grpo_arguments
from trajval_ops.probe_manifest import (
    FORMAT,
    ManifestError,
    config_hash,
    load_manifest,
    resolve_checkpoint,
    write_manifest,
)
from trajval_ops.probe.probe_set import (
    DEFAULT_PROBE_FRACTION,
    probe_size_for,
    unique_row_ids,
    sample_probe_positions,
)
from trajval_ops.errors import CheckpointWithoutModel, TrajvalInputError


# ---------------------------------------------------------------- sampling
def test_paper_fraction_gives_512_of_17398():
    assert probe_size_for(17398) == 512
    assert DEFAULT_PROBE_FRACTION == pytest.approx(0.02943, abs=1e-5)


@pytest.mark.parametrize(
    "pool, fraction, expected",
    [(100, 0.025, 3), (100, 0.024, 2), (10, 0.25, 3), (10, 0.001, 1), (7, 1.0, 7), (1000, 0.0035, 4)],
)
def test_fraction_rounds_to_nearest_halves_up_at_least_one(pool, fraction, expected):
    assert probe_size_for(pool, probe_fraction=fraction) == expected


def test_probe_size_overrides_fraction():
    assert probe_size_for(50, probe_size=7, probe_fraction=0.5) == 7


@pytest.mark.parametrize("kwargs", [{"probe_size": 11}, {"probe_size": 0}, {"probe_fraction": 0.0}, {"probe_fraction": 1.5}])
def test_bad_sizes_are_errors(kwargs):
    with pytest.raises(ValueError):
        probe_size_for(10, **kwargs)


def test_probe_larger_than_pool_is_an_error():
    with pytest.raises(ValueError, match="larger than the pool"):
        probe_size_for(10, probe_size=11)
    with pytest.raises(ValueError, match="larger than the pool"):
        sample_probe_positions([str(i) for i in range(5)], 6, seed=0)


def test_empty_pool_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        probe_size_for(0)


def test_sampling_is_seeded_uniform_and_sorted():
    ids = [f"t{i}" for i in range(200)]
    a = sample_probe_positions(ids, 20, seed=3)
    assert np.array_equal(a, sample_probe_positions(ids, 20, seed=3))
    assert not np.array_equal(a, sample_probe_positions(ids, 20, seed=4))
    assert len(set(a.tolist())) == 20 and np.all(np.diff(a) > 0)
    # uniform: over many seeds every row's inclusion frequency is near 20/200
    counts = np.zeros(200)
    for seed in range(2000):
        counts[sample_probe_positions(ids, 20, seed=seed)] += 1
    freq = counts / 2000
    # binomial sd = sqrt(0.1*0.9/2000) ~ 0.0067; 5 sd bound
    assert np.abs(freq - 0.1).max() < 0.034


def test_forced_ids_always_in_probe_and_size_kept():
    ids = [f"t{i}" for i in range(100)]
    for seed in range(20):
        positions = sample_probe_positions(ids, 10, seed=seed, forced_ids=["t5", "t77", "t5"])
        chosen = {ids[p] for p in positions}
        assert {"t5", "t77"} <= chosen and len(positions) == 10


def test_forced_ids_errors():
    ids = [f"t{i}" for i in range(10)]
    with pytest.raises(ValueError, match="'nope' is not in the pool"):
        sample_probe_positions(ids, 3, seed=0, forced_ids=["nope"])
    with pytest.raises(ValueError, match="exceed the probe size"):
        sample_probe_positions(ids, 1, seed=0, forced_ids=["t1", "t2"])


def test_row_ids_dotted_key_position_fallback_and_duplicates():
    rows = [{"extra_info": {"index": "a"}}, {"extra_info": json.dumps({"index": "b"})}]
    assert unique_row_ids(rows, "extra_info.index") == ["a", "b"]
    assert unique_row_ids([{"p": 1}, {"p": 2}], None) == ["0", "1"]
    with pytest.raises(TrajvalInputError, match=r"row 1 .*repeats row 0"):
        unique_row_ids([{"id": 1}, {"id": 1}], "id")
    with pytest.raises(TrajvalInputError, match=r"row 1.*'id' is missing"):
        unique_row_ids([{"id": 1}, {"x": 2}], "id")


# ---------------------------------------------------------------- config
def test_config_defaults_are_the_paper_regime():
    c = ProbeConfig()
    assert (c.learning_rate, c.weight_decay, c.max_grad_norm) == (1e-6, 0.1, 1.0)
    assert (c.prompts_per_batch, c.num_generations, c.epsilon, c.temperature, c.epochs, c.window_k) == (
        64, 16, 0.2, 1.0, 20, 1)
    assert c.early_epochs() == [0] and c.late_epochs() == [20]


def test_grpo_arguments_cpu_and_gpu_paths(monkeypatch, gpu_of_capability):
    from trajval_ops.probe import config as probe_config

    gpu_of_capability((9, 0))  # an H200
    c = ProbeConfig(prompts_per_batch=4, num_generations=8, micro_batch_size=8)
    cpu = grpo_arguments(c, "/tmp/x", "cpu")
    assert cpu["use_cpu"] and not cpu["bf16"] and not cpu["use_vllm"] and not cpu["gradient_checkpointing"]
    assert cpu["generation_batch_size"] == 32 and cpu["gradient_accumulation_steps"] == 4
    assert cpu["generation_batch_size"] % cpu["num_generations"] == 0
    monkeypatch.setattr(probe_config, "vllm_importable", lambda: True)  # a GPU machine with vLLM
    gpu = grpo_arguments(c, "/tmp/x", "cuda")
    assert gpu["use_vllm"] and gpu["bf16"] and gpu["vllm_mode"] == "colocate" and gpu["gradient_checkpointing"]
    monkeypatch.setattr(probe_config, "vllm_importable", lambda: False)  # ... and without: TRL's own generation
    gpu = grpo_arguments(c, "/tmp/x", "cuda")
    assert not gpu["use_vllm"] and "vllm_mode" not in gpu and gpu["bf16"] and gpu["gradient_checkpointing"]
    # (TRL's GRPOConfig accepting the CPU arguments is exercised by the real runs in
    # test_probe_training.py; the GPU ones need CUDA to build.)


def test_precision_selects_bf16_on_either_device_and_keeps_old_probe_hashes(gpu_of_capability):
    import torch

    from trajval_ops.probe.config import resolve_precision, torch_dtype

    gpu_of_capability((9, 0))  # an H200
    c = ProbeConfig(prompts_per_batch=4, num_generations=8, micro_batch_size=8)
    bf16 = ProbeConfig(prompts_per_batch=4, num_generations=8, micro_batch_size=8, precision="bf16")
    fp32 = ProbeConfig(prompts_per_batch=4, num_generations=8, micro_batch_size=8, precision="fp32")
    assert grpo_arguments(bf16, "/tmp/x", "cpu")["bf16"] and not grpo_arguments(fp32, "/tmp/x", "cuda")["bf16"]
    assert not grpo_arguments(c, "/tmp/x", "cpu")["bf16"] and grpo_arguments(c, "/tmp/x", "cuda")["bf16"]
    # issue 37, item 1: a GPU's default keeps fp32 master weights under bf16 autocast (bf16
    # weights went non-finite for SmolLM2-135M-Instruct on an H200); CPU stays fp32
    assert resolve_precision("auto", "cuda") == "bf16-mixed" and torch_dtype("auto", "cuda") == torch.float32
    assert resolve_precision("auto", "cpu") == "fp32" and torch_dtype("bf16", "cpu") == torch.bfloat16
    # the default (the behaviour before the setting existed) stays out of the hash: probes hashed
    # before it resume; any other value is a different probe
    assert "precision" not in c.identity() and bf16.identity()["precision"] == "bf16"
    with pytest.raises(ValueError, match="precision must be one of 'auto', 'bf16-mixed', 'bf16', 'fp32', got 'fp16'"):
        ProbeConfig(precision="fp16")


@pytest.mark.parametrize("capability, native", [((7, 0), False), ((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_a_gpu_without_native_bf16_trains_and_samples_in_fp32_by_default(gpu_of_capability, capability, native):
    """V100 (7.0) and T4 (7.5) have no native bf16: torch emulates it, slowly and without an error,
    and vLLM refuses it. ``auto`` there is fp32 for the probe, validate's units and the engines, and
    the run says why; an explicit bf16 is kept and said to be emulated."""
    from trajval_ops.hardware import auto_dtype
    from trajval_ops.probe.config import precision_note, resolve_precision

    gpu_of_capability(capability)
    c = ProbeConfig(prompts_per_batch=4, num_generations=8, micro_batch_size=8)
    assert resolve_precision("auto", "cuda") == ("bf16-mixed" if native else "fp32")
    assert grpo_arguments(c, "/tmp/x", "cuda")["bf16"] == native
    assert auto_dtype("cuda") == ("bfloat16" if native else "float32")
    notes = {precision: precision_note(precision, "cuda") for precision in ("auto", "bf16-mixed", "bf16", "fp32")}
    if native:
        assert set(notes.values()) == {None}
        return
    version = f"{capability[0]}.{capability[1]}"
    assert notes["auto"] == (f"precision auto -> fp32: this GPU (compute capability {version}) has no native "
                             "bf16 (it starts at 8.0)")
    assert f"precision bf16-mixed on a GPU of compute capability {version}" in notes["bf16-mixed"]
    assert "torch emulates it" in notes["bf16"] and notes["fp32"] is None
    assert precision_note("auto", "cpu") is None and resolve_precision("bf16", "cuda") == "bf16"


def test_the_gpu_asked_about_is_the_one_a_process_uses(monkeypatch):
    """``cuda:<i>`` is GPU i; bare ``cuda`` is a launched rank's ``LOCAL_RANK`` GPU (read before
    the rank picks it), else GPU 0, and GPU 0 where an inherited ``LOCAL_RANK`` is past the GPUs
    the process sees; vLLM's child passes the capability it read, and torch is not asked."""
    import torch

    from trajval_ops import hardware

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or (8, 6))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert hardware.gpu_capability("cuda") == (8, 6) and hardware.gpu_capability("cuda:1") == (8, 6)
    monkeypatch.setenv("LOCAL_RANK", "3")
    hardware.gpu_capability("cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # a unit pinned to one GPU, LOCAL_RANK inherited
    hardware.gpu_capability("cuda")
    assert asked == [0, 1, 3, 0]
    assert hardware.auto_dtype("cuda", (7, 5)) == "float32" and hardware.auto_dtype("cuda", (9, 0)) == "bfloat16"
    assert asked == [0, 1, 3, 0]
    assert hardware.auto_dtype("cpu") == ("bfloat16" if hardware.cpu_supports_bf16() else "float32")


def test_config_validation():
    with pytest.raises(ValueError, match="must divide"):
        ProbeConfig(prompts_per_batch=3, num_generations=4, micro_batch_size=8)
    with pytest.raises(ValueError, match="window_k"):
        ProbeConfig(epochs=2, window_k=3)
    with pytest.raises(ValueError, match="unknown probe config keys"):
        ProbeConfig.from_dict({"lr": 1})
    c = ProbeConfig(epochs=5, window_k=2, keep_epochs=[3, 3, 1])
    assert c.early_epochs() == [0, 1] and c.late_epochs() == [4, 5] and c.kept_epochs() == [0, 1, 3, 4, 5]


@pytest.mark.parametrize("values, message", [
    ({"num_generations": 1}, r"num_generations must be in \[2, inf\) \(GRPO compares rollouts\), got 1"),
    ({"learning_rate": 0.0}, r"learning_rate must be in \(0, inf\), got 0.0"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
    ({"lora_dropout": 1.0}, r"lora_dropout must be in \[0, 1\), got 1.0"),
    ({"epochs": 0}, r"epochs must be in \[1, inf\), got 0"),
    ({"device": "tpu"}, r"device must be one of 'auto', 'cpu', 'cuda', got 'tpu'"),
])
def test_config_limits_name_the_setting(values, message):
    with pytest.raises(ValueError, match=message):
        ProbeConfig(**values)


def test_operator_parameters_are_the_probe_settings():
    """The probe trainer's signature is the one list of settings: every ProbeConfig field is a
    parameter with the same default and a docstring line, and reaches the config unchanged."""
    import dataclasses
    import inspect

    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer

    signature = inspect.signature(TrajvalProbeTrainer.__init__).parameters
    doc = TrajvalProbeTrainer.__init__.__doc__
    defaults = ProbeConfig()
    for field in dataclasses.fields(ProbeConfig):
        assert field.name in signature, field.name
        assert f":param {field.name}:" in doc, field.name
        default = signature[field.name].default
        if default is not None:
            assert default == getattr(defaults, field.name), field.name
    op = TrajvalProbeTrainer(output_dir="x", epochs=3, learning_rate=2e-5, keep_epochs=[2], top_p=0.9,
                             verifier_options={"fallback_last_number": True}, lora_target_modules=["q_proj"])
    assert op.config == ProbeConfig(epochs=3, learning_rate=2e-5, keep_epochs=(2,), top_p=0.9,
                                    verifier_options={"fallback_last_number": True},
                                    lora_target_modules=("q_proj",))
    with pytest.raises(ValueError, match="num_generations must be in"):
        TrajvalProbeTrainer(output_dir="x", num_generations=1)


def test_config_hash_is_canonical():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


# ---------------------------------------------------------------- manifest
def _manifest(tmp_path, status="complete"):
    base = tmp_path / "base"
    late = tmp_path / "checkpoint-8"
    base.mkdir(exist_ok=True)
    late.mkdir(exist_ok=True)
    return {
        "format": FORMAT, "base_model": str(base), "seed": 0, "probe_ids": ["a"], "config": {},
        "config_hash": "sha256:x", "versions": {},
        "checkpoints": [
            {"name": "base", "epoch": 0, "step": 0, "path": str(base)},
            {"name": "epoch-2", "epoch": 2, "step": 8, "path": str(late)},
        ],
        "windows": {"early": ["base"], "late": ["epoch-2"]},
        "train_reward_per_epoch": [0.1, 0.2], "wall_time_s": 1.0, "status": status,
    }


def test_manifest_roundtrip_and_resolve(tmp_path):
    write_manifest(tmp_path, _manifest(tmp_path))
    assert not list(tmp_path.glob(".manifest.*"))  # no temp file left behind
    assert load_manifest(tmp_path)["windows"]["late"] == ["epoch-2"]
    late = resolve_checkpoint(tmp_path / "manifest.json", "late[-1]")
    assert late["path"] == str(tmp_path / "checkpoint-8") and late["window"] == "late"
    assert late["manifest"] == str((tmp_path / "manifest.json").resolve()) and late["config_hash"] == "sha256:x"
    assert resolve_checkpoint(tmp_path, "early[0]")["name"] == "base"
    assert resolve_checkpoint(tmp_path, "epoch-2")["epoch"] == 2


def test_manifest_errors(tmp_path):
    with pytest.raises(ManifestError, match="no probe manifest"):
        load_manifest(tmp_path)
    write_manifest(tmp_path, _manifest(tmp_path, status="running"))
    with pytest.raises(ManifestError, match="status is 'running'"):
        load_manifest(tmp_path)
    write_manifest(tmp_path, _manifest(tmp_path))
    with pytest.raises(ManifestError, match="out of range"):
        resolve_checkpoint(tmp_path, "late[1]")
    with pytest.raises(ManifestError, match="unknown checkpoint reference"):
        resolve_checkpoint(tmp_path, "middle[0]")
    (tmp_path / "checkpoint-8").rmdir()
    with pytest.raises(ManifestError, match="does not exist"):
        resolve_checkpoint(tmp_path, "late[0]")
    broken = _manifest(tmp_path)
    del broken["windows"]
    write_manifest(tmp_path, broken)
    with pytest.raises(ManifestError, match="lacks keys"):
        load_manifest(tmp_path)


# ---------------------------------------------------------------- checkpoint policy
def _fake_checkpoint(root, step, epoch, complete=True):
    path = root / f"checkpoint-{step}"
    path.mkdir()
    (path / "model.safetensors").write_text("w")
    (path / "optimizer.pt").write_text("o")
    (path / "rng_state.pth").write_text("r")
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"epoch": float(epoch)}))
    return path


def test_prune_keeps_resume_state_only_on_newest_and_drops_unkept(tmp_path):
    for epoch in (1, 2, 3):
        _fake_checkpoint(tmp_path, 4 * epoch, epoch)
    _fake_checkpoint(tmp_path, 16, 4, complete=False)  # a save cut short by a kill
    prune_checkpoints(tmp_path, kept_epochs={0, 1, 4})
    names = {c.path.name: c for c in list_checkpoints(tmp_path)}
    assert sorted(names) == ["checkpoint-12", "checkpoint-4"]
    assert not (tmp_path / "checkpoint-4" / "optimizer.pt").exists()  # kept epoch: weights only
    assert (tmp_path / "checkpoint-4" / "model.safetensors").exists()
    assert last_resumable(tmp_path).step == 12  # newest keeps everything to resume
    prune_checkpoints(tmp_path, kept_epochs={0, 1, 3}, keep_resume_state=False)
    assert last_resumable(tmp_path) is None and (tmp_path / "checkpoint-12" / "model.safetensors").exists()




def test_prune_keeps_resume_state_on_the_newest_resumable_checkpoint(tmp_path):
    """A newer checkpoint stripped of its resume state (a run stopped while finishing) does not
    take the resume state of the newest one that has it; the last epoch's checkpoint is found."""
    for epoch in (1, 2, 3):
        _fake_checkpoint(tmp_path, epoch, epoch)
    for name in ("optimizer.pt", "rng_state.pth"):
        (tmp_path / "checkpoint-3" / name).unlink()
    prune_checkpoints(tmp_path, kept_epochs={0, 3})
    assert [c.path.name for c in list_checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-3"]
    assert last_resumable(tmp_path).step == 2 and (tmp_path / "checkpoint-2" / "optimizer.pt").exists()
    assert trained_to(tmp_path, 3).step == 3 and trained_to(tmp_path, 4) is None

@pytest.mark.parametrize("state, why", [
    ("", "trainer_state.json does not parse"),  # created, not yet written
    ('{"best_metric": null, "epoch": 2.0, "glo', "trainer_state.json does not parse"),  # cut mid-write
    ('{"global_step": 8}', "trainer_state.json names no epoch"),
])
def test_a_trainer_state_cut_short_makes_a_checkpoint_cut_short(tmp_path, state, why):
    from loguru import logger

    _fake_checkpoint(tmp_path, 4, 1)
    (_fake_checkpoint(tmp_path, 8, 2) / "trainer_state.json").write_text(state)
    assert [(c.step, c.complete) for c in list_checkpoints(tmp_path)] == [(4, True), (8, False)]
    assert last_resumable(tmp_path).step == 4
    messages = []
    handler = logger.add(lambda m: messages.append(m.record["message"]), level="INFO")
    try:
        prune_checkpoints(tmp_path, kept_epochs={1, 2})
    finally:
        logger.remove(handler)
    assert [c.path.name for c in list_checkpoints(tmp_path)] == ["checkpoint-4"]
    assert any("removing incomplete checkpoint checkpoint-8" in m and why in m for m in messages), messages


def _engine_checkpoint(root, step, epoch, engine):
    """A checkpoint folder as transformers' Trainer writes it under a sharded training engine
    (names from accelerate's constants and the Trainer's DeepSpeed save), with the loadable model
    beside the engine's own state."""
    from accelerate.utils.constants import FSDP_MODEL_NAME, OPTIMIZER_NAME

    path = root / f"checkpoint-{step}"
    path.mkdir()
    for name in ("config.json", "model.safetensors", "rng_state_0.pth", "rng_state_1.pth"):
        (path / name).write_text("x")
    if engine == "fsdp-sharded":
        engine_state = [f"{FSDP_MODEL_NAME}_0", f"{OPTIMIZER_NAME}_0"]  # folders of per-rank shards
        (path / "scheduler.pt").write_text("s")
    else:  # DeepSpeed: its engine checkpoint, no optimizer file of the Trainer's
        engine_state = [f"global_step{step}"]
        (path / "latest").write_text(f"global_step{step}")
        (path / "zero_to_fp32.py").write_text("# recovers fp32 weights")
    for folder in engine_state:
        (path / folder).mkdir()
        (path / folder / "__0_0.distcp").write_text("shard")
    (path / "trainer_state.json").write_text(json.dumps({"epoch": float(epoch)}))
    return path


@pytest.mark.parametrize("engine", ["fsdp-sharded", "deepspeed"])
def test_prune_knows_the_state_sharded_engines_resume_from(tmp_path, engine):
    pytest.importorskip("accelerate")
    for epoch in (1, 2):
        _engine_checkpoint(tmp_path, 4 * epoch, epoch, engine)
    prune_checkpoints(tmp_path, kept_epochs={1, 2})
    assert last_resumable(tmp_path).step == 8  # the newest keeps its engine's state
    # a kept older epoch keeps the loadable model alone: engine folders and files go
    assert sorted(p.name for p in (tmp_path / "checkpoint-4").iterdir()) == [
        "config.json", "model.safetensors", "trainer_state.json"]
    prune_checkpoints(tmp_path, kept_epochs={1, 2}, keep_resume_state=False)
    assert last_resumable(tmp_path) is None
    assert sorted(p.name for p in (tmp_path / "checkpoint-8").iterdir()) == [
        "config.json", "model.safetensors", "trainer_state.json"]


def test_a_kept_checkpoint_without_a_loadable_model_is_refused_naming_the_setting(tmp_path):
    path = _fake_checkpoint(tmp_path, 4, 1)
    (path / "config.json").write_text("{}")
    check_loadable_model(path)
    assert [e["name"] for e in checkpoint_entries(tmp_path, {1}, ProbeConfig())] == ["epoch-1"]
    (path / "model.safetensors").unlink()  # what a sharded save leaves (FSDP without FULL_STATE_DICT)
    (path / "pytorch_model_fsdp_0").mkdir()
    with pytest.raises(CheckpointWithoutModel, match=r"checkpoint-4 holds no model.*fsdp_state_dict_type: "
                                                     r"FULL_STATE_DICT.*stage3_gather_16bit_weights_on_model_save"):
        checkpoint_entries(tmp_path, {1}, ProbeConfig())
    assert checkpoint_entries(tmp_path, {2}, ProbeConfig()) == []  # an epoch not kept is not read


def test_prune_never_follows_a_checkpoint_link_out_of_the_output_folder(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    target = _fake_checkpoint(outside, 3, 1)
    run = tmp_path / "run"
    run.mkdir()
    _fake_checkpoint(run, 4, 1)
    (run / "checkpoint-3").symlink_to(target, target_is_directory=True)
    prune_checkpoints(run, kept_epochs=set(), keep_resume_state=False)
    assert (target / "model.safetensors").exists() and (target / "optimizer.pt").exists()
    assert (run / "checkpoint-3").is_symlink()
    assert [c.path.name for c in list_checkpoints(run)] == []
