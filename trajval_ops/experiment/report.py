"""``results.json`` and ``index.html`` of a validation run, computed from its units' files.

Statistics: Spearman and Cohen's kappa from :mod:`trajval_ops.analysis.agreement`, profiles
from :mod:`trajval_ops.analysis.trajectories`, Best Acc / AUC / S2B from
:mod:`trajval_ops.analysis.curves`; 95% intervals are percentile bootstraps over seeds
(:func:`bootstrap_ci`).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from trajval_ops import core, fields
from trajval_ops.analysis import agreement, curves
from trajval_ops.analysis.trajectories import trajectory_profiles
from trajval_ops.experiment.config import ARMS, BASELINE_ARM, ValidationConfig, protocol_hash
from trajval_ops.probe.trajectory_callback import read_trajectories
from trajval_ops.jsontable import iter_jsonl

BOOTSTRAP_SAMPLES = 2000
#: Keys results.json always has (tests/test_validate.py checks the full schema).
RESULT_KEYS = ("reproducibility", "probe_vs_oracle", "baselines", "training", "protocol")


def bootstrap_ci(samples: Sequence[np.ndarray], statistic: Callable[..., float], seed: int = 0,
                 n_boot: int = BOOTSTRAP_SAMPLES) -> list[float]:
    """Percentile 95% interval of ``statistic(*resampled)``: each array in ``samples`` (seeds
    along axis 0) is resampled with replacement independently."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_boot):
        drawn = [s[rng.integers(0, len(s), len(s))] for s in samples]
        value = statistic(*drawn)
        if value is not None and math.isfinite(value):
            values.append(value)
    if not values:
        return [float("nan"), float("nan")]
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def _oracle(out: Path, context: str, window: int) -> dict | None:
    path = out / "oracle" / context / "trajectories.jsonl"
    if not path.is_file():
        return None
    ids, steps, acc = read_trajectories(path)
    profiles = trajectory_profiles(acc, window=window, x=steps)
    return {"ids": ids, "steps": steps, "acc": acc, "r_early": profiles["r_early"], "r_late": profiles["r_late"],
            "delta": profiles["delta"], "profile": profiles["profile"],
            "score": core.learnability_score(profiles["r_early"], profiles["r_late"])}


def _index(ids: Sequence) -> dict:
    return {task: i for i, task in enumerate(ids)}


def reproducibility(oracle_a: dict, oracle_b: dict | None, shared: Sequence) -> dict:
    if oracle_b is None or not shared:
        return {"skipped": "no second context"}
    ia, ib = _index(oracle_a["ids"]), _index(oracle_b["ids"])
    a = np.array([ia[t] for t in shared])
    b = np.array([ib[t] for t in shared])
    agree = agreement.profile_agreement(oracle_a["profile"][a], oracle_b["profile"][b])
    # each run's gain against its own base measurement (independent sampling seeds) ...
    independent = agreement.spearman(oracle_a["delta"][a], oracle_b["delta"][b])
    # ... and against one shared base: the common base term correlates the gains by construction
    shared_base = agreement.spearman(oracle_a["delta"][a], oracle_b["r_late"][b] - oracle_a["r_early"][a])
    return {"n_shared": len(shared), "kappa_six": agree["kappa_six_way"], "kappa_binary": agree["kappa_binary"],
            "spearman_gain": shared_base, "spearman_gain_independent_base": independent,
            "confusion_six_way": agree["confusion_six_way"].tolist(), "categories": agree["categories_six_way"]}


