"""``trajval validate --reuse-from``: which finished units of another run are copied."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from tests.conftest import REPO
from trajval_ops.experiment.validation_config import ConfigError, load_config, model_identity
from trajval_ops.experiment.protocol import Unit, _grpo_unit, main, run_units
from trajval_ops.experiment.reuse import check_reusable_run, reuse_units, without_run_paths


#: what a CPU machine resolves the validation config's precision and generation auto to
CPU = {"precision": "fp32", "generation": "transformers"}
SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"


def _run(root, pool_weights=None, data=b'{"id": "t0"}\n'):
    """A validation run's folder: protocol marker (the smoke config's model), one data file, and
    (optionally) a training pool."""
    (root / "data").mkdir(parents=True)
    (root / "protocol.json").write_text(json.dumps({"model": model_identity(load_config(SMOKE))}))
    (root / "data" / "context-a.jsonl").write_bytes(data)
    if pool_weights is not None:
        (root / "priors").mkdir()
        (root / "priors" / "train_pool.jsonl").write_text(
            "".join(json.dumps({"id": f"t{i}", "w": w, "r": 0.5}) + "\n" for i, w in enumerate(pool_weights)))
    return root


def _unit(root, name, seed=0, weight_column=None):
    folder = root / "arms" / name / f"seed-{seed}"
    spec = {"name": str(folder), "seed": seed, "pool": str(root / "priors" / "train_pool.jsonl"),
            "weight_column": weight_column, "evaluations": [{"output": str(folder / "heldout.jsonl")}]}
    return _grpo_unit(f"arms/{name}/seed-{seed}", folder, spec)


def _finish(unit, result='{"steps": 4}'):
    unit.prepare()
    unit.folder.mkdir(parents=True)
    (unit.folder / "result.json").write_text(result)
    unit.log.write_text("trained\n")


def test_equal_units_are_copied_and_others_are_not(tmp_path):
    source, out = _run(tmp_path / "a", [1.0, 0.5]), _run(tmp_path / "b", [1.0, 0.5])
    for unit in (_unit(source, "uniform"), _unit(source, "uniform", seed=1)):
        _finish(unit)
    mine = [_unit(out, "uniform"), _unit(out, "uniform", seed=1)]
    mine[1] = _grpo_unit(mine[1].name, mine[1].folder, {"seed": 2})  # another seed: another spec
    assert reuse_units(mine, source, out, CPU) == ["arms/uniform/seed-0"]
    assert mine[0].done() and (mine[0].folder / "result.json").read_text() == '{"steps": 4}'
    assert mine[0].log.read_text() == "trained\n"
    assert not mine[1].done()


def test_a_copy_cut_short_leaves_the_unit_unfinished(tmp_path, monkeypatch):
    """A unit is done once its result.json is there: a copy that failed part-way (disk full, a
    kill) left the result beside a cut trajectory, and the rerun took the unit as finished."""
    import os
    import shutil

    source, out = _run(tmp_path / "a", [1.0]), _run(tmp_path / "b", [1.0])
    _finish(_unit(source, "uniform"))
    (_unit(source, "uniform").folder / "heldout.jsonl").write_text('{"id": "t0"}\n' * 1000)
    copy = shutil.copyfile

    def disk_full(src, dst, *args, **kwargs):
        if os.fspath(src).endswith("heldout.jsonl"):  # copytree hands over directory entries
            raise OSError(28, "No space left on device")
        return copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", disk_full)
    mine = _unit(out, "uniform")
    with pytest.raises(shutil.Error):
        reuse_units([mine], source, out, CPU)
    assert not mine.done()
    monkeypatch.setattr(shutil, "copyfile", copy)
    assert reuse_units([mine], source, out, CPU) == ["arms/uniform/seed-0"] and mine.done()
    assert (mine.folder / "heldout.jsonl").read_text().count("\n") == 1000


def test_a_unit_trained_with_other_numerics_is_not_copied(tmp_path, caplog_loguru):
    source, out = _run(tmp_path / "a", [1.0]), _run(tmp_path / "b", [1.0])
    _finish(_unit(source, "uniform"), json.dumps({"steps": 4, "precision": "bf16-mixed", "generation": "transformers"}))
    _finish(_unit(source, "uniform", seed=1), json.dumps({"steps": 4, **CPU}))
    mine = [_unit(out, "uniform"), _unit(out, "uniform", seed=1)]
    assert reuse_units(mine, source, out, CPU) == ["arms/uniform/seed-1"]
    assert not mine[0].done()
    assert "arms/uniform/seed-0 not reused from" in caplog_loguru.text
    assert "it trained with precision bf16-mixed (here fp32)" in caplog_loguru.text
    gpu = {"precision": "bf16-mixed", "generation": "transformers"}
    assert reuse_units(mine, source, out, gpu) == ["arms/uniform/seed-0"]


def test_an_arm_is_copied_only_once_its_prior_is_known_and_equal(tmp_path):
    source = _run(tmp_path / "a", [1.0, 0.5])
    _finish(_unit(source, "trajval", weight_column="w"))
    out = tmp_path / "b"
    _run(out)  # no training pool yet
    assert reuse_units([_unit(out, "trajval", weight_column="w")], source, out, CPU) == []
    (out / "priors").mkdir()
    pool = out / "priors" / "train_pool.jsonl"
    pool.write_text("".join(json.dumps({"id": f"t{i}", "w": w}) + "\n" for i, w in enumerate([1.0, 0.25])))
    assert reuse_units([_unit(out, "trajval", weight_column="w")], source, out, CPU) == []  # a weight differs
    pool.write_text("".join(json.dumps({"id": f"t{i}", "w": w}) + "\n" for i, w in enumerate([1.0, 0.5])))
    assert reuse_units([_unit(out, "trajval", weight_column="w")], source, out, CPU) == ["arms/trajval/seed-0"]


def test_rows_in_another_order_are_another_prior(tmp_path):
    source = _run(tmp_path / "a", [1.0, 0.5])
    _finish(_unit(source, "trajval", weight_column="w"))
    out = _run(tmp_path / "b")
    (out / "priors").mkdir()
    (out / "priors" / "train_pool.jsonl").write_text(
        json.dumps({"id": "t1", "w": 0.5}) + "\n" + json.dumps({"id": "t0", "w": 1.0}) + "\n")
    assert reuse_units([_unit(out, "trajval", weight_column="w")], source, out, CPU) == []


def test_another_split_or_a_folder_without_a_run_is_an_error(tmp_path):
    config = load_config(SMOKE)
    source = _run(tmp_path / "a")
    with pytest.raises(ConfigError, match=r"differ from this run's \(context-a.jsonl\)"):
        check_reusable_run(source, _run(tmp_path / "b", data=b'{"id": "t9"}\n'), config)
    with pytest.raises(ConfigError, match="not a validation run"):
        check_reusable_run(tmp_path / "nowhere", source, config)
    with pytest.raises(ConfigError, match="the run's own folder"):
        check_reusable_run(source, source, config)
    check_reusable_run(source, _run(tmp_path / "c"), config)


def _other_build(tmp_path, monkeypatch):
    """The smoke config, and the same config on a copy of its model with one setting changed:
    another build under another folder (the specs would name each by the config's ``model``)."""
    import shutil

    from trajval_ops.models import resolve_model

    monkeypatch.setenv("TRAJVAL_CACHE", str(tmp_path / "cache"))
    config = load_config(SMOKE)
    other = tmp_path / "other" / "tiny-arith"
    shutil.copytree(resolve_model(config.model), other)
    settings = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(settings | {"initializer_range": 0.5}))
    return config, dataclasses.replace(config, model=str(other))


