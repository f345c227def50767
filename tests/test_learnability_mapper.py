"""trajval_learnability_mapper on in-memory datasets (the dj-process runs are in test_recipes_e2e)."""

import json
import math

import numpy as np
import pytest
from data_juicer.core.data import NestedDataset
from datasets import Dataset

from trajval_ops import core
from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
from trajval_ops.errors import TrajvalInputError


def run(rows, **params):
    op = TrajvalLearnabilityMapper(**params)
    return op.run(NestedDataset(Dataset.from_list(rows))).to_list()


def test_fixture_pool_values_match_the_core(fixture_rows):
    out = run(fixture_rows)
    assert [r["extra_info"]["index"] for r in out] == [r["extra_info"]["index"] for r in fixture_rows]
    r_early = np.array([r["trajval_r_early"] for r in fixture_rows])
    r_late = np.array([r["trajval_r_late"] for r in fixture_rows])
    score = core.learnability_score(r_early, r_late)
    assert [r["trajval_score"] for r in out] == score.tolist()
    assert [r["trajval_weight"] for r in out] == core.sampling_weight(score).tolist()
    assert [r["trajval_profile"] for r in out] == core.endpoint_profiles(r_early, r_late).tolist()
    for before, after in zip(fixture_rows, out):  # original fields untouched
        assert {k: after[k] for k in before} == before


def test_hand_computed_row():
    out = run([{"id": "a", "trajval_r_early": 0.25, "trajval_r_late": 0.75}], alpha=0.5, eps=0.1)[0]
    assert out["trajval_delta"] == 0.5
    assert out["trajval_score"] == 0.375
    assert out["trajval_weight"] == pytest.approx(math.sqrt(0.375))
    assert out["trajval_profile"] == "stable"
    prov = out["trajval_score_provenance"]
    assert prov["alpha"] == 0.5 and prov["eps"] == 0.1
    assert prov["r_early_source"] == ["trajval_r_early"] and prov["profile_rule"] == "saturation_first"


def test_k_window_fields_are_averaged_and_written_back():
    rows = [{"e0": 0.0, "e1": 0.5, "l0": 1.0, "l1": 0.5}, {"e0": 0.25, "e1": 0.25, "l0": 0.25, "l1": 0.75}]
    out = run(rows, early_window_keys=["e0", "e1"], late_window_keys=["l0", "l1"])
    assert [r["trajval_r_early"] for r in out] == [0.25, 0.25]
    assert [r["trajval_r_late"] for r in out] == [0.75, 0.5]
    assert out[0]["trajval_score"] == 0.75 * 0.5
    assert out[0]["trajval_score_provenance"]["r_late_source"] == ["l0", "l1"]


def test_custom_field_names():
    out = run([{"pre": 0.0, "post": 1.0}], r_early_key="pre", r_late_key="post", weight_key="w", score_key="s")
    assert out[0]["s"] == 1.0 and out[0]["w"] == 1.0


def test_all_at_floor_is_logged_not_an_error(caplog_loguru):
    out = run([{"trajval_r_early": 0.5, "trajval_r_late": 0.5}] * 3)
    assert [r["trajval_weight"] for r in out] == [0.05] * 3
    assert "every one of the 3 rows has its weight at the floor" in caplog_loguru.text


@pytest.mark.parametrize(
    "row,message",
    [
        ({"id": "t7", "trajval_r_late": 0.5}, "row 1 (id='t7'): field 'trajval_r_early' is missing"),
        ({"id": "t7", "trajval_r_early": math.nan, "trajval_r_late": 0.5}, "row 1 (id='t7'): field 'trajval_r_early' is nan"),
        ({"id": "t7", "trajval_r_early": "0.5", "trajval_r_late": 0.5}, "field 'trajval_r_early' must be a number"),
        ({"id": "t7", "trajval_r_early": 0.5, "trajval_r_late": 1.5}, "row 1 (id='t7'): field 'trajval_r_late' = 1.5 is outside [0, 1]"),
        ({"id": "t7", "trajval_r_early": -0.1, "trajval_r_late": 0.5}, "is outside [0, 1]"),
    ],
)
def test_bad_rewards_name_row_and_field(row, message):
    good = {"id": "t0", "trajval_r_early": 0.1, "trajval_r_late": 0.2}
    # JSON-like mixed types: build through from_list of plain dicts with a common schema
    rows = [dict(good), row]
    from trajval_ops.pools.io import table_from_columns

    table = table_from_columns({k: [r.get(k) for r in rows] for k in set(good) | set(row)}, len(rows))
    with pytest.raises(TrajvalInputError) as err:
        TrajvalLearnabilityMapper().score_pool(table)
    assert message in str(err.value)


def test_error_names_global_position_through_run():
    rows = [{"trajval_r_early": 0.1, "trajval_r_late": 0.2}] * 5 + [{"trajval_r_early": 0.1, "trajval_r_late": 2.0}]
    with pytest.raises(TrajvalInputError, match=r"row 5: field 'trajval_r_late'"):
        run(rows, batch_size=2)


