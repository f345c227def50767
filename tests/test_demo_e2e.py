"""The demo recipe (the README's main job, on the tiny regime) and the SmolLM2 recipe end to end."""

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, dj_process, read_jsonl, write_jsonl
from trajval_ops import core

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The README's main job run once (``make demo``'s first command), for the tests that read it."""
    tmp_path = tmp_path_factory.mktemp("demo")
    text = (REPO / "recipes" / "demo_trajval.yaml").read_text().replace("outputs/demo", str(tmp_path / "demo"))
    config = yaml.safe_load(text)
    with pytest.MonkeyPatch.context() as patch:  # as `make demo` runs: the probe's torch threads are the cores
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            patch.delenv(name, raising=False)
        result = dj_process(config, tmp_path, timeout=900)
    result.config = config
    return result


def test_demo_recipe_carries_signal_beyond_the_rollout_noise(demo_run):
    """The main job on tiny-arith: the probe's gain (delta) differs between task families beyond
    the standard errors that n = 16 rollouts per pass imply."""
    from trajval_ops.summary import group_noise

    result, config = demo_run, demo_run.config
    assert result.returncode == 0, result.stderr[-4000:]
    pool = read_jsonl(REPO / config["dataset_path"])
    out = read_jsonl(config["export_path"])
    assert [r["id"] for r in out] == [r["id"] for r in pool]
    assert "rollout noise" in result.stderr
    column = lambda key: np.array([r[key] for r in out], dtype=float)  # noqa: E731
    noise = group_noise([r["extra_info"]["family"] for r in out], column("trajval_r_early"),
                        column("trajval_r_late"), column("trajval_r_early_n"), column("trajval_r_late_n"),
                        column("trajval_weight"))
    # under rollout noise alone Cochran's Q is about its degrees of freedom and about 1 group in 20
    # lies beyond 2 SE of the pooled gain
    assert noise["cochran_q"] > 3 * noise["df"], noise
    assert noise["groups_beyond_noise"] >= 3, noise
    assert "the probe's gain differs between values of extra_info.family beyond the rollout noise" in result.stderr
    # issue 36, item 11: the probe says its progress in a line per epoch (show_progress: false), not
    # in TRL's per-step dictionaries
    output = result.stdout + result.stderr
    assert "{'loss'" not in output and "'grad_norm'" not in output
    assert output.count("probe: epoch 1/1 done (step 75/75), mean reward") == 1


def test_the_readme_gives_the_demos_figures(demo_run):
    """Every figure of the README's demo passage (within-noise count, median SE, Cochran's Q, each
    family's delta and z, the prior's cost) is the demo's log's at the README's precision: the
    README printed 155 of 218, Q 282.3 and z +14.4 where a run gave 156 of 219, 282.93 and +14.5."""
    from tests.demo_figures import demo_figure_mismatches

    assert demo_run.returncode == 0, demo_run.stderr[-4000:]
    assert not demo_figure_mismatches((REPO / "README.md").read_text(), demo_run.stderr)


def test_smollm2_recipe_end_to_end(tmp_path):
    """The shipped real-model recipe, every setting as shipped, on the first 16 of its 48 tasks (the
    whole pool took 10-18 min of CI's 90; the rows only scale the passes)."""
    text = (REPO / "recipes" / "smollm2_trajval.yaml").read_text().replace("outputs/smollm2", str(tmp_path / "smollm2"))
    config = yaml.safe_load(text)
    pool = read_jsonl(REPO / config["dataset_path"])[:16]
    config["dataset_path"] = str(write_jsonl(tmp_path / "pool.jsonl", pool))
    result = dj_process(config, tmp_path, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]

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


def test_one_pass_variance_recipe_end_to_end(tmp_path, capsys):
    """recipes/demo_variance.yaml: the base model's pass alone weights the pool by its variance
    prior, and the pool records what that pass cost (the recipe's n per row, nothing else)."""
    import json

    from trajval_ops.cli import cost

    text = (REPO / "recipes" / "demo_variance.yaml").read_text().replace("outputs/demo_variance",
                                                                         str(tmp_path / "v"))
    config = yaml.safe_load(text)
    config["process"][0]["trajval_endpoint_reward_mapper"]["cache_dir"] = str(tmp_path / "rollouts")  # sample anew
    result = dj_process(config, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    out = read_jsonl(config["export_path"])
    r_early = np.array([r["trajval_r_early"] for r in out])
    assert np.array_equal([r["trajval_weight"] for r in out],
                          core.variance_weight(core.variance_score(r_early)))
    assert out[0]["trajval_score_provenance"]["score"] == "variance" and "trajval_r_late" not in out[0]
    assert cost.main(["--pool", config["export_path"], "--json"]) == 0
    recorded = json.loads(capsys.readouterr().out)
    n = config["process"][0]["trajval_endpoint_reward_mapper"]["n"]
    assert list(recorded["stages"]) == ["early"] and recorded["completions"] == n * len(out)
    assert recorded["stages"]["early"]["rows_without_cost"] == 0 and recorded["generated_tokens"] > 0
    assert "the variance prior cost" in result.stderr
