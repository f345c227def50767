"""Parquet through the recipes (real ``dj-process``): export and input, both executors.

A recipe writes parquet when ``export_path`` ends in ``.parquet``. Columns whose values have one
type in every row stay native parquet types (a chat list is a list of structs, ``reward_model``
a struct); a column whose JSON type varies between rows is a parquet JSON column (the
``arrow.json`` type), holding each value's exact JSON text. Either way the values read back
equal the JSONL export of the same run.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import FIXTURE_POOL, REPO, dj_process, read_jsonl, write_jsonl
from trajval_ops import core

pytestmark = pytest.mark.slow

#: columns the fixture pool gives one type in every row, and their Arrow types
NESTED = {
    "prompt": "list<element: struct<role: string, content: string>>",
    "reward_model": "struct<ground_truth: string, style: string>",
    "extra_info": "struct<index: string>",
}
#: columns :func:`partly_mixed_pool` mixes (object and JSON string; int and float; absent and null)
MIXED = ("reward_model", "meta")


def partly_mixed_pool() -> list[dict]:
    """The fixture pool with ``reward_model`` a JSON string in one row (an object elsewhere) and a
    ``meta`` column mixing an int with a float, an absent key and a null; ``prompt`` and
    ``extra_info`` keep one type."""
    rows = read_jsonl(FIXTURE_POOL)
    rows[7]["reward_model"] = json.dumps(rows[7]["reward_model"])
    for i, row in enumerate(rows):
        if i != 4:  # absent in row 4
            row["meta"] = None if i == 5 else {"level": 1 if i % 2 else 0.5, "tags": ["a"] * (i % 3)}
    return rows


def canonical(rows: list[dict]) -> list[str]:
    return [json.dumps(row, sort_keys=True) for row in rows]  # 1 != 1.0, null != absent key


def recipe(name: str, **overrides) -> dict:
    config = yaml.safe_load((REPO / "recipes" / name).read_text())
    config.update(overrides)
    if config.get("executor_type", "default") == "default":
        config.pop("ray_address", None)
    return config


def run(tmp_path, name: str, source, export, **overrides):
    result = dj_process(recipe(name, dataset_path=str(source), export_path=str(export), **overrides), tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert export.is_file()
    return export


def as_jsonl(parquet, path):
    """A parquet file read by :func:`trajval_ops.pools.io.read_table` and written as JSONL."""
    from trajval_ops.pools.io import read_table, write_table

    write_table(read_table(parquet), path)
    return path.read_bytes()


def parquet_logical_types(path) -> dict[str, str]:
    """Top-level column -> parquet logical type of its leaves (what a parquet reader sees)."""
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(path).schema
    types: dict[str, set] = {}
    for i in range(len(schema)):
        column = schema.column(i)
        types.setdefault(column.path.split(".")[0], set()).add(str(column.logical_type.type))
    return {name: "/".join(sorted(kinds)) for name, kinds in types.items()}


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    """score_pool.yaml on the partly mixed pool: JSONL in and out, JSONL in and parquet out,
    parquet in (written by trajval_ops) and JSONL out."""
    from trajval_ops.pools.io import read_table, write_table

    tmp = tmp_path_factory.mktemp("parquet_default")
    rows = partly_mixed_pool()
    source = write_jsonl(tmp / "pool.jsonl", rows)
    write_table(read_table(source), tmp / "pool.parquet")
    return {
        "rows": rows,
        "jsonl": run(tmp, "score_pool.yaml", source, tmp / "out.jsonl"),
        "parquet": run(tmp, "score_pool.yaml", source, tmp / "out.parquet"),
        "from_parquet": run(tmp, "score_pool.yaml", tmp / "pool.parquet", tmp / "from_parquet.jsonl"),
        "tmp": tmp,
    }


def test_consistent_columns_are_nested_parquet_types(default_runs):
    import pyarrow.parquet as pq

    schema = pq.read_schema(default_runs["parquet"])
    assert str(schema.field("prompt").type) == NESTED["prompt"]
    assert str(schema.field("extra_info").type) == NESTED["extra_info"]
    assert str(schema.field("trajval_weight").type) == "double"
    assert str(schema.field("trajval_score_provenance").type).startswith("struct<alpha: double, eps: double")
    logical = parquet_logical_types(default_runs["parquet"])
    assert logical["prompt"] == logical["extra_info"] == "STRING"  # leaves of nested groups, not JSON text
    assert logical["trajval_weight"] == "NONE"


def test_mixed_columns_are_parquet_json_holding_exact_text(default_runs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(default_runs["parquet"])
    logical = parquet_logical_types(default_runs["parquet"])
    rows = default_runs["rows"]
    for name in MIXED:
        assert isinstance(table.schema.field(name).type, pa.JsonType)  # pyarrow: arrow.json
        assert logical[name] == "JSON"  # any parquet reader: a JSON-annotated string column
    # pyarrow (and pandas, polars) give the JSON text; an absent key is a parquet null, a JSON
    # null the text "null"
    reward_model = table.column("reward_model").to_pylist()
    assert json.loads(reward_model[7]) == rows[7]["reward_model"] and isinstance(rows[7]["reward_model"], str)
    assert json.loads(reward_model[0]) == rows[0]["reward_model"] and isinstance(rows[0]["reward_model"], dict)
    meta = table.column("meta").to_pylist()
    assert meta[4] is None and meta[5] == "null" and json.loads(meta[1]) == {"level": 1, "tags": ["a"]}
    assert meta[2] == json.dumps(rows[2]["meta"], separators=(",", ":"))  # 0.5 stays 0.5, 1 stays 1


def test_parquet_export_reads_back_as_the_jsonl_export(default_runs):
    jsonl = default_runs["jsonl"]
    exported = read_jsonl(jsonl)
    # trajval_ops.pools.io.read_table: the same bytes when written as JSONL
    assert as_jsonl(default_runs["parquet"], default_runs["tmp"] / "read_back.jsonl") == jsonl.read_bytes()
    # pyarrow: nested columns as Python values, JSON columns decoded from their text
    import pyarrow.parquet as pq

    from trajval_ops.pools.io import decoded_values

    table = pq.read_table(default_runs["parquet"])
    columns = {name: decoded_values(table.column(name)) for name in table.column_names}
    for i, row in enumerate(exported):
        assert set(row) <= set(columns)
        assert canonical([{name: columns[name][i] for name in row}]) == canonical([row])
    # datasets (what verl and Trinity read parquet with) decodes the JSON columns itself; it reads
    # an absent key as None
    from datasets import Dataset

    dataset = Dataset.from_parquet(str(default_runs["parquet"]), cache_dir=str(default_runs["tmp"] / "hf"))
    assert canonical([{k: v for k, v in r.items() if k in e} for r, e in zip(dataset, exported)]) == canonical(exported)
    assert dataset[4]["meta"] is None and "meta" not in exported[4]
    # the values the recipe did not write are the input's
    for before, after in zip(default_runs["rows"], exported):
        assert canonical([{k: after[k] for k in before}]) == canonical([before])


def test_parquet_input_gives_the_jsonl_input_result(default_runs):
    assert default_runs["from_parquet"].read_bytes() == default_runs["jsonl"].read_bytes()


def test_json_export_is_the_jsonl_export(default_runs):
    # a `.json` export path is JSON lines through write_table, as under Ray: before, Data-Juicer's
    # pandas writer rounded floats, wrote `1` as `1.0` and the mixed columns as strings
    tmp = default_runs["tmp"]
    export = run(tmp, "score_pool.yaml", tmp / "pool.jsonl", tmp / "out.json")
    assert export.read_bytes() == default_runs["jsonl"].read_bytes()


def test_parquet_pool_written_by_other_tools(tmp_path, fixture_rows):
    """A pool written with plain pyarrow (as verl's preprocessing scripts do)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(fixture_rows), tmp_path / "pool.parquet")
    out = run(tmp_path, "score_pool.yaml", tmp_path / "pool.parquet", tmp_path / "scored.parquet")
    table = pq.read_table(out)
    assert str(table.schema.field("prompt").type) == NESTED["prompt"]
    assert str(table.schema.field("reward_model").type) == NESTED["reward_model"]
    scored = table.to_pylist()
    assert canonical([{k: row[k] for k in before} for row, before in zip(scored, fixture_rows)]) == canonical(fixture_rows)
    expected = core.sampling_weight(core.learnability_score([r["trajval_r_early"] for r in fixture_rows],
                                                            [r["trajval_r_late"] for r in fixture_rows]))
    assert [row["trajval_weight"] for row in scored] == expected.tolist()


def test_ray_executor_exports_parquet(tmp_path):
    """score_resample_ray.yaml writes one parquet file with the default executor's values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = partly_mixed_pool()
    source = write_jsonl(tmp_path / "pool.jsonl", rows)
    ray_out = run(tmp_path, "score_resample_ray.yaml", source, tmp_path / "ray.parquet")
    default_out = run(tmp_path, "score_resample_ray.yaml", source, tmp_path / "default.jsonl",
                      executor_type="default")
    schema = pq.read_schema(ray_out)
    assert str(schema.field("prompt").type) == NESTED["prompt"]
    assert str(schema.field("extra_info").type) == NESTED["extra_info"]
    assert all(isinstance(schema.field(name).type, pa.JsonType) for name in MIXED)
    assert as_jsonl(ray_out, tmp_path / "ray_read_back.jsonl") == default_out.read_bytes()
