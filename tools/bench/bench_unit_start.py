"""Benchmark: how a CPU validation unit's process starts, a fresh interpreter against a fork of
the preloaded training process (:mod:`trajval_ops.experiment.unit_process`).

Runs smoke.yaml's four uniform units (4 GRPO steps of tiny-arith, held-out evaluations at steps
0, 2 and 4) one at a time, each both ways in interleaved rounds, timing start to exit. Prints
the medians, their ratio, the first forked unit's time (the fork server's start, once a run,
included) and whether each unit's held-out trajectories came out byte for byte the same both
ways (exit 1 if not).

    python tools/bench/bench_unit_start.py [--rounds 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from trajval_ops.experiment import unit_process  # noqa: E402
from trajval_ops.experiment.protocol import _start_unit, arm_units, prepare_data  # noqa: E402
from trajval_ops.experiment.validation_config import load_config  # noqa: E402


def run_once(unit, fork: bool) -> tuple[float, bytes]:
    """Start to exit of one unit (its earlier folder removed and its spec written first, as the
    protocol restarts a unit); its held-out trajectories."""
    started = time.perf_counter()
    process = _start_unit(unit, unit_process.environment(), fork)
    while process.poll() is None:
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    if process.returncode != 0 or not unit.done():
        raise SystemExit(f"{unit.name} failed (exit {process.returncode}): {unit.log.read_text()[-2000:]}")
    return seconds, (unit.folder / "heldout.jsonl").read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_unit_start_"))
    config = load_config(REPO / "recipes" / "validation" / "smoke.yaml")
    prepare_data(config, workdir)
    units = [u for u in arm_units(config, workdir) if u.name.startswith("arms/uniform")]
    first_s, _ = run_once(units[0], fork=True)  # starts the fork server: once a run
    times: dict[bool, list[float]] = {False: [], True: []}
    same = []
    for _ in range(args.rounds):
        for unit in units:
            fresh, fresh_heldout = run_once(unit, fork=False)
            forked, forked_heldout = run_once(unit, fork=True)
            times[False].append(fresh)
            times[True].append(forked)
            same.append(fresh_heldout == forked_heldout)
    fresh, forked = statistics.median(times[False]), statistics.median(times[True])
    print(f"{len(units)} smoke.yaml units x {args.rounds} rounds, one at a time, 1 torch thread")
    print(f"fresh interpreter: median {fresh:.2f} s a unit (min {min(times[False]):.2f}, max {max(times[False]):.2f})")
    print(f"forked:            median {forked:.2f} s a unit (min {min(times[True]):.2f}, max {max(times[True]):.2f})")
    print(f"ratio fresh / forked: {fresh / forked:.2f}x; the first forked unit, the fork server's start "
          f"(once a run) included: {first_s:.2f} s")
    print(f"held-out trajectories byte for byte the same both ways: {sum(same)} of {len(same)}")
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
