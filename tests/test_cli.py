"""The installed ``trajval`` command: subcommands, their help, real runs outside the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajval_ops import cli

REPO = Path(__file__).resolve().parents[1]
TRAJVAL = Path(sys.executable).with_name("trajval")
SUBCOMMANDS = ["import-pool", "make-pool", "report", "transfer-prior", "curve-metrics", "within-bin",
               "prepare-model", "validate", "verdict", "cost"]


def trajval(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the installed executable (not the repository) with ``cwd`` outside the repository and
    the repository kept off the import path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(TRAJVAL), *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_trajval_is_an_installed_console_script():
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="trajval")
    assert script.value == "trajval_ops.cli:main"
    assert TRAJVAL.is_file(), "pip install -e . registers the trajval executable next to python"


def test_help_lists_every_subcommand(tmp_path):
    result = trajval("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(cli.COMMANDS) == SUBCOMMANDS
    for name, (_, summary) in cli.COMMANDS.items():
        assert f"  {name} " in result.stdout and summary in result.stdout


def test_help_imports_no_subcommand_and_nothing_heavy():
    code = ("import sys\nfrom trajval_ops.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('numpy', 'pyarrow', 'data_juicer', 'torch', 'trajval_ops.cli.report') if m in sys.modules]\n"
            "sys.exit(str(heavy) if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("argv, code, message", [
    ([], 2, "required: <command>"),
    (["nope"], 2, "invalid choice: 'nope'"),
])
def test_missing_or_unknown_command_exits_2(capsys, argv, code, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == code and message in capsys.readouterr().err


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help_is_its_own(capsys, name):
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    if name == "validate":
        # trajval_ops.experiment.protocol.main names its own prog ("validate") unless it takes prog=
        assert out.startswith(("usage: trajval validate ", "usage: validate ")) and "--config" in out
    else:
        assert out.startswith(f"usage: trajval {name} ")


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_repository_script_is_a_thin_wrapper(name):
    module = cli.COMMANDS[name][0]
    text = (REPO / "tools" / f"{module}.py").read_text()
    assert f"from trajval_ops.cli.{module} import main" in text and "sys.path" not in text
    assert len(text.splitlines()) <= 8


def test_import_pool_runs_outside_the_repository(tmp_path):
    rows = [{"data_source": "math_dapo", "prompt": [{"role": "user", "content": f"{k} + 40 = ?"}],
             "reward_model": {"ground_truth": str(k + 40)}, "extra_info": {"index": f"uuid-{k}-{copy}"}}
            for copy in range(2) for k in range(3)]
    write_jsonl(tmp_path / "in.jsonl", rows)
    result = trajval("import-pool", "in.jsonl", "out.jsonl", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "rows read 6, written 3, duplicates removed 3"
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["reward_model"]["ground_truth"] for r in out] == ["40", "41", "42"]
    assert (tmp_path / "out.jsonl.report.json").is_file()


def test_import_pool_exits_2_on_a_file_that_is_not_utf8(tmp_path):
    (tmp_path / "bad.jsonl").write_bytes(
        b'{"prompt": "1+1?", "reward_model": {"ground_truth": "2"}}\n{"prompt": "\xe9t\xe9"}\n')
    result = trajval("import-pool", "bad.jsonl", "out.jsonl", "--no-progress", cwd=tmp_path)
    assert result.returncode == 2
    assert ("import_pool: error: bad.jsonl: line 2 (row 1) is not valid UTF-8: byte 12 of the line "
            "(byte offset 70 in the file)") in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out.jsonl").exists()


def test_curve_metrics_runs_outside_the_repository(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"math500": [0.2, 0.4, 0.5, 0.6], "aime": [0.1, 0.2, 0.2, 0.3]}))
    (tmp_path / "b.json").write_text(json.dumps({"math500": [0.2, 0.3, 0.4, 0.5], "aime": [0.1, 0.1, 0.2, 0.2]}))
    result = trajval("curve-metrics", "--method", "m.json", "--baseline", "b.json", "--window", "1",
                     "--out", "metrics.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["benchmark", "Best", "Acc", "AUC", "S2B", "%"]
    assert [line.split()[0] for line in lines[1:]] == ["math500", "aime", "avg"]
    assert json.loads((tmp_path / "metrics.json").read_text())["math500"]["best_acc"] == pytest.approx(0.6)
    (tmp_path / "bad.json").write_text("[1, 2]")
    bad = trajval("curve-metrics", "--method", "bad.json", cwd=tmp_path)
    assert bad.returncode == 2 and "curve_metrics: error: bad.json: expected a JSON object" in bad.stderr


def test_within_bin_runs_outside_the_repository(tmp_path):
    rows = [{"id": f"t{i}", "trajval_r_early": (i % 9) / 8, "trajval_r_late": min(1.0, (i % 9) / 8 + (i % 4) / 8)}
            for i in range(30)]
    write_jsonl(tmp_path / "pool.jsonl", rows)
    result = trajval("within-bin", "--pool", "pool.jsonl", "--out", "sub", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"statistics: {Path('sub') / 'within_bin_stats.json'}"
    stats = json.loads((tmp_path / "sub" / "within_bin_stats.json").read_text())
    assert len(stats["subpools"]) == 6 and all((tmp_path / "sub" / p["file"]).is_file() for p in stats["subpools"])


def test_transfer_prior_runs_outside_the_repository(tmp_path):
    source = [{"task_id": f"src-{i}", "prompt": [{"role": "user", "content": f"Question {i}?"}],
               "trajval_weight": 0.05 + 0.1 * i} for i in range(4)]
    target = [{"task_id": f"tgt-{i}", "prompt": f"Question {i}?"} for i in reversed(range(4))]
    write_jsonl(tmp_path / "src.jsonl", source)
    write_jsonl(tmp_path / "tgt.jsonl", target)
    result = trajval("transfer-prior", "src.jsonl", "tgt.jsonl", "out.jsonl", "--source-regime", "A", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "matched 4 of 4 target rows (100.0%); unmatched 0 (error); wrote out.jsonl"
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["trajval_weight"] for r in out] == pytest.approx([0.35, 0.25, 0.15, 0.05])
    assert json.loads((tmp_path / "out.jsonl.report.json").read_text())["regime"] == "A"


def test_report_and_within_bin_read_parquet_pools_as_they_read_jsonl(tmp_path):
    from trajval_ops.pools.io import write_rows

    rows = [{"id": f"t{i}", "trajval_r_early": (i % 9) / 8, "trajval_r_late": min(1.0, (i % 9) / 8 + (i % 4) / 8),
             "prompt": [{"role": "user", "content": f"q{i}"}] if i % 2 else f"q{i}"} for i in range(30)]
    outputs = {}
    for suffix in ("jsonl", "parquet"):
        pool = tmp_path / f"pool.{suffix}"
        write_rows(pool, rows)
        assert cli.main(["within-bin", "--pool", str(pool), "--out", str(tmp_path / f"sub-{suffix}")]) == 0
        assert cli.main(["report", "--pool", str(pool), "--out", str(tmp_path / f"report-{suffix}")]) == 0
        stats = json.loads((tmp_path / f"sub-{suffix}" / "within_bin_stats.json").read_text())
        summary = json.loads((tmp_path / f"report-{suffix}" / "summary.json").read_text())
        subpools = {p["file"]: (tmp_path / f"sub-{suffix}" / p["file"]).read_text() for p in stats["subpools"]}
        summary.pop("pool")  # the file's own name
        outputs[suffix] = (stats["subpools"], subpools, summary)
    assert outputs["parquet"] == outputs["jsonl"]
