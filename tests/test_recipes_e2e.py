"""The recipes through the real ``dj-process`` CLI: outputs, bad input and the Ray executor."""

import json
import math

import numpy as np
import pytest
import yaml

import sys

from tests.conftest import FIXTURE_POOL, REPO, dj_process, read_jsonl, write_jsonl

sys.path.insert(0, str(REPO / "tools"))
from trajval_ops import core

pytestmark = pytest.mark.slow


def recipe(name: str, **overrides) -> dict:
    config = yaml.safe_load((REPO / "recipes" / name).read_text())
    config.update(overrides)
    return config


def score(tmp_path, rows_or_path, **overrides):
    src = rows_or_path if not isinstance(rows_or_path, list) else write_jsonl(tmp_path / "in.jsonl", rows_or_path)
    out = tmp_path / "scored.jsonl"
    config = recipe("score_pool.yaml", dataset_path=str(src), export_path=str(out), **overrides)
    return dj_process(config, tmp_path), out


def test_score_then_resample_recipes(tmp_path):
    scored = tmp_path / "scored.jsonl"
    result = dj_process(REPO / "recipes" / "score_pool.yaml", tmp_path, "--export_path", str(scored))
    assert result.returncode == 0, result.stderr[-3000:]
    rows_in, rows_out = read_jsonl(FIXTURE_POOL), read_jsonl(scored)
    assert [r["extra_info"]["index"] for r in rows_out] == [r["extra_info"]["index"] for r in rows_in]
    r_early = np.array([r["trajval_r_early"] for r in rows_in])
    r_late = np.array([r["trajval_r_late"] for r in rows_in])
    expected = core.sampling_weight(core.learnability_score(r_early, r_late))
    assert np.array_equal([r["trajval_weight"] for r in rows_out], expected)

    resampled = tmp_path / "resampled.jsonl"
    args = ("--dataset_path", str(scored), "--export_path", str(resampled))
    result = dj_process(REPO / "recipes" / "resample_pool.yaml", tmp_path, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(resampled)
    assert len(out) == len(rows_in)
    counts = np.bincount([r["trajval_source_row"] for r in out], minlength=len(rows_in))
    exact = len(rows_in) * core.normalize(expected)
    assert np.all((counts == np.floor(exact)) | (counts == np.ceil(exact)))
    # same seed, same file
    again = tmp_path / "again.jsonl"
    assert dj_process(REPO / "recipes" / "resample_pool.yaml", tmp_path, "--dataset_path", str(scored),
                      "--export_path", str(again)).returncode == 0
    assert again.read_text() == resampled.read_text()


def test_none_text_field_cannot_drop_rows(tmp_path, fixture_rows):
    fixture_rows[3]["prompt"] = None
    fixture_rows[7]["text"] = None
    result, out = score(tmp_path, fixture_rows)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(read_jsonl(out)) == len(fixture_rows)


def _bad(rows, i, **change):
    rows = [dict(r) for r in rows]
    rows[i].update(change)
    return rows


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda rows: [{k: v for k, v in r.items() if not (i == 5 and k == "trajval_r_late")} for i, r in enumerate(rows)],
         "row 5 (extra_info.index='fx-005'): field 'trajval_r_late' is missing"),
        (lambda rows: _bad(rows, 6, trajval_r_early=math.nan), "field 'trajval_r_early'"),
        (lambda rows: _bad(rows, 7, trajval_r_early="0.5"),
         "row 7 (extra_info.index='fx-007'): field 'trajval_r_early' holds str '0.5'"),
        (lambda rows: _bad(rows, 8, trajval_r_late=1.25),
         "row 8 (extra_info.index='fx-008'): field 'trajval_r_late' = 1.25 is outside [0, 1]"),
        (lambda rows: [], "the pool is empty"),
        (lambda rows: [json.dumps(r) for r in rows[:4]] + ['{"trajval_r_early": 0.5,'] + [json.dumps(r) for r in rows[4:]],
         "line 5 (row 4) is not valid JSON"),
    ],
    ids=["missing", "nan", "string", "outside", "empty", "malformed"],
)
def test_bad_input_stops_dj_process(tmp_path, fixture_rows, make, message):
    # skip_op_error: true in the recipe must not turn the error into a dropped row
    result, out = score(tmp_path, make(fixture_rows), skip_op_error=True)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    assert not out.exists() or len(read_jsonl(out)) == 0


def test_all_floor_pool_is_uniform_with_a_warning(tmp_path, fixture_rows):
    rows = [dict(r, trajval_r_early=0.5, trajval_r_late=0.5) for r in fixture_rows]
    result, out = score(tmp_path, rows)
    assert result.returncode == 0
    assert "weight at the floor" in result.stderr + result.stdout
    assert {r["trajval_weight"] for r in read_jsonl(out)} == {0.05}


