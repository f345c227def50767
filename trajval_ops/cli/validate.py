"""Measure TrajVal's claims end to end in one regime: ``trajval validate --config C --out DIR``.

Routes to :func:`trajval_ops.experiment.protocol.main` (its options, output and exit codes).
"""

from __future__ import annotations


def parser(prog: str = "trajval validate"):
    """The command's argument parser (:func:`trajval_ops.experiment.protocol.parser`)."""
    from trajval_ops.experiment import protocol

    return protocol.parser(prog)


def main(argv: list[str] | None = None, *, prog: str = "trajval validate") -> int:
    from trajval_ops.experiment import protocol

    return protocol.main(argv, prog=prog)