def test_empty_pool_is_an_error():
    with pytest.raises(TrajvalInputError, match="empty"):
        TrajvalLearnabilityMapper().run(NestedDataset(Dataset.from_list([])))


def test_skip_op_error_cannot_be_turned_on():
    op = TrajvalLearnabilityMapper(skip_op_error=True)
    assert op.skip_op_error is False
    with pytest.raises(TrajvalInputError):
        op.process({"trajval_r_early": [None], "trajval_r_late": [0.5]})


def test_bad_parameters():
    with pytest.raises(ValueError):
        TrajvalLearnabilityMapper(early_window_keys=[])


def test_text_reward_column_is_refused_naming_the_row():
    rows = [{"trajval_r_early": "0.5", "trajval_r_late": 0.5}]
    with pytest.raises(TrajvalInputError, match="row 0: field 'trajval_r_early' must be a number, got str '0.5'"):
        run(rows)


def test_rollout_noise_flags_gains_inside_the_noise():
    from trajval_ops.summary import rollout_noise

    r_early = np.array([0.0, 0.25, 0.0, 0.5])
    r_late = np.array([0.25, 0.5, 1.0, 0.5])
    noisy = rollout_noise(r_early, r_late, np.full(4, 4), np.full(4, 4))
    assert noisy["rows_with_positive_score"] == 3
    assert noisy["positive_scores_within_noise"] == 2  # +1/4 at n = 4 is noise; 0 -> 1 is not
    sure = rollout_noise(r_early, r_late, np.full(4, 400), np.full(4, 400))
    assert sure["positive_scores_within_noise"] == 0
    # SE at p~(k+1)/(n+2): 0/4 -> p = 1/6
    assert noisy["se_r_early_median"] == pytest.approx(np.median([
        np.sqrt(p * (1 - p) / 4) for p in ((0 + 1) / 6, (1 + 1) / 6, (0 + 1) / 6, (2 + 1) / 6)]), abs=1e-4)


def test_window_names_link_the_endpoint_and_learnability_mappers():
    from trajval_ops import fields
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    def out_key(**kwargs):
        return TrajvalEndpointRewardMapper(model="tiny-random-llama", **kwargs).output_key

    assert out_key(window="early") == "trajval_r_early"
    assert out_key(window="late", window_index=1) == "trajval_r_late_1"
    assert out_key(window="late", output_key="mine") == "mine"  # explicit override
    assert out_key() == "trajval_acc"
    with pytest.raises(ValueError, match="window_index needs a window"):
        out_key(window_index=0)
    mapper = TrajvalLearnabilityMapper(window_k=2)
    assert mapper.early_window_keys == ["trajval_r_early_0", "trajval_r_early_1"]
    assert mapper.late_window_keys == fields.window_keys("late", 2)
    assert TrajvalLearnabilityMapper().early_window_keys is None  # K = 1 reads trajval_r_early


def test_run_follows_data_juicers_contract_with_a_tracer(tmp_path, caplog_loguru):
    """The whole-pool path takes the tracer and Data-Juicer's column preparation like a mapper's
    run: a real Tracer asked to trace this operator is told there is no text change to record,
    and an index_key column is added by Data-Juicer's preparation."""
    from data_juicer.core.tracer import Tracer

    rows = [{"id": f"t{i}", "trajval_r_early": 0.25, "trajval_r_late": 0.75} for i in range(4)]
    op = TrajvalLearnabilityMapper(index_key="row_index")
    tracer = Tracer(str(tmp_path), op_list_to_trace=[op._name])
    out = op.run(NestedDataset(Dataset.from_list(rows)), tracer=tracer)
    assert "nothing to trace" in caplog_loguru.text
    assert out["row_index"] == [0, 1, 2, 3]
    assert out["trajval_score"] == pytest.approx([0.75 * 0.5] * 4)


def test_group_noise_hand_computed():
    from trajval_ops.summary import group_noise, pass_rate_se

    groups = ["a", "a", "b", "b"]
    r_early, r_late = np.array([0.0, 0.5, 0.5, 0.5]), np.array([0.5, 1.0, 0.5, 0.5])
    n = np.full(4, 16)
    out = group_noise(groups, r_early, r_late, n, n, np.array([1.0, 0.5, 0.05, 0.05]))
    se = np.sqrt(pass_rate_se(r_early, n) ** 2 + pass_rate_se(r_late, n) ** 2)
    se_a, se_b = np.sqrt(se[0] ** 2 + se[1] ** 2) / 2, np.sqrt(se[2] ** 2 + se[3] ** 2) / 2
    pooled = (0.5 / se_a ** 2 + 0.0 / se_b ** 2) / (1 / se_a ** 2 + 1 / se_b ** 2)
    assert out["groups"]["a"]["delta"] == 0.5 and out["groups"]["b"]["delta"] == 0.0
    assert out["groups"]["a"]["se_delta"] == pytest.approx(se_a, abs=1e-4)
    assert out["pooled_delta"] == pytest.approx(pooled, abs=1e-4)
    q = ((0.5 - pooled) / se_a) ** 2 + ((0.0 - pooled) / se_b) ** 2
    assert out["cochran_q"] == pytest.approx(q, abs=0.01) and out["df"] == 1
    expected_beyond = int(abs(0.5 - pooled) / se_a > 2) + int(abs(pooled) / se_b > 2)
    assert out["groups_beyond_noise"] == expected_beyond and out["groups"]["a"]["weight"] == 0.75


