"""The price of a prior, in the main run's currency: completions (rollouts) and generated tokens.

- :func:`recipe_cost`: before anything runs, what a recipe's probe and endpoint passes will
  generate on a pool of a given size (exact for a fixed n; the tokens are an upper bound:
  every completion at its length limit), and that total as a multiple of one main-run epoch
  over the pool (``pool rows x main n`` completions). ``trajval cost`` prints it.
- :func:`recorded_cost`: after a run, what it generated, read from the weighted pool itself:
  each endpoint pass's per-row cost in its provenance (``<key>_provenance.cost``) and the
  probe's in the manifest the late pass's checkpoint names; the learnability mapper records
  the total in its provenance (``prior_cost``).
- :func:`pool_cost`: what a weighted pool's prior(s) cost, from that record per run (a
  resampled or concatenated pool counts each run once), per-row sums only where no record exists.

A prior pays for itself only when the rollouts it saves in the main run (or in every run that
reuses it) exceed these.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from trajval_ops import fields
from trajval_ops.recipe import ENDPOINT_OP, PROBE_OP, operator_entries

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


def pass_stage(settings: Mapping[str, Any], pool_rows: int, group_sizes: Mapping[str, list[int]] | None = None,
               missing_counts: Mapping[str, int] | None = None) -> dict:
    """One endpoint pass's completions and token bound: ``n`` per measured row (one for greedy
    decoding: a single completion counted n times), none for a pass read from the pool
    (``reuse_key``) but its rows lacking the field where it measures them (``reuse_missing:
    measure``): exact where ``missing_counts`` gives how many rows of the pool lack it, else every
    row, flagged ``measured_rows_exact: false``. A sampled pass (``sample_fraction`` < 1) measures
    per group the ``ceil(fraction x size)`` rows, at least one: exact where ``group_sizes`` gives the
    sizes of the groups of its ``sample_group_key`` (or it has none), else ``ceil(fraction x
    rows)``, short by at most one row per group (each group rounds up), flagged likewise."""
    from trajval_ops.priors.sampled import rows_to_measure
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.pass_settings import group_settings
    from trajval_ops.rollout.reused_pass import ReuseSettings

    groups = group_settings(settings)  # the pass's own setting groups, as the operator builds them
    decoding, reuse = groups[DecodingConfig], groups[ReuseSettings].settings()
    reused = reuse is not None
    measures_missing = reused and reuse["missing"] == "measure"
    per_row = 0 if reused and not measures_missing else (1 if decoding.temperature == 0 else decoding.n)
    window = settings.get("window")
    output_key = fields.endpoint_output_key(window, settings.get("window_index"), settings.get("output_key"))
    fraction, group_key = float(settings.get("sample_fraction", 1.0)), settings.get("sample_group_key")
    measured, exact = pool_rows, True
    if measures_missing:
        known = (missing_counts or {}).get(reuse["key"])
        measured, exact = (pool_rows, False) if known is None else (known, True)
    if fraction < 1:
        sizes = [pool_rows] if not group_key else (group_sizes or {}).get(group_key)
        exact = sizes is not None
        measured = (sum(rows_to_measure(fraction, size) for size in sizes) if exact
                    else rows_to_measure(fraction, pool_rows))
    stage = {"stage": window or "extra", "output_key": output_key, "completions": per_row * measured,
             "max_new_tokens_total": per_row * measured * decoding.max_new_tokens, "reused": reused}
    if reused:  # which model and n the pool's pass came from (a k/n string's n is read from the pool)
        stage["reused_from"] = {"field": reuse["key"], "form": reuse["form"], "model": reuse["model"], "n": reuse["n"],
                                "n_field": reuse["n_key"], "missing": reuse["missing"]}
    if measures_missing:
        stage.update(measured_rows=measured, measured_rows_exact=exact)
    if fraction < 1:
        stage.update(sample_fraction=fraction, measured_rows=measured, measured_rows_exact=exact)
    return stage


def measured_missing_keys(recipe: Mapping[str, Any]) -> list[str]:
    """The pool fields the recipe's reused passes read whose missing rows they measure (how many
    rows lack each makes the cost exact)."""
    from trajval_ops.rollout.pass_settings import group_settings
    from trajval_ops.rollout.reused_pass import ReuseSettings

    keys = set()
    for name, settings in operator_entries(recipe):
        if name == ENDPOINT_OP:
            reuse = group_settings(settings)[ReuseSettings].settings()
            if reuse is not None and reuse["missing"] == "measure":
                keys.add(reuse["key"])
    return sorted(keys)


def sample_group_keys(recipe: Mapping[str, Any]) -> list[str]:
    """The group fields the recipe's sampled passes stratify by (their sizes make the cost exact)."""
    return sorted({settings["sample_group_key"] for name, settings in operator_entries(recipe)
                   if name == ENDPOINT_OP and float(settings.get("sample_fraction", 1.0)) < 1
                   and settings.get("sample_group_key")})


