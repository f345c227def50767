"""The endpoint-reward mapper as a Ray actor pool: the default executor's bytes, both actors at
work, a killed actor's rows recomputed only when missing, and pools that cannot be placed
stopped before any model loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, dj_process
from trajval_ops.commands import dj_process_path

pytestmark = pytest.mark.slow

POOL = REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl"


def endpoint_recipe(tmp_path: Path, name: str, executor: str, **step) -> dict:
    """One endpoint pass of tiny-arith over the demo pool, with its own cache and output."""
    settings = {"model": "tiny-arith", "window": "early", "engine": "transformers", "n": 16,
                "max_new_tokens": 8, "prompts_per_generate": 8, "batch_size": 32, "seed": 0,
                "verifier": "math", "verifier_options": {"fallback_last_number": True},
                "cache_dir": str(tmp_path / f"cache_{name}")}
    top = {"executor_type": "ray", "ray_address": "local"} if executor == "ray" else {}
    if executor == "ray":
        settings.update(num_proc=2, num_cpus=1)
    settings.update(step)
    return {"project_name": f"ray_actors_{name}", "dataset_path": str(POOL),
            "export_path": str(tmp_path / f"{name}.jsonl"), "np": 1, "text_keys": None,
            "skip_op_error": False, "open_tracer": False, "op_fusion": False, **top,
            "process": [{"trajval_endpoint_reward_mapper": settings}]}


def cache_logs(cache: Path) -> list[Path]:
    return sorted(cache.rglob("results-*.jsonl"))


def cached_rows(cache: Path) -> list[str]:
    return [json.loads(line)["row"] for log in cache_logs(cache)
            for line in log.read_text().splitlines() if line.strip()]


def log_pid(log: Path) -> int:
    return int(log.stem.rsplit("-", 1)[1])


@pytest.fixture(scope="module")
def default_output(tmp_path_factory) -> bytes:
    tmp_path = tmp_path_factory.mktemp("default")
    result = dj_process(endpoint_recipe(tmp_path, "default", "default"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return (tmp_path / "default.jsonl").read_bytes()


def test_actor_pool_writes_the_default_executors_bytes(tmp_path, default_output):
    result = dj_process(endpoint_recipe(tmp_path, "ray", "ray"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ActorPoolMapOperator" in result.stderr + result.stdout
    assert "done, 600 rows, 9600 rollouts in" in result.stderr + result.stdout  # the end-of-pass figures, on the driver
    assert (tmp_path / "ray.jsonl").read_bytes() == default_output
    # both actors sampled: one cache log per actor process, no row twice
    logs = cache_logs(tmp_path / "cache_ray")
    assert len({log_pid(log) for log in logs}) == 2
    rows = cached_rows(tmp_path / "cache_ray")
    assert len(rows) == len(set(rows)) == len(default_output.splitlines())


def test_killed_actor_rows_are_recomputed_only_when_missing(tmp_path, default_output):
    recipe = endpoint_recipe(tmp_path, "killed", "ray")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    cache = tmp_path / "cache_killed"
    with open(tmp_path / "dj.log", "w") as log:
        process = subprocess.Popen([dj_process_path(), "--config", str(path)],
                                   cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not [f for f in cache_logs(cache) if f.stat().st_size]:
            assert process.poll() is None, (tmp_path / "dj.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no actor wrote a result"
            time.sleep(0.05)
        victim = log_pid(cache_logs(cache)[0])
        done_before = len(cached_rows(cache))
        os.kill(victim, signal.SIGKILL)
        assert process.wait(timeout=300) == 0, (tmp_path / "dj.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    pool_rows = len(default_output.splitlines())
    assert done_before < pool_rows, "the run ended before the kill"
    rows = cached_rows(cache)
    # Ray restarted the actor and retried its batch: what the dead actor had written was read
    # back from the cache, only the rest was sampled, and nothing was sampled twice
    assert len(rows) == len(set(rows)) == pool_rows
    assert (tmp_path / "killed.jsonl").read_bytes() == default_output
    # a rerun samples nothing and writes the same bytes
    (tmp_path / "killed.jsonl").unlink()
    result = dj_process(path, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(cached_rows(cache)) == pool_rows
    assert (tmp_path / "killed.jsonl").read_bytes() == default_output


@pytest.mark.parametrize("step, message", [
    ({"num_gpus": 1}, "2 actors x num_gpus 1 = 2 GPUs, but the Ray cluster has 0"),
    ({"engine": "vllm", "tensor_parallel_size": 2, "num_gpus": 1},
     "tensor_parallel_size 2 needs num_gpus: 2 per actor"),
    ({"engine": "vllm", "num_gpus": 2}, "num_gpus 2 per actor, but its one vLLM engine (tensor_parallel_size 1) uses 1"),
])
def test_a_pool_that_cannot_be_placed_stops_before_any_model_loads(tmp_path, step, message):
    result = dj_process(endpoint_recipe(tmp_path, "gpu", "ray", **step), tmp_path)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    assert not cache_logs(tmp_path / "cache_gpu")  # no row was sampled
    assert "rollout cache" not in result.stderr + result.stdout  # no worker started


def test_cpu_ray_recipe_matches_the_default_demo(tmp_path):
    """recipes/demo_trajval_ray.yaml (2 actors per pass, local Ray) writes the bytes that
    recipes/demo_trajval.yaml writes, each with its own rollout cache."""
    outputs = {}
    for name in ("demo_trajval.yaml", "demo_trajval_ray.yaml"):
        config = yaml.safe_load((REPO / "recipes" / name).read_text())
        config["process"][0]["trajval_probe_trainer"]["output_dir"] = str(tmp_path / "probe")
        for step in config["process"][1:3]:
            settings = step["trajval_endpoint_reward_mapper"]
            settings.update(model=settings["model"].replace("outputs/demo/probe", str(tmp_path / "probe")),
                            cache_dir=str(tmp_path / f"cache_{name}"))
        config.update(dataset_path=str(POOL), export_path=str(tmp_path / f"{name}.jsonl"))
        result = dj_process(config, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[name] = (tmp_path / f"{name}.jsonl").read_bytes()
    assert outputs["demo_trajval_ray.yaml"] == outputs["demo_trajval.yaml"]


def small_pool(tmp_path: Path, rows: int = 40) -> tuple[Path, list[dict]]:
    pool = [json.loads(line) for line in POOL.read_text().splitlines()[:rows]]
    return tmp_path / "pool.jsonl", pool


def write_pool(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("case", ["duplicate_id", "bad_truth_share"])
def test_whole_pool_checks_hold_under_ray(tmp_path, case):
    """The checks the mapper makes over the whole pool under the default executor stop a Ray run
    too: a repeated task id before any batch, too many bad ground truths before the export."""
    path, rows = small_pool(tmp_path)
    step = {"batch_size": 8}
    if case == "duplicate_id":
        rows[17]["id"] = rows[3]["id"]
        message = "repeats row 3"
    else:
        for i in (5, 6, 7):
            rows[i]["reward_model"]["ground_truth"] = "\\frac{"
        step["max_bad_truth_share"] = 0.05  # 3 of 40 = 7.5%
        message = "3 of 40 rows (7.5%) have a ground truth the verifier cannot read"
    recipe = endpoint_recipe(tmp_path, "checks", "ray", **step)
    recipe["dataset_path"] = str(write_pool(path, rows))
    result = dj_process(recipe, tmp_path)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    assert not (tmp_path / "checks.jsonl").exists()


@pytest.mark.timeout(600)  # two recipes of two passes, one with a Ray start
def test_an_adaptive_late_pass_under_ray_writes_the_default_executors_bytes(tmp_path):
    """The adaptive budget's rounds are decided per batch, from each row's early pass rate: the
    actor pool serves the same rows the default executor's rounds serve."""
    path, rows = small_pool(tmp_path, rows=120)
    pool = write_pool(path, rows)
    outputs = {}
    for executor in ("default", "ray"):
        # two pools of 2 actors stream at once: half a CPU each on the 2-core machine
        recipe = endpoint_recipe(tmp_path, f"adaptive_{executor}", executor,
                                 **({"num_cpus": 0.5} if executor == "ray" else {}))
        recipe["dataset_path"] = str(pool)
        early = recipe["process"][0]["trajval_endpoint_reward_mapper"]
        # no learnability mapper in this recipe to tell the pass its prior: the paper's, given
        late = {**early, "window": "late", "budget": "adaptive", "budget_prior": {"prior": "trajval"}, "round_size": 4,
                "seed": 1, "cache_dir": str(tmp_path / f"cache_late_{executor}")}
        recipe["process"].append({"trajval_endpoint_reward_mapper": late})
        result = dj_process(recipe, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[executor] = (tmp_path / f"adaptive_{executor}.jsonl").read_bytes()
    assert outputs["ray"] == outputs["default"]
    rows = [json.loads(line) for line in outputs["default"].splitlines()]
    statuses = {row["trajval_r_late_status"] for row in rows}
    assert "skipped_early_saturated" in statuses  # the demo pool has tasks the base model always solves
    assert sum(row["trajval_r_late_n"] for row in rows) < 16 * len(rows)


def test_the_sampled_recipe_under_ray_matches_the_default_executor(tmp_path, capsys):
    """recipes/demo_sampled.yaml: the sampled passes as Ray actor pools (2 actors each) and the
    prediction on the gathered pool write the default executor's bytes, each run with its own
    rollout cache; every row is weighted, the unmeasured ones predicted and flagged, and the
    recorded cost is what `trajval cost` priced before the run."""
    from trajval_ops.cli import cost as cost_cli

    outputs = {}
    for executor in ("default", "ray"):
        config = yaml.safe_load((REPO / "recipes" / "demo_sampled.yaml").read_text())
        config["process"][0]["trajval_probe_trainer"]["output_dir"] = str(tmp_path / "probe")
        for step in config["process"][1:4]:
            settings = step["trajval_endpoint_reward_mapper"]
            settings.update(model=settings["model"].replace("outputs/demo/probe", str(tmp_path / "probe")),
                            cache_dir=str(tmp_path / f"cache_{executor}"), batch_size=64)
            if executor == "ray":
                settings.update(num_proc=2, num_cpus=0.3)  # three passes stream at once: 3 x 2 x 0.3 <= 2 CPUs
        config.update(dataset_path=str(POOL), export_path=str(tmp_path / f"{executor}.jsonl"))
        if executor == "ray":
            config.update(executor_type="ray", ray_address="local")
        result = dj_process(config, tmp_path, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[executor] = (tmp_path / f"{executor}.jsonl").read_bytes()
    assert outputs["ray"] == outputs["default"]

    rows = [json.loads(line) for line in outputs["default"].decode().splitlines()]
    pool = [json.loads(line) for line in POOL.read_text().splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in pool]
    assert sum(r["trajval_predicted"] for r in rows) == 600 - 156
    assert all(r["trajval_weight"] >= 0.05 for r in rows)
    assert all((r["trajval_r_late"] is None) == r["trajval_predicted"] for r in rows)
    assert all(r["trajval_r_early_short_n"] == 4 for r in rows)  # the short pass kept its own field
    capsys.readouterr()
    assert cost_cli.main(["--pool", str(tmp_path / "default.jsonl"), "--json"]) == 0
    recorded = json.loads(capsys.readouterr().out)
    assert cost_cli.main(["--config", str(REPO / "recipes" / "demo_sampled.yaml"), "--dataset_path", str(POOL),
                          "--json"]) == 0
    priced = json.loads(capsys.readouterr().out)
    assert recorded["completions"] == priced["completions"] == 12_192
    assert recorded["stages"]["extra"]["completions"] == 600 * 4


@pytest.mark.timeout(600)  # two recipes of two passes, one with a Ray start
def test_passes_after_a_filter_and_of_other_batch_sizes_write_the_default_executors_bytes(tmp_path):
    """Under Ray a sampled pass drew its sample from the pool as read, not the pool a filter before
    it left (36 of 144 rows measured where the default executor measured 15 of 59), and blocks of
    the smallest batch size cut a pass of 64 where the default executor does not (other seeded
    generate calls). Both now as under the default executor, byte for byte."""
    path, rows = small_pool(tmp_path, rows=144)
    pool = write_pool(path, rows)
    kept = ["add1", "mul2", "mod", "max"]
    outputs = {}
    for executor in ("default", "ray"):
        recipe = endpoint_recipe(tmp_path, f"filtered_{executor}", executor, batch_size=64, prompts_per_generate=64,
                                 sample_fraction=0.25, id_key="id", **({"num_cpus": 0.5} if executor == "ray" else {}))
        recipe["dataset_path"] = str(pool)
        early = recipe["process"][0]["trajval_endpoint_reward_mapper"]
        late = {**early, "window": "late", "seed": 1, "batch_size": 48, "prompts_per_generate": 48,
                "cache_dir": str(tmp_path / f"cache_late_{executor}")}
        recipe["process"] = [{"specified_field_filter": {"field_key": "family", "target_value": kept, "text_key": "id"}},
                             {"trajval_endpoint_reward_mapper": early}, {"trajval_endpoint_reward_mapper": late}]
        result = dj_process(recipe, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[executor] = (tmp_path / f"filtered_{executor}.jsonl").read_bytes()
    assert outputs["ray"] == outputs["default"]
    out = [json.loads(line) for line in outputs["default"].splitlines()]
    assert len(out) == sum(row["family"] in kept for row in rows) == 59
    assert out[0]["trajval_r_early_provenance"]["sample"]["pool_rows"] == 59


def test_too_many_bad_truths_stop_a_ray_run_whose_resampler_would_drop_them(tmp_path):
    """Under Ray the pass's end-of-pass checks ran on the exported pool: a hard cut after the pass
    dropped the bad-truth rows (scored 0) and the run exported. They now run on the pass's own
    rows, as under the default executor."""
    path, rows = small_pool(tmp_path)
    for i in (5, 6, 7, 8, 9, 10):
        rows[i]["reward_model"]["ground_truth"] = "\\frac{"
    recipe = endpoint_recipe(tmp_path, "cut", "ray", batch_size=8, max_bad_truth_share=0.1)
    recipe["dataset_path"] = str(write_pool(path, rows))
    recipe["process"] += [{"trajval_learnability_mapper": {"prior": "variance", "eps": 0.05}},
                          {"trajval_weighted_resampler": {"mode": "hard_cut", "score_key": "trajval_score",
                                                          "threshold": 0.0}}]
    result = dj_process(recipe, tmp_path)
    assert result.returncode != 0
    assert "6 of 40 rows (15.0%) have a ground truth the verifier cannot read" in result.stderr + result.stdout
    assert not (tmp_path / "cut.jsonl").exists()