def test_group_noise_finds_no_difference_in_pure_noise():
    """Every group with the same true pass rates: Q stays near its degrees of freedom."""
    from trajval_ops.summary import group_noise

    rng = np.random.default_rng(0)
    rows, n = 1200, 16
    early = rng.binomial(n, 0.4, rows) / n
    late = rng.binomial(n, 0.4, rows) / n
    out = group_noise([f"g{i % 12}" for i in range(rows)], early, late, np.full(rows, n), np.full(rows, n),
                      np.ones(rows))
    assert out["df"] == 11 and out["cochran_q"] < 2 * 11
    assert out["groups_beyond_noise"] <= 2


def test_group_key_reports_groups_in_the_log(caplog_loguru):
    rows = []
    for i in range(40):
        family = "gains" if i % 2 else "flat"
        rows.append({"id": f"t{i}", "extra_info": {"family": family},
                     "trajval_r_early": 0.25, "trajval_r_late": 0.75 if family == "gains" else 0.25,
                     "trajval_r_early_n": 16, "trajval_r_late_n": 16})
    TrajvalLearnabilityMapper(group_key="extra_info.family").run(NestedDataset(Dataset.from_list(rows)))
    assert "mean delta by extra_info.family" in caplog_loguru.text
    assert "gain differs between values of extra_info.family beyond the rollout noise" in caplog_loguru.text


@pytest.mark.parametrize("score, band, weights", [
    ("variance", None, [0.05, 0.05, 1.0, 0.75]),   # max(4 r (1 - r), eps)
    ("bandpass", None, [0.05, 0.05, 1.0, 1.0]),    # max(1{0 < r < 1}, eps)
    ("bandpass", (0.3, 1.0), [0.05, 0.05, 1.0, 0.05]),
])
def test_one_pass_priors_by_hand_from_the_early_pass_alone(score, band, weights):
    rows = [{"id": str(i), "trajval_r_early": r} for i, r in enumerate([0.0, 1.0, 0.5, 0.25])]  # no r_late
    params = {"prior": score} | ({"band_low": band[0], "band_high": band[1]} if band else {})
    out = run(rows, **params)
    assert [r["trajval_weight"] for r in out] == pytest.approx(weights)
    assert "trajval_delta" not in out[0] and "trajval_profile" not in out[0]
    provenance = out[0]["trajval_score_provenance"]
    assert provenance["score"] == score and provenance["r_early_source"] == ["trajval_r_early"]
    assert "r_late_source" not in provenance and "alpha" not in provenance
    if band:
        assert provenance["band"] == list(band)


def test_a_pool_all_at_zero_or_one_gets_uniform_one_pass_weights():
    rows = [{"id": str(i), "trajval_r_early": r} for i, r in enumerate([0.0, 1.0, 1.0, 0.0])]
    for score in ("variance", "bandpass"):
        assert {r["trajval_weight"] for r in run(rows, prior=score)} == {0.05}


def test_unknown_prior_and_bad_band_are_refused():
    from trajval_ops.priors import PRIORS

    with pytest.raises(ValueError, match=f"prior must be one of {', '.join(PRIORS)}, got 'magic'"):
        TrajvalLearnabilityMapper(prior="magic")
    with pytest.raises(ValueError, match="band must satisfy"):
        TrajvalLearnabilityMapper(prior="bandpass", band_low=0.8, band_high=0.2)
    with pytest.raises(ValueError, match=r"band_high must be in \(0, 1\]"):
        TrajvalLearnabilityMapper(prior="bandpass", band_high=1.5)
    with pytest.raises(ValueError, match=r"alpha must be in \(0, inf\)"):
        TrajvalLearnabilityMapper(alpha=0.0)


def test_the_old_score_key_names_the_prior_with_a_deprecation_message(caplog_loguru):
    """Issue 34, item 4: the prior has a key of its own (``prior:``); ``score:`` is read for one
    release with a warning, and both naming different priors is an error."""
    rows = [{"id": str(i), "trajval_r_early": r} for i, r in enumerate([0.0, 0.5, 0.25])]
    assert [r["trajval_weight"] for r in run(rows, score="variance")] == [r["trajval_weight"]
                                                                         for r in run(rows, prior="variance")]
    assert "'score: variance' is deprecated (until 0.3): write 'prior: variance'" in caplog_loguru.text
    with pytest.raises(ValueError, match="name different priors"):
        TrajvalLearnabilityMapper(prior="bandpass", score="variance")


