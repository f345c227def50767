"""Prior transfer across regimes: matching, provenance, refusing to mix regimes in a column."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trajval_ops.fields import SCORE_PROVENANCE, WEIGHT
from trajval_ops.pools.identity import TASK_ID
from trajval_ops.pools.io import read_rows
from trajval_ops.pools.transfer import provenance_column, transfer_prior
from trajval_ops.errors import TrajvalInputError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import transfer_prior as transfer_cli  # noqa: E402

PROV = provenance_column(WEIGHT)


def chat(text: str) -> list:
    return [{"role": "user", "content": text}]


def annotated_source(n: int = 5) -> list:
    """A pool scored under regime A: weight i-dependent, with the mapper's provenance."""
    return [{"task_id": f"src-{i}", "prompt": chat(f"Question {i}?"), WEIGHT: 0.05 + 0.1 * i,
             SCORE_PROVENANCE: {"alpha": 0.3, "eps": 0.05}} for i in range(n)]


def target_copy(n: int = 5) -> list:
    """Another copy of the same tasks: other ids, string prompts, reversed order, extra fields."""
    return [{"task_id": f"tgt-{i}", "prompt": f"Question {i}?", "label": str(i)} for i in reversed(range(n))]


def test_copy_matched_by_prompt_hash_keeps_target_order_and_records_provenance():
    rows, report = transfer_prior(annotated_source(), target_copy(), regime="Qwen3-1.7B/GRPO/math",
                                  source_name="a.jsonl", source_sha256="abc")
    assert [r["task_id"] for r in rows] == [f"tgt-{i}" for i in reversed(range(5))]
    assert [r[WEIGHT] for r in rows] == pytest.approx([0.05 + 0.1 * i for i in reversed(range(5))])
    assert all(r["label"] == str(i) for r, i in zip(rows, reversed(range(5))))
    for row in rows:
        prov = row[PROV]
        assert prov["regime"] == "Qwen3-1.7B/GRPO/math" and prov["matched"] is True
        assert prov["source_pool"] == "a.jsonl" and prov["source_sha256"] == "abc"
        assert prov["source_task_id"] == "src-" + row["task_id"].split("-")[1]
        assert prov["source_score_provenance"] == {"alpha": 0.3, "eps": 0.05}
    assert (report.matched_rows, report.unmatched_rows, report.matched_fraction) == (5, 0, 1.0)


def test_match_by_task_id_with_dotted_keys():
    source = [{"extra_info": {"index": f"t{i}"}, WEIGHT: float(i)} for i in range(3)]
    target = [{"extra_info": json.dumps({"index": f"t{i}"}), "prompt": "other text"} for i in (2, 0)]
    rows, report = transfer_prior(source, target, regime="A", match="task_id", source_key="extra_info.index")
    assert [r[WEIGHT] for r in rows] == [2.0, 0.0]
    assert report.source_tasks_not_in_target == 1


def test_overlapping_pool_unmatched_rows_error_or_fill():
    target = target_copy(3) + [{"task_id": "new", "prompt": "A new question?"}]
    with pytest.raises(TrajvalInputError, match=r"1 of 4 target rows have no match.*row 3 \(task_id='new'\)"):
        transfer_prior(annotated_source(), target, regime="A")
    rows, report = transfer_prior(annotated_source(), target, regime="A", unmatched="median")
    assert rows[3][WEIGHT] == pytest.approx(0.25)  # median of 0.05..0.45
    assert rows[3][PROV]["matched"] is False and rows[3][PROV]["fill"] == "median"
    assert (report.matched_rows, report.unmatched_rows, report.source_tasks_not_in_target) == (3, 1, 2)
    floor_rows, _ = transfer_prior(annotated_source(), target, regime="A", unmatched="floor")
    assert floor_rows[3][WEIGHT] == 0.05  # the source's eps
    null_rows, _ = transfer_prior(annotated_source(), target, regime="A", unmatched="null")
    assert null_rows[3][WEIGHT] is None


