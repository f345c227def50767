"""tools/validate.py: config errors before training, statistics, and the smoke protocol end to end."""

import json
import math
import os
import re
from collections import Counter
import subprocess
import sys

import numpy as np
import pytest
import yaml

from tests.conftest import REPO
from trajval_ops import core
from trajval_ops.experiment.validation_config import ConfigError, load_config
from trajval_ops.experiment.protocol import check_splits
from trajval_ops.experiment.results import RESULT_KEYS, bootstrap_ci
from trajval_ops.rollout.verifiers import VERIFIERS

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


@pytest.mark.parametrize("path", sorted(SMOKE.parent.glob("*.yaml")), ids=lambda p: p.name)
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
    # issue 36, item 9: the declared types, strictly
    ({"training__seeds": 5}, "training: seeds must be a list of integers, got int 5"),
    ({"probe__probe_fraction": "0.2"}, "probe: probe_fraction must be a number, got str '0.2'"),
    ({"training__arms": "uniform"}, "training: arms must be a list of strings, got str 'uniform'"),
    ({"training__steps": True}, "training: steps must be an integer, got bool True"),
    ({"workers": 2.5}, "workers must be an integer or null, got float 2.5"),
    ({"evaluation__n": "4"}, "evaluation: n must be an integer, got str '4'"),
    # every key declared with its bounds: these ran (or failed late, in a unit) before
    ({"oracle__window": 0}, r"oracle: window must be in \[1, inf\), got 0"),
    ({"evaluation__batch_size": 0}, r"evaluation: batch_size must be in \[1, inf\), got 0"),
    ({"probe__weight_tolerance": 1.5}, r"probe: weight_tolerance must be in \[0, 1\), got 1.5"),
    ({"tasks__tuning_size": -1}, r"tasks: tuning_size must be in \[0, inf\), got -1"),
    # issue 53, item 3: where the units run
    ({"executor": "slurm"}, "executor must be one of 'process', 'ray', got 'slurm'"),
    ({"executor": "ray", "gpus_per_unit": 0}, r"gpus_per_unit must be in \(0, 64\]"),
    ({"ray_address": "auto"}, "ray_address and gpus_per_unit place units on Ray: they need executor: ray"),
    # found only once the probe unit had run, a bare ValueError
    ({"training__arms": ["uniform", "trajval_posterior"], "probe__n": 1},
     r"probe.n 1 with arm\(s\) \['trajval_posterior'\]: the noise-aware estimators .* measure n >= 2"),
])
def test_bad_config_is_an_error_before_training(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_config(config_file(tmp_path, **changes))


@pytest.mark.parametrize("changes, message", [
    ({"verifier": "maths"}, r"verifier: unknown verifier 'maths'; choose one of " + re.escape(str(sorted(VERIFIERS)))),
    ({"verifier": "math", "verifier_options": {"fallback_last_numbr": True}},
     r"verifier_options \{'fallback_last_numbr': True\} for the math verifier: .*unexpected keyword argument "
     r"'fallback_last_numbr'"),
    ({"verifier": "math", "verifier_options": {"timeout_s": 0}}, r"verifier_options .* timeout_s must be .*> 0"),
    ({"verifier": "custom", "verifier_options": {"function": "no_such_module_here:score"}},
     r"verifier_options .* for the custom verifier: No module named 'no_such_module_here'"),
    # the regime's verifier took its own options and dropped these: every unit read last numbers
    ({"verifier_options": {"fallback_last_number": False}},
     r"verifier_options \{'fallback_last_number': False\} without verifier: .*regime's own verifier \(math"),
    ({"verifier": "math", "verifier_options": {"fallback_last_number": "false"}},
     r"fallback_last_number must be true or false, got 'false'"),
], ids=["unknown-verifier", "misspelt-option", "bad-timeout", "missing-module", "options-without-verifier",
        "quoted-flag"])
def test_a_bad_verifier_or_option_is_a_config_error_before_anything_is_written(tmp_path, capsys, changes, message):
    """The verifier was first built by a unit: --dry-run accepted ``verifier: maths``, and a run
    with a misspelt option wrote protocol.json, data/ and oracle/ and then died with a TypeError
    traceback, exit 1 (the fixed config then refused for that --out). The config check builds it
    once: a config error naming the field, exit 2, nothing written."""
    from trajval_ops.experiment.protocol import main

    path = config_file(tmp_path, **changes)
    with pytest.raises(ConfigError, match=message):
        load_config(path)
    out = tmp_path / "out"
    assert main(["--config", str(path), "--dry-run"]) == 2
    assert main(["--config", str(path), "--out", str(out)]) == 2
    assert "validate: error:" in capsys.readouterr().err and not (out / "protocol.json").exists()
    load_config(config_file(tmp_path, verifier="math", verifier_options={"fallback_last_number": True}))


def test_heldout_overlapping_the_pool_is_an_error():
    config = load_config(SMOKE)
    row = lambda i, prompt: {"id": f"t{i}", "prompt": prompt, "reward_model": {"ground_truth": "1"},  # noqa: E731
                             "extra_info": {"family": "f"}}
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


def test_bootstrap_counts_resamples_that_never_reach_the_target():
    """A statistic undefined on some resamples (a target never reached) is counted as what the
    caller says, never left out: an arm whose seeds mostly miss the target gets an open interval."""
    reached = np.array([[1.0], [0.0], [0.0], [0.0], [0.0]])  # one seed of five reaches it

    def steps(c):
        return 40.0 if c.mean() >= 0.5 else None  # reached only when the resample is mostly that seed

    lo, hi = bootstrap_ci([reached], steps, undefined=math.inf)
    assert lo == 40.0 and hi == math.inf
    assert bootstrap_ci([reached], steps) == [pytest.approx(float("nan"), nan_ok=True)] * 2  # undefined: NaN
    assert bootstrap_ci([reached * 0], steps, undefined=-math.inf) == [-math.inf, -math.inf]
    finite = np.arange(10.0).reshape(10, 1)
    assert bootstrap_ci([finite], lambda c: float(c.mean()), undefined=math.inf) == bootstrap_ci(
        [finite], lambda c: float(c.mean()))  # all defined: the usual percentile interval


def test_headroom_names_the_best_ceiling_and_says_whether_it_lies_above_uniform():
    from trajval_ops.experiment.results import headroom

    def row(arm, diff, ci, sampling="standard"):
        return {"arm": arm, "sampling": sampling, "auc_minus_uniform": diff, "auc_minus_uniform_ci95": ci}

    train = {"uniform": row("uniform", 0.0, [0.0, 0.0]), "trajval": row("trajval", 0.02, [0.01, 0.03]),
             "oracle": row("oracle", -0.004, [-0.01, 0.002]), "oracle_subset": row("oracle_subset", 0.001, [-0.003, 0.005]),
             "oracle_subset+dynamic": row("oracle_subset", 0.05, [0.04, 0.06], "dynamic")}
    result = headroom(train)
    assert result["arm"] == "oracle_subset" and result["auc_minus_uniform_ci95"] == [-0.003, 0.005]
    assert result["verdict"].startswith("no learnability prior beats uniform")
    train["oracle"] = row("oracle", 0.01, [0.002, 0.02])
    above = headroom(train)
    assert above["arm"] == "oracle" and above["verdict"].startswith("a learnability prior can beat uniform")
    assert headroom({"uniform": train["uniform"], "trajval": train["trajval"]}) is None  # no ceiling arm


def test_headroom_is_positive_where_any_ceiling_lies_above_uniform():
    """The audit's case: oracle has the best point estimate but an interval across 0, oracle_subset
    lies above uniform; the verdict said no prior beats uniform beside oracle_subset's own "better
    than uniform". Any ceiling above uniform answers yes, and it is the one named."""
    from trajval_ops.experiment.results import headroom

    def row(arm, diff, ci):
        return {"arm": arm, "sampling": "standard", "auc_minus_uniform": diff, "auc_minus_uniform_ci95": ci}

    train = {"uniform": row("uniform", 0.0, [-0.003, 0.003]), "oracle": row("oracle", 0.0060, [-0.0010, 0.0130]),
             "oracle_subset": row("oracle_subset", 0.0050, [0.0020, 0.0080])}
    result = headroom(train)
    assert result["arm"] == "oracle_subset" and result["auc_minus_uniform_ci95"] == [0.0020, 0.0080]
    assert result["verdict"].startswith("a learnability prior can beat uniform per step in this regime: "
                                        "a ceiling (oracle_subset, ")
    assert "oracle's, has an interval that does not lie above 0" in result["verdict"]
    train["oracle"] = row("oracle", 0.0060, [0.0010, 0.0130])  # both above: the best point estimate
    assert headroom(train)["verdict"].startswith("a learnability prior can beat uniform per step in this "
                                                 "regime: the best ceiling (oracle, ")


def test_baseline_priors():
    r = np.array([0.0, 0.25, 0.5, 1.0])
    assert core.variance_score(r).tolist() == [0.0, 0.1875, 0.25, 0.0]
    assert core.bandpass_score(r).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert core.variance_weight(core.variance_score(r)).tolist() == [0.05, 0.75, 1.0, 0.05]
    assert core.bandpass_weight(core.bandpass_score(r)).tolist() == [0.05, 1.0, 1.0, 0.05]
    # every task at 0 or 1: every weight at the floor, i.e. uniform sampling
    assert core.variance_weight(core.variance_score([0.0, 1.0, 1.0])).tolist() == [0.05] * 3


@pytest.mark.slow
def test_smoke_protocol_end_to_end_and_resume(tmp_path, smoke_validate_run):
    command, out = smoke_validate_run
    results = json.loads((out / "results.json").read_text())
    assert set(RESULT_KEYS) <= set(results)
    assert {"kappa_six", "kappa_binary", "spearman_gain", "spearman_gain_independent_base"} <= set(results["reproducibility"])
    assert {"spearman_r_early", "spearman_r_late", "spearman_score", "kappa_six", "kappa_binary"} <= set(
        results["probe_vs_oracle"])
    assert {"variance_r_early", "bandpass_r_early", "trajval_score"} <= set(results["baselines"])
    arms = yaml.safe_load(SMOKE.read_text())["training"]["arms"]
    assert set(results["training"]) == set(arms) | {f"{arm}+dynamic" for arm in arms}
    for row in results["training"].values():
        for metric in ("best_acc", "auc", "s2b"):
            assert metric in row and len(row[f"{metric}_ci95"]) == 2
        assert row["seeds"] == [0, 1]
    assert results["protocol"]["config"]["name"] == "smoke"
    # issue 37, item 3: every unit's device and wall time; a training unit's precision and peak memory
    units = results["protocol"]["units"]
    assert units["probe"]["device"] == "cpu" and units["probe"]["gpu"] is None and units["probe"]["wall_time_s"] > 0
    assert units["probe"]["generation"] == "transformers"
    arm = units["arms/uniform/seed-0"]
    assert (arm["device"], arm["precision"], arm["generation"], arm["gpu"]) == ("cpu", "fp32", "transformers", None)
    assert arm["peak_memory_gib"] > 0
    assert len(units) == 2 + 1 + 2 * len(results["training"])  # the oracle contexts, the probe, each arm x seed
    cost = results["cost"]
    assert list(cost["prior_stages"]) == ["probe", "early", "late"]
    assert cost["prior_stages"]["early"]["completions"] == 96 * 4  # the pool x probe.n, every row sampled
    assert cost["arms"]["uniform"]["prior_completions"] == 0
    assert cost["arms"]["variance"]["prior_completions"] == 96 * 4
    assert cost["arms"]["trajval"]["prior_completions"] == sum(s["completions"] for s in cost["prior_stages"].values())
    # BOTS reads the probe's two passes as its reference models: charged them, as TrajVal is
    assert cost["arms"]["bots"]["prior_completions"] == cost["arms"]["trajval"]["prior_completions"]
    for row in cost["arms"].values():
        assert {"net_saved", "net_saved_ci95", "break_even_runs", "break_even_runs_ci95"} <= set(row)
    assert "trajval_pays_for_itself" in results["verdicts"]
    assert (out / "index.html").read_text().count("<img") == 3
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "held_out_accuracy_per_arm.png", "held_out_accuracy_per_arm_against_completions.png",
        "probe_vs_oracle_per_task.png"]
    assert results["headroom"]["arm"] in ("oracle", "oracle_group") and "verdict" in results["headroom"]
    dynamic = results["training"]["uniform+dynamic"]
    batch = 8 * 4  # prompts_per_batch x num_generations
    assert dynamic["completions"] >= 4 * batch == results["training"]["uniform"]["completions"]
    assert dynamic["auc_completions_minus_standard_uniform"] is not None
    assert "auc_completions_minus_standard_uniform" not in results["training"]["uniform"]
    assert results["training"]["uniform"]["zero_variance_share"] is not None
    pool = [json.loads(line) for line in (out / "priors" / "train_pool.jsonl").read_text().splitlines()]
    assert all(0.05 <= row["trajval_pooled_weight"] <= 1 and 0.05 <= row["trajval_posterior_weight"] <= 1
               for row in pool)
    assert cost["arms"]["trajval_pooled"]["prior_completions"] == cost["arms"]["trajval"]["prior_completions"]
    adaptive = cost["arms"]["trajval_adaptive"]["prior_completions"]
    assert 0 < adaptive <= cost["arms"]["trajval"]["prior_completions"]  # its late pass at most the fixed one
    assert all(0.05 <= row["trajval_adaptive_weight"] <= 1 for row in pool)
    # the sampled prior: ceil(0.25 x size) rows measured per family (29 of the 96 here), both passes
    # at probe.n = 4; the short pass (n = 4) on all 96 rows
    families = Counter(row["extra_info"]["family"] for row in pool)
    measured = sum(math.ceil(0.25 * size) for size in families.values())
    sampled = cost["arms"]["trajval_sampled"]["prior_completions"]
    assert sampled == cost["prior_stages"]["probe"]["completions"] + measured * 4 * 2 + 96 * 4
    assert all(0.05 <= row["trajval_sampled_weight"] <= 1 for row in pool)
    assert all(row["trajval_r_early_short_n"] == 4 for row in pool)
    # issue 35, item 2: the variance prior from another model's pass beside the trained model's own
    other = results["other_model"]
    assert other["model"] == "tiny-arith-seed1" and -1 <= other["spearman_pass_rates"] <= 1
    variance = other["priors"]["variance"]
    assert {"standard", "dynamic", "spearman_weights", "spearman_vs_oracle_gain"} <= set(variance)
    assert len(variance["standard"]["other_minus_own_auc_ci95"]) == 2
    assert cost["arms"]["variance_other_model"]["prior_completions"] == 0
    assert cost["prior_stages"]["early"]["completions"] == 96 * 4  # its pass is not the early pass
    assert all(0.05 <= row["trajval_variance_other_model_weight"] <= 1 for row in pool)
    # probe rows carry the pipeline's fields (the real operators ran)
    probe_row = json.loads((out / "probe" / "weighted.jsonl").read_text().splitlines()[0])
    assert {"trajval_r_early", "trajval_r_late", "trajval_weight", "trajval_acc_epoch_1"} <= set(probe_row)

    # uniform (and GRESO) train on the pool's own rows from the start, not waiting for the probe:
    # the priors' pool holds the same rows in the same order, so on it the arm trains the same
    spec_path = out / "arms" / "uniform" / "seed-0.spec.json"
    spec = json.loads(spec_path.read_text())
    assert spec["pool"] == str(out / "data" / "context-a.jsonl")
    on_priors_pool = tmp_path / "uniform-on-the-priors-pool"
    spec |= {"pool": str(out / "priors" / "train_pool.jsonl"), "output_dir": str(on_priors_pool),
             "evaluations": [e | {"output": str(on_priors_pool / "heldout.jsonl")} for e in spec["evaluations"]]}
    (tmp_path / "uniform-on-the-priors-pool.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-m", "trajval_ops.experiment.grpo_run", str(tmp_path / "uniform-on-the-priors-pool.json")],
                   check=True, cwd=REPO, capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    figures = ("steps", "train_reward", "completions_per_step", "zero_variance_share")
    trained = [json.loads((folder / "result.json").read_text()) for folder in (out / "arms" / "uniform" / "seed-0",
                                                                                on_priors_pool)]
    assert [{key: run[key] for key in figures} for run in trained] == [{key: trained[0][key] for key in figures}] * 2
    assert (on_priors_pool / "heldout.jsonl").read_text() == (out / "arms" / "uniform" / "seed-0" /
                                                             "heldout.jsonl").read_text()

    # a rerun skips every finished unit and gives the same results
    second = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "started" not in second.stderr
    again = json.loads((out / "results.json").read_text())
    for key in ("reproducibility", "probe_vs_oracle", "baselines", "training"):
        assert again[key] == results[key]
    # the run's wall time is every invocation's, not the rerun's alone
    invocations = json.loads((out / "wall_time.json").read_text())["invocations_s"]
    assert len(invocations) == 2 and invocations[0] == round(results["protocol"]["wall_time_s"], 1)
    assert again["protocol"]["wall_time_s"] == pytest.approx(sum(invocations))

    # another run of the same protocol reusing this one's units: only the probe runs again (the
    # same machine and code give it the same weights, so every arm's prior compares equal)
    reused = tmp_path / "reused"
    third = subprocess.run(command[:-1] + [str(reused), "--reuse-from", str(out)], capture_output=True, text=True,
                           cwd=REPO, timeout=600)
    assert third.returncode == 0, third.stderr[-4000:]
    started = [line for line in third.stderr.splitlines() if ": started (" in line]
    assert len(started) == 1 and "validate: probe: started" in started[0]
    copied = json.loads((reused / "results.json").read_text())
    for key in ("reproducibility", "probe_vs_oracle", "baselines", "training"):
        assert copied[key] == results[key]

    # the run's folder moved (another machine): the probe's cost is still read from the run's own
    # probe, named within the run, where the rows name the manifest at the folder it ran in
    import shutil

    from trajval_ops.experiment.results import compute_results

    assert results["cost"]["prior_stages"]["probe"]["manifests"] == ["probe/probe_run/manifest.json"]
    moved = tmp_path / "moved"
    shutil.move(out, moved)
    try:
        assert compute_results(load_config(SMOKE), moved)["cost"] == results["cost"]
    finally:  # back where it ran: the verdict's cross-check reads the run too
        shutil.move(moved, out)


