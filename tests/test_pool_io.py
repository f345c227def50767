"""JSON rows <-> Arrow tables: every value comes back as it went in, bad input names the line."""

import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajval_ops.pools import io as pool_io
from trajval_ops.pools.io import jsonl
from trajval_ops.errors import TrajvalInputError


def canonical(rows) -> list[str]:
    """JSON text that tells 1 from 1.0 from true and a null key from an absent one."""
    return [json.dumps(row, sort_keys=True) for row in rows]


def round_trip(tmp_path, rows, suffix=".jsonl"):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    table = pool_io.read_table(src)
    out = tmp_path / f"out{suffix}"
    pool_io.write_table(table, out)
    return table, [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]


MIXED = [
    {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"style": "rule", "ground_truth": "2"},
     "extra_info": {"index": 1}, "score": 1, "flag": True, "w": 0.5},
    {"prompt": "2+2?", "reward_model": json.dumps({"style": "rule", "ground_truth": "4"}),
     "extra_info": {"index": "b", "split": "x"}, "score": 1.5, "w": 0.25},
    {"prompt": [{"role": "user", "content": "3+3? é"}], "reward_model": {"style": "rule", "ground_truth": 6},
     "extra_info": {"index": 3, "note": None}, "score": None, "flag": None, "w": 0.125, "late": "only here"},
]


def test_mixed_columns_come_back_unchanged(tmp_path):
    table, out = round_trip(tmp_path, MIXED)
    assert canonical(out) == canonical(MIXED)
    json_columns = {f.name for f in table.schema if pool_io.is_json_type(f.type)}
    # "w" and the owned types are native; the rest cannot be one Arrow type without rewriting
    assert json_columns == {"prompt", "reward_model", "extra_info", "score", "flag", "late"}
    assert table.schema.field("w").type == pa.float64()


def test_datasets_sees_the_original_values(tmp_path):
    from datasets import Dataset

    table, _ = round_trip(tmp_path, MIXED)
    rows = list(Dataset(table))
    assert rows[1]["reward_model"] == json.dumps({"style": "rule", "ground_truth": "4"})  # still a string
    assert rows[1]["prompt"] == "2+2?"
    assert rows[2]["reward_model"]["ground_truth"] == 6
    assert rows[0]["score"] == 1 and isinstance(rows[0]["score"], int)


def test_consistent_columns_stay_native(tmp_path):
    rows = [{"id": f"t{i}", "prompt": [{"role": "user", "content": str(i)}],
             "reward_model": {"ground_truth": str(i), "style": "rule"}, "trajval_r_early": i / 10} for i in range(5)]
    table, out = round_trip(tmp_path, rows)
    assert not any(pool_io.is_json_type(f.type) for f in table.schema)
    assert pa.types.is_struct(table.schema.field("reward_model").type)
    assert canonical(out) == canonical(rows)


def test_chunks_of_different_types_and_late_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "CHUNK_ROWS", 2)  # blocks of 2 rows: a column meets its types late
    rows = [{"a": 1}, {"a": 2}, {"a": "x", "b": [1]}, {"a": 3, "b": [2]}, {"a": None, "b": None}]
    table, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)
    assert pool_io.is_json_type(table.schema.field("a").type)


def test_null_chunks_join_a_native_column(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "CHUNK_ROWS", 2)  # blocks of 2 rows: a column meets its types late
    rows = [{"a": None}, {"a": None}, {"a": "x"}, {"a": "y"}]
    table, out = round_trip(tmp_path, rows)
    assert table.schema.field("a").type == pa.string()
    assert canonical(out) == canonical(rows)


def test_big_integers_and_empty_containers(tmp_path):
    rows = [{"big": 2**70, "e": {}, "l": []}, {"big": 1, "e": {}, "l": []}]
    _, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)


@pytest.mark.parametrize("value", [{}, {"a": {}, "b": 1}, [{}], [{"a": [{}]}]])
def test_empty_objects_round_trip_through_parquet_and_jsonl(tmp_path, value):
    # a struct without fields (what `{}` gives) cannot be written to parquet: the column is exact JSON
    rows = [{"id": 1, "x": value}, {"id": 2, "x": value}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(row) + "\n" for row in rows))
    table = pool_io.read_table(src)
    assert pool_io.is_json_type(table.schema.field("x").type)
    for name in ("out.parquet", "out.jsonl"):
        pool_io.write_table(table, tmp_path / name)
        assert canonical(pool_io.read_rows(tmp_path / name)) == canonical(rows), name
    assert list(pool_io.read_rows(tmp_path / "out.jsonl")) == rows


