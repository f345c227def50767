"""Benchmark the weighted task sampler against uniform sampling in the same run.

1. A ``get_indices``-style draw of a 64-task batch from a 17,398-task pool (DAPO-Math-17k
   size): time per call of the weighted sampler, the composed samplers (GRESO, BOTS) and the
   Trinity-RFT selector path vs ``rng.integers`` uniform sampling, timed in alternating blocks
   so machine noise hits both alike. Also the per-step feedback cost (the next draw rebuilds
   the table once, BOTS takes its Thompson sample then).
2. A 10,000,000-task pool: build time (validation + cumulative and guide tables) and per-call
   time, against uniform on the same pool.

Usage: python tools/bench/bench_sampler.py [--calls 5000] [--big 10000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from trajval_ops.samplers import BotsScheduler, ComposedSampler, GresoScheduler, WeightedIndexSampler

POOL = 17_398
BATCH = 64
ROLLOUTS = 16


def interleaved_us(fns: dict, calls: int, rounds: int = 7) -> dict:
    """Best-of-``rounds`` microseconds per call of each function, timed in alternating blocks."""
    best = {name: float("inf") for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def paper_like_weights(n: int, seed: int = 0) -> np.ndarray:
    """Weights shaped like TrajVal's: most tasks at the floor eps = 0.05, the rest in (eps, 1]."""
    rng = np.random.default_rng(seed)
    w = np.full(n, 0.05)
    learnable = rng.random(n) < 0.3
    w[learnable] = rng.random(learnable.sum()) ** 0.3
    return np.maximum(w, 0.05)


def _trinity_selector(weights: np.ndarray):
    """The registered Trinity-RFT selector, when trinity-rft is installed."""
    try:
        from datasets import Dataset
        from trinity.buffer.reader.file_reader import _HFBatchReader
        from trinity.common.config import DataSelectorConfig

        from trajval_ops.samplers.trinity import TrajvalSelector
    except ImportError:
        return None
    reader = _HFBatchReader(Dataset.from_dict({"trajval_weight": weights}), name="bench",
                            default_batch_size=BATCH, enable_progress_bar=False)
    return TrajvalSelector(reader, DataSelectorConfig(selector_type="trajval", seed=1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--big", type=int, default=10_000_000)
    args = parser.parse_args(argv)

    weights = paper_like_weights(POOL)
    rng = np.random.default_rng(1)
    plain = WeightedIndexSampler(weights, seed=1)
    greso = ComposedSampler(weights, online=GresoScheduler(POOL), seed=1)
    bots = ComposedSampler(weights, online=BotsScheduler(POOL), seed=1)
    fns = {
        "uniform rng.integers": lambda: rng.integers(0, POOL, BATCH),
        "weighted (prior only)": lambda: plain.draw(BATCH),
        "composed with GRESO": lambda: greso.draw(BATCH),
        "composed with BOTS": lambda: bots.draw(BATCH),
    }
    selector = _trinity_selector(weights)
    if selector is not None:
        fns["Trinity selector get_indices"] = lambda: selector.get_indices(BATCH)
    times = interleaved_us(fns, args.calls)
    base = times["uniform rng.integers"]
    print(f"pool {POOL:,} tasks, batch {BATCH}, best of 7 blocks of {args.calls:,} calls (alternating)")
    for name, us in times.items():
        print(f"  {name:30s} {us:8.2f} us/call   {us / base:5.2f}x of uniform")

    ids = np.repeat(np.arange(BATCH), ROLLOUTS)
    rewards = (np.random.default_rng(2).random(ids.size) < 0.5).astype(float)

    def step(composed):
        composed.feedback(ids, rewards)
        composed.draw(BATCH)

    steps = interleaved_us({"GRESO": lambda: step(greso), "BOTS": lambda: step(bots)},
                           max(args.calls // 50, 10), rounds=3)
    for name, us in steps.items():
        print(f"  feedback ({BATCH} tasks x {ROLLOUTS} rollouts) + next draw, {name:5s} {us / 1e3:7.2f} ms/step"
              " (table rebuild" + (", Thompson sample)" if name == "BOTS" else ")"))

    big = paper_like_weights(args.big, seed=3)
    start = time.perf_counter()
    big_sampler = WeightedIndexSampler(big, seed=1)
    build = time.perf_counter() - start
    big_rng = np.random.default_rng(1)
    big_times = interleaved_us({
        "uniform rng.integers": lambda: big_rng.integers(0, args.big, BATCH),
        "weighted (guide table)": lambda: big_sampler.draw(BATCH),
    }, max(args.calls // 5, 100))
    print(f"pool {args.big:,} tasks: build {build * 1e3:.0f} ms (validate, normalise, cumulative + guide tables)")
    big_base = big_times["uniform rng.integers"]
    for name, us in big_times.items():
        print(f"  {name:30s} {us:8.2f} us/call   {us / big_base:5.2f}x of uniform")


if __name__ == "__main__":
    main()