def test_break_even_charges_the_prior_its_own_rollouts():
    from trajval_ops.experiment.results import break_even

    x = np.array([0, 10, 20, 30, 40, 50, 60]) * 100  # completions at each evaluation: 100 per step
    base = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]])  # Best Acc (window 5) 0.5, first reached at 60
    fast = np.array([[0.3, 0.5, 0.5, 0.5, 0.7, 0.7, 0.7]])  # its first window (mean 0.5) ends at step 40
    never = np.array([[0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]])
    row = break_even(fast, base, x, x, prior=1500)
    assert row == {"completions_to_uniform_best": 40 * 100 + 1500, "net_saved": 20 * 100 - 1500,
                   "s2b_completions": 100 * 40 / 60, "break_even_runs": 1500 / 2000}
    costly = break_even(fast, base, x, x, prior=5000)
    assert costly["net_saved"] == -3000 and costly["break_even_runs"] == 2.5  # pays back over 2.5 reuses
    assert break_even(never, base, x, x, 1500) == {"completions_to_uniform_best": None, "net_saved": None,
                                                    "s2b_completions": None, "break_even_runs": None}
    assert break_even(base, base, x, x, 0)["break_even_runs"] == 0.0  # uniform: nothing to pay back
    assert break_even(base, base, x, x, 700)["break_even_runs"] is None  # saves no step: never
    # dynamic sampling: the arm's steps cost fewer completions than uniform's (fewer wasted groups)
    lean = break_even(base, base, x * 0.6, x, prior=1000)
    assert lean["net_saved"] == 60 * 100 * 0.4 - 1000 and lean["s2b_completions"] == pytest.approx(60.0)


