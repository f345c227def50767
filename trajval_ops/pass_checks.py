"""The checks of the passes a prior compares, read from every row's pass provenance: they must
have sampled and verified alike, evaluated the checkpoints their window names in training order,
and, where a pass was adaptive, stopped rows on the weight of the prior that scores them."""

from __future__ import annotations

from loguru import logger

from trajval_ops.errors import TrajvalInputError


def check_passes_alike(scorer, table) -> None:
    """The passes ``scorer``'s prior compares (early and late, every window, the checkpoints
    between) must have sampled and verified alike, as every row's provenance records it: a late
    pass at a longer ``max_new_tokens`` would show a gain the training did not make. A pass
    without provenance is not compared. A late pass of the very checkpoint an early pass evaluated
    is warned of: its gain is noise. An adaptive pass must have bounded this prior's weight
    (:func:`check_budget_prior`).

    :param scorer: a :class:`~trajval_ops.scoring.PoolScorer`.
    """
    from trajval_ops.measured_alike import measurement_difference

    what, prior = scorer.what, scorer.prior
    recorded = _pass_provenance(scorer.pass_keys(), table)
    check_budget_prior(what, prior.spec(), prior.name, recorded)
    for key, provenance in recorded[1:]:
        first_key, first = recorded[0]
        if differ := measurement_difference(first, provenance):
            raise TrajvalInputError(
                f"{what}: the passes behind {first_key} and {key} measured otherwise ({differ}), as their "
                f"provenance records it: the {prior.name} prior compares their pass rates, so both must "
                "sample and verify alike; rerun one pass with the other's settings (the rollout cache keeps the "
                "other pass)")
    if scorer.one_pass:
        return
    early_keys = scorer.early_window_keys or [scorer.settings.r_early_key]
    windowed = [(key, provenance) for key, provenance in recorded if key not in (scorer.settings.checkpoint_keys or [])]
    _check_checkpoint_windows(what, windowed, early_keys)
    early = {p["model_path"]: key for key, p in windowed if key in early_keys and p.get("model_path")}
    seen: dict[tuple[bool, str], str] = {}
    for key, provenance in windowed:
        path, in_early = provenance.get("model_path"), key in early_keys
        if not in_early and path in early:
            logger.warning(f"{what}: the late pass {key} evaluated the checkpoint the early pass {early[path]} "
                           f"evaluated ({path}): the gain between them is rollout noise, not learning; point the "
                           "late pass at a later checkpoint of the probe (e.g. manifest:<probe dir>#late[-1])")
        elif path and seen.get((in_early, path), key) != key:
            logger.warning(f"{what}: the passes {seen[in_early, path]} and {key} of the "
                           f"{'early' if in_early else 'late'} window evaluated one checkpoint ({path}): the "
                           "window's mean counts it twice and another of its checkpoints not at all")
        seen.setdefault((in_early, path), key)


def _pass_provenance(keys: list[str], table) -> list[tuple[str, dict]]:
    """``(pass key, provenance)`` of each pass of ``keys`` that records one, once for each
    distinct record over every row (a pool concatenated from runs of other settings holds
    several): the fields the checks of the passes read."""
    from trajval_ops.measured_alike import MEASUREMENT_SETTINGS
    from trajval_ops.pools.io import distinct_path_values

    read = (*MEASUREMENT_SETTINGS, "model_path", "checkpoint", "budget")
    return [(key, provenance) for key in keys
            for provenance in distinct_path_values(table, f"{key}_provenance", read) if isinstance(provenance, dict)]


def check_budget_prior(what: str, spec: dict, name: str, recorded: list[tuple[str, dict]]) -> None:
    """An adaptive pass stopped each row once more rollouts could no longer move the weight of
    the prior it was told by more than its tolerance, as its provenance's ``budget`` records it:
    scored by another prior (``spec``, named ``name``), or with other settings, a stopped row's
    weight may move further."""
    from trajval_ops.rollout.budget import recorded_prior_spec

    for key, provenance in recorded:
        bounded = recorded_prior_spec(provenance.get("budget"))
        if bounded is not None and bounded != spec:
            raise TrajvalInputError(
                f"{what}: the adaptive pass behind {key} stopped rows on the weight of {bounded}, as its "
                f"provenance records it, and this mapper writes the weight of {spec}: a stopped row's "
                f"{name} weight may lie beyond the pass's weight_tolerance "
                f"({provenance['budget'].get('tolerance')}) of what its full n rollouts give; score with the prior "
                "the pass was told, or rerun the pass told this one (budget_prior, or the mapper after it in one "
                "recipe) or with budget: fixed")


def _check_checkpoint_windows(what: str, recorded: list[tuple[str, dict]], early_keys: list[str]) -> None:
    """Refuse passes whose recorded probe checkpoints contradict their window: a pass named by a
    window reference of the other window (``late[0]`` behind an early pass), or an early
    checkpoint of one probe trained after a late one. Either reverses the gain: tasks the probe
    learned would go to the floor and tasks it forgot would be weighted up."""
    checkpoints = [(key, key in early_keys, p["checkpoint"]) for key, p in recorded
                   if isinstance(p.get("checkpoint"), dict) and p["checkpoint"].get("source") == "manifest"]
    for key, in_early, checkpoint in checkpoints:
        window, ref = "early" if in_early else "late", str(checkpoint.get("ref", ""))
        if ref.split("[")[0] in ("early", "late") and not ref.startswith(window):
            raise TrajvalInputError(f"{what}: the {window} pass {key} evaluated the probe's {ref} (epoch "
                                    f"{checkpoint.get('epoch')}), as its provenance records it: point it at "
                                    f"manifest:<probe dir>#{window}[i]")
    by_probe: dict[str, dict[bool, list]] = {}
    for key, in_early, checkpoint in checkpoints:
        if isinstance(checkpoint.get("epoch"), (int, float)):
            by_probe.setdefault(str(checkpoint.get("manifest")), {True: [], False: []})[in_early].append(
                (checkpoint["epoch"], key))
    for windows in by_probe.values():
        if windows[True] and windows[False] and max(windows[True])[0] > min(windows[False])[0]:
            (early_epoch, early_key), (late_epoch, late_key) = max(windows[True]), min(windows[False])
            raise TrajvalInputError(f"{what}: the early pass {early_key} evaluated the probe at epoch {early_epoch}, "
                                    f"after the late pass {late_key} (epoch {late_epoch}), as their provenance records "
                                    "it: the gain would run backwards; point the early passes at earlier checkpoints")
