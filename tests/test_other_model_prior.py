"""Issue 35, item 2: a one-pass prior from another model's pass (``probe.other_model``), the
stand-in for a difficulty column a public pool ships, beside the same prior from the trained
model's own pass."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from tests.conftest import REPO
from tests.test_validate import config_file
from trajval_ops import fields
from trajval_ops.experiment.priors import OTHER_MODEL_PASS, OTHER_MODEL_PRIORS, prior_weights
from trajval_ops.experiment.validation_config import ConfigError, load_config

SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"


def test_other_model_arms_need_another_model(tmp_path):
    raw = yaml.safe_load(SMOKE.read_text())
    arms = ["uniform", "variance_other_model"]
    with pytest.raises(ConfigError, match=r"arms \['variance_other_model'\] read another model's pass: set "
                                          r"probe.other_model"):
        load_config(config_file(tmp_path, training__arms=arms, probe__other_model=None))
    with pytest.raises(ConfigError, match="probe.other_model is the trained model"):
        load_config(config_file(tmp_path, training__arms=arms, probe__other_model=raw["model"]))


def test_the_trained_model_under_another_name_is_refused(tmp_path):
    """Issue 57: the trained model's own folder (its path, a link to it), or a short reference to
    the folder the trained model is, compares one model's passes: refused like the same name."""
    from trajval_ops.models import resolve_model

    arms = ["uniform", "variance_other_model"]
    folder = resolve_model("tiny-arith")
    link = tmp_path / "link-to-tiny-arith"
    link.symlink_to(folder)
    for model, other in (("tiny-arith", str(folder)), ("tiny-arith", str(link)), (str(folder), "tiny-arith"),
                         (str(link), f"{folder}/")):
        with pytest.raises(ConfigError, match=rf"probe.other_model is the trained model \('{re.escape(model)}'"):
            load_config(config_file(tmp_path, model=model, training__arms=arms, probe__other_model=other))
    seed1 = load_config(config_file(tmp_path, model=str(folder), training__arms=arms,
                                    probe__other_model=str(resolve_model("tiny-arith-seed1"))))
    assert seed1.probe.other_model.endswith("tiny-arith-seed1")


def test_a_missing_other_model_is_refused_by_the_dry_run_before_anything_trains(tmp_path):
    """Issue 57: a probe.other_model that names no model passed the dry run and failed after the
    probe had trained; now the config check (and so the dry run) refuses it in one line, exit 2."""
    import subprocess
    import sys

    arms = ["uniform", "variance_other_model"]
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ConfigError, match=r"probe.other_model: model '.*no-such-model' is neither an existing model "
                                          r"directory nor a known short reference"):
        load_config(config_file(tmp_path, training__arms=arms, probe__other_model=missing))
    with pytest.raises(ConfigError, match=r"probe.other_model: .*no probe manifest"):
        load_config(config_file(tmp_path, training__arms=arms, probe__other_model=f"manifest:{tmp_path}#late[0]"))
    command = [sys.executable, str(REPO / "tools" / "validate.py"), "--dry-run", "--rate", "100", "--config",
               str(config_file(tmp_path, training__arms=arms, probe__other_model="tiny-arith-seed9"))]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "probe.other_model: model 'tiny-arith-seed9' is neither" in line and not done.stdout


def test_the_probe_unit_runs_the_other_models_pass_and_the_dry_run_counts_it(tmp_path):
    from trajval_ops.experiment.dry_run import unit_costs
    from trajval_ops.experiment.protocol import probe_recipe

    plain = load_config(config_file(tmp_path, probe__other_model=None,
                                    training__arms=["uniform", "variance"]))
    other = load_config(config_file(tmp_path, probe__other_model="tiny-arith-seed1",
                                    training__arms=["uniform", "variance", "variance_other_model"]))
    passes = [step["trajval_endpoint_reward_mapper"] for step in probe_recipe(other, tmp_path)["process"]
              if "trajval_endpoint_reward_mapper" in step]
    (pass_,) = [p for p in passes if p.get("output_key") == OTHER_MODEL_PASS]
    assert pass_["model"] == "tiny-arith-seed1" and pass_["n"] == other.probe.n
    probe_cost = {u["unit"]: u["evaluation_completions"] for u in unit_costs(other)}["probe"]
    assert probe_cost - {u["unit"]: u["evaluation_completions"] for u in unit_costs(plain)}["probe"] == \
        other.probe.n * other.tasks.pool_size


