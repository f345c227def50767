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
    assert a["env"] == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TRAJVAL_PARENT_PID": str(a["parent"])}
    assert a["argv"] == ["tests.unit_entry", str(tmp_path / "a.json"), "0", "0.0"] and a["cwd"] == str(REPO)
    log = (tmp_path / "a.log").read_text()
    assert "unit_entry: to stdout" in log and "unit_entry: to stderr" in log


def test_a_unit_on_a_gpu_is_a_fresh_interpreter(tmp_path):
    run_units([entry_unit(tmp_path, "a")], 1, set(), {}, gpus=["4"])
    a = seen(tmp_path, "a")
    assert a["parent"] == os.getpid() and not a["preloaded"]["torch"]
    assert a["env"] == {"CUDA_VISIBLE_DEVICES": "4", "OMP_NUM_THREADS": "1", "TRAJVAL_PARENT_PID": str(os.getpid())}
    assert "unit_entry: to stderr" in (tmp_path / "a.log").read_text()


@pytest.mark.parametrize("exit_code, expected", [
    ("3", r"exit 3\)"), ("raise", r"exit 1\)[\s\S]*ValueError: unit_entry")])
def test_a_forked_units_exit_code_and_log_reach_the_error(tmp_path, exit_code, expected):
    with pytest.raises(RuntimeError, match=r"validation unit a failed \(" + expected):
        run_units([entry_unit(tmp_path, "a", exit_code=exit_code)], 1, set(), {})


def alive(pid: int) -> bool:
    from trajval_ops.lifetime import process_info

    return process_info(pid) is not None


@pytest.mark.parametrize("stop", ["a unit fails", "work after a unit fails"])
def test_a_run_stopped_by_an_error_leaves_no_unit_running(tmp_path, stop):
    slow = entry_unit(tmp_path, "slow", sleep_s=120)
    quick = entry_unit(tmp_path, "quick", exit_code="3" if stop == "a unit fails" else "0", sleep_s=1.0)

    def fail():
        raise OSError("the priors could not be written")

    with pytest.raises((RuntimeError, OSError)):
        run_units([slow, quick], 2, set(), {} if stop == "a unit fails" else {"quick": fail})
    pid = seen(tmp_path, "slow")["pid"]
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


def test_the_training_stack_names_importable_modules():
    """The fork server skips a module it cannot import without a word: a misspelt name would
    only make every unit slower."""
    import importlib

    for module in TRAINING_STACK:
        importlib.import_module(module)
    assert sys.modules["trajval_ops.experiment.grpo_run"].main
