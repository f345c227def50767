"""The price of a prior, in the main run's currency: completions (rollouts) and generated tokens.

- :func:`recipe_cost`: before anything runs, what a recipe's probe and endpoint passes will
  generate on a pool of a given size (exact for a fixed n; the tokens are an upper bound:
  every completion at its length limit), and that total as a multiple of one main-run epoch
  over the pool (``pool rows x main n`` completions). ``trajval cost`` prints it.
- :func:`recorded_cost`: after a run, what it generated, read from the weighted pool itself:
  each endpoint pass's per-row cost in its provenance (``<key>_provenance.cost``) and the
  probe's in the manifest the late pass's checkpoint names.

A prior pays for itself only when the rollouts it saves in the main run (or in every run that
reuses it) exceed these.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Mapping

from trajval_ops import fields

PROBE_OP = "trajval_probe_trainer"
ENDPOINT_OP = "trajval_endpoint_reward_mapper"
LEARNABILITY_OP = "trajval_learnability_mapper"
#: The stages of a prior, in the order they run; a pass outside the windows is ``extra``.
STAGES = ("probe", "early", "late", "extra")


# ----------------------------------------------------------------------------- before a run


def probe_stage(settings: Mapping[str, Any], pool_rows: int) -> dict:
    """The probe trainer's completions and token bound on a pool of ``pool_rows`` rows:
    ``epochs x floor(|P| / prompts_per_batch)`` steps of ``prompts_per_batch x num_generations``
    completions (TRL drops an incomplete last batch)."""
    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.probe_set import probe_size_for

    names = {f.name for f in dataclasses.fields(ProbeConfig)}
    config = ProbeConfig(**{k: (tuple(v) if isinstance(v, list) and k == "keep_epochs" else v)
                            for k, v in settings.items() if k in names})
    size = probe_size_for(pool_rows, settings.get("probe_size"), settings.get("probe_fraction"))
    if size < config.prompts_per_batch:  # the probe trainer refuses it in the same words
        raise ValueError(f"the probe has {size} rows, fewer than prompts_per_batch ({config.prompts_per_batch}); "
                         "raise probe_size/probe_fraction or lower prompts_per_batch")
    steps = config.epochs * (size // config.prompts_per_batch)
    completions = steps * config.prompts_per_batch * config.num_generations
    return {"stage": "probe", "completions": completions,
            "max_new_tokens_total": completions * config.max_completion_length,
            "probe_rows": size, "steps": steps}


def pass_stage(settings: Mapping[str, Any], pool_rows: int, group_sizes: Mapping[str, list[int]] | None = None) -> dict:
    """One endpoint pass's completions and token bound: ``n`` per measured row (one for greedy
    decoding: a single completion counted n times), none for a pass read from the pool
    (``reuse_key``). A sampled pass (``sample_fraction`` < 1) measures per group the
    ``ceil(fraction x size)`` rows, at least one: exact where ``group_sizes`` gives the sizes of
    the groups of its ``sample_group_key`` (or it has none), else ``ceil(fraction x rows)``, short
    by at most one row per group (each group rounds up), flagged ``measured_rows_exact: false``."""
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.sampled_prior import rows_to_measure

    names = {f.name for f in dataclasses.fields(DecodingConfig)}
    decoding = DecodingConfig(**{k: v for k, v in settings.items() if k in names})
    reused = settings.get("reuse_key") is not None
    per_row = 0 if reused else (1 if decoding.temperature == 0 else decoding.n)
    window = settings.get("window")
    output_key = fields.endpoint_output_key(window, settings.get("window_index"), settings.get("output_key"))
    fraction, group_key = float(settings.get("sample_fraction", 1.0)), settings.get("sample_group_key")
    measured, exact = pool_rows, True
    if fraction < 1:
        sizes = [pool_rows] if not group_key else (group_sizes or {}).get(group_key)
        exact = sizes is not None
        measured = (sum(rows_to_measure(fraction, size) for size in sizes) if exact
                    else rows_to_measure(fraction, pool_rows))
    stage = {"stage": window or "extra", "output_key": output_key, "completions": per_row * measured,
             "max_new_tokens_total": per_row * measured * decoding.max_new_tokens, "reused": reused}
    if fraction < 1:
        stage.update(sample_fraction=fraction, measured_rows=measured, measured_rows_exact=exact)
    return stage


def sample_group_keys(recipe: Mapping[str, Any]) -> list[str]:
    """The group fields the recipe's sampled passes stratify by (their sizes make the cost exact)."""
    return sorted({settings["sample_group_key"] for name, settings in _operators(recipe)
                   if name == ENDPOINT_OP and float(settings.get("sample_fraction", 1.0)) < 1
                   and settings.get("sample_group_key")})


