"""``trajval verdict``: runs in trainers' own formats, read and compared with validate's figures.

Each format's runs are written by that trainer's own code where it is installed (verl's
``Tracking`` file backend, torch's TensorBoard ``SummaryWriter``, TRL's ``GRPOTrainer`` in the
slow suite), and every figure is checked against numpy by hand: AUC differences, their
percentile bootstrap intervals (2,000 resamples, seeded 0, arm then baseline drawn), the
break-even runs.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from trajval_ops.cli import verdict as cli

VERL_KEY = "val-core/math_dapo/acc/mean@4"


# ----------------------------------------------------------------------------- by hand


def auc_difference_by_hand(arm: np.ndarray, base: np.ndarray) -> tuple[float, list[float]]:
    """AUC (the mean over steps of the seed-mean curve) of ``arm`` minus ``base``, and its 95%
    percentile interval over 2,000 resamples of seeds (numpy's default_rng(0))."""
    difference = arm.mean(axis=0).mean() - base.mean(axis=0).mean()
    rng = np.random.default_rng(0)
    values = []
    for _ in range(2000):
        a = arm[rng.integers(0, len(arm), len(arm))]
        b = base[rng.integers(0, len(base), len(base))]
        values.append(a.mean(axis=0).mean() - b.mean(axis=0).mean())
    return difference, [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def first_reach_by_hand(curve: np.ndarray, target: float) -> int | None:
    """Index (from 0) of the evaluation that ends the first 5-evaluation window whose mean reaches
    ``target``."""
    for end in range(4, len(curve)):
        if curve[end - 4:end + 1].mean() >= target - 1e-12:
            return end
    return None


def curves_of(seed_values: dict) -> np.ndarray:
    return np.array([seed_values[k] for k in sorted(seed_values)])


def verdict(*argv: str) -> int:
    return cli.main(list(argv), prog="trajval verdict")


# ----------------------------------------------------------------------------- fixtures

STEPS = list(range(0, 21, 2))  # evaluations every 2 steps, the base model at step 0


def accuracy(arm: str, seed: int, step: int) -> float:
    """A learning curve per arm and seed: trajval a little faster, seeds a little apart."""
    lift = {"uniform": 0.0, "trajval": 0.03}[arm]
    return round(0.2 + 0.015 * step * (1 + lift * 10) + 0.01 * ((seed * 7 + step) % 3), 6)


def scored_pool(path: Path, completions: int) -> Path:
    """A weighted pool as the learnability mapper writes it: its provenance prices the prior."""
    import pyarrow as pa

    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import write_table

    rows = [{"id": f"t{i}", "prompt": f"q{i}", "trajval_r_early": 0.125 * (i % 8), "trajval_r_late": 0.9,
             "trajval_r_early_provenance": {"cost": {"completions": completions, "generated_tokens": 3}},
             "trajval_r_late_provenance": {"cost": {"completions": completions, "generated_tokens": 5}}}
            for i in range(10)]
    write_table(TrajvalLearnabilityMapper(prior="trajval").score_pool(pa.Table.from_pylist(rows)), path)
    return path


def verl_config(folder: Path, pool: Path | None, batch: int = 4, n: int = 2) -> None:
    """The Hydra config verl's main_ppo saves in its run folder (the keys the verdict reads)."""
    import yaml

    data = {"train_files": str(pool) if pool else "pool.parquet", "train_batch_size": batch}
    if pool:
        data["custom_cls"] = {"path": "pkg://trajval_ops.samplers.verl_dataset", "name": "TrajvalVerlDataset"}
    config = {"data": data, "actor_rollout_ref": {"rollout": {"n": n}}, "trainer": {"total_training_steps": 20}}
    (folder / ".hydra").mkdir(parents=True, exist_ok=True)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))


# ----------------------------------------------------------------------------- verl


