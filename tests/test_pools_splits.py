"""`trajval make-pool --splits`: disjoint, seeded, atomically written splits of one generated pool."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from trajval_ops.cli.make_pool import SPLITS_MANIFEST
from trajval_ops.pools.generate import (
    SPLIT_ID_KEY,
    bucket_counts,
    check_row,
    generate_splits,
    parse_mix,
    parse_splits,
)
from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID
from trajval_ops.pools.io import read_rows

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import make_pool

MIX = "basic_arithmetic/easy=2,chain_sum/medium=1,simple_equations/easy=1"
SPLITS = "pool=40,heldout=20,tuning=10"


def make(tmp_path, name="out", *extra):
    out = tmp_path / name
    code = make_pool.main(["--mix", MIX, "--splits", SPLITS, "--seed", "3", "--out", str(out), *extra])
    return code, out


def test_splits_are_disjoint_by_id_and_prompt_and_keep_the_mix(tmp_path):
    code, out = make(tmp_path)
    assert code == 0
    splits = {name: list(read_rows(out / f"{name}.jsonl")) for name in ("pool", "heldout", "tuning")}
    mix = parse_mix(MIX)
    seen_ids, seen_prompts = set(), set()
    for name, rows in splits.items():
        assert len(rows) == parse_splits(SPLITS)[name]
        ids = {row[SPLIT_ID_KEY] for row in rows}
        prompts = {json.dumps(row["prompt"], sort_keys=True) for row in rows}
        assert len(ids) == len(prompts) == len(rows)
        assert not ids & seen_ids and not prompts & seen_prompts, name
        assert {row[PROMPT_HASH] for row in rows}.isdisjoint(seen_prompts)
        seen_ids |= ids | {row[TASK_ID] for row in rows}
        seen_prompts |= prompts | {row[PROMPT_HASH] for row in rows}
        for row in rows:
            assert row[SPLIT_ID_KEY] == row[TASK_ID] and row["extra_info"]["split"] == name
        counts = {bucket: n for bucket, n in bucket_counts(mix, len(rows)).items() if n}
        got = {}
        for row in rows:
            bucket = (row["extra_info"]["family"], row["extra_info"]["difficulty"])
            got[bucket] = got.get(bucket, 0) + 1
        assert got == counts, name
    manifest = json.loads((out / SPLITS_MANIFEST).read_text())
    assert manifest["seed"] == 3 and {k: v["rows"] for k, v in manifest["splits"].items()} == {
        "pool": 40, "heldout": 20, "tuning": 10}
    assert all(check_row(row) == 1.0 for row in splits["heldout"])  # regenerable, ground truth verified


def test_the_protocol_accepts_the_splits_as_a_users_data(tmp_path):
    """What `trajval validate` checks of a config's data files: ids present, held-out disjoint."""
    from trajval_ops.experiment.protocol import check_splits
    from trajval_ops.experiment.validation_config import (
        EvaluationSettings,
        ValidationConfig,
    )

    _, out = make(tmp_path)
    rows = {name: list(read_rows(out / f"{name}.jsonl")) for name in ("pool", "heldout", "tuning")}
    config = ValidationConfig(name="t", group_key="extra_info.family", evaluation=EvaluationSettings(min_heldout=20))
    check_splits({"context-a": rows["pool"], "heldout": rows["heldout"], "tuning": rows["tuning"]}, config)


def test_same_seed_same_bytes_other_seed_other_tasks(tmp_path):
    _, first = make(tmp_path, "a")
    _, again = make(tmp_path, "b")
    for name in ("pool.jsonl", "heldout.jsonl", "tuning.jsonl", SPLITS_MANIFEST):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name
    other = generate_splits(parse_mix(MIX), parse_splits(SPLITS), seed=4)
    assert [r[PROMPT_HASH] for r in other["heldout"]] != [
        r[PROMPT_HASH] for r in read_rows(first / "heldout.jsonl")]


