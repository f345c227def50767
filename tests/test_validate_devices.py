"""Issue 37, item 3: where ``trajval validate``'s units run. ``device``, ``precision`` and
``generation`` are top-level keys of the validation config taken from the probe's declarations;
a bad device is an error before anything trains; on a GPU machine every unit sees one GPU of its
own, and each finished unit's device and wall time are recorded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO
from tests.test_validate import config_file
from trajval_ops.experiment.validation_config import ConfigError, ValidationConfig, load_config
from trajval_ops.hardware import CPU_KERNEL_SETTINGS, cpu_kernels
from trajval_ops.probe.config import ProbeConfig

SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"


def test_device_precision_and_generation_are_the_probes_declarations():
    import dataclasses

    ours = {f.name: f for f in dataclasses.fields(ValidationConfig)}
    probe = {f.name: f for f in dataclasses.fields(ProbeConfig)}
    for key in ("device", "precision", "generation"):
        assert ours[key].default == probe[key].default and ours[key].metadata == probe[key].metadata
    config = load_config(SMOKE)
    assert (config.device, config.precision, config.generation, config.workers) == ("auto", "auto", "auto", None)


@pytest.mark.parametrize("changes, message", [
    ({"device": "tpu"}, "device must be one of 'auto', 'cpu', 'cuda', got 'tpu'"),
    ({"precision": "fp16"}, "precision must be one of 'auto', 'bf16-mixed', 'bf16', 'fp32', got 'fp16'"),
    ({"generation": "vllm", "device": "cpu"}, "generation: vllm runs TRL's vLLM integration, which needs a GPU"),
    ({"workers": 0}, r"workers must be in \[1, inf\), got 0"),
])
def test_a_bad_placement_is_a_config_error(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_config(config_file(tmp_path, **changes))


def test_cuda_without_a_gpu_exits_2_before_anything_is_written(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: device: cuda is valid here")
    out = tmp_path / "run"
    command = [sys.executable, str(REPO / "tools" / "validate.py"), "--config",
               str(config_file(tmp_path, device="cuda")), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "device: cuda, but torch sees no GPU on this machine" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_workers_default_to_one_per_gpu_and_each_unit_is_pinned_to_the_least_busy():
    from trajval_ops.experiment.devices import CPU_WORKERS, GpuSlots, unit_workers

    config = load_config(SMOKE)
    assert unit_workers(config, []) == CPU_WORKERS and unit_workers(config, ["2", "5", "7"]) == 3
    slots = GpuSlots(["2", "5"])
    first, second, third = slots.take(), slots.take(), slots.take()
    assert (first, second, third) == ("2", "5", "2")
    slots.give_back("5")
    assert slots.take() == "5"
    assert GpuSlots.environment(None) == {"CUDA_VISIBLE_DEVICES": ""} and GpuSlots([]).take() is None


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    import torch

    from trajval_ops.experiment import devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,6")
    assert devices.visible_gpus("auto") == ["3", "6"] and devices.visible_gpus("cpu") == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.visible_gpus("cuda") == ["0", "1"]


def test_units_run_side_by_side_each_seeing_one_gpu_and_are_recorded(tmp_path):
    """Real child processes under ``run_units`` with two (pretend) GPUs: the two units running
    together see different single GPUs; a CPU run's children see none."""
    from trajval_ops.experiment.protocol import Unit, run_units

    def unit(name: str, seconds: float) -> Unit:
        folder = tmp_path / name
        code = (f"import os, pathlib, time; time.sleep({seconds}); p = pathlib.Path({str(folder)!r}); p.mkdir(); "
                f"(p / 'seen').write_text(os.environ['CUDA_VISIBLE_DEVICES'])")
        return Unit(name, folder, [sys.executable, "-c", code], done=lambda: (folder / "seen").is_file())

    records = tmp_path / "units.json"
    run_units([unit("a", 1.0), unit("b", 1.0), unit("c", 0.0)], 2, set(), {}, gpus=["4", "9"], records=records)
    seen = {name: (tmp_path / name / "seen").read_text() for name in "abc"}
    assert {seen["a"], seen["b"]} == {"4", "9"} and seen["c"] in ("4", "9")
    recorded = json.loads(records.read_text())
    assert {name: recorded[name]["gpu"] for name in "abc"} == seen
    assert all(recorded[name]["wall_time_s"] >= 0 for name in "abc")
    assert not any("cpu_kernels" in recorded[name] for name in "abc")  # GPU units: the CPU's kernels decide little
    run_units([unit("d", 0.0)], 1, set(), {}, records=records)
    assert (tmp_path / "d" / "seen").read_text() == ""
    # a CPU unit's figures are bit-reproducible only on the same kernels (docs/validation.md)
    assert json.loads(records.read_text())["d"]["cpu_kernels"] == cpu_kernels()


