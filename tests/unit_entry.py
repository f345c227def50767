"""A validation unit's entry for the tests of :mod:`trajval_ops.experiment.unit_process`:
``main([record, exit_code, sleep_s])`` records how its process was started, writes a line to
stdout and one to stderr, sleeps, then exits with ``exit_code`` ("raise": an exception)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(args: list[str]) -> int:
    record, exit_code, sleep_s = args
    from trajval_ops.experiment.unit_process import TRAINING_STACK

    Path(record).write_text(json.dumps({
        "pid": os.getpid(), "parent": os.getppid(), "argv": sys.argv, "cwd": os.getcwd(),
        "preloaded": {module: module in sys.modules for module in TRAINING_STACK},
        "env": {key: os.environ.get(key)
                for key in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}}))
    print("unit_entry: to stdout")
    print("unit_entry: to stderr", file=sys.stderr)
    time.sleep(float(sleep_s))
    if exit_code == "raise":
        raise ValueError("unit_entry: raised as asked")
    return int(exit_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
