"""Run the endpoint mapper over a pool in this process and SIGKILL it, as a kill -9 would, right
after the rollout cache received its ``KILL_AFTER``-th generate call (the interrupt test)."""

import json
import os
import signal
import sys

from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

KILL_AFTER = 3

if __name__ == "__main__":
    pool, cache_dir = sys.argv[1], sys.argv[2]
    rows = [json.loads(line) for line in open(pool)]
    op = TrajvalEndpointRewardMapper(model="tiny-random-llama", output_key="acc", engine="transformers",
                                     n=2, max_new_tokens=48, prompts_per_generate=1, cache_dir=cache_dir)
    op._prepare()
    put_many, calls = op._cache.put_many, []

    def put_then_die(records):
        put_many(records)
        calls.append(len(records))
        if len(calls) == KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)

    op._cache.put_many = put_then_die
    op.process_batched({key: [row[key] for row in rows] for key in rows[0]})
