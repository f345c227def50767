"""Benchmark: what the probe's sampling check costs (:class:`trajval_ops.probe.progress.SamplingCheck`,
one forward pass over 4 of the probe's prompts after each step's update, in the guard), on the
demo probe (``recipes/demo_trajval.yaml``: tiny-arith, the whole 600-task pool, one epoch of 75
steps), timed inside the same run: the checks' total against the probe's training wall time.

    python tools/bench/bench_sampling_check.py [--rows 600] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=600, help="probe rows from the demo pool (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()

    import torch
    import yaml

    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.progress import SamplingCheck
    from trajval_ops.probe.run import run_probe

    torch.set_num_threads(args.threads)
    recipe = yaml.safe_load((REPO / "recipes" / "demo_trajval.yaml").read_text())
    settings = recipe["process"][0]["trajval_probe_trainer"]
    config = ProbeConfig(**{k: v for k, v in settings.items() if k in ProbeConfig.__dataclass_fields__})
    rows = [json.loads(line) for line in (REPO / recipe["dataset_path"]).read_text().splitlines()][:args.rows]
    seconds: list[float] = []
    problem = SamplingCheck.problem

    def timed(self, model, device):
        start = time.perf_counter()
        try:
            return problem(self, model, device)
        finally:
            seconds.append(time.perf_counter() - start)

    SamplingCheck.problem = timed
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        manifest = run_probe(rows, [row["id"] for row in rows], config, out, show_progress=False)
        wall = time.perf_counter() - start
    result = {"rows": len(rows), "steps": len(seconds), "threads": args.threads, "probe_wall_s": round(wall, 2),
              "training_wall_s": manifest["wall_time_s"], "checks_s": round(sum(seconds), 4),
              "check_ms_median": round(1000 * sorted(seconds)[len(seconds) // 2], 3),
              "share_of_training": round(sum(seconds) / manifest["wall_time_s"], 5)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
