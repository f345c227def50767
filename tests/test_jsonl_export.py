"""The atomic JSONL export that replaces Data-Juicer's row-by-row writer."""

import json

import pyarrow as pa
import pytest

from trajval_ops.ops import jsonl_export


def table():
    return pa.table({
        "id": ["a", "b"],
        "prompt": [[{"role": "user", "content": "1+1? é"}], [{"role": "user", "content": "2+2?"}]],
        "trajval_weight": [0.5, 0.05],
        "prov": pa.repeat(pa.scalar({"alpha": 0.3, "keys": ["x"]}), 2),
        "maybe": [None, 3],
    })


@pytest.mark.parametrize("writer", ["polars", "orjson"])
def test_rows_round_trip(tmp_path, monkeypatch, writer):
    if writer == "orjson":
        monkeypatch.setattr(jsonl_export, "_write_polars", lambda t, p: (_ for _ in ()).throw(TypeError("no")))
    out = tmp_path / "o.jsonl"
    jsonl_export.write_jsonl_atomic(table(), str(out))
    text = out.read_text(encoding="utf-8")
    assert [json.loads(line) for line in text.splitlines()] == table().to_pylist()
    assert "é" in text  # UTF-8, not \\u escapes
    assert [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]


def test_failed_write_leaves_previous_file(tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    out.write_text("previous\n")

    def broken(t, handle):
        handle.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(jsonl_export, "_write_polars", broken)
    with pytest.raises(KeyboardInterrupt):
        jsonl_export.write_jsonl_atomic(table(), str(out))
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]
