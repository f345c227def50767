"""A killed ``dj-process`` leaves nothing running: kill -9 (or SIGTERM) mid-run, then no process
it started lives 10 s later and nothing keeps writing (rollout cache, checkpoints).

Every process the run starts inherits ``TRAJVAL_TEST_TAG`` from its environment, however deep,
so the check finds map workers, engine children, trainer children, resource trackers, verifier
children and Ray's daemons alike.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, arithmetic_rows, live_processes_tagged, tagged_processes_after, vllm_importable, write_jsonl

pytestmark = pytest.mark.slow

VLLM_OK, VLLM_WHY = vllm_importable()


def start_dj_process(recipe: dict, tmp_path: Path, tag: str) -> subprocess.Popen:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    from trajval_ops.commands import dj_process_path

    dj = dj_process_path()
    log = open(tmp_path / "dj.log", "w")
    return subprocess.Popen([str(dj), "--config", str(path)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "TRAJVAL_TEST_TAG": tag})


def wait_for(condition, process: subprocess.Popen, log: Path, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"dj-process ended (rc {process.returncode}) before the kill point:\n"
                        f"{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"the kill point was not reached in {seconds} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def cache_records(cache: Path) -> int:
    return sum(f.read_bytes().count(b"\n") for f in cache.rglob("results-*.jsonl"))


def files_under(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*")) if folder.exists() else 0


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def kill_and_check(process: subprocess.Popen, sig: int, tag: str, progress) -> None:
    """Send ``sig`` to dj-process; then no tagged process may live 10 s later and ``progress()``
    may not move any more."""
    os.kill(process.pid, sig)
    process.wait(timeout=60)
    survivors = tagged_processes_after(tag, 10)
    if survivors:
        detail = [(pid, command_line(pid)) for pid in survivors]
        for pid in survivors:  # do not leave them running for the next tests
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pytest.fail(f"processes outlived the killed run: {detail}")
    before = progress()
    time.sleep(3)
    assert progress() == before, "something kept writing after every process was gone"


def endpoint_recipe(tmp_path: Path, engine: str, **top) -> dict:
    pool = write_jsonl(tmp_path / "pool.jsonl", arithmetic_rows(3000))
    step = {"model": "tiny-random-llama", "output_key": "trajval_r_early", "engine": engine, "n": 4,
            "max_new_tokens": 32, "seed": 0, "verifier": "math", "verifier_options": {"fallback_last_number": True},
            "cache_dir": str(tmp_path / "rollout_cache")}
    if engine == "vllm":
        step.update(enforce_eager=True, max_model_len=512, kv_cache_space_gb=1)
    return {"project_name": "kill_e2e", "dataset_path": str(pool), "export_path": str(tmp_path / "out.jsonl"),
            "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
            "process": [{"trajval_endpoint_reward_mapper": step}], **top}


ENDPOINT_CASES = [
    pytest.param("transformers", signal.SIGKILL, {}, id="transformers-default-kill9"),
    pytest.param("transformers", signal.SIGTERM, {}, id="transformers-default-term"),
    pytest.param("transformers", signal.SIGKILL, {"np": 2}, id="transformers-np2-kill9"),
    pytest.param("transformers", signal.SIGKILL, {"executor_type": "ray", "ray_address": "local"},
                 id="transformers-ray-kill9"),
    pytest.param("vllm", signal.SIGKILL, {}, id="vllm-default-kill9",
                 marks=pytest.mark.skipif(not VLLM_OK, reason=VLLM_WHY)),
]


@pytest.mark.parametrize("engine, sig, top", ENDPOINT_CASES)
def test_killed_endpoint_run_leaves_no_process(tmp_path, engine, sig, top):
    tag = uuid.uuid4().hex
    recipe = endpoint_recipe(tmp_path, engine, **top)
    cache = tmp_path / "rollout_cache"
    process = start_dj_process(recipe, tmp_path, tag)
    try:
        wait_for(lambda: cache_records(cache) >= 2, process, tmp_path / "dj.log")
        kill_and_check(process, sig, tag, lambda: cache_records(cache))
    finally:
        if process.poll() is None:
            process.kill()


def test_killed_probe_run_leaves_no_process(tmp_path):
    tag = uuid.uuid4().hex
    pool = write_jsonl(tmp_path / "pool.jsonl", arithmetic_rows(64))
    probe_dir = tmp_path / "probe"
    recipe = {
        "project_name": "kill_probe", "dataset_path": str(pool), "export_path": str(tmp_path / "out.jsonl"),
        "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_probe_trainer": {
            "output_dir": str(probe_dir), "model": "tiny-random-llama", "probe_size": 32, "seed": 1,
            "epochs": 50, "prompts_per_batch": 2, "num_generations": 2, "micro_batch_size": 4,
            "max_completion_length": 8, "verifier": "math", "verifier_options": {"fallback_last_number": True},
            "show_progress": False}}],
    }
    process = start_dj_process(recipe, tmp_path, tag)
    try:
        # mid-training: a checkpoint exists and the training child is still running
        wait_for(lambda: any(probe_dir.rglob("checkpoint-*")), process, tmp_path / "dj.log")
        assert len(live_processes_tagged(tag)) >= 3  # dj-process, its guardian, the training child
        kill_and_check(process, signal.SIGKILL, tag, lambda: files_under(probe_dir))
    finally:
        if process.poll() is None:
            process.kill()


def test_killed_validate_run_leaves_no_process(tmp_path):
    """``trajval validate`` on CPU: its training units are forks of a fork server, grandchildren
    of the run; a kill -9 of the run mid-unit ends them, the server and the probe alike."""
    from trajval_ops.lifetime import GUARD_REPORT_ENV

    tag = uuid.uuid4().hex
    out = tmp_path / "run"
    log, guarded = tmp_path / "validate.log", tmp_path / "guarded.txt"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, str(REPO / "tools" / "validate.py"), "--config",
                                    str(REPO / "recipes" / "validation" / "smoke.yaml"), "--out", str(out)],
                                   cwd=REPO, stdout=output, stderr=subprocess.STDOUT,
                                   env={**os.environ, "TRAJVAL_TEST_TAG": tag, GUARD_REPORT_ENV: str(guarded)})

    def seen_by_the_guardian() -> bool:  # it looks every half second; the probe has no watch of its own
        report = set(map(int, guarded.read_text().split())) if guarded.is_file() else set()
        below = {pid for pid in live_processes_tagged(tag)
                 if pid != process.pid and f"trajval_ops.lifetime {process.pid} " not in command_line(pid)}
        return below <= report

    try:
        # the probe (dj-process) and a forked arm running side by side
        wait_for(lambda: "arms/uniform/seed-0: started" in log.read_text() and seen_by_the_guardian(), process, log)
        assert len(live_processes_tagged(tag)) >= 5  # validate, its guardian, the fork server, a unit, the probe
        kill_and_check(process, signal.SIGKILL, tag, lambda: files_under(out))
    finally:
        if process.poll() is None:
            process.kill()