@pytest.mark.parametrize("spec, message", [
    ("pool=10,heldout", "'heldout' is not name=size"),
    ("pool=10,,tuning=4", "an empty entry"),
    ("pool=0", "must be a positive integer"),
    ("pool=ten", "must be a positive integer"),
    ("pool=-3", "must be a positive integer"),
    ("Pool=10", "lower-case letters"),
    ("../x=10", "lower-case letters"),
    ("pool=10,pool=5", "'pool' twice"),
])
def test_bad_split_specs_are_refused_before_anything_is_written(tmp_path, capsys, spec, message):
    out = tmp_path / "out"
    assert make_pool.main(["--mix", MIX, "--splits", spec, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_other_refusals(tmp_path, capsys):
    out = tmp_path / "out"
    assert make_pool.main(["--mix", MIX, "--splits", SPLITS, "--size", "70", "--out", str(out)]) == 2
    assert "--size and --splits" in capsys.readouterr().err
    assert make_pool.main(["--mix", MIX, "--splits", SPLITS, "--out", str(tmp_path / "pool.jsonl")]) == 2
    assert "names a folder" in capsys.readouterr().err
    # more one-digit products than exist: no file of the set is written
    assert make_pool.main(["--mix", "products/easy=1", "--splits", "pool=80,heldout=30", "--out", str(out)]) == 2
    assert "unique prompts" in capsys.readouterr().err
    assert not out.exists()


def test_an_interrupted_rerun_leaves_no_manifest(tmp_path, monkeypatch):
    _, out = make(tmp_path)
    from trajval_ops.pools import io

    real = io.write_rows

    def fail_after_pool(path, rows):
        if Path(path).name == "heldout.jsonl":
            assert not (out / SPLITS_MANIFEST).exists()  # the old set's manifest is gone first
            raise OSError("disk full")
        return real(path, rows)

    monkeypatch.setattr(io, "write_rows", fail_after_pool)
    with pytest.raises(OSError):
        make(tmp_path)
    assert not (out / SPLITS_MANIFEST).exists()  # an incomplete set says so


def test_exclude_keeps_the_tasks_a_study_read_out_of_every_split(tmp_path):
    _, studied = make(tmp_path, "studied")
    read = {row[PROMPT_HASH] for row in read_rows(studied / "tuning.jsonl")}
    out = tmp_path / "after"
    assert make_pool.main(["--mix", MIX, "--splits", SPLITS, "--seed", "3", "--out", str(out),
                           "--exclude", str(studied / "tuning.jsonl")]) == 0
    for name in ("pool", "heldout", "tuning"):
        assert not read & {row[PROMPT_HASH] for row in read_rows(out / f"{name}.jsonl")}, name
    manifest = json.loads((out / SPLITS_MANIFEST).read_text())
    assert manifest["excluded"] == {"files": [str(studied / "tuning.jsonl")], "prompts": 10}
    # a single pool too
    pool = tmp_path / "pool.jsonl"
    assert make_pool.main(["--mix", MIX, "--size", "30", "--seed", "3", "--out", str(pool),
                           "--exclude", str(studied / "tuning.jsonl")]) == 0
    assert not read & {row[PROMPT_HASH] for row in read_rows(pool)}


def _problem(row) -> str | None:
    """The arithmetic problem of a row, read from its wording (independently of the code under test)."""
    import re

    question = row["prompt"][-1]["content"].split("\n\n")[0]
    match = re.fullmatch(r"(?:State the final answer to the following arithmetic problem:|Calculate|Solve the "
                         r"following multiplication:)\s*([-\d\s+*/()]+?)\s*(?:=|\.|\. Give only the result as your "
                         r"final answer\.)", question)
    return match.group(1).replace(" ", "") if match else None


def test_shared_problems_under_other_wording_are_measured_logged_and_recorded(tmp_path, caplog_loguru):
    """Splits are disjoint by prompt, not by problem: 'Calculate 1 + 8.' (basic_arithmetic) and
    '...arithmetic problem: 1 + 8 =' (chain_sum) are one problem. make-pool counts the rows of each
    split whose problem another split (or an --exclude row) asks, warns, and records it."""
    mix = "basic_arithmetic/easy=1,chain_sum/easy=1,leg_counting/easy=1"
    studied = tmp_path / "studied"
    assert make_pool.main(["--mix", mix, "--splits", "tuning=24", "--seed", "1", "--out", str(studied)]) == 0
    imported = tmp_path / "imported.jsonl"
    imported.write_text(json.dumps({"prompt": "Calculate 1 + 8.", "reward_model": {"ground_truth": "9"}}) + "\n")
    out = tmp_path / "out"
    assert make_pool.main(["--mix", mix, "--splits", "heldout=30,pool=60", "--seed", "2", "--out", str(out),
                           "--exclude", str(studied / "tuning.jsonl"), "--exclude", str(imported)]) == 0
    splits = {name: list(read_rows(out / f"{name}.jsonl")) for name in ("heldout", "pool")}
    problems = {name: [_problem(row) for row in rows] for name, rows in splits.items()}
    sets = {name: set(keys) - {None} for name, keys in problems.items()}
    excluded = {_problem(row) for row in read_rows(studied / "tuning.jsonl")} - {None}
    expected_pair = {"heldout": sum(k in sets["pool"] for k in problems["heldout"]),
                     "pool": sum(k in sets["heldout"] for k in problems["pool"])}
    expected_excluded = {name: sum(k in excluded for k in keys) for name, keys in problems.items()}
    assert expected_pair["heldout"] > 0 and expected_excluded["pool"] > 0  # the case this test is about
    shared = json.loads((out / SPLITS_MANIFEST).read_text())["shared_problems"]
    assert "metadata.expression" in shared["key"] and "rows of split a" in shared["counts"]
    assert shared["pairs"] == {"heldout/pool": expected_pair}
    assert shared["excluded"] == expected_excluded
    assert shared["excluded_rows_not_regenerated"] == 1  # the imported row: its problem is unknown
    assert (f"disjoint by prompt, not by problem): heldout/pool: {expected_pair['heldout']} of 30 heldout rows, "
            f"{expected_pair['pool']} of 60 pool rows") in caplog_loguru.text
    assert f"pool/--exclude: {expected_excluded['pool']} of 60 pool rows" in caplog_loguru.text


def test_the_committed_splits_record_their_shared_problems():
    """recipes/data/real_smollm2: 33 of the 128 held-out rows ask a problem a pool row asks too."""
    manifest = json.loads((REPO / "recipes" / "data" / "real_smollm2" / SPLITS_MANIFEST).read_text())
    shared = manifest["shared_problems"]
    assert shared["pairs"]["heldout/pool"] == {"heldout": 33, "pool": 33}
    assert shared["excluded"] == {"tuning": 11, "heldout": 18, "pool": 37}