@pytest.mark.parametrize("prior", ["trajval", "bandpass"])
def test_an_explicit_prior_the_deprecated_score_contradicts_is_refused_whichever_it_names(prior):
    """Issue 57: ``prior: trajval`` with ``score: variance`` wrote the variance weight (exit 0): the
    default prior could not be told from an explicit ``trajval``. Both readers of a recipe entry
    (the mapper and :func:`trajval_ops.recipe.learnability_prior_spec`) refuse any two that differ;
    agreeing ones, or ``score`` alone, name the prior."""
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.priors import recipe_prior_name
    from trajval_ops.recipe import learnability_prior_spec

    message = f"prior '{prior}' and the deprecated score 'variance' name different priors"
    with pytest.raises(ValueError, match=message):
        TrajvalLearnabilityMapper(prior=prior, score="variance")
    with pytest.raises(TrajvalInputError, match=rf"process\[3\] trajval_learnability_mapper: {message}"):
        learnability_prior_spec({"prior": prior, "score": "variance"}, 3)
    assert recipe_prior_name(None, None) == "trajval" and recipe_prior_name(None, "variance") == "variance"
    assert recipe_prior_name(prior, prior) == prior
    assert TrajvalLearnabilityMapper(prior="variance", score="variance").prior.name == "variance"
    assert learnability_prior_spec({"score": "variance"}, 0) == {"prior": "variance", "eps": 0.05}


def test_posterior_estimator_scores_with_an_interval_and_says_how():
    rng = np.random.default_rng(3)
    rows = [{"id": str(i), "family": "ab"[i % 2], "trajval_r_early": int(rng.integers(0, 17)) / 16,
             "trajval_r_late": int(rng.integers(0, 17)) / 16, "trajval_r_early_n": 16, "trajval_r_late_n": 16}
            for i in range(40)]
    for estimator in ("posterior", "pooled"):
        out = run(rows, estimator=estimator, group_key="family")
        r_early = np.array([r["trajval_r_early"] for r in rows])
        r_late = np.array([r["trajval_r_late"] for r in rows])
        groups = [r["family"] for r in rows] if estimator == "pooled" else None
        mean, low, high, fitted = core.noise_aware_score(estimator, r_early, 16, r_late, 16, groups)
        assert [r["trajval_score"] for r in out] == mean.tolist()
        assert [r["trajval_score_low"] for r in out] == low.tolist()
        assert [r["trajval_weight"] for r in out] == core.sampling_weight(mean).tolist()
        provenance = out[0]["trajval_score_provenance"]
        assert provenance["estimator"] == estimator and provenance["interval_mass"] == 0.95
        assert set(provenance["beta_priors"]) == {"early", "late"}


def test_the_noise_report_counts_positive_scores_by_the_paper_whatever_the_estimator(caplog_loguru):
    """A posterior mean is above 0 on every row: counted as the positive scores, every row with no
    gain was 'within noise' and the warning always fired (200 of 200 where 58 have a gain)."""
    rows = [{"id": str(i), "trajval_r_early": 0.5, "trajval_r_late": 0.25 if i % 4 else 0.75, "trajval_r_early_n": 4,
             "trajval_r_late_n": 4} for i in range(8)]
    for estimator in ("paper", "posterior"):
        caplog_loguru.messages.clear()
        run(rows, estimator=estimator)
        assert "'rows_with_positive_score': 2, 'positive_scores_within_noise': 2" in caplog_loguru.text, estimator


def test_a_noise_aware_estimator_on_one_rollout_per_row_is_refused_naming_the_remedy():
    rows = [{"id": str(i), "trajval_r_early": float(i % 2), "trajval_r_late": float(i % 3 == 0),
             "trajval_r_early_n": 1, "trajval_r_late_n": 1} for i in range(12)]
    with pytest.raises(TrajvalInputError, match="estimator 'posterior': .* measure n >= 2 .* or use estimator: paper"):
        run(rows, estimator="posterior")


def test_noise_aware_estimators_need_counts_groups_and_the_whole_pool():
    rows = [{"id": "a", "trajval_r_early": 0.25, "trajval_r_late": 0.75}]
    with pytest.raises(TrajvalInputError, match="<key>_n columns"):
        run(rows, estimator="posterior")
    with pytest.raises(ValueError, match="set group_key"):
        TrajvalLearnabilityMapper(estimator="pooled")
    with pytest.raises(ValueError, match="estimator is a setting of the trajval prior, not of the variance prior"):
        TrajvalLearnabilityMapper(estimator="posterior", prior="variance")
    import pyarrow as pa

    op = TrajvalLearnabilityMapper(estimator="posterior")
    assert op.needs_whole_pool  # so under Ray dj-process hands it the gathered pool, as for every score
    with pytest.raises(TrajvalInputError, match="cannot score a batch alone"):
        op.transform_table(pa.Table.from_pylist(rows))


