"""tools/validate.py: config errors before training, statistics, and the smoke protocol end to end."""

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from tests.conftest import REPO
from trajval_ops import core
from trajval_ops.experiment.config import ConfigError, load_config
from trajval_ops.experiment.protocol import check_splits
from trajval_ops.experiment.report import RESULT_KEYS, bootstrap_ci

SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"
FULL = REPO / "recipes" / "validation" / "full.yaml"


def config_file(tmp_path, **changes):
    raw = yaml.safe_load(SMOKE.read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            raw[section][name] = value
        else:
            raw[section] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("path", [SMOKE, FULL])
def test_shipped_configs_load(path):
    config = load_config(path)
    assert "uniform" in config.training.arms


@pytest.mark.parametrize("changes, message", [
    ({"training__arms": ["uniform", "magic"]}, "unknown arm"),
    ({"training__arms": ["trajval"]}, "must include 'uniform'"),
    ({"tasks__heldout_size": 10}, "below evaluation.min_heldout"),
    ({"grpo__learning_rte": 1e-3}, "unknown key"),
    ({"probe__stability_epochs": [5]}, "stability_epochs"),
    ({"training__seeds": []}, "seeds"),
])
def test_bad_config_is_an_error_before_training(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_config(config_file(tmp_path, **changes))


def test_heldout_overlapping_the_pool_is_an_error():
    config = load_config(SMOKE)
    row = lambda i, prompt: {"id": f"t{i}", "prompt": prompt, "reward_model": {"ground_truth": "1"}}  # noqa: E731
    pool = [row(i, f"q{i}") for i in range(3)]
    heldout = [row(10 + i, f"h{i}") for i in range(64)] + [row(99, "q1")]  # same prompt as a pool task
    with pytest.raises(ConfigError, match="heldout row 64 .* also a training task"):
        check_splits({"context-a": pool, "heldout": heldout}, config)
    heldout[-1] = row(2, "new")  # same id as a pool task
    with pytest.raises(ConfigError, match="also a training task"):
        check_splits({"context-a": pool, "heldout": heldout}, config)


def test_cli_exits_2_on_a_bad_config(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "tools" / "validate.py"), "--config",
                             str(config_file(tmp_path, training__arms=["uniform", "nope"])), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert "unknown arm" in result.stderr
    assert not (tmp_path / "out").exists()  # nothing started


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_seeds():
    rng = np.random.default_rng(0)
    few = rng.normal(0.5, 0.1, size=(3, 1))
    many = rng.normal(0.5, 0.1, size=(200, 1))
    lo_few, hi_few = bootstrap_ci([few], lambda c: float(c.mean()))
    lo_many, hi_many = bootstrap_ci([many], lambda c: float(c.mean()))
    assert lo_many < 0.5 < hi_many
    assert hi_many - lo_many < hi_few - lo_few


def test_baseline_priors():
    r = np.array([0.0, 0.25, 0.5, 1.0])
    assert core.variance_score(r).tolist() == [0.0, 0.1875, 0.25, 0.0]
    assert core.bandpass_score(r).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert core.baseline_weight(core.variance_score(r)).tolist() == [0.05, 0.75, 1.0, 0.05]
    assert core.baseline_weight(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.slow
def test_smoke_protocol_end_to_end_and_resume(tmp_path):
    out = tmp_path / "smoke"
    command = [sys.executable, str(REPO / "tools" / "validate.py"), "--config", str(SMOKE), "--out", str(out)]
    first = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=1200)
    assert first.returncode == 0, first.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert set(RESULT_KEYS) <= set(results)
    assert {"kappa_six", "kappa_binary", "spearman_gain", "spearman_gain_independent_base"} <= set(results["reproducibility"])
    assert {"spearman_r_early", "spearman_r_late", "spearman_score", "kappa_six", "kappa_binary"} <= set(
        results["probe_vs_oracle"])
    assert {"variance_r_early", "bandpass_r_early", "trajval_score"} <= set(results["baselines"])
    arms = yaml.safe_load(SMOKE.read_text())["training"]["arms"]
    assert set(results["training"]) == set(arms)
    for row in results["training"].values():
        for metric in ("best_acc", "auc", "s2b"):
            assert metric in row and len(row[f"{metric}_ci95"]) == 2
        assert row["seeds"] == [0, 1]
    assert results["protocol"]["config"]["name"] == "smoke"
    assert (out / "index.html").read_text().count("<img") == 2
    # probe rows carry the pipeline's fields (the real operators ran)
    probe_row = json.loads((out / "probe" / "weighted.jsonl").read_text().splitlines()[0])
    assert {"trajval_r_early", "trajval_r_late", "trajval_weight", "trajval_acc_epoch_1"} <= set(probe_row)

    # a rerun skips every finished unit and gives the same results
    second = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "started" not in second.stderr
    again = json.loads((out / "results.json").read_text())
    for key in ("reproducibility", "probe_vs_oracle", "baselines", "training"):
        assert again[key] == results[key]
