"""tools/bench/bench_gpu.py (issue 37, item 5): its CPU parts run on CPU in the slow suite, so
the GPU check cannot rot where there is no GPU; the GPU run itself is marked ``gpu``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

BENCH = REPO / "tools" / "bench" / "bench_gpu.py"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_cuda_without_a_gpu_is_refused_with_the_way_out(tmp_path):
    if _cuda():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(BENCH), "--out", str(tmp_path / "b.json")], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2 and "torch sees no GPU; run with --device cpu" in done.stderr
    assert not (tmp_path / "b.json").exists()


def _check_report(report: dict, device: str) -> None:
    parts = report["parts"]
    assert not [name for name, part in parts.items() if "error" in part], parts
    assert parts["probe/transformers"]["generation"] == "transformers" and parts["probe/transformers"]["steps"] >= 4
    assert parts["probe/transformers"]["device"] == device
    assert "skipped" in parts["probe/vllm"] or parts["probe/vllm"]["generation"] == "vllm"
    assert parts["endpoint"]["bare"]["completions_per_s"] > 0 and parts["endpoint/cpu_reference"]["threads"] >= 1
    agreement = report["ratios"]["family_agreement"]
    assert len(agreement) == 12  # every family of the demo pool, both passes
    # two passes with different sampling seeds of the same model: within noise
    assert max(abs(f["difference_in_se"]) for f in agreement.values()) < 4
    shapes = [part for name, part in parts.items() if name.startswith("shape/")]
    assert shapes and all(s["engine"]["tokens_per_s"] > 0 and s["bare"]["tokens_per_s"] > 0
                          and s["probe"]["step_s"] > 0 and s["probe"]["peak_memory_gib"] > 0 for s in shapes)
    unit = parts["validate_unit"]
    assert unit["device"].startswith(device) and unit["peak_memory_gib"] > 0
    _check_smollm2(parts, device)


def _check_smollm2(parts: dict, device: str) -> None:
    """SmolLM2's probe per precision, where it ran: every step logged with its wall time, or
    the guard's stop (bf16 on a GPU may)."""
    from trajval_ops.probe.config import resolve_precision

    for name, part in parts.items():
        if not name.startswith("smollm2/"):
            continue
        resolved = resolve_precision(name.split("/")[1], device)
        if "skipped" in part:
            assert "SmolLM2-135M-Instruct is neither built nor buildable" in part["skipped"]
            continue
        assert part["finite"] == (part["stopped"] is None)
        if part["finite"]:
            assert part["precision"] == resolved and len(part["per_step"]) == part["steps"]
            assert all(step.get("step_s", 1) > 0 for step in part["per_step"])
        else:
            assert f"precision {resolved}" in part["stopped"] and "Remedy" in part["stopped"]


@pytest.mark.slow
def test_the_cpu_parts_run_on_cpu(tmp_path):
    """About 3 minutes on 2 busy cores (each part is its own process)."""
    out = tmp_path / "bench_gpu.json"
    done = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--quick", "--out", str(out),
                           "--parts", "probe", "smollm2", "endpoint", "shape", "validate_unit"],
                          capture_output=True, text=True, cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["parts"]["probe/vllm"]["skipped"].startswith("TRL's vLLM integration")
    assert {"smollm2/auto", "smollm2/bf16"} <= set(report["parts"])
    _check_report(report, "cpu")
    assert "bench_gpu:" in done.stdout and "standard errors over 12 families" in done.stdout


@pytest.mark.gpu
@pytest.mark.slow
def test_the_gpu_check_on_a_gpu(tmp_path):
    if not _cuda():
        pytest.skip("needs a CUDA GPU: torch sees none here")
    out = tmp_path / "bench_gpu.json"
    done = subprocess.run([sys.executable, str(BENCH), "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _check_report(json.loads(out.read_text()), "cuda")


H200_RUN = REPO / "docs" / "results" / "gpu" / "h200-2026-11-26"


def test_the_published_h200_figures_pass_the_checks_a_gpu_run_must(gpu_of_capability):
    """The figures docs/results/gpu/index.md and the README quote are the bench's own JSON from the device, and pass
    what the ``gpu`` test asks of a run; the default parts' own wall times fit the 5 minutes."""
    gpu_of_capability((9, 0))  # the H200's: what the probe resolved its precisions on
    report = json.loads((H200_RUN / "bench_gpu.json").read_text())
    assert report["machine"] == "NVIDIA H200" and report["device"] == "cuda" and not report["quick"]
    _check_report(report, "cuda")
    default = [part for name, part in report["parts"].items() if not name.startswith("smollm2/")]
    assert sum(part.get("part_wall_s", 0) for part in default) < 300
    study = json.loads((H200_RUN / "bench_gpu_smollm2_128.json").read_text())
    assert set(study["parts"]) == {"smollm2/fp32", "smollm2/bf16-mixed"}
    _check_smollm2(study["parts"], "cuda")