def test_a_noise_aware_estimator_refuses_a_window_whose_passes_stand_on_other_counts():
    """The estimators read a window's mean rate as the successes of all its rollouts: rates 1 of 4
    and 0 of 16 would read as 10 of 20, not 4. Refused naming the row and the counts."""
    rows = [{"id": f"t{i}", "e0": 0.25, "e1": 0.25, "l0": 1.0, "l1": 0.0, "e0_n": 16, "e1_n": 16, "l0_n": 16,
             "l1_n": 16} for i in range(3)]
    windows = dict(early_window_keys=["e0", "e1"], late_window_keys=["l0", "l1"], estimator="posterior")
    assert len(run(rows, **windows)) == 3
    rows[1]["l0_n"] = 4
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='t1'\): the passes of a window stand on different "
                                                r"rollout counts \(l0_n 4, l1_n 16; 1 row\(s\) in all\)"):
        run(rows, **windows)


def test_a_group_key_no_row_has_is_refused_whichever_level_is_misspelled(caplog_loguru):
    """The pooled estimator and the group noise report read the group key as every reader does
    (issue 36, item 3): a misspelled child of an existing struct is not found, named, instead of
    one group None; rows without it among rows that have it are counted."""
    rows = [{"id": str(i), "extra_info": {"family": "ab"[i % 2]}, "trajval_r_early": (i % 5) / 8,
             "trajval_r_late": (i % 7) / 8, "trajval_r_early_n": 8, "trajval_r_late_n": 8} for i in range(20)]
    for key in ("extra_info.famly", "extra_inf.family"):
        for params in ({"estimator": "pooled"}, {}):
            with pytest.raises(TrajvalInputError, match=f"group_key '{key}' is not found on any row"):
                run(rows, group_key=key, **params)
    rows[3]["extra_info"] = {}
    out = run(rows, estimator="pooled", group_key="extra_info.family")
    assert len(out) == 20 and "1 of 20 rows lack group_key 'extra_info.family' (the first: row 3" in caplog_loguru.text


# ----------------------------------------------------------------------------- sampled passes