def test_a_free_prior_that_reaches_uniforms_best_later_never_breaks_even():
    """A prior that costs nothing (another model's pass) but reaches uniform's Best Acc later than
    uniform saves nothing: it never breaks even (None, inf in the interval), not "after 0 runs"."""
    from trajval_ops.experiment.results import bootstrap_ci, break_even, cost_verdict

    x = np.array([0, 10, 20, 30, 40, 50, 60]) * 100
    base = np.full((1, 7), 0.5)  # Best Acc (window 5) 0.5, reached at step 40
    slow = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]])  # reaches 0.5 at step 60
    row = break_even(slow, base, x, x, prior=0)
    assert row["net_saved"] == -2000 and row["break_even_runs"] is None
    assert break_even(base, base, x, x, prior=0)["break_even_runs"] == 0.0  # saves nothing, costs nothing
    assert break_even(base, slow, x, x, prior=0)["break_even_runs"] == 0.0  # saves some, costs nothing
    ci = bootstrap_ci([np.vstack([slow, slow]), np.vstack([base, base])],
                      lambda c, b: break_even(c, b, x, x, 0)["break_even_runs"], undefined=math.inf)
    assert ci == [math.inf, math.inf]
    verdict = cost_verdict({"prior_completions": 0, **row, "net_saved_ci95": [-2000, -2000]}, main_run=6000)
    assert "breaks even never" in verdict and "after 0 runs" not in verdict


