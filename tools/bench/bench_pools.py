#!/usr/bin/env python
"""Benchmark the pool importer on a DAPO-like raw release (each problem repeated ``--copies`` times).

Prints wall time, rows/s and peak RSS of ``import_pool`` (parquet in, deduplicated canonical
JSONL out), and its ratio against a baseline measured in the same run: reading the same parquet
and writing every row as JSON (the I/O any importer must do).

    python tools/bench/bench_pools.py --problems 2000 --copies 100
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trajval_ops.pools.importers import import_pool  # noqa: E402
from trajval_ops.pools.io import read_rows  # noqa: E402

INSTRUCTION = ("Solve the following math problem step by step. The last line of your response should be "
               "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")


def write_raw_pool(path: Path, problems: int, copies: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": f"{INSTRUCTION}Let x_{k} be the {k}-th term of a sequence "
                    f"with x_1 = {k % 97 + 1}. Compute the remainder of x_{k} squared modulo {k + 7}.\n\n"
                    "Remember to put your answer on its own line after \"Answer:\"."}],
        "ability": "MATH",
        "reward_model": {"ground_truth": str(k * k % (k + 7)), "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": f"{k:08d}-{copy:04d}"},
    } for copy in range(copies) for k in range(problems)]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=65536)


def baseline(source: Path, out: Path) -> int:
    count = 0
    with open(out, "w", encoding="utf-8") as handle:
        for row in read_rows(source):
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", type=int, default=2000)
    parser.add_argument("--copies", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "raw.parquet"
        write_raw_pool(source, args.problems, args.copies)
        start = time.perf_counter()
        rows = baseline(source, Path(tmp) / "baseline.jsonl")
        base_s = time.perf_counter() - start
        start = time.perf_counter()
        report = import_pool(str(source), str(Path(tmp) / "pool.jsonl"), progress=False)
        import_s = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows {rows} ({args.problems} problems x {args.copies} copies) -> {report.rows_written} tasks")
    print(f"baseline read+write JSON: {base_s:.2f} s ({rows / base_s:,.0f} rows/s)")
    print(f"import_pool:              {import_s:.2f} s ({rows / import_s:,.0f} rows/s), "
          f"ratio {import_s / base_s:.2f}x baseline; peak RSS {peak_mb:.0f} MB (whole process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
