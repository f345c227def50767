"""trajval_ops.commands: the child-process commands found from the running interpreter."""

import sys
from pathlib import Path

import pytest

from trajval_ops import commands


def test_dj_process_beside_the_interpreter_then_on_path(tmp_path, monkeypatch):
    venv, target = tmp_path / "venv" / "bin", tmp_path / "site" / "bin"
    venv.mkdir(parents=True)
    target.mkdir(parents=True)
    script = target / "dj-process"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv / "python3"))
    monkeypatch.setenv("PATH", str(target))
    assert commands.dj_process_path() == str(script)  # a --target install: its bin/ on PATH
    (venv / "dj-process").write_text("#!/bin/sh\n")
    assert commands.dj_process_path() == str(venv / "dj-process")  # a virtualenv's own first
    (venv / "dj-process").unlink()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="neither beside .*python3 nor on PATH"):
        commands.dj_process_path()
    assert Path(commands.dj_process_path.__module__.replace(".", "/") + ".py").name == "commands.py"
