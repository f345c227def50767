"""What a validation run will cost, before it runs (``trajval validate --dry-run``): every unit
the protocol would start, the completions it generates (training rollouts and evaluation
samples) and their bound of generated tokens (every completion at its length limit), and the
wall time those completions take at a generation rate (measured here on the config's model, or
given), scheduled as the run schedules its units: ``workers`` side by side, the arms that read a
prior after the probe (and oracle A, for the ceiling arms), uniform and GRESO from the start.
``--gpus N`` plans a run on another machine. Nothing is written.

The counts follow the protocol's units (:mod:`trajval_ops.experiment.protocol`): an oracle run
per context (``oracle.steps`` GRPO steps, an evaluation of every pool task at step 0, every
``oracle.every_steps`` and at the last step), the probe unit (the probe's GRPO epochs over P,
then every endpoint pass over the pool), and an arm run per arm, sampling mode and seed
(``training.steps`` steps, held-out evaluations counted alike); a dynamic-sampling arm is bounded by ``max_generation_rounds`` rounds a
step.
"""

from __future__ import annotations

import time
from typing import Any

from trajval_ops.experiment.priors import SAMPLED_SHORT_N, SHORT_PASS_READERS, units_the_priors_wait_for
from trajval_ops.generation_time import generation_time
from trajval_ops.experiment.validation_config import (
    ValidationConfig, arm_reads_priors, config_model, data_file, evaluation_count,
)


def data_sizes(config: ValidationConfig) -> dict[str, int]:
    """Rows of each split the protocol trains or evaluates on."""
    if config.tasks is not None:
        t = config.tasks
        return {"context-a": t.pool_size, "context-b": t.pool_size, "heldout": t.heldout_size}
    from trajval_ops.pools.io import count_rows

    sizes = {"context-a": count_rows(data_file(config, "pool")), "heldout": count_rows(data_file(config, "heldout"))}
    if config.data.context_b:
        sizes["context-b"] = count_rows(data_file(config, "context_b"))
    return sizes


def unit_cost(training: int, evaluation: int, tokens: int, bound: bool = False) -> dict[str, Any]:
    """A unit's (or a trainer run's) completions: training and evaluation, and the bound of the
    tokens they generate, every completion at its length limit ``tokens``."""
    completions = training + evaluation
    return {"training_completions": training, "evaluation_completions": evaluation, "completions": completions,
            "max_new_tokens": completions * tokens, "completions_are_a_bound": bound}