def test_verl_logs_written_by_verls_own_tracking_give_the_figures_by_hand(tmp_path, monkeypatch, capsys):
    tracking = pytest.importorskip("verl.utils.tracking", reason="verl is installed by TRAJVAL_WITH_TRAINERS=1")
    pool = scored_pool(tmp_path / "weighted.jsonl", completions=16)  # the prior: 10 rows x 16 x 2 passes
    for arm in ("uniform", "trajval"):
        for seed in range(3):
            folder = tmp_path / "runs" / f"{arm}-seed{seed}"
            folder.mkdir(parents=True)
            verl_config(folder, pool if arm == "trajval" else None)
            monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(folder / "metrics.jsonl"))
            tracker = tracking.Tracking("trajval", f"{arm}-{seed}", default_backend=["file"])
            tracker.log({VERL_KEY: accuracy(arm, seed, 0), "val-aux/math_dapo/acc/std@4": 0.1}, step=0)
            for step in range(1, 21):  # training metrics every step, validation every 2 (test_freq)
                metrics = {"critic/score/mean": 0.1 * step, "training/global_step": step}
                if step % 2 == 0:
                    metrics[VERL_KEY] = accuracy(arm, seed, step)
                tracker.log(metrics, step=step)
            tracker.logger["file"].finish()
    code = verdict("--run", f"uniform={tmp_path}/runs/uniform-seed*/metrics.jsonl",
                   "--run", f"trajval={tmp_path}/runs/trajval-seed*/metrics.jsonl", "--out", str(tmp_path / "out"))
    assert code == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["metric"] == [VERL_KEY] and result["steps"] == STEPS
    assert result["runs"]["trajval"][0]["format"] == "verl"
    arm = curves_of({s: [accuracy("trajval", s, t) for t in STEPS] for s in range(3)})
    base = curves_of({s: [accuracy("uniform", s, t) for t in STEPS] for s in range(3)})
    difference, interval = auc_difference_by_hand(arm, base)
    row = result["training"]["trajval"]
    assert row["auc_minus_uniform"] == pytest.approx(difference, abs=1e-15)
    assert row["auc_minus_uniform_ci95"] == pytest.approx(interval, abs=1e-15)
    assert row["per_seed_auc"] == pytest.approx(arm.mean(axis=1).tolist(), abs=1e-15)
    # the prior and its price from the verl config saved beside the runs: its pool's provenance
    assert result["priors"]["trajval"]["name"] == "trajval" and result["priors"]["trajval"]["completions"] == 320
    assert result["priors"]["uniform"]["completions"] == 0
    assert result["priors"]["uniform"]["source"] == ("from the verl config saved beside the runs "
                                                     "(.hydra/config.yaml): no weighted pool")
    # completions per step: train_batch_size 4 x rollout.n 2 = 8; the cost reads them
    assert row["completions"] == 8 * 20
    target = np.convolve(base.mean(axis=0), np.ones(5) / 5, mode="valid").max()  # uniform's Best Acc
    reach_base = first_reach_by_hand(base.mean(axis=0), target)
    reach_arm = first_reach_by_hand(arm.mean(axis=0), target)
    saved = (STEPS[reach_base] - STEPS[reach_arm]) * 8
    cost = result["cost"]["arms"]["trajval"]
    assert saved > 0 and cost["net_saved"] == saved - 320 and cost["break_even_runs"] == pytest.approx(320 / saved)
    assert result["verdicts"]["trajval_vs_uniform_auc"].startswith("better than uniform")
    assert "pays_for_itself" in " ".join(result["verdicts"])
    out = capsys.readouterr().out
    assert "trajval_vs_uniform_auc: better than uniform" in out and "prior of trajval: trajval, 320 completions" in out


