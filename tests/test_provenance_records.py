"""Run provenance stored once per JSON-lines pool, a short reference per row (issue 26 item 3)."""

import json
import random

import pytest

from tests.conftest import read_jsonl_raw
from trajval_ops.pools import io as pool_io
from trajval_ops.errors import TrajvalInputError
from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF, RESAMPLE_PROVENANCE, SCORE_PROVENANCE
from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler
from trajval_ops.pools.transfer import transfer_prior

SCORE_COLUMNS = ("trajval_delta", "trajval_score", "trajval_weight", "trajval_profile")


def score(table, **params):
    op = TrajvalLearnabilityMapper(**params)
    op.check_pool(table)
    return op.score_pool(table)


def column_bytes(rows, names) -> int:
    """Bytes of ``,"name":value`` for each named field of each row."""
    return sum(len(json.dumps({n: r[n]}, separators=(",", ":"))) - 1 for r in rows for n in names if n in r)


def scored_file(tmp_path, name, fixture_rows, **params):
    source = tmp_path / f"{name}_in.jsonl"
    pool_io.write_rows(source, fixture_rows)
    path = tmp_path / f"{name}.jsonl"
    pool_io.write_table(score(pool_io.read_table(source), **params), path)
    return source, path


def test_a_scored_pool_grows_by_its_new_columns_and_at_most_32_bytes_a_row(tmp_path, fixture_rows):
    rows = fixture_rows * 50  # 2,400 rows: one record shared by all
    for i, row in enumerate(rows):
        row = dict(row, extra_info={"index": f"r{i}"})
        rows[i] = row
    source, scored = scored_file(tmp_path, "big", rows)
    written = read_jsonl_raw(scored)
    growth = scored.stat().st_size - source.stat().st_size - column_bytes(written, SCORE_COLUMNS)
    assert growth <= 32 * len(rows)
    assert all(isinstance(r[PROVENANCE_REF], str) and len(r[PROVENANCE_REF]) == 6 for r in written)
    assert PROVENANCE_RECORD in written[0] and not any(PROVENANCE_RECORD in r for r in written[1:])
    # every reader of the package sees the full provenance on every row
    for row in pool_io.read_rows(scored):
        assert row[SCORE_PROVENANCE]["alpha"] == 0.3 and PROVENANCE_REF not in row
    assert pool_io.table_rows(pool_io.read_table(scored))[-1][SCORE_PROVENANCE]["eps"] == 0.05


def test_concatenated_runs_resolve_each_row_to_its_own_run(tmp_path, fixture_rows):
    _, a = scored_file(tmp_path, "a", fixture_rows[:20], alpha=0.3)
    _, b = scored_file(tmp_path, "b", fixture_rows[20:], alpha=0.5, eps=0.1)
    both = tmp_path / "both.jsonl"
    both.write_bytes(a.read_bytes() + b.read_bytes())  # cat a b > both
    expected = [0.3] * 20 + [0.5] * 28
    assert [r[SCORE_PROVENANCE]["alpha"] for r in pool_io.read_rows(both)] == expected
    table = pool_io.read_table(both)
    assert [p["alpha"] for p in table.column(SCORE_PROVENANCE).to_pylist()] == expected
    # resampled together, written, read back: each drawn row keeps its source run's score provenance
    resampled = TrajvalWeightedResampler(mode="multinomial", num_samples=200, seed=1).resample_table(table)
    out_path = tmp_path / "resampled.jsonl"
    pool_io.write_table(resampled, out_path)
    raw = read_jsonl_raw(out_path)
    assert len({r[PROVENANCE_REF] for r in raw}) == 2 and sum(PROVENANCE_RECORD in r for r in raw) == 2
    for row in pool_io.read_rows(out_path):
        assert row[SCORE_PROVENANCE]["alpha"] == expected[row["trajval_source_row"]]
        assert row[RESAMPLE_PROVENANCE]["mode"] == "multinomial"


def test_shuffled_lines_still_resolve(tmp_path, fixture_rows):
    _, scored = scored_file(tmp_path, "s", fixture_rows)
    lines = scored.read_bytes().splitlines()
    random.Random(0).shuffle(lines)
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_bytes(b"\n".join(lines) + b"\n")
    rows = list(pool_io.read_rows(shuffled))
    assert len(rows) == len(fixture_rows) and all(r[SCORE_PROVENANCE]["alpha"] == 0.3 for r in rows)
    assert pool_io.read_table(shuffled).column(SCORE_PROVENANCE).null_count == 0


def test_a_reference_whose_record_was_cut_away_names_the_row(tmp_path, fixture_rows):
    _, scored = scored_file(tmp_path, "s", fixture_rows)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"\n".join(scored.read_bytes().splitlines()[1:]) + b"\n")  # tail -n +2
    with pytest.raises(TrajvalInputError, match=r"row 0 \(extra_info.index='fx-001'\): field 'trajval_provenance'"):
        pool_io.read_table(cut)
    with pytest.raises(TrajvalInputError, match="was left out"):
        list(pool_io.read_rows(cut))