def recipe_stages(recipe: Mapping[str, Any], pool_rows: int, group_sizes: Mapping[str, list[int]] | None = None,
                  missing_counts: Mapping[str, int] | None = None) -> list[dict]:
    """The stages a recipe's ``process`` list runs, each with its completions and token bound.

    :param group_sizes: per group field a sampled pass stratifies by, the sizes of its groups.
    :param missing_counts: per field a reused pass measures where missing, the rows lacking it.
    :raises ValueError: a recipe without a ``process`` list, or settings the operators refuse.
    """
    stages = []
    ray = recipe.get("executor_type") == "ray"
    for name, settings in operator_entries(recipe):
        if name == PROBE_OP:
            stages.append({**probe_stage(settings, pool_rows), "gpus": stage_gpus(name, settings, ray)})
        elif name == ENDPOINT_OP:
            stages.append({**pass_stage(settings, pool_rows, group_sizes, missing_counts),
                           "gpus": stage_gpus(name, settings, ray)})
    if not any(stage["stage"] == "probe" for stage in stages) and (elsewhere := probe_run_elsewhere(recipe)):
        stages.insert(0, elsewhere)
    return stages


def stage_gpus(name: str, settings: Mapping[str, Any], ray: bool) -> int:
    """The GPUs a stage's settings spread its generation over: the probe's training processes
    (``num_processes``, each generating on its own GPU); an endpoint pass's engines: under Ray
    ``num_proc`` actors of ``num_gpus`` GPUs each (at least ``tensor_parallel_size``), else one
    vLLM engine of ``tensor_parallel_size`` GPUs (the default executor keeps vLLM in one process)
    or ``num_proc`` transformers workers over the node's GPUs (``accelerator: cuda``)."""
    import math

    if name == PROBE_OP:
        return max(1, int(settings.get("num_processes") or 1))
    workers = max(1, int(settings.get("num_proc") or 1))
    engine = settings.get("engine", "auto")
    per_engine = 1 if engine == "transformers" else max(1, int(settings.get("tensor_parallel_size") or 1))
    if ray:
        return workers * max(per_engine, math.ceil(float(settings.get("num_gpus") or 0)))
    if engine == "transformers":
        return workers if settings.get("accelerator") == "cuda" else 1
    return per_engine


def gpu_plan(stages: list[dict], rate: float, gpus: int) -> dict:
    """The recipe's generation on ``gpus`` GPUs at ``rate`` completions per second per GPU, by the
    rules ``trajval validate --dry-run`` plans with (:func:`trajval_ops.generation_time.generation_time`):
    each stage's completions split evenly over the GPUs its settings spread it over (its ``gpus``,
    at most ``gpus``; one for a probe trained elsewhere, whose spread is not recorded), the stages
    one after another (under Ray the passes stream into each other: the wall time is then at most
    this). Each stage gets ``gpus_used`` and ``generation_s``."""
    from trajval_ops.generation_time import generation_time

    units, previous = [], ()
    for index, stage in enumerate(stages):
        stage["gpus_used"] = min(gpus, stage.get("gpus", 1))
        names = tuple(f"{index}/{share}" for share in range(stage["gpus_used"]))
        units += [{"unit": name, "completions": stage["completions"] / len(names), "after": previous}
                  for name in names]
        previous = names
    plan = generation_time(units, rate, gpus, gpus)
    for index, stage in enumerate(stages):
        stage["generation_s"] = next(unit["generation_s"] for unit in units if unit["unit"] == f"{index}/0")
    return plan


