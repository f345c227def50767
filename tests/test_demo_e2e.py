"""The demo recipe (the README's main job, on the tiny regime) and the SmolLM2 recipe end to end."""

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, dj_process, read_jsonl
from trajval_ops import core

pytestmark = pytest.mark.slow


def test_demo_recipe_carries_signal_beyond_the_rollout_noise(tmp_path):
    """The main job on tiny-arith: the prior differs by family beyond the noise of n = 16."""
    from collections import defaultdict

    from trajval_ops.summary import rollout_noise

    text = (REPO / "recipes" / "demo_trajval.yaml").read_text().replace("outputs/demo", str(tmp_path / "demo"))
    config = yaml.safe_load(text)
    result = dj_process(config, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    pool = read_jsonl(REPO / config["dataset_path"])
    out = read_jsonl(config["export_path"])
    assert [r["id"] for r in out] == [r["id"] for r in pool]
    assert "rollout noise" in result.stderr
    r_early = np.array([r["trajval_r_early"] for r in out])
    r_late = np.array([r["trajval_r_late"] for r in out])
    score = np.array([r["trajval_score"] for r in out])
    noise = rollout_noise(r_early, r_late, np.full(len(out), 16), np.full(len(out), 16), score)
    assert noise["rows_with_positive_score"] > 0
    by_family = defaultdict(list)
    for row in out:
        by_family[row["family"]].append(row["trajval_r_early"])
    means = {family: float(np.mean(values)) for family, values in by_family.items()}
    # families differ far beyond the SE of a family mean (about 0.12 / sqrt(50))
    assert max(means.values()) - min(means.values()) > 0.5, means


def test_smollm2_recipe_end_to_end(tmp_path):
    text = (REPO / "recipes" / "smollm2_trajval.yaml").read_text().replace("outputs/smollm2", str(tmp_path / "smollm2"))
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
