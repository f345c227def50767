"""Evaluation-curve metrics (paper appendix) on hand-made curves."""

import math

import numpy as np
import pytest

from trajval_ops.analysis import curves as cv

BASELINE = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.6, 0.6]
FASTER = [0.0, 0.2, 0.4, 0.6, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7]


def test_sliding_window_mean_hand_and_numpy():
    assert cv.sliding_window_mean([1, 2, 3, 4, 5, 6], 5).tolist() == pytest.approx([3.0, 4.0])
    rng = np.random.default_rng(0)
    curve = rng.uniform(0, 1, 40)
    expected = np.convolve(curve, np.ones(5) / 5, mode="valid")
    assert cv.sliding_window_mean(curve) == pytest.approx(expected)


def test_short_curve_uses_one_window():
    assert cv.sliding_window_mean([0.2, 0.4, 0.6]).tolist() == pytest.approx([0.4])


def test_best_acc_is_peak_of_window_mean_not_raw_peak():
    curve = [0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 0.1]
    # windows: 0.30, 0.46, 0.44
    assert cv.best_acc(curve) == pytest.approx(0.46)
    assert cv.best_acc(curve, window=1) == pytest.approx(0.9)


def test_auc_is_mean_over_steps_and_seeds_are_averaged_first():
    assert cv.auc([0.2, 0.4, 0.9]) == pytest.approx(0.5)
    seeds = np.array([[0.2, 0.4, 0.6, 0.8, 1.0, 0.0], [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]])
    assert cv.auc(seeds) == pytest.approx(seeds.mean())
    assert cv.best_acc(seeds) == pytest.approx(cv.best_acc(seeds.mean(axis=0)))


def test_steps_to_baseline_hand_value():
    # baseline windows: .20 .30 .40 .48 .54 .58 -> T = 0.58, first at window 6 = eval 10
    # method windows:   .38 .52 .62 ...        -> reaches 0.58 at window 3 = eval 7 -> 70 %
    out = cv.steps_to_baseline(FASTER, BASELINE)
    assert out["target"] == pytest.approx(0.58)
    assert out["s_base"] == 10 and out["s_comp"] == 7
    assert out["s2b"] == pytest.approx(70.0)
    steps = 12 * np.arange(1, 11)
    out = cv.steps_to_baseline(FASTER, BASELINE, steps=steps)
    assert (out["s_base"], out["s_comp"]) == (120, 84) and out["s2b"] == pytest.approx(70.0)


def test_baseline_against_itself_is_100_percent_and_never_reaching_is_inf():
    assert cv.steps_to_baseline(BASELINE, BASELINE)["s2b"] == pytest.approx(100.0)
    out = cv.steps_to_baseline(np.full(10, 0.1), BASELINE)
    assert out["s_comp"] is None and out["s2b"] == float("inf")


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="length"):
        cv.steps_to_baseline([0.1] * 5, [0.1] * 6)
    with pytest.raises(ValueError, match="non-finite"):
        cv.auc([0.1, float("nan")])
    with pytest.raises(ValueError, match="increasing"):
        cv.first_step_reaching([0.1, 0.2], 0.1, steps=[2, 1], window=1)


def test_macro_average_best_acc_is_peak_of_averaged_curve():
    # Two benchmarks peaking at different times: peak of the mean curve < mean of the peaks.
    a = [0.0] * 5 + [1.0] * 5
    b = [1.0] * 5 + [0.0] * 5
    out = cv.curve_metrics({"a": a, "b": b})
    assert out["a"]["best_acc"] == 1.0 and out["b"]["best_acc"] == 1.0
    assert out["avg"]["best_acc"] == pytest.approx(0.5)
    assert out["avg"]["auc"] == pytest.approx(0.5)


def test_curve_metrics_with_baseline_and_seeds():
    method = {"math500": np.stack([FASTER, FASTER]), "aime": np.array(FASTER) / 2}
    baseline = {"math500": BASELINE, "aime": np.array(BASELINE) / 2}
    out = cv.curve_metrics(method, baseline)
    assert out["math500"]["s2b"] == pytest.approx(70.0)
    assert out["aime"]["s2b"] == pytest.approx(70.0)
    # macro curve = 0.75 * curve, same timing -> same S2B
    assert out["avg"]["s2b"] == pytest.approx(70.0)
    assert out["avg"]["best_acc"] == pytest.approx(0.75 * cv.best_acc(FASTER))
    with pytest.raises(ValueError, match="differ"):
        cv.curve_metrics(method, {"math500": BASELINE})


