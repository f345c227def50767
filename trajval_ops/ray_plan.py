"""A Ray recipe's plan, read before anything runs: where its endpoint passes run (actors, GPUs
per actor, GPUs per vLLM engine) and whether each actor can hold its one engine. The same rule
stops a pass under ``dj-process`` before any model loads (:mod:`trajval_ops.ops.dj.executor`);
``trajval cost`` and the GPU kit read the plan (:mod:`trajval_ops.ops.recipe_check`). No
Data-Juicer here.
"""

from __future__ import annotations

from typing import Any, Mapping

from trajval_ops.errors import TrajvalInputError
from trajval_ops.recipe import ENDPOINT_OP, operator_entries, pass_name

#: Data-Juicer's executors that run operators as Ray actor pools.
RAY_EXECUTORS = ("ray", "ray_partitioned")


def engine_gpu_problem(num_gpus, tensor_parallel_size: int, gpu_memory_utilization: float | None = None) -> str | None:
    """Why a Ray actor reserving ``num_gpus`` GPUs cannot hold one vLLM engine of
    ``tensor_parallel_size`` GPUs as planned (None: it can). An actor holds one engine, so the
    two agree: fewer GPUs and the engine cannot start, more and they sit idle; a share of one GPU
    (two engines on a card) holds an engine of one GPU whose memory share
    (``gpu_memory_utilization``; None: not checked) fits it."""
    gpus, tp = float(num_gpus or 0), int(tensor_parallel_size)
    if gpus < tp and not (tp == 1 and 0 < gpus < 1):
        return f"tensor_parallel_size {tp} needs num_gpus: {tp} per actor; the recipe reserves {gpus:g}"
    if gpus > tp:
        return (f"num_gpus {gpus:g} per actor, but its one vLLM engine (tensor_parallel_size {tp}) uses {tp}: "
                f"{gpus - tp:g} GPU(s) of every actor would sit idle; set num_gpus: {tp} and give more engines "
                "by num_proc (the actor count)")
    if gpus < 1 and gpu_memory_utilization is not None and gpu_memory_utilization > gpus:
        return (f"num_gpus {gpus:g} puts engines side by side on a GPU, but each asks vLLM for "
                f"gpu_memory_utilization {gpu_memory_utilization:g} of it: set it to at most {gpus:g}")
    return None


def ray_plan(recipe: Mapping[str, Any]) -> dict:
    """Where a Ray recipe's endpoint passes run: each pass's actors (``num_proc``; None: sized by
    Data-Juicer from the cluster), GPUs per actor and per engine, and the GPUs the passes hold at
    once (Ray streams rows from one pass into the next, so every pool runs together). Empty for
    another executor.

    :raises TrajvalInputError: a pass whose actors cannot hold its vLLM engine as planned
        (:func:`engine_gpu_problem`), naming the entry.
    """
    from trajval_ops.rollout.pass_settings import EngineSettings

    if recipe.get("executor_type") not in RAY_EXECUTORS:
        return {}
    passes = []
    for index, (name, settings) in enumerate(operator_entries(recipe)):
        if name != ENDPOINT_OP:
            continue
        actors, gpus = settings.get("num_proc"), float(settings.get("num_gpus") or 0)
        engine_gpus = int(settings.get("tensor_parallel_size") or 1) if settings.get("engine") == "vllm" else 1
        if settings.get("engine") == "vllm" and (gpus or engine_gpus > 1):  # as the pass checks itself under Ray
            memory = float(settings.get("gpu_memory_utilization", EngineSettings.gpu_memory_utilization))
            problem = engine_gpu_problem(gpus, engine_gpus, memory)
            if problem:
                raise TrajvalInputError(f"{pass_name(settings, index)}: {problem}")
        fewest = min(actors) if isinstance(actors, (list, tuple)) else actors
        passes.append({"pass": pass_name(settings, index), "actors": actors, "gpus_per_actor": gpus,
                       "gpus_per_engine": engine_gpus, "gpus": None if fewest is None else int(fewest) * gpus})
    held = [p["gpus"] for p in passes]
    return {"passes": passes, "gpus_at_once": None if None in held else sum(held)}