def _operators(recipe: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    process = recipe.get("process")
    if not isinstance(process, list):
        raise ValueError("the recipe has no 'process' list of operators")
    return [(name, settings or {}) for entry in process if isinstance(entry, Mapping) and len(entry) == 1
            for name, settings in entry.items()]


def recipe_stages(recipe: Mapping[str, Any], pool_rows: int, group_sizes: Mapping[str, list[int]] | None = None) -> list[dict]:
    """The stages a recipe's ``process`` list runs, each with its completions and token bound.

    :param group_sizes: per group field a sampled pass stratifies by, the sizes of its groups.
    :raises ValueError: a recipe without a ``process`` list, or settings the operators refuse.
    """
    stages = []
    for name, settings in _operators(recipe):
        if name == PROBE_OP:
            stages.append(probe_stage(settings, pool_rows))
        elif name == ENDPOINT_OP:
            stages.append(pass_stage(settings, pool_rows, group_sizes))
    return stages


def recipe_cost(recipe: Mapping[str, Any], pool_rows: int, main_n: int = 16, main_epochs: float = 1.0,
                group_sizes: Mapping[str, list[int]] | None = None) -> dict:
    """What a recipe's prior costs on a pool of ``pool_rows`` rows, before it runs.

    :param main_n: rollouts per prompt in the main run (the paper's 16).
    :param main_epochs: epochs of the main run, to say how many main runs the prior costs.
    :param group_sizes: the group sizes a sampled pass stratifies by (:func:`pass_stage`).
    :return: ``{"pool_rows", "stages": [{"stage", "completions", "max_new_tokens_total", ...}],
        "completions", "main_epochs_equivalent", "main_runs_equivalent"}``.
    """
    if pool_rows < 1:
        raise ValueError(f"the pool has {pool_rows} rows")
    if main_n < 1 or main_epochs <= 0:
        raise ValueError(f"main_n must be >= 1 and main_epochs > 0, got {main_n} and {main_epochs}")
    stages = recipe_stages(recipe, pool_rows, group_sizes)
    total = sum(stage["completions"] for stage in stages)
    epoch = pool_rows * main_n
    return {"pool_rows": pool_rows, "stages": stages, "completions": total,
            "max_new_tokens_total": sum(stage["max_new_tokens_total"] for stage in stages),
            "main_n": main_n, "main_epochs": main_epochs,
            "main_epochs_equivalent": total / epoch, "main_runs_equivalent": total / (epoch * main_epochs)}


# ----------------------------------------------------------------------------- after a run


def _sum_costs(provenances: Iterable[Any]) -> dict:
    """Summed ``cost`` of per-row provenance dicts; rows without one are counted as unknown."""
    completions = tokens = unknown = rows = 0
    for provenance in provenances:
        rows += 1
        cost = provenance.get("cost") if isinstance(provenance, Mapping) else None
        if not isinstance(cost, Mapping):
            unknown += 1
            continue
        completions += int(cost.get("completions") or 0)
        tokens += int(cost.get("generated_tokens") or 0)
    return {"completions": completions, "generated_tokens": tokens, "rows": rows, "rows_without_cost": unknown}


def probe_cost_from_manifests(provenances: Iterable[Any]) -> dict | None:
    """The probe's recorded cost, from the manifest(s) the rows' checkpoints name (one probe:
    each manifest counted once), or None when no row names a probe checkpoint."""
    from trajval_ops.probe.manifest import read_manifest

    manifests = set()
    for provenance in provenances:
        checkpoint = provenance.get("checkpoint") if isinstance(provenance, Mapping) else None
        if isinstance(checkpoint, Mapping) and checkpoint.get("manifest"):
            manifests.add(checkpoint["manifest"])
    if not manifests:
        return None
    total = {"completions": 0, "generated_tokens": 0, "wall_time_s": 0.0, "manifests": sorted(manifests)}
    for path in sorted(manifests):
        manifest = read_manifest(Path(path)) or {}
        cost = manifest.get("cost") or {}
        for key in ("completions", "generated_tokens", "wall_time_s"):
            total[key] += cost.get(key, 0)
    return total


def recorded_cost(column, early_keys: list[str], late_keys: list[str] | None, extra_keys: list[str] = ()) -> dict:
    """The recorded cost of a weighted pool's prior.

    :param column: ``column(name) -> list`` of a pool's values (None where a row lacks it).
    :param early_keys: the early window's pass-rate fields (their ``_provenance`` is read).
    :param late_keys: the late window's; None for a one-pass prior (no probe, no late pass).
    :param extra_keys: further fields the prior read (a sampled prior's features); those written by
        an endpoint pass (with a ``_provenance``) are the stage ``extra``.
    :return: ``{"stages": {"probe"?, "early", "late"?, "extra"?}, "completions", "generated_tokens"}``.
    """
    stages: dict[str, dict] = {}
    stages["early"] = _merge([_sum_costs(column(f"{key}_provenance") or []) for key in early_keys])
    if late_keys is not None:
        late_provenance = [p for key in late_keys for p in (column(f"{key}_provenance") or [])]
        probe = probe_cost_from_manifests(late_provenance)
        if probe is not None:
            stages = {"probe": probe, **stages}
        stages["late"] = _merge([_sum_costs(column(f"{key}_provenance") or []) for key in late_keys])
    extra = [column(f"{key}_provenance") for key in extra_keys]
    if any(extra):
        stages["extra"] = _merge([_sum_costs(provenance) for provenance in extra if provenance])
    return {"stages": stages,
            "completions": sum(stage["completions"] for stage in stages.values()),
            "generated_tokens": sum(stage["generated_tokens"] for stage in stages.values())}


def _merge(parts: list[dict]) -> dict:
    return {key: sum(part[key] for part in parts) for key in ("completions", "generated_tokens", "rows",
                                                               "rows_without_cost")}


def cost_summary(cost: dict) -> dict:
    """The part of a :func:`recorded_cost` that a weighted pool's provenance keeps: completions
    and generated tokens per stage and in total (and the rows a pass recorded no cost for, where
    any). Wall times and manifest paths stay out, so the same prior gives the same bytes."""
    stages = {}
    for name, stage in cost["stages"].items():
        stages[name] = {"completions": int(stage["completions"]), "generated_tokens": int(stage["generated_tokens"])}
        if stage.get("rows_without_cost"):
            stages[name]["rows_without_cost"] = int(stage["rows_without_cost"])
    return {"completions": int(cost["completions"]), "generated_tokens": int(cost["generated_tokens"]),
            "stages": stages}
