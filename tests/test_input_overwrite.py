"""No command replaces its own input: an output path equal to an input path is refused, naming
both, before anything is read or written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_POOL, REPO, dj_process
from trajval_ops.atomic import check_output_spares_inputs
from trajval_ops.errors import InputOverwriteError


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_file_by_another_name_is_refused(tmp_path):
    pool = tmp_path / "pool.jsonl"
    pool.write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(pool)
    for output in (pool, tmp_path / "sub" / ".." / "pool.jsonl", tmp_path / "link.jsonl"):
        with pytest.raises(InputOverwriteError, match="pool.jsonl"):
            check_output_spares_inputs(output, {"pool": pool})
    check_output_spares_inputs(tmp_path / "other.jsonl", {"pool": pool, "absent": None})


def test_relative_output_naming_the_input_is_refused(tmp_path, monkeypatch):
    (tmp_path / "pool.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputOverwriteError, match=r"output 'pool.jsonl' is the pool '.*pool.jsonl'"):
        check_output_spares_inputs("pool.jsonl", {"pool": tmp_path / "pool.jsonl"})


def test_output_inside_an_input_folder_is_refused(tmp_path):
    folder = tmp_path / "pools"
    folder.mkdir()
    (folder / "part-0.jsonl").write_text("{}\n")
    with pytest.raises(InputOverwriteError, match="inside the pool folder"):
        check_output_spares_inputs(folder / "out.jsonl", {"pool": folder})


def test_import_pool_refuses_its_input_as_output(tmp_path, capsys):
    from trajval_ops.cli import import_pool

    pool = tmp_path / "pool.jsonl"
    shutil.copy(FIXTURE_POOL, pool)
    before = digest(pool)
    assert import_pool.main([str(pool), str(pool), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"output '{pool}' is the input pool '{pool}'" in err
    assert digest(pool) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool.jsonl"]  # no side file written either


def test_import_pool_refuses_a_report_over_its_input(tmp_path, capsys):
    from trajval_ops.cli import import_pool

    pool = tmp_path / "pool.jsonl"
    shutil.copy(FIXTURE_POOL, pool)
    before = digest(pool)
    assert import_pool.main([str(pool), str(tmp_path / "out.jsonl"), "--report", str(pool), "--no-progress"]) == 2
    assert "report" in capsys.readouterr().err and digest(pool) == before
    assert not (tmp_path / "out.jsonl").exists()


def test_transfer_prior_refuses_its_target_as_output(tmp_path, capsys):
    from trajval_ops.cli import transfer_prior

    source, target = tmp_path / "source.jsonl", tmp_path / "target.jsonl"
    shutil.copy(FIXTURE_POOL, source)
    shutil.copy(FIXTURE_POOL, target)
    before = digest(target)
    assert transfer_prior.main([str(source), str(target), str(target), "--source-regime", "r"]) == 2
    assert f"is the target pool '{target}'" in capsys.readouterr().err
    assert digest(target) == before


def test_curve_metrics_refuses_its_method_file_as_output(tmp_path, capsys):
    from trajval_ops.cli import curve_metrics

    method = tmp_path / "method.json"
    method.write_text(json.dumps({"bench": [0.1, 0.2, 0.3]}))
    before = digest(method)
    assert curve_metrics.main(["--method", str(method), "--out", str(method)]) == 2
    assert "--method file" in capsys.readouterr().err and digest(method) == before


@pytest.mark.parametrize("option", ["--report", "--duplicates"])
def test_import_pool_refuses_a_side_file_over_its_output(tmp_path, capsys, option):
    from trajval_ops.cli import import_pool

    out = tmp_path / "out.jsonl"
    assert import_pool.main([str(FIXTURE_POOL), str(out), option, str(out), "--no-progress"]) == 2
    name = {"--report": "report", "--duplicates": "duplicates file"}[option]
    assert f"{name} '{out}' is the output '{out}'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_transfer_prior_refuses_a_report_over_its_output(tmp_path, capsys):
    from trajval_ops.cli import transfer_prior

    out = tmp_path / "out.jsonl"
    assert transfer_prior.main([str(FIXTURE_POOL), str(FIXTURE_POOL), str(out), "--source-regime", "r",
                                "--report", str(out)]) == 2
    assert f"--report '{out}' is the output '{out}'" in capsys.readouterr().err
    assert not out.exists()


def test_make_pool_refuses_an_out_over_an_exclude_file(tmp_path, capsys):
    from trajval_ops.cli import make_pool

    pool = tmp_path / "pool.jsonl"
    shutil.copy(FIXTURE_POOL, pool)
    before = digest(pool)
    assert make_pool.main(["--preset", "math", "--size", "4", "--exclude", str(pool), "--out", str(pool)]) == 2
    assert f"--out '{pool}' is the --exclude file '{pool}'" in capsys.readouterr().err
    assert digest(pool) == before


def test_make_pool_refuses_a_split_file_over_an_exclude_file(tmp_path, capsys):
    from trajval_ops.cli import make_pool

    folder = tmp_path / "splits"
    folder.mkdir()
    tuning = folder / "tuning.jsonl"
    shutil.copy(FIXTURE_POOL, tuning)
    before = digest(tuning)
    assert make_pool.main(["--preset", "math", "--splits", "pool=4,tuning=2", "--exclude", str(tuning),
                           "--out", str(folder)]) == 2
    assert f"--splits file tuning.jsonl '{tuning}' is the --exclude file '{tuning}'" in capsys.readouterr().err
    assert digest(tuning) == before and sorted(p.name for p in folder.iterdir()) == ["tuning.jsonl"]


@pytest.mark.parametrize("recipe", ["score_pool.yaml", "resample_pool.yaml"])
def test_dj_process_refuses_an_export_path_equal_to_the_dataset_path(tmp_path, recipe):
    pool = tmp_path / "pool.jsonl"
    if recipe == "resample_pool.yaml":  # the resampler reads weights: score the fixture first
        scored = dj_process(REPO / "recipes" / "score_pool.yaml", tmp_path, "--dataset_path", str(FIXTURE_POOL),
                            "--export_path", str(pool))
        assert scored.returncode == 0, scored.stderr[-2000:]
    else:
        shutil.copy(FIXTURE_POOL, pool)
    before = digest(pool)
    relative = os.path.relpath(pool, REPO)  # the same file under another spelling
    result = dj_process(REPO / "recipes" / recipe, tmp_path, "--dataset_path", str(pool), "--export_path", relative)
    assert result.returncode != 0
    # Data-Juicer makes export_path absolute before the run sees it
    assert f"export_path '{pool}' is the dataset_path '{pool}'" in result.stdout + result.stderr
    assert digest(pool) == before


@pytest.mark.parametrize("command", [
    ["import-pool", "{pool}", "DIR", "--no-progress"],
    ["import-pool", "{pool}", "out.jsonl", "--report", "DIR", "--no-progress"],
    ["make-pool", "--size", "8", "--out", "DIR"],
    ["make-pool", "--size", "8", "--out", "FILE/pool.jsonl"],
    ["make-pool", "--splits", "a=4", "--out", "FILE"],
    ["make-pool", "--splits", "a=4", "--out", "SPLITS"],  # SPLITS/a.jsonl is a folder
    ["transfer-prior", "{pool}", "{pool}", "DIR", "--source-regime", "r"],
    ["transfer-prior", "{pool}", "{pool}", "out.jsonl", "--source-regime", "r", "--report", "DIR"],
    ["curve-metrics", "--method", "method.json", "--out", "DIR"],
])
def test_an_output_that_cannot_be_a_file_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch,
                                                                               command):
    """An output naming a folder, or lying under a file, is one line and exit 2 before any work;
    before, a traceback (IsADirectoryError, FileExistsError) after the work, some outputs written."""
    from trajval_ops.cli import main

    monkeypatch.chdir(tmp_path)
    shutil.copy(FIXTURE_POOL, tmp_path / "pool.jsonl")
    (tmp_path / "DIR").mkdir()
    (tmp_path / "FILE").write_text("kept\n")
    (tmp_path / "SPLITS" / "a.jsonl").mkdir(parents=True)
    (tmp_path / "method.json").write_text(json.dumps({"bench": [0.1, 0.2, 0.3]}))
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert main([part.format(pool=tmp_path / "pool.jsonl") for part in command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: " in err, err
    assert ("is a folder" in err or "is an existing file" in err or "which is a file, not a folder" in err), err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "FILE").read_text() == "kept\n"


def test_an_export_path_that_is_a_folder_is_refused_before_the_run(tmp_path):
    """Data-Juicer's export of one file onto a folder failed after the whole run."""
    from types import SimpleNamespace

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.ops.dj.export import check_export_path

    (tmp_path / "out").mkdir()
    with pytest.raises(TrajvalInputError, match=r"export_path '.*out' is a folder"):
        check_export_path(SimpleNamespace(export_path=str(tmp_path / "out")))
    check_export_path(SimpleNamespace(export_path=str(tmp_path / "out" / "pool.jsonl")))
