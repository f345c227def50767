"""The demo recipe (the README's main job) end to end on the embedded SmolLM2, then a resample."""

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, dj_process, read_jsonl
from trajval_ops import core

pytestmark = pytest.mark.slow


def test_demo_recipe_end_to_end(tmp_path):
    text = (REPO / "recipes" / "demo_trajval.yaml").read_text().replace("outputs/demo", str(tmp_path / "demo"))
    config = yaml.safe_load(text)
    result = dj_process(config, tmp_path, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]

    pool = read_jsonl(REPO / config["dataset_path"])
    out = read_jsonl(config["export_path"])
    assert [r["task_id"] for r in out] == [r["task_id"] for r in pool]
    r_early = np.array([r["trajval_r_early"] for r in out])
    r_late = np.array([r["trajval_r_late"] for r in out])
    assert all(r["trajval_r_early_n"] == 4 and r["trajval_r_late_n"] == 4 for r in out)
    weight = core.sampling_weight(core.learnability_score(r_early, r_late), alpha=0.3, eps=0.05)
    assert np.array_equal([r["trajval_weight"] for r in out], weight)  # exactly the numeric core
    assert sum(r["trajval_in_probe"] for r in out) == 4
    assert out[0]["trajval_r_late_provenance"]["checkpoint"]["window"] == "late"
    assert r_early.max() > 0  # the embedded model solves some easy tasks

    resampled = tmp_path / "resampled.jsonl"
    result = dj_process(REPO / "recipes" / "resample_pool.yaml", tmp_path,
                        "--dataset_path", config["export_path"], "--export_path", str(resampled))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(read_jsonl(resampled)) == len(pool)
