"""Issue 37, item 4: a real model in `trajval validate` (SmolLM2-135M-Instruct on the generated
arithmetic pool of recipes/data/real_smollm2/): the configs load, their data are what the
documented commands make, and the smoke variant runs end to end on CPU (slow suite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO
from trajval_ops.experiment.validation_config import ConfigError, data_file, load_config

FULL = REPO / "recipes" / "validation" / "real_smollm2.yaml"
SMOKE = REPO / "recipes" / "validation" / "real_smollm2_smoke.yaml"
SHORT = REPO / "recipes" / "validation" / "real_smollm2_short.yaml"
SHORT_SMOKE = REPO / "recipes" / "validation" / "real_smollm2_short_smoke.yaml"
#: The H200's SmolLM2 rates (recipes/validation/real_smollm2.yaml's header): the endpoint pass's completions a second, and a
#: probe step's (64 completions generated and trained on in 3.6 s, fp32 at 128 tokens)
H200_ENDPOINT_RATE, H200_STEP_RATE = 37.0, 64 / 3.6
DATA = REPO / "recipes" / "data" / "real_smollm2"


def test_configs_name_the_real_model_and_the_generated_splits():
    full, smoke = load_config(FULL), load_config(SMOKE)
    for config in (full, smoke):
        assert config.model == "smollm2-135m-instruct" and config.tasks is None
        assert (config.verifier, config.verifier_options) == ("math", {"fallback_last_number": True})
        assert config.device == "auto" and config.workers is None
    assert [data_file(full, name).resolve() for name in ("pool", "heldout")] == [DATA / "pool.jsonl",
                                                                                DATA / "heldout.jsonl"]
    assert set(full.training.arms) == {"uniform", "variance", "trajval"}
    assert full.grpo.max_completion_length == 128  # what the tuning study measured at
    assert (smoke.training.steps, smoke.training.seeds, smoke.training.arms) == (2, (0,), ("uniform", "variance"))


def test_a_config_runs_from_another_directory_its_data_read_from_its_own_folder(tmp_path, monkeypatch, capsys):
    """Issue 54, item 5: relative `data:` paths are the config's folder's, so real_smollm2.yaml
    loads, prices and prepares its data from any working directory (it stopped with exit 2, the
    files not found, outside the repository's root)."""
    from trajval_ops.experiment import protocol

    monkeypatch.chdir(tmp_path)
    assert protocol.main(["--config", str(FULL), "--dry-run", "--rate", "37", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["completions"] == 88_064  # the config's own sizing comment
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a relative path to the config: its folder, from here
    config = load_config(os.path.relpath(SMOKE, tmp_path / "elsewhere"))
    summary = protocol.prepare_data(config, tmp_path / "out")
    assert (summary["context-a"], summary["heldout"]) == (8, 4)
    raw = yaml.safe_load(FULL.read_text())
    raw["data"] |= {"pool": str(DATA / "pool.jsonl"), "heldout": "heldout.jsonl"}  # absolute; next to the config
    (tmp_path / "moved.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"data.heldout: file not found: .*heldout.jsonl \(a relative path is read "
                                          r"from the config's folder\)"):
        load_config(tmp_path / "moved.yaml")


def test_the_short_verdict_fits_one_gpu_call():
    """Issue 54, item 6: every unit side by side on one GPU, uniform / variance (n = 4) / TrajVal
    with the full-pool probe, three seeds, within 8 minutes by the dry run at the H200's rates;
    its smoke variant has the same shape at CPU sizes."""
    from trajval_ops.experiment.dry_run import dry_run, unit_costs

    full, short, smoke = load_config(FULL), load_config(SHORT), load_config(SHORT_SMOKE)
    for config in (short, smoke):
        assert (config.model, config.verifier, config.verifier_options) == (full.model, full.verifier,
                                                                            full.verifier_options)
        assert set(config.training.arms) == {"uniform", "variance", "trajval"}
        assert (config.probe.probe_fraction, config.probe.epochs) == (1.0, 1)  # the full-pool probe
        assert config.workers == len(unit_costs(config))  # every unit at once
    assert (short.data, short.grpo, short.probe.n) == (full.data, full.grpo, 4)
    assert len(short.training.seeds) >= 3
    # --rate is per GPU: the H200's rates are one unit's alone on the card; the plan assumes each of
    # the units sharing it keeps that rate (not measured), so the card's rate is the units' sum
    for rate in (H200_ENDPOINT_RATE, H200_STEP_RATE):
        assert dry_run(short, rate * short.workers, gpus=1)["generation_wall_time_s"] <= 8 * 60, rate


def test_smoke_data_are_the_first_lines_of_the_full_data():
    for name, lines in (("pool", 8), ("heldout", 4)):
        full = (DATA / f"{name}.jsonl").read_text().splitlines(keepends=True)
        assert (DATA / "smoke" / f"{name}.jsonl").read_text() == "".join(full[:lines])


def test_committed_splits_are_what_the_documented_commands_make(tmp_path, monkeypatch):
    """The commands in real_smollm2.yaml's comment, run again, give the committed files byte for
    byte; no split of the config holds a task an earlier study read (the pilots, the first split)."""
    pytest.importorskip("reasoning_gym")
    from trajval_ops.cli.make_pool import main as make_pool

    commands = [line.split("#", 1)[1].strip() for line in FULL.read_text().splitlines()
                if line.startswith("#") and "trajval make-pool" in line]
    assert len(commands) == 4, "real_smollm2.yaml names its make-pool commands (two pilots, a first split, the splits)"
    monkeypatch.chdir(REPO)  # the commands' paths are the repository's, as the manifests record them
    for text in commands:
        args = text.split()
        assert args[:2] == ["trajval", "make-pool"], text
        args = [a.strip('"') for a in args[2:]]
        out = args.index("--out") + 1
        committed = REPO / args[out]
        args[out] = str(tmp_path / args[out])
        assert make_pool(args) == 0
        for path in committed.glob("*.json*"):
            assert (tmp_path / committed.relative_to(REPO) / path.name).read_bytes() == path.read_bytes(), path
    def prompts(path):
        return {json.loads(line)["trajval_prompt_hash"] for line in path.read_text().splitlines()}

    studied = set().union(*(prompts(DATA / study / "tuning.jsonl") for study in ("pilot_easy", "pilot_medium",
                                                                                 "first_split")))
    assert len(studied) == 64 + 64 + 96
    assert not studied & (prompts(DATA / "heldout.jsonl") | prompts(DATA / "pool.jsonl") | prompts(DATA / "tuning.jsonl"))


def test_the_tuning_study_refuses_the_heldout_split(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_pool_difficulty",
                                                  REPO / "tools" / "bench" / "bench_pool_difficulty.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    with pytest.raises(SystemExit):
        study.parse_args(["--mix", "chain_sum/easy=1", "--splits", "heldout=4,tuning=4", "--split", "heldout"])
    assert "the held-out split is for the evaluation only" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="holds held-out rows"):  # before any model loads
        study.main(["--split-file", str(DATA / "smoke" / "heldout.jsonl")])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_short_verdict_smoke_runs_every_unit_side_by_side(tmp_path):
    """real_smollm2_short_smoke.yaml end to end on CPU (the real model inside trajval validate: its
    units, evaluations and figures): the oracle, the full-pool probe and the uniform arm start
    together, the prior arms once the probe is done, all five units finish."""
    out = tmp_path / "short"
    command = [sys.executable, str(REPO / "tools" / "validate.py"), "--config", str(SHORT_SMOKE),
               "--out", os.path.relpath(out, REPO)]
    # 5 units at once on 2 cores: 15 min on this project's shared machine under a load of 10-14
    run = subprocess.run(command, check=False, capture_output=True, text=True, cwd=REPO, timeout=1700)
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    units = set(results["protocol"]["units"])
    assert units == {"oracle/context-a", "probe"} | {f"arms/{arm}/seed-0" for arm in ("uniform", "variance",
                                                                                      "trajval")}
    log = run.stderr + run.stdout
    first_done = log.index(": done in ")
    started_before = {unit for unit in units if f"validate: {unit}: started" in log[:first_done]}
    assert started_before == {"oracle/context-a", "probe", "arms/uniform/seed-0"}  # side by side at once
    assert results["cost"]["prior_stages"]["early"]["completions"] == 8 * 2  # the pool x probe.n
    assert set(results["training"]) == {"uniform", "variance", "trajval"}
    for name, unit in results["protocol"]["units"].items():
        assert unit["device"] == "cpu" and unit["gpu"] is None and unit["wall_time_s"] > 0, name
    for row in results["training"].values():
        assert 0 <= row["best_acc"] <= 1 and row["auc"] is not None and row["seeds"] == [0]
        assert row["completions"] == 2 * 4 * 2  # steps x prompts_per_batch x num_generations
    evaluations = [json.loads(line) for line in (out / "arms" / "uniform" / "seed-0" / "heldout.jsonl")
                   .read_text().splitlines()]
    assert len(evaluations) == 4 and all(e["steps"] == [0, 2] for e in evaluations)  # 4 tasks, steps 0 and 2
    assert results["reproducibility"] == {"skipped": "no second context"}
