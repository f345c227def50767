"""The price of a prior: `trajval cost` before a run, against hand-computed counts, and the cost
a run records (tests/test_rollout_mapper.py checks the per-row record against the engine)."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.conftest import REPO
from trajval_ops.cli import cost as cost_cli
from trajval_ops.prior_cost import recipe_cost, recorded_cost

DEMO = REPO / "recipes" / "demo_trajval.yaml"


def run_json(capsys, *argv) -> dict:
    assert cost_cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("rows, probe_rows, probe_steps", [
    (600, 600, 75),    # P = the pool (probe_fraction 1): 75 batches of 8, one epoch
    (1000, 1000, 125),
    (300, 300, 37),    # 37 batches (TRL drops the incomplete one)
])
def test_demo_recipe_cost_by_hand(tmp_path, capsys, rows, probe_rows, probe_steps):
    pool = tmp_path / "pool.jsonl"
    pool.write_text("{}\n" * rows + "\n")  # a blank line is not a row
    report = run_json(capsys, "--config", str(DEMO), "--dataset_path", str(pool))
    probe = probe_steps * 8 * 8  # prompts_per_batch x num_generations per step
    assert report["pool_rows"] == rows
    assert [(s["stage"], s["completions"], s["max_new_tokens_total"]) for s in report["stages"]] == [
        ("probe", probe, probe * 8), ("early", rows * 16, rows * 16 * 8), ("late", rows * 16, rows * 16 * 8)]
    assert report["stages"][0]["probe_rows"] == probe_rows
    assert report["completions"] == probe + 2 * rows * 16
    assert report["main_epochs_equivalent"] == pytest.approx((probe + 2 * rows * 16) / (rows * 16))


def test_the_papers_setting_costs_two_and_a_half_main_run_epochs(capsys):
    report = run_json(capsys, "--config", str(REPO / "recipes" / "dapo_trajval.yaml"), "--pool-rows", "17398")
    assert [s["completions"] for s in report["stages"]] == [20 * (512 // 64) * 64 * 16, 17398 * 16, 17398 * 16]
    assert report["completions"] == 720_576
    assert report["main_epochs_equivalent"] == pytest.approx(720_576 / 278_368)


def test_main_run_options_and_a_reused_or_greedy_pass():
    recipe = yaml.safe_load(DEMO.read_text())
    endpoint = [e for e in recipe["process"] if "trajval_endpoint_reward_mapper" in e]
    endpoint[0]["trajval_endpoint_reward_mapper"].update(reuse_key="pass_rate", reuse_n=8)
    endpoint[1]["trajval_endpoint_reward_mapper"].update(temperature=0)  # greedy: one completion a row
    report = recipe_cost(recipe, 600, main_n=8, main_epochs=2)
    early, late = report["stages"][1:]
    assert early["completions"] == 0 and early["reused"] is True
    assert late["completions"] == 600 and late["max_new_tokens_total"] == 600 * 8
    assert report["main_epochs_equivalent"] == pytest.approx((75 * 8 * 8 + 600) / (600 * 8))
    assert report["main_runs_equivalent"] == pytest.approx(report["main_epochs_equivalent"] / 2)


def test_a_pool_too_small_for_the_probe_is_refused_as_the_probe_would(tmp_path, capsys):
    pool = tmp_path / "pool.jsonl"
    pool.write_text("{}\n" * 7)  # |P| = the pool's 7 rows < prompts_per_batch 8
    assert cost_cli.main(["--config", str(DEMO), "--dataset_path", str(pool)]) == 2
    assert "fewer than prompts_per_batch (8)" in capsys.readouterr().err


def test_recorded_cost_sums_each_pass_and_reads_the_probe_manifest(tmp_path):
    from trajval_ops.probe_manifest import write_manifest

    write_manifest(tmp_path, {"cost": {"completions": 640, "generated_tokens": 3000, "wall_time_s": 12.5}})
    checkpoint = {"name": "epoch-2", "manifest": str(tmp_path / "manifest.json")}
    early = [{"cost": {"completions": 16, "generated_tokens": 40}}, {"cost": {"completions": 0, "generated_tokens": 0}},
             {"source": "pool_field"}]
    late = [{"checkpoint": checkpoint, "cost": {"completions": 16, "generated_tokens": 50}}] * 3
    columns = {"trajval_r_early_provenance": early, "trajval_r_late_provenance": late}
    report = recorded_cost(columns.get, ["trajval_r_early"], ["trajval_r_late"])
    assert list(report["stages"]) == ["probe", "early", "late"]
    assert report["stages"]["probe"]["completions"] == 640 and report["stages"]["probe"]["wall_time_s"] == 12.5
    assert report["stages"]["early"] == {"completions": 16, "generated_tokens": 40, "rows": 3, "rows_without_cost": 1}
    assert report["stages"]["late"]["completions"] == 48
    assert report["completions"] == 640 + 16 + 48 and report["generated_tokens"] == 3000 + 40 + 150
    one_pass = recorded_cost(columns.get, ["trajval_r_early"], None)  # variance / band-pass: no probe, no late
    assert list(one_pass["stages"]) == ["early"] and one_pass["completions"] == 16


def test_a_probe_manifest_is_read_where_it_is_now_and_a_missing_one_is_an_error(tmp_path):
    """The rows name the manifest where the probe ran; a run that moved reads it where it is now,
    and a manifest found nowhere stops the count rather than count the probe as free."""
    from trajval_ops.prior_cost import probe_cost_from_manifests
    from trajval_ops.probe_manifest import write_manifest

    write_manifest(tmp_path / "now", {"cost": {"completions": 640, "generated_tokens": 3000, "wall_time_s": 12.5}})
    late = [{"checkpoint": {"name": "epoch-2", "manifest": "/elsewhere/probe_run/manifest.json"}},
            {"checkpoint": {"name": "epoch-2", "manifest": "elsewhere/probe_run/manifest.json"}}]  # one probe
    with pytest.raises(FileNotFoundError, match="elsewhere/probe_run/manifest.json, named by the rows'"):
        probe_cost_from_manifests(late)
    probe = probe_cost_from_manifests(late, locate=lambda named: tmp_path / "now" / "manifest.json")
    assert probe["completions"] == 640 and probe["manifests"] == [str(tmp_path / "now" / "manifest.json")]


def test_the_sampled_recipe_by_hand(capsys):
    """recipes/demo_sampled.yaml on the demo pool: 12 families of 50 rows, ceil(0.25 x 50) = 13
    measured per family in each window, a short pass of n = 4 on every row, the demo's probe (one
    epoch of 75 steps over the pool)."""
    sampled = REPO / "recipes" / "demo_sampled.yaml"
    pool = REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl"
    report = run_json(capsys, "--config", str(sampled), "--dataset_path", str(pool), "--main-n", "8")
    probe = 75 * 8 * 8
    assert [(s["stage"], s["completions"]) for s in report["stages"]] == [
        ("probe", probe), ("extra", 600 * 4), ("early", 12 * 13 * 16), ("late", 12 * 13 * 16)]
    assert all(s["measured_rows"] == 156 and s["measured_rows_exact"] for s in report["stages"][2:])
    assert report["completions"] == probe + 2400 + 2 * 156 * 16 == 12_192
    # without the pool its groups are unknown: ceil(0.25 x rows), flagged as not exact
    report = run_json(capsys, "--config", str(sampled), "--pool-rows", "600")
    assert [(s["completions"], s["measured_rows_exact"]) for s in report["stages"][2:]] == [(150 * 16, False)] * 2
    assert cost_cli.main(["--config", str(sampled), "--pool-rows", "600"]) == 0
    assert "about 150 rows, plus at most one per group" in capsys.readouterr().out


def test_a_sampled_pass_without_groups_measures_ceil_fraction_of_the_pool():
    from trajval_ops.prior_cost import pass_stage

    stage = pass_stage({"window": "late", "n": 16, "sample_fraction": 0.1}, 1001)
    assert stage["completions"] == 101 * 16 and stage["measured_rows"] == 101 and stage["measured_rows_exact"]
    stage = pass_stage({"window": "late", "n": 16, "sample_fraction": 0.1, "sample_group_key": "g"}, 30,
                       {"g": [10, 10, 5, 5]})
    assert stage["measured_rows"] == 1 + 1 + 1 + 1  # at least one row per group


def test_the_weighted_pool_provenance_carries_the_prior_total(tmp_path):
    """The learnability mapper sums the passes' recorded costs and the probe's into its
    provenance (once per file), wall times and paths left out: the same prior, the same bytes."""
    import pyarrow as pa

    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.probe_manifest import write_manifest

    write_manifest(tmp_path, {"cost": {"completions": 640, "generated_tokens": 3000, "wall_time_s": 12.5}})
    checkpoint = {"name": "epoch-2", "manifest": str(tmp_path / "manifest.json")}
    rows = [{"id": f"t{i}", "trajval_r_early": 0.25, "trajval_r_late": 0.5 + i / 10,
             "trajval_r_early_provenance": {"cost": {"completions": 16, "generated_tokens": 40 + i}},
             "trajval_r_late_provenance": {"checkpoint": checkpoint, "cost": {"completions": 16, "generated_tokens": 50}}}
            for i in range(3)]
    table = pa.Table.from_pylist(rows)
    for score in ("trajval", "variance"):
        out = TrajvalLearnabilityMapper(prior=score).score_pool(table)
        provenance = out.column("trajval_score_provenance")[0].as_py()
        assert provenance == out.column("trajval_score_provenance")[2].as_py()
        recorded = recorded_cost(lambda name: out.column(name).to_pylist(), ["trajval_r_early"],
                                 ["trajval_r_late"] if score == "trajval" else None)
        assert provenance["prior_cost"]["completions"] == recorded["completions"]
        if score == "trajval":
            assert provenance["prior_cost"] == {
                "completions": 640 + 48 + 48, "generated_tokens": 3000 + 123 + 150,
                "stages": {"probe": {"completions": 640, "generated_tokens": 3000},
                           "early": {"completions": 48, "generated_tokens": 123},
                           "late": {"completions": 48, "generated_tokens": 150}}}
        else:  # a one-pass prior: the early pass alone
            assert provenance["prior_cost"] == {"completions": 48, "generated_tokens": 123,
                                                "stages": {"early": {"completions": 48, "generated_tokens": 123}}}
        assert list(provenance)[-1] == "trajval_ops_version"


def _scored_pool(tmp_path, name: str, score: str, completions: int):
    """A pool scored by the learnability mapper (its provenance records the prior's cost), written."""
    import pyarrow as pa

    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import write_table

    rows = [{"id": f"{name}{i}", "trajval_r_early": 0.125 * (i % 8), "trajval_r_late": 0.9,
             "trajval_r_early_provenance": {"cost": {"completions": completions, "generated_tokens": 3 * completions}},
             "trajval_r_late_provenance": {"cost": {"completions": completions, "generated_tokens": 5}}}
            for i in range(10)]
    path = tmp_path / f"{name}.jsonl"
    write_table(TrajvalLearnabilityMapper(prior=score).score_pool(pa.Table.from_pylist(rows)), path)
    return path


def test_the_cost_of_a_resampled_or_concatenated_pool_is_its_runs_record(tmp_path, capsys):
    """`trajval cost --pool` reads each run's recorded prior_cost once (issue 36, item 2): a
    resampled pool (rows repeated and dropped) costs what the pool it came from cost, a file of
    two runs the sum of the two; per-row sums only for rows without a record, and said so."""
    import pyarrow as pa

    from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler
    from trajval_ops.pools.io import read_rows, read_table, write_table

    variance = _scored_pool(tmp_path, "v", "variance", 16)
    trajval = _scored_pool(tmp_path, "t", "trajval", 8)
    scored = run_json(capsys, "--pool", str(variance))
    assert scored["completions"] == 160 and scored["source"] == "record"
    resampled = tmp_path / "resampled.jsonl"
    write_table(TrajvalWeightedResampler(num_samples=25, seed=1).resample_table(read_table(variance)), resampled)
    ids = [row["id"] for row in read_rows(resampled)]
    assert len(ids) == 25 and len(set(ids)) < 10  # rows repeated, rows dropped
    report = run_json(capsys, "--pool", str(resampled))
    assert report["completions"] == 160 and report["stages"]["early"]["completions"] == 160  # not 25 x 16
    assert report["runs"][0]["rows"] == 25 and report["source"] == "record"

    both = tmp_path / "both.jsonl"
    both.write_bytes(trajval.read_bytes() + resampled.read_bytes())
    report = run_json(capsys, "--pool", str(both))
    assert [(run["prior"], run["completions"]) for run in report["runs"]] == [("trajval", 160), ("variance", 160)]
    assert report["completions"] == 320 and report["stages"]["early"]["completions"] == 80 + 160

    bare = [{k: v for k, v in row.items() if k != "trajval_score_provenance"} for row in read_rows(trajval)]
    write_table(pa.Table.from_pylist(bare + bare[:3]), tmp_path / "bare.jsonl")  # no record: summed per row
    report = run_json(capsys, "--pool", str(tmp_path / "bare.jsonl"))
    assert report["source"] == "per_row_sums" and report["completions"] == 13 * 16
    assert cost_cli.main(["--pool", str(tmp_path / "bare.jsonl")]) == 0
    assert "no prior_cost recorded" in capsys.readouterr().out


def test_a_concatenation_of_old_pools_sums_each_pool_by_its_own_passes(tmp_path, capsys):
    """Pools scored before prior_cost was recorded are summed per row by the passes their own
    provenance names: a file of an old variance pool then an old TrajVal pool counted every row by
    the first row's (the early pass alone), leaving out the TrajVal pool's late pass and calling it
    all variance."""
    import pyarrow as pa

    from trajval_ops.pools.io import read_rows, write_table

    def old(path):  # as pools were written before prior_cost was recorded
        return [row | {"trajval_score_provenance": {k: v for k, v in row["trajval_score_provenance"].items()
                                                    if k != "prior_cost"}} for row in read_rows(path)]

    variance, trajval = old(_scored_pool(tmp_path, "v", "variance", 16)), old(_scored_pool(tmp_path, "t", "trajval", 8))
    write_table(pa.Table.from_pylist(variance + trajval), tmp_path / "old_both.jsonl")
    report = run_json(capsys, "--pool", str(tmp_path / "old_both.jsonl"))
    assert [(run["prior"], run["rows"], run["completions"]) for run in report["runs"]] == [
        ("variance", 10, 10 * 16), ("trajval", 10, 10 * 8 + 10 * 8)]
    assert report["source"] == "per_row_sums" and report["completions"] == 320
    assert report["stages"]["late"]["completions"] == 80


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.append({"trajval_learnabilty_mapper": {}}),
     "Unknown operator 'trajval_learnabilty_mapper' not found in registry (did you mean: trajval_learnability_mapper"),
    (lambda p: p[-1]["trajval_learnability_mapper"].update(alpah=0.3),
     "Unknown parameter 'alpah' (did you mean: alpha?)"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(temprature=0.7),  # the generated signature
     "Unknown parameter 'temprature' (did you mean: temperature, template?)"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(sample_fraction=0),
     "process[2]: trajval_endpoint_reward_mapper: sample_fraction must be in (0, 1], got 0"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(sample_fraction=1.5),
     "sample_fraction must be in (0, 1], got 1.5"),
    (lambda p: p[4]["trajval_learnability_mapper"].update(eps=math.nan),  # NaN passed every bound
     "process[4]: trajval_learnability_mapper: eps must be a finite number, got nan"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(top_p=math.inf),
     "process[2]: trajval_endpoint_reward_mapper: top_p must be a finite number, got inf"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(budget="adaptive", round_size=32),
     "process[2]: trajval_endpoint_reward_mapper: round_size must be in [1, n = 16], got 32"),
    (lambda p: p[3]["trajval_endpoint_reward_mapper"].update(sample_seed=5),
     "draw different samples (sample_seed 0 vs 5)"),
    (lambda p: p[3]["trajval_endpoint_reward_mapper"].update(max_new_tokens=64),
     "process[4] trajval_learnability_mapper compares the pass rates of trajval_r_early (process[2]) and "
     "trajval_r_late (process[3]), which are set to measure otherwise (max_new_tokens 8 vs 64)"),
    (lambda p: p[-1]["trajval_learnability_mapper"].update(prior="trajval", score="variance"),
     "trajval_learnability_mapper: prior 'trajval' and the deprecated score 'variance' name different priors"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(budget="adaptive", budget_prior={"prior": "trajval",
                                                                                               "passes": ["early"]}),
     "process[2]): budget_prior: prior 'trajval' has no setting(s) ['passes']; its settings: ['alpha', 'eps', "
     "'estimator']"),
    (lambda p: p[2]["trajval_endpoint_reward_mapper"].update(verifier_options={"fallback_last_number": False}),
     "which are set to measure otherwise (verifier {'name': 'math', 'fallback_last_number': False, "),
])
def test_cost_refuses_what_dj_process_refuses(tmp_path, capsys, edit, message):
    """Issue 36, item 6: `trajval cost --config` checks the recipe with Data-Juicer's preflight and
    the operators' own declarations before it prices anything; exit 2, the entry named."""
    recipe = yaml.safe_load((REPO / "recipes" / "demo_sampled.yaml").read_text())
    edit(recipe["process"])
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert cost_cli.main(["--config", str(path), "--pool-rows", "600"]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and not captured.out


def test_a_recipe_whose_passes_read_a_probe_it_does_not_train_prices_that_probe(tmp_path, capsys):
    """The prior needs the probe wherever it trains: a recipe of passes only (``manifest:`` models)
    was priced without it. Now at what the probe's manifest records, or flagged as not priced."""
    recipe = yaml.safe_load(DEMO.read_text())
    probe = tmp_path / "probe"
    recipe["process"] = [entry for entry in recipe["process"] if "trajval_probe_trainer" not in entry]
    for entry in recipe["process"]:
        settings = entry.get("trajval_endpoint_reward_mapper")
        if settings:
            settings["model"] = settings["model"].replace("outputs/demo/probe", str(probe))
    path = tmp_path / "passes_only.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert cost_cli.main(["--config", str(path), "--pool-rows", "600"]) == 0
    out = capsys.readouterr().out
    assert f"probe    trained elsewhere                     0                  0 (NOT PRICED: the passes read the " \
           f"probe at {probe}, which has recorded no cost yet" in out
    probe.mkdir()
    (probe / "manifest.json").write_text("{")  # being written: no cost recorded yet, not a crash
    assert recipe_cost(recipe, pool_rows=600)["stages"][0]["recorded"] is False
    (probe / "manifest.json").write_text(json.dumps({"cost": {"completions": 4800, "generated_tokens": 16831}}))
    report = recipe_cost(recipe, pool_rows=600)
    assert report["stages"][0] == {"stage": "probe", "run_elsewhere": [str(probe)], "recorded": True,
                                   "completions": 4800, "max_new_tokens_total": 16831}
    assert report["completions"] == 4800 + sum(stage["completions"] for stage in report["stages"][1:])


def test_a_reused_pass_is_not_compared_with_the_settings_it_never_had():
    """A reused pass samples nothing and records no sampling settings: the declared defaults
    (temperature 1.0, ...) are not its own, so a late pass at another temperature is not refused on
    them (it was, before 2026-11-27); two measured passes still are."""
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.measured_alike import check_alike_passes

    late = ("trajval_endpoint_reward_mapper", {"window": "late", "model": "smollm2-135m-instruct",
                                               "temperature": 0.6})
    mapper = ("trajval_learnability_mapper", {"prior": "trajval"})
    for reused in ({"reuse_preset": "big_math"}, {"reuse_key": "base_rate", "reuse_n": 16}):
        check_alike_passes([("trajval_endpoint_reward_mapper", {"window": "early", **reused}), late, mapper])
    with pytest.raises(TrajvalInputError, match=r"set to measure otherwise \(temperature 1.0 vs 0.6\)"):
        check_alike_passes([("trajval_endpoint_reward_mapper", {"window": "early", "model": "smollm2-135m-instruct"}),
                            late, mapper])


def test_passes_scored_by_two_readings_of_the_verifier_are_not_compared():
    """A pass's provenance records how its release read answers (the verifier's revision). An early
    pass scored by an earlier reading beside a late pass scored now would show the reading's change
    as learning; a reused pass records no verifier and is not compared."""
    from trajval_ops.measured_alike import entry_measurement, measurement_difference

    now = entry_measurement({"window": "late", "model": "smollm2-135m-instruct"})
    assert now["verifier_revision"] == 2 and now["verifier"]["name"] == "math"
    assert measurement_difference({**now, "verifier_revision": 1}, now) == "verifier_revision 1 vs 2"
    assert measurement_difference(now, dict(now)) == ""
    assert measurement_difference({}, now) == ""  # a reused pass: nothing recorded, nothing compared


def test_a_math_pass_recording_no_verifier_revision_is_not_called_revision_1():
    """The math verifier reads answers as revision 2 since 2026-11-27, and a pass's provenance
    records the revision only from later that day: a math pass recording none was scored by
    revision 1 or 2 (a pass at f38a22c: 2). Beside a pass recording a revision it is still refused
    (the reading is not known), but not as revision 1; two passes recording none are compared alike
    as before, and under a verifier never revised none recorded is revision 1."""
    from trajval_ops.measured_alike import entry_measurement, measurement_difference

    now = entry_measurement({"window": "late", "model": "smollm2-135m-instruct"})
    unrecorded = {key: value for key, value in now.items() if key != "verifier_revision"}
    assert measurement_difference(unrecorded, now) == (
        "verifier_revision none recorded (records without one were read by revision 1 or 2, which cannot be told apart) vs 2")
    assert measurement_difference(now, unrecorded).endswith("vs none recorded (records without one were read by revision 1 or 2, which cannot be told apart)")
    assert measurement_difference(unrecorded, dict(unrecorded)) == ""
    assert measurement_difference(unrecorded, {**unrecorded, "temperature": 0.6}) == "temperature 1.0 vs 0.6"
    tagged = {**unrecorded, "verifier": {**now["verifier"], "name": "answer_tag"}}
    assert measurement_difference(tagged, {**tagged, "verifier_revision": 1}) == ""


def test_a_custom_verifier_recorded_before_its_module_digest_is_compared_without_it():
    """A custom verifier's spec holds its module's sha256 since 2026-11-27: an early pass recorded
    before beside a late pass recorded now was refused as measured otherwise, the module unchanged.
    Two recorded digests that differ still are."""
    from trajval_ops.measured_alike import measurement_difference

    spec = {"name": "custom", "function": "my_reward:score", "timeout_s": 5.0}
    now = {"verifier": {**spec, "source_sha256": "4c5f"}, "temperature": 1.0}
    before = {"verifier": spec, "temperature": 1.0}
    assert measurement_difference(before, now) == "" and measurement_difference(now, before) == ""
    edited = {**now, "verifier": {**spec, "source_sha256": "0a1b"}}
    assert measurement_difference(edited, now).startswith("verifier ")
    assert measurement_difference(before, {**now, "temperature": 0.6}) == "temperature 1.0 vs 0.6"


@pytest.mark.parametrize("option, value", [("--main-epochs", "nan"), ("--main-epochs", "inf"), ("--main-n", "0"),
                                           ("--pool-rows", "0"), ("--main-epochs", "-1")])
def test_cost_refuses_a_main_run_that_is_no_number(capsys, option, value):
    assert cost_cli.main(["--config", str(DEMO), "--pool-rows", "600", option, value]) == 2
    assert f"{option} " in capsys.readouterr().err


def test_the_price_names_the_recipes_prior_and_the_passes_it_does_not_read(tmp_path, capsys):
    """`trajval cost` reads the prior from the registry: the probe and the late pass of a variance
    recipe are priced, and flagged as stages the prior does not read."""
    recipe = yaml.safe_load(DEMO.read_text())
    recipe["process"][-1]["trajval_learnability_mapper"]["prior"] = "variance"
    del recipe["process"][-1]["trajval_learnability_mapper"]["alpha"]  # TrajVal's: refused for another prior
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    report = run_json(capsys, "--config", str(path), "--pool-rows", "600")
    assert report["prior"] == {"prior": "variance", "eps": 0.05}
    assert [stage.get("read_by_prior", True) for stage in report["stages"]] == [False, True, False]  # probe, early, late
    assert run_json(capsys, "--config", str(DEMO), "--pool-rows", "600")["prior"]["prior"] == "trajval"
    assert cost_cli.main(["--config", str(path), "--pool-rows", "600"]) == 0
    assert "the variance prior does not read this stage" in capsys.readouterr().out


def test_a_stage_read_by_any_of_the_recipes_priors_is_not_flagged(tmp_path, capsys):
    """Two learnability mappers (TrajVal, then variance on its own keys): the late pass TrajVal
    reads was flagged as unread, after the last mapper's one-pass prior alone."""
    recipe = yaml.safe_load(DEMO.read_text())
    recipe["process"].append({"trajval_learnability_mapper": {
        "prior": "variance", "eps": 0.05, "score_key": "variance_score", "weight_key": "variance_weight",
        "profile_key": "variance_profile", "delta_key": "variance_delta", "provenance_key": "variance_provenance"}})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    report = run_json(capsys, "--config", str(path), "--pool-rows", "600")
    assert [prior["prior"] for prior in report["priors"]] == ["trajval", "variance"]
    assert all(stage.get("read_by_prior", True) for stage in report["stages"])
    assert cost_cli.main(["--config", str(path), "--pool-rows", "600"]) == 0
    out = capsys.readouterr().out
    assert "priors: trajval (" in out and "; variance (eps 0.05)" in out and "does not read" not in out


def test_an_extra_pass_no_prior_reads_is_flagged_and_still_priced(tmp_path, capsys):
    """An extra pass (not a window) whose field no learnability mapper reads, as the validation
    probe's per-epoch and other-model passes, was shown with no note; it is flagged as the late
    pass of a one-pass prior is, and priced all the same. The sampled prior's short pass, a
    prediction feature of the mapper, is read and stays unflagged."""
    recipe = yaml.safe_load((REPO / "recipes" / "demo_sampled.yaml").read_text())
    short = recipe["process"][1]["trajval_endpoint_reward_mapper"]
    assert short["output_key"] == "trajval_r_early_short"
    for key, model in (("trajval_acc_epoch_1", "manifest:outputs/demo/probe#late[0]"),
                       ("trajval_r_early_other_model", "tiny-arith-seed1")):
        recipe["process"].insert(-1, {"trajval_endpoint_reward_mapper": short | {"output_key": key, "model": model}})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    report = run_json(capsys, "--config", str(path), "--pool-rows", "600")
    flags = {stage.get("output_key", "probe"): stage.get("read_by_prior", True) for stage in report["stages"]}
    assert flags == {"probe": True, "trajval_r_early_short": True, "trajval_r_early": True, "trajval_r_late": True,
                     "trajval_acc_epoch_1": False, "trajval_r_early_other_model": False}
    assert report["completions"] == sum(stage["completions"] for stage in report["stages"])
    assert report["completions"] == 75 * 8 * 8 + 3 * 600 * 4 + 2 * 150 * 16  # 3 full n = 4 passes, 2 sampled
    assert cost_cli.main(["--config", str(path), "--pool-rows", "600"]) == 0
    lines = capsys.readouterr().out.splitlines()
    noted = [line.split()[1] for line in lines if "the trajval prior does not read this stage" in line]
    assert noted == ["trajval_acc_epoch_1", "trajval_r_early_other_model"]


def test_a_pass_a_read_pass_reuses_is_read():
    """An extra pass whose field the early window reuses (reuse_key) is read by the prior
    through that pass: not flagged."""
    recipe = yaml.safe_load(DEMO.read_text())
    early = recipe["process"][1]["trajval_endpoint_reward_mapper"]
    assert early["window"] == "early"
    measured = {k: v for k, v in early.items() if k != "window"} | {"output_key": "base_pass_rate"}
    early.update(reuse_key="base_pass_rate", reuse_n_key="base_pass_rate_n")
    recipe["process"].insert(1, {"trajval_endpoint_reward_mapper": measured})
    report = recipe_cost(recipe, 600)
    assert [(s["stage"], s.get("read_by_prior", True)) for s in report["stages"]] == [
        ("probe", True), ("extra", True), ("early", True), ("late", True)]
    assert report["completions"] == 75 * 8 * 8 + 2 * 600 * 16


def test_the_probe_is_read_by_a_one_pass_prior_that_reads_a_pass_on_its_checkpoint():
    """A variance prior reading a prediction feature measured on the probe's checkpoint needs
    the probe; it was flagged as a stage no prior reads (one-pass priors alone)."""
    recipe = yaml.safe_load((REPO / "recipes" / "demo_sampled.yaml").read_text())
    recipe["process"][-1]["trajval_learnability_mapper"]["prior"] = "variance"
    del recipe["process"][-1]["trajval_learnability_mapper"]["alpha"]  # TrajVal's: refused for another prior
    short = recipe["process"][1]["trajval_endpoint_reward_mapper"]
    assert short["output_key"] == "trajval_r_early_short"
    flags = {stage.get("output_key", "probe"): stage.get("read_by_prior", True)
             for stage in recipe_cost(recipe, 600)["stages"]}
    assert flags["probe"] is False and flags["trajval_r_early_short"] is True
    short["model"] = "manifest:outputs/demo/probe#late[0]"
    flags = {stage.get("output_key", "probe"): stage.get("read_by_prior", True)
             for stage in recipe_cost(recipe, 600)["stages"]}
    assert flags["probe"] is True and flags["trajval_r_early_short"] is True and flags["trajval_r_late"] is False


def test_passes_without_a_provenance_column_are_unknown_not_free(tmp_path, capsys):
    """A pool scored from given pass rates (recipes/score_pool.yaml) has no `<key>_provenance`
    column at all; before 2026-11-28 no row counted as unknown and its prior was priced at 0."""
    import pyarrow as pa

    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import write_table

    columns = {"trajval_r_early": [0.25, 0.5, 0.0], "trajval_r_late": [0.5, 0.5, 1.0]}
    report = recorded_cost(columns.get, ["trajval_r_early"], ["trajval_r_late"])
    assert report["stages"]["early"] == {"completions": 0, "generated_tokens": 0, "rows": 3, "rows_without_cost": 3}
    assert report["stages"]["late"]["rows_without_cost"] == 3
    rows = [{"id": f"t{i}", "trajval_r_early": 0.25 * i, "trajval_r_late": 0.75} for i in range(4)]
    scored = TrajvalLearnabilityMapper(prior="trajval").score_pool(pa.Table.from_pylist(rows))
    provenance = scored.column("trajval_score_provenance")[0].as_py()
    assert provenance["prior_cost"]["stages"] == {
        "early": {"completions": 0, "generated_tokens": 0, "rows_without_cost": 4},
        "late": {"completions": 0, "generated_tokens": 0, "rows_without_cost": 4}}
    write_table(scored, tmp_path / "scored.jsonl")
    assert run_json(capsys, "--pool", str(tmp_path / "scored.jsonl"))["rows_without_cost"] == 8
    assert cost_cli.main(["--pool", str(tmp_path / "scored.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "(4 rows without a recorded cost)" in out and "(NOT PRICED: 8 pass rows without a recorded cost)" in out


def test_a_pass_without_provenance_counts_only_its_measured_rows_as_unpriced():
    """A sampled prior's predicted rows have no pass rate: they had no cost to record."""
    from trajval_ops.prior_cost import recorded_cost

    columns = {"trajval_r_early": [0.5, None, 0.25], "trajval_r_late": [0.75, None, 0.5]}
    cost = recorded_cost(columns.get, ["trajval_r_early"], ["trajval_r_late"], [])
    assert [cost["stages"][stage]["rows_without_cost"] for stage in ("early", "late")] == [2, 2]


def _spread_recipe(tmp_path, executor: str | None = None) -> str:
    """The demo recipe with its stages spread over GPUs: the probe on 2 processes, the early
    pass one vLLM engine of 2 GPUs, the late pass 4 transformers workers over the node's GPUs."""
    recipe = yaml.safe_load(DEMO.read_text())
    probe, early, late = (next(iter(entry.values())) for entry in recipe["process"][:3])
    probe.update(num_processes=2, micro_batch_size=32)
    early.update(engine="vllm", tensor_parallel_size=2)
    late.update(engine="transformers", accelerator="cuda", num_proc=4)
    if executor:
        recipe["executor_type"] = executor
        early.update(num_proc=3, num_gpus=2)  # 3 actors of 2 GPUs each
    path = tmp_path / f"spread_{executor}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_gpu_hours_and_the_wall_time_on_n_gpus_by_hand(tmp_path, capsys):
    """Issue 54, item 5: `trajval cost --rate R --gpus N`: GPU-hours = completions / R, the wall
    time the stages one after another, each split over the GPUs its settings give it (at most N)."""
    probe, early, late = 75 * 8 * 8, 600 * 16, 600 * 16  # the demo recipe on 600 rows
    recipe = _spread_recipe(tmp_path)
    report = run_json(capsys, "--config", recipe, "--pool-rows", "600", "--rate", "20", "--gpus", "8")
    assert [stage["gpus"] for stage in report["stages"]] == [2, 2, 4]
    assert report["plan"]["gpu_hours"] == pytest.approx((probe + early + late) / 20 / 3600)
    assert report["plan"]["generation_wall_time_s"] == pytest.approx((probe / 2 + early / 2 + late / 4) / 20)
    on_three = run_json(capsys, "--config", recipe, "--pool-rows", "600", "--rate", "20", "--gpus", "3")
    assert [stage["gpus_used"] for stage in on_three["stages"]] == [2, 2, 3]
    assert on_three["plan"]["generation_wall_time_s"] == pytest.approx((probe / 2 + early / 2 + late / 3) / 20)
    one = run_json(capsys, "--config", recipe, "--pool-rows", "600", "--rate", "20")  # --gpus defaults to 1
    assert one["plan"]["generation_wall_time_s"] == pytest.approx((probe + early + late) / 20)
    assert one["plan"]["gpu_hours"] == report["plan"]["gpu_hours"]
    ray = run_json(capsys, "--config", _spread_recipe(tmp_path, "ray"), "--pool-rows", "600", "--rate", "20",
                   "--gpus", "8")
    assert [stage["gpus"] for stage in ray["stages"]] == [2, 6, 4]
    assert cost_cli.main(["--config", recipe, "--pool-rows", "600", "--rate", "20", "--gpus", "8"]) == 0
    printed = capsys.readouterr().out
    assert f"{(probe + early + late) / 20 / 3600:,.2f} GPU-hours" in printed
    assert "(probe 2, trajval_r_early 2, trajval_r_late 4)" in printed


def test_rate_is_one_option_with_one_meaning_in_every_command():
    """--rate is completions per second per GPU in trajval cost, validate --dry-run and validate
    --trainer: one declaration, one help text (trajval_ops.generation_time)."""
    from trajval_ops.experiment import protocol
    from trajval_ops.generation_time import PRICE_HELP, RATE_HELP

    def option(parser, name):
        return next(action for action in parser._actions if name in action.option_strings)

    cost_rate, validate_rate = option(cost_cli.parser(), "--rate"), option(protocol.parser("v"), "--rate")
    assert cost_rate.help == RATE_HELP and validate_rate.help.startswith(RATE_HELP)
    assert cost_rate.metavar == validate_rate.metavar == "COMPLETIONS_PER_S_PER_GPU"
    assert option(protocol.parser("v"), "--price").help == PRICE_HELP


def test_the_rates_and_gpus_rules_are_the_dry_runs(tmp_path, capsys):
    """One check for both commands: a rate that is not a positive number, fewer than one GPU, and
    GPUs without a rate are refused in the same words; --pool takes a rate alone."""
    from trajval_ops.experiment import protocol

    smoke = str(REPO / "recipes" / "validation" / "smoke.yaml")
    for options in (["--gpus", "8"], ["--rate", "nan"], ["--rate", "0"], ["--rate", "5", "--gpus", "0"]):
        assert cost_cli.main(["--config", str(DEMO), "--pool-rows", "600", *options]) == 2
        said = capsys.readouterr().err.split("error: ", 1)[1]
        assert protocol.main(["--config", smoke, "--dry-run", *options]) == 2
        assert capsys.readouterr().err.split("error: ", 1)[1] == said
    pool = _scored_pool(tmp_path, "v", "variance", 16)
    report = run_json(capsys, "--pool", str(pool), "--rate", "4")
    assert report["plan"]["gpu_hours"] == pytest.approx(160 / 4 / 3600)
    assert cost_cli.main(["--pool", str(pool), "--rate", "4", "--gpus", "2"]) == 2
