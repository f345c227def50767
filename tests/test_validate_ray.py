"""``executor: ray``: the smoke protocol's units as Ray tasks give the process pool's figures to
the last digit, and a run killed mid-unit leaves no Ray process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, live_processes_tagged, tagged_processes_after
from tests.test_kill_e2e import kill_and_check, wait_for

pytestmark = pytest.mark.slow  # two runs of a smaller smoke protocol side by side: ~5 min here

SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"
#: what differs between two runs of one protocol: the time and memory they took, and how they were placed
#: where and how long a unit ran, not what it computed; ``cpu_kernels`` is recorded only for a unit
#: started on this machine (a Ray task runs where Ray places it, whose kernels the driver cannot tell)
PLACEMENT_KEYS = {"wall_time_s", "unit_wall_time_s", "probe_wall_time_s", "peak_memory_gib", "source", "executor",
                  "cpu_kernels"}


def smoke_config(tmp_path: Path, executor: str) -> Path:
    """The smoke protocol with its two oracle contexts, its probe (and the probe's passes) and two
    arms x two seeds: every kind of unit, in less time than the whole smoke arm list."""
    raw = yaml.safe_load(SMOKE.read_text())
    raw["training"] |= {"arms": ["uniform", "trajval"], "sampling": ["standard"]}
    raw["probe"] |= {"other_model": None, "adaptive_late": False, "stability_epochs": []}
    raw["executor"] = executor
    path = tmp_path / f"smoke_{executor}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def start_validate(config: Path, out: Path, log: Path, tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "tools" / "validate.py"), "--config", str(config),
                             "--out", str(out)], cwd=REPO, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env={**os.environ, "TRAJVAL_TEST_TAG": tag})


def figures(value):
    """``results.json`` without what :data:`PLACEMENT_KEYS` name."""
    if isinstance(value, dict):
        return {k: figures(v) for k, v in value.items() if k not in PLACEMENT_KEYS}
    if isinstance(value, list):
        return [figures(v) for v in value]
    return value


def test_ray_tasks_give_the_process_pools_figures_and_leave_no_process(tmp_path):
    tags = {executor: uuid.uuid4().hex for executor in ("process", "ray")}
    runs = {executor: start_validate(smoke_config(tmp_path, executor), tmp_path / executor,
                                     tmp_path / f"{executor}.log", tag) for executor, tag in tags.items()}
    for executor, process in runs.items():
        assert process.wait(timeout=1800) == 0, (tmp_path / f"{executor}.log").read_text()[-4000:]
    assert "Started a local Ray instance" in (tmp_path / "ray.log").read_text()
    assert "as Ray tasks (a local Ray)" in (tmp_path / "ray.log").read_text()
    left = tagged_processes_after(tags["ray"], 30)  # the local Ray, its workers and their fork servers
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes outlived the run on Ray: {left}"
    process, ray = (json.loads((tmp_path / executor / "results.json").read_text()) for executor in runs)
    assert ray["protocol"]["config"]["executor"] == "ray"
    assert set(process["training"]) == {"uniform", "trajval"} and process["training"]["trajval"]["auc"] is not None
    units = {executor: record["protocol"]["units"]["probe"] for executor, record in (("process", process), ("ray", ray))}
    assert "cpu_kernels" in units["process"] and "cpu_kernels" not in units["ray"]
    assert figures(ray) == figures(process)


def test_a_killed_run_on_a_local_ray_leaves_no_process(tmp_path):
    """kill -9 of ``trajval validate`` while Ray tasks run units: its guardian ends the local Ray
    (its descendants), whose workers' fork servers and units go with them."""
    tag = uuid.uuid4().hex
    log, out = tmp_path / "validate.log", tmp_path / "run"
    process = start_validate(smoke_config(tmp_path, "ray"), out, log, tag)
    try:
        wait_for(lambda: "oracle/context-a: started" in log.read_text() and any(out.glob("oracle/context-a/*")),
                 process, log)
        assert len(live_processes_tagged(tag)) >= 6  # validate, its guardian, Ray's daemons, a worker, a unit
        kill_and_check(process, signal.SIGKILL, tag, lambda: sum(1 for _ in out.rglob("*")))
    finally:
        if process.poll() is None:
            process.kill()