def test_refuses_to_mix_regimes_in_one_column():
    target = target_copy()
    target[2][WEIGHT] = 0.7  # the target's own prior (another regime)
    with pytest.raises(TrajvalInputError, match=r"row 2 \(task_id='tgt-2'\).*'trajval_weight'.*mix regimes"):
        transfer_prior(annotated_source(), target, regime="A")
    rows, _ = transfer_prior(annotated_source(), target, regime="A", weight_column="trajval_weight_from_A")
    assert rows[2][WEIGHT] == 0.7 and rows[2]["trajval_weight_from_A"] == pytest.approx(0.25)
    assert rows[2]["trajval_weight_from_A_provenance"]["regime"] == "A"
    replaced, _ = transfer_prior(annotated_source(), target, regime="A", overwrite=True)
    assert replaced[2][WEIGHT] == pytest.approx(0.25) and replaced[2][PROV]["regime"] == "A"


def test_chained_transfer_keeps_the_original_regime_and_names_it_on_conflict():
    carried, _ = transfer_prior(annotated_source(), target_copy(), regime="A")
    again, _ = transfer_prior(carried, target_copy(), regime=None)
    assert all(r[PROV]["regime"] == "A" for r in again)
    with pytest.raises(TrajvalInputError, match=r"source row 0 \(task_id='tgt-4'\): source weights record regime 'A'.*not the given 'B'"):
        transfer_prior(carried, target_copy(), regime="B")
    with pytest.raises(TrajvalInputError, match="carried from regime 'A'"):
        transfer_prior(annotated_source(), carried, regime="B")


def test_carrying_a_carried_column_records_its_own_score_provenance_and_eps():
    """A column that was itself carried records (and floors at) the score provenance it was carried
    with, not the row's own trajval_score_provenance (another regime's scoring)."""
    own = {"alpha": 1.0, "eps": 0.001, "tag": "B"}
    target = [dict(row, **{WEIGHT: 0.3, SCORE_PROVENANCE: own}) for row in target_copy(3)]
    carried, _ = transfer_prior(annotated_source(3), target, regime="A", weight_column="w_a")
    assert carried[0]["w_a_provenance"]["source_score_provenance"] == {"alpha": 0.3, "eps": 0.05}
    onward = [{"prompt": "Question 1?"}, {"prompt": "A new question?"}]
    rows, report = transfer_prior(carried, onward, regime=None, source_weight_column="w_a",
                                  weight_column="w", unmatched="floor")
    assert report.regime == "A" and report.fill_value == 0.05 and rows[1]["w"] == 0.05
    assert rows[0]["w_provenance"]["source_score_provenance"] == {"alpha": 0.3, "eps": 0.05}
    # the row's own trajval_weight is still read with its trajval_score_provenance
    rows, report = transfer_prior(carried, onward, regime="B", unmatched="floor")
    assert report.fill_value == 0.001 and rows[0]["trajval_weight_provenance"]["source_score_provenance"] == own


def test_source_that_mixes_regimes_or_has_no_regime_is_refused():
    carried, _ = transfer_prior(annotated_source(), target_copy(), regime="A")
    carried[0][PROV] = dict(carried[0][PROV], regime="B")
    with pytest.raises(TrajvalInputError, match="mixes regimes"):
        transfer_prior(carried, target_copy(), regime=None)
    with pytest.raises(TrajvalInputError, match="source-regime"):
        transfer_prior(annotated_source(), target_copy(), regime=None)


