"""The validation protocol (``trajval validate``): does the TrajVal prior help in a regime?

- :mod:`.config`: the protocol's YAML config, checked before anything trains;
- :mod:`.grpo_run`: one GRPO training run (an arm and seed, or an oracle context), in its own
  process, with held-out and per-task trajectories recorded by
  :class:`~trajval_ops.experiment.trajectory_callback.TrajectoryCallback`;
- :mod:`.trajectory_callback`: the evaluation during training (dense per-task pass rates);
- :mod:`.protocol`: the whole protocol as resumable units;
- :mod:`.results`: the experiment's results (bootstrap intervals), ``results.json`` and
  ``index.html``.
"""