#: The references to a probe's manifest that name its base model (the early window starts there).
BASE_REFERENCES = ("early[0]", "base")


def _passes_on_probes(recipe: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], str, str]]:
    """The recipe's passes that evaluate a probe's checkpoint (``manifest:<dir>#<ref>`` models):
    ``(settings, dir, ref)`` each."""
    from trajval_ops.models import MANIFEST_PREFIX

    return [(settings, *settings["model"][len(MANIFEST_PREFIX):].partition("#")[::2])
            for name, settings in operator_entries(recipe) if name == ENDPOINT_OP
            and isinstance(settings.get("model"), str) and settings["model"].startswith(MANIFEST_PREFIX)]


def _passes_on_a_probe(recipe: Mapping[str, Any]) -> set[str]:
    """The fields of the recipe's passes that evaluate a checkpoint the probe trained (other than
    its base model)."""
    return {fields.endpoint_output_key(settings.get("window"), settings.get("window_index"), settings.get("output_key"))
            for settings, _, ref in _passes_on_probes(recipe) if ref not in BASE_REFERENCES}


def probe_run_elsewhere(recipe: Mapping[str, Any]) -> dict | None:
    """The probe stage of a recipe whose passes evaluate a probe's checkpoints (``manifest:``
    models) that it does not train itself: the prior needs that probe all the same. Priced at
    what its manifest records (``recorded: true``), or at 0 with ``recorded: false`` while no
    probe there has recorded a cost (price the recipe that trains it)."""
    from trajval_ops.probe_manifest import ManifestError, read_manifest

    locations = sorted({location for _, location, _ in _passes_on_probes(recipe)})
    if not locations:
        return None
    completions = tokens = 0
    recorded = True
    for location in locations:
        try:  # a manifest not there yet, or unreadable, records no cost: NOT PRICED, not an error
            manifest = read_manifest(location)
        except (OSError, ManifestError):
            manifest = None
        cost = (manifest.get("cost") if isinstance(manifest, dict) else None) or {}
        recorded = recorded and "completions" in cost
        completions += int(cost.get("completions", 0))
        tokens += int(cost.get("generated_tokens", 0))
    return {"stage": "probe", "run_elsewhere": locations, "recorded": recorded,
            "completions": completions if recorded else 0, "max_new_tokens_total": tokens if recorded else 0}


def recipe_priors(recipe: Mapping[str, Any]) -> list[tuple[Any, list[str]]]:
    """Each learnability mapper's prior (from the registry) and the pass-rate fields it reads,
    in recipe order: its windows' passes, then the features it predicts unmeasured rows from
    (``predict_features``: a short pass over every row, a stage ``extra``)."""
    from trajval_ops.priors import prior_from_spec
    from trajval_ops.recipe import LEARNABILITY_OP, learnability_reads

    priors = []
    for index, (name, settings) in enumerate(operator_entries(recipe)):
        if name == LEARNABILITY_OP:
            spec, keys = learnability_reads(settings, index)
            priors.append((prior_from_spec(spec), [*keys, *(settings.get("predict_features") or [])]))
    return priors


def fields_read(priors: list[tuple[Any, list[str]]], stages: list[dict]) -> set[str]:
    """The fields the recipe's priors read, directly or through a pass they read that reads the
    pool in turn (the field a reused pass takes its pass rates from)."""
    read = {key for _, keys in priors for key in keys}
    sources = {stage["output_key"]: stage["reused_from"]["field"] for stage in stages if stage.get("reused")}
    while (more := {sources[key] for key in read if key in sources} - read):
        read |= more
    return read


