"""The Data-Juicer glue (trajval_ops/ops/dj/): version check, plugin loading, load strategies only for trajval runs."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from trajval_ops.ops.dj import config_merge, executor, loading
from trajval_ops.ops.dj import version as dj_version


@pytest.mark.parametrize("version", ["1.6.1", "1.6.9", "1.6.2rc1"])
def test_supported_versions(version):
    assert dj_version.check_data_juicer(version) == version


@pytest.mark.parametrize("version", ["1.5.9", "1.7.0", "2.0"])
def test_unsupported_versions_say_what_is_supported(version):
    with pytest.raises(dj_version.UnsupportedDataJuicer, match=r"supports py-data-juicer >=1.6.1,<1.7; this environment has"):
        dj_version.check_data_juicer(version)


def test_plugin_loads_cleanly_and_registers_its_load_strategies():
    code = (
        "import data_juicer.config\n"  # the order dj-process imports in: plugins load mid-import
        "from data_juicer.core.data.load_strategy import DataLoadStrategyRegistry as R\n"
        "print(R.get_strategy_class('default', 'local', None).__name__, R.get_strategy_class('ray', 'local', None).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["TrajvalLocalLoadStrategy", "TrajvalRayLocalLoadStrategy"]
    assert "Failed to load operator plugin" not in result.stderr


def test_only_recipes_with_trajval_operators_use_them():
    import trajval_ops.ops  # noqa: F401 - registers the operator names

    assert executor.uses_trajval_operators(SimpleNamespace(process=[{"trajval_learnability_mapper": {}}]))
    assert not executor.uses_trajval_operators(SimpleNamespace(process=[{"text_length_filter": {"min_len": 1}}]))
    assert not executor.uses_trajval_operators(SimpleNamespace())


def test_ray_blocks_divide_every_endpoint_passs_batch():
    """A pass's Ray batches are whole blocks: blocks of the smallest batch size (48) cut a pass
    of 64 at 64, 96, 144 where the default executor cuts at 64, 128 (other seeded generate
    calls). Blocks of the greatest common divisor put every boundary where it belongs."""
    import pyarrow as pa

    cfg = SimpleNamespace(process=[{"trajval_endpoint_reward_mapper": {"batch_size": 32}},
                                   {"trajval_learnability_mapper": {"batch_size": 1000}}])
    assert loading.ray_block_rows(cfg) == 32  # only the passes' batches seed anything
    two_passes = SimpleNamespace(process=[{"trajval_endpoint_reward_mapper": {"batch_size": 64}},
                                          {"trajval_endpoint_reward_mapper": {"batch_size": 48}}])
    assert loading.ray_block_rows(two_passes) == 16
    unset = SimpleNamespace(process=[{"trajval_endpoint_reward_mapper": {"batch_size": 64}},
                                     {"trajval_endpoint_reward_mapper": {}}])
    assert loading.ray_block_rows(unset) == 8  # gcd(64, Data-Juicer's default 1000)
    assert loading.ray_block_rows(SimpleNamespace(process=[{"x": {}}])) == 1000  # Data-Juicer's default
    table = pa.table({"i": list(range(70))})
    blocks = loading.table_blocks(table, 32)
    assert [b.num_rows for b in blocks] == [32, 32, 6]
    assert pa.concat_tables(blocks).equals(table)
    assert loading.table_blocks(table.slice(0, 0), 32)[0].num_rows == 0  # the schema survives


@pytest.mark.parametrize("pool_size, num_gpus, per_engine, memory, message", [
    (2, 1, 2, None, "tensor_parallel_size 2 needs num_gpus: 2 per actor; the recipe reserves 1"),
    (2, None, 2, None, "tensor_parallel_size 2 needs num_gpus: 2"),
    (2, 2, 1, 0.9, r"num_gpus 2 per actor, but its one vLLM engine \(tensor_parallel_size 1\) uses 1"),
    (2, 0.5, 1, 0.9, "num_gpus 0.5 puts engines side by side on a GPU"),
])
def test_actor_pool_resources_are_checked_before_any_model_loads(pool_size, num_gpus, per_engine, memory, message):
    with pytest.raises(ValueError, match=message):
        executor.check_ray_actor_resources("op", pool_size, num_gpus, per_engine, memory)
    executor.check_ray_actor_resources("op", [1, 4], None)  # a CPU pool: nothing to check
    executor.check_ray_actor_resources("op", 2, 0.5, 1, 0.45)  # two engines a GPU, each within its share


def test_a_setting_of_an_earlier_entry_of_the_same_operator_is_not_passed_on(tmp_path):
    """Data-Juicer's config parser merges the entries of one operator in turn, so the early pass
    below would inherit the short pass's output_key and overwrite its column; the adapter gives
    each entry back the defaults of what its own entry does not set (not what the command line sets)."""
    import yaml
    from data_juicer.config import init_configs

    import trajval_ops.ops  # noqa: F401  (registers the operators)

    recipe = {"dataset_path": "pool.jsonl", "export_path": str(tmp_path / "out.jsonl"), "process": [
        {"trajval_endpoint_reward_mapper": {"model": "tiny-arith", "output_key": "short", "n": 4, "sample_fraction": 0.5}},
        {"trajval_endpoint_reward_mapper": {"model": "tiny-arith", "window": "early", "n": 16}},
        {"trajval_endpoint_reward_mapper": {"model": "tiny-arith", "window": "late", "n": 16, "seed": 1}},
    ]}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    cfg = init_configs(["--config", str(path)])
    built = [entry["trajval_endpoint_reward_mapper"] for entry in cfg.process]
    assert built[1]["output_key"] == "short"  # the merge this undoes (remove the adapter's fix once it is gone)
    restored = config_merge.restore_unset_settings(cfg, argv=[])
    assert restored == ["trajval_endpoint_reward_mapper[1].output_key", "trajval_endpoint_reward_mapper[1].sample_fraction",
                        "trajval_endpoint_reward_mapper[2].output_key", "trajval_endpoint_reward_mapper[2].sample_fraction"]
    assert [(b["output_key"], b["sample_fraction"], b["n"], b["seed"]) for b in built] == [
        ("short", 0.5, 4, 0), (None, 1.0, 16, 0), (None, 1.0, 16, 1)]
    # a setting on the command line is every entry's: left as it is
    cfg = init_configs(["--config", str(path)])
    assert config_merge.restore_unset_settings(cfg, argv=["--trajval_endpoint_reward_mapper.output_key", "x"]) == [
        "trajval_endpoint_reward_mapper[1].sample_fraction", "trajval_endpoint_reward_mapper[2].sample_fraction"]


def test_data_juicers_own_operator_settings_of_an_earlier_entry_are_not_passed_on(tmp_path):
    """The base operator's settings leaked too: an early pass's batch_size (which groups the
    transformers engine's seeded generate calls), accelerator, num_cpus and num_proc reached the
    late pass. Each gets what an entry without it gets: the registered default, the run's np for
    num_proc, nothing for batch_size (the operator's own default)."""
    import yaml
    from data_juicer.config import init_configs

    import trajval_ops.ops  # noqa: F401  (registers the operators)

    recipe = {"dataset_path": "pool.jsonl", "export_path": str(tmp_path / "out.jsonl"), "np": 1, "process": [
        {"trajval_endpoint_reward_mapper": {"model": "tiny-arith", "window": "early", "batch_size": 3,
                                            "accelerator": "cuda", "num_cpus": 2, "num_proc": 2,
                                            "ray_execution_mode": "task"}},
        {"trajval_endpoint_reward_mapper": {"model": "tiny-arith", "window": "late", "batch_size": 5}},
        {"trajval_endpoint_reward_mapper": {"model": "tiny-arith", "output_key": "other"}},
    ]}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    cfg = init_configs(["--config", str(path)])
    built = [entry["trajval_endpoint_reward_mapper"] for entry in cfg.process]
    assert (built[1]["accelerator"], built[2]["batch_size"]) == ("cuda", 5)  # the merge this undoes
    config_merge.restore_unset_settings(cfg, argv=[])
    keys = ("batch_size", "accelerator", "num_cpus", "num_proc", "ray_execution_mode")
    assert [{key: settings.get(key, "unset") for key in keys} for settings in built] == [
        {"batch_size": 3, "accelerator": "cuda", "num_cpus": 2, "num_proc": 2, "ray_execution_mode": "task"},
        {"batch_size": 5, "accelerator": None, "num_cpus": None, "num_proc": 1, "ray_execution_mode": None},
        {"batch_size": "unset", "accelerator": None, "num_cpus": None, "num_proc": 1, "ray_execution_mode": None}]


def test_a_pool_with_a_byte_order_mark_runs_as_it_would_without(tmp_path):
    """dj-process refused a UTF-8 JSONL beginning with a byte-order mark (line 1 "is not valid
    JSON: Unexpected UTF-8 BOM"); its rows are the file's rows, and the run writes what the same
    pool without the mark gives."""
    import yaml

    from tests.conftest import FIXTURE_POOL, REPO, dj_process

    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + FIXTURE_POOL.read_bytes())
    recipe = yaml.safe_load((REPO / "recipes" / "score_pool.yaml").read_text())
    exports = {}
    for name, pool in (("plain", FIXTURE_POOL), ("marked", marked)):
        exports[name] = tmp_path / f"{name}_scored.jsonl"
        result = dj_process({**recipe, "dataset_path": str(pool), "export_path": str(exports[name])}, tmp_path)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    plain, scored = exports["plain"].read_bytes(), exports["marked"].read_bytes()
    assert scored.count(b"\n") == FIXTURE_POOL.read_bytes().count(b"\n") and not scored.startswith(b"\xef\xbb\xbf")
    assert scored.replace(str(marked).encode(), b"POOL") == plain.replace(str(FIXTURE_POOL).encode(), b"POOL")