def test_resampler_under_ray_executor(tmp_path):
    scored = tmp_path / "scored.jsonl"
    assert dj_process(REPO / "recipes" / "score_pool.yaml", tmp_path, "--export_path", str(scored)).returncode == 0
    out_dir = tmp_path / "ray_out.jsonl"
    config = recipe("resample_pool.yaml", dataset_path=str(scored), export_path=str(out_dir),
                    executor_type="ray", ray_address="local")
    config["process"][0]["trajval_weighted_resampler"].update(mode="multinomial", seed=9)
    result = dj_process(config, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    ray_rows = read_jsonl(out_dir)
    default_out = tmp_path / "default.jsonl"
    config.update(executor_type="default", export_path=str(default_out))
    config.pop("ray_address")
    assert dj_process(config, tmp_path).returncode == 0
    default_rows = read_jsonl(default_out)
    # the same seed draws the same rows under both executors
    assert [r["trajval_source_row"] for r in ray_rows] == [r["trajval_source_row"] for r in default_rows]
    assert [r["extra_info"]["index"] for r in ray_rows] == [r["extra_info"]["index"] for r in default_rows]


def test_plug_in_prior_recipe_composes_online_weight(tmp_path):
    out = tmp_path / "composed.jsonl"
    result = dj_process(REPO / "recipes" / "plug_in_prior.yaml", tmp_path, "--export_path", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    pool = read_jsonl(REPO / "recipes" / "data" / "fixture_pool_online.jsonl")
    w = core.sampling_weight(core.learnability_score([r["trajval_r_early"] for r in pool],
                                                     [r["trajval_r_late"] for r in pool]))
    p = core.normalize(core.compose_online(w, [r["online_weight"] for r in pool]))
    rows = read_jsonl(out)
    assert len(rows) == len(pool)
    for row in rows:
        assert row["trajval_prob"] == pytest.approx(p[row["trajval_source_row"]], rel=1e-12)
        assert row["online_weight"] == pool[row["trajval_source_row"]]["online_weight"]


def test_ray_recipe_matches_default_executor(tmp_path):
    out = tmp_path / "ray.jsonl"
    result = dj_process(REPO / "recipes" / "score_resample_ray.yaml", tmp_path, "--export_path", str(out))
    assert result.returncode == 0, result.stderr[-4000:]
    ray_rows = read_jsonl(out)
    config = recipe("score_resample_ray.yaml", executor_type="default", export_path=str(tmp_path / "d.jsonl"))
    config.pop("ray_address")
    assert dj_process(config, tmp_path).returncode == 0
    default_rows = read_jsonl(tmp_path / "d.jsonl")
    assert [r["trajval_source_row"] for r in ray_rows] == [r["trajval_source_row"] for r in default_rows]
    # one file, the same bytes: Ray's own JSON writer would round floats to 10 digits
    assert out.is_file() and out.read_bytes() == (tmp_path / "d.jsonl").read_bytes()


def mixed_pool() -> list[dict]:
    """verl-style rows whose columns mix types at the top level and inside nested fields."""
    rows = []
    for i in range(45):
        rows.append({
            "data_source": "mixed",
            "prompt": [{"role": "user", "content": f"What is {i} + 1?"}] if i % 3 else f"What is {i} + 1?",
            "reward_model": {"style": "rule", "ground_truth": i + 1 if i % 4 else str(i + 1)},
            "extra_info": {"index": f"m-{i:03d}", **({"split": "train"} if i % 5 else {"tags": [i, "x"]})},
            "trajval_r_early": (i % 7) / 10, "trajval_r_late": (i % 9) / 10,
        })
    rows[7]["reward_model"] = json.dumps(rows[7]["reward_model"])  # one JSON string among objects
    rows[8]["extra_info"]["weight"] = 1  # an int where another row holds a float
    rows[9]["extra_info"]["weight"] = 0.5
    del rows[10]["data_source"]  # a key absent from one row
    rows[11]["data_source"] = None  # and null in another
    return rows


def canonical(row: dict) -> str:
    return json.dumps(row, sort_keys=True)  # tells 1 from 1.0 and a null from an absent key


@pytest.mark.parametrize("executor", ["default", "ray"])
def test_values_we_do_not_write_come_out_as_they_came_in(tmp_path, executor):
    rows = mixed_pool()
    extra = {"executor_type": "ray", "ray_address": "local"} if executor == "ray" else {}
    result, out = score(tmp_path, rows, **extra)
    assert result.returncode == 0, result.stderr[-3000:]
    scored = read_jsonl(out)
    assert len(scored) == len(rows)
    for before, after in zip(rows, scored):
        ours = {k for k in after if k not in before}
        assert all(k.startswith("trajval_") for k in ours)
        assert canonical({k: v for k, v in after.items() if k not in ours}) == canonical(before)


def test_imported_pool_keeps_its_values_through_dj_process(tmp_path):
    import import_pool as import_pool_cli

    rows = mixed_pool()
    source = write_jsonl(tmp_path / "raw.jsonl", rows)
    imported = tmp_path / "imported.jsonl"
    assert import_pool_cli.main([str(source), str(imported), "--no-progress", "--format", "verl"]) == 0
    before = read_jsonl(imported)
    result, out = score(tmp_path, imported)
    assert result.returncode == 0, result.stderr[-3000:]
    for row_in, row_out in zip(before, read_jsonl(out)):
        assert canonical({k: v for k, v in row_out.items() if k in row_in}) == canonical(row_in)


def test_recipes_without_trajval_operators_load_as_data_juicer_loads(tmp_path):
    pool = write_jsonl(tmp_path / "text.jsonl", [{"text": "hello world"}, {"text": "hi"}])
    config = {"project_name": "plain", "dataset_path": str(pool), "export_path": str(tmp_path / "o.jsonl"),
              "process": [{"text_length_filter": {"min_len": 3}}]}
    result = dj_process(config, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trajval_ops: loaded" not in result.stderr + result.stdout
    assert [r["text"] for r in read_jsonl(tmp_path / "o.jsonl")] == ["hello world"]