def test_a_cost_verdict_is_as_precise_as_its_figure():
    """Issue 36, item 13: the verdict said "breaks even after 12 runs" beside a figure of 12.5."""
    from trajval_ops.experiment.results import cost_verdict

    row = {"prior_completions": 25_000, "net_saved": -23_000, "net_saved_ci95": [-24_000, -22_000],
           "break_even_runs": 12.5}
    verdict = cost_verdict(row, main_run=10_000)
    assert "breaks even after 12.5 runs reusing it" in verdict and "(2.5 main runs)" in verdict


def test_a_break_even_interval_that_reaches_never_says_so():
    """Issue 53: "breaks even after 12.5 runs" was written where the interval was [12.5, inf]:
    the sentence gives the interval and says the prior may never break even."""
    from trajval_ops.experiment.results import cost_verdict

    row = {"prior_completions": 25_000, "net_saved": -23_000, "net_saved_ci95": [-math.inf, -22_000],
           "break_even_runs": 12.5, "break_even_runs_ci95": [12.5, math.inf]}
    verdict = cost_verdict(row, main_run=10_000)
    assert verdict.endswith("breaks even after 12.5 runs reusing it (95% CI [12.5, never]: it may never break even)")
    bounded = cost_verdict(row | {"break_even_runs_ci95": [10.0, 15.25]}, main_run=10_000)
    assert bounded.endswith("breaks even after 12.5 runs reusing it (95% CI [10, 15.2])") and "never" not in bounded
    # as results.json reads back (null for NaN): no interval, said so
    assert cost_verdict(row | {"break_even_runs_ci95": [None, None]}, main_run=10_000).endswith(
        "after 12.5 runs reusing it (no 95% interval)")


def test_a_dynamic_arms_verdicts_name_uniform_dynamic_the_run_it_is_measured_against():
    """A +dynamic arm's AUC difference and break-even are against uniform+dynamic: its verdicts
    said "uniform" and "uniform's Best Acc"."""
    from trajval_ops.experiment.results import verdicts

    def row(arm, sampling, lo, hi):
        return {"arm": arm, "sampling": sampling, "auc_minus_uniform": (lo + hi) / 2, "auc_minus_uniform_ci95": [lo, hi]}

    cost = {"prior_completions": 24_000, "net_saved": -16_653, "net_saved_ci95": [-30_000, -16_653],
            "break_even_runs": 3.27}
    results = {"reproducibility": {"skipped": "no second context"},
               "probe_vs_oracle": {"spearman_score_vs_gain": 0.1},
               "training": {"uniform": row("uniform", "standard", -0.003, 0.003),
                            "variance": row("variance", "standard", 0.002, 0.008),
                            "uniform+dynamic": row("uniform", "dynamic", -0.003, 0.003),
                            "variance+dynamic": row("variance", "dynamic", -0.008, -0.002)},
               "cost": {"main_run_completions": 11_520, "arms": {"variance": cost, "variance+dynamic": cost,
                                                                 "uniform+dynamic": cost}}}
    out = verdicts(results)
    assert out["variance_vs_uniform_auc"].startswith("better than uniform (")
    assert out["variance+dynamic_vs_uniform_auc"].startswith("worse than uniform+dynamic (")
    assert "to reach uniform's Best Acc" in out["variance_pays_for_itself"]
    assert "to reach uniform+dynamic's Best Acc" in out["variance+dynamic_pays_for_itself"]
    assert "uniform+dynamic_pays_for_itself" not in out  # the baseline has no verdict of its own
    never = verdicts({**results, "cost": {"main_run_completions": 11_520, "arms": {
        "variance+dynamic": {**cost, "net_saved": None}}}})
    assert never["variance+dynamic_pays_for_itself"].startswith("never reaches uniform+dynamic's Best Acc")


def test_cumulative_completions_per_evaluation_step():
    from trajval_ops.experiment.results import cumulative_completions

    records = [{"steps": 4, "completions_per_step": [10, 20, 30, 40]}, {"steps": 4}]  # the second: fixed batches
    assert cumulative_completions(records, [0, 2, 4], batch_completions=16).tolist() == [0.0, (30 + 32) / 2,
                                                                                        (100 + 64) / 2]


def test_ceiling_priors_from_a_hand_made_oracle():
    from trajval_ops.experiment.priors import prior_weights

    rows = [{"id": f"t{i}", "trajval_r_early": r, "trajval_score": s, "extra_info": {"family": f}}
            for i, (r, s, f) in enumerate([(0.5, 0.2, "a"), (0.0, 0.0, "a"), (1.0, 0.0, "b"), (0.25, 0.6, "b")])]
    oracle = {"ids": ["t3", "t2", "t1", "t0"],  # its own order: joined on id
              "score": np.array([0.5, 0.0, 0.1, 0.3]),
              "profile": np.array(["stable", "mastered", "unlearned", "sluggish"], dtype=object)}
    weights = prior_weights(rows, {"oracle", "oracle_subset", "oracle_group", "oracle_subset_group", "trajval_group",
                                   "variance"}, oracle, group_key="extra_info.family")
    oracle_score = np.array([0.3, 0.1, 0.0, 0.5])  # t0..t3
    assert weights["oracle"].tolist() == core.sampling_weight(oracle_score).tolist()
    assert weights["oracle_subset"].tolist() == [1.0, 0.0, 0.0, 1.0]  # sluggish, unlearned, mastered, stable
    assert weights["oracle_group"].tolist() == core.sampling_weight([0.2, 0.2, 0.25, 0.25]).tolist()
    assert weights["oracle_subset_group"].tolist() == [0.5, 0.5, 0.5, 0.5]  # one learnable task of two per family
    rows[2]["extra_info"]["family"] = "a"  # a: t0 (learnable), t1, t2; b: t3 (learnable)
    share = prior_weights(rows, {"oracle_subset_group"}, oracle, group_key="extra_info.family")["oracle_subset_group"]
    assert share.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])
    assert weights["trajval_group"].tolist() == core.sampling_weight([0.1, 0.1, 0.3, 0.3]).tolist()
    assert weights["variance"].tolist() == [1.0, 0.05, 0.05, 0.75]


def test_the_sampled_prior_keeps_the_measured_scores_and_predicts_the_rest():
    from trajval_ops.experiment.priors import SAMPLED_SHORT, prior_weights, sampled_rows
    from trajval_ops.priors.sampled import predict_scores

    rng = np.random.default_rng(0)
    rows = [{"id": f"t{i}", "trajval_r_early": 0.5, "trajval_score": float(rng.uniform(0, 0.5)),
             SAMPLED_SHORT: float(rng.integers(0, 5) / 4), "extra_info": {"family": "abcd"[i % 4]}} for i in range(120)]
    measured = sampled_rows(rows, "extra_info.family")
    assert measured.sum() == 4 * 8  # ceil(0.25 x 30) per family
    weight = prior_weights(rows, {"trajval_sampled"}, group_key="extra_info.family")["trajval_sampled"]
    score = np.array([row["trajval_score"] for row in rows])
    assert weight[measured].tolist() == core.sampling_weight(score[measured]).tolist()
    expected = predict_scores(np.where(measured, score, 0.0), measured, [[row[SAMPLED_SHORT]] for row in rows],
                              [row["extra_info"]["family"] for row in rows], seed=0)
    assert weight.tolist() == core.sampling_weight(expected.score).tolist()


