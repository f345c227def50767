"""Benchmark: the drawn-pool check (:func:`trajval_ops.samplers.weighted.weight_draws`) on a large
pool, against reading the same pool, both measured in the same run.

The pool is a scored pool with a drawn one after it (``cat scored.jsonl drawn.jsonl``): its first
row was never drawn, so the check reads the whole provenance column. It is written as the pool
writer writes JSON lines (the resampler's record once per run, each row a reference) and read
three ways, each timed, then checked:

- ``read_table`` (the operators' reader: the records expanded into a struct column);
- ``datasets``' ``json`` loader (the trainers' examples: references and the sparse record column).
  It infers the record column's type from the first rows and refuses a later record with a new
  field (the drawn run's, half a million rows on), so it reads the same rows with the drawn half
  first; the check reads the whole column either way;
- ``json.loads`` per line, the columns gathered into lists (``TrajvalSampler.from_dataset(rows)``).

    python tools/bench/bench_drawn_check.py [--rows 1000000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from trajval_ops import fields  # noqa: E402


def make_pool(path: Path, rows: int, seed: int = 0, drawn_first: bool = False) -> None:
    """``rows`` rows: the first half scored, the second half drawn from them (systematic); or the
    drawn half first."""
    import pyarrow as pa

    from trajval_ops.pools.io import write_table

    rng = np.random.default_rng(seed)
    weight = np.maximum(rng.random(rows) ** 3, 0.05)
    half = rows // 2
    drawn = {"mode": "systematic", "seed": 0, "num_samples": rows - half, "pool_rows": half,
             "weight_key": fields.WEIGHT, "online_weight_key": None, "threshold": None, "profiles": None,
             "shuffle": False, "trajval_ops_version": "bench"}
    table = pa.table({
        "extra_info": pa.array([{"index": f"b-{i}"} for i in range(rows)]),
        fields.WEIGHT: pa.array(weight),
        fields.SCORE_PROVENANCE: pa.array([{"alpha": 0.3, "eps": 0.05, "score": "trajval"}] * rows),
        fields.RESAMPLE_PROVENANCE: pa.array([None] * half + [drawn] * (rows - half)),
    })
    if drawn_first:
        table = pa.concat_tables([table.slice(half), table.slice(0, half)])
    write_table(table, path)


def timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", help="where the pool is written (default: a temporary folder)")
    args = parser.parse_args(argv)

    from datasets import load_dataset

    from trajval_ops.fields import PROVENANCE_RECORD, PROVENANCE_REF, RESAMPLE_PROVENANCE
    from trajval_ops.pools.io import read_table
    from trajval_ops.samplers.weighted import weight_draws

    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        pool, drawn_first = Path(workdir) / "pool.jsonl", Path(workdir) / "drawn_first.jsonl"
        _, made = timed(lambda: make_pool(pool, args.rows))
        make_pool(drawn_first, args.rows, drawn_first=True)
        results = {"rows": args.rows, "pool_bytes": pool.stat().st_size, "make_s": round(made, 2)}

        def read_lines():
            rows = [json.loads(line) for line in pool.read_text().splitlines()]
            keys = (fields.WEIGHT, RESAMPLE_PROVENANCE, PROVENANCE_REF, PROVENANCE_RECORD)
            return {key: [row.get(key) for row in rows] for key in keys}

        readers = {
            "read_table": lambda: read_table(pool),
            "datasets_json": lambda: load_dataset("json", data_files=str(drawn_first), split="train",
                                                  cache_dir=str(Path(workdir) / "hf")),
            "json_loads_columns": read_lines,
        }
        for name, read in readers.items():
            dataset, read_s = timed(read)
            draws, check_s = timed(lambda: weight_draws(dataset))
            assert draws.rows == args.rows - args.rows // 2 and draws.pool_rows == args.rows, draws
            results[name] = {"read_s": round(read_s, 3), "check_s": round(check_s, 4),
                             "check_over_read": round(check_s / read_s, 4)}
            del dataset
    for name in readers:
        r = results[name]
        print(f"{name:>20}: read {r['read_s']:8.3f} s, drawn-pool check {r['check_s']:8.4f} s "
              f"({r['check_over_read']:.2%} of the read)")
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