def test_the_verl_format_by_a_hand_checked_fixture(tmp_path):
    """verl's FileLogger writes ``{"step": s, "data": {...}}`` per Tracking.log call (orjson, no
    spaces); a DAPO run's completions per step are its generation batches x gen_batch_size x n."""
    from trajval_ops.analysis.run_logs import read_run

    log = tmp_path / "metrics.jsonl"
    log.write_text(f'{{"step":0,"data":{{"{VERL_KEY}":0.25,"val-aux/num_turns/min":1}}}}\n'
                   '{"step":1,"data":{"critic/score/mean":0.5,"train/num_gen_batches":2,"timing_s/gen":1.5}}\n'
                   f'{{"step":2,"data":{{"critic/score/mean":0.6,"train/num_gen_batches":3,"{VERL_KEY}":0.375}}}}\n')
    run = read_run(log)
    assert run.format == "verl" and run.metrics[VERL_KEY] == {0: 0.25, 2: 0.375} and run.last_step == 2
    assert run.heldout_keys() == [VERL_KEY] and run.completions == {} and run.config is None
    verl_config(tmp_path, None, batch=8, n=4)
    assert read_run(log).completions == {1: 32.0, 2: 32.0}
    import yaml

    config = yaml.safe_load((tmp_path / ".hydra" / "config.yaml").read_text())
    config["data"]["gen_batch_size"] = 16
    config["algorithm"] = {"filter_groups": {"enable": True}}
    (tmp_path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    assert read_run(log).completions == {1: 2 * 16 * 4.0, 2: 3 * 16 * 4.0}
    assert read_run(log).planned_steps == 20


# ----------------------------------------------------------------------------- TensorBoard


def test_tensorboard_events_from_a_real_writer(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="the runs extra (make install) brings tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    key = "eval/rewards/accuracy/mean"  # TRL's eval_ keys as its TensorBoard callback writes them
    values = {}
    for arm in ("uniform", "trajval"):
        for seed in range(2):
            writer = SummaryWriter(str(tmp_path / arm / f"seed{seed}"))
            for step in STEPS:
                writer.add_scalar(key, accuracy(arm, seed, step), step)
                writer.add_scalar("train/loss", 1.0 / (step + 1), step)
            writer.close()
            values.setdefault(arm, {})[seed] = [accuracy(arm, seed, t) for t in STEPS]
    assert verdict("--run", f"uniform={tmp_path}/uniform/seed*", "--run", f"trajval={tmp_path}/trajval/seed*",
                   "--out", str(tmp_path / "out")) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["metric"] == [key] and {run["format"] for run in result["runs"]["trajval"]} == {"tensorboard"}
    arm, base = curves_of(values["trajval"]), curves_of(values["uniform"])
    difference, interval = auc_difference_by_hand(arm, base)
    row = result["training"]["trajval"]
    # TensorBoard stores float32: compare at its precision
    assert row["auc_minus_uniform"] == pytest.approx(difference, abs=1e-6)
    assert row["auc_minus_uniform_ci95"] == pytest.approx(interval, abs=1e-6)
    assert "no AUC at equal completions" in " ".join(result["notes"]) and "cost" not in result


# ----------------------------------------------------------------------------- CSV / JSON lines


def write_csv(path: Path, arm: str, seed: int, steps=STEPS, completions=True, key="heldout_acc") -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", key, "completions"])
        for step in range(0, max(steps) + 1):
            writer.writerow([step, accuracy(arm, seed, step) if step in steps else "",
                             (24 + 8 * (step % 2)) if completions and step else ""])
    return path


def test_a_csv_with_completions_and_a_priced_pool_gives_the_break_even_by_hand(tmp_path, capsys):
    for arm in ("uniform", "trajval"):
        for seed in range(3):
            write_csv(tmp_path / f"{arm}-{seed}.csv", arm, seed)
    pool = scored_pool(tmp_path / "weighted.jsonl", completions=100)
    assert verdict("--run", f"uniform={tmp_path}/uniform-*.csv", "--run", f"trajval={tmp_path}/trajval-*.csv",
                   "--pool", f"trajval={pool}", "--out", str(tmp_path / "out")) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    arm = curves_of({s: [accuracy("trajval", s, t) for t in STEPS] for s in range(3)})
    base = curves_of({s: [accuracy("uniform", s, t) for t in STEPS] for s in range(3)})
    difference, interval = auc_difference_by_hand(arm, base)
    row = result["training"]["trajval"]
    assert row["auc_minus_uniform"] == pytest.approx(difference, abs=1e-15)
    assert row["auc_minus_uniform_ci95"] == pytest.approx(interval, abs=1e-15)
    # cumulative completions: 32 on odd steps, 24 on even ones (step 0 is the base model)
    cumulative = [sum(24 + 8 * (s % 2) for s in range(1, t + 1)) for t in STEPS]
    assert row["completions"] == cumulative[-1] == 560
    # equal completions: both arms generated the same per step, so it is the AUC difference
    assert row["auc_completions_minus_uniform"] == pytest.approx(difference, abs=1e-12)
    smoothed = np.convolve(base.mean(axis=0), np.ones(5) / 5, mode="valid")
    reach_base = first_reach_by_hand(base.mean(axis=0), smoothed.max())
    reach_arm = first_reach_by_hand(arm.mean(axis=0), smoothed.max())
    saved = cumulative[reach_base] - cumulative[reach_arm]
    cost = result["cost"]["arms"]["trajval"]
    assert cost["prior_completions"] == 2000 and cost["net_saved"] == saved - 2000
    assert cost["break_even_runs"] == pytest.approx(2000 / saved)
    assert "completions_to_uniform_best" in cost
    assert result["verdicts"]["trajval_pays_for_itself"].endswith(
        f"breaks even after {2000 / saved:.3g} runs reusing it (95% CI [{cost['break_even_runs_ci95'][0]:.3g}, "
        f"{cost['break_even_runs_ci95'][1]:.3g}])" if math.isfinite(cost["break_even_runs_ci95"][1]) else
        "it may never break even)")
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count("<img") == 2 and "trajval_vs_uniform_auc" in html
    assert sorted(p.name for p in (tmp_path / "out" / "figures").iterdir()) == [
        "held_out_accuracy_per_arm.png", "held_out_accuracy_per_arm_against_completions.png"]


def test_a_pool_whose_passes_record_no_cost_gives_no_break_even(tmp_path, capsys):
    """A pass without a recorded cost (an older pool, weights from elsewhere) leaves the prior's price
    unknown: read as 0 (or as the passes that do record one), the prior "paid for itself"."""
    import pyarrow as pa

    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.pools.io import write_table

    for arm in ("uniform", "trajval"):
        for seed in range(3):
            write_csv(tmp_path / f"{arm}-{seed}.csv", arm, seed)
    rows = [{"id": f"t{i}", "prompt": f"q{i}", "trajval_r_early": 0.125 * (i % 8), "trajval_r_late": 0.9,
             "trajval_r_early_provenance": {"model": "m"},
             "trajval_r_late_provenance": {"cost": {"completions": 4, "generated_tokens": 5}}} for i in range(10)]
    pool = tmp_path / "unpriced.jsonl"
    write_table(TrajvalLearnabilityMapper(prior="trajval").score_pool(pa.Table.from_pylist(rows)), pool)
    assert verdict("--run", f"uniform={tmp_path}/uniform-*.csv", "--run", f"trajval={tmp_path}/trajval-*.csv",
                   "--pool", f"trajval={pool}", "--out", str(tmp_path / "out")) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    prior = result["priors"]["trajval"]
    assert prior["completions"] is None and "10 pass rows record no cost" in prior["source"]
    assert "at least 40 completions" in prior["source"]
    assert "trajval" not in result["cost"]["arms"] and "trajval_pays_for_itself" not in result["verdicts"]
    assert "trajval: no break-even: its prior's price is unknown; its pool records no cost" in capsys.readouterr().out


def test_several_metrics_are_macro_averaged_and_a_jsonl_table_is_read(tmp_path):
    from trajval_ops.experiment.verdict import compare
    from trajval_ops.analysis.run_logs import read_run

    runs = {}
    for arm in ("uniform", "trajval"):
        for seed in range(2):
            path = tmp_path / f"{arm}-{seed}.jsonl"
            path.write_text("".join(json.dumps({"step": t, "math_acc": accuracy(arm, seed, t),
                                                "logic_acc": accuracy(arm, seed + 5, t) / 2}) + "\n" for t in STEPS))
            runs.setdefault(arm, []).append(read_run(path))
    result, _ = compare(runs, metrics=["math_acc", "logic_acc"])
    assert result["metric"] == ["math_acc", "logic_acc"] and runs["trajval"][0].format == "table"
    macro = {arm: curves_of({s: [(accuracy(arm, s, t) + accuracy(arm, s + 5, t) / 2) / 2 for t in STEPS]
                             for s in range(2)}) for arm in ("uniform", "trajval")}
    assert result["training"]["trajval"]["auc"] == pytest.approx(macro["trajval"].mean(), abs=1e-15)
    difference, interval = auc_difference_by_hand(macro["trajval"], macro["uniform"])
    assert result["training"]["trajval"]["auc_minus_uniform_ci95"] == pytest.approx(interval, abs=1e-15)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_table_log_beginning_with_a_byte_order_mark_reads_as_without(tmp_path, suffix):
    """A CSV or JSON-lines log saved by Excel or a Windows tool begins with UTF-8's byte-order
    mark: its CSV header read '\\ufeffstep' (no 'step' column), its first JSON line 'Unexpected
    UTF-8 BOM', and the JSON-lines log was not even recognised as a table."""
    from trajval_ops.analysis.run_logs import read_run

    plain = tmp_path / f"plain{suffix}"
    if suffix == ".csv":
        write_csv(plain, "trajval", 0)
    else:
        plain.write_text("".join(json.dumps({"step": t, "heldout_acc": accuracy("trajval", 0, t)}) + "\n"
                                 for t in STEPS))
    marked = tmp_path / f"marked{suffix}"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    expected = read_run(plain)
    run = read_run(marked)
    assert (run.format, run.metrics, run.last_step) == (expected.format, expected.metrics, expected.last_step)
    assert run.metrics["heldout_acc"][STEPS[-1]] == accuracy("trajval", 0, STEPS[-1])


@pytest.mark.parametrize("name, text, shown", [
    ("log.csv", "step,heldout_acc\n0,0.5\nnan,0.6\n", "nan"),
    ("log.jsonl", '{"step": 0, "heldout_acc": 0.5}\n{"step": Infinity, "heldout_acc": 0.6}\n', "inf"),
    ("log.jsonl", '{"step": 0, "heldout_acc": 0.5}\n{"step": -Infinity, "heldout_acc": 0.6}\n', "-inf")])
def test_a_step_that_is_nan_or_infinite_is_an_error_naming_its_line(tmp_path, name, text, shown, capsys):
    """A step NaN or infinite (a CSV cell 'nan', JSON's NaN / Infinity) ended trajval verdict with
    int()'s bare ValueError / OverflowError, exit 1."""
    log = tmp_path / name
    log.write_text(text)
    assert verdict("--run", f"uniform={log}", "--run", f"trajval={log}", "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    where = "row 3" if name.endswith(".csv") else "line 2"  # a CSV's first row is its header
    assert f"{log}, {where}: step {shown} is not a whole number >= 0" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- TRL


def trainer_state(global_step: int, max_steps: int, evaluations: dict[int, float]) -> dict:
    """A trainer_state.json as transformers' Trainer writes it (log_history: a training entry per
    logging step, an eval_ entry per evaluation)."""
    history = []
    for step in range(1, global_step + 1):
        history.append({"epoch": step / max_steps, "loss": 0.1, "reward": 0.2, "step": step})
        if step in evaluations:
            history.append({"epoch": step / max_steps, "eval_reward": evaluations[step],
                            "eval_rewards/accuracy_reward/mean": evaluations[step], "eval_loss": 0.3,
                            "eval_runtime": 1.0, "step": step})
    return {"global_step": global_step, "max_steps": max_steps, "log_history": history, "logging_steps": 1}


def test_a_trl_output_folder_reads_its_state_with_the_most_steps(tmp_path):
    from trajval_ops.analysis.run_logs import read_run

    folder = tmp_path / "run"
    (folder / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoint-10").mkdir()
    (folder / "checkpoint-2" / "trainer_state.json").write_text(json.dumps(trainer_state(2, 10, {2: 0.1})))
    (folder / "checkpoint-10" / "trainer_state.json").write_text(json.dumps(trainer_state(10, 10, {2: 0.1, 10: 0.4})))
    run = read_run(folder)  # a run still training: only checkpoints, the last one (10 sorts after 2 as a number)
    assert run.format == "trl" and run.path.endswith("checkpoint-10/trainer_state.json")
    assert run.metrics["eval_rewards/accuracy_reward/mean"] == {2: 0.1, 10: 0.4}
    assert run.heldout_keys() == ["eval_rewards/accuracy_reward/mean"] and run.planned_steps == 10
    (folder / "trainer_state.json").write_text(json.dumps(trainer_state(10, 10, {2: 0.1, 10: 0.5})))
    assert read_run(folder).path == str(folder / "trainer_state.json")  # the finished run's own, on a tie


# ----------------------------------------------------------------------------- honest edges


def test_runs_with_other_steps_are_cut_to_the_shared_ones_and_an_early_stop_is_named(tmp_path, capsys):
    write_csv(tmp_path / "uniform-0.csv", "uniform", 0)
    write_csv(tmp_path / "uniform-1.csv", "uniform", 1, steps=list(range(0, 21, 4)))  # evaluated every 4
    write_csv(tmp_path / "trajval-0.csv", "trajval", 0)
    write_csv(tmp_path / "trajval-1.csv", "trajval", 1, steps=STEPS[:-2])  # still training: stops at step 16
    assert verdict("--run", f"uniform={tmp_path}/uniform-*.csv", "--run", f"trajval={tmp_path}/trajval-*.csv",
                   "--out", str(tmp_path / "out")) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["steps"] == [0, 4, 8, 12, 16]
    assert result["cut"] == {str(tmp_path / "uniform-0.csv"): [2, 6, 10, 14, 18, 20],
                             str(tmp_path / "uniform-1.csv"): [20],
                             str(tmp_path / "trajval-0.csv"): [2, 6, 10, 14, 18, 20],
                             str(tmp_path / "trajval-1.csv"): [2, 6, 10, 14]}
    assert list(result["stopped_early"]) == [str(tmp_path / "trajval-1.csv")]
    assert "steps kept: 5 evaluations, 0, 4, 8, 12, 16" in out
    assert f"stopped early: {tmp_path / 'trajval-1.csv'}: last evaluated at step 16, other runs at step 20" in out
    kept = [0, 4, 8, 12, 16]
    arm = curves_of({s: [accuracy("trajval", s, t) for t in kept] for s in range(2)})
    base = curves_of({s: [accuracy("uniform", s, t) for t in kept] for s in range(2)})
    assert result["training"]["trajval"]["auc_minus_uniform"] == pytest.approx(
        auc_difference_by_hand(arm, base)[0], abs=1e-15)


def test_one_seed_gives_no_interval_and_the_verdict_is_not_judged(tmp_path, capsys):
    write_csv(tmp_path / "uniform.csv", "uniform", 0)
    write_csv(tmp_path / "trajval.csv", "trajval", 0)
    pool = scored_pool(tmp_path / "weighted.jsonl", completions=100)
    assert verdict("--run", f"uniform={tmp_path}/uniform.csv", "--run", f"trajval={tmp_path}/trajval.csv",
                   "--pool", f"trajval={pool}", "--out", str(tmp_path / "out")) == 0
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["training"]["trajval"]["auc_minus_uniform_ci95"] == [None, None]
    sentences = result["verdicts"]
    assert sentences["trajval_vs_uniform_auc"].startswith("not judged against uniform: no 95% interval")
    assert sentences["trajval_pays_for_itself"].startswith("not judged: no 95% interval")
    assert "no interval" in capsys.readouterr().out


def test_a_non_finite_value_of_a_metric_not_compared_leaves_the_run_readable(tmp_path, capsys):
    """Trainers log NaN where a step overflowed (a grad norm, a loss): TensorBoard and TRL's
    trainer_state.json keep it. Only a compared metric's non-finite value refuses the run."""
    pytest.importorskip("tensorboard", reason="the runs extra (make install) brings tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    for arm in ("uniform", "trajval"):
        for seed in range(2):
            writer = SummaryWriter(str(tmp_path / "tb" / arm / f"seed{seed}"))
            for step in STEPS:
                writer.add_scalar("eval/accuracy", accuracy(arm, seed, step), step)
                writer.add_scalar("train/grad_norm", math.nan if step == 4 else 0.5, step)
            writer.close()
            evaluations = {step: accuracy(arm, seed, step) for step in STEPS if step}
            state = trainer_state(20, 20, evaluations)
            state["log_history"][3]["grad_norm"] = math.nan  # json.dump writes NaN, as Trainer's does
            (tmp_path / "trl" / arm / f"seed{seed}").mkdir(parents=True)
            (tmp_path / "trl" / arm / f"seed{seed}" / "trainer_state.json").write_text(json.dumps(state))
    for kind in ("tb", "trl"):
        assert verdict("--run", f"uniform={tmp_path}/{kind}/uniform/seed*", "--run",
                       f"trajval={tmp_path}/{kind}/trajval/seed*", "--out", str(tmp_path / kind / "out")) == 0, \
            capsys.readouterr().err
    steps = [step for step in STEPS if step]
    result = json.loads((tmp_path / "trl" / "out" / "results.json").read_text())
    arm = curves_of({s: [accuracy("trajval", s, t) for t in steps] for s in range(2)})
    base = curves_of({s: [accuracy("uniform", s, t) for t in steps] for s in range(2)})
    assert result["training"]["trajval"]["auc_minus_uniform"] == pytest.approx(
        auc_difference_by_hand(arm, base)[0], abs=1e-15)
    capsys.readouterr()
    err = _refused(tmp_path, capsys, "--run", f"uniform={tmp_path}/tb/uniform/seed*", "--run",
                   f"trajval={tmp_path}/tb/trajval/seed*", "--metric", "train/grad_norm")
    assert "tag 'train/grad_norm', key 'train/grad_norm': value nan is not finite" in err
    # a step logged again (a resumed run) keeps its later value, finite or not
    from trajval_ops.analysis.run_logs import read_run

    log = tmp_path / "resumed.jsonl"
    log.write_text('{"step": 2, "acc": NaN, "loss": 1.0}\n{"step": 2, "acc": 0.5, "loss": Infinity}\n')
    run = read_run(log)
    assert run.metrics == {"acc": {2: 0.5}} and list(run.nonfinite) == ["loss"]


def _refused(tmp_path, capsys, *argv) -> str:
    out = tmp_path / "out"
    assert verdict(*argv, "--out", str(out)) == 2
    assert not out.exists()  # nothing written
    captured = capsys.readouterr()
    assert captured.err.startswith("verdict: error: ") and "Traceback" not in captured.err and not captured.out
    return captured.err


def test_bad_input_is_one_block_exit_2_before_anything_is_written(tmp_path, capsys):
    for arm in ("uniform", "trajval"):
        write_csv(tmp_path / f"{arm}.csv", arm, 0)
    write_csv(tmp_path / "other_metric.csv", "trajval", 1, key="val_accuracy")
    write_csv(tmp_path / "late.csv", "trajval", 1, steps=[1, 3, 5])
    uniform, trajval = f"uniform={tmp_path}/uniform.csv", f"trajval={tmp_path}/trajval.csv"
    err = _refused(tmp_path, capsys, "--run", trajval)
    assert "no runs for the baseline arm 'uniform' (arms given: trajval)" in err
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", f"trajval={tmp_path}/other_metric.csv")
    assert "different held-out accuracy keys" in err and "heldout_acc" in err and "val_accuracy" in err
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", f"trajval={tmp_path}/late.csv")
    assert "share no evaluation step" in err and "steps 1..5" in err
    # the base model alone (verl's val_before_train with test_freq -1): no verdict on training
    write_csv(tmp_path / "base_only.csv", "trajval", 1, steps=[0])
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", f"trajval={tmp_path}/base_only.csv")
    assert "share no evaluation after training began (only step 0" in err and "1 evaluations, steps 0..0" in err
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", trajval, "--metric", "val_accuracy")
    assert "do not log the --metric key(s)" in err
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", f"trajval={tmp_path}/none-*.csv")
    assert "matches no file" in err
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", "trajval", "--pool", "x=1")
    assert "expected ARM=PATH" in err
    # one pool per arm, as validate --trainer's --pool: the second was taken silently
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", trajval, "--pool", f"trajval={tmp_path}/a.jsonl",
                   "--pool", f"trajval={tmp_path}/b.jsonl")
    assert "--pool names arm trajval twice" in err
    # several held-out keys: the error lists them
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"step": t, "eval_accuracy": 0.5, "heldout_acc": 0.4}) + "\n" for t in STEPS))
    err = _refused(tmp_path, capsys, "--run", f"uniform={tmp_path}/a.jsonl", "--run", f"trajval={tmp_path}/b.jsonl")
    assert "several held-out accuracy keys" in err and "\n  eval_accuracy\n  heldout_acc" in err
    err = _refused(tmp_path, capsys, "--run", uniform, "--run", f"trajval={tmp_path}/uniform.csv")
    assert f"{tmp_path}/uniform.csv is already a run of arm uniform" in err
    nan = tmp_path / "nan.csv"
    nan.write_text("step,heldout_acc\n0,0.5\n2,nan\n")
    err = _refused(tmp_path, capsys, "--run", f"uniform={nan}", "--run", trajval)
    assert f"{nan}, row 3, key 'heldout_acc': value nan is not finite" in err


