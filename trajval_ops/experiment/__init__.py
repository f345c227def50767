"""The validation protocol (``tools/validate.py``): does the TrajVal prior help in a regime?

- :mod:`.config`: the protocol's YAML config, checked before anything trains;
- :mod:`.grpo_run`: one GRPO training run (an arm and seed, or an oracle context), in its own
  process, with held-out and per-task trajectories recorded by
  :class:`~trajval_ops.probe.trajectory_callback.TrajectoryCallback`;
- :mod:`.protocol`: the whole protocol as resumable units, and ``results.json``;
- :mod:`.report`: statistics (bootstrap intervals) and ``index.html``.
"""