def test_parquet_keeps_nested_fields_nested(tmp_path):
    import pyarrow.parquet as pq

    rows = [{"id": "a", "reward_model": {"ground_truth": "1"}}, {"id": "b", "reward_model": {"ground_truth": "2"}}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pool_io.write_table(pool_io.read_table(src), tmp_path / "out.parquet")
    back = pq.read_table(tmp_path / "out.parquet")
    assert pa.types.is_struct(back.schema.field("reward_model").type)
    assert back.to_pylist() == rows
    # and a parquet pool reads back as the same table
    assert pool_io.read_table(tmp_path / "out.parquet").to_pylist() == rows


def test_folder_of_files_concatenates_by_name(tmp_path):
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "a.jsonl").write_text(json.dumps({"x": 1, "y": "a"}) + "\n")
    (tmp_path / "pool" / "b.jsonl").write_text(json.dumps({"x": "s"}) + "\n")
    table = pool_io.read_table(tmp_path / "pool")
    out = tmp_path / "out.jsonl"
    pool_io.write_table(table, out)
    assert canonical(json.loads(line) for line in out.read_text().splitlines()) == canonical([{"x": 1, "y": "a"}, {"x": "s"}])


@pytest.mark.parametrize("content,message", [
    (b'{"a": 1}\n\n{"a": "\xff\xfe"}\n', "line 3 (row 1) is not valid UTF-8: byte 7 of the line (byte offset 17 in the file)"),
    (b'{"a": 1}\nnull\n', "line 2 (row 1) is null, not a JSON object"),
    (b'{"a": 1}\n[1, 2]\n', "line 2 (row 1) is a JSON array, not a JSON object"),
    (b'{"a": 1}\n{"a": \n', "line 2 (row 1) is not valid JSON"),
    (b"\n  \n", "the pool is empty (0 rows)"),
    (b'{"trajval_r_early": 0.5}\n{"trajval_r_early": "0.5"}\n',
     "row 1: field 'trajval_r_early' holds str '0.5' where earlier rows hold a number"),
])
def test_bad_input_names_the_line(tmp_path, content, message):
    path = tmp_path / "pool.jsonl"
    path.write_bytes(content)
    with pytest.raises(TrajvalInputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        pool_io.read_table(path)


def test_missing_file_and_empty_folder(tmp_path):
    with pytest.raises(TrajvalInputError, match="pool file not found"):
        pool_io.read_table(tmp_path / "nope.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrajvalInputError, match="no .jsonl, .json or .parquet file"):
        pool_io.read_table(tmp_path / "empty")


def test_failed_write_leaves_previous_file(tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    out.write_text("previous\n")

    def broken(table, handle):
        handle.write(b"partial")
        raise KeyboardInterrupt

    from trajval_ops.pools.io import write

    monkeypatch.setattr(write, "write_json_lines", broken)
    with pytest.raises(KeyboardInterrupt):
        pool_io.write_table(pa.table({"a": [1]}), out)
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("abc"), children, max_size=3),
    max_leaves=8,
)
json_rows = st.lists(st.dictionaries(st.sampled_from(["p", "q", "r"]), json_values, max_size=3), min_size=1, max_size=8)


@given(rows=json_rows)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_json_rows_round_trip(tmp_path, rows):
    _, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)