def sampled_pool(rows=60, measured_every=3, groups="abcd", seed=0):
    """A pool whose endpoint passes measured every ``measured_every``-th row: the others are
    ``not_sampled`` (null pass rate, n 0), as the endpoint mapper writes them; every row has a
    short pass ``short`` that the late gain follows."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        short = int(rng.integers(0, 5)) / 4
        measured = i % measured_every == 0
        r_early = min(1.0, max(0.0, short + rng.normal(0, 0.1))) if measured else None
        r_late = min(1.0, r_early + 0.4 * (1 - short)) if measured else None
        status = "ok" if measured else "not_sampled"
        out.append({"id": f"t{i}", "family": groups[i % len(groups)], "short": short,
                    "trajval_r_early": r_early, "trajval_r_late": r_late,
                    "trajval_r_early_status": status, "trajval_r_late_status": status,
                    "trajval_r_early_n": 16 if measured else 0, "trajval_r_late_n": 16 if measured else 0})
    return out


def test_unmeasured_rows_are_predicted_flagged_and_weighted():
    from trajval_ops.priors.sampled import predict_scores

    rows = sampled_pool()
    out = run(rows, predict_unmeasured=True, predict_features=["short"], group_key="family", predict_seed=4)
    measured = np.array([r["trajval_r_early_status"] == "ok" for r in rows])
    r_early = np.array([r["trajval_r_early"] if m else 0.0 for r, m in zip(rows, measured)])
    r_late = np.array([r["trajval_r_late"] if m else 0.0 for r, m in zip(rows, measured)])
    paper = core.learnability_score(r_early, r_late)
    expected = predict_scores(np.where(measured, paper, 0.0), measured, np.array([[r["short"]] for r in rows]),
                              [r["family"] for r in rows], seed=4)
    assert expected.predictor == "gradient_boosting"  # 20 measured rows: a model, not the group means
    score = np.array([r["trajval_score"] for r in out])
    assert score[measured].tolist() == paper[measured].tolist()  # measured rows: the paper's score
    assert score.tolist() == expected.score.tolist()
    assert [r["trajval_weight"] for r in out] == core.sampling_weight(score).tolist()  # every row weighted
    assert [r["trajval_predicted"] for r in out] == (~measured).tolist()
    for row, m in zip(out, measured):
        assert row["trajval_score_low"] <= row["trajval_score"] <= row["trajval_score_high"]
        if not m:  # no measured change: no delta, no profile
            assert row["trajval_delta"] is None and row["trajval_profile"] is None
            assert row["trajval_r_early"] is None and row["trajval_r_late"] is None  # not ours to fill in
    prediction = out[0]["trajval_score_provenance"]["prediction"]
    assert prediction["features"] == ["short"] and prediction["predictor"] == "gradient_boosting"
    assert prediction["measured_rows"] == 20 and prediction["predicted_rows"] == 40
    again = run(rows, predict_unmeasured=True, predict_features=["short"], group_key="family", predict_seed=4)
    assert again == out  # the same seed, the same predictions
    for before, after in zip(rows, out):  # the fields we do not own come out as they came in
        assert {k: after[k] for k in before} == before


def test_an_unmeasured_row_stops_the_run_unless_predicted():
    rows = sampled_pool(rows=6)
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='t1'\): a sampled endpoint pass left it out .*"
                                                 r"set predict_unmeasured: true"):
        run(rows)
    rows[1]["trajval_r_early_status"] = rows[1]["trajval_r_late_status"] = "ok"  # a null without the status
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='t1'\): field 'trajval_r_early' is missing"):
        run(rows, predict_unmeasured=True)


def test_a_group_without_a_measured_row_gets_the_measured_mean_and_says_so(caplog_loguru):
    rows = sampled_pool(rows=12, measured_every=2, groups="ab")  # every measured row is in group a
    for row in rows[1::2]:
        row["family"] = "b"
    out = run(rows, predict_unmeasured=True, group_key="family")
    measured_mean = np.mean([r["trajval_score"] for r in out if not r["trajval_predicted"]])
    assert all(r["trajval_score"] == pytest.approx(measured_mean) for r in out if r["family"] == "b")
    assert [r["trajval_predicted_fallback"] for r in out] == [r["family"] == "b" for r in out]  # flagged per row
    prediction = out[0]["trajval_score_provenance"]["prediction"]
    assert prediction["fallback_rows"] == 6 and prediction["fallback_groups"] == ["'b'"]
    assert prediction["predictor"] == "group_mean"
    assert "6 rows in 1 groups ('b') have no measured row" in caplog_loguru.text


def test_a_one_pass_prior_from_a_sampled_early_pass():
    rows = sampled_pool()
    for row in rows:
        del row["trajval_r_late"], row["trajval_r_late_status"]
    out = run(rows, prior="variance", predict_unmeasured=True, predict_features=["short"])
    measured = [r["trajval_r_early_status"] == "ok" for r in rows]
    for before, after, m in zip(rows, out, measured):
        assert after["trajval_predicted"] is (not m)
        if m:
            assert after["trajval_score"] == core.variance_score(before["trajval_r_early"])
        assert after["trajval_weight"] == core.variance_weight(np.array([after["trajval_score"]]))[0]


def test_prediction_settings_that_do_not_go_together():
    with pytest.raises(ValueError, match="use estimator 'paper' with predict_unmeasured"):
        TrajvalLearnabilityMapper(estimator="posterior", predict_unmeasured=True)
    with pytest.raises(ValueError, match="set predict_unmeasured: true"):
        TrajvalLearnabilityMapper(predict_features=["short"])
    with pytest.raises(ValueError, match="predict_coverage"):
        TrajvalLearnabilityMapper(predict_unmeasured=True, predict_coverage=1.0)


def test_a_weight_of_the_users_own_is_refused_unless_overwrite(caplog_loguru):
    """Issue 36, item 10: an input column the mapper would write stops the run naming it (as
    `trajval transfer-prior` refuses the same); with overwrite: true it is replaced and logged."""
    rows = [{"id": str(i), "trajval_r_early": 0.25, "trajval_r_late": 0.75, "trajval_weight": 7.0} for i in range(3)]
    with pytest.raises(TrajvalInputError, match="already has column.s. 'trajval_weight', which this mapper writes: "
                                                "set overwrite: true"):
        run(rows)
    out = run(rows, overwrite=True)
    expected = core.sampling_weight(core.learnability_score(np.full(3, 0.25), np.full(3, 0.75)))
    assert [r["trajval_weight"] for r in out] == expected.tolist()
    assert "replacing the pool's own column(s) trajval_weight" in caplog_loguru.text


def test_rescoring_a_pool_that_weights_were_carried_onto_drops_their_transfer_record(caplog_loguru):
    """A transfer target re-scored with overwrite: true kept `trajval_weight_provenance` (the
    carried weights' regime and scoring) beside its new weights, and `trajval transfer-prior`
    then read the new weights as the carried ones: their regime, and a floor at the old eps."""
    from trajval_ops.pools.transfer import transfer_prior

    carried = {"regime": "R", "source_score_provenance": {"alpha": 1.0, "eps": 0.05}}
    rows = [{"id": str(i), "prompt": f"q{i}", "trajval_r_early": 0.25, "trajval_r_late": 0.75,
             "trajval_weight": 0.3, "trajval_weight_provenance": carried} for i in range(3)]
    with pytest.raises(TrajvalInputError, match="'trajval_weight', 'trajval_weight_provenance', which this mapper"):
        run(rows)
    out = run(rows, overwrite=True, eps=0.01)
    assert all("trajval_weight_provenance" not in row for row in out)
    assert "trajval_weight_provenance" in caplog_loguru.text
    onward, report = transfer_prior(out, [{"prompt": "q0"}, {"prompt": "new"}], regime="B", unmatched="floor")
    assert report.fill_value == 0.01 and onward[1]["trajval_weight"] == 0.01


def _pass_provenance(**changes):
    """An endpoint pass's provenance as the mapper writes it (the measurement and the rest)."""
    return {"model": "base", "n": 16, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 512, "seed": 0,
            "verifier": {"name": "math", "fallback_last_number": False}, "template": "auto", "prompt_key": "prompt",
            "ground_truth_key": "reward_model.ground_truth", "engine": "vllm", "dtype": "bfloat16", **changes}


def _scored_rows(early, late):
    return [{"id": f"t{i}", "trajval_r_early": 0.25, "trajval_r_late": 0.75, "trajval_r_early_provenance": early,
             "trajval_r_late_provenance": late} for i in range(3)]


def test_passes_measured_otherwise_are_refused_naming_both_and_the_settings():
    """TrajVal's gain compares two pass rates: a late pass with room for longer answers (or another
    verifier, template or temperature) would show a gain the training did not make."""
    late = _pass_provenance(max_new_tokens=1024, verifier={"name": "math", "fallback_last_number": True})
    with pytest.raises(TrajvalInputError, match=(
            r"the passes behind trajval_r_early and trajval_r_late measured otherwise \(max_new_tokens 512 vs 1024; "
            r"verifier \{'name': 'math', 'fallback_last_number': False\} vs \{'name': 'math', "
            r"'fallback_last_number': True\}\), as their provenance records it: the trajval prior compares")):
        run(_scored_rows(_pass_provenance(), late))
    # another model, n, seed, engine or dtype is what the passes are for, or noise: scored
    alike = _pass_provenance(model="late", n=8, seed=1, engine="transformers", dtype="float32", extra="kept")
    out = run(_scored_rows(_pass_provenance(), alike))
    assert [row["trajval_score"] for row in out] == [0.375] * 3


def test_passes_rendering_the_pool_prompt_otherwise_are_refused():
    """template pool records its chat template's arguments only where set: a late pass thinking
    (no arguments: verl's default) against an early one not thinking measured otherwise."""
    early = _pass_provenance(template="pool", chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(TrajvalInputError, match=r"chat_template_kwargs \{'enable_thinking': False\} vs None"):
        run(_scored_rows(early, _pass_provenance(template="pool")))
    assert run(_scored_rows(early, dict(early)))[0]["trajval_score"] == 0.375


def test_windows_are_compared_and_a_pass_without_provenance_is_not():
    rows = [{"e0": 0.0, "e1": 0.5, "l0": 1.0, "l1": 0.5, "e0_provenance": _pass_provenance(),
             "e1_provenance": _pass_provenance(temperature=0.6), "l0_provenance": _pass_provenance()}]
    with pytest.raises(TrajvalInputError, match=r"the passes behind e0 and e1 measured otherwise \(temperature 1.0 "
                                                r"vs 0.6\)"):
        run(rows, early_window_keys=["e0", "e1"], late_window_keys=["l0", "l1"])
    rows[0]["e1_provenance"] = _pass_provenance()
    assert run(rows, early_window_keys=["e0", "e1"], late_window_keys=["l0", "l1"])[0]["trajval_r_late"] == 0.75


def test_a_late_pass_of_the_early_checkpoint_is_warned_of(caplog_loguru):
    """A recipe whose late pass names the early checkpoint (``early[0]`` copied into both) scores
    rollout noise as learning: said in a warning naming both passes and the checkpoint."""
    base = _pass_provenance(model_path="/models/base")
    run(_scored_rows(base, _pass_provenance(model_path="/models/base", seed=1)))
    assert ("the late pass trajval_r_late evaluated the checkpoint the early pass trajval_r_early evaluated "
            "(/models/base): the gain between them is rollout noise") in caplog_loguru.text
    run(_scored_rows(base, _pass_provenance(model_path="/probe/checkpoint-75", seed=1)))
    assert caplog_loguru.text.count("rollout noise, not learning") == 1


def _probe_checkpoint(ref, epoch, manifest):
    """A pass's provenance of a probe checkpoint, as resolve_model_reference records it (the
    manifest holds what the mapper reads of it: the probe's cost)."""
    manifest.write_text(json.dumps({"cost": {"completions": 10, "generated_tokens": 100, "wall_time_s": 1.0}}))
    return _pass_provenance(model=f"manifest:{manifest.parent}#{ref}", model_path=f"/probe/epoch-{epoch}", checkpoint={
        "name": f"epoch-{epoch}", "source": "manifest", "ref": ref, "window": ref.split("[")[0], "epoch": epoch,
        "step": 10 * epoch, "manifest": str(manifest)})


def test_passes_of_the_other_windows_checkpoints_are_refused(tmp_path):
    """Swapped references (``late[0]`` behind the early pass) or an early checkpoint trained after
    a late one reverse the gain: tasks the probe learned would go to the floor. Refused, naming
    the pass and what its provenance records."""
    probe = tmp_path / "manifest.json"
    with pytest.raises(TrajvalInputError, match=r"the early pass trajval_r_early evaluated the probe's late\[0\] "
                                                r"\(epoch 20\)"):
        run(_scored_rows(_probe_checkpoint("late[0]", 20, probe), _probe_checkpoint("early[0]", 0, probe)))
    with pytest.raises(TrajvalInputError, match=r"the early pass trajval_r_early evaluated the probe at epoch 5, "
                                                r"after the late pass trajval_r_late \(epoch 3\)"):
        run(_scored_rows(_probe_checkpoint("epoch-5", 5, probe), _probe_checkpoint("epoch-3", 3, probe)))
    # two probes' checkpoints are not ordered against each other, and the right order is scored
    (tmp_path / "other").mkdir()
    other = _probe_checkpoint("epoch-3", 3, tmp_path / "other" / "manifest.json")
    assert run(_scored_rows(_probe_checkpoint("epoch-5", 5, probe), other))[0]["trajval_score"] == 0.375
    assert run(_scored_rows(_probe_checkpoint("early[0]", 0, probe), _probe_checkpoint("late[0]", 20, probe)))[0][
        "trajval_score"] == 0.375


def test_one_checkpoint_twice_in_a_window_is_warned_of(tmp_path, caplog_loguru):
    probe = tmp_path / "manifest.json"
    rows = [{"e0": 0.0, "l0": 1.0, "l1": 0.5, "e0_provenance": _probe_checkpoint("early[0]", 0, probe),
             "l0_provenance": _probe_checkpoint("late[0]", 19, probe),
             "l1_provenance": _probe_checkpoint("late[0]", 19, probe)}]
    run(rows, early_window_keys=["e0"], late_window_keys=["l0", "l1"])
    assert ("the passes l0 and l1 of the late window evaluated one checkpoint (/probe/epoch-19): the window's mean "
            "counts it twice") in caplog_loguru.text


def test_a_pool_whose_passes_record_no_cost_is_not_said_to_cost_nothing(caplog_loguru):
    rows = [{"id": str(i), "trajval_r_early": 0.25, "trajval_r_late": 0.75} for i in range(3)]
    out = run(rows)
    said = caplog_loguru.text
    assert "prior cost at least 0 completions" in said and "6 pass rows record no cost" in said
    stages = out[0]["trajval_score_provenance"]["prior_cost"]
    assert sum(stage.get("rows_without_cost", 0) for stage in stages["stages"].values()) == 6


def test_a_priors_own_setting_reaches_it_and_another_priors_is_refused_naming_whose():
    """Issue 55: the mapper named TrajVal's and band-pass's settings itself, so a prior's own
    setting could not reach it and ``prior: variance`` with ``alpha`` dropped alpha silently. Its
    signature is generated from every registered prior's settings, each unset (None) by default
    as Data-Juicer's parser fills them in; the prior named gets those given."""
    import inspect

    from trajval_ops.ops.dj.error_exit import SettingError
    from trajval_ops.priors import PRIORS, setting_names

    parameters = inspect.signature(TrajvalLearnabilityMapper.__init__).parameters
    assert {name for cls in PRIORS.values() for name in setting_names(cls)} <= set(parameters)
    assert parameters["alpha"].default is None and parameters["threshold"].default is None
    limr = TrajvalLearnabilityMapper(prior="limr", threshold=0.4, cut=True, alpha=None)
    assert limr.prior.spec() == {"prior": "limr", "eps": 0.05, "threshold": 0.4, "cut": True}
    assert TrajvalLearnabilityMapper(prior="variance", eps=0.1, band_low=None).prior.spec() == {
        "prior": "variance", "eps": 0.1}
    with pytest.raises(SettingError, match="trajval_learnability_mapper: alpha is a setting of the trajval prior, not "
                                           r"of the variance prior written here \(its settings: eps\)"):
        TrajvalLearnabilityMapper(prior="variance", alpha=0.3)
    with pytest.raises(SettingError, match="band_high is a setting of the bandpass prior; threshold is a setting of "
                                           "the limr prior, not of the trajval prior"):
        TrajvalLearnabilityMapper(threshold=0.5, band_high=0.9)
    with pytest.raises(SettingError, match=r"Unknown parameter 'treshold' \(did you mean: threshold\?\)"):
        TrajvalLearnabilityMapper(prior="limr", treshold=0.5)


def test_limr_reads_the_windows_and_the_checkpoints_between_in_training_order():
    from trajval_ops.priors.limr import lim_scores

    rng = np.random.default_rng(4)
    passes = rng.integers(0, 17, size=(30, 4)) / 16
    rows = [{"id": str(i), "e": p[0], "c1": p[1], "c2": p[2], "l": p[3]} for i, p in enumerate(passes)]
    out = run(rows, prior="limr", r_early_key="e", r_late_key="l", checkpoint_keys=["c1", "c2"])
    assert [r["trajval_score"] for r in out] == lim_scores(passes).tolist()
    assert [r["trajval_weight"] for r in out] == np.maximum(lim_scores(passes), 0.05).tolist()
    provenance = out[0]["trajval_score_provenance"]
    assert provenance["score"] == "limr" and provenance["checkpoint_source"] == ["c1", "c2"]
    cut = run(rows, prior="limr", cut=True, r_early_key="e", r_late_key="l", checkpoint_keys=["c1", "c2"])
    assert [r["trajval_weight"] for r in cut] == (lim_scores(passes) > 0.6).astype(float).tolist()
    with pytest.raises(ValueError, match="checkpoint_keys are read by a prior that reads the whole trajectory"):
        TrajvalLearnabilityMapper(checkpoint_keys=["c1"])
