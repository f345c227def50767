"""Pool tools: import RL task pools into one canonical verl-style JSONL, generate pools offline
with reasoning-gym, and carry a TrajVal prior from one annotated pool onto another.

Light on purpose: nothing here imports Data-Juicer; reasoning-gym is imported only by
:mod:`trajval_ops.pools.generate` when a pool is generated or checked.
"""
