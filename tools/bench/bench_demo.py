"""Benchmark: the demo (recipes/demo_trajval.yaml, then recipes/resample_pool.yaml) per stage.

Runs both recipes through ``dj-process`` in a fresh output directory and prints, per stage
(probe, early pass, late pass, scoring, resampling), the operator's time from Data-Juicer's
log, its share of the pipeline, and the wall time and peak RSS (process tree) of each run.

    python tools/bench/bench_demo.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_score_resample import REPO, run_measured  # noqa: E402

STAGES = ["probe", "early pass", "late pass", "scoring"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trajval_demo_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)

    text = (REPO / "recipes" / "demo_trajval.yaml").read_text().replace("outputs/demo", str(workdir / "demo"))
    recipe = workdir / "demo_trajval.yaml"
    recipe.write_text(text)
    weighted = yaml.safe_load(text)["export_path"]
    from trajval_ops.commands import dj_process_path

    dj = dj_process_path()
    demo_wall, demo_rss, demo_log = run_measured([dj, "--config", str(recipe)])
    resample_wall, resample_rss, resample_log = run_measured(
        [dj, "--config", "recipes/resample_pool.yaml", "--dataset_path", weighted,
         "--export_path", str(workdir / "demo" / "resampled.jsonl")])

    times = [float(t) for t in re.findall(r"OP \[trajval_\w+\] Done in ([0-9.]+)s", demo_log)]
    times += [float(t) for t in re.findall(r"OP \[trajval_weighted_resampler\] Done in ([0-9.]+)s", resample_log)]
    total = sum(times)
    stages = {name: {"s": round(t, 1), "share": round(t / total, 3)}
              for name, t in zip(STAGES + ["resampling"], times)}
    print(json.dumps({
        "stages": stages,
        "demo_recipe": {"wall_s": round(demo_wall, 1), "peak_rss_mib": round(demo_rss)},
        "resample_recipe": {"wall_s": round(resample_wall, 1), "peak_rss_mib": round(resample_rss)},
    }, indent=2))


if __name__ == "__main__":
    main()