def unit_costs(config: ValidationConfig) -> list[dict[str, Any]]:
    """Every unit with its training and evaluation completions (dynamic sampling: the bound)."""
    from trajval_ops.probe.probe_set import probe_size_for

    sizes, g = data_sizes(config), config.grpo
    batch, tokens = g.prompts_per_batch * g.num_generations, g.max_completion_length
    units = []

    def add(name: str, training: int, evaluation: int, bound: bool = False, after: tuple[str, ...] = ()) -> None:
        units.append({"unit": name, **unit_cost(training, evaluation, tokens, bound), "after": after})

    oracle = config.oracle
    for context in ("context-a", "context-b"):
        if sizes.get(context):
            add(f"oracle/{context}", oracle.steps * batch,
                evaluation_count(oracle.steps, oracle.every_steps) * oracle.n * sizes[context])
    probe, pool = config.probe, sizes["context-a"]
    probe_rows = probe_size_for(pool, None, probe.probe_fraction)
    passes = (2 * probe.window_k + len(probe.stability_epochs) + int(probe.adaptive_late)
              + int(probe.other_model is not None))
    short = SAMPLED_SHORT_N * pool if set(config.training.arms) & SHORT_PASS_READERS else 0
    add("probe", probe.epochs * (probe_rows // g.prompts_per_batch) * batch, passes * probe.n * pool + short,
        bound=probe.adaptive_late)
    evaluation = evaluation_count(config.training.steps, config.evaluation.every_steps) * config.evaluation.n
    priors_wait_for = units_the_priors_wait_for(config.training.arms)
    for name, arm, mode in config.training_runs():
        rounds = config.training.max_generation_rounds if mode == "dynamic" else 1
        for seed in config.training_seeds():
            add(f"arms/{name}/seed-{seed}", config.training.steps * batch * rounds, evaluation * sizes["heldout"],
                bound=mode == "dynamic", after=priors_wait_for if arm_reads_priors(arm) else ())
    return units


def measured_rate(config: ValidationConfig, prompts: int = 64, seconds: float = 5.0) -> float:
    """Completions per second of the config's model generating this regime's completions (the
    transformers engine with one worker's ``threads_per_worker``), timed over at least ``seconds``."""
    from trajval_ops.models import resolve_model
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.prompts import render_prompt
    from trajval_ops.rollout.session import EngineSession

    g = config.grpo
    decoding = DecodingConfig(n=g.num_generations, max_new_tokens=g.max_completion_length, seed=config.seed)
    model = resolve_model(config_model(config, config.model))
    with EngineSession("transformers", model, torch_threads=config.threads_per_worker) as session:
        text = [render_prompt(session.tokenizer, [{"role": "user", "content": f"{i} + {i}"}]) for i in range(prompts)]
        session.generate(text[:4], decoding)  # warm-up
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            done += sum(len(c) for c in session.generate(text, decoding))
        return done / (time.perf_counter() - start)


def dry_run(config: ValidationConfig, rate: float | None = None, gpus: int | None = None) -> dict[str, Any]:
    """The units, their totals, and the generation time at ``rate`` completions/s per GPU (per
    worker without GPUs; measured when None; :func:`trajval_ops.generation_time.generation_time`, the rules ``trajval
    cost`` prices a recipe by), with as many units side by side as the run would start here
    (:mod:`.devices`), or on a machine with ``gpus`` GPUs."""
    from trajval_ops.experiment.devices import unit_workers, visible_gpus
    from trajval_ops.experiment.validation_config import ConfigError

    units = unit_costs(config)
    here = None
    if gpus is not None:
        workers = config.workers or gpus
    else:
        try:
            here = visible_gpus(config.device)
            workers = unit_workers(config, here)
        except ConfigError:  # device: cuda on a machine without a GPU: the config's workers, else one
            workers = config.workers or 1
    measured = rate is None
    rate = measured_rate(config) if measured else float(rate)
    plan = generation_time(units, rate, workers, gpus if gpus is not None else (len(here) if here else None))
    return {"units": units, "completions": sum(unit["completions"] for unit in units),
            "max_new_tokens": sum(unit["max_new_tokens"] for unit in units),
            "rate_source": "measured on this machine" if measured else "given", **plan, "gpus": gpus}


def print_dry_run(report: dict[str, Any]) -> None:
    print(f"{'unit':36} {'training':>12} {'evaluation':>12} {'max new tokens':>16}")
    for unit in report["units"]:
        flag = " (a bound)" if unit["completions_are_a_bound"] else ""
        print(f"{unit['unit']:36} {unit['training_completions']:>12,} {unit['evaluation_completions']:>12,} "
              f"{unit['max_new_tokens']:>16,}{flag}")
    print(f"{'total':36} {report['completions']:>25,} completions {report['max_new_tokens']:>16,}")
    where = f" on {report['gpus']} GPU(s)" if report.get("gpus") else ""
    hours = (f"{report['gpu_hours']:,.2f} GPU-hours" if report.get("gpu_hours") is not None
             else f"{report['worker_hours']:,.2f} worker-hours")
    per = "per GPU" if report.get("gpu_hours") is not None else "per worker"
    if report["unit_rate_completions_per_s"] < report["rate_completions_per_s"]:
        per += f", {report['unit_rate_completions_per_s']:,.1f} a unit with the units sharing cards"
    print(f"{len(report['units'])} units; at {report['rate_completions_per_s']:,.0f} completions/s {per} "
          f"({report['rate_source']}) and {report['workers']} worker(s){where}: about "
          f"{report['generation_wall_time_s'] / 60:,.1f} min of generation ({hours}), the arms after the units they "
          f"wait for (training's backward passes and the units' start-ups come on top); the longest unit "
          f"{report['longest_unit_generation_s'] / 60:,.1f} min")