def test_a_run_of_another_model_build_is_refused_naming_both(tmp_path, monkeypatch, capsys):
    """A spec names the model by name: a source run of other weights under the same name had its
    units copied (audit B, finding 1); its protocol.json's model record now refuses it."""
    config, other = _other_build(tmp_path, monkeypatch)
    source, out = _run(tmp_path / "a"), _run(tmp_path / "b")
    theirs = model_identity(other) | {"name": config.model}
    (source / "protocol.json").write_text(json.dumps({"model": theirs}))
    with pytest.raises(ConfigError) as refused:
        check_reusable_run(source, out, config)
    message = str(refused.value)
    assert f"trained 'tiny-arith' with content sha256 {theirs['sha256'][:12]}" in message
    assert f"this run trains 'tiny-arith' (content sha256 {model_identity(config)['sha256'][:12]}" in message
    assert theirs["sha256"] != model_identity(config)["sha256"]
    check_reusable_run(source, out, other)  # the same build: reused
    # through the CLI: exit 2 before anything trains, the error in one block
    run = tmp_path / "run"
    code = main(["--config", str(SMOKE), "--out", str(run), "--reuse-from", str(source)])
    err = capsys.readouterr().err
    assert code == 2 and "none of its units is reused" in err and not (run / "oracle").exists()


