"""What a run is, as the executors see it: whether its recipe uses a trajval operator, whether it
runs on Ray, and what Ray's actors are built from."""

from __future__ import annotations


#: Names of the operators this package registers (set by trajval_ops.ops).
TRAJVAL_OPERATORS: set[str] = set()


def is_ray_mode() -> bool:
    """Whether this process belongs to a Data-Juicer run on the Ray executor."""
    from data_juicer.utils.ray_utils import is_ray_mode as data_juicer_ray_mode

    return data_juicer_ray_mode()


def check_ray_actor_resources(op_name: str, pool_size, num_gpus, gpus_per_engine: int = 1,
                              gpu_memory_utilization: float | None = None) -> None:
    """Stop a Ray run whose actor pool cannot be placed, before any model loads.

    :param pool_size: the operator's ``num_proc`` under Ray: actors in the pool (an int, or a
        ``[min, max]`` range of which the minimum must fit).
    :param num_gpus: GPUs reserved per actor (None or 0: a CPU pool).
    :param gpus_per_engine: GPUs one engine needs (vLLM's tensor parallel size).
    :param gpu_memory_utilization: a vLLM engine's memory share (None: not a vLLM engine): its GPUs
        and the actor's must agree (:func:`trajval_ops.ray_plan.engine_gpu_problem`).
    """
    import ray

    from trajval_ops.ray_plan import engine_gpu_problem

    actors = min(pool_size) if isinstance(pool_size, (list, tuple)) else int(pool_size or 1)
    gpus = float(num_gpus or 0)
    problem = None
    if gpu_memory_utilization is not None and gpus:
        problem = engine_gpu_problem(gpus, gpus_per_engine, gpu_memory_utilization)
    elif gpus_per_engine > 1 and gpus < gpus_per_engine:
        problem = engine_gpu_problem(gpus, gpus_per_engine)
    if problem:
        raise ValueError(f"{op_name}: {problem}")
    if gpus <= 0 or not ray.is_initialized():
        return
    available = float(ray.cluster_resources().get("GPU", 0))
    if actors * gpus > available:
        raise ValueError(f"{op_name}: {actors} actors x num_gpus {gpus:g} = {actors * gpus:g} GPUs, but the Ray "
                         f"cluster has {available:g}; lower num_proc (the actor count) or num_gpus")


def hand_to_ray_actors(op, **settings) -> None:
    """Make ``settings`` constructor arguments of the Ray actors that will run ``op``.

    Data-Juicer builds each actor of a pool from the operator's class and the arguments it was
    constructed with (``_init_kwargs``), not from the driver's instance: what the driver works out
    before the run (a sample drawn from the whole pool) reaches the actors only so."""
    op._init_kwargs = {**(getattr(op, "_init_kwargs", None) or {}), **settings}


def uses_trajval_operators(cfg) -> bool:
    """Whether a parsed recipe lists a trajval operator."""
    for entry in getattr(cfg, "process", None) or []:
        if isinstance(entry, dict) and any(name in TRAJVAL_OPERATORS for name in entry):
            return True
    return False