def test_the_other_model_prior_is_the_registrys_prior_of_the_other_pass():
    from trajval_ops.priors import build_prior

    rng = np.random.default_rng(0)
    own, other = rng.integers(0, 17, 40) / 16, rng.integers(0, 17, 40) / 16  # pass rates at n = 16
    rows = [{"id": str(i), fields.R_EARLY: float(a), OTHER_MODEL_PASS: float(b),
             fields.SCORE_PROVENANCE: {"alpha": 0.3, "eps": 0.05}} for i, (a, b) in enumerate(zip(own, other))]
    weights = prior_weights(rows, {"variance", "bandpass", *OTHER_MODEL_PRIORS})
    for arm, prior in OTHER_MODEL_PRIORS.items():
        np.testing.assert_array_equal(weights[arm], build_prior(prior, {"eps": 0.05}).weights(other))
        np.testing.assert_array_equal(weights[prior], build_prior(prior, {"eps": 0.05}).weights(own))
        assert not np.array_equal(weights[arm], weights[prior])


def test_the_shipped_other_model_is_another_pretraining_seed():
    import json

    from trajval_ops.models import resolve_model

    ours, other = resolve_model("tiny-arith"), resolve_model("tiny-arith-seed1")
    quality = json.loads((other / "quality.json").read_text())
    assert quality["training"]["seed"] == 1 and json.loads((ours / "quality.json").read_text())["training"]["seed"] == 0
    assert (ours / "config.json").read_text() == (other / "config.json").read_text()
    assert (ours / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()


def test_a_relative_model_folder_is_read_from_the_configs_folder(tmp_path, monkeypatch):
    """A config's `model` and `probe.other_model` given as relative folder paths are its folder's,
    as its `data:` paths are, in the config check, the units (which run in another working
    directory), the model's identity and the dry run's measured rate; short references as before."""
    import os
    from pathlib import Path

    from trajval_ops.experiment.dry_run import measured_rate
    from trajval_ops.experiment.protocol import _base_spec, probe_recipe
    from trajval_ops.experiment.validation_config import model_identity
    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.cache import model_content_digest

    folder, arms = tmp_path / "configs", ["uniform", "variance_other_model"]
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "trained").symlink_to(resolve_model("tiny-arith"))
    (folder / "models" / "other").symlink_to(resolve_model("tiny-arith-seed1"))
    path = config_file(folder, model="models/trained", training__arms=arms, probe__other_model="models/other")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config(os.path.relpath(path))
    assert config.model == "models/trained"  # recorded as the config gives it
    passes = probe_recipe(config, tmp_path / "out")["process"]
    trained = passes[0]["trajval_probe_trainer"]["model"]
    (other,) = [step["trajval_endpoint_reward_mapper"]["model"] for step in passes
                if step.get("trajval_endpoint_reward_mapper", {}).get("output_key") == OTHER_MODEL_PASS]
    assert (trained, other) == (str(folder / "models" / "trained"), str(folder / "models" / "other"))
    assert _base_spec(config, tmp_path / "out" / "u", tmp_path / "pool.jsonl", 0)["model"] == trained
    assert model_identity(config)["sha256"] == model_content_digest(resolve_model("tiny-arith"))
    assert measured_rate(config, prompts=2, seconds=0.05) > 0
    with pytest.raises(ConfigError, match="probe.other_model is the trained model"):
        load_config(config_file(folder, model="models/trained", training__arms=arms,
                                probe__other_model="./models/trained/"))
    with pytest.raises(ConfigError, match=r"model 'models/trained' is neither.*read from the config's folder"):
        load_config(config_file(tmp_path, model="models/trained", training__arms=arms,
                                probe__other_model="tiny-arith-seed1"))
    short = load_config(config_file(folder, model="tiny-arith", training__arms=arms,
                                    probe__other_model="tiny-arith-seed1"))
    assert probe_recipe(short, tmp_path / "out")["process"][0]["trajval_probe_trainer"]["model"] == "tiny-arith"
    assert Path(os.getcwd()) == tmp_path / "elsewhere"
