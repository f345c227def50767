"""Every static prior the protocol's arms sample by, as one weight column each of the training
pool (``priors/train_pool.jsonl``).

- ``trajval``: the weight the learnability mapper wrote in the probe unit's pipeline;
- ``variance`` / ``bandpass``: the one-pass priors from that pipeline's early pass (their
  registry entries, :mod:`trajval_ops.priors`, which the learnability mapper writes, with its eps);
- ``trajval_floor`` / ``trajval_mix``: TrajVal's score mapped to keep more breadth: the floor
  raised to :data:`BREADTH_FLOOR`, or half of the draws uniform (:data:`UNIFORM_SHARE`,
  :func:`trajval_ops.core.uniform_mixture`);
- ``trajval_posterior`` / ``trajval_pooled``: TrajVal's score under the beta-binomial
  posterior of each end's pass rate (:func:`trajval_ops.core.noise_aware_score`), the prior
  fitted on the pool or on each task's group;
- ``variance_other_model`` / ``bandpass_other_model``: the same one-pass priors from the pass
  of another model than the one trained (``probe.other_model``), the stand-in for a difficulty
  column a public pool ships (Big-Math's Llama-8B rates for a Qwen policy); charged nothing;
- ``trajval_sampled``: the sampled prior of ``recipes/demo_sampled.yaml``: TrajVal's score kept
  on a seeded :data:`SAMPLED_FRACTION` of the pool stratified by the config's group, every other
  row's predicted (:func:`trajval_ops.priors.sampled.predict_scores`) from a short early pass at
  :data:`SAMPLED_SHORT_N` rollouts (the probe unit runs it for this arm) and the group. The
  measured rows' scores are the full passes' own (a sampled pass draws the same rows the same
  way); it is charged the probe, those rows' passes and the short pass;
- ceilings (the paper's section 3.2): ``oracle`` (oracle A's own learnability score, from its
  full-pool run, through TrajVal's weight mapping), ``oracle_subset`` (a hard cut to oracle A's
  learnable profiles: weight 1, the rest 0), and with the config's ``group_key`` the
  group-mean variants ``oracle_group`` and ``trajval_group`` (each row given its group's mean
  score, then TrajVal's weight mapping) and ``oracle_subset_group`` (the hard cut averaged per
  group: each row weighted by the share of its group's tasks that are learnable).

The ceilings use knowledge no prior can have (a full GRPO run on the pool): they say how much a
static prior could help in the regime at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trajval_ops import core, fields

#: prior -> the weight column of the training pool
PRIOR_COLUMNS = {
    "trajval": fields.WEIGHT, "variance": "trajval_variance_weight", "bandpass": "trajval_bandpass_weight",
    "oracle": "trajval_oracle_weight", "oracle_subset": "trajval_oracle_subset_weight",
    "oracle_group": "trajval_oracle_group_weight", "trajval_group": "trajval_group_weight",
    "oracle_subset_group": "trajval_oracle_subset_group_weight",
    "trajval_posterior": "trajval_posterior_weight", "trajval_pooled": "trajval_pooled_weight",
    "trajval_adaptive": "trajval_adaptive_weight",
    "trajval_floor": "trajval_floor_weight", "trajval_mix": "trajval_mix_weight",
    "trajval_sampled": "trajval_sampled_weight",
    "variance_other_model": "trajval_variance_other_model_weight",
    "bandpass_other_model": "trajval_bandpass_other_model_weight",
}
#: the breadth-keeping mappings of TrajVal's score (fixed before any run that compares them):
#: the floor of ``trajval_floor`` (the paper's eps is 0.05; at alpha 0.3, s below 0.005 maps under 0.2) ...
BREADTH_FLOOR = 0.2
#: ... and the share of uniform draws in ``trajval_mix``
UNIFORM_SHARE = 0.5
#: the sampled prior's settings (recipes/demo_sampled.yaml; fixed before any run that compares it):
#: the share of each group measured, the sample's seed, the short pass's rollouts and field
SAMPLED_FRACTION = 0.25
SAMPLED_SEED = 0
SAMPLED_SHORT_N = 4
SAMPLED_SHORT = "trajval_r_early_short"
#: the late pass rate of the adaptive budget's pass (probe.adaptive_late)
ADAPTIVE_LATE = "trajval_r_late_adaptive"
#: the pass of another model than the trained one (probe.other_model), and the one-pass priors
#: built from it (each the registry's prior of that name, read from this pass instead of the early one)
OTHER_MODEL_PASS = "trajval_r_early_other_model"
OTHER_MODEL_PRIORS = {"variance_other_model": "variance", "bandpass_other_model": "bandpass"}
#: priors that read oracle A's trajectories (its unit must finish before the pool is written)
ORACLE_PRIORS = frozenset({"oracle", "oracle_subset", "oracle_group", "oracle_subset_group"})
#: priors that are TrajVal's score from the same probe and passes (they cost what TrajVal costs)
TRAJVAL_PRIORS = frozenset({"trajval", "trajval_group", "trajval_posterior", "trajval_pooled", "trajval_floor",
                            "trajval_mix"})
#: the ceiling priors, whose best arm is the regime's headroom
CEILING_PRIORS = ORACLE_PRIORS


#: the training-pool columns BOTS reads as its two reference models: the probe's endpoint passes
#: (the base model's and the probe-trained model's pass rates)
BOTS_REFERENCE_COLUMNS = (fields.R_EARLY, fields.R_LATE)


def arm_columns(arm: str) -> tuple[str | None, tuple[str, ...]]:
    """What an arm reads of the training pool: its prior's weight column (None: uniform draws)
    and its online scheduler's reference columns (BOTS's; empty for the others). The arm's spec
    is built from it, and its charge in results.json is what these columns cost."""
    from trajval_ops.experiment.validation_config import ARMS

    prior, online = ARMS[arm]
    return (PRIOR_COLUMNS[prior] if prior else None), (BOTS_REFERENCE_COLUMNS if online == "bots" else ())


def units_the_priors_wait_for(arms) -> tuple[str, ...]:
    """The units whose results the training pool's priors are computed from: the probe, and
    oracle A when a ceiling arm is among ``arms``."""
    from trajval_ops.experiment.validation_config import ARMS

    ceilings = {ARMS[arm][0] for arm in arms} & ORACLE_PRIORS
    return ("probe",) + (("oracle/context-a",) if ceilings else ())


def sampled_rows(rows: list[dict], group_key: str | None) -> np.ndarray:
    """Which rows the sampled prior measures (the endpoint mapper's ``sample_fraction`` draw)."""
    from trajval_ops.priors.sampled import stratified_sample
    from trajval_ops.rows import get_path

    groups = [get_path(row, group_key, None) for row in rows] if group_key else None
    return stratified_sample([row["id"] for row in rows], SAMPLED_FRACTION, SAMPLED_SEED, groups)


def group_mean(values: np.ndarray, groups: list) -> np.ndarray:
    """Each row's value replaced by the mean over the rows of its group."""
    values = np.asarray(values, dtype=np.float64)
    keys = np.asarray([repr(g) for g in groups], dtype=object)
    out = np.empty_like(values)
    for key in set(keys.tolist()):
        rows = keys == key
        out[rows] = values[rows].mean()
    return out


def _rollouts(rows: list[dict], window: str) -> np.ndarray:
    """Rollouts behind each row's window mean: the sum of the ``_n`` of the passes the learnability
    mapper averaged for it (its provenance's ``r_<window>_source``), not of every pass whose name
    begins like the window's (the protocol's extra passes: short, other model, adaptive)."""
    provenance = rows[0].get(fields.SCORE_PROVENANCE) or {}
    keys = provenance.get(f"r_{window}_source") or [fields.window_mean_key(window)]
    missing = [f"{key}_n" for key in keys if f"{key}_n" not in rows[0]]
    if missing:
        raise ValueError(f"the probe unit's pool lacks {missing[0]}, the rollouts behind its {window} pass rates")
    return np.array([sum(row[f"{key}_n"] for key in keys) for row in rows], dtype=np.float64)


def prior_weights(rows: list[dict], priors: set[str], oracle: dict | None = None,
                  group_key: str | None = None) -> dict[str, np.ndarray]:
    """Weight arrays (pool order) of the requested priors.

    :param rows: the probe unit's weighted pool (TrajVal's columns, the early pass).
    :param oracle: oracle A's per-task figures (``ids``, ``score``, ``profile``), for ceilings.
    :param group_key: dotted path of a row's group, for the group-mean priors.
    """
    import dataclasses

    from trajval_ops.priors import ONE_PASS_PRIORS, build_prior
    from trajval_ops.rows import get_path

    r_early = np.array([row[fields.R_EARLY] for row in rows], dtype=np.float64)
    groups = [get_path(row, group_key, None) for row in rows] if group_key else None
    # the settings the probe unit's learnability mapper wrote TrajVal's weight with
    trajval = build_prior("trajval", rows[0].get(fields.SCORE_PROVENANCE) or {})
    out: dict[str, np.ndarray] = {}
    for name in sorted(priors & ONE_PASS_PRIORS):
        out[name] = build_prior(name, {"eps": trajval.eps}).weights(r_early)
    for name in sorted(priors & set(OTHER_MODEL_PRIORS)):
        r_other = np.array([row[OTHER_MODEL_PASS] for row in rows], dtype=np.float64)
        out[name] = build_prior(OTHER_MODEL_PRIORS[name], {"eps": trajval.eps}).weights(r_other)
    for estimator in ("posterior", "pooled"):
        if f"trajval_{estimator}" in priors:
            counts = [_rollouts(rows, window) for window in fields.WINDOWS]
            r_late = np.array([row[fields.R_LATE] for row in rows], dtype=np.float64)
            mean, *_ = dataclasses.replace(trajval, estimator=estimator).estimate(
                r_early, counts[0], r_late, counts[1], groups if estimator == "pooled" else None)
            out[f"trajval_{estimator}"] = trajval.weight(mean)
    if "trajval_adaptive" in priors:
        out["trajval_adaptive"] = trajval.weights(r_early, [row[ADAPTIVE_LATE] for row in rows])
    if priors & {"trajval_group", "trajval_floor"}:
        score = np.array([row[fields.SCORE] for row in rows], dtype=np.float64)
    if "trajval_group" in priors:
        out["trajval_group"] = trajval.weight(group_mean(score, groups))
    if "trajval_floor" in priors:
        out["trajval_floor"] = dataclasses.replace(trajval, eps=BREADTH_FLOOR).weight(score)
    if "trajval_mix" in priors:
        trajval_weight = np.array([row[fields.WEIGHT] for row in rows], dtype=np.float64)
        out["trajval_mix"] = core.uniform_mixture(trajval_weight, UNIFORM_SHARE)
    if "trajval_sampled" in priors:
        from trajval_ops.priors.sampled import predict_scores

        measured = sampled_rows(rows, group_key)
        score = np.array([row[fields.SCORE] for row in rows], dtype=np.float64)
        short = np.array([[row[SAMPLED_SHORT]] for row in rows], dtype=np.float64)
        predicted = predict_scores(np.where(measured, score, 0.0), measured, short, groups, seed=SAMPLED_SEED)
        out["trajval_sampled"] = trajval.weight(predicted.score)
    if priors & ORACLE_PRIORS:
        out.update(_ceilings(priors, oracle, rows, groups, trajval))
    return out


def _ceilings(priors: set[str], oracle: dict, rows: list[dict], groups, trajval) -> dict[str, np.ndarray]:
    """The ceiling priors: oracle A's own score through TrajVal's weight, its learnable subset,
    and their group means."""
    at = {task: i for i, task in enumerate(oracle["ids"])}
    index = np.array([at[row["id"]] for row in rows])
    oracle_score, profile = oracle["score"][index], oracle["profile"][index]
    out = {}
    if "oracle" in priors:
        out["oracle"] = trajval.weight(oracle_score)
    if "oracle_subset" in priors:
        out["oracle_subset"] = core.is_learnable(profile).astype(np.float64)
    if "oracle_group" in priors:
        out["oracle_group"] = trajval.weight(group_mean(oracle_score, groups))
    if "oracle_subset_group" in priors:
        out["oracle_subset_group"] = group_mean(core.is_learnable(profile).astype(np.float64), groups)
    return out


def write_priors(out: Path, priors: set[str], oracle: dict | None = None, group_key: str | None = None) -> Path:
    """The training pool (``priors/train_pool.jsonl``): the probe unit's rows plus one weight
    column per prior (TrajVal's is already there)."""
    from trajval_ops.pools.io import read_rows, write_rows

    target = out / "priors" / "train_pool.jsonl"
    if target.is_file():
        return target
    rows = list(read_rows(out / "probe" / "weighted.jsonl"))
    for prior, weights in prior_weights(rows, priors, oracle, group_key).items():
        for row, weight in zip(rows, weights):
            row[PRIOR_COLUMNS[prior]] = float(weight)
    write_rows(target, rows)
    return target
