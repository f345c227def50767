"""Within-pre-bin sub-pools: terciles, matched high/low-delta halves, JSONL output."""

import json

import numpy as np
import pytest

from trajval_ops.analysis import within_bin as wb

import importlib.util
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quantile_terciles_have_equal_sizes_and_ordered_values():
    rng = np.random.default_rng(0)
    r_early = rng.integers(0, 5, 31) / 4  # heavy ties
    bins = wb.tercile_bins(r_early)
    assert np.bincount(bins).tolist() in ([11, 10, 10], [10, 11, 10], [10, 10, 11])
    assert r_early[bins == 0].max() <= r_early[bins == 1].min()
    assert r_early[bins == 1].max() <= r_early[bins == 2].min()


def test_fixed_bins_use_the_paper_intervals():
    r_early = np.array([0.0, 1 / 3, 0.34, 2 / 3, 0.67, 1.0])
    assert wb.tercile_bins(r_early, "fixed").tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        wb.tercile_bins(r_early, "bogus")


def test_paired_split_hand_example():
    r_early = np.array([0.1, 0.1, 0.2, 0.2])
    delta = np.array([0.5, 0.1, 0.0, 0.3])
    high, low, left_out = wb.split_bin(np.arange(4), r_early, delta)
    assert high.tolist() == [0, 3] and low.tolist() == [1, 2] and left_out.size == 0


@pytest.mark.parametrize("values, dropped", [([0.0, 0.1, 0.5], 2), ([0.0, 0.4, 0.5], 0), ([0.0, 0.3, 0.35, 0.6, 0.61], 0)])
def test_odd_bin_leaves_out_the_row_that_keeps_pairs_tightest(values, dropped):
    r_early = np.array(values)
    _, _, left_out = wb.split_bin(np.arange(len(values)), r_early, np.zeros(len(values)))
    assert left_out.tolist() == [dropped]


def test_paired_split_matches_mean_r_early_where_median_split_does_not():
    # delta grows with r_early inside each bin: a plain median split confounds the two.
    rng = np.random.default_rng(2)
    r_early = rng.uniform(0, 1, 601)
    delta = 0.5 * r_early + rng.normal(0, 0.05, 601)
    paired = wb.within_bin_split(r_early, delta)
    median = wb.within_bin_split(r_early, delta, split="median")
    for p, m in zip(paired[::2], median[::2]):
        assert abs(p["r_early_gap"]) < 0.01 < abs(m["r_early_gap"])
        assert p["delta_gap"] > 0 and m["delta_gap"] > 0
    for bin_index in range(3):
        high, low = paired[2 * bin_index], paired[2 * bin_index + 1]
        assert high["n"] == low["n"]
        assert high["mean_delta"] > low["mean_delta"]


def test_subpools_partition_the_pool():
    rng = np.random.default_rng(4)
    r_early, delta = rng.uniform(0, 1, 50), rng.uniform(-0.2, 0.5, 50)
    pools = wb.within_bin_split(r_early, delta)
    used = np.concatenate([p["indices"] for p in pools])
    assert len(set(used.tolist())) == used.size
    assert used.size + sum(p["left_out"] for p in pools[::2]) == 50
    assert [(p["bin"], p["half"]) for p in pools] == [(b, h) for b in wb.BIN_NAMES for h in wb.HALVES]


def test_too_small_pool_is_refused():
    with pytest.raises(ValueError, match="at least 6"):
        wb.within_bin_split([0.1] * 5, [0.0] * 5)


def make_pool(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        pre = float(rng.integers(0, 17) / 16)
        post = float(np.clip(pre + rng.integers(-3, 8) / 16, 0, 1))
        rows.append({"id": f"task-{i}", "prompt": f"question {i}", "trajval_r_early": pre, "trajval_r_late": post})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_tool_writes_subpools_with_unchanged_rows(tmp_path, capsys):
    rows = make_pool(tmp_path / "pool.jsonl")
    out = tmp_path / "sub"
    assert load_tool("within_bin").main(["--pool", str(tmp_path / "pool.jsonl"), "--out", str(out)]) == 0
    stats = json.loads((out / "within_bin_stats.json").read_text())
    seen = []
    for entry in stats["subpools"]:
        written = [json.loads(line) for line in (out / entry["file"]).read_text().splitlines()]
        assert len(written) == entry["n"]
        assert all(row in rows for row in written)  # rows pass through untouched
        positions = [rows.index(row) for row in written]
        assert positions == sorted(positions)  # pool order kept
        seen += positions
    # 40 rows -> bins of 14/13/13; each odd bin leaves one row out of both halves
    assert len(seen) == len(set(seen)) == 38
    assert sum(entry["left_out"] for entry in stats["subpools"][::2]) == 2
    assert not list(out.glob(".*.tmp"))
    assert "low" in capsys.readouterr().out


def test_tool_names_bad_row(tmp_path, capsys):
    (tmp_path / "pool.jsonl").write_text(json.dumps({"id": "a", "trajval_r_early": 0.1, "trajval_r_late": "high"}) + "\n")
    assert load_tool("within_bin").main(["--pool", str(tmp_path / "pool.jsonl"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "id='a'" in err and "trajval_r_late" in err
    # a folder where the pool file belongs: one line and exit 2, not a traceback
    (tmp_path / "folder").mkdir()
    assert load_tool("within_bin").main(["--pool", str(tmp_path / "folder"), "--out", str(tmp_path / "o")]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_empty_fixed_bins_are_warned_of(tmp_path, capsys):
    """With the paper's fixed intervals a pool can leave a bin empty: its sub-pools are written (0
    rows, null statistics) and the run says so instead of exiting 0 without a word."""
    rows = [{"id": f"t{i}", "trajval_r_early": 0.1, "trajval_r_late": 0.1 + i / 100} for i in range(9)]
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--pool", str(tmp_path / "pool.jsonl"), "--out", str(tmp_path / "o"), "--binning", "fixed"]
    assert load_tool("within_bin").main(args) == 0
    assert ("within_bin: warning: 4 of 6 sub-pools are empty (mid high_delta, mid low_delta, high high_delta, high low_delta)"
            in capsys.readouterr().err)


def test_tool_leaves_out_a_sampled_priors_predicted_rows(tmp_path, capsys):
    """A sampled prior's predicted rows have no measured pass rates: the tool stopped on the first
    ('trajval_r_early' is missing (null)); it reads the measured rows, as trajval report does."""
    rows = make_pool(tmp_path / "measured.jsonl")
    predicted = [{"id": f"p-{i}", "trajval_r_early": None, "trajval_r_late": None, "trajval_predicted": True}
                 for i in range(5)]
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in predicted + rows))
    out = tmp_path / "sub"
    assert load_tool("within_bin").main(["--pool", str(pool), "--out", str(out)]) == 0
    stats = json.loads((out / "within_bin_stats.json").read_text())
    assert stats["meta"]["predicted_rows_left_out"] == 5
    subpools = stats["subpools"]
    assert sum(entry["n"] for entry in subpools) + sum(entry["left_out"] for entry in subpools[::2]) == len(rows)
    pool.write_text("".join(json.dumps(r) + "\n" for r in predicted))
    assert load_tool("within_bin").main(["--pool", str(pool), "--out", str(out)]) == 2
    assert "all 5 rows are predicted" in capsys.readouterr().err
