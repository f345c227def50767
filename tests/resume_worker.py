"""Run the endpoint mapper over a pool in this process (the interrupt test kills it midway)."""

import json
import sys

from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

if __name__ == "__main__":
    pool, cache_dir = sys.argv[1], sys.argv[2]
    rows = [json.loads(line) for line in open(pool)]
    op = TrajvalEndpointRewardMapper(model="tiny-random-llama", output_key="acc", engine="transformers",
                                     n=2, max_new_tokens=48, prompts_per_generate=1, cache_dir=cache_dir)
    op.process_batched({key: [row[key] for row in rows] for key in rows[0]})
