"""Completions into hours, one set of rules for every plan: ``trajval validate --dry-run`` (the
protocol's units) and ``trajval cost`` (a recipe's stages).

Each unit of work generates its completions at ``rate`` completions per second on one worker (a
GPU, or a worker process on CPU); units run ``workers`` side by side, in order, each once the
units it waits for (its ``after``) have finished (:func:`schedule`). A plan for another machine
(``--gpus N``) needs a rate measured there (``--rate R``): this machine's says nothing of theirs.
Generation only: training's backward passes and the units' start-ups come on top.
"""

from __future__ import annotations

import heapq
import math
from typing import Any


def check_rate_and_gpus(rate: float | None, gpus: int | None) -> None:
    """Refuse a rate that is not a positive number, a GPU count below 1, and GPUs without a rate.

    :raises ValueError: naming the option (``--rate``, ``--gpus``) and what it needs.
    """
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"--rate {rate} must be a positive number of completions per second")
    if gpus is not None:
        if gpus < 1:
            raise ValueError(f"--gpus {gpus} must be at least 1")
        if rate is None:
            raise ValueError("--gpus plans a run on other machines: give --rate, a worker's completions per second "
                             "measured there (trajval validate --dry-run on one of them prints it), since this "
                             "machine's rate says nothing of theirs")


def schedule(units: list[dict[str, Any]], seconds: list[float], workers: int) -> float:
    """The wall time of ``units`` (``seconds`` each) run ``workers`` at a time, in order, each once
    the units it waits for (its ``after``) have finished."""
    waits = {unit["unit"]: unit.get("after", ()) for unit in units}
    waiting = list(zip((unit["unit"] for unit in units), seconds))
    present = {name for name, _ in waiting}
    running: list[tuple[float, str]] = []
    finished: set[str] = set()
    now = 0.0
    while waiting or running:
        for name, duration in list(waiting):
            if len(running) >= workers:
                break
            needs = [dep for dep in waits[name] if dep in present]
            if all(dep in finished for dep in needs):
                waiting.remove((name, duration))
                heapq.heappush(running, (now + duration, name))
        now, name = heapq.heappop(running)
        finished.add(name)
    return now


def generation_time(units: list[dict[str, Any]], rate: float, workers: int, gpus: int | None = None) -> dict:
    """Each unit's ``generation_s`` (its completions at ``rate``, written into the unit) and the
    plan's figures: ``worker_hours`` (the units' generation, summed), ``gpu_hours`` (on ``gpus``
    GPUs: the worker-hours, less where ``workers`` above ``gpus`` share cards, ``rate`` then being
    a shared card's per unit; None without GPUs), ``generation_wall_time_s`` (:func:`schedule`)
    and ``longest_unit_generation_s``."""
    seconds = [unit["completions"] / rate for unit in units]
    for unit, unit_seconds in zip(units, seconds):
        unit["generation_s"] = unit_seconds
    worker_hours = sum(seconds) / 3600
    return {"rate_completions_per_s": rate, "workers": workers, "gpus": gpus, "worker_hours": worker_hours,
            "gpu_hours": None if gpus is None else worker_hours * min(1.0, gpus / workers),
            "longest_unit_generation_s": max(seconds, default=0.0),
            "generation_wall_time_s": schedule(units, seconds, workers) if units else 0.0}
