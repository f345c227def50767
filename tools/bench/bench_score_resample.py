"""Benchmark: a large pool through recipes/score_pool.yaml then recipes/resample_pool.yaml.

Prints wall time and peak RSS (whole process tree) of each ``dj-process`` run and its ratio to
a plain orjson read-transform-write of the same rows measured in the same run (parse each line,
compute the same new columns with the same numpy functions, dump each row, write the file; no
checks, no provenance, no Data-Juicer), each output's growth in bytes per row beyond its new
value columns (the run provenance, stored once per file), and the scoring operator's own time
against a bare numpy pass over the same arrays.

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
    """A verl-style pool with endpoint rewards on a 1/16 grid, written as compact JSONL (as the
    writer writes it, so the size growth counts only what the recipes add)."""
    rng = np.random.default_rng(seed)
    r_early = rng.integers(0, 17, rows) / 16
    r_late = np.clip(r_early + rng.integers(-4, 9, rows) / 16, 0, 1)
    a, b = rng.integers(2, 1000, rows), rng.integers(2, 1000, rows)
    with open(path, "w") as f:
        for i in range(rows):
            f.write(
                '{"data_source":"bench","prompt":[{"role":"user","content":"What is %d + %d?"}],'
                '"reward_model":{"ground_truth":"%d","style":"rule"},"extra_info":{"index":"b-%d"},'
                '"trajval_r_early":%r,"trajval_r_late":%r}\n'
                % (a[i], b[i], a[i] + b[i], i, float(r_early[i]), float(r_late[i]))
            )
    return r_early, r_late


def numpy_scoring(r_early: np.ndarray, r_late: np.ndarray) -> float:
    """Seconds for the plain numpy pass: delta, score, weight, probability, profile."""
    start = time.perf_counter()
    core.normalize(core.sampling_weight(core.learnability_score(r_early, r_late)))
    core.endpoint_profiles(r_early, r_late)
    return time.perf_counter() - start


def orjson_score(pool: Path, out: Path) -> float:
    """Seconds for the plain baseline of score_pool.yaml: the same new columns, no provenance."""
    import orjson

    start = time.perf_counter()
    rows = [orjson.loads(line) for line in pool.read_bytes().splitlines()]
    r_early = np.array([row["trajval_r_early"] for row in rows])
    r_late = np.array([row["trajval_r_late"] for row in rows])
    score = core.learnability_score(r_early, r_late)
    columns = {"trajval_delta": core.reward_delta(r_early, r_late).tolist(), "trajval_score": score.tolist(),
               "trajval_weight": core.sampling_weight(score).tolist(),
               "trajval_profile": core.endpoint_profiles(r_early, r_late).tolist()}
    for i, row in enumerate(rows):
        for name, values in columns.items():
            row[name] = values[i]
    out.write_bytes(b"\n".join(map(orjson.dumps, rows)) + b"\n")
    return time.perf_counter() - start


def orjson_resample(scored: Path, out: Path) -> float:
    """Seconds for the plain baseline of resample_pool.yaml (systematic, as many rows as the pool)."""
    import orjson

    start = time.perf_counter()
    rows = [orjson.loads(line) for line in scored.read_bytes().splitlines()]
    prob = core.normalize(np.array([row["trajval_weight"] for row in rows]))
    indices = core.systematic_indices(prob, len(rows), 0)
    lines = [orjson.dumps({**rows[i], "trajval_prob": float(prob[i]), "trajval_source_row": int(i)})
             for i in indices.tolist()]
    out.write_bytes(b"\n".join(lines) + b"\n")
    return time.perf_counter() - start


def new_column_bytes(path: Path, names: tuple[str, ...]) -> int:
    """Bytes the named columns take in a JSON-lines file: ``,"name":value`` per row holding them."""
    import orjson

    total = 0
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        total += sum(len(orjson.dumps({name: row[name]})) - 1 for name in names if name in row)
    return total


def drawn_input_bytes(scored: Path, resampled: Path) -> int:
    """Bytes of the input lines the resample drew (each as often as it was drawn)."""
    import orjson

    sizes = [len(line) + 1 for line in scored.read_bytes().splitlines()]
    return sum(sizes[orjson.loads(line)["trajval_source_row"]] for line in resampled.read_bytes().splitlines())


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
    plain_scored, plain_resampled = workdir / "plain_scored.jsonl", workdir / "plain_resampled.jsonl"
    orjson_score_s = orjson_score(pool, plain_scored)
    orjson_resample_s = orjson_resample(plain_scored, plain_resampled)
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

    score_columns = ("trajval_delta", "trajval_score", "trajval_weight", "trajval_profile")
    resample_columns = ("trajval_prob", "trajval_source_row")
    score_growth = scored.stat().st_size - pool.stat().st_size - new_column_bytes(scored, score_columns)
    resample_growth = (resampled.stat().st_size - drawn_input_bytes(scored, resampled)
                       - new_column_bytes(resampled, resample_columns))
    results = {
        "rows": args.rows,
        "numpy_scoring_s": round(baseline, 4),
        "orjson_score_s": round(orjson_score_s, 1),
        "orjson_resample_s": round(orjson_resample_s, 1),
        "score_pool_wall_s": round(score_wall, 1),
        "score_pool_vs_orjson": round(score_wall / orjson_score_s, 2),
        "resample_pool_vs_orjson": round(resample_wall / orjson_resample_s, 2),
        "pool_mib": round(pool.stat().st_size / 2**20, 1),
        "scored_mib": round(scored.stat().st_size / 2**20, 1),
        "resampled_mib": round(resampled.stat().st_size / 2**20, 1),
        "score_provenance_bytes_per_row": round(score_growth / args.rows, 2),
        "resample_provenance_bytes_per_row": round(resample_growth / args.rows, 2),
        "score_pool_peak_rss_mib": round(score_rss),
        "scoring_op_s": score_op,
        "scoring_op_vs_numpy": round(score_op / baseline, 1),
        "resample_pool_wall_s": round(resample_wall, 1),
        "resample_pool_peak_rss_mib": round(resample_rss),
        "resample_op_s": resample_op,
        "both_recipes_wall_s": round(score_wall + resample_wall, 1),
    }
    print(json.dumps(results, indent=2))
    print(f"score_pool.yaml = {results['score_pool_vs_orjson']}x and resample_pool.yaml = "
          f"{results['resample_pool_vs_orjson']}x a plain orjson read-transform-write of the same rows; "
          f"provenance {results['score_provenance_bytes_per_row']} / {results['resample_provenance_bytes_per_row']} "
          f"bytes per row beyond the new columns")
    print(f"scoring operator = {results['scoring_op_vs_numpy']}x the plain numpy pass on the same arrays; "
          f"both recipes {results['both_recipes_wall_s']} s, peak RSS "
          f"{max(score_rss, resample_rss) / 1024:.2f} GiB")


if __name__ == "__main__":
    main()