def test_a_unit_started_elsewhere_records_no_kernels_of_this_machine(tmp_path):
    """A unit ``launch`` starts (executor: ray) runs where Ray places it, on another node's CPU or
    on a GPU Ray reserves (no slot here: its ``gpu`` is None): this machine's CPU kernels were
    recorded for it as if it had run here."""
    from trajval_ops.experiment.protocol import Unit, run_units

    folder = tmp_path / "a"
    unit = Unit("a", folder, [sys.executable, "-c", f"import pathlib; pathlib.Path({str(folder)!r}).mkdir()"],
                done=folder.is_dir)
    records = tmp_path / "units.json"
    run_units([unit], 1, set(), {}, records=records, launch=lambda unit, env: subprocess.Popen(unit.command, env=env))
    recorded = json.loads(records.read_text())["a"]
    assert recorded["wall_time_s"] >= 0 and "cpu_kernels" not in recorded


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "DNNL_MAX_CPU_ISA": "AVX512_CORE"},
     {"cpu_capability": "DEFAULT", "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
      "DNNL_MAX_CPU_ISA": "AVX512_CORE"})])
def test_the_cpu_kernels_record_reads_what_torch_dispatches_on(env, expected):
    """The record names the instruction set torch's kernels use, lowered by the environment where it
    is, the settings that lowered it (each changes the float roundings, measured) and the CPU's bf16
    instructions (oneDNN's bf16 products use them)."""
    import os

    import torch

    from trajval_ops.hardware import cpu_supports_bf16

    code = "import json; from trajval_ops.hardware import cpu_kernels; print(json.dumps(cpu_kernels()))"
    clean = {k: v for k, v in os.environ.items() if k not in CPU_KERNEL_SETTINGS}
    out = subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, check=True)
    record = json.loads(out.stdout)
    assert bool(record.pop("bf16_instructions")) == cpu_supports_bf16()
    assert record == (expected or {"cpu_capability": torch.backends.cpu.get_cpu_capability()})


def test_no_unit_starts_after_the_instant_and_the_running_ones_finish(tmp_path):
    """``run_units(no_start_after=...)``: a unit started before the instant finishes; the ones not
    started are returned, and a later call runs them."""
    import time

    from trajval_ops.experiment.protocol import Unit, run_units

    def unit(name: str, seconds: float, after=()) -> Unit:
        folder = tmp_path / name
        code = f"import pathlib, time; time.sleep({seconds}); pathlib.Path({str(folder)!r}).mkdir()"
        return Unit(name, folder, [sys.executable, "-c", code], done=lambda: folder.is_dir(), after=after)

    units = [unit("a", 1.5), unit("b", 0.0, after=("a",)), unit("c", 0.0)]
    finished: set[str] = set()
    left = run_units(units, 1, finished, {}, no_start_after=time.monotonic() + 0.3)
    assert left == ["b", "c"] and finished == {"a"} and (tmp_path / "a").is_dir()
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    assert run_units(units, 1, finished, {}) == [] and finished == {"a", "b", "c"}