# ----------------------------------------------------------------------------- slow: real runs


def validate_units_as_logs(run: Path, folder: Path) -> dict[str, list[Path]]:
    """Each training unit of a ``trajval validate`` run as a JSON-lines log: its held-out curve
    (the mean over held-out tasks at each evaluation, as validate reads it) and the completions
    of each training step. Returns run name -> its seeds' logs."""
    from trajval_ops.experiment.trajectory_callback import read_trajectories

    logs: dict[str, list[Path]] = {}
    for unit in sorted(p for p in (run / "arms").glob("*/seed-*") if p.is_dir()):
        _, steps, acc = read_trajectories(unit / "heldout.jsonl")
        record = json.loads((unit / "result.json").read_text())
        rows = {int(step): {"step": int(step), "heldout_acc": float(value)}
                for step, value in zip(steps, acc.mean(axis=0))}
        for step, count in enumerate(record["completions_per_step"], 1):
            rows.setdefault(step, {"step": step})["completions"] = count
        path = folder / unit.parent.name / f"{unit.name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(rows[step]) + "\n" for step in sorted(rows)))
        logs.setdefault(unit.parent.name, []).append(path)
    return logs


TRAINING_FIGURES = ("best_acc", "auc", "best_acc_ci95", "auc_ci95", "s2b", "s2b_ci95", "auc_minus_uniform",
                    "auc_minus_uniform_ci95", "auc_completions_minus_uniform", "auc_completions_minus_uniform_ci95",
                    "auc_completions_budget", "per_seed_auc", "per_seed_best_acc", "completions")