def test_breadth_keeping_mappings_of_trajvals_score_by_hand():
    from trajval_ops.experiment.priors import BREADTH_FLOOR, UNIFORM_SHARE, prior_weights

    score = [0.0, 0.001, 0.2, 0.5]
    weight = core.sampling_weight(score)  # [0.05, 0.126, 0.617, 0.812]
    rows = [{"id": f"t{i}", "trajval_r_early": 0.5, "trajval_score": s, "trajval_weight": w}
            for i, (s, w) in enumerate(zip(score, weight))]
    weights = prior_weights(rows, {"trajval_floor", "trajval_mix"})
    assert BREADTH_FLOOR == 0.2 and UNIFORM_SHARE == 0.5
    assert weights["trajval_floor"].tolist() == pytest.approx([0.2, 0.2, 0.2 ** 0.3, 0.5 ** 0.3])
    p = weight / weight.sum()
    assert weights["trajval_mix"].tolist() == pytest.approx((4 * (0.5 * p + 0.5 / 4)).tolist())
    assert core.uniform_mixture([1.0, 3.0], 1.0).tolist() == [1.0, 1.0]  # all uniform
    assert core.uniform_mixture([1.0, 3.0], 0.0).tolist() == [0.5, 1.5]  # the prior itself (mean 1)
    with pytest.raises(ValueError, match="uniform_share must be in"):
        core.uniform_mixture([1.0], 1.5)


def test_group_arms_need_a_group_key_and_every_row_its_group(tmp_path):
    with pytest.raises(ConfigError, match="set group_key"):
        load_config(config_file(tmp_path, group_key=None, training__arms=["uniform", "oracle_group"]))
    from trajval_ops.experiment.protocol import check_splits

    config = load_config(config_file(tmp_path, group_key="extra_info.family"))
    row = lambda i, family: {"id": f"t{i}", "prompt": f"q{i}", "extra_info": {"family": family} if family else {}}  # noqa: E731
    splits = {"context-a": [row(0, "a"), row(1, None)], "heldout": [row(i, "a") for i in range(10, 80)], "tuning": []}
    with pytest.raises(ConfigError, match="context-a row 1 .*group_key field 'extra_info.family' is missing"):
        check_splits(splits, config)


def test_a_run_recorded_before_a_setting_existed_resumes_when_the_setting_is_at_its_default(tmp_path):
    from trajval_ops.experiment.validation_config import protocol_hash, recorded_settings
    from trajval_ops.experiment.protocol import check_same_protocol

    arms = ["uniform", "trajval"]
    config = load_config(config_file(tmp_path, probe__adaptive_late=False, training__arms=arms))
    recorded = config.to_dict()
    del recorded["probe"]["adaptive_late"]  # as a run made before the setting was added wrote it
    out = tmp_path / "run"
    out.mkdir()
    (out / "protocol.json").write_text(json.dumps(
        {"hash": protocol_hash(config, recorded), "source": str(SMOKE), "config": recorded}))
    assert recorded_settings(config, recorded) == recorded
    check_same_protocol(config, out)  # the default is the behaviour the run had: its units stay valid
    changed = load_config(config_file(tmp_path, probe__adaptive_late=True, training__arms=arms))
    with pytest.raises(ConfigError, match="other settings"):
        check_same_protocol(changed, out)


def test_a_run_scored_by_an_earlier_verifier_reading_is_another_protocol(tmp_path, monkeypatch):
    """How the release reads answers (the verifier's revision) decides every unit's rewards and
    evaluations: a run whose units an earlier reading scored is not resumed by this release (its
    units would be compared with units scored otherwise), and its units' specs differ, so
    --reuse-from does not copy them. A verifier at revision 1 keeps the hash it had."""
    from trajval_ops.experiment.protocol import _base_spec, check_same_protocol
    from trajval_ops.experiment.validation_config import protocol_hash
    from trajval_ops.rollout.verifiers import AnswerTagVerifier, MathVerifier

    config = load_config(config_file(tmp_path, verifier="math", verifier_options={"fallback_last_number": True}))
    out = tmp_path / "run"
    check_same_protocol(config, out)
    assert json.loads((out / "protocol.json").read_text())["verifier_revision"] == MathVerifier.revision == 2
    assert _base_spec(config, out, out / "pool.jsonl", 0)["verifier_revision"] == 2
    check_same_protocol(config, out)  # the same release resumes it
    monkeypatch.setattr(MathVerifier, "revision", 1)
    before_revisions = protocol_hash(config)
    assert "verifier_revision" not in _base_spec(config, out, out / "pool.jsonl", 0)
    monkeypatch.undo()
    assert protocol_hash(config) != before_revisions
    old = tmp_path / "old"
    old.mkdir()  # as a release recording revision 1 would record it
    (old / "protocol.json").write_text(json.dumps({"hash": before_revisions, "config": config.to_dict(),
                                                   "verifier_revision": 1}))
    with pytest.raises(ConfigError, match="holds a validation run whose units revision 1 of the verifier scored, "
                                          "and this release reads answers as revision 2"):
        check_same_protocol(config, old)
    tagged = load_config(config_file(tmp_path, verifier="answer_tag", verifier_options={}))
    assert AnswerTagVerifier.revision == 1 and "verifier_revision" not in _base_spec(tagged, out, out / "p.jsonl", 0)


def test_a_run_recording_no_verifier_revision_is_refused_without_naming_one(tmp_path):
    """The math verifier reads answers as revision 2 since 2026-11-27, and protocol.json records
    the revision only from later that day: a run recording none (its hash holds no revision) was
    scored by revision 1 or 2. It is refused, not resumed, without claiming revision 1 nor advising
    to finish it with the release that started it (a release from 2026-11-27 scored it as this one
    does, and is refused too). A verifier never revised resumes such a run."""
    from trajval_ops.experiment.protocol import check_same_protocol
    from trajval_ops.experiment.validation_config import protocol_hash

    config = load_config(config_file(tmp_path, verifier="math", verifier_options={"fallback_last_number": True}))
    old = tmp_path / "old"
    old.mkdir()  # as a release of 2026-11-27 before 80538c2 recorded it
    (old / "protocol.json").write_text(json.dumps({"hash": protocol_hash(config, revision=1),
                                                   "config": config.to_dict(), "model": {"name": config.model}}))
    with pytest.raises(ConfigError) as refused:
        check_same_protocol(config, old)
    message = str(refused.value)
    assert ("holds a validation run whose protocol.json records no revision of the math verifier (records without one were read by revision 1 or 2, which cannot be told apart); "
            "this release reads answers as revision 2") in message
    assert "revision 1 of the" not in message and "release that started it" not in message
    assert "start the run over in another --out, or remove this one" in message
    tagged = load_config(config_file(tmp_path, verifier="answer_tag", verifier_options={}))
    (old / "protocol.json").write_text(json.dumps({"hash": protocol_hash(tagged), "config": tagged.to_dict()}))
    check_same_protocol(tagged, old)