@pytest.mark.parametrize("values", [
    [{"a": {"x": 1.5}}, {"a": {"x": 2}}],                  # an integer in a float field, nested
    [{"a": [0.5, 1]}, {"a": [0.25]}],                       # ... inside a list
    [{"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}],             # a nested key absent in one row
    [{"a": {"x": None}}, {"a": {}}],                        # null value vs absent key
    [{"a": [{"r": "u", "c": "1"}]}, {"a": [{"r": "u"}]}],   # chat turns with different keys
])
def test_nested_values_arrow_would_change_stay_exact(tmp_path, values):
    table, out = round_trip(tmp_path, values)
    assert canonical(out) == canonical(values)
    assert pool_io.is_json_type(table.schema.field("a").type)


def test_nested_floats_and_nulls_that_round_trip_stay_native(tmp_path):
    rows = [{"a": {"x": 0.5, "y": None, "z": [1.25]}}, {"a": {"x": 2.5, "y": "s", "z": []}}, {"a": None}]
    table, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)
    assert pa.types.is_struct(table.schema.field("a").type)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "x.jsonl"
    assert pool_io.write_rows(target, [{"a": 1}]) == 1

    def rows():
        yield {"a": 2}
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        pool_io.write_rows(target, rows())
    assert target.read_text() == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["x.jsonl"]


def test_rows_round_trip_through_parquet_and_jsonl_alike(tmp_path):
    rows = [{"id": 1, "prompt": [{"role": "user", "content": "2+2"}], "x": 1},
            {"id": 2, "prompt": "plain text", "x": 1.5, "extra": None},
            {"id": 3, "prompt": "no x"}]
    for name in ("rows.jsonl", "rows.parquet"):
        assert pool_io.write_rows(tmp_path / name, rows) == 3
        assert list(pool_io.read_rows(tmp_path / name)) == rows, name


def test_read_rows_names_a_missing_file(tmp_path):
    with pytest.raises(TrajvalInputError, match="pool file not found"):
        list(pool_io.read_rows(tmp_path / "nope.parquet"))


def test_gzipped_json_lines_read_as_they_would_uncompressed(tmp_path):
    import gzip

    rows = [{"id": i, "x": [i, {"y": "z"}]} for i in range(5)]
    with gzip.open(tmp_path / "pool.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows))
    assert pool_io.table_rows(pool_io.read_table(tmp_path / "pool.jsonl.gz")) == rows
    assert list(pool_io.read_rows(tmp_path / "pool.jsonl.gz")) == rows
    assert pool_io.count_rows(tmp_path / "pool.jsonl.gz") == 5


def test_a_json_array_file_reads_as_its_rows(tmp_path):
    rows = [{"id": 1, "a": 1.5}, {"id": 2, "a": 2}]
    (tmp_path / "pool.json").write_text(json.dumps(rows, indent=2))
    assert list(pool_io.read_rows(tmp_path / "pool.json")) == rows
    assert canonical(pool_io.table_rows(pool_io.read_table(tmp_path / "pool.json"))) == canonical(rows)
    (tmp_path / "bad.json").write_text(json.dumps([{"id": 1}, 3]))
    with pytest.raises(TrajvalInputError, match="element 1 of the array is a JSON number"):
        pool_io.read_table(tmp_path / "bad.json")


def test_a_pool_folder_leaves_out_work_folders_and_hidden_files(tmp_path):
    (tmp_path / "part-0.jsonl").write_text('{"id": 1}\n')
    work = tmp_path / "20261124_101200_e68a15"  # what Data-Juicer leaves beside an export
    work.mkdir()
    (work / "cli.yaml").write_text("x: 1\n")
    (work / "events_20261124_101200.jsonl").write_text('{"event_type": "job_start"}\n')
    (tmp_path / ".part-1.jsonl.123.abc.tmp").write_text('{"id": 2}\n')
    assert pool_io.pool_files(tmp_path) == [tmp_path / "part-0.jsonl"]
    assert pool_io.read_table(tmp_path).to_pylist() == [{"id": 1}]


def test_a_pool_folder_leaves_out_hidden_folders(tmp_path):
    # a notebook's checkpoint copy of a pool file duplicated every row silently
    (tmp_path / "part-0.jsonl").write_text('{"id": 1}\n')
    for hidden in (".ipynb_checkpoints", "sub/.cache"):
        (tmp_path / hidden).mkdir(parents=True)
        (tmp_path / hidden / "part-0.jsonl").write_text('{"id": 1}\n')
    (tmp_path / "sub" / "part-1.jsonl").write_text('{"id": 2}\n')
    assert pool_io.pool_files(tmp_path) == [tmp_path / "part-0.jsonl", tmp_path / "sub" / "part-1.jsonl"]
    assert pool_io.read_table(tmp_path).to_pylist() == [{"id": 1}, {"id": 2}]
    # a pool folder that itself lies below a hidden folder is read
    assert pool_io.read_table(tmp_path / "sub" / ".cache").to_pylist() == [{"id": 1}]


@pytest.mark.parametrize("text, message", [
    ('{"a": ' + "[" * 5000 + "]" * 5000 + "}\n", "nested deeper than can be read"),
    ('{"id": 1, "prompt": "x\\ud800y"}\n', r"lone surrogate escape \(\\ud800"),
])
def test_unreadable_json_is_named_by_file_and_line(tmp_path, text, message):
    path = tmp_path / "pool.jsonl"
    path.write_text('{"id": 0}\n' + text)
    with pytest.raises(TrajvalInputError, match=f"pool.jsonl: line 2 \\(row 1\\) .*{message}"):
        pool_io.read_table(path)


def test_a_killed_writes_temporary_file_is_removed_by_the_next_write(tmp_path):
    import subprocess
    import sys

    target = tmp_path / "out.jsonl"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.jsonl.{dead.pid}.abcd.tmp"  # what a SIGKILL in the middle of a write leaves
    stale.write_text("half a row")
    mine = tmp_path / f".out.jsonl.{os.getpid()}.efgh.tmp"
    mine.write_text("a write of this process in progress")
    pool_io.write_rows(target, [{"a": 1}])
    assert not stale.exists() and mine.exists()
    assert target.read_text() == '{"a": 1}\n'


def test_a_scored_folder_mixing_json_lines_and_parquet_reads_as_its_rows(tmp_path):
    """A JSON-lines file stores the run provenance as references, a parquet file as native
    columns: a folder of both reads back every row's provenance (before, it was refused)."""
    from trajval_ops.fields import SCORE_PROVENANCE

    provenance = {"run": "a", "alpha": 1.0}
    table = pool_io.read_table(_written(tmp_path / "src.jsonl", [{"id": i, SCORE_PROVENANCE: provenance} for i in range(3)]))
    (tmp_path / "pool").mkdir()
    pool_io.write_table(table, tmp_path / "pool" / "a.jsonl")
    pool_io.write_table(table, tmp_path / "pool" / "b.parquet")
    folder = pool_io.read_table(tmp_path / "pool")
    assert folder.column("id").to_pylist() == [0, 1, 2, 0, 1, 2]
    assert folder.column(SCORE_PROVENANCE).to_pylist() == [provenance] * 6


def test_a_json_lines_file_split_by_lines_resolves_references_from_its_first_part(tmp_path):
    from trajval_ops.fields import SCORE_PROVENANCE

    rows = [{"id": i, SCORE_PROVENANCE: {"run": "a"}} for i in range(4)]
    lines = _written(tmp_path / "whole.jsonl", rows).read_text().splitlines(keepends=True)
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "part-0.jsonl").write_text("".join(lines[:2]))
    (tmp_path / "pool" / "part-1.jsonl").write_text("".join(lines[2:]))
    assert pool_io.table_rows(pool_io.read_table(tmp_path / "pool")) == rows
    (tmp_path / "pool" / "part-0.jsonl").unlink()
    with pytest.raises(TrajvalInputError, match=r"part-1.jsonl: row 0 \(id=2\).*names a provenance record"):
        pool_io.read_table(tmp_path / "pool")


def _written(path, rows):
    pool_io.write_rows(path, rows)
    return path


def test_a_record_without_references_is_named_in_a_folder_too(tmp_path):
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "a.jsonl").write_text(json.dumps({"id": 1, "trajval_provenance_record": {"x": 1}}) + "\n")
    with pytest.raises(TrajvalInputError, match="field 'trajval_provenance_record' without 'trajval_provenance'"):
        pool_io.read_table(tmp_path / "pool")