def test_a_run_recorded_before_the_model_record_is_checked_by_its_hash(tmp_path, monkeypatch):
    """A protocol.json from before the ``model`` key holds the model inside its hash only: the
    hash recomputed from its own settings tells this model's build (by content, or by folder for
    runs recorded before 2026-11-27) from another; another build is refused."""
    from trajval_ops.experiment.validation_config import protocol_hash

    config, other = _other_build(tmp_path, monkeypatch)
    out = _run(tmp_path / "b")
    for n, (trained, by_location) in enumerate([(config, False), (config, True), (other, False)]):
        source = _run(tmp_path / f"a{n}")
        settings = trained.to_dict() | {"arms": "recorded as they were"}  # its own settings, not this run's
        (source / "protocol.json").write_text(json.dumps(
            {"hash": protocol_hash(trained, settings, by_location=by_location), "config": settings}))
        if trained is config:
            check_reusable_run(source, out, config)
        else:
            with pytest.raises(ConfigError, match="cannot tell which model its units trained: its protocol.json "
                                                  "records no model content"):
                check_reusable_run(source, out, config)


def test_a_run_recorded_before_revisions_is_told_by_its_model_and_its_reading_named(tmp_path, monkeypatch,
                                                                                   caplog_loguru):
    """A protocol.json from before the ``model`` key holds a hash without the verifier's revision:
    recomputed with this release's (the math verifier's 2) it never matched, and the same weights
    were refused as "cannot tell which model ... It trained other weights". The hash is tried
    without the revision too; that its units were scored by another reading (or one not known) is
    said naming the revision, and no unit is copied (their specs differ). Another build is still
    refused."""
    from trajval_ops.experiment.validation_config import protocol_hash

    config, other = _other_build(tmp_path, monkeypatch)
    source, out = _run(tmp_path / "a"), _run(tmp_path / "b")
    (source / "protocol.json").write_text(json.dumps({"hash": protocol_hash(config, revision=1),
                                                      "config": config.to_dict()}))
    check_reusable_run(source, out, config)
    assert (f"--reuse-from {source}: its protocol.json records no revision of the math verifier (records without one were read by revision 1 or 2, which cannot be told apart); "
            "this release reads answers as revision 2: none of its units is reused") in caplog_loguru.text
    (source / "protocol.json").write_text(json.dumps({"model": model_identity(config), "verifier_revision": 1}))
    check_reusable_run(source, out, config)
    assert ("revision 1 of the math verifier scored its units, and this release reads answers as revision 2: none "
            "of its units is reused") in caplog_loguru.text
    (source / "protocol.json").write_text(json.dumps({"hash": protocol_hash(other, revision=1),
                                                      "config": other.to_dict()}))
    with pytest.raises(ConfigError, match="cannot tell which model its units trained"):
        check_reusable_run(source, out, config)


def test_a_new_run_records_its_models_content(tmp_path):
    from trajval_ops.experiment.protocol import check_same_protocol

    config = load_config(SMOKE)
    check_same_protocol(config, tmp_path / "run")
    record = json.loads((tmp_path / "run" / "protocol.json").read_text())
    assert record["model"] == {"name": "tiny-arith", "sha256": model_identity(config)["sha256"]}


def test_cli_exits_2_when_the_run_to_reuse_is_missing(tmp_path, capsys):
    code = main(["--config", str(REPO / "recipes" / "validation" / "smoke.yaml"), "--out", str(tmp_path / "out"),
                 "--reuse-from", str(tmp_path / "nowhere")])
    assert code == 2 and "not a validation run" in capsys.readouterr().err


def test_paths_of_the_run_alone_are_replaced(tmp_path):
    run = tmp_path / "long"
    spec = {"pool": f"{run}/priors/p.jsonl", "other": f"{run}-b/x", "list": [str(run)], "n": 3}
    assert without_run_paths(spec, run) == {"pool": "<run>/priors/p.jsonl", "other": f"{run}-b/x",
                                            "list": ["<run>"], "n": 3}


def test_a_unit_copied_while_others_ran_is_not_launched(tmp_path):
    first_folder, copied_folder = tmp_path / "first", tmp_path / "copied"
    first = Unit("first", first_folder,
                 [sys.executable, "-c", f"import pathlib; pathlib.Path({str(first_folder)!r}).mkdir(); "
                                        f"pathlib.Path({str(first_folder / 'result.json')!r}).write_text('{{}}')"],
                 done=lambda: (first_folder / "result.json").is_file())
    # would fail if launched; it becomes done when ``first`` finishes (as the priors' reuse does)
    copied = Unit("copied", copied_folder, [sys.executable, "-c", "raise SystemExit(3)"],
                  done=lambda: (copied_folder / "result.json").is_file(), after=("gate",))
    finished: set[str] = set()

    def copy_then_open_the_gate():
        copied_folder.mkdir()
        (copied_folder / "result.json").write_text("{}")
        finished.add("gate")

    run_units([first, copied], 1, finished, {"first": copy_then_open_the_gate})
    assert {"first", "copied"} <= finished and (copied_folder / "result.json").is_file()
