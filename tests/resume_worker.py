"""Run the endpoint mapper over a pool in this process and SIGKILL it, as a kill -9 would (the
interrupt tests).

    python tests/resume_worker.py POOL CACHE_DIR [OPTIONS_JSON [KILL_AT [BATCH_SIZE]]]

``KILL_AT`` is ``put:K`` (right after the rollout cache received its K-th write, the default
``put:3``) or ``round_call:K`` (right after an adaptive pass's K-th generate call, before its
round ends); the pool goes through ``process_batched`` in batches of ``BATCH_SIZE`` rows (all
rows in one batch by default), as Data-Juicer would hand them over.
"""

import json
import os
import signal
import sys

from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
from trajval_ops.rollout.pass_rates import RolloutPass

DEFAULT_OPTIONS = dict(model="tiny-random-llama", output_key="acc", engine="transformers", n=2, max_new_tokens=48,
                       prompts_per_generate=1)


def die_after(owner, method: str, count: int) -> None:
    """Wrap ``owner.method`` so that the process kills itself after its ``count``-th call."""
    original, calls = getattr(owner, method), []

    def call_then_die(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append(1)
        if len(calls) == count:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, method, call_then_die)


if __name__ == "__main__":
    pool, cache_dir = sys.argv[1], sys.argv[2]
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_OPTIONS
    where, _, count = (sys.argv[4] if len(sys.argv) > 4 else "put:3").partition(":")
    rows = [json.loads(line) for line in open(pool)]
    batch_size = int(sys.argv[5]) if len(sys.argv) > 5 else len(rows)
    op = TrajvalEndpointRewardMapper(**options, cache_dir=cache_dir)
    from trajval_ops.pools.io import read_table

    op.check_pool(read_table(pool))  # as a run does first (a sampled pass draws its sample here)
    op.endpoint._prepare()
    if where == "put":
        die_after(op.endpoint._cache, "put_many", int(count))
    else:
        die_after(RolloutPass, "_round_call", int(count))
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        op.process_batched({key: [row[key] for row in batch] for key in batch[0]})
