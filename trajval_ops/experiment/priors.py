"""Every static prior the protocol's arms sample by, as one weight column each of the training
pool (``priors/train_pool.jsonl``).

- ``trajval``: the weight the learnability mapper wrote in the probe unit's pipeline;
- every other registered prior (:mod:`trajval_ops.priors`: ``variance``, ``bandpass``, ``limr``,
  a prior an installed package registers) and its variants (``trajval_posterior`` /
  ``trajval_pooled``: TrajVal's score under the beta-binomial posterior of each end's pass rate,
  the prior fitted on the pool or on each task's group; ``limr_cut``: LIMR's hard cut), each
  through the registry from what that pipeline measured: its windows' passes, its checkpoints'
  passes (``probe.stability_epochs``) for a prior that reads the whole trajectory, with the
  settings its learnability mapper wrote TrajVal's weight with (eps) and the config's ``priors:``;
- ``trajval_floor`` / ``trajval_mix``: TrajVal's score mapped to keep more breadth: the floor
  raised to :data:`BREADTH_FLOOR`, or half of the draws uniform (:data:`UNIFORM_SHARE`,
  :func:`trajval_ops.core.uniform_mixture`);
- ``variance_other_model`` / ``bandpass_other_model``: the same one-pass priors from the pass
  of another model than the one trained (``probe.other_model``), the stand-in for a difficulty
  column a public pool ships (Big-Math's Llama-8B rates for a Qwen policy); charged nothing;
- ``variance_short``: the variance prior from the short early pass (:data:`SAMPLED_SHORT_N`
  rollouts per task); charged that pass;
- ``limr_full_run`` / ``limr_full_run_cut``: LIMR (soft weight, hard cut) from oracle A's
  trajectory, a full GRPO run on the pool with dense evaluations, as LIMR's paper reads one
  (there: each epoch's training rewards); charged oracle A's run, as the ceilings are;
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
from typing import Any, Mapping

import numpy as np

from trajval_ops import core, fields
from trajval_ops.priors import DEFAULT_PRIOR, PRIORS, arm_priors

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
#: one-pass priors read from the short early pass (SAMPLED_SHORT_N rollouts per task of the base
#: model, every row): the registry's arm of that name from a cheaper pass
SHORT_PASS_PRIORS = {"variance_short": "variance"}
#: the arms whose prior reads the short early pass (the probe unit runs it for them)
SHORT_PASS_READERS = frozenset({"trajval_sampled", *SHORT_PASS_PRIORS})
#: priors that read oracle A's trajectories as the registry's arm of that name reads a probe's
#: checkpoint passes: a full run's trajectory, as LIMR's paper reads one
FULL_RUN_PRIORS = {"limr_full_run": "limr", "limr_full_run_cut": "limr_cut"}
#: the ceilings: oracle A's own learnability
ORACLE_PRIORS = frozenset({"oracle", "oracle_subset", "oracle_group", "oracle_subset_group"})
#: priors that read oracle A's run (its unit must finish before the pool is written; charged its run)
ORACLE_READERS = ORACLE_PRIORS | frozenset(FULL_RUN_PRIORS)
#: the composite priors that are TrajVal's score from the probe's passes (they cost what TrajVal costs)
TRAJVAL_COMPOSITES = frozenset({"trajval_group", "trajval_floor", "trajval_mix"})
#: the ceiling priors, whose best arm is the regime's headroom
CEILING_PRIORS = ORACLE_PRIORS

#: the arms that are no single registered prior: an online scheduler, a prior from another pass or
#: another run, a mapping of TrajVal's score; arm -> (static prior, online scheduler)
COMPOSITE_ARMS: dict[str, tuple[str | None, str | None]] = {
    "greso": (None, "greso"),
    "greso_trajval": (DEFAULT_PRIOR, "greso"),
    "bots": (None, "bots"),
    "bots_trajval": (DEFAULT_PRIOR, "bots"),
    # ceilings: oracle A's own learnability, a full run's knowledge
    **{name: (name, None) for name in ("oracle", "oracle_subset", "oracle_group", "oracle_subset_group")},
    "trajval_group": ("trajval_group", None),
    # TrajVal with the adaptive budget's late pass (probe.adaptive_late)
    "trajval_adaptive": ("trajval_adaptive", None),
    # TrajVal's score mapped to keep breadth (a higher floor; a mixture with uniform)
    "trajval_floor": ("trajval_floor", None),
    "trajval_mix": ("trajval_mix", None),
    # TrajVal measured on a stratified sample, the other rows predicted (recipes/demo_sampled.yaml)
    "trajval_sampled": ("trajval_sampled", None),
    # a one-pass prior from another model's pass (probe.other_model): a public difficulty column's stand-in
    **{arm: (arm, None) for arm in OTHER_MODEL_PRIORS},
    # a one-pass prior from the short early pass (SAMPLED_SHORT_N rollouts)
    **{arm: (arm, None) for arm in SHORT_PASS_PRIORS},
    # LIMR from a full run's trajectory (oracle A), as its paper reads it
    **{arm: (arm, None) for arm in FULL_RUN_PRIORS},
}
if _clashing := sorted(set(arm_priors()) & {"uniform", *COMPOSITE_ARMS}):  # one would replace the other
    raise ValueError(f"registered prior arm(s) {_clashing} are named as trajval validate's own arms")
#: arm -> (static prior, online scheduler); a prior of None samples uniformly. Every arm that is
#: one prior comes from the registry (:func:`trajval_ops.priors.arm_priors`: each prior and its
#: variants), the others are :data:`COMPOSITE_ARMS`.
ARMS: dict[str, tuple[str | None, str | None]] = {
    "uniform": (None, None), **{arm: (arm, None) for arm in arm_priors()}, **COMPOSITE_ARMS}



def weight_column(prior: str) -> str:
    """The training pool's weight column of an arm's prior: ``trajval_<prior>_weight``
    (``trajval_weight`` for TrajVal, which the probe unit's learnability mapper writes)."""
    return f"{prior if prior.startswith(DEFAULT_PRIOR) else f'{DEFAULT_PRIOR}_{prior}'}_weight"


#: prior -> the weight column of the training pool
PRIOR_COLUMNS = {prior: weight_column(prior) for prior, _ in ARMS.values() if prior is not None}

#: the training-pool columns BOTS reads as its two reference models: the probe's endpoint passes
#: (the base model's and the probe-trained model's pass rates)
BOTS_REFERENCE_COLUMNS = (fields.R_EARLY, fields.R_LATE)


def epoch_pass_key(epoch: int) -> str:
    """The probe unit's pass at probe epoch ``epoch`` (``probe.stability_epochs``)."""
    return f"trajval_acc_epoch_{int(epoch)}"


def arm_columns(arm: str) -> tuple[str | None, tuple[str, ...]]:
    """What an arm reads of the training pool: its prior's weight column (None: uniform draws)
    and its online scheduler's reference columns (BOTS's; empty for the others). The arm's spec
    is built from it, and its charge in results.json is what these columns cost."""
    prior, online = ARMS[arm]
    return (PRIOR_COLUMNS[prior] if prior else None), (BOTS_REFERENCE_COLUMNS if online == "bots" else ())


def units_the_priors_wait_for(arms) -> tuple[str, ...]:
    """The units whose results the training pool's priors are computed from: the probe, and
    oracle A when an arm reads its run (a ceiling, LIMR from a full run)."""
    return ("probe",) + (("oracle/context-a",) if {ARMS[arm][0] for arm in arms} & ORACLE_READERS else ())


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
    # the first row decides: the harness wrote this pool itself, one learnability mapper over every
    # row of one pass set (probe_recipe), so every row holds the same provenance and columns
    provenance = rows[0].get(fields.SCORE_PROVENANCE) or {}
    keys = provenance.get(f"r_{window}_source") or [fields.window_mean_key(window)]
    missing = [f"{key}_n" for key in keys if f"{key}_n" not in rows[0]]
    if missing:
        raise ValueError(f"the probe unit's pool lacks {missing[0]}, the rollouts behind its {window} pass rates")
    return np.array([sum(row[f"{key}_n"] for key in keys) for row in rows], dtype=np.float64)


def registry_prior(arm: str, trajval, prior_settings: Mapping[str, Mapping[str, Any]] | None = None):
    """The registry's prior of a registry arm (:func:`trajval_ops.priors.arm_priors`): TrajVal with
    the settings the probe unit's learnability mapper wrote its weight with, another prior with
    that mapper's eps; then the config's settings of it (``priors:``), then the arm's own."""
    from trajval_ops.priors import build_prior

    name, variant = arm_priors()[arm]
    base = trajval.settings() if name == DEFAULT_PRIOR else {"eps": trajval.eps}
    return build_prior(name, {**base, **(prior_settings or {}).get(name, {}), **variant})


def pass_rates(rows: list[dict], prior, groups: list | None, checkpoint_keys=()):
    """What ``prior`` reads of the probe unit's pool (:class:`~trajval_ops.priors.base.PassRates`):
    the windows' means, and where the prior reads them every checkpoint's pass (the windows'
    passes its learnability mapper recorded, ``checkpoint_keys`` between them), the rollouts
    behind each window, the groups."""
    from trajval_ops.priors.base import PassRates

    def column(key):
        return np.array([row[key] for row in rows], dtype=np.float64)

    provenance = rows[0].get(fields.SCORE_PROVENANCE) or {}  # one for every row: the harness's pool (_rollouts)
    checkpoints = None
    if prior.reads_checkpoints:
        keys = [*(provenance.get("r_early_source") or [fields.R_EARLY]), *checkpoint_keys,
                *(provenance.get("r_late_source") or [fields.R_LATE])]
        checkpoints = np.stack([column(key) for key in keys], axis=1)
    return PassRates(column(fields.R_EARLY), None if prior.one_pass else column(fields.R_LATE), checkpoints,
                     tuple(_rollouts(rows, window) for window in fields.WINDOWS) if prior.rollouts_read_by else None,
                     groups if prior.groups_read_by else None)


def prior_weights(rows: list[dict], priors: set[str], oracle: dict | None = None, group_key: str | None = None,
                  prior_settings: Mapping[str, Mapping[str, Any]] | None = None,
                  checkpoint_keys=()) -> dict[str, np.ndarray]:
    """Weight arrays (pool order) of the requested priors.

    :param rows: the probe unit's weighted pool (TrajVal's columns, the early pass).
    :param oracle: oracle A's per-task figures (``ids``, ``score``, ``profile``, ``acc``), for
        the priors that read its run.
    :param group_key: dotted path of a row's group, for the group-mean priors.
    :param prior_settings: per registered prior, the config's settings of it (``priors:``).
    :param checkpoint_keys: the probe unit's passes between its windows, in training order.
    """
    import dataclasses

    from trajval_ops.rows import get_path

    r_early = np.array([row[fields.R_EARLY] for row in rows], dtype=np.float64)
    groups = [get_path(row, group_key, None) for row in rows] if group_key else None
    # the settings the probe unit's learnability mapper wrote TrajVal's weight with
    trajval = _written_prior(rows)
    registry = arm_priors()

    def weights(arm: str, rates_of=None) -> np.ndarray:
        prior = registry_prior(arm, trajval, prior_settings)
        return prior.scores(rates_of(prior) if rates_of else pass_rates(rows, prior, groups, checkpoint_keys)).weight

    def one_pass(arm: str) -> bool:
        return PRIORS[registry[arm][0]].passes == ("early",)

    out: dict[str, np.ndarray] = {}
    for arm in sorted(a for a in priors & set(registry) if one_pass(a)):
        out[arm] = weights(arm)
    for arm, base in sorted({**OTHER_MODEL_PRIORS, **SHORT_PASS_PRIORS}.items()):
        if arm in priors:  # the registry's one-pass prior read from another pass
            source = OTHER_MODEL_PASS if arm in OTHER_MODEL_PRIORS else SAMPLED_SHORT
            out[arm] = weights(base, lambda prior: _one_pass_rates(rows, source))
    for arm in registry:  # the registry's others; TrajVal's own weight is the probe unit's
        if arm in priors and arm != DEFAULT_PRIOR and not one_pass(arm):
            out[arm] = weights(arm)
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
    for arm, base in FULL_RUN_PRIORS.items():
        if arm in priors:
            out[arm] = weights(base, lambda prior: _full_run_rates(rows, oracle))
    return out


def registry_scores(rows: list[dict], stability_epochs=(), config=None) -> dict[str, np.ndarray]:
    """Each registered prior's score of the probe unit's rows (its agreement line's name ->
    scores, ``results.json``'s ``baselines``), through the registry as its arm weights them, with
    the ``config``'s settings of it."""
    from trajval_ops.rows import get_path

    group_key = config.group_key if config is not None else None
    groups = [get_path(row, group_key, None) for row in rows] if group_key else None
    trajval = _written_prior(rows)
    out = {}
    for name in PRIORS:
        prior = registry_prior(name, trajval, config.priors if config is not None else None)
        if prior.groups_read_by and groups is None:
            continue  # a prior that fits per group has no line without the config's group_key
        rates = pass_rates(rows, prior, groups, [epoch_pass_key(e) for e in stability_epochs])
        out[f"{name}_r_early" if prior.one_pass else f"{name}_score"] = prior.scores(rates).score
    return out


def _written_prior(rows: list[dict]):
    """TrajVal with the settings the probe unit's learnability mapper recorded (on every row alike:
    the harness wrote the pool with one mapper, so the first row's are all rows')."""
    from trajval_ops.priors import build_prior

    return build_prior(DEFAULT_PRIOR, rows[0].get(fields.SCORE_PROVENANCE) or {})


def _one_pass_rates(rows: list[dict], key: str):
    from trajval_ops.priors.base import PassRates

    return PassRates(np.array([row[key] for row in rows], dtype=np.float64))


def _full_run_rates(rows: list[dict], oracle: dict):
    """Oracle A's trajectory of each row's task (its dense evaluations, in step order)."""
    from trajval_ops.priors.base import PassRates

    at = {task: i for i, task in enumerate(oracle["ids"])}
    acc = np.asarray(oracle["acc"], dtype=np.float64)[np.array([at[row["id"]] for row in rows])]
    return PassRates(acc[:, 0], acc[:, -1], acc)


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


def write_priors(out: Path, priors: set[str], oracle: dict | None = None, group_key: str | None = None,
                 prior_settings: Mapping[str, Mapping[str, Any]] | None = None, checkpoint_keys=()) -> Path:
    """The training pool (``priors/train_pool.jsonl``): the probe unit's rows plus one weight
    column per prior (TrajVal's is already there; :func:`prior_weights` says what the others read)."""
    from trajval_ops.pools.io import read_rows, write_rows

    target = out / "priors" / "train_pool.jsonl"
    if target.is_file():
        return target
    rows = list(read_rows(out / "probe" / "weighted.jsonl"))
    for prior, weights in prior_weights(rows, priors, oracle, group_key, prior_settings, checkpoint_keys).items():
        for row, weight in zip(rows, weights):
            row[PRIOR_COLUMNS[prior]] = float(weight)
    write_rows(target, rows)
    return target
