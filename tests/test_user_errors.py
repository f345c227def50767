"""A user error through dj-process ends with one readable block and exit code 2, its traceback in
a log file the message names; operator parameters are checked against their declared types and
bounds when the operator is built, naming the parameter."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import FIXTURE_POOL, REPO, dj_process, read_jsonl, write_jsonl


def _score_recipe(tmp_path, pool, **learnability) -> dict:
    recipe = yaml.safe_load((REPO / "recipes" / "score_pool.yaml").read_text())
    recipe.update(dataset_path=str(pool), export_path=str(tmp_path / "out.jsonl"))
    recipe["process"][0]["trajval_learnability_mapper"].update(learnability)
    return recipe


def _ends_with_one_error_block(result, message: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "└" not in output  # no traceback, no variable dumps
    tail = result.stderr.rstrip().splitlines()[-2:]
    assert tail[0].startswith("trajval_ops: error: ") and message in tail[0], tail
    log = re.fullmatch(r"\s*\(traceback: (.+)\)", tail[1]).group(1)
    assert "Traceback (most recent call last)" in open(log, encoding="utf-8").read()


def test_a_repeated_id(tmp_path):
    rows = read_jsonl(FIXTURE_POOL)
    rows[3]["extra_info"] = rows[1]["extra_info"]
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    result = dj_process(_score_recipe(tmp_path, pool), tmp_path)
    _ends_with_one_error_block(result, "row 3 (extra_info.index='fx-001'): id field 'extra_info.index' = 'fx-001' "
                                       "repeats row 1")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_missing_field(tmp_path):
    rows = read_jsonl(FIXTURE_POOL)
    del rows[2]["trajval_r_late"]
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    result = dj_process(_score_recipe(tmp_path, pool), tmp_path)
    _ends_with_one_error_block(result, "row 2 (extra_info.index='fx-002'): field 'trajval_r_late' is missing")


def test_an_explicit_prior_and_the_deprecated_score_that_disagree(tmp_path):
    """Issue 57: ``prior: trajval`` with ``score: variance`` wrote the variance weight, exit 0."""
    result = dj_process(_score_recipe(tmp_path, FIXTURE_POOL, prior="trajval", score="variance"), tmp_path)
    _ends_with_one_error_block(result, "prior 'trajval' and the deprecated score 'variance' name different priors: "
                                       "give prior alone")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_missing_pool_file(tmp_path):
    # a name with no '/' is what Data-Juicer takes for a Hugging Face dataset
    result = dj_process(_score_recipe(tmp_path, "no_such_pool.jsonl"), tmp_path)
    _ends_with_one_error_block(result, f"pool file not found: no_such_pool.jsonl (looked for {REPO / 'no_such_pool.jsonl'}")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_sharded_export(tmp_path):
    # Data-Juicer's shard writer swallowed a shard's write error: an empty file and exit 0
    result = dj_process({**_score_recipe(tmp_path, FIXTURE_POOL), "export_shard_size": 1 << 20}, tmp_path)
    _ends_with_one_error_block(result, "export_shard_size = 1048576: a trajval run exports one file")
    assert not list(tmp_path.glob("out*.jsonl"))


@pytest.mark.parametrize("export, message", [
    ("outdir", "export_path '{path}' is a folder: it names the file to write; give a file path"),
    ("out.jsonl", "export_path '{path}' is a folder"),  # a folder named like a file
    ("scored", "export_path '{path}' has no suffix: it names the file to write, whose suffix gives its format"),
])
def test_an_export_path_that_is_a_folder_or_has_no_suffix(tmp_path, export, message):
    """Data-Juicer's exporter, built before the pool is read, raised a bare ValueError ("Cannot
    determine file format from export_path") for a path without a suffix, an existing folder
    included: 40 lines of traceback, exit 1."""
    path = tmp_path / export
    if export != "scored":
        path.mkdir()
        (path / "kept.txt").write_text("kept\n")
    result = dj_process({**_score_recipe(tmp_path, FIXTURE_POOL), "export_path": str(path)}, tmp_path)
    _ends_with_one_error_block(result, message.format(path=path))
    assert not path.exists() if export == "scored" else sorted(p.name for p in path.iterdir()) == ["kept.txt"]


def test_a_nan_parameter(tmp_path):
    """NaN passed every declared bound: ``eps: .nan`` was taken, and died later in a traceback."""
    result = dj_process(_score_recipe(tmp_path, FIXTURE_POOL, eps=float("nan")), tmp_path)
    _ends_with_one_error_block(result, "trajval_learnability_mapper: eps must be a finite number, got nan")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_parameter_of_the_wrong_type(tmp_path):
    result = dj_process(_score_recipe(tmp_path, FIXTURE_POOL, eps=True), tmp_path)  # YAML `true` for a float
    _ends_with_one_error_block(result, "trajval_learnability_mapper: eps must be a number, got bool True")


@pytest.mark.parametrize("operator, parameters, message", [
    ("resampler", {"mode": "systemic"}, "mode must be one of 'multinomial', 'systematic', 'learnable_subset', "
                                        "'hard_cut', got 'systemic'"),
    ("resampler", {"num_samples": 2.5}, "num_samples must be an integer or null, got float 2.5"),
    ("resampler", {"num_samples": 0}, "num_samples must be in [1, inf), got 0"),
    ("resampler", {"threshold": "0.1"}, "threshold must be a number, got str '0.1'"),
    ("learnability", {"alpha": True}, "alpha must be a number, got bool True"),
    ("endpoint", {"n": 16.0}, "n must be an integer, got float 16.0"),
    ("probe", {"output_dir": "x", "epochs": "20"}, "epochs must be an integer, got str '20'"),
])
def test_operator_parameters_are_checked_when_the_operator_is_built(operator, parameters, message):
    from trajval_ops.ops.dj.error_exit import SettingError
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer
    from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler

    cls = {"resampler": TrajvalWeightedResampler, "learnability": TrajvalLearnabilityMapper,
           "endpoint": TrajvalEndpointRewardMapper, "probe": TrajvalProbeTrainer}[operator]
    with pytest.raises(SettingError, match=re.escape(message)):
        cls(**parameters)


def test_signatures_and_docstrings_stay_the_operators_own():
    import inspect

    from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler

    parameters = inspect.signature(TrajvalWeightedResampler.__init__).parameters
    assert [name for name in parameters if name in ("mode", "num_samples")] == ["mode", "num_samples"]
    assert ":param mode:" in TrajvalWeightedResampler.__init__.__doc__
    json.dumps(list(parameters))  # Data-Juicer's config parser reads the same names


def test_a_column_named_like_data_juicers_own_is_refused(tmp_path):
    rows = read_jsonl(FIXTURE_POOL)
    for row in rows:
        row["__dj__stats__"] = {"mine": 1}  # Data-Juicer's exporter would move this column out
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    result = dj_process(_score_recipe(tmp_path, pool), tmp_path)
    _ends_with_one_error_block(result, "column '__dj__stats__' is named like Data-Juicer's own")


def _sampled_recipe(tmp_path, **late) -> dict:
    recipe = yaml.safe_load((REPO / "recipes" / "demo_sampled.yaml").read_text())
    recipe["export_path"] = str(tmp_path / "out.jsonl")
    recipe["process"][0]["trajval_probe_trainer"]["output_dir"] = str(tmp_path / "probe")
    recipe["process"][3]["trajval_endpoint_reward_mapper"].update(late)
    return recipe


def test_sampled_passes_that_draw_different_samples_are_refused_before_anything_runs(tmp_path):
    """Issue 36, item 5: an early and a late sampled pass with other sample seeds would pay for
    two samples and score their overlap; the run stops before the probe, naming both passes."""
    result = dj_process(_sampled_recipe(tmp_path, sample_seed=1), tmp_path)
    _ends_with_one_error_block(result, "the sampled passes trajval_r_early (process[2]) and trajval_r_late "
                                       "(process[3]) draw different samples (sample_seed 0 vs 1)")
    assert not (tmp_path / "probe").exists() and not (tmp_path / "out.jsonl").exists()


def test_passes_set_to_measure_otherwise_are_refused_before_anything_runs(tmp_path):
    """A late pass with another temperature than the early one's: TrajVal's gain between them
    would be partly the temperature's; the run stops before the probe, naming both passes."""
    result = dj_process(_sampled_recipe(tmp_path, temperature=0.7), tmp_path)
    _ends_with_one_error_block(result, "trajval_learnability_mapper compares the pass rates of trajval_r_early "
                                       "(process[2]) and trajval_r_late (process[3]), which are set to measure "
                                       "otherwise (temperature 1.0 vs 0.7)")
    assert not (tmp_path / "probe").exists() and not (tmp_path / "out.jsonl").exists()


