"""Every probe/GRPO setting is declared once (ProbeConfig: type, default, bounds, help); the probe
trainer's parameters and docstring, the protocol's GRPO settings, grpo_run and docs/probe.md
derive from that declaration."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from tests.conftest import REPO
from trajval_ops import settings
from trajval_ops.experiment.validation_config import ConfigError, GrpoSettings, load_config
from trajval_ops.probe.config import EXECUTION_SETTINGS, ProbeConfig
from trajval_ops.probe.probe_set import ProbeSetSettings

DOCS_BEGIN = "<!-- settings table: generated from ProbeConfig (tests/test_probe_settings.py) -->"
DOCS_END = "<!-- end of settings table -->"


def _canonical(hint) -> str:
    """A type annotation with List/list/tuple[...] and Optional spellings made comparable."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        return "|".join(sorted(_canonical(arg) for arg in typing.get_args(hint)))
    if origin in (list, tuple):
        return f"seq[{_canonical(typing.get_args(hint)[0])}]"
    if hint is type(None):
        return "None"
    return getattr(origin or hint, "__name__", str(hint))


def test_every_setting_is_declared_with_type_default_and_help():
    hints = typing.get_type_hints(ProbeConfig)
    for field in dataclasses.fields(ProbeConfig):
        assert field.metadata.get("help"), f"{field.name} has no help"
        assert field.name in hints
    assert EXECUTION_SETTINGS == ("num_processes", "distributed_config")


def test_the_operator_takes_each_setting_with_its_declared_default_and_type():
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer

    parameters = inspect.signature(TrajvalProbeTrainer.__init__).parameters
    config_hints = typing.get_type_hints(ProbeConfig)
    for field in dataclasses.fields(ProbeConfig):
        assert field.name in parameters, field.name
        assert parameters[field.name].default == settings.default_of(field), field.name
        operator_type = _canonical(parameters[field.name].annotation)
        config_type = _canonical(config_hints[field.name])
        assert operator_type == config_type, (field.name, operator_type, config_type)


def test_the_operator_docstring_lines_come_from_the_declaration():
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer

    doc = TrajvalProbeTrainer.__init__.__doc__
    for field in dataclasses.fields(ProbeConfig):
        assert f":param {field.name}: {settings.help_text(field)}" in doc, field.name
    assert ":param epochs: GRPO epochs over P (the paper's T = 20). In [1, inf)." in doc


