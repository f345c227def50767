"""The HTML + PNG report builds from a fixture pool and references every figure it writes."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from trajval_ops import core
from trajval_ops.analysis import pool_columns
from trajval_ops.analysis.pool_report import build_report
from trajval_ops.errors import TrajvalInputError

TOOLS = Path(__file__).resolve().parents[1] / "tools"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def fixture_files(tmp_path):
    """A 60-row weighted pool (as the learnability mapper writes it), its dense trajectories
    (11 checkpoints, one id missing from the pool) and a probe manifest."""
    rng = np.random.default_rng(0)
    n, T = 60, 11
    start = rng.uniform(0, 1, n)
    gain = rng.uniform(-0.4, 0.6, n)
    acc = np.clip(start[:, None] + gain[:, None] * np.linspace(0, 1, T) + rng.normal(0, 0.03, (n, T)), 0, 1)
    acc = np.round(acc * 16) / 16
    r_early, r_late = acc[:, 0], acc[:, -1]
    score = core.learnability_score(r_early, r_late)
    weight = core.sampling_weight(score, 0.3, 0.05)
    profile = core.endpoint_profiles(r_early, r_late)
    pool = [
        {"id": f"t{i}", "prompt": "q", fields_r_early: float(r_early[i]), "trajval_r_late": float(r_late[i]),
         "trajval_score": float(score[i]), "trajval_weight": float(weight[i]), "trajval_profile": profile[i],
         "trajval_score_provenance": {"alpha": 0.3, "eps": 0.05}}
        for i, fields_r_early in zip(range(n), ["trajval_r_early"] * n)
    ]
    trajectories = [{"id": f"t{i}", "accuracies": acc[i].tolist()} for i in range(n)]
    trajectories.append({"id": "not-in-pool", "accuracies": [0.5] * T})
    manifest = {"format": "trajval-probe-manifest/1", "base_model": "tiny-random-llama", "seed": 0,
                "status": "complete", "train_reward_per_epoch": [0.1, 0.15, 0.22], "wall_time_s": 3.0}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return {
        "pool": write_jsonl(tmp_path / "pool.jsonl", pool),
        "trajectories": write_jsonl(tmp_path / "traj.jsonl", trajectories),
        "manifest": tmp_path / "manifest.json",
        "rows": pool,
        "acc": acc,
    }


def image_sources(html_text):
    return re.findall(r"<img src='([^']+)'", html_text)


def test_full_report_references_every_figure_it_writes(fixture_files, tmp_path):
    out = tmp_path / "report"
    summary = build_report(fixture_files["pool"], out, fixture_files["manifest"], fixture_files["trajectories"])
    written = sorted(p.name for p in out.glob("*.png"))
    assert written == sorted(summary["figures"])
    assert set(written) == {
        "weight_hist.png", "score_hist.png", "early_late_scatter.png", "weight_share_by_profile.png",
        "probe_train_reward.png", "slope_r2.png", "probe_epoch_stability.png",
    }
    html_text = (out / "index.html").read_text()
    assert sorted(image_sources(html_text)) == written
    for name in written:
        assert (out / name).read_bytes()[:8] == PNG_SIGNATURE
    assert not list(out.glob(".*.tmp"))
    # the summary table is in the page and summary.json is strict JSON
    assert "Score distribution per profile" in html_text and "tiny-random-llama" in html_text
    strict = json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert strict["rows"] == 60 and strict["computed_fields"] == []
    traj = summary["trajectories"]
    assert traj["n_trajectories"] == 61 and traj["n_shared_with_pool"] == 60
    # the pool's endpoints are the trajectory's first/last checkpoints: perfect rank agreement
    assert traj["pool_vs_trajectory"]["spearman_r_early"] == pytest.approx(1.0)
    assert traj["epoch_stability"]["spearman"][-1] == pytest.approx(1.0)


def test_report_table_matches_the_pool(fixture_files, tmp_path):
    summary = build_report(fixture_files["pool"], tmp_path / "r")
    rows = fixture_files["rows"]
    weight = np.array([r["trajval_weight"] for r in rows])
    learnable = core.is_learnable([r["trajval_profile"] for r in rows])
    table = summary["score_distribution"]
    assert table["learnable"]["weight_share"] == pytest.approx(weight[learnable].sum() / weight.sum())
    assert summary["floor_fraction"] == pytest.approx(np.mean(weight <= 0.05))
    assert len(summary["figures"]) == 4


def test_pool_with_endpoints_only_gets_scores_from_the_core(tmp_path):
    rows = [{"id": i, "trajval_r_early": e, "trajval_r_late": l}
            for i, (e, l) in enumerate([(0.0, 0.5), (0.5, 0.4), (0.95, 0.97), (0.2, 0.6), (0.0, 0.0)])]
    pool = write_jsonl(tmp_path / "p.jsonl", rows)
    summary = build_report(pool, tmp_path / "r", eps=0.1)
    assert summary["computed_fields"] == ["score", "weight", "profile"]
    assert summary["eps"] == 0.1 and summary["alpha"] == core.DEFAULT_ALPHA
    expected_w = core.sampling_weight(core.learnability_score([0, 0.5, 0.95, 0.2, 0], [0.5, 0.4, 0.97, 0.6, 0]), 0.3, 0.1)
    assert summary["weight_sum"] == pytest.approx(expected_w.sum())
    html_text = (tmp_path / "r" / "index.html").read_text()
    assert sorted(image_sources(html_text)) == sorted(p.name for p in (tmp_path / "r").glob("*.png"))


def test_a_sampled_prior_is_reported_on_its_measured_rows(tmp_path):
    """Rows whose score the learnability mapper predicted have no measured pass rates: the report
    leaves them out and counts them."""
    measured = [{"id": i, "trajval_r_early": e, "trajval_r_late": l, "trajval_predicted": False}
                for i, (e, l) in enumerate([(0.0, 0.5), (0.5, 0.4), (0.2, 0.6)])]
    predicted = [{"id": 10 + i, "trajval_r_early": None, "trajval_r_late": None, "trajval_predicted": True}
                 for i in range(2)]
    pool = write_jsonl(tmp_path / "p.jsonl", measured[:1] + predicted + measured[1:])
    summary = build_report(pool, tmp_path / "r")
    assert summary["rows"] == 3 and summary["predicted_rows_left_out"] == 2
    assert summary["mean_r_early"] == pytest.approx(0.7 / 3)


def test_cli_builds_and_reports_bad_input(fixture_files, tmp_path, capsys):
    tool = load_tool("report")
    out = tmp_path / "cli"
    assert tool.main(["--pool", str(fixture_files["pool"]), "--manifest", str(fixture_files["manifest"]),
                      "--out", str(out)]) == 0
    assert (out / "probe_train_reward.png").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "trajval_r_early": 0.1, "trajval_r_late": 0.2}) + "\n{not json\n")
    assert tool.main(["--pool", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "line 2" in capsys.readouterr().err


def test_cli_reports_a_manifest_that_is_a_folder(fixture_files, tmp_path, capsys):
    """A folder given as --manifest is a one-line error naming it and exit 2 (it was an
    IsADirectoryError traceback); so is a missing manifest."""
    tool = load_tool("report")
    folder = tmp_path / "probe_dir"
    folder.mkdir()
    for manifest, reason in ((folder, "Is a directory"), (tmp_path / "absent.json", "No such file")):
        assert tool.main(["--pool", str(fixture_files["pool"]), "--manifest", str(manifest),
                          "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("report: error: ") and "\n" not in err
        assert str(manifest) in err and reason in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("row, message", [
    ({"id": "r7", "trajval_r_early": 1.5, "trajval_r_late": 0.2}, "id='r7'.*trajval_r_early.*outside"),
    ({"id": "r8", "trajval_r_late": 0.2}, "id='r8'.*trajval_r_early.*missing"),
    ({"id": "r9", "trajval_r_early": 0.1, "trajval_r_late": 0.2, "trajval_profile": "great"}, "id='r9'.*trajval_profile.*great"),
    ({"id": "r10", "trajval_r_early": 0.1, "trajval_r_late": 0.2}, "id='r10'.*trajval_profile.*missing while other rows"),
])
def test_bad_rows_are_named(tmp_path, row, message):
    good = {"id": "ok", "trajval_r_early": 0.1, "trajval_r_late": 0.3, "trajval_profile": "sluggish"}
    if "trajval_profile" not in message:
        del good["trajval_profile"]
    pool = write_jsonl(tmp_path / "p.jsonl", [good, row])
    with pytest.raises(TrajvalInputError, match=message):
        build_report(pool, tmp_path / "r")


def test_bad_trajectories_and_empty_pool(fixture_files, tmp_path):
    ragged = write_jsonl(tmp_path / "t.jsonl", [{"id": "t0", "accuracies": [0.1, 0.2, 0.3]},
                                                 {"id": "t1", "accuracies": [0.1, 0.2]}])
    with pytest.raises(TrajvalInputError, match="id='t1'.*2 checkpoints"):
        build_report(fixture_files["pool"], tmp_path / "r", trajectories_path=ragged)
    assert not (tmp_path / "r").exists()  # inputs are checked before anything is drawn
    disjoint = write_jsonl(tmp_path / "d.jsonl", [{"id": "zz", "accuracies": [0.1, 0.2, 0.3]}])
    with pytest.raises(TrajvalInputError, match="no trajectory id"):
        build_report(fixture_files["pool"], tmp_path / "r", trajectories_path=disjoint)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(TrajvalInputError, match="empty"):
        build_report(empty, tmp_path / "r")


def test_join_on_id_refuses_duplicates():
    with pytest.raises(TrajvalInputError, match="duplicate id 'a'"):
        pool_columns.join_on_id(["a", "a"], ["a"])
    ia, ib = pool_columns.join_on_id(["a", "b", "c"], ["c", "a"])
    assert ia.tolist() == [0, 2] and ib.tolist() == [1, 0]


def test_comparison_with_a_second_pool(fixture_files, tmp_path):
    rows = fixture_files["rows"]
    # a second estimate of the first 40 tasks: same r_early, r_late shifted on 10 of them
    other = [{"id": r["id"], "trajval_r_early": r["trajval_r_early"],
              "trajval_r_late": min(1.0, r["trajval_r_late"] + (0.25 if i % 4 == 0 else 0.0))}
             for i, r in enumerate(rows[:40])]
    other_path = write_jsonl(tmp_path / "other.jsonl", other)
    summary = build_report(fixture_files["pool"], tmp_path / "r", compare_path=other_path)
    comp = summary["comparison"]
    assert comp["n_shared"] == 40
    assert comp["spearman_r_early"] == pytest.approx(1.0)
    labels_a = [r["trajval_profile"] for r in rows[:40]]
    labels_b = core.endpoint_profiles([o["trajval_r_early"] for o in other], [o["trajval_r_late"] for o in other])
    from sklearn.metrics import cohen_kappa_score
    assert comp["kappa_six_way"] == pytest.approx(cohen_kappa_score(labels_a, labels_b))
    assert "Agreement with" in (tmp_path / "r" / "index.html").read_text()


def test_a_sampled_prior_compared_is_read_on_its_measured_rows(fixture_files, tmp_path):
    """--compare drops a sampled prior's predicted rows (null pass rates) as --pool does, and
    counts them; they used to stop the report with 'trajval_r_early is missing (null)'."""
    rows = fixture_files["rows"]
    other = [{"id": r["id"], "trajval_r_early": r["trajval_r_early"], "trajval_r_late": r["trajval_r_late"],
              "trajval_predicted": False} for r in rows[:30]]
    other += [{"id": r["id"], "trajval_r_early": None, "trajval_r_late": None, "trajval_predicted": True}
              for r in rows[30:]]
    other_path = write_jsonl(tmp_path / "sampled.jsonl", other[::-1])  # a predicted row first
    summary = build_report(fixture_files["pool"], tmp_path / "r", compare_path=other_path)
    comp = summary["comparison"]
    assert comp["n_shared"] == 30 and comp["predicted_rows_left_out"] == 30
    assert comp["spearman_r_early"] == pytest.approx(1.0)
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["comparison"]["predicted_rows_left_out"] == 30


def test_a_pool_whose_every_row_is_predicted_is_named_as_such(fixture_files, tmp_path, capsys):
    """--pool or --compare holding only predicted rows: one line naming the option, the file and
    the count, exit 2; it was 'the pool is empty (0 rows)', naming neither."""
    tool = load_tool("report")
    predicted = write_jsonl(tmp_path / "sampled.jsonl", [
        {"id": f"t{i}", "trajval_r_early": None, "trajval_r_late": None, "trajval_predicted": True} for i in range(3)])
    for option, arguments in (("--pool", ["--pool", str(predicted)]),
                              ("--compare", ["--pool", str(fixture_files["pool"]), "--compare", str(predicted)])):
        assert tool.main([*arguments, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"report: error: {option} {predicted}: all 3 rows are predicted (trajval_predicted" in err, err
        assert "nothing measured to analyse" in err
        assert not (tmp_path / "r").exists()


def test_analysis_does_not_import_data_juicer():
    import subprocess
    import sys

    code = ("import sys, trajval_ops.analysis.pool_report, trajval_ops.analysis.within_bin, "
            "trajval_ops.analysis.curves; assert 'data_juicer' not in sys.modules, 'data_juicer imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_file_of_two_runs_scored_differently_is_refused_in_either_line_order(tmp_path, capsys):
    """`trajval report` reads alpha and eps per run (issue 36, item 4): the rows of two runs with
    other alpha and eps are refused, each run named, whatever the line order, instead of the first
    line's settings applied to every row; given --alpha and --eps, every row is read alike."""
    import pyarrow as pa

    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import write_table

    rows = [{"id": f"t{i}", "trajval_r_early": (i % 4) / 8, "trajval_r_late": 0.25 + (i % 3) / 4} for i in range(8)]
    files = []
    for alpha, eps in ((0.3, 0.05), (0.5, 0.6)):
        path = tmp_path / f"alpha{alpha}.jsonl"
        run_rows = [{**row, "id": f"{row['id']}-{alpha}"} for row in rows]
        write_table(TrajvalLearnabilityMapper(alpha=alpha, eps=eps).score_pool(pa.Table.from_pylist(run_rows)), path)
        files.append(path.read_bytes())
    tool = load_tool("report")
    for order in (files, files[::-1]):
        mixed = tmp_path / "mixed.jsonl"
        mixed.write_bytes(b"".join(order))
        assert tool.main(["--pool", str(mixed), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert "2 runs scored differently" in err and "alpha 0.3, eps 0.05: 8 rows" in err
        assert "alpha 0.5, eps 0.6: 8 rows" in err
    summary = build_report(mixed, tmp_path / "given", alpha=0.3, eps=0.05)
    assert summary["rows"] == 16 and summary["eps"] == 0.05


def test_a_pool_another_prior_scored_is_not_read_as_trajvals():
    """A variance-scored pool that also holds r_late was reported with r(1 - r) labelled
    s = (1 - r_early) max(0, delta) and its weights as max(s^0.3, eps): refused, naming the prior."""
    rows = [{"id": i, "trajval_r_early": e, "trajval_r_late": l, "trajval_score": 4 * e * (1 - e),
             "trajval_weight": max(4 * e * (1 - e), 0.05),
             "trajval_score_provenance": {"score": "variance", "eps": 0.05}}
            for i, (e, l) in enumerate([(0.5, 0.6), (0.2, 0.1)])]
    with pytest.raises(TrajvalInputError, match="the pool was scored by the variance prior"):
        pool_columns.pool_columns(rows)
    for row in rows:
        row["trajval_score_provenance"] = {"score": "trajval", "alpha": 0.3, "eps": 0.05}
    assert pool_columns.pool_columns(rows)["alpha"] == 0.3


def test_a_compared_or_trajectory_file_without_ids_is_refused_not_joined_by_position(fixture_files, tmp_path):
    """A row with no id got its position as id: integer ids met those positions, and a shuffled
    second pool was paired row by row (Spearman 0.16 for the same estimates), said 'joined on id'."""
    rows = [dict(row, id=i) for i, row in enumerate(fixture_files["rows"])]
    pool = write_jsonl(tmp_path / "int_ids.jsonl", rows)
    shuffled = [{k: v for k, v in row.items() if k != "id"} for row in rows[::-1]]
    with pytest.raises(TrajvalInputError, match=r"--compare .*no_ids.jsonl: row 0 has no id .*a row's position is no id"):
        build_report(pool, tmp_path / "r", compare_path=write_jsonl(tmp_path / "no_ids.jsonl", shuffled))
    trajectories = [{"accuracies": acc} for acc in fixture_files["acc"].tolist()]
    with pytest.raises(TrajvalInputError, match=r"--trajectories .*traj_no_ids.jsonl: row 0 has no id"):
        build_report(pool, tmp_path / "r", trajectories_path=write_jsonl(tmp_path / "traj_no_ids.jsonl", trajectories))
    with pytest.raises(TrajvalInputError, match=r"--pool .*pool_no_ids.jsonl: row 0 has no id"):
        build_report(write_jsonl(tmp_path / "pool_no_ids.jsonl", shuffled), tmp_path / "r", compare_path=pool)
    assert build_report(pool, tmp_path / "r", compare_path=pool)["comparison"]["spearman_r_early"] == pytest.approx(1.0)


def test_the_compared_pool_is_weighted_with_the_reports_alpha_and_eps(fixture_files, tmp_path):
    summary = build_report(fixture_files["pool"], tmp_path / "r", compare_path=fixture_files["pool"], alpha=1.0, eps=0.2)
    assert summary["comparison"]["score_distribution"] == summary["score_distribution"]