def test_a_sampled_pass_refuses_to_draw_another_sample_than_the_pools(tmp_path):
    """The same across two runs: a late pass on a pool an earlier recipe's early pass sampled."""
    import pyarrow as pa

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    sample = {"fraction": 0.25, "seed": 0, "group_key": None, "id_key": "id", "pool_rows": 4, "measured_rows": 1}
    table = pa.Table.from_pylist([{"id": str(i), "prompt": "1+1?", "answer": "2", "trajval_r_early": None,
                                   "trajval_r_early_provenance": {"sample": sample}} for i in range(4)])
    late = TrajvalEndpointRewardMapper(window="late", sample_fraction=0.5, sample_seed=0)
    with pytest.raises(TrajvalInputError, match=r"the pool's sampled pass 'trajval_r_early' drew another sample "
                                                r"\(sample_fraction 0.25 vs 0.5\)"):
        late.check_pool(table)
    TrajvalEndpointRewardMapper(window="late", sample_fraction=0.25, sample_seed=0).check_pool(table)  # the same: drawn


def test_a_sampled_pass_refuses_a_pool_its_earlier_sample_cannot_be_drawn_from_again():
    """The same settings draw ceil(fraction x size) rows per group of the pool they are given: an
    early pass sampled 12 rows at 0.5 (6 measured), a filter dropped the last 4, and the late pass
    drew 4 of the 8 left, one of them a row the early pass did not measure (its rollouts wasted,
    the overlap smaller, nothing said). It is refused, naming the row; the pool as sampled is not."""
    import pyarrow as pa

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
    from trajval_ops.priors.sampled import stratified_sample

    ids = [f"q{i}" for i in range(12)]
    early = stratified_sample(ids, 0.5, 0)
    sample = {"fraction": 0.5, "seed": 0, "group_key": None, "id_key": "id", "pool_rows": 12, "measured_rows": 6}
    rows = [{"id": task, "prompt": "1+1?", "answer": "2", "trajval_r_early": 0.5 if keep else None,
             "trajval_r_early_status": "ok" if keep else "not_sampled",
             "trajval_r_early_provenance": {"sample": sample}} for task, keep in zip(ids, early)]
    late = stratified_sample(ids[:8], 0.5, 0)
    first = next(i for i in range(8) if late[i] != early[i])
    assert late[first] and not early[first]  # the filtered pool's draw takes a row the early pass left
    with pytest.raises(TrajvalInputError, match=rf"the pool's sampled pass 'trajval_r_early' measured other rows "
                                                rf"than this pass draws with the same sample settings: row {first} "
                                                rf"\(id='{ids[first]}'\): this pass draws it and 'trajval_r_early' "
                                                rf"did not measure it\..*drew from 12 rows, this pool has 8\): run "
                                                rf"this pass on the pool 'trajval_r_early' ran on"):
        TrajvalEndpointRewardMapper(window="late", sample_fraction=0.5, sample_seed=0).check_pool(
            pa.Table.from_pylist(rows[:8]))
    for pool in (rows, rows[::-1]):  # the pool it sampled, in any order: the same rows drawn
        late_op = TrajvalEndpointRewardMapper(window="late", sample_fraction=0.5, sample_seed=0)
        late_op.check_pool(pa.Table.from_pylist(pool))
        assert late_op.endpoint._sampled_ids == {repr(task) for task, keep in zip(ids, early) if keep}


