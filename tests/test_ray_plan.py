"""Eight GPUs for every shipped GPU recipe, checked on CPU before anything runs: Data-Juicer's
preflight and our own (trajval_ops/ray_plan.py, ops/recipe_check.py) read a Ray recipe's
actors, GPUs per actor and GPUs per vLLM engine; a mismatch is one block and exit 2."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO
from trajval_ops.cli import cost as cost_cli
from trajval_ops.errors import TrajvalInputError
from trajval_ops.ray_plan import engine_gpu_problem, ray_plan

RECIPES = REPO / "recipes"


def recipe(name: str) -> dict:
    return yaml.safe_load((RECIPES / name).read_text())


@pytest.mark.parametrize("name, passes", [
    ("dapo_variance_ray.yaml", [("trajval_r_early (process[0])", 8)]),
    ("dapo_trajval_ray.yaml", [("trajval_r_early (process[1])", 4), ("trajval_r_late (process[2])", 4)]),
])
def test_the_ray_recipes_hold_eight_gpus_one_engine_each(name, passes):
    from trajval_ops.ops.recipe_check import check_recipe

    check_recipe(recipe(name))  # Data-Juicer's preflight, each operator built, the checks across entries
    plan = ray_plan(recipe(name))
    assert [(p["pass"], p["actors"]) for p in plan["passes"]] == passes
    assert all(p["gpus_per_actor"] == p["gpus_per_engine"] == 1 for p in plan["passes"])
    assert plan["gpus_at_once"] == 8  # Ray streams rows through every pass at once


def test_the_default_executor_recipes_say_where_their_gpus_go():
    from trajval_ops.probe.config import ProbeConfig

    assert ray_plan(recipe("dapo_variance.yaml")) == {}  # one engine: the Ray variant is the 8-GPU one
    assert "dapo_variance_ray.yaml" in (RECIPES / "dapo_variance.yaml").read_text()
    for name in ("dapo_trajval.yaml", "dapo_trajval_ray.yaml"):
        probe = recipe(name)["process"][0]["trajval_probe_trainer"]
        assert probe["num_processes"] == 8 and probe["vllm_gpu_memory_utilization"] == 0.3
        settings = {k: v for k, v in probe.items() if k != "output_dir" and k != "probe_size"}
        config = ProbeConfig(**settings)  # a step's 64 x 16 completions split evenly over the 8 ranks
        assert config.gradient_accumulation_steps == 64 * 16 // (4 * 8)


def test_the_gpu_recipes_measure_under_the_main_runs_prompt_and_reward():
    for name in ("dapo_variance.yaml", "dapo_variance_ray.yaml", "dapo_trajval.yaml", "dapo_trajval_ray.yaml",
                 "guru_logic_trajval.yaml"):
        for op, settings in (next(iter(entry.items())) for entry in recipe(name)["process"]):
            template = settings.get("template", settings.get("prompt_template"))
            if template is not None:
                assert template == "pool", (name, op)
                if name.startswith("dapo"):
                    assert settings["verifier"] == "dapo", (name, op)


def _edited(tmp_path, **settings):
    edited = recipe("dapo_variance_ray.yaml")
    edited["process"][0]["trajval_endpoint_reward_mapper"].update(settings)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(edited))
    return path


@pytest.mark.parametrize("settings, message", [
    ({"num_gpus": 2}, "trajval_r_early (process[0]): num_gpus 2 per actor, but its one vLLM engine "
                      "(tensor_parallel_size 1) uses 1: 1 GPU(s) of every actor would sit idle"),
    ({"tensor_parallel_size": 2}, "trajval_r_early (process[0]): tensor_parallel_size 2 needs num_gpus: 2 per actor; "
                                  "the recipe reserves 1"),
    ({"num_gpus": 0.5}, "num_gpus 0.5 puts engines side by side on a GPU, but each asks vLLM for "
                        "gpu_memory_utilization 0.9 of it"),
])
def test_a_plan_whose_actors_cannot_hold_their_engine_is_one_block_and_exit_2(tmp_path, capsys, settings, message):
    assert cost_cli.main(["--config", str(_edited(tmp_path, **settings)), "--pool-rows", "17398"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_engines_sharing_a_gpu_fit_when_their_memory_shares_do(tmp_path):
    edited = yaml.safe_load(_edited(tmp_path, num_gpus=0.5, num_proc=16, gpu_memory_utilization=0.45).read_text())
    assert ray_plan(edited)["gpus_at_once"] == 8
    assert engine_gpu_problem(2, 2) is None and engine_gpu_problem(1, 1) is None
    assert engine_gpu_problem(0.5, 2) is not None  # a share of a GPU holds no two-GPU engine


def test_data_juicers_check_of_the_built_operators_runs_for_the_recipes_executor(monkeypatch):
    """Data-Juicer refuses, once the operators are built, one its executor does not run (a
    Selector under Ray): the recipe check runs that check too, for the recipe's executor."""
    from data_juicer.ops.base_op import OPERATORS

    from trajval_ops.ops.recipe_check import check_recipe

    monkeypatch.setattr(OPERATORS.modules["trajval_learnability_mapper"], "_supported_exec_modes", ("default",))
    check_recipe(recipe("dapo_variance.yaml"))  # the default executor runs it
    with pytest.raises(TrajvalInputError, match="does not support executor mode 'ray'"):
        check_recipe(recipe("dapo_variance_ray.yaml"))