def recipe_cost(recipe: Mapping[str, Any], pool_rows: int, main_n: int = 16, main_epochs: float = 1.0,
                group_sizes: Mapping[str, list[int]] | None = None,
                missing_counts: Mapping[str, int] | None = None) -> dict:
    """What a recipe's prior costs on a pool of ``pool_rows`` rows, before it runs.

    :param main_n: rollouts per prompt in the main run (the paper's 16).
    :param main_epochs: epochs of the main run, to say how many main runs the prior costs.
    :param group_sizes: the group sizes a sampled pass stratifies by (:func:`pass_stage`).
    :param missing_counts: the rows lacking each field a reused pass measures where missing.
    :return: ``{"pool_rows", "prior" (the spec of the prior the recipe's last learnability mapper
        writes, from the registry), "priors" (every mapper's, in recipe order), "stages": [{"stage",
        "completions", "max_new_tokens_total", ...; "read_by_prior": false for a stage no prior of
        the recipe reads: a pass whose field no mapper reads (a late pass of one-pass priors only,
        an extra pass neither a window nor a prediction feature, :func:`fields_read`), or the probe
        of one-pass priors only that read no pass on a checkpoint it trained}], "completions",
        "main_epochs_equivalent", "main_runs_equivalent"}``.
    """
    if pool_rows < 1:
        raise ValueError(f"the pool has {pool_rows} rows")
    if main_n < 1 or main_epochs <= 0:
        raise ValueError(f"main_n must be >= 1 and main_epochs > 0, got {main_n} and {main_epochs}")
    stages = recipe_stages(recipe, pool_rows, group_sizes, missing_counts)
    priors = recipe_priors(recipe)
    read = fields_read(priors, stages)
    if priors:  # a stage no prior of the recipe reads is priced all the same, and said so
        # the probe is read through what it trained: by a two-pass prior, or a pass a prior reads
        probe_read = not all(prior.one_pass for prior, _ in priors) or bool(read & _passes_on_a_probe(recipe))
        for stage in stages:
            if not probe_read if stage["stage"] == "probe" else stage["output_key"] not in read:
                stage["read_by_prior"] = False
    total = sum(stage["completions"] for stage in stages)
    epoch = pool_rows * main_n
    return {"pool_rows": pool_rows, "prior": priors[-1][0].spec() if priors else None,
            "priors": [prior.spec() for prior, _ in priors], "stages": stages,
            "completions": total,
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


def probe_cost_from_manifests(provenances: Iterable[Any], locate: Callable[[str], Path] | None = None) -> dict | None:
    """The probe's recorded cost, from the manifest(s) the rows' checkpoints name (one probe:
    each manifest counted once), or None when no row names a probe checkpoint.

    :param locate: where a manifest the rows name is now (the rows name it where the probe ran:
        a validation run moved to another machine keeps its probe in its own folder); default: as
        named. A manifest not found is an error, never a probe that cost nothing.
    """
    from trajval_ops.probe_manifest import read_manifest

    manifests = set()
    for provenance in provenances:
        if isinstance(provenance, Mapping) and isinstance(provenance.get("measured_by"), Mapping):
            provenance = provenance["measured_by"]  # a reused pass's rows lacking the field, measured
        checkpoint = provenance.get("checkpoint") if isinstance(provenance, Mapping) else None
        if isinstance(checkpoint, Mapping) and checkpoint.get("manifest"):
            manifests.add(checkpoint["manifest"])
    if not manifests:
        return None
    located = sorted({str(locate(name) if locate else Path(name)) for name in manifests})  # each file once
    total = {"completions": 0, "generated_tokens": 0, "wall_time_s": 0.0, "manifests": located}
    for path in located:
        manifest = read_manifest(Path(path))
        if manifest is None:
            raise FileNotFoundError(f"probe manifest {path}, named by the rows' checkpoint provenance, is not "
                                    f"here: the probe's cost cannot be counted")
        cost = manifest.get("cost") or {}
        for key in ("completions", "generated_tokens", "wall_time_s"):
            total[key] += cost.get(key, 0)
    return total


def recorded_cost(column, early_keys: list[str], late_keys: list[str] | None, extra_keys: list[str] = (),
                  locate_manifest: Callable[[str], Path] | None = None) -> dict:
    """The recorded cost of a weighted pool's prior.

    :param column: ``column(name) -> list`` of a pool's values (None where a row lacks it).
    :param early_keys: the early window's pass-rate fields (their ``_provenance`` is read).
    :param late_keys: the late window's; None for a one-pass prior (no probe, no late pass).
    :param extra_keys: further fields the prior read (a sampled prior's features); those written by
        an endpoint pass (with a ``_provenance``) are the stage ``extra``.
    :param locate_manifest: where the probe manifest the late pass names is now
        (:func:`probe_cost_from_manifests`).
    :return: ``{"stages": {"probe"?, "early", "late"?, "extra"?}, "completions", "generated_tokens"}``.
    """
    stages: dict[str, dict] = {}
    stages["early"] = _merge([_sum_costs(_pass_provenance(column, key)) for key in early_keys])
    if late_keys is not None:
        late_provenance = [p for key in late_keys for p in _pass_provenance(column, key)]
        probe = probe_cost_from_manifests(late_provenance, locate_manifest)
        if probe is not None:
            stages = {"probe": probe, **stages}
        stages["late"] = _merge([_sum_costs(_pass_provenance(column, key)) for key in late_keys])
    extra = [column(f"{key}_provenance") for key in extra_keys]
    if any(extra):
        stages["extra"] = _merge([_sum_costs(provenance) for provenance in extra if provenance])
    return {"stages": stages,
            "completions": sum(stage["completions"] for stage in stages.values()),
            "generated_tokens": sum(stage["generated_tokens"] for stage in stages.values())}


def _pass_provenance(column, key: str) -> list:
    """A read pass's per-row provenance; a pass without the column (pass rates given, not
    sampled by an endpoint pass) gives every row of its pass-rate field none: their cost is
    unknown, so not counted as 0 completions."""
    provenance = column(f"{key}_provenance")
    if provenance is None:  # the rows with a pass rate (a sampled prior's predicted rows have none)
        return [None] * sum(rate is not None for rate in column(key) or [])
    return provenance


def _merge(parts: list[dict]) -> dict:
    return {key: sum(part[key] for part in parts) for key in ("completions", "generated_tokens", "rows",
                                                               "rows_without_cost")}


def pool_cost(rows: list[Mapping[str, Any]]) -> dict:
    """What the prior(s) of a weighted pool cost: one answer for a pool as written, resampled
    (rows repeated or dropped) or concatenated from several runs.

    Each run's learnability mapper recorded its prior's total in its score provenance
    (``prior_cost``); a pool's rows name their run by that provenance, so each distinct run is
    counted once, however many of its rows the pool holds. Rows without such a record (a pool
    scored before ``prior_cost`` existed, or not scored) fall back to summing their passes'
    per-row costs, which over a resampled pool counts a repeated row again and a dropped one not
    at all; the report says which source each run's figure comes from.

    :return: ``{"pool_rows", "runs": [{"rows", "prior", "source", "completions", "generated_tokens",
        "stages"}], "source", "completions", "generated_tokens", "stages", "rows_without_cost"}``: ``source``
        is ``record``, ``per_row_sums`` or ``mixed``; ``stages`` the runs' stages summed;
        ``rows_without_cost`` the pass rows whose cost no pass recorded (the totals leave them out).
    """
    from trajval_ops.canonical import canonical_json
    from trajval_ops.rows import get_path

    # rows grouped by their score provenance, every row read: a concatenated pool mixes runs, old
    # ones (no prior_cost) too, and each group's members share the passes and prior it names
    runs: dict[str, list[Mapping[str, Any]]] = {}
    unrecorded: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        provenance = row.get(fields.SCORE_PROVENANCE)
        recorded = isinstance(provenance, Mapping) and isinstance(provenance.get("prior_cost"), Mapping)
        key = canonical_json(provenance) if isinstance(provenance, Mapping) else ""
        (runs if recorded else unrecorded).setdefault(key, []).append(row)
    reports = [_run_from_record(members[0][fields.SCORE_PROVENANCE], members) for members in runs.values()]
    for members in unrecorded.values():
        early, late = _pass_sources(members[0].get(fields.SCORE_PROVENANCE))
        summed = recorded_cost(lambda name: [get_path(row, name, None) for row in members], early, late)
        reports.append({"rows": len(members), "prior": _prior_of(members[0]), "source": "per_row_sums", **summed})
    stages: dict[str, dict] = {}
    for run in reports:
        for name, stage in run["stages"].items():
            total = stages.setdefault(name, {})
            for key, value in stage.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[key] = total.get(key, 0) + value
    sources = {run["source"] for run in reports}
    return {"pool_rows": len(rows), "runs": reports, "source": sources.pop() if len(sources) == 1 else "mixed",
            "completions": sum(run["completions"] for run in reports),
            "generated_tokens": sum(run["generated_tokens"] for run in reports), "stages": stages,
            "rows_without_cost": sum(stage.get("rows_without_cost", 0) for stage in stages.values())}


def _run_from_record(provenance: Mapping[str, Any], members: list[Mapping[str, Any]]) -> dict:
    """One run's cost from its recorded ``prior_cost``; the probe's wall time added from the
    manifest its late pass's checkpoint names (the record keeps no wall times)."""
    recorded = provenance["prior_cost"]
    stages = {name: {"completions": int(stage.get("completions", 0)),
                     "generated_tokens": int(stage.get("generated_tokens", 0)),
                     "rows_without_cost": int(stage.get("rows_without_cost", 0))}
              for name, stage in (recorded.get("stages") or {}).items()}
    if "probe" in stages:
        from trajval_ops.rows import get_path

        late = [get_path(row, f"{key}_provenance", None) for key in provenance.get("r_late_source") or []
                for row in members]
        try:
            probe = probe_cost_from_manifests(late)
        except FileNotFoundError:  # a pool read away from its probe: the record holds the rest
            probe = None
        if probe is not None:
            stages["probe"]["wall_time_s"] = probe["wall_time_s"]
    return {"rows": len(members), "prior": provenance.get("score"), "source": "record",
            "completions": int(recorded.get("completions", 0)),
            "generated_tokens": int(recorded.get("generated_tokens", 0)), "stages": stages,
            "reused_passes": _reused_passes(provenance, members)}


def _reused_passes(provenance: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> dict:
    """The passes a run read from the pool instead of sampling: their field, form, the model and
    n behind them (each row's own n where ``n_field`` names it), and of the pool's rows how many
    were read (0 completions) and how many lacked the field and were measured (``reuse_missing:
    measure``; their completions are in the run's cost)."""
    from trajval_ops.rows import get_path

    passes = {}
    for key in list(provenance.get("r_early_source") or []) + list(provenance.get("r_late_source") or []):
        sources = [source for row in rows if isinstance(source := get_path(row, f"{key}_provenance", None), Mapping)
                   and source.get("source") in ("pool_field", "measured")]
        if sources:
            passes[key] = {**{name: sources[0].get(name) for name in ("field", "form", "model", "n", "n_field")},
                           "rows_read": sum(source["source"] == "pool_field" for source in sources),
                           "rows_measured": sum(source["source"] == "measured" for source in sources)}
    return passes


def _pass_sources(provenance) -> tuple[list[str], list[str] | None]:
    """The early and late pass-rate fields a score provenance names (the default fields when a
    pool has none)."""
    if not isinstance(provenance, Mapping):
        return [fields.R_EARLY], [fields.R_LATE]
    late = provenance.get("r_late_source")
    return list(provenance.get("r_early_source") or [fields.R_EARLY]), (list(late) if late else None)


def _prior_of(row: Mapping[str, Any]) -> str | None:
    provenance = row.get(fields.SCORE_PROVENANCE)
    return provenance.get("score") if isinstance(provenance, Mapping) else None


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
