"""JSON rows <-> Arrow tables: every value comes back as it went in, bad input names the line."""

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajval_ops import jsontable
from trajval_ops.validation import TrajvalInputError


def canonical(rows) -> list[str]:
    """JSON text that tells 1 from 1.0 from true and a null key from an absent one."""
    return [json.dumps(row, sort_keys=True) for row in rows]


def round_trip(tmp_path, rows, suffix=".jsonl"):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    table = jsontable.read_table(src)
    out = tmp_path / f"out{suffix}"
    jsontable.write_table(table, out)
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
    json_columns = {f.name for f in table.schema if jsontable.is_json_type(f.type)}
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
    assert not any(jsontable.is_json_type(f.type) for f in table.schema)
    assert pa.types.is_struct(table.schema.field("reward_model").type)
    assert canonical(out) == canonical(rows)


def test_chunks_of_different_types_and_late_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(jsontable, "CHUNK_ROWS", 2)
    rows = [{"a": 1}, {"a": 2}, {"a": "x", "b": [1]}, {"a": 3, "b": [2]}, {"a": None, "b": None}]
    table, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)
    assert jsontable.is_json_type(table.schema.field("a").type)


def test_null_chunks_join_a_native_column(tmp_path, monkeypatch):
    monkeypatch.setattr(jsontable, "CHUNK_ROWS", 2)
    rows = [{"a": None}, {"a": None}, {"a": "x"}, {"a": "y"}]
    table, out = round_trip(tmp_path, rows)
    assert table.schema.field("a").type == pa.string()
    assert canonical(out) == canonical(rows)


def test_big_integers_and_empty_containers(tmp_path):
    rows = [{"big": 2**70, "e": {}, "l": []}, {"big": 1, "e": {}, "l": []}]
    _, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)


def test_parquet_keeps_nested_fields_nested(tmp_path):
    import pyarrow.parquet as pq

    rows = [{"id": "a", "reward_model": {"ground_truth": "1"}}, {"id": "b", "reward_model": {"ground_truth": "2"}}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jsontable.write_table(jsontable.read_table(src), tmp_path / "out.parquet")
    back = pq.read_table(tmp_path / "out.parquet")
    assert pa.types.is_struct(back.schema.field("reward_model").type)
    assert back.to_pylist() == rows
    # and a parquet pool reads back as the same table
    assert jsontable.read_table(tmp_path / "out.parquet").to_pylist() == rows


def test_folder_of_files_concatenates_by_name(tmp_path):
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "a.jsonl").write_text(json.dumps({"x": 1, "y": "a"}) + "\n")
    (tmp_path / "pool" / "b.jsonl").write_text(json.dumps({"x": "s"}) + "\n")
    table = jsontable.read_table(tmp_path / "pool")
    out = tmp_path / "out.jsonl"
    jsontable.write_table(table, out)
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
        jsontable.read_table(path)


def test_missing_file_and_empty_folder(tmp_path):
    with pytest.raises(TrajvalInputError, match="pool file not found"):
        jsontable.read_table(tmp_path / "nope.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrajvalInputError, match="no .jsonl, .json or .parquet file"):
        jsontable.read_table(tmp_path / "empty")


def test_failed_write_leaves_previous_file(tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    out.write_text("previous\n")

    def broken(table, handle):
        handle.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(jsontable, "write_json_lines", broken)
    with pytest.raises(KeyboardInterrupt):
        jsontable.write_table(pa.table({"a": [1]}), out)
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
    assert jsontable.is_json_type(table.schema.field("a").type)


def test_nested_floats_and_nulls_that_round_trip_stay_native(tmp_path):
    rows = [{"a": {"x": 0.5, "y": None, "z": [1.25]}}, {"a": {"x": 2.5, "y": "s", "z": []}}, {"a": None}]
    table, out = round_trip(tmp_path, rows)
    assert canonical(out) == canonical(rows)
    assert pa.types.is_struct(table.schema.field("a").type)