def probe_vs_oracle(probe_rows: list[dict], oracle: dict, stability_epochs: Sequence[int]) -> tuple[dict, dict, dict]:
    """(probe_vs_oracle, baselines, per-task arrays for figures)."""
    index = _index(oracle["ids"])
    rows = [row for row in probe_rows if row["id"] in index]
    at = np.array([index[row["id"]] for row in rows])
    r_early = np.array([row[fields.R_EARLY] for row in rows])
    r_late = np.array([row[fields.R_LATE] for row in rows])
    score = np.array([row[fields.SCORE] for row in rows])
    profile = np.array([row[fields.PROFILE] for row in rows], dtype=object)
    gain = oracle["delta"][at]
    agree = agreement.profile_agreement(profile, oracle["profile"][at])
    in_probe = np.array([bool(row.get(fields.IN_PROBE)) for row in rows])
    result = {
        "n_tasks": len(rows), "n_probe_tasks": int(in_probe.sum()),
        "spearman_r_early": agreement.spearman(r_early, oracle["r_early"][at]),
        "spearman_r_late": agreement.spearman(r_late, oracle["r_late"][at]),
        "spearman_score": agreement.spearman(score, oracle["score"][at]),
        "spearman_score_vs_gain": agreement.spearman(score, gain),
        "spearman_score_vs_gain_outside_probe": agreement.spearman(score[~in_probe], gain[~in_probe]),
        "kappa_six": agree["kappa_six_way"], "kappa_binary": agree["kappa_binary"],
        "probe_epoch_stability": None,
    }
    if stability_epochs:
        late_by_epoch = np.stack([[row[f"trajval_acc_epoch_{e}"] for row in rows] for e in stability_epochs]
                                 + [r_late], axis=1)
        rho = agreement.probe_epoch_stability(r_early, late_by_epoch)
        result["probe_epoch_stability"] = {"epochs": [*stability_epochs, "last"], "spearman_vs_final": rho.tolist()}
    baselines = {
        "trajval_score": agreement.spearman(score, gain),
        "variance_r_early": agreement.spearman(core.variance_score(r_early), gain),
        "bandpass_r_early": agreement.spearman(core.bandpass_score(r_early), gain),
        "r_early_only": agreement.spearman(-r_early, gain),
    }
    arrays = {"score": score, "gain": gain, "r_early": r_early, "oracle_r_early": oracle["r_early"][at]}
    return result, baselines, arrays


def training(config: ValidationConfig, out: Path) -> tuple[dict, dict]:
    """Per arm: Best Acc, AUC and S2B (against uniform) with bootstrap intervals over seeds."""
    curves_by_arm: dict[str, np.ndarray] = {}
    steps = None
    for arm in config.training.arms:
        per_seed = []
        for seed in config.training_seeds():
            _, arm_steps, acc = read_trajectories(out / "arms" / arm / f"seed-{seed}" / "heldout.jsonl")
            per_seed.append(acc.mean(axis=0))
            steps = arm_steps
        curves_by_arm[arm] = np.stack(per_seed)
    base = curves_by_arm[BASELINE_ARM]

    def s2b(method, baseline):
        value = curves.steps_to_baseline(method, baseline, steps)["s2b"]
        return value if math.isfinite(value) else None

    table = {}
    for arm, arm_curves in curves_by_arm.items():
        row = {
            "best_acc": curves.best_acc(arm_curves), "auc": curves.auc(arm_curves),
            "best_acc_ci95": bootstrap_ci([arm_curves], lambda c: curves.best_acc(c)),
            "auc_ci95": bootstrap_ci([arm_curves], lambda c: curves.auc(c)),
            "s2b": curves.steps_to_baseline(arm_curves, base, steps)["s2b"],
            "s2b_ci95": bootstrap_ci([arm_curves, base], s2b),
            "auc_minus_uniform": curves.auc(arm_curves) - curves.auc(base),
            "auc_minus_uniform_ci95": bootstrap_ci([arm_curves, base], lambda c, b: curves.auc(c) - curves.auc(b)),
            "seeds": config.training_seeds(),
            "per_seed_auc": [curves.auc(c) for c in arm_curves],
            "per_seed_best_acc": [curves.best_acc(c) for c in arm_curves],
        }
        table[arm] = row
    return table, {"steps": steps, "curves": curves_by_arm}


def verdicts(results: dict) -> dict[str, str]:
    """A plain verdict per claim, from the intervals (no tuning, no judgement calls)."""
    out = {}
    rep = results["reproducibility"]
    if "kappa_binary" in rep:
        out["profiles_reproducible"] = (
            f"binary kappa {rep['kappa_binary']:.2f}, gain Spearman {rep['spearman_gain_independent_base']:.2f} "
            f"(independent bases)")
    pvo = results["probe_vs_oracle"]
    out["probe_ranks_learnability"] = f"Spearman(score, oracle gain) = {pvo['spearman_score_vs_gain']:.2f}"
    train = results["training"]
    for arm, row in train.items():
        if arm == BASELINE_ARM:
            continue
        lo, hi = row["auc_minus_uniform_ci95"]
        if lo > 0:
            word = "better than uniform"
        elif hi < 0:
            word = "worse than uniform"
        else:
            word = "not distinguishable from uniform"
        out[f"{arm}_vs_uniform_auc"] = f"{word} (AUC difference {row['auc_minus_uniform']:+.4f}, 95% CI [{lo:+.4f}, {hi:+.4f}])"
    return out