@pytest.mark.slow
def test_a_validate_runs_unit_curves_give_its_training_figures_to_the_last_digit(tmp_path, smoke_validate_run):
    """The smoke protocol run by ``trajval validate`` (both sampling modes); its units' held-out
    curves and completions, fed to ``trajval verdict`` as logs, give the run's own ``training``
    figures exactly, for each sampling mode against its own uniform."""
    _, run = smoke_validate_run
    validated = json.loads((run / "results.json").read_text())["training"]
    logs = validate_units_as_logs(run, tmp_path / "logs")
    for suffix in ("", "+dynamic"):
        baseline = "uniform" + suffix
        argv = [arg for name in ("uniform", "trajval", "variance")
                for arg in ("--run", f"{name + suffix}={logs[name + suffix][0].parent}/seed-*.jsonl")]
        assert verdict(*argv, "--baseline", baseline, "--out", str(tmp_path / f"out{suffix}")) == 0
        result = json.loads((tmp_path / f"out{suffix}" / "results.json").read_text())
        assert result["steps"] == [0, 2, 4] and not result["cut"] and not result["stopped_early"]
        for name in ("uniform", "trajval", "variance"):
            mine = {key.replace(f"minus_{baseline}", "minus_uniform"): value
                    for key, value in result["training"][name + suffix].items()}
            assert {key: mine[key] for key in TRAINING_FIGURES} == \
                {key: validated[name + suffix][key] for key in TRAINING_FIGURES}, name + suffix