def test_curve_metrics_tool(tmp_path, capsys):
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "curve_metrics", Path(__file__).resolve().parents[1] / "tools" / "curve_metrics.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    (tmp_path / "m.json").write_text(json.dumps({"math500": [FASTER, FASTER], "aime": FASTER}))
    (tmp_path / "b.json").write_text(json.dumps({"math500": BASELINE, "aime": BASELINE}))
    assert tool.main(["--method", str(tmp_path / "m.json"), "--baseline", str(tmp_path / "b.json"),
                      "--eval-every", "12", "--out", str(tmp_path / "o.json")]) == 0
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["avg"]["s2b"] == pytest.approx(70.0) and out["avg"]["s_base"] == 120
    assert "avg" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert tool.main(["--method", str(tmp_path / "bad.json")]) == 2
    # curves that begin with the base model at step 0 (as trajval validate writes them) read as the
    # library reads them with their real steps: S2B 50, not 57.1 one interval late
    (tmp_path / "m0.json").write_text(json.dumps({"b": [0.30, 0.36, 0.40, 0.42, 0.43, 0.43, 0.43]}))
    (tmp_path / "b0.json").write_text(json.dumps({"b": [0.30, 0.32, 0.34, 0.36, 0.38, 0.40, 0.42]}))
    options = ["--method", str(tmp_path / "m0.json"), "--baseline", str(tmp_path / "b0.json"), "--eval-every", "15",
               "--window", "1", "--out", str(tmp_path / "o0.json")]
    assert tool.main(options + ["--first-step", "0"]) == 0
    assert json.loads((tmp_path / "o0.json").read_text())["b"]["s2b"] == pytest.approx(50.0) == cv.steps_to_baseline(
        [0.30, 0.36, 0.40, 0.42, 0.43, 0.43, 0.43], [0.30, 0.32, 0.34, 0.36, 0.38, 0.40, 0.42],
        steps=np.arange(0, 91, 15), window=1)["s2b"]
    assert tool.main(options) == 0  # the paper's indexing: the first evaluation at step 15
    assert json.loads((tmp_path / "o0.json").read_text())["b"]["s2b"] == pytest.approx(400 / 7)
    assert tool.main(options + ["--first-step", "-1"]) == 2


def test_evaluations_at_step_zero_are_accepted():
    from trajval_ops.analysis import curves

    base = [0.1, 0.2, 0.3, 0.4]
    method = [0.1, 0.4, 0.4, 0.4]
    out = curves.steps_to_baseline(method, base, steps=[0, 10, 20, 30], window=1)
    assert out["s_base"] == 30 and out["s_comp"] == 10 and out["s2b"] == pytest.approx(100 * 10 / 30)
    flat = curves.steps_to_baseline([0.5, 0.5], [0.5, 0.4], steps=[0, 10], window=1)
    assert flat["s_base"] == 0 and math.isnan(flat["s2b"])  # baseline best at the base model
    with pytest.raises(ValueError, match="non-negative"):
        curves.steps_to_baseline(method, base, steps=[-1, 10, 20, 30])


def test_auc_at_budgets_reads_each_curve_at_the_same_spend():
    from trajval_ops.analysis.curves import auc, auc_at_budgets

    base = np.array([0.1, 0.2, 0.3, 0.4])
    base_x = np.array([0, 100, 200, 300])
    assert auc_at_budgets(base, base_x, base_x) == pytest.approx(auc(base))  # the baseline: its own AUC
    # an arm that spends twice the completions per step for the same curve: at 100 and 200
    # completions it stands where the baseline stood at steps 0.5 and 1
    arm_x = 2 * base_x
    assert auc_at_budgets(base, arm_x, base_x) == pytest.approx(np.mean([0.1, 0.15, 0.2, 0.25]))
    # seeds averaged first
    assert auc_at_budgets(np.stack([base - 0.1, base + 0.1]), base_x, base_x) == pytest.approx(auc(base))
    with pytest.raises(ValueError, match="outside the curve's completions"):
        auc_at_budgets(base, base_x, [0, 400])
    with pytest.raises(ValueError, match="increasing"):
        auc_at_budgets(base, [0, 100, 100, 300], base_x)


def test_cli_names_a_folder_given_as_a_curve_file(tmp_path, capsys):
    from trajval_ops.cli import curve_metrics

    assert curve_metrics.main(["--method", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("curve_metrics: error: ") and "Is a directory" in err and "Traceback" not in err


def test_a_curve_file_with_a_byte_order_mark_reads_as_without(tmp_path, capsys):
    import json

    from trajval_ops.cli import curve_metrics

    (tmp_path / "m.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"math500": FASTER}).encode())
    assert curve_metrics.main(["--method", str(tmp_path / "m.json"), "--out", str(tmp_path / "o.json")]) == 0, \
        capsys.readouterr().err
    assert json.loads((tmp_path / "o.json").read_text())["math500"]["best_acc"] == cv.best_acc(FASTER)
