"""The GRPO probe run: probe-set sampling, training driver and checkpoints. The manifest it writes is
:mod:`trajval_ops.probe_manifest`, a layer below, where the endpoint passes read it too.

Light to import: torch, transformers, trl and peft load only when a probe actually trains.
"""
