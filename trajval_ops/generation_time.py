"""Completions into hours, one set of rules for every plan: ``trajval validate --dry-run`` (the
protocol's units) and ``trajval cost`` (a recipe's stages).

``--rate`` means one thing in every command: completions per second per GPU (per worker process
on a machine without a GPU). Units run ``workers`` side by side, in order, each once the units it
waits for (its ``after``) have finished (:func:`schedule`); units that share a card share its
rate, and a run spread over several GPUs (a trainer's run) generates at the rate times its GPUs
(:func:`run_generation`). A GPU-hour is then ``3600 x rate`` completions whatever the spread. A
plan for another machine (``--gpus N``) needs a rate measured there: this machine's says nothing
of theirs. Generation only: training's backward passes and the units' start-ups come on top.
"""

from __future__ import annotations

import heapq
import math
import argparse
from typing import Any

RATE_HELP = ("completions per second per GPU (per worker process on a machine without a GPU), measured where "
             "the run will go: adds the GPU-hours of the generation")
PRICE_HELP = "the price of a GPU-hour, with --rate: prices the GPU-hours"


def add_rate_option(parser: argparse.ArgumentParser | Any, note: str = "") -> None:
    """``--rate``, declared once for every command that plans hours (``note``: what it adds there)."""
    parser.add_argument("--rate", type=float, default=None, metavar="COMPLETIONS_PER_S_PER_GPU",
                        help=RATE_HELP + (f"; {note}" if note else ""))


def add_price_option(parser: argparse.ArgumentParser | Any) -> None:
    """``--price``, per GPU-hour, with ``--rate``."""
    parser.add_argument("--price", type=float, default=None, metavar="PER_GPU_HOUR", help=PRICE_HELP)


def check_rate(rate: float | None, price: float | None = None) -> None:
    """Refuse a rate or price that is not a positive number, and a price without a rate.

    :raises ValueError: naming the option and what it needs.
    """
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"--rate {rate} must be a positive number of completions per second per GPU")
    if price is not None and not (math.isfinite(price) and price > 0):
        raise ValueError(f"--price {price} must be a positive number per GPU-hour")
    if price is not None and rate is None:
        raise ValueError("--price prices GPU-hours: give --rate, completions per second per GPU")


def check_rate_and_gpus(rate: float | None, gpus: int | None) -> None:
    """Refuse a rate that is not a positive number, a GPU count below 1, and GPUs without a rate.

    :raises ValueError: naming the option (``--rate``, ``--gpus``) and what it needs.
    """
    check_rate(rate)
    if gpus is not None:
        if gpus < 1:
            raise ValueError(f"--gpus {gpus} must be at least 1")
        if rate is None:
            raise ValueError("--gpus plans a run on other machines: give --rate, completions per second per GPU "
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
    """Each unit's ``generation_s`` (written into the unit) and the plan's figures, at ``rate``
    completions per second per GPU (per worker without ``gpus``): ``unit_rate`` (a unit's share:
    the rate, or less where ``workers`` above ``gpus`` share cards), ``worker_hours`` (the units'
    generation, summed), ``gpu_hours`` (the completions at ``rate``; None without GPUs),
    ``generation_wall_time_s`` (:func:`schedule`) and ``longest_unit_generation_s``."""
    unit_rate = rate if gpus is None else rate * min(1.0, gpus / workers)
    seconds = [unit["completions"] / unit_rate for unit in units]
    for unit, unit_seconds in zip(units, seconds):
        unit["generation_s"] = unit_seconds
    completions = sum(unit["completions"] for unit in units)
    return {"rate_completions_per_s": rate, "unit_rate_completions_per_s": unit_rate, "workers": workers,
            "gpus": gpus, "worker_hours": sum(seconds) / 3600,
            "gpu_hours": None if gpus is None else completions / rate / 3600,
            "longest_unit_generation_s": max(seconds, default=0.0),
            "generation_wall_time_s": schedule(units, seconds, workers) if units else 0.0}


def run_generation(completions: int, rate: float, gpus: int) -> dict:
    """One run whose ``gpus`` GPUs generate its completions together (a trainer's run: its rollout
    workers over every GPU it holds), at ``rate`` per GPU: ``generation_s`` and ``gpu_hours``."""
    return {"generation_s": completions / (rate * gpus), "gpu_hours": completions / rate / 3600}
