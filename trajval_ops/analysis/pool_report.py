"""HTML + PNG report of a weighted pool (``tools/report.py`` is the command line).

Input: a pool JSONL (``trajval_r_early``/``trajval_r_late`` required; score, weight and profile
read when present, else computed with the numeric core), optionally the probe manifest (its
``train_reward_per_epoch``) and dense trajectories (``{"id": ..., "accuracies": [...]}`` per
line, joined to the pool on id).  Output directory: ``index.html``, one PNG per figure and
``summary.json`` with every figure of the tables; each file written atomically.

matplotlib (Agg backend) is imported only when a report is built.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np
from loguru import logger

from trajval_ops import core, fields
from trajval_ops.atomic import write_json, write_text
from trajval_ops.summary import log_rollout_noise, rollout_noise
from trajval_ops.analysis import agreement, pool_columns, trajectories
from trajval_ops.analysis.html_table import html_table
from trajval_ops.errors import TrajvalInputError
from trajval_ops.pools.io import read_rows

PROFILE_COLOURS = {
    "stable": "#1b9e77",
    "sluggish": "#66a61e",
    "ineffective": "#a6d854",
    "mastered": "#7570b3",
    "unlearned": "#999999",
    "forgetting": "#d95f02",
}
#: Largest number of points drawn in a scatter plot (a seeded random subset beyond that).
MAX_SCATTER_POINTS = 20_000


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _scatter_subset(n: int, seed: int = 0) -> np.ndarray:
    if n <= MAX_SCATTER_POINTS:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, MAX_SCATTER_POINTS, replace=False))


def _save(plt, fig, out_dir: Path, name: str, written: list) -> None:
    pool_columns.write_figure_atomic(out_dir / name, fig)
    plt.close(fig)
    written.append(name)


def _scatter_by_profile(ax, x, y, labels, legend_labels: dict) -> None:
    """One scatter in a seeded random draw order, so no profile is always painted on top."""
    order = np.random.default_rng(1).permutation(len(x))
    colours = np.array([PROFILE_COLOURS[label] for label in labels], dtype=object)
    size = 24 if len(x) <= 500 else 10 if len(x) <= 2000 else 4
    ax.scatter(np.asarray(x)[order], np.asarray(y)[order], s=size, alpha=0.6, linewidths=0, c=list(colours[order]))
    present = set(labels.tolist())
    handles = [ax.scatter([], [], s=25, color=PROFILE_COLOURS[name], label=legend_labels[name])
               for name in core.PROFILES if name in present]
    ax.legend(handles=handles, fontsize=8, loc="best")


def _fig_weight_hist(plt, cols, out_dir, written):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    weight = cols["weight"]
    ax.hist(weight, bins=np.linspace(0, max(1.0, weight.max()), 41), color="#4c72b0", edgecolor="white")
    ax.axvline(cols["eps"], color="#c44e52", linestyle="--", label=f"floor eps = {cols['eps']:g}")
    floor = core.at_floor(weight, cols["eps"]).mean()
    ax.set_title(f"Sampling weight w = max(s^{cols['alpha']:g}, eps)   ({floor:.1%} of rows at the floor)")
    ax.set_xlabel("weight w")
    ax.set_ylabel("rows")
    ax.legend()
    _save(plt, fig, out_dir, "weight_hist.png", written)


def _fig_score_hist(plt, cols, out_dir, written):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    score = cols["score"]
    ax.hist(score, bins=np.linspace(0, 1, 41), color="#55a868", edgecolor="white")
    ax.set_title(f"Learnability score s = (1 - r_early) max(0, delta)   ({(score == 0).mean():.1%} of rows at s = 0)")
    ax.set_xlabel("score s")
    ax.set_ylabel("rows")
    _save(plt, fig, out_dir, "score_hist.png", written)


def _jitter(values: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """Pass rates from n rollouts sit on a 1/n grid; spread overlapping points by a third of the
    grid step so the density stays visible (only when the values are that discrete)."""
    grid = np.unique(values)
    if grid.size > 50 or grid.size < 2:
        return values, False
    return values + rng.uniform(-1, 1, values.size) * np.diff(grid).min() / 3, True


def _fig_early_late(plt, cols, out_dir, written):
    subset = _scatter_subset(cols["r_early"].size)
    rng = np.random.default_rng(0)
    x, jittered_x = _jitter(cols["r_early"][subset], rng)
    y, jittered_y = _jitter(cols["r_late"][subset], rng)
    labels = cols["profile"][subset]
    fig, ax = plt.subplots(figsize=(5.4, 5))
    counts = {name: int((cols["profile"] == name).sum()) for name in core.PROFILES}
    _scatter_by_profile(ax, x, y, labels, {name: f"{name} ({n})" for name, n in counts.items()})
    ax.plot([0, 1], [0, 1], color="black", linewidth=0.8, linestyle=":")
    ax.set_xlim(-0.04, 1.04)
    ax.set_ylim(-0.04, 1.04)
    ax.set_xlabel("r_early")
    ax.set_ylabel("r_late")
    notes = []
    if subset.size != cols["r_early"].size:
        notes.append(f"{subset.size} of {cols['r_early'].size} shown")
    if jittered_x or jittered_y:
        notes.append("jittered")
    ax.set_title("r_early vs r_late by profile" + (f" ({', '.join(notes)})" if notes else ""))
    _save(plt, fig, out_dir, "early_late_scatter.png", written)


def _fig_weight_share(plt, table, out_dir, written):
    names = list(core.PROFILES)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(x - 0.2, [table[n]["share_of_pool"] for n in names], width=0.4, color="white", edgecolor="#555555",
           hatch="//", label="share of rows")
    ax.bar(x + 0.2, [table[n]["weight_share"] for n in names], width=0.4,
           color=[PROFILE_COLOURS[n] for n in names], label="share of total weight")
    ax.set_xticks(x, names)
    ax.set_ylabel("fraction")
    ax.set_title(f"Learnable profiles: {table['learnable']['share_of_pool']:.1%} of rows, "
                 f"{table['learnable']['weight_share']:.1%} of weight")
    ax.legend()
    _save(plt, fig, out_dir, "weight_share_by_profile.png", written)


def _fig_train_reward(plt, rewards, out_dir, written):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    epochs = np.arange(1, len(rewards) + 1)
    ax.plot(epochs, rewards, marker="o", color="#4c72b0")
    ax.set_xlabel("probe epoch")
    ax.set_ylabel("mean training reward")
    ax.set_title("Probe run: training reward per epoch")
    ax.set_xticks(epochs)
    _save(plt, fig, out_dir, "probe_train_reward.png", written)


def _fig_slope_r2(plt, projection, out_dir, written):
    subset = _scatter_subset(projection["slope"].size)
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    labels = projection["profile"][subset]
    _scatter_by_profile(ax, projection["slope"][subset], projection["r2"][subset], labels,
                        {name: f"{name} ({int((projection['profile'] == name).sum())})" for name in core.PROFILES})
    ax.axvline(0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel("slope of linear fit (accuracy per checkpoint)")
    ax.set_ylabel("R^2 of linear fit")
    ax.set_title("Trajectories in slope-R^2 space, coloured by endpoint profile")
    _save(plt, fig, out_dir, "slope_r2.png", written)


def _fig_epoch_stability(plt, rho, checkpoints, out_dir, written):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(checkpoints, rho, marker="o", color="#8172b2")
    ax.axhline(0.85, color="#c44e52", linestyle="--", linewidth=0.8, label="rho = 0.85")
    ax.set_ylim(min(0.0, np.nanmin(rho) - 0.05) if np.isfinite(rho).any() else 0.0, 1.02)
    ax.set_xlabel("checkpoint k")
    ax.set_ylabel("Spearman(s_k, s_final)")
    ax.set_title("Score-rank stability along the trajectory")
    ax.legend()
    _save(plt, fig, out_dir, "probe_epoch_stability.png", written)


def _load_manifest(path) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except ValueError as err:
        raise TrajvalInputError(f"{path}: malformed JSON manifest ({err})") from None
    except OSError as err:  # missing, a folder, no permission
        raise TrajvalInputError(f"{path}: cannot read the manifest ({err.strerror or err})") from None
    if not isinstance(manifest, dict):
        raise TrajvalInputError(f"{path}: the manifest must be a JSON object")
    rewards = manifest.get("train_reward_per_epoch")
    if rewards is not None:
        if not isinstance(rewards, list) or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) for r in rewards
        ):
            raise TrajvalInputError(f"{path}: field 'train_reward_per_epoch' must be a list of finite numbers")
    return manifest


def _trajectory_section(cols, traj_path, trajectory_key, id_key, window):
    traj_rows = list(read_rows(traj_path))
    pool_columns.check_joinable(traj_rows, id_key, f"--trajectories {traj_path}")
    ids, acc = pool_columns.trajectory_matrix(traj_rows, trajectory_key, id_key)
    dense = trajectories.trajectory_profiles(acc, window=window)
    in_traj, in_pool = pool_columns.join_on_id(ids, cols["id"])
    if in_traj.size == 0:
        raise TrajvalInputError(f"{traj_path}: no trajectory id matches a pool row id (check --id-key)")
    projection = trajectories.slope_r2_projection(
        acc[in_traj], r_early=cols["r_early"][in_pool], r_late=cols["r_late"][in_pool]
    )
    shared = {
        "n_trajectories": int(acc.shape[0]),
        "n_checkpoints": int(acc.shape[1]),
        "n_shared_with_pool": int(in_traj.size),
        "window": window,
        "dense_profile_counts": {n: int((dense["profile"] == n).sum()) for n in core.PROFILES},
        "rows_matching_several_criteria": int((dense["n_matched"] > 1).sum()),
        "rows_matching_no_criterion": int((dense["n_matched"] == 0).sum()),
    }
    if in_traj.size >= 2:
        pool_side = {k: cols[k][in_pool] for k in ("r_early", "r_late", "profile")}
        pool_side["score"] = cols["score"][in_pool]
        dense_side = {"r_early": dense["r_early"][in_traj], "r_late": dense["r_late"][in_traj],
                      "profile": dense["profile"][in_traj]}
        dense_side["score"] = core.learnability_score(dense_side["r_early"], dense_side["r_late"])
        shared["pool_vs_trajectory"] = agreement.estimate_agreement(pool_side, dense_side)
    late = acc[:, window:]
    rho = agreement.probe_epoch_stability(dense["r_early"], late)
    shared["epoch_stability"] = {"checkpoint": list(range(window, acc.shape[1])), "spearman": rho}
    return shared, projection


def _comparison_section(cols, other_path, id_key, alpha, eps):
    """Agreement of this pool with another estimate of the same tasks (e.g. a second probe set or
    the oracle run), over the ids both hold; ``alpha`` / ``eps`` as for the pool."""
    rows, predicted = pool_columns.measured_rows(list(read_rows(other_path)), other_path, "--compare")
    pool_columns.check_joinable(rows, id_key, f"--compare {other_path}")
    other = pool_columns.pool_columns(rows, alpha=alpha, eps=eps, id_key=id_key)
    here, there = pool_columns.join_on_id(cols["id"], other["id"])
    if here.size < 2:
        raise TrajvalInputError(f"{other_path}: fewer than 2 ids shared with the pool; nothing to compare")
    keys = ("r_early", "r_late", "score", "profile")
    result = agreement.estimate_agreement({k: cols[k][here] for k in keys}, {k: other[k][there] for k in keys})
    result["pool"] = str(other_path)
    result["predicted_rows_left_out"] = predicted
    result["score_distribution"] = agreement.score_distribution(
        other["profile"], other["score"], other["weight"], other["eps"]
    )
    return result


def _distribution_table(table: dict) -> str:
    return html_table(
        ["profile", "n", "share of rows", "share of weight", "mean score", "mean weight", "floor %"],
        [[name, r["n"], _pct(r["share_of_pool"]), _pct(r["weight_share"]), r["mean_score"], r["mean_weight"],
          _pct(r["floor_fraction"])] for name, r in table.items()],
    )


def _confusion_table(names: Sequence[str], matrix) -> str:
    matrix = np.asarray(matrix)
    return html_table(["rows \\ columns", *names], [[name, *matrix[i].tolist()] for i, name in enumerate(names)])


def _pct(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.1f}%"


FIGURE_CAPTIONS = {
    "weight_hist.png": "Histogram of the sampling weight w; the dashed line is the floor eps.",
    "score_hist.png": "Histogram of the learnability score s.",
    "early_late_scatter.png": "r_early vs r_late, coloured by profile; the dotted diagonal is delta = 0.",
    "weight_share_by_profile.png": "Share of rows vs share of total sampling weight per profile.",
    "probe_train_reward.png": "Probe run training reward per epoch (manifest train_reward_per_epoch).",
    "slope_r2.png": "Dense trajectories projected on slope-R^2 of their linear fit, coloured by the "
                    "pool's endpoint profile (paper Figure 3).",
    "probe_epoch_stability.png": "Spearman of s_k (r_late taken at checkpoint k) against the final "
                                 "score, along the dense trajectories.",
}


def build_report(
    pool_path,
    out_dir,
    manifest_path=None,
    trajectories_path=None,
    compare_path=None,
    *,
    alpha: float | None = None,
    eps: float | None = None,
    id_key: str | None = None,
    trajectory_key: str = pool_columns.TRAJECTORY_KEY,
    window: int = 1,
) -> dict:
    """Build the report; returns the summary (also written to ``summary.json``).

    :param alpha: / :param eps: used when the pool lacks weights and to find floor rows;
        default: the pool's recorded provenance, else 0.3 / 0.05.
    :param window: K checkpoints averaged into r_early/r_late of a dense trajectory.
    :param compare_path: a second pool over (some of) the same tasks — another probe set, or the
        oracle run — for Spearman / kappa agreement on the shared ids.
    """
    out_dir = Path(out_dir)
    rows, predicted = pool_columns.measured_rows(list(read_rows(pool_path)), pool_path, "--pool")
    cols = pool_columns.pool_columns(rows, alpha=alpha, eps=eps, id_key=id_key)
    n = len(rows)
    logger.info(f"report: {n} rows from {pool_path}; computed here: {cols['computed'] or 'nothing'}")
    table = agreement.score_distribution(cols["profile"], cols["score"], cols["weight"], cols["eps"])
    summary: dict = {
        "pool": str(pool_path),
        "rows": n,
        "predicted_rows_left_out": predicted,
        "alpha": cols["alpha"],
        "eps": cols["eps"],
        "computed_fields": cols["computed"],
        "weight_sum": float(cols["weight"].sum()),
        "floor_fraction": float(core.at_floor(cols["weight"], cols["eps"]).mean()),
        "weight_quantiles": dict(zip(("min", "p25", "p50", "p75", "max"),
                                     np.quantile(cols["weight"], [0, 0.25, 0.5, 0.75, 1]).tolist())),
        "mean_r_early": float(cols["r_early"].mean()),
        "mean_r_late": float(cols["r_late"].mean()),
        "score_distribution": table,
    }
    counts = [[row.get(f"{fields.R_EARLY}_n"), row.get(f"{fields.R_LATE}_n")] for row in rows]
    if all(isinstance(a, int) and isinstance(b, int) for a, b in counts):
        counts = np.asarray(counts, dtype=np.float64)
        summary["rollout_noise"] = rollout_noise(cols["r_early"], cols["r_late"], counts[:, 0], counts[:, 1])
        log_rollout_noise("report", summary["rollout_noise"])
    # Read and check every input before drawing, so bad input fails fast and leaves no figures.
    manifest = _load_manifest(manifest_path) if manifest_path is not None else None
    projection = None
    if trajectories_path is not None or compare_path is not None:  # joined with the pool on id
        pool_columns.check_joinable(rows, id_key, f"--pool {pool_path}")
    if trajectories_path is not None:
        summary["trajectories"], projection = _trajectory_section(cols, trajectories_path, trajectory_key, id_key, window)
    if compare_path is not None:
        summary["comparison"] = _comparison_section(cols, compare_path, id_key, alpha, eps)
    plt = _pyplot()
    written: list[str] = []
    _fig_weight_hist(plt, cols, out_dir, written)
    _fig_score_hist(plt, cols, out_dir, written)
    _fig_early_late(plt, cols, out_dir, written)
    _fig_weight_share(plt, table, out_dir, written)
    if manifest is not None:
        rewards = manifest.get("train_reward_per_epoch") or []
        summary["manifest"] = {k: manifest.get(k) for k in ("base_model", "seed", "status", "wall_time_s", "config_hash")}
        summary["manifest"]["train_reward_per_epoch"] = rewards
        if rewards:
            _fig_train_reward(plt, rewards, out_dir, written)
        else:
            logger.warning(f"report: {manifest_path} has no train_reward_per_epoch; no training-reward figure")
    if projection is not None:
        _fig_slope_r2(plt, projection, out_dir, written)
        stability = summary["trajectories"]["epoch_stability"]
        _fig_epoch_stability(plt, np.asarray(stability["spearman"]), stability["checkpoint"], out_dir, written)
    summary["figures"] = written
    write_json(out_dir / "summary.json", summary)
    write_text(out_dir / "index.html", _render_html(summary, written))
    logger.info(f"report: wrote {out_dir / 'index.html'} with {len(written)} figures")
    return summary


def _render_html(summary: dict, figures: Sequence[str]) -> str:
    s = summary
    overview = html_table(
        ["quantity", "value"],
        [
            ["pool", s["pool"]],
            ["rows", s["rows"]],
            ["alpha / eps", f"{s['alpha']:g} / {s['eps']:g}"],
            ["fields computed by the report (absent from the pool)", ", ".join(s["computed_fields"]) or "none"],
            ["rows at the weight floor", _pct(s["floor_fraction"])],
            ["weight min / p25 / median / p75 / max",
             " / ".join(f"{v:.3f}" for v in s["weight_quantiles"].values())],
            ["mean r_early / mean r_late", f"{s['mean_r_early']:.3f} / {s['mean_r_late']:.3f}"],
            ["learnable profiles: share of rows / share of weight",
             f"{_pct(s['score_distribution']['learnable']['share_of_pool'])} / "
             f"{_pct(s['score_distribution']['learnable']['weight_share'])}"],
        ],
    )
    if "rollout_noise" in s:
        noise = s["rollout_noise"]
        overview += html_table(["rollout noise (from the endpoint passes' n)", "value"], [
            ["median SE of r_early / r_late / delta",
             f"{noise['se_r_early_median']:.3f} / {noise['se_r_late_median']:.3f} / {noise['se_delta_median']:.3f}"],
            ["rows with a positive score", noise["rows_with_positive_score"]],
            [f"... whose gain is below {noise['z']:g} SE of delta (within noise)", noise["positive_scores_within_noise"]],
        ])
    dist = _distribution_table(s["score_distribution"])
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>TrajVal pool report</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
        "figure{margin:1.5em 0}img{max-width:100%}</style></head><body>",
        "<h1>TrajVal pool report</h1>",
        "<h2>Summary</h2>", overview,
        "<h2>Score distribution per profile</h2>",
        "<p>As in the paper's score-distribution table: share of total sampling weight, mean score s, "
        "fraction of rows whose weight is at the floor.</p>", dist,
    ]
    if "manifest" in s:
        m = s["manifest"]
        parts += ["<h2>Probe run</h2>", html_table(["quantity", "value"], [[k, m.get(k)] for k in
                  ("base_model", "seed", "status", "wall_time_s", "config_hash")])]
    if "trajectories" in s:
        t = s["trajectories"]
        rows = [["trajectories / checkpoints", f"{t['n_trajectories']} / {t['n_checkpoints']}"],
                ["shared with the pool (joined on id)", t["n_shared_with_pool"]],
                ["window K", t["window"]],
                ["rows matching several Figure-1 criteria (resolved saturation_first)",
                 t["rows_matching_several_criteria"]],
                ["rows matching no criterion (labelled ineffective)", t["rows_matching_no_criterion"]]]
        rows += [[f"dense profile: {k}", v] for k, v in t["dense_profile_counts"].items()]
        agree = t.get("pool_vs_trajectory", {})
        for key in ("spearman_r_early", "spearman_r_late", "spearman_score", "kappa_six_way", "kappa_binary"):
            if key in agree:
                rows.append([f"pool vs trajectory: {key}", agree[key]])
        parts += ["<h2>Dense trajectories</h2>", html_table(["quantity", "value"], rows)]
        if "confusion_six_way" in agree:
            parts += ["<p>Profiles of the shared tasks: pool endpoint profile (rows) vs Figure-1 profile of "
                      "the dense trajectory (columns).</p>",
                      _confusion_table(agree["categories_six_way"], agree["confusion_six_way"])]
    if "comparison" in s:
        c = s["comparison"]
        parts += [f"<h2>Agreement with {html.escape(c['pool'])}</h2>",
                  f"<p>{c['n_shared']} tasks shared (joined on id).</p>",
                  html_table(["statistic", "value"],
                              [[k, c[k]] for k in ("spearman_r_early", "spearman_r_late", "spearman_score",
                                                    "kappa_six_way", "kappa_binary")]),
                  "<p>Profiles: this pool (rows) vs the other (columns).</p>",
                  _confusion_table(c["categories_six_way"], c["confusion_six_way"]),
                  "<p>Score distribution per profile in the other pool:</p>",
                  _distribution_table(c["score_distribution"])]
    parts.append("<h2>Figures</h2>")
    for name in figures:
        parts.append(f"<figure><img src='{html.escape(name)}' alt='{html.escape(name)}'>"
                     f"<figcaption>{html.escape(FIGURE_CAPTIONS[name])}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)
