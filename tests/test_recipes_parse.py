"""Every recipe parses and its operators pass Data-Juicer's parameter checks."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def test_all_recipes_are_listed():
    names = {p.name for p in RECIPES}
    assert {"score_pool.yaml", "resample_pool.yaml", "demo_trajval.yaml", "dapo_trajval.yaml",
            "guru_logic_trajval.yaml", "plug_in_prior.yaml", "score_resample_ray.yaml", "dapo_variance_ray.yaml"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_recipe_builds_its_operators(recipe, monkeypatch, tmp_path):
    from data_juicer.config import init_configs
    from data_juicer.ops import load_ops

    monkeypatch.chdir(REPO)
    # Data-Juicer marks the whole process as a Ray job when it parses a Ray recipe: undone after this test,
    # else every later test in the session builds its operators in Ray mode
    monkeypatch.setenv("RAY_JOB", "0")
    # a GPU operator of a Ray recipe asks Data-Juicer for the GPU count, which joins a running Ray
    # cluster (ray_address auto) where there is one: on a shared machine another job's, with no GPU,
    # and the pass's placement check then refuses 8 GPUs. Parsing joins no cluster.
    import data_juicer.utils.resource_utils as resource_utils

    monkeypatch.setattr(resource_utils, "check_and_initialize_ray", lambda cfg=None: False)
    cfg = init_configs(["--config", str(recipe), "--work_dir", str(tmp_path)])  # its job folder, not the checkout's
    assert cfg.skip_op_error is False
    assert cfg.text_keys is None  # no row may be dropped for a None text field
    ops = load_ops(cfg.process)
    assert all(op._name.startswith("trajval_") for op in ops)
    assert all(op.skip_op_error is False for op in ops)
