"""A reused pass over a pool whose column is missing on some rows (Big-Math's
``llama8b_solve_rate`` has nulls; issue 54, item 4): ``reuse_missing: measure`` samples just those
rows with the pass's own model (tiny-arith, through dj-process), says so in their provenance and
cost, and ``trajval cost`` counts their completions, before the run and from the weighted pool."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, dj_process, read_jsonl, write_jsonl
from trajval_ops.errors import TrajvalInputError

MISSING = (9, 12, 14)  # the first two batches of 4 are all read, the last two mix


def _pool(tmp_path):
    rows = read_jsonl(REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl")[:16]
    for i, row in enumerate(rows):
        row["base_rate"] = None if i in MISSING else (i % 17) / 16
    return write_jsonl(tmp_path / "pool.jsonl", rows), rows


def _recipe(tmp_path, pool, **reuse):
    return {
        "project_name": "reuse_missing", "dataset_path": str(pool), "export_path": str(tmp_path / "weighted.jsonl"),
        "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [
            {"trajval_endpoint_reward_mapper": {
                "model": "tiny-arith", "window": "early", "engine": "transformers", "n": 4, "max_new_tokens": 8,
                "prompts_per_generate": 4, "batch_size": 4, "seed": 0, "cache_dir": str(tmp_path / "rollouts"),
                "verifier": "math", "verifier_options": {"fallback_last_number": True}, "id_key": "task_id",
                "reuse_key": "base_rate", "reuse_n": 16, **reuse}},
            {"trajval_learnability_mapper": {"prior": "variance", "eps": 0.05, "id_key": "task_id"}},
        ],
    }


def test_measure_samples_only_the_rows_lacking_the_column_and_cost_counts_them(tmp_path, capsys):
    from trajval_ops.cli import cost

    pool, rows = _pool(tmp_path)
    recipe = _recipe(tmp_path, pool, reuse_missing="measure")
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    assert cost.main(["--config", str(tmp_path / "recipe.yaml"), "--json"]) == 0
    early = json.loads(capsys.readouterr().out)["stages"][0]
    assert (early["completions"], early["measured_rows"], early["measured_rows_exact"]) == (12, 3, True)
    assert cost.main(["--config", str(tmp_path / "recipe.yaml"), "--pool-rows", "1000", "--json"]) == 0
    unknown = json.loads(capsys.readouterr().out)["stages"][0]  # every row could lack it: a bound, said so
    assert (unknown["completions"], unknown["measured_rows_exact"]) == (4000, False)

    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "weighted.jsonl")
    assert [row["task_id"] for row in out] == [row["task_id"] for row in rows]  # every row, in order
    for i, row in enumerate(out):
        provenance = row["trajval_r_early_provenance"]
        assert provenance["field"] == "base_rate" and provenance["reuse_missing"] == "measure"
        assert provenance["measured_by"]["model"] == "tiny-arith" and provenance["measured_by"]["n"] == 4
        if i in MISSING:
            assert row["trajval_r_early_status"] == "ok" and row["trajval_r_early_n"] == 4
            assert row["trajval_r_early"] in (0.0, 0.25, 0.5, 0.75, 1.0)
            assert provenance["source"] == "measured" and provenance["cost"]["completions"] == 4
            assert provenance["measured_by"]["engine"] == "transformers"
        else:
            assert (row["trajval_r_early"], row["trajval_r_early_n"]) == (rows[i]["base_rate"], 16)
            assert row["trajval_r_early_status"] == "reused" and provenance["source"] == "pool_field"
            assert provenance["cost"]["completions"] == 0 and provenance["measured_by"]["engine"] == "transformers"
        assert row["trajval_weight"] >= 0.05
    assert "3 rows lacking it are measured" in result.stderr

    assert cost.main(["--pool", str(tmp_path / "weighted.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["completions"] == 12 and report["stages"]["early"]["completions"] == 12
    assert report["runs"][0]["reused_passes"]["trajval_r_early"] == {
        "field": "base_rate", "form": "rate", "model": None, "n": 16, "n_field": None, "rows_read": 13,
        "rows_measured": 3}
    assert cost.main(["--pool", str(tmp_path / "weighted.jsonl")]) == 0
    assert "on 13 rows: 0 completions; 3 rows lacking it measured" in capsys.readouterr().out


def test_error_stays_the_default_and_names_the_first_row_lacking_the_column(tmp_path):
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    pool, rows = _pool(tmp_path)
    op = TrajvalEndpointRewardMapper(window="early", reuse_key="base_rate", reuse_n=16, id_key="task_id")
    batch = {key: [row[key] for row in rows] for key in rows[0]}
    with pytest.raises(TrajvalInputError, match=r"row 9 \(task_id='[^']+'\): field 'base_rate' \(the reused pass "
                                                r"rate\) is missing"):
        op.process_batched(batch)
