"""The GRPO probe run: probe-set sampling, training driver, checkpoints and manifest.

Light to import: torch, transformers, trl and peft load only when a probe actually trains.
"""