def test_a_misspelled_parameter_is_one_block_with_data_juicers_suggestion(tmp_path):
    """Issue 36, item 12: Data-Juicer's preflight finds a misspelled parameter of a trajval
    operator; the run ends with its message in one block and exit 2 (it printed 314 lines and two
    tracebacks, exit 1). A recipe without trajval operators keeps Data-Juicer's own behaviour."""
    recipe = _score_recipe(tmp_path, FIXTURE_POOL, alpah=0.3)
    result = dj_process(recipe, tmp_path)
    _ends_with_one_error_block(result, "[trajval_learnability_mapper] Unknown parameter 'alpah' (did you mean: alpha?)")
    plain = {"dataset_path": str(FIXTURE_POOL), "export_path": str(tmp_path / "plain.jsonl"), "np": 1,
             "process": [{"text_length_filter": {"min_lenn": 1}}]}
    result = dj_process(plain, tmp_path)
    assert result.returncode not in (0, 2) and "Unknown parameter 'min_lenn'" in result.stdout + result.stderr
    assert "trajval_ops: error" not in result.stderr


def test_a_cuda_probe_without_a_gpu_is_one_block_before_the_child_starts(tmp_path):
    """Issue 57: ``device: cuda`` on a machine without a GPU ended a dj-process probe with the
    child's raw RuntimeError (40 frames), exit 1; it is now the line ``trajval validate`` gives,
    said before the training child starts (nothing is written to the probe's folder)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: device: cuda is valid here")
    recipe = yaml.safe_load((REPO / "recipes" / "demo_trajval.yaml").read_text())
    recipe.update(export_path=str(tmp_path / "out.jsonl"), process=recipe["process"][:1])
    recipe["process"][0]["trajval_probe_trainer"].update(output_dir=str(tmp_path / "probe"), device="cuda")
    result = dj_process(recipe, tmp_path)
    _ends_with_one_error_block(result, "trajval_probe_trainer: device: cuda, but torch sees no GPU on this machine; "
                                       "set device: cpu, or auto")
    assert "probe: generation with" not in result.stderr  # the child never started
    assert not (tmp_path / "probe").exists() and not (tmp_path / "out.jsonl").exists()


def test_the_probe_operator_checks_the_device_before_it_spawns_the_training_child(monkeypatch):
    """The same check as ``trajval validate``'s (:func:`trajval_ops.hardware.missing_gpu`), asked
    of the GPU count (NVML) before any process starts; the child's own check says it alike."""
    import multiprocessing

    import pyarrow as pa
    import torch

    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer
    from trajval_ops.probe.config import resolve_device

    def no_child(*args, **kwargs):
        raise AssertionError("a training child was started")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(multiprocessing, "get_context", no_child)
    probe = TrajvalProbeTrainer(output_dir="unused", model="tiny-arith", device="cuda", show_progress=False)
    with pytest.raises(TrajvalInputError, match="trajval_probe_trainer: device: cuda, but torch sees no GPU"):
        probe.process_table(pa.Table.from_pylist(read_jsonl(FIXTURE_POOL)))
    with pytest.raises(TrajvalInputError, match="^device: cuda, but torch sees no GPU on this machine; set device: cpu"):
        resolve_device("cuda")