def test_an_edited_record_names_the_row(tmp_path, fixture_rows):
    _, scored = scored_file(tmp_path, "s", fixture_rows)
    edited = tmp_path / "edited.jsonl"
    edited.write_text(scored.read_text().replace('"alpha":0.3', '"alpha":0.9', 1))
    for read in (pool_io.read_table, lambda p: list(pool_io.read_rows(p))):
        with pytest.raises(TrajvalInputError, match=r"row 0 .*does not match .*the record was edited"):
            read(edited)


def test_rows_without_run_provenance_round_trip_exactly(tmp_path, fixture_rows):
    scored = score(pool_io.table_from_columns({k: [r[k] for r in fixture_rows] for k in fixture_rows[0]}))
    rows = pool_io.table_rows(scored)
    for row in rows[::3]:  # some rows were never scored
        del row[SCORE_PROVENANCE]
    path = tmp_path / "mixed.jsonl"
    pool_io.write_rows(path, rows)
    assert list(pool_io.read_rows(path)) == rows
    table = pool_io.read_table(path)
    assert pool_io.table_rows(table) == rows
    assert pool_io.table_rows(pool_io.expand_provenance(pool_io.compact_provenance(table))) == rows
    again = tmp_path / "again.jsonl"
    pool_io.write_table(table, again)
    assert read_jsonl_raw(again) == read_jsonl_raw(path)  # the table writer and the row writer agree


def test_transfer_prior_keeps_the_source_provenance(tmp_path, fixture_rows):
    _, scored = scored_file(tmp_path, "s", fixture_rows, alpha=0.5)
    target = [{k: v for k, v in r.items() if not k.startswith("trajval_")} for r in fixture_rows]
    out, _ = transfer_prior(pool_io.read_rows(scored), target, regime="tiny/GRPO/arith", match="task_id",
                            source_key="extra_info.index")
    path = tmp_path / "carried.jsonl"
    pool_io.write_rows(path, out)
    carried = list(pool_io.read_rows(path))
    assert all(r["trajval_weight_provenance"]["source_score_provenance"]["alpha"] == 0.5 for r in carried)


def test_parquet_keeps_native_provenance_columns(tmp_path, fixture_rows):
    _, scored = scored_file(tmp_path, "s", fixture_rows)
    path = tmp_path / "scored.parquet"
    pool_io.write_table(pool_io.read_table(scored), path)
    import pyarrow.parquet as pq

    assert SCORE_PROVENANCE in pq.read_schema(path).names and PROVENANCE_REF not in pq.read_schema(path).names
    assert pool_io.table_rows(pool_io.read_table(path)) == list(pool_io.read_rows(scored))


def test_a_pandas_round_trip_reads_alike_in_every_reader(tmp_path, fixture_rows, capsys):
    """Issue 36, item 8: pandas writes `"trajval_provenance_record": null` on every row that had
    no record; the row reader (report, transfer-prior, cost) and the Arrow reader (dj-process)
    read it alike, as absent."""
    import pandas as pd

    from trajval_ops.cli import cost as cost_cli
    from trajval_ops.cli import report as report_cli
    from trajval_ops.cli import transfer_prior as transfer_cli

    _, scored = scored_file(tmp_path, "s", fixture_rows, alpha=0.5)
    through_pandas = tmp_path / "pandas.jsonl"
    pd.read_json(scored, lines=True).to_json(through_pandas, orient="records", lines=True)
    raw = read_jsonl_raw(through_pandas)
    assert raw[1][PROVENANCE_RECORD] is None  # what pandas writes
    by_rows = [row[SCORE_PROVENANCE] for row in pool_io.read_rows(through_pandas)]
    by_table = pool_io.read_table(through_pandas).column(SCORE_PROVENANCE).to_pylist()
    assert by_rows == by_table and all(p["alpha"] == 0.5 for p in by_rows)
    assert all(PROVENANCE_RECORD not in row for row in pool_io.read_rows(through_pandas))
    assert report_cli.main(["--pool", str(through_pandas), "--out", str(tmp_path / "report")]) == 0
    assert cost_cli.main(["--pool", str(through_pandas), "--json"]) == 0
    target = tmp_path / "target.jsonl"
    pool_io.write_rows(target, [{k: v for k, v in r.items() if not k.startswith("trajval_")} for r in fixture_rows])
    assert transfer_cli.main([str(through_pandas), str(target), str(tmp_path / "carried.jsonl"), "--match", "task_id",
                              "--source-key", "extra_info.index", "--source-regime", "tiny"]) == 0
    capsys.readouterr()


def test_a_column_of_the_users_own_named_trajval_provenance_is_said_to_be_reserved(tmp_path):
    path = tmp_path / "own.jsonl"
    path.write_text(json.dumps({"id": "a", "trajval_provenance": "human-labelled"}) + "\n")
    for read in (lambda: list(pool_io.read_rows(path)), lambda: pool_io.read_table(path)):
        with pytest.raises(TrajvalInputError, match="'trajval_provenance' and 'trajval_provenance_record' are "
                                                    "reserved .* must be renamed"):
            read()