def test_the_specs_and_the_probe_recipe_carry_the_placement(tmp_path):
    from trajval_ops.experiment.protocol import _base_spec, probe_recipe

    config = load_config(SMOKE)
    spec = _base_spec(config, tmp_path / "unit", tmp_path / "pool.jsonl", seed=0)
    assert (spec["device"], spec["precision"], spec["generation"]) == ("auto", "auto", "auto")
    probe = probe_recipe(config, tmp_path)["process"][0]["trajval_probe_trainer"]
    assert not {"device", "precision", "generation"} & set(probe)  # at the defaults: the recipe as before
    raw = yaml.safe_load(SMOKE.read_text()) | {"device": "cpu", "precision": "bf16"}
    path = tmp_path / "placed.yaml"
    path.write_text(yaml.safe_dump(raw))
    probe = probe_recipe(load_config(path), tmp_path)["process"][0]["trajval_probe_trainer"]
    assert (probe["device"], probe["precision"]) == ("cpu", "bf16") and "generation" not in probe


def test_numerics_here_resolve_auto_per_machine(tmp_path, monkeypatch, gpu_of_capability):
    from trajval_ops.experiment.devices import numerics_here
    from trajval_ops.probe import config as probe_config

    config = load_config(SMOKE)
    assert numerics_here(config, []) == {"precision": "fp32", "generation": "transformers"}
    monkeypatch.setattr(probe_config, "vllm_importable", lambda: False)
    gpu_of_capability((9, 0))
    assert numerics_here(config, ["0"]) == {"precision": "bf16-mixed", "generation": "transformers"}
    gpu_of_capability((7, 0))
    assert numerics_here(config, ["0"]) == {"precision": "fp32", "generation": "transformers"}
    monkeypatch.setattr(probe_config, "vllm_importable", lambda: True)  # vLLM installed, but no GPU here
    with pytest.raises(ConfigError, match="generation: vllm needs a GPU, and torch sees none"):
        numerics_here(load_config(config_file(tmp_path, generation="vllm")), [])


def test_resuming_units_that_trained_with_other_numerics_exits_2_before_anything_runs(tmp_path, capsys):
    """A run moved from a GPU with bf16 to this CPU: its finished unit trained in bf16-mixed, the
    rest would train in fp32 here, and the comparison would mix them."""
    from trajval_ops.experiment.protocol import check_same_protocol, main

    out = tmp_path / "run"
    out.mkdir()
    check_same_protocol(load_config(SMOKE), out)  # the run as a GPU machine claimed it
    finished = out / "arms" / "uniform" / "seed-0"
    finished.mkdir(parents=True)
    (finished / "result.json").write_text(json.dumps({"precision": "bf16-mixed", "generation": "transformers"}))
    code = main(["--config", str(SMOKE), "--out", str(out)])
    error = capsys.readouterr().err
    assert code == 2, error
    assert ("1 unit(s) of this run trained with other numerics than this machine gives the units left "
            "(arms/uniform/seed-0: precision bf16-mixed (here fp32))") in error
    assert not (out / "data").exists()  # nothing prepared, nothing trained
    (finished / "result.json").write_text(json.dumps({"precision": "fp32", "generation": "transformers"}))
    from trajval_ops.experiment.devices import check_same_numerics, numerics_here
    from trajval_ops.experiment.protocol import trained_numerics
    from trajval_ops.experiment.results import probe_manifest_path

    here = numerics_here(load_config(SMOKE), [])
    check_same_numerics(trained_numerics(out), here)  # the same: it goes on
    # an unfinished probe that began with vLLM on a GPU; finished, it would only be read
    manifest = probe_manifest_path(out)
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"status": "running", "precision": "fp32", "generation_engine": "vllm"}))
    with pytest.raises(ConfigError, match=r"\(probe: generation vllm \(here transformers\)\)"):
        check_same_numerics(trained_numerics(out), here)
    manifest.write_text(json.dumps({"status": "complete", "precision": "fp32", "generation_engine": "vllm"}))
    check_same_numerics(trained_numerics(out), here)


def test_executor_ray_refuses_a_dashboard_address_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """issue 53, item 3: RAY_ADDRESS set for job submission (the dashboard's http address) is not
    an address the units' driver connects to: a config error naming it, exit 2."""
    from trajval_ops.experiment.protocol import main

    raw = yaml.safe_load((REPO / "recipes" / "validation" / "smoke.yaml").read_text()) | {"executor": "ray"}
    config = tmp_path / "ray.yaml"
    config.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    assert main(["--config", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "a dashboard (job submission) address" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
