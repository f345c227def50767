"""Benchmark: a large pool through recipes/score_pool.yaml then recipes/resample_pool.yaml.

Prints wall time and peak RSS (whole process tree) of each ``dj-process`` run, the scoring
operator's own time from the Data-Juicer log, and the same scoring done by a plain numpy pass
over the same arrays in this run (the baseline the ratio is taken against).

    python tools/bench/bench_score_resample.py [--rows 1000000] [--np 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from trajval_ops import core  # noqa: E402


def make_pool(path: Path, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A verl-style pool with endpoint rewards on a 1/16 grid, written as JSONL."""
    rng = np.random.default_rng(seed)
    r_early = rng.integers(0, 17, rows) / 16
    r_late = np.clip(r_early + rng.integers(-4, 9, rows) / 16, 0, 1)
    a, b = rng.integers(2, 1000, rows), rng.integers(2, 1000, rows)
    with open(path, "w") as f:
        for i in range(rows):
            f.write(
                '{"data_source": "bench", "prompt": [{"role": "user", "content": "What is %d + %d?"}], '
                '"reward_model": {"ground_truth": "%d", "style": "rule"}, "extra_info": {"index": "b-%d"}, '
                '"trajval_r_early": %r, "trajval_r_late": %r}\n'
                % (a[i], b[i], a[i] + b[i], i, float(r_early[i]), float(r_late[i]))
            )
    return r_early, r_late


def numpy_scoring(r_early: np.ndarray, r_late: np.ndarray) -> float:
    """Seconds for the plain numpy pass: delta, score, weight, probability, profile."""
    start = time.perf_counter()
    core.normalize(core.sampling_weight(core.learnability_score(r_early, r_late)))
    core.endpoint_profiles(r_early, r_late)
    return time.perf_counter() - start


def run_measured(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS of the process tree in MiB, combined output) of a command."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = 0
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    reader.join()
    wall = time.perf_counter() - start
    text = "".join(output)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{text[-4000:]}")
    return wall, peak / 2**20, text


def op_seconds(log: str, op: str) -> float:
    match = re.search(rf"OP \[{op}\] Done in ([0-9.]+)s", log)
    return float(match.group(1)) if match else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--np", type=int, default=None, help="processes for dj-process (default: the recipe's)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trajval_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    pool, scored, resampled = workdir / "pool.jsonl", workdir / "scored.jsonl", workdir / "resampled.jsonl"
    t0 = time.perf_counter()
    r_early, r_late = make_pool(pool, args.rows)
    print(f"pool: {args.rows} rows, {pool.stat().st_size / 2**20:.0f} MiB, made in {time.perf_counter() - t0:.1f} s")

    baseline = min(numpy_scoring(r_early, r_late) for _ in range(3))
    dj = str(Path(sys.executable).with_name("dj-process"))
    np_args = ["--np", str(args.np)] if args.np else []
    score_wall, score_rss, score_log = run_measured(
        [dj, "--config", "recipes/score_pool.yaml", "--dataset_path", str(pool), "--export_path", str(scored),
         *np_args])
    resample_wall, resample_rss, resample_log = run_measured(
        [dj, "--config", "recipes/resample_pool.yaml", "--dataset_path", str(scored), "--export_path",
         str(resampled), *np_args])
    score_op = op_seconds(score_log, "trajval_learnability_mapper")
    resample_op = op_seconds(resample_log, "trajval_weighted_resampler")

    results = {
        "rows": args.rows,
        "numpy_scoring_s": round(baseline, 4),
        "score_pool_wall_s": round(score_wall, 1),
        "score_pool_peak_rss_mib": round(score_rss),
        "scoring_op_s": score_op,
        "scoring_op_vs_numpy": round(score_op / baseline, 1),
        "resample_pool_wall_s": round(resample_wall, 1),
        "resample_pool_peak_rss_mib": round(resample_rss),
        "resample_op_s": resample_op,
        "both_recipes_wall_s": round(score_wall + resample_wall, 1),
    }
    print(json.dumps(results, indent=2))
    print(f"scoring operator = {results['scoring_op_vs_numpy']}x the plain numpy pass on the same arrays; "
          f"both recipes {results['both_recipes_wall_s']} s, peak RSS "
          f"{max(score_rss, resample_rss) / 1024:.2f} GiB")


if __name__ == "__main__":
    main()
