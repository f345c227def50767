"""How ``trajval validate`` starts a unit's process (:mod:`trajval_ops.experiment.unit_process`):
on CPU a unit with a Python entry forks from one process that imported the training stack once;
on a GPU it is a fresh interpreter; either way it gets the environment, working folder, log and
exit code a fresh process gets, and no unit outlives a run that stops on an error.

The first forked unit in this process starts the fork server, which imports torch, transformers
and TRL (about 10 s here, once)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")  # the training stack the fork server imports

from tests.conftest import REPO  # noqa: E402
from trajval_ops.experiment.protocol import Unit, run_units  # noqa: E402
from trajval_ops.experiment.unit_process import TRAINING_STACK, python_command  # noqa: E402
from trajval_ops.lifetime import process_info  # noqa: E402


def entry_unit(tmp_path: Path, name: str, exit_code: str = "0", sleep_s: float = 0.0) -> Unit:
    folder = tmp_path / name
    record = tmp_path / f"{name}.json"
    entry = ("tests.unit_entry", (str(record), exit_code, str(sleep_s)))
    return Unit(name, folder, python_command(*entry), done=record.is_file, entry=entry)


def seen(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / f"{name}.json").read_text())


def test_cpu_units_with_an_entry_fork_from_one_preloaded_process(tmp_path):
    run_units([entry_unit(tmp_path, "a"), entry_unit(tmp_path, "b")], 2, set(), {})
    a, b = seen(tmp_path, "a"), seen(tmp_path, "b")
    assert a["parent"] != os.getpid() and a["parent"] == b["parent"] and a["pid"] != b["pid"]  # the fork server's
    assert all(a["preloaded"].values()), a["preloaded"]  # the training stack was imported before main ran
    assert a["env"] == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    assert a["argv"] == ["tests.unit_entry", str(tmp_path / "a.json"), "0", "0.0"] and a["cwd"] == str(REPO)
    log = (tmp_path / "a.log").read_text()
    assert "unit_entry: to stdout" in log and "unit_entry: to stderr" in log


def test_a_unit_on_a_gpu_is_a_fresh_interpreter(tmp_path):
    run_units([entry_unit(tmp_path, "a")], 1, set(), {}, gpus=["4"])
    a = seen(tmp_path, "a")
    assert a["parent"] == os.getpid() and not a["preloaded"]["torch"]
    assert a["parent"] == os.getpid()  # the command itself, not a wrapper around it
    assert a["env"] == {"CUDA_VISIBLE_DEVICES": "4", "OMP_NUM_THREADS": "1"}
    assert "unit_entry: to stderr" in (tmp_path / "a.log").read_text()


@pytest.mark.parametrize("exit_code, expected", [
    ("3", r"exit 3\)"), ("raise", r"exit 1\)[\s\S]*ValueError: unit_entry")])
def test_a_forked_units_exit_code_and_log_reach_the_error(tmp_path, exit_code, expected):
    with pytest.raises(RuntimeError, match=r"validation unit a failed \(" + expected):
        run_units([entry_unit(tmp_path, "a", exit_code=exit_code)], 1, set(), {})


def alive(pid: int) -> bool:
    return process_info(pid) is not None


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


@pytest.mark.parametrize("stop", ["a unit fails", "work after a unit fails"])
def test_a_run_stopped_by_an_error_leaves_no_unit_running(tmp_path, stop):
    slow = entry_unit(tmp_path, "slow", sleep_s=120)
    quick = entry_unit(tmp_path, "quick", exit_code="3" if stop == "a unit fails" else "0", sleep_s=1.0)

    def fail():
        raise OSError("the priors could not be written")

    with pytest.raises((RuntimeError, OSError)):
        run_units([slow, quick], 2, set(), {} if stop == "a unit fails" else {"quick": fail})
    assert wait_gone(seen(tmp_path, "slow")["pid"])


#: A stand-in for ``trajval validate``: starts one fresh unit that sleeps, says its pid, sleeps.
RUN_WITH_A_FRESH_UNIT = """
import os, sys, time
from pathlib import Path
from trajval_ops.experiment.unit_process import environment, start
unit = start([sys.executable, "-c", "import time; time.sleep(120)"], None, environment(), Path(sys.argv[1]),
             Path.cwd(), fork=False)
print(unit.pid, flush=True)
time.sleep(120)
"""


def test_a_fresh_unit_dies_with_the_run_that_started_it(tmp_path):
    """The run is SIGKILLed right after the unit started: nobody cleans up, the kernel does (no
    guardian runs here; in ``trajval validate`` it sees a new unit only after up to 0.5 s)."""
    import subprocess

    run = subprocess.Popen([sys.executable, "-c", RUN_WITH_A_FRESH_UNIT, str(tmp_path / "unit.log")],
                           stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        unit_pid = int(run.stdout.readline())
        assert alive(unit_pid)
    finally:
        run.kill()
        run.wait()
    assert wait_gone(unit_pid)


def test_a_fresh_unit_whose_run_is_already_gone_never_starts(tmp_path):
    """The run died between starting the unit and the unit's request to die with it (the unit's
    parent is then another process than the one named)."""
    import subprocess

    marker = tmp_path / "ran"
    done = subprocess.run([sys.executable, "-m", "trajval_ops.experiment.unit_process", "1", "touch", str(marker)],
                          cwd=REPO)
    assert done.returncode == 1 and not marker.exists()
    subprocess.run([sys.executable, "-m", "trajval_ops.experiment.unit_process", str(os.getpid()), "touch",
                    str(marker)], cwd=REPO, check=True)
    assert marker.exists()  # named rightly, the command runs


def test_the_training_stack_names_importable_modules():
    """The fork server skips a module it cannot import without a word: a misspelt name would
    only make every unit slower."""
    import importlib

    for module in TRAINING_STACK:
        importlib.import_module(module)
    assert sys.modules["trajval_ops.experiment.grpo_run"].main
