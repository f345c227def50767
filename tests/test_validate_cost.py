"""``trajval validate``'s charge per arm (``results.json`` -> ``cost``), by hand from a probe
unit's recorded costs."""

from __future__ import annotations

import dataclasses
import json

from tests.conftest import REPO
from trajval_ops import fields
from trajval_ops.experiment.validation_config import load_config

SMOKE = REPO / "recipes" / "validation" / "smoke.yaml"
PROBE, EARLY, LATE, ADAPTIVE, SHORT = 640, 16, 16, 10, 4  # completions: the probe's, then each row's per pass


def _probe_run(out, rows=8):
    """A probe unit's output: its manifest's cost and per-row pass costs (early, late, the adaptive
    late pass, the sampled prior's short pass), in the provenance the endpoint passes write."""
    from trajval_ops.experiment.priors import ADAPTIVE_LATE, SAMPLED_SHORT
    from trajval_ops.experiment.results import probe_manifest_path
    from trajval_ops.probe.manifest import write_manifest

    manifest = probe_manifest_path(out)
    write_manifest(manifest.parent, {"cost": {"completions": PROBE, "generated_tokens": 0, "wall_time_s": 1.0}})
    checkpoint = {"name": "epoch-2", "manifest": str(manifest)}

    def cost(completions, late=False):
        return {"cost": {"completions": completions, "generated_tokens": 0}} | ({"checkpoint": checkpoint} if late else {})

    lines = [json.dumps({"id": f"t{i}", "extra_info": {"family": "ab"[i % 2]},
                         fields.R_EARLY: 0.5, f"{fields.R_EARLY}_provenance": cost(EARLY),
                         fields.R_LATE: 0.5, f"{fields.R_LATE}_provenance": cost(LATE, late=True),
                         ADAPTIVE_LATE: 0.5, f"{ADAPTIVE_LATE}_provenance": cost(ADAPTIVE, late=True),
                         SAMPLED_SHORT: 0.5, f"{SAMPLED_SHORT}_provenance": cost(SHORT)}) + "\n" for i in range(rows)]
    (out / "probe" / "weighted.jsonl").write_text("".join(lines))
    return [json.loads(line) for line in lines]


def test_each_arm_is_charged_what_its_spec_reads_each_stage_once(tmp_path):
    """BOTS's reference models are the probe's two endpoint passes: BOTS is charged the probe and
    both passes as TrajVal is (it was charged nothing), BOTS+TrajVal pays for them once."""
    from trajval_ops.experiment.priors import sampled_rows
    from trajval_ops.experiment.results import prior_costs

    config = load_config(SMOKE)
    arms = ("uniform", "greso", "trajval", "variance", "bots", "bots_trajval", "greso_trajval", "trajval_adaptive",
            "trajval_sampled", "variance_other_model", "oracle")
    config = dataclasses.replace(config, training=dataclasses.replace(config.training, arms=arms))
    rows = _probe_run(tmp_path)
    passes = PROBE + len(rows) * (EARLY + LATE)
    measured = int(sampled_rows(rows, config.group_key).sum())
    oracle = config.oracle
    batch = config.grpo.prompts_per_batch * config.grpo.num_generations  # oracle A's record is absent: the batch
    expected = {
        "uniform": 0, "greso": 0, "variance_other_model": 0, "variance": len(rows) * EARLY,
        "trajval": passes, "greso_trajval": passes, "bots": passes, "bots_trajval": passes,
        "trajval_adaptive": PROBE + len(rows) * (EARLY + ADAPTIVE),
        "trajval_sampled": PROBE + measured * (EARLY + LATE) + len(rows) * SHORT,
        "oracle": oracle.steps * batch + (oracle.steps // oracle.every_steps + 1) * oracle.n * len(rows),
    }
    assert 0 < measured < len(rows)
    assert prior_costs(config, tmp_path)["by_arm"] == expected