def test_a_run_moves_to_another_machine_with_its_model_and_resumes_there(tmp_path, monkeypatch):
    """The protocol's model identity is the model's content: the same weights in another folder
    (another machine, another cache, a rebuild) resume the run; other weights are refused; a run
    recorded with the older identity (the folder's path and mtimes) still resumes in place."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from trajval_ops.experiment.protocol import check_same_protocol
    from trajval_ops.experiment.validation_config import protocol_hash
    from trajval_ops.models import resolve_model

    monkeypatch.setenv("TRAJVAL_CACHE", str(tmp_path / "cache"))
    here, there = tmp_path / "here" / "model", tmp_path / "there" / "model"
    shutil.copytree(resolve_model("tiny-arith"), here)
    out = tmp_path / "run"
    check_same_protocol(load_config(config_file(tmp_path, model=str(here))), out)
    shutil.copytree(here, there)
    config = json.loads((there / "config.json").read_text()) | {"transformers_version": "0.0.0"}
    (there / "config.json").write_text(json.dumps(config))  # another writer's release: the same model
    check_same_protocol(load_config(config_file(tmp_path, model=str(there))), out)
    weights = load_file(there / "model.safetensors")
    name = sorted(weights)[0]
    save_file(weights | {name: weights[name] + torch.ones_like(weights[name])}, there / "model.safetensors")
    with pytest.raises(ConfigError, match="other settings"):
        check_same_protocol(load_config(config_file(tmp_path, model=str(there))), out)
    old = tmp_path / "old"
    old.mkdir()
    in_place = load_config(config_file(tmp_path, model=str(here)))
    (old / "protocol.json").write_text(json.dumps(
        {"hash": protocol_hash(in_place, by_location=True), "source": str(SMOKE), "config": in_place.to_dict()}))
    check_same_protocol(in_place, old)


def test_a_users_pool_with_its_id_under_another_name(tmp_path):
    """``data.id_key``: a pool whose rows carry ``task_id`` (no ``id``) runs, its working copies
    carrying the id as ``id``; the files are not touched; a row without it, or with an ``id`` of
    another value, is an error naming the row."""
    from trajval_ops.experiment.protocol import prepare_data
    from trajval_ops.pools.io import read_rows

    raw = yaml.safe_load((SMOKE.parent / "real_smollm2_smoke.yaml").read_text())
    files = {}
    for name in ("pool", "heldout"):
        rows = list(read_rows(SMOKE.parent / raw["data"][name]))  # relative: the config's folder
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps({"task_id": row.pop("id"), **row}) + "\n" for row in rows))
    raw["data"] = {name: str(path) for name, path in files.items()}
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="context-a row 0: field 'id' is missing .*data.id_key"):
        prepare_data(load_config(tmp_path / "plain.yaml"), tmp_path / "plain")
    raw["data"]["id_key"] = "task_id"
    (tmp_path / "keyed.yaml").write_text(yaml.safe_dump(raw))
    before = files["pool"].read_bytes()
    summary = prepare_data(load_config(tmp_path / "keyed.yaml"), tmp_path / "keyed")
    copies = list(read_rows(tmp_path / "keyed" / "data" / "context-a.jsonl"))
    assert summary["context-a"] == len(copies) and files["pool"].read_bytes() == before
    assert all(row["id"] == row["task_id"] for row in copies)
    lines = files["heldout"].read_text().splitlines()
    lines[2] = json.dumps(json.loads(lines[2]) | {"id": "another"})
    files["heldout"].write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="heldout row 2: field 'id' is 'another' but data.id_key 'task_id'"):
        prepare_data(load_config(tmp_path / "keyed.yaml"), tmp_path / "keyed-2")


def test_probe_vs_oracle_of_a_probe_on_the_whole_pool():
    """A full-pool probe (probe_fraction 1) leaves no task outside P: that agreement is None."""
    from trajval_ops import core, fields
    from trajval_ops.experiment.results import probe_vs_oracle

    r_early, r_late = np.array([0.1, 0.2, 0.5, 0.4]), np.array([0.3, 0.2, 0.9, 0.6])
    oracle = {"ids": ["a", "b", "c", "d"], "r_early": r_early, "r_late": r_late + 0.05,
              "delta": r_late - r_early, "profile": np.array(["stable"] * 4, dtype=object),
              "score": core.learnability_score(r_early, r_late)}
    rows = [{"id": task, fields.R_EARLY: e, fields.R_LATE: l, fields.SCORE: s, fields.PROFILE: "stable",
             fields.IN_PROBE: True}
            for task, e, l, s in zip(oracle["ids"], r_early, r_late, core.learnability_score(r_early, r_late))]
    result, _, _ = probe_vs_oracle(rows, oracle, [])
    assert result["n_probe_tasks"] == 4 and result["spearman_score_vs_gain_outside_probe"] is None
    assert result["spearman_score_vs_gain"] == pytest.approx(1.0)


def test_dynamic_arms_are_read_against_completions_within_and_across_sampling_modes(tmp_path):
    """A dynamic arm's AUC against completions, against uniform+dynamic and against plain uniform:
    both curves read at the baseline's evaluation spends that the arm reached, by hand."""
    from trajval_ops.experiment.results import training

    config = load_config(config_file(tmp_path, training__arms=["uniform", "variance"],
                                     training__sampling=["standard", "dynamic"], training__steps=4))
    out = tmp_path / "run"
    # held-out accuracy at steps 0, 2, 4 (the same on every seed and task); completions per step
    runs = {"uniform": ([0.1, 0.2, 0.3], [32] * 4), "variance": ([0.1, 0.3, 0.4], [32] * 4),
            "uniform+dynamic": ([0.1, 0.3, 0.5], [64] * 4), "variance+dynamic": ([0.1, 0.4, 0.5], [48] * 4)}
    for name, (acc, per_step) in runs.items():
        for seed in config.training_seeds():
            folder = out / "arms" / name / f"seed-{seed}"
            folder.mkdir(parents=True)
            (folder / "heldout.jsonl").write_text("".join(
                json.dumps({"id": f"h{i}", "accuracies": acc, "steps": [0, 2, 4]}) + "\n" for i in range(3)))
            (folder / "result.json").write_text(json.dumps({"steps": 4, "completions_per_step": per_step}))
    table, _ = training(config, out)
    assert "auc_completions_minus_standard_uniform" not in table["variance"]
    assert table["variance"]["auc_completions_minus_uniform"] == pytest.approx((0.1 + 0.3 + 0.4 - 0.6) / 3)
    dynamic = table["variance+dynamic"]
    # against uniform+dynamic (spends 0, 128, 256): variance+dynamic (0, 96, 192) reaches 0 and 128
    at_128 = 0.4 + (0.5 - 0.4) * (128 - 96) / 96
    assert dynamic["auc_completions_budget"] == 128
    assert dynamic["auc_completions_minus_uniform"] == pytest.approx((0.1 + at_128) / 2 - (0.1 + 0.3) / 2)
    # against plain uniform (spends 0, 64, 128): read at all three
    at_64 = 0.1 + (0.4 - 0.1) * 64 / 96
    assert dynamic["auc_completions_standard_uniform_budget"] == 128
    assert dynamic["auc_completions_minus_standard_uniform"] == pytest.approx(
        (0.1 + at_64 + at_128) / 3 - (0.1 + 0.2 + 0.3) / 3)
    low, high = dynamic["auc_completions_minus_standard_uniform_ci95"]
    assert low <= dynamic["auc_completions_minus_standard_uniform"] <= high


