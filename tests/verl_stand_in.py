"""A CPU stand-in for ``python3 -m verl.trainer.main_ppo`` (tests/test_ray_jobs.py): reads the
Hydra overrides a ``trajval validate --trainer verl`` run gives, and writes the held-out curve
through verl's own file logger (``verl.utils.tracking.Tracking``, backend ``file``, at
``VERL_FILE_LOGGER_PATH``) where verl is installed, else lines of the same format.

The curve is made up, and tells the arms apart: accuracy ``0.2 + 0.04 * step`` (x 1.25 for a
run whose ``data.custom_cls`` draws by weight) ``+ 0.005 * seed``; each line also carries the
mean of the weight column the run was given (``stand_in/weight_mean``), read from its pool.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    overrides = dict(token.lstrip("+").split("=", 1) for token in argv)
    weighted = overrides.get("data.custom_cls.name") == "TrajvalVerlDataset"
    weight_mean = None
    if weighted:
        key = overrides["data.trajval.weight_key"]
        with open(overrides["data.train_files"]) as pool:
            weights = [json.loads(line)[key] for line in pool if line.strip()]
        weight_mean = sum(weights) / len(weights)
    seed, steps, every = int(overrides["data.seed"]), int(overrides["trainer.total_training_steps"]), int(
        overrides["trainer.test_freq"])
    source = "val-core/math_dapo/acc/mean@1"
    lines = [(step, {source: 0.2 + 0.04 * step * (1.25 if weighted else 1.0) + 0.005 * seed,
                     "stand_in/weight_mean": weight_mean}) for step in range(0, steps + 1, every)]
    try:
        from verl.utils.tracking import Tracking
    except ImportError:
        with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:
            log.writelines(json.dumps({"step": step, "data": data}) + "\n" for step, data in lines)
        return
    tracking = Tracking(project_name="stand-in", experiment_name=overrides["trainer.experiment_name"],
                        default_backend=["file"])
    for step, data in lines:
        tracking.log(data, step=step)


if __name__ == "__main__":
    main(sys.argv[1:])
