"""The recipes through the real ``dj-process`` CLI: outputs, bad input and the Ray executor."""

import json
import math

import numpy as np
import pytest
import yaml

from tests.conftest import FIXTURE_POOL, REPO, dj_process, read_jsonl, write_jsonl
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
    for a, b in zip(ray_rows, default_rows):
        # Ray's JSON writer keeps 10 significant digits (pandas' default); the values agree to that
        assert a["trajval_weight"] == pytest.approx(b["trajval_weight"], rel=1e-9)
        assert a["trajval_profile"] == b["trajval_profile"]
