"""``trajval validate --trainer verl --submit ray`` against a local Ray head started here: two
arms x two seeds of a CPU stand-in for verl's trainer (tests/verl_stand_in.py) run as Ray jobs,
``--status`` reads them, the folder holds what the verdict reads, and no Ray process is left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, live_processes_tagged, tagged_processes_after, write_jsonl
from trajval_ops.experiment.protocol import main

pytestmark = pytest.mark.slow  # a Ray head (20 s here) and four jobs

pytest.importorskip("ray.job_submission")
STAND_IN = REPO / "tests" / "verl_stand_in.py"
WEIGHTS = [0.05 + (i % 4) / 4 for i in range(24)]
STEPS, EVERY = 6, 2


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_head(tag: str, log: Path) -> tuple[subprocess.Popen, str]:
    """``ray start --head --block`` on free ports, its own temp folder, token auth off (a token file
    in this user's home would otherwise turn it on), everything it starts tagged; returns the
    process and the dashboard address once job submission answers."""
    from ray.job_submission import JobSubmissionClient

    ports = free_ports(9)
    names = ("port", "dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "node-manager-port", "object-manager-port", "ray-client-server-port", "runtime-env-agent-port",
             "metrics-export-port")
    command = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--num-cpus=2",
               "--include-dashboard=true", "--dashboard-host=127.0.0.1", "--disable-usage-stats",
               f"--temp-dir=/tmp/trj{tag[:8]}", *(f"--{name}={port}" for name, port in zip(names, ports))]
    head = subprocess.Popen(command, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "TRAJVAL_TEST_TAG": tag, "RAY_AUTH_MODE": "disabled"})
    address = f"http://127.0.0.1:{ports[1]}"
    deadline = time.monotonic() + 180
    while True:
        try:
            JobSubmissionClient(address)
            return head, address
        except Exception:  # not up yet
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(1)


def _regime(tmp_path: Path) -> tuple[Path, Path, Path]:
    rows = lambda split, n, **extra: [  # noqa: E731
        {"id": f"{split}{i}", "data_source": "math_dapo", "prompt": [{"role": "user", "content": f"{split}: {i} + 1"}],
         "reward_model": {"ground_truth": str(i + 1)}, **{k: v[i] for k, v in extra.items()}} for i in range(n)]
    pool = write_jsonl(tmp_path / "pool.jsonl", rows("p", len(WEIGHTS)))
    weighted = write_jsonl(tmp_path / "weighted.jsonl", rows("p", len(WEIGHTS), trajval_weight=WEIGHTS))
    heldout = write_jsonl(tmp_path / "heldout.jsonl", rows("h", 8))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"name": "ray-arms", "model": "tiny-arith", "verifier": "math",
                                      "data": {"pool": str(pool), "heldout": str(heldout)},
                                      "evaluation": {"min_heldout": 8},
                                      "training": {"seeds": [0, 1], "arms": ["uniform", "trajval"]}}))
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f"{sys.executable} {STAND_IN} data.train_batch_size=8 actor_rollout_ref.rollout.n=2 "
                      f"trainer.total_training_steps={STEPS} trainer.test_freq={EVERY} trainer.n_gpus_per_node=1\n")
    return config, recipe, weighted


def test_submit_ray_runs_the_arms_as_jobs_that_status_and_the_verdict_read(tmp_path, monkeypatch, capsys):
    tag = uuid.uuid4().hex
    config, recipe, weighted = _regime(tmp_path)
    out = tmp_path / "runs"
    head, address = start_head(tag, tmp_path / "head.log")
    try:
        monkeypatch.setenv("RAY_ADDRESS", address)
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        assert main(["--config", str(config), "--trainer", "verl", "--recipe", str(recipe), "--out", str(out),
                     "--pool", f"trajval={weighted}", "--submit", "ray"]) == 0
        assert "submitted 4 job(s) to Ray" in capsys.readouterr().out
        record = json.loads((out / "runs.json").read_text())
        assert record["ray_address"] == address and all(run["job_id"] for run in record["runs"])
        deadline = time.monotonic() + 600
        while True:
            assert main(["--status", "--out", str(out)]) == 0
            table = capsys.readouterr().out
            if table.endswith("4 of 4 run(s) finished\n") or time.monotonic() > deadline:
                break
            time.sleep(2)
        record = json.loads((out / "runs.json").read_text())
        assert [run["state"] for run in record["runs"]] == ["SUCCEEDED"] * 4, table
        for line in table.splitlines()[1:5]:
            assert line.split()[-2:] == ["SUCCEEDED", str(STEPS)]
        # a second --submit submits nothing: every run has its job
        assert main(["--config", str(config), "--trainer", "verl", "--recipe", str(recipe), "--out", str(out),
                     "--pool", f"trajval={weighted}", "--submit", "ray"]) == 0
        assert "submitted 0 job(s)" in capsys.readouterr().out
        # a job the cluster does not know (restarted since, or another cluster): said, not a traceback
        forgotten = json.loads((out / "runs.json").read_text())
        forgotten["runs"][0]["job_id"] = "raysubmit_forgotten"
        (out / "runs.json").write_text(json.dumps(forgotten))
        assert main(["--status", "--out", str(out)]) == 0
        table = capsys.readouterr().out
        assert table.splitlines()[1].split()[-2:] == ["UNKNOWN", str(STEPS)]
        assert "Job raysubmit_forgotten does not exist" in table and "3 of 4 run(s) finished" in table
    finally:
        head.send_signal(signal.SIGTERM)  # ray start --block stops what it started
        head.wait(timeout=120)
        shutil.rmtree(f"/tmp/trj{tag[:8]}", ignore_errors=True)  # the head's own temp folder (sessions, logs)
    left = tagged_processes_after(tag, 30)
    for pid in left:  # do not leave them running for the next tests
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Ray processes outlived the head: {left}"

    # what the verdict reads: each run's arm, seed and verl-format log, named by the manifest
    for run in record["runs"]:
        assert run["log_format"] == "verl" and run["trainer"] == "verl"
        lines = [json.loads(line) for line in (out / run["log"]).read_text().splitlines()]
        assert [line["step"] for line in lines] == list(range(0, STEPS + 1, EVERY))
        weighted_run = run["arm"] == "trajval"
        for line in lines:
            assert line["data"]["val-core/math_dapo/acc/mean@1"] == pytest.approx(
                0.2 + 0.04 * line["step"] * (1.25 if weighted_run else 1.0) + 0.005 * run["seed"])
            expected = pytest.approx(sum(WEIGHTS) / len(WEIGHTS)) if weighted_run else None
            assert line["data"]["stand_in/weight_mean"] == expected  # the prior arm read its weight column
    assert {(run["arm"], run["seed"]) for run in record["runs"]} == {(a, s) for a in ("uniform", "trajval")
                                                                     for s in (0, 1)}
    assert not live_processes_tagged(tag)