def test_source_whose_rows_record_different_score_provenances_is_refused_under_every_policy():
    """Two scored pools concatenated: one weight column made under two scorings is refused, naming
    two rows that differ, whatever --unmatched is (floor included, even with nothing to fill)."""
    source = annotated_source(4)
    for row in source[2:]:
        row[SCORE_PROVENANCE] = {"alpha": 0.3, "eps": 0.001}
    for unmatched in ("error", "null", "median", "floor"):
        with pytest.raises(TrajvalInputError, match=r"mixes score provenances: source row 0 \(task_id='src-0'\) and "
                                                    r"source row 2 \(task_id='src-2'\) differ \(eps: 0.05 vs 0.001"):
            transfer_prior(source, target_copy(4), regime="A", unmatched=unmatched)
    # shards of one pool scored by separate runs with the same settings: one prior
    shards = annotated_source(4)
    for i, row in enumerate(shards):
        row[SCORE_PROVENANCE] = {**row[SCORE_PROVENANCE], "prior_cost": {"completions": 100 + i // 2},
                                 "trajval_ops_version": f"0.1.{i // 2}"}
    assert transfer_prior(shards, target_copy(4), regime="A", unmatched="floor")[1].matched_rows == 4
    # rows without a score provenance (a hand-made weight) do not count as another scoring
    del source[2][SCORE_PROVENANCE], source[3][SCORE_PROVENANCE]
    rows, report = transfer_prior(source, target_copy(4) + [{"prompt": "new"}], regime="A", unmatched="floor")
    assert report.fill_value == 0.05 and rows[0][PROV]["source_score_provenance"] is None


def test_source_duplicates_and_bad_weights():
    source = annotated_source(2) + [dict(annotated_source(2)[1])]  # a resampled pool repeats rows
    rows, report = transfer_prior(source, target_copy(2), regime="A")
    assert report.source_tasks == 2 and len(rows) == 2
    source[2] = dict(source[2], **{WEIGHT: 9.0})
    with pytest.raises(TrajvalInputError, match=r"row 2 \(task_id='src-1'\): same task as row 1"):
        transfer_prior(source, target_copy(2), regime="A")
    for bad in ("0.3", float("nan"), -1.0, None):
        source = annotated_source(2)
        source[1][WEIGHT] = bad
        with pytest.raises(TrajvalInputError, match=r"source row 1 \(task_id='src-1'\): field 'trajval_weight'"):
            transfer_prior(source, target_copy(2), regime="A")
    target = target_copy(2)
    del target[1]["prompt"]
    with pytest.raises(TrajvalInputError, match=r"target row 1 \(task_id='tgt-0'\): field 'prompt'"):
        transfer_prior(annotated_source(2), target, regime="A")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_writes_output_and_report_and_fails_cleanly(tmp_path, capsys):
    source = write_jsonl(tmp_path / "src.jsonl", annotated_source())
    target = write_jsonl(tmp_path / "tgt.jsonl", target_copy())
    out = tmp_path / "out.jsonl"
    assert transfer_cli.main([str(source), str(target), str(out), "--source-regime", "A"]) == 0
    assert "matched 5 of 5" in capsys.readouterr().out
    rows = list(read_rows(out))
    assert [r[TASK_ID] for r in rows] == [r[TASK_ID] for r in target_copy()]
    assert all(len(r[PROV]["source_sha256"]) == 64 for r in rows)
    report = json.loads((tmp_path / "out.jsonl.report.json").read_text())
    assert report["matched_rows"] == 5 and report["regime"] == "A"
    # the output now holds regime A: carrying regime B onto it is refused, nothing is written
    again = tmp_path / "again.jsonl"
    assert transfer_cli.main([str(source), str(out), str(again), "--source-regime", "B"]) == 2
    assert "mix regimes" in capsys.readouterr().err and not again.exists()
    # a folder where a pool file belongs: one line and exit 2, not a traceback
    (tmp_path / "folder").mkdir()
    folder = str(tmp_path / "folder")
    for args in ([folder, str(target), str(again)], [str(source), folder, str(again)]):
        assert transfer_cli.main([*args, "--source-regime", "A"]) == 2
        # the reader's message for either pool (the source was hashed first: '[Errno 21] Is a directory')
        assert capsys.readouterr().err == (f"transfer_prior: error: {folder} is a folder; this reads one pool "
                                           f"file (.jsonl, .json or .parquet)\n")
        assert not again.exists()
    assert transfer_cli.main([str(tmp_path / "absent.jsonl"), str(target), str(again), "--source-regime", "A"]) == 2
    assert capsys.readouterr().err == f"transfer_prior: error: pool file not found: {tmp_path / 'absent.jsonl'}\n"