def trl_grpo_run(folder: Path, seed: int, weighted: bool) -> None:
    """A few GRPO steps of TRL on the tiny-arith model, set up as the probe sets up its GRPO
    (its dataset, policy, reward and GRPOConfig arguments), evaluated every 2 steps on held-out
    rows, checkpointed every 2 (each checkpoint holds a trainer_state.json). ``weighted``: the
    package's TrajvalGRPOTrainer drawing by a weight column, else TRL's own GRPOTrainer."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from trl import GRPOConfig, GRPOTrainer

    from trajval_ops.models import resolve_model
    from trajval_ops.pools.io import read_rows
    from trajval_ops.probe.config import ProbeConfig, grpo_arguments
    from trajval_ops.probe.rewards import verifier_reward
    from trajval_ops.probe.run import load_policy, load_tokenizer, max_context_of, probe_examples, training_dataset
    from trajval_ops.regime.tasks import VERIFIER
    from trajval_ops.rollout.verifiers import build_verifier
    from trajval_ops.samplers.trl import TrajvalGRPOTrainer

    rows = list(read_rows(Path(__file__).resolve().parents[1] / "trajval_ops" / "data" / "demo_arith_pool.jsonl"))
    train, heldout = rows[:64], rows[-8:]
    config = ProbeConfig(model="tiny-arith", epochs=1, seed=seed, learning_rate=3e-4, prompts_per_batch=4,
                         num_generations=4, micro_batch_size=16, max_completion_length=8, verifier=VERIFIER[0],
                         verifier_options=VERIFIER[1], device="cpu")
    base = resolve_model("tiny-arith")
    tokenizer = load_tokenizer(base)
    dataset = training_dataset(probe_examples(train, config), tokenizer, config, max_context_of(base))
    evaluation = training_dataset(probe_examples(heldout, config), tokenizer, config, max_context_of(base))
    args = grpo_arguments(config, str(folder), "cpu", show_progress=False)
    args.update(max_steps=4, logging_steps=1, eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=16,
                save_strategy="steps", save_steps=2)
    options = {}
    trainer_class = GRPOTrainer
    if weighted:
        trainer_class = TrajvalGRPOTrainer
        dataset = dataset.add_column("trajval_weight", [1.0 if row["family"] == "digit_sum" else 0.05 for row in train])
        options = {"weight_column": "trajval_weight"}
    verifier = build_verifier(VERIFIER[0], **VERIFIER[1])
    trainer = trainer_class(model=load_policy(base, "cpu", "fp32"), reward_funcs=[verifier_reward(verifier)],
                            args=GRPOConfig(**args), train_dataset=dataset, eval_dataset=evaluation,
                            processing_class=tokenizer, **options)
    trainer.train()
    verifier.close()


@pytest.mark.slow
def test_trl_output_folders_of_real_grpo_runs(tmp_path, capsys):
    import torch

    torch.set_num_threads(1)
    for arm in ("uniform", "trajval"):
        for seed in range(2):
            trl_grpo_run(tmp_path / arm / f"seed{seed}", seed, weighted=arm == "trajval")
    assert verdict("--run", f"uniform={tmp_path}/uniform/seed*", "--run", f"trajval={tmp_path}/trajval/seed*",
                   "--out", str(tmp_path / "out")) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    # the probe's reward function is named for its verifier: TRL logs eval_rewards/verifier_math/mean
    assert result["metric"] == ["eval_rewards/verifier_math/mean"] and result["steps"] == [2, 4]
    assert result["runs"]["trajval"][0]["path"] == str(tmp_path / "trajval" / "seed0" / "checkpoint-4" /
                                                       "trainer_state.json")
    curves = {}
    for arm in ("uniform", "trajval"):  # by hand from the states TRL wrote
        states = [json.loads((tmp_path / arm / f"seed{seed}" / "checkpoint-4" / "trainer_state.json").read_text())
                  for seed in range(2)]
        curves[arm] = np.array([[entry["eval_rewards/verifier_math/mean"] for entry in state["log_history"]
                                 if "eval_rewards/verifier_math/mean" in entry] for state in states])
    assert curves["uniform"].shape == (2, 2)
    difference, interval = auc_difference_by_hand(curves["trajval"], curves["uniform"])
    row = result["training"]["trajval"]
    assert row["auc_minus_uniform"] == pytest.approx(difference, abs=1e-15)
    assert row["auc_minus_uniform_ci95"] == pytest.approx(interval, abs=1e-15)