@pytest.mark.parametrize("name", ["pool.jsonl", "pool.jsonl.gz", "pool.json"])
def test_a_byte_order_mark_is_read_past(tmp_path, name):
    """A UTF-8 file beginning with a byte-order mark (as Windows tools and some editors write it)
    was refused: "line 1 (row 0) is not valid JSON: Unexpected UTF-8 BOM"."""
    import gzip

    rows = [{"id": 1, "a": "é"}, {"id": 2, "a": None}]
    text = json.dumps(rows) if name == "pool.json" else "".join(json.dumps(row) + "\n" for row in rows)
    data = jsonl.UTF8_BOM + text.encode("utf-8")
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert list(pool_io.read_rows(tmp_path / name)) == rows
    assert canonical(pool_io.table_rows(pool_io.read_table(tmp_path / name))) == canonical(rows)
    assert pool_io.count_rows(tmp_path / name) == 2


def test_a_bad_line_after_a_byte_order_mark_is_named_at_its_offset_in_the_file(tmp_path):
    path = tmp_path / "pool.jsonl"
    path.write_bytes(jsonl.UTF8_BOM + b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(TrajvalInputError, match=r"line 2 \(row 1\) is not valid UTF-8: byte 7 of the line \(byte "
                                                 r"offset 19 in the file\)"):
        pool_io.read_table(path)