def compute_results(config: ValidationConfig, out: Path, wall_time_s: float = float("nan")) -> dict:
    window = config.oracle.window
    oracle_a = _oracle(out, "context-a", window)
    oracle_b = _oracle(out, "context-b", window)
    shared = json.loads((out / "data" / "shared_ids.json").read_text())
    probe_rows = list(iter_jsonl(out / "probe" / "weighted.jsonl"))
    pvo, baselines, _ = probe_vs_oracle(probe_rows, oracle_a, sorted(config.probe.stability_epochs))
    train, _ = training(config, out)
    results = {
        "reproducibility": reproducibility(oracle_a, oracle_b, shared),
        "probe_vs_oracle": pvo,
        "baselines": baselines,
        "training": train,
        "protocol": {
            "config": config.to_dict(), "config_hash": protocol_hash(config),
            "data": json.loads((out / "data" / "data.json").read_text()),
            "arms": {arm: {"prior": ARMS[arm][0], "online": ARMS[arm][1]} for arm in config.training.arms},
            "wall_time_s": round(wall_time_s, 1), "versions": _versions(),
        },
    }
    results["verdicts"] = verdicts(results)
    return results


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("trajval_ops", "torch", "transformers", "trl", "py-data-juicer"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# ----------------------------------------------------------------------------- index.html


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def _figures(config: ValidationConfig, out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {}
    _, series = training(config, out)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, arm_curves in series["curves"].items():
        mean = arm_curves.mean(axis=0)
        ax.plot(series["steps"], mean, label=arm, linewidth=2.2 if arm in (BASELINE_ARM, "trajval") else 1.2)
        if len(arm_curves) > 1:
            se = arm_curves.std(axis=0, ddof=1) / math.sqrt(len(arm_curves))
            ax.fill_between(series["steps"], mean - se, mean + se, alpha=0.12)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out accuracy (mean over seeds, ±1 SE)")
    ax.legend(fontsize=8, ncol=2)
    figures["Held-out accuracy per arm"] = _png(fig)
    plt.close(fig)

    oracle_a = _oracle(out, "context-a", config.oracle.window)
    _, _, arrays = probe_vs_oracle(list(iter_jsonl(out / "probe" / "weighted.jsonl")), oracle_a, [])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].scatter(arrays["gain"], arrays["score"], s=6, alpha=0.4)
    axes[0].set_xlabel("oracle gain (dense trajectory)")
    axes[0].set_ylabel("probe score s")
    axes[1].scatter(arrays["oracle_r_early"], arrays["r_early"], s=6, alpha=0.4)
    axes[1].set_xlabel("oracle r_early")
    axes[1].set_ylabel("probe r_early")
    figures["Probe vs oracle, per task"] = _png(fig)
    plt.close(fig)
    return figures


def _table(rows: dict[str, dict], columns: Sequence[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4f}"
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, float) for v in value):
            return f"[{value[0]:.4f}, {value[1]:.4f}]"
        return html.escape(str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("", *columns))
    body = "".join(f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{cell(row.get(c))}</td>" for c in columns)
                   + "</tr>" for name, row in rows.items())
    return f"<table><tr>{head}</tr>{body}</table>"


def write_index(results: dict, config: ValidationConfig, out: Path) -> Path:
    from trajval_ops.atomic import write_text
    parts = ["<!doctype html><meta charset='utf-8'><title>TrajVal validation</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style>",
             f"<h1>TrajVal validation: {html.escape(results['protocol']['config']['name'])}</h1>",
             "<h2>Verdicts</h2><ul>" + "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
                                               for k, v in results["verdicts"].items()) + "</ul>",
             "<h2>Training (held-out accuracy)</h2>",
             _table(results["training"], ["best_acc", "best_acc_ci95", "auc", "auc_ci95", "s2b", "s2b_ci95",
                                          "auc_minus_uniform", "auc_minus_uniform_ci95"]),
             "<h2>Probe vs oracle</h2>",
             _table({"probe": results["probe_vs_oracle"]}, ["spearman_r_early", "spearman_r_late", "spearman_score",
                                                            "spearman_score_vs_gain", "kappa_six", "kappa_binary"]),
             "<h2>Baselines (Spearman against the oracle gain)</h2>",
             _table({k: {"spearman": v} for k, v in results["baselines"].items()}, ["spearman"]),
             "<h2>Reproducibility of the oracle</h2>",
             _table({"oracle A vs B": results["reproducibility"]},
                    ["n_shared", "kappa_six", "kappa_binary", "spearman_gain", "spearman_gain_independent_base"])]
    for title, png in _figures(config, out).items():
        parts.append(f"<h2>{html.escape(title)}</h2><img src='data:image/png;base64,{png}'>")
    parts.append(f"<h2>Protocol</h2><pre>{html.escape(json.dumps(results['protocol'], indent=1, default=str))}</pre>")
    return write_text(out / "index.html", "\n".join(parts))
