#!/usr/bin/env python
"""Benchmark of tools/report.py on a synthetic weighted pool with dense trajectories.

    python tools/bench/bench_analysis.py [--rows 200000] [--checkpoints 11]

Prints the wall time of the report (pool + trajectories + figures), of the within-bin split,
and their ratio to a baseline measured in the same run: parsing the same two JSONL files with
``json.loads`` and nothing else.  Peak RSS of the process is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from trajval_ops import core
from trajval_ops.analysis import pool_columns, within_bin
from trajval_ops.pools.io import read_rows  # noqa: E402
from trajval_ops.analysis.pool_report import build_report


def write_inputs(directory: Path, rows: int, checkpoints: int, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 1, rows)
    gain = rng.uniform(-0.4, 0.6, rows)
    acc = np.clip(start[:, None] + gain[:, None] * np.linspace(0, 1, checkpoints)
                  + rng.normal(0, 0.04, (rows, checkpoints)), 0, 1)
    acc = np.round(acc * 16) / 16
    r_early, r_late = acc[:, 0], acc[:, -1]
    score = core.learnability_score(r_early, r_late)
    weight = core.sampling_weight(score)
    profile = core.endpoint_profiles(r_early, r_late)
    pool, traj = directory / "pool.jsonl", directory / "traj.jsonl"
    with open(pool, "w") as p, open(traj, "w") as t:
        for i in range(rows):
            p.write(json.dumps({"id": i, "trajval_r_early": r_early[i], "trajval_r_late": r_late[i],
                                "trajval_score": score[i], "trajval_weight": weight[i],
                                "trajval_profile": profile[i]}) + "\n")
            t.write(json.dumps({"id": i, "accuracies": acc[i].tolist()}) + "\n")
    return pool, traj


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--checkpoints", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pool, traj = write_inputs(tmp, args.rows, args.checkpoints)
        baseline = timed(lambda: (list(read_rows(pool)), list(read_rows(traj))))
        report = timed(lambda: build_report(pool, tmp / "report", trajectories_path=traj))

        def split():
            rows = list(read_rows(pool))
            cols = pool_columns.pool_columns(rows)
            within_bin.write_within_bin(rows, within_bin.within_bin_split(cols["r_early"], cols["delta"]), tmp / "wb")

        subpools = timed(split)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows={args.rows} checkpoints={args.checkpoints}")
    print(f"baseline (json.loads of pool + trajectories): {baseline:.2f} s")
    print(f"report (pool + trajectories + 6 figures):      {report:.2f} s  ({report / baseline:.2f}x baseline)")
    print(f"within-bin split + 6 JSONL sub-pools:          {subpools:.2f} s  ({subpools / baseline:.2f}x baseline)")
    print(f"peak RSS: {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