@pytest.mark.parametrize("values, message", [
    ({"epochs": True}, "epochs must be an integer, got bool True"),
    ({"learning_rate": "1e-6"}, "learning_rate must be a number, got str '1e-6'"),
    ({"keep_epochs": [1, "2"]}, "keep_epochs must be a list of integers, got '2' in it"),
    ({"gradient_checkpointing": 1}, "gradient_checkpointing must be true or false or null, got int 1"),
    ({"vllm_mode": "remote"}, "vllm_mode must be one of 'colocate', 'server', got 'remote'"),
])
def test_values_the_declared_types_forbid_are_refused_naming_the_setting(values, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ProbeConfig(**values)


def test_the_protocols_grpo_settings_are_probe_settings_with_the_regimes_defaults():
    probe_fields = {f.name: f for f in dataclasses.fields(ProbeConfig)}
    for field in dataclasses.fields(GrpoSettings):
        assert field.name in probe_fields
        assert field.metadata == probe_fields[field.name].metadata, field.name
    assert GrpoSettings().learning_rate == 3e-4 and ProbeConfig().learning_rate == 1e-6
    with pytest.raises(ValueError, match="num_generations must be in"):
        GrpoSettings(num_generations=1)


def test_the_protocols_probe_run_settings_are_probe_settings(tmp_path):
    """The probe unit's epochs and window_k are ProbeConfig's declarations (bounds, help), and a
    window longer than the run is an error before anything trains, as the operator makes it."""
    import yaml

    from trajval_ops.experiment.validation_config import ProbeSettings

    probe_fields = {f.name: f for f in dataclasses.fields(ProbeConfig)}
    for name in ("epochs", "window_k"):
        field = next(f for f in dataclasses.fields(ProbeSettings) if f.name == name)
        assert field.metadata == probe_fields[name].metadata, name
    raw = yaml.safe_load((REPO / "recipes" / "validation" / "smoke.yaml").read_text())
    for values, message in (({"epochs": 0}, r"probe: epochs must be in \[1, inf\), got 0"),
                            ({"epochs": 2, "window_k": 3}, r"probe.window_k \(3\) must not exceed probe.epochs")):
        raw["probe"].update(values)
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_a_bad_grpo_setting_in_a_validation_config_names_section_and_setting(tmp_path):
    import yaml

    raw = yaml.safe_load((REPO / "recipes" / "validation" / "smoke.yaml").read_text())
    raw["grpo"]["prompts_per_batch"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"grpo: prompts_per_batch must be in \[1, inf\), got 0"):
        load_config(path)


def test_grpo_runs_and_the_probe_recipe_take_the_grpo_settings_whole(tmp_path):
    from trajval_ops.experiment.protocol import _base_spec, probe_recipe

    config = load_config(REPO / "recipes" / "validation" / "smoke.yaml")
    spec = _base_spec(config, tmp_path / "unit", tmp_path / "pool.jsonl", seed=0)
    ProbeConfig(**spec["grpo"])  # the spec's GRPO settings are ProbeConfig settings as they are
    probe = probe_recipe(config, tmp_path)["process"][0]["trajval_probe_trainer"]
    assert {k: probe[k] for k in spec["grpo"]} == dataclasses.asdict(config.grpo)


@pytest.mark.parametrize("declaration", [ProbeConfig, ProbeSetSettings])
def test_docs_list_the_settings_as_declared(declaration):
    text = (REPO / "docs" / "probe.md").read_text()
    begin = DOCS_BEGIN.replace("ProbeConfig", declaration.__name__)
    assert begin in text and DOCS_END in text, f"docs/probe.md lost its settings table of {declaration.__name__}"
    block = text.split(begin)[1].split(DOCS_END)[0].strip()
    assert block == settings.markdown_table(declaration), (
        f"docs/probe.md's settings table differs from {declaration.__name__}; regenerate it with "
        f"python -c 'from trajval_ops import settings; from {declaration.__module__} import {declaration.__name__}; "
        f"print(settings.markdown_table({declaration.__name__}))'")


def test_probe_generation_is_a_setting_and_a_gpu_without_vllm_uses_transformers(monkeypatch, gpu_of_capability):
    """Issue 37, item 2: ``generation: auto | vllm | transformers``. A GPU without vLLM trains with
    TRL's transformers generation (it failed inside TRL), the reason said; ``vllm`` without vLLM,
    or on CPU, is refused naming the setting before any model loads; the default stays out of the
    probe's identity, so finished probes keep their hash."""
    from trajval_ops.probe import config as probe_config
    from trajval_ops.probe.config import grpo_arguments, resolve_generation

    gpu_of_capability((9, 0))
    monkeypatch.setattr(probe_config, "vllm_importable", lambda: False)
    assert resolve_generation("auto", "cuda") == ("transformers", "generation: auto on a GPU without vLLM installed "
                                                  "(pip install vllm for faster rollouts)")
    assert not grpo_arguments(ProbeConfig(), "out", "cuda")["use_vllm"]
    assert not grpo_arguments(ProbeConfig(generation="transformers"), "out", "cuda")["use_vllm"]
    assert resolve_generation("auto", "cpu")[0] == "transformers"
    with pytest.raises(ValueError, match=r"generation: vllm, but vLLM is not installed .*\(pip install vllm"):
        ProbeConfig(generation="vllm")
    with pytest.raises(ValueError, match=r"generation: vllm runs TRL's vLLM integration, which needs a GPU"):
        ProbeConfig(generation="vllm", device="cpu")
    monkeypatch.setattr(probe_config, "vllm_importable", lambda: True)
    assert resolve_generation("auto", "cuda")[0] == "vllm" and grpo_arguments(ProbeConfig(), "out", "cuda")["use_vllm"]
    with pytest.raises(RuntimeError, match="needs a GPU, and torch sees none"):
        resolve_generation("vllm", "cpu")
    assert "generation" not in ProbeConfig().identity()
    assert ProbeConfig(generation="transformers").identity()["generation"] == "transformers"


def test_the_probe_operator_refuses_vllm_generation_without_vllm(monkeypatch, tmp_path):
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer
    from trajval_ops.probe import config as probe_config

    monkeypatch.setattr(probe_config, "vllm_importable", lambda: False)
    # built before anything runs; under dj-process a setting error is one block, exit 2
    with pytest.raises(ValueError, match="generation: vllm, but vLLM is not installed"):
        TrajvalProbeTrainer(output_dir=str(tmp_path), generation="vllm")


def test_a_non_finite_loss_or_gradient_stops_the_run_naming_step_precision_and_remedy():
    """Issue 37, item 1: the guard both the probe and trajval validate's units train with."""
    from types import SimpleNamespace

    from trajval_ops.errors import TrainingDiverged
    from trajval_ops.probe.progress import NonFiniteGuard

    guard = NonFiniteGuard("probe", "bf16", 1e-5)
    state = SimpleNamespace(global_step=3)
    guard.on_log(None, state, None, logs={"loss": 0.5, "grad_norm": 0.2, "reward": 0.1})  # finite: nothing
    with pytest.raises(TrainingDiverged, match=r"probe: step 3: grad_norm is nan \(precision bf16, learning rate "
                                               r"1e-05\); .* Remedy: precision: bf16-mixed or fp32"):
        guard.on_log(None, state, None, logs={"loss": 0.5, "grad_norm": float("nan")})
    with pytest.raises(TrainingDiverged, match="Remedy: precision: fp32, or a lower learning_rate"):
        NonFiniteGuard("probe", "bf16-mixed", 1e-5).on_log(None, state, None, logs={"grad_norm": float("nan")})
    with pytest.raises(TrainingDiverged, match="loss is inf .* Remedy: a lower learning_rate"):
        NonFiniteGuard("probe", "fp32", 1e-5).on_log(None, state, None, logs={"loss": float("inf")})


def test_finite_weights_whose_distribution_is_not_finite_stop_the_run_naming_the_learning_rate(huge_weights_model):
    """Issue 57: weights a step left finite but huge (learning_rate 1e12) passed the guard, and the
    next sampling died in torch; the guard's sampling check runs the model on the run's own prompts
    and stops the step, naming the learning rate. A sound model passes it, left in its mode."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajval_ops.errors import TrainingDiverged
    from trajval_ops.models import resolve_model
    from trajval_ops.probe.progress import NonFiniteGuard, SamplingCheck

    tokenizer = AutoTokenizer.from_pretrained(huge_weights_model)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    check = SamplingCheck(tokenizer, ["dsum 597", "add 12 30", "dsum 1", "mul 3 4", "unused"], temperature=1.0)
    assert len(check.inputs["input_ids"]) == SamplingCheck.PROMPTS
    args, state = SimpleNamespace(device="cpu"), SimpleNamespace(global_step=1)
    sound = AutoModelForCausalLM.from_pretrained(resolve_model("tiny-arith")).train()
    NonFiniteGuard("probe", "fp32", 3e-4, check).on_step_end(args, state, None, model=sound)
    assert sound.training
    huge = AutoModelForCausalLM.from_pretrained(huge_weights_model)
    with pytest.raises(TrainingDiverged, match=r"probe: step 1: the next-token distribution on 4 of the run's own "
                                               r"prompts is not finite \(logits NaN or inf\) though every weight is "
                                               r"finite \(the largest \|weight\| is .*e\+1[12]\), .*learning rate "
                                               r"1e\+12\); likely cause: the learning rate is too high; .* Remedy: "
                                               r"a lower learning_rate"):
        NonFiniteGuard("probe", "fp32", 1e12, check).on_step_end(args, state, None, model=huge)


def test_out_of_gpu_memory_in_training_names_the_levers_the_run_has_left():
    """With gradient checkpointing already on and TRL's vLLM sharing the GPU, the message leaves
    the first out and names vLLM's share."""
    from types import SimpleNamespace

    import torch

    from trajval_ops.errors import DeviceOutOfMemory
    from trajval_ops.probe.progress import training_memory

    trainer = SimpleNamespace(args=SimpleNamespace(gradient_checkpointing=True, use_vllm=True),
                              state=SimpleNamespace(global_step=6))
    with pytest.raises(DeviceOutOfMemory) as raised:
        with training_memory("grpo_run arms/uniform/seed-0", ProbeConfig(), "cuda", trainer):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
    assert str(raised.value) == (
        "grpo_run arms/uniform/seed-0: out of memory on cuda at step 7 (CUDA out of memory. Tried to allocate 1.00 "
        "GiB); lower micro_batch_size (now 16), max_completion_length (now 1024) or num_generations (now 16), or "
        "set use_lora: true (a LoRA adapter trains far fewer weights) or a lower vllm_gpu_memory_utilization (now 0.3: "
        "vLLM's share of the GPU)")
    assert isinstance(raised.value.__cause__, torch.OutOfMemoryError)  # torch's traceback kept for the log file


def test_a_changed_probe_names_only_the_settings_that_changed(tmp_path):
    """The manifest records every setting, the identity leaves out those at an unhashed default
    (generation, precision: auto): a probe with only learning_rate changed was said to differ in
    config.generation and config.precision as well."""
    import json

    from trajval_ops.probe.config import UNHASHED_DEFAULTS, ProbeConfig
    from trajval_ops.probe.run import ProbeDirectoryError, _check_same_probe

    assert {"generation", "precision"} <= set(UNHASHED_DEFAULTS)
    before, after = ProbeConfig(learning_rate=1e-5), ProbeConfig(learning_rate=2e-5)
    previous = {"config_hash": "old", "config": json.loads(json.dumps(before.to_dict())), "probe_ids": [],
                "device": "cpu", "versions": {"trl": "1"}}
    identity = {"config": after.identity(), "probe_ids": [], "device": "cpu", "trl": "1"}
    with pytest.raises(ProbeDirectoryError, match=r"differs in \['config.learning_rate'\]"):
        _check_same_probe(tmp_path, previous, identity, "new")