def test_a_dry_run_prices_every_unit_by_hand_and_writes_nothing(tmp_path, capsys):
    """Issue 37, item 6: `trajval validate --dry-run` lists the units the protocol would start with
    their completions and token bounds, and the generation time at a rate; nothing is written."""
    from trajval_ops.experiment import protocol
    from trajval_ops.experiment.dry_run import dry_run

    config = load_config(SMOKE)
    report = dry_run(config, rate=100.0)
    units = {unit["unit"]: unit for unit in report["units"]}
    batch = 8 * 4  # prompts_per_batch x num_generations
    # oracle: 4 steps; evaluations at steps 0, 2, 4 of the 96 pool tasks, n = 2
    assert units["oracle/context-a"]["training_completions"] == 4 * batch
    assert units["oracle/context-a"]["evaluation_completions"] == 3 * 2 * 96
    # probe: P = 0.2 x 96 -> 20 rows, 2 steps of 8 per epoch, 2 epochs; passes: early, late, epoch 1, adaptive
    # late, the other model's (n = 4 each), and the sampled prior's short pass (n = 4)
    assert units["probe"]["training_completions"] == 2 * 2 * batch
    assert units["probe"]["evaluation_completions"] == 5 * 4 * 96 + 4 * 96 and units["probe"]["completions_are_a_bound"]
    # an arm: 4 steps; held-out evaluations at 0, 2, 4 of 64 tasks, n = 2; dynamic: 3 rounds at most
    assert units["arms/uniform/seed-0"]["training_completions"] == 4 * batch
    assert units["arms/uniform/seed-0"]["evaluation_completions"] == 3 * 2 * 64
    assert units["arms/uniform+dynamic/seed-1"]["training_completions"] == 3 * 4 * batch
    # what each waits for: the arms that read a prior wait for the probe and, with a ceiling arm
    # in the config, oracle A; uniform (in either sampling mode) for nothing
    assert units["arms/uniform/seed-0"]["after"] == units["arms/uniform+dynamic/seed-1"]["after"] == ()
    for arm in ("variance", "bots", "greso_trajval"):
        assert units[f"arms/{arm}/seed-0"]["after"] == ("probe", "oracle/context-a")
    assert len(units) == 2 + 1 + 12 * 2 * 2 and report["max_new_tokens"] == report["completions"] * 8
    # two workers: the oracles and the probe first, the arms once the probe's priors exist
    assert report["workers"] == 2 and report["generation_wall_time_s"] >= report["completions"] / 100 / 2
    assert report["longest_unit_generation_s"] == max(unit["completions"] for unit in report["units"]) / 100
    out = tmp_path / "never"
    assert protocol.main(["--config", str(SMOKE), "--out", str(out), "--dry-run", "--rate", "100"]) == 0
    assert "51 units; at 100 completions/s per worker (given) and 2 worker(s): about" in capsys.readouterr().out
    assert not out.exists()
    assert protocol.main(["--config", str(SMOKE), "--dry-run", "--rate", "100", "--gpus", "8", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["gpus"] == 8 and planned["workers"] == 8
    # GPU-hours by the rules trajval cost --rate prices a recipe with (trajval_ops.generation_time)
    assert planned["gpu_hours"] == pytest.approx(planned["completions"] / 100 / 3600)
    assert planned["generation_wall_time_s"] < report["generation_wall_time_s"]
    # units sharing cards share their rate (per GPU, as everywhere): 8 units on 2 GPUs take 4x a
    # unit's time, the GPU-hours unchanged
    assert protocol.main(["--config", str(SMOKE), "--dry-run", "--rate", "100", "--gpus", "2", "--workers", "8",
                          "--json"]) == 0
    shared = json.loads(capsys.readouterr().out)
    assert shared["unit_rate_completions_per_s"] == 25 and shared["gpu_hours"] == pytest.approx(planned["gpu_hours"])
    assert shared["longest_unit_generation_s"] == pytest.approx(4 * planned["longest_unit_generation_s"])
    assert protocol.main(["--config", str(SMOKE), "--dry-run", "--rate", "nan"]) == 2
    # another machine's GPUs need that machine's rate; --gpus without --dry-run is refused by the parser
    assert protocol.main(["--config", str(SMOKE), "--dry-run", "--gpus", "1"]) == 2
    assert "give --rate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        protocol.main(["--config", str(SMOKE), "--out", str(out), "--gpus", "1"])
    assert protocol.main(["--config", str(SMOKE), "--out", str(out), "--workers", "0"]) == 2 and not out.exists()


def test_only_the_arms_that_read_a_prior_wait_for_the_priors(tmp_path):
    """Uniform trains on the pool's own rows from the start of a run; an arm with a prior (or
    BOTS's reference pass rates) on the priors' pool, once it is written."""
    from trajval_ops.experiment.protocol import arm_units

    units = {unit.name: unit for unit in arm_units(load_config(SMOKE), tmp_path)}
    for name in ("arms/uniform/seed-0", "arms/uniform+dynamic/seed-1"):
        units[name].prepare()
        spec = json.loads((tmp_path / f"{name}.spec.json").read_text())
        assert units[name].after == () and spec["pool"] == str(tmp_path / "data" / "context-a.jsonl")
    for name in ("arms/variance/seed-0", "arms/bots/seed-1", "arms/oracle/seed-0"):
        units[name].prepare()
        spec = json.loads((tmp_path / f"{name}.spec.json").read_text())
        assert units[name].after == ("priors",) and spec["pool"] == str(tmp_path / "priors" / "train_pool.jsonl")


def test_the_dry_run_schedules_units_as_the_protocol_runs_them():
    """The wall time is the schedule's: ``workers`` side by side in the protocol's order, an arm
    that reads a prior after the probe, and after oracle A too when a ceiling arm needs its gain;
    uniform and GRESO from the start."""
    from trajval_ops.generation_time import schedule

    def units(after, first_arm_after=None):
        return [{"unit": "oracle/context-a"}, {"unit": "probe"}] + [
            {"unit": f"arms/{arm}/seed-0", "after": first_arm_after if arm == "a" and first_arm_after is not None
             else after} for arm in "abc"]

    seconds = [10.0, 4.0, 5.0, 5.0, 5.0]
    # t = 0: oracle (to 10) and probe (to 4); 4: arm a (to 9); 9: arm b (to 14); 10: arm c (to 15)
    assert schedule(units(("probe",)), seconds, 2) == 15.0
    # the arms wait for the oracle too: a and b 10-15, c 15-20
    assert schedule(units(("probe", "oracle/context-a")), seconds, 2) == 20.0
    assert schedule(units(("probe",)), seconds, 1) == sum(seconds)
    assert schedule(units(("probe",)), seconds, 5) == 10.0
    # three workers: a uniform arm waits for nothing and starts at once (0-5), b at 4, c at 5 (to 10);
    # were it to wait, a and b would run 4-9 and c 9-14
    assert schedule(units(("probe",), first_arm_after=()), seconds, 3) == 10.0
    assert schedule(units(("probe",)), seconds, 3) == 14.0


def test_no_start_after_pauses_a_run_that_the_same_command_resumes(tmp_path):
    """``--no-start-after``: no unit starts after the instant, the running ones finish, and the
    run exits 3 with the units left; the same command again goes on from there."""
    from trajval_ops.experiment import protocol

    out = tmp_path / "run"
    assert protocol.main(["--config", str(SMOKE), "--out", str(out), "--no-start-after", "0"]) == protocol.PAUSED_EXIT
    assert (out / "data" / "heldout.jsonl").is_file() and not (out / "results.json").exists()
    assert not (out / "arms").exists() and not (out / "probe" / "weighted.jsonl").exists()
    assert len(json.loads((out / "wall_time.json").read_text())["invocations_s"]) == 1
    assert protocol.main(["--config", str(SMOKE), "--out", str(out), "--no-start-after", "-1"]) == 2


def test_grpo_temperature_samples_training_only(tmp_path):
    """As docs/validation.md says: held-out and oracle evaluations and the probe's endpoint passes
    sample at 1.0 whatever grpo.temperature trains at; the probe's own training follows it."""
    from trajval_ops.experiment.grpo_run import _evaluation_callbacks, unit_file
    from trajval_ops.experiment.protocol import arm_units, oracle_units, probe_recipe
    from trajval_ops.pools.io import write_rows
    from trajval_ops.regime.tasks import generate_tasks

    config = load_config(config_file(tmp_path, grpo__temperature=0.6))
    out = tmp_path / "run"
    (out / "data").mkdir(parents=True)
    for name in ("heldout", "context-a"):
        write_rows(out / "data" / f"{name}.jsonl", generate_tasks(4, seed=3))
    arm = next(unit for unit in arm_units(config, out) if unit.name == "arms/uniform/seed-0")
    oracle = oracle_units(config, out, {"context-a": 4})[0]
    for unit in (arm, oracle):
        unit.prepare()
        spec = json.loads(unit_file(unit.folder, "spec.json").read_text())
        assert spec["grpo"]["temperature"] == 0.6
        assert [callback.decoding.temperature for callback in _evaluation_callbacks(spec)] == [1.0]
    recipe = probe_recipe(config, out)
    assert recipe["process"][0]["trajval_probe_trainer"]["temperature"] == 0.6
    passes = [entry["trajval_endpoint_reward_mapper"] for entry in recipe["process"]
              if "trajval_endpoint_reward_mapper" in entry]
    assert passes and {entry["temperature"] for entry in passes} == {1.0}


@pytest.mark.parametrize("path", sorted((REPO / "docs" / "results").glob("*/results.json")), ids=lambda p: p.parent.name)
def test_committed_verdicts_are_what_the_shipped_code_writes(path):
    """A published verdict is regenerated from its results by the code that ships: five results
    said "breaks even after 12 runs" beside a break-even figure of 12.5 (written before the
    verdicts gave three significant digits)."""
    from trajval_ops.experiment.results import headroom, verdicts

    results = json.loads(path.read_text())
    assert results["verdicts"] == verdicts(results)
    assert results["headroom"] == headroom(results["training"])  # the headroom verdict verdicts() copies


def test_run_units_starts_the_guardian_of_the_units_it_forks(monkeypatch):
    """A forked unit outlived a killed caller of run_units by seconds, long enough to finish and
    write its result (only run_protocol started the guardian): run_units starts it itself."""
    import trajval_ops.lifetime
    from trajval_ops.experiment.protocol import run_units

    calls = []
    monkeypatch.setattr(trajval_ops.lifetime, "guard_descendants", lambda: calls.append(os.getpid()))
    assert run_units([], 1, set(), {}) == [] and calls == [os.getpid()]


def test_one_training_seed_gives_no_interval_and_no_firm_verdict():
    """Resampling one seed repeats it: the interval had zero width ([+0.0050, +0.0050]) and the
    verdict read 'better than uniform'. One seed has no interval, and the verdicts say so."""
    from trajval_ops.experiment.results import bootstrap_ci, cost_verdict, headroom, verdicts

    one, other = np.array([[0.2, 0.4]]), np.array([[0.1, 0.3]])
    assert all(np.isnan(bootstrap_ci([one, other], lambda a, b: float(a.mean() - b.mean()))))
    assert bootstrap_ci([np.vstack([one, one + 0.01]), np.vstack([other, other])],
                        lambda a, b: float(a.mean() - b.mean())) == pytest.approx([0.1, 0.11])
    nan = [float("nan")] * 2
    training = {"uniform": {"arm": "uniform", "sampling": "standard", "auc_minus_uniform": 0.0,
                            "auc_minus_uniform_ci95": nan},
                "variance": {"arm": "variance", "sampling": "standard", "auc_minus_uniform": 0.005,
                             "auc_minus_uniform_ci95": nan},
                "oracle": {"arm": "oracle", "sampling": "standard", "auc_minus_uniform": 0.01,
                           "auc_minus_uniform_ci95": nan}}
    out = verdicts({"reproducibility": {"skipped": "one context"}, "probe_vs_oracle": {"spearman_score_vs_gain": 0.1},
                    "training": training})
    assert out["variance_vs_uniform_auc"].startswith("not judged against uniform: no 95% interval (fewer than 2")
    assert headroom(training)["verdict"].startswith("not judged: the best ceiling (oracle")
    row = {"prior_completions": 100, "net_saved": 500.0, "net_saved_ci95": nan, "break_even_runs": 0.2}
    assert cost_verdict(row, main_run=1000).startswith("not judged: no 95% interval")
    # read back from results.json, where a NaN bound is null, the verdicts are the same
    import json

    from trajval_ops.atomic import jsonable

    read_back = json.loads(json.dumps(jsonable(training, nan_as_null=True)))
    assert verdicts({"reproducibility": {"skipped": "one context"}, "probe_vs_oracle": {"spearman_score_vs_gain": 0.1},
                     "training": read_back}) == out and headroom(read_back)["verdict"] == headroom(training)["verdict"]


def test_where_the_units_run_is_not_part_of_the_protocol():
    """issue 53, item 3: a run started on the process pool resumes on Ray, and back."""
    import dataclasses

    from trajval_ops.experiment.validation_config import protocol_hash

    config = load_config(SMOKE)
    placed = dataclasses.replace(config, executor="ray", gpus_per_unit=0.5, ray_address="ray://head:10001", workers=3)
    assert protocol_hash(placed) == protocol_hash(config)
    assert protocol_hash(dataclasses.replace(config, threads_per_worker=2)) != protocol_hash(config)
