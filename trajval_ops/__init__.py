"""trajval_ops: Data-Juicer operators that estimate per-task learnability (TrajVal).

Importing this package is cheap and does not import Data-Juicer: the operators register when
Data-Juicer loads ``trajval_ops.ops`` through the ``data_juicer.ops`` entry point, and the
numeric core (:mod:`trajval_ops.core`) is plain numpy that samplers and tools share.
"""

__version__ = "0.1.0"
