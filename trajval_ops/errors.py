"""The errors trajval_ops raises for bad user input, each with a message a user can act on."""

from __future__ import annotations


class TrajvalInputError(ValueError):
    """Bad input data or settings: the message names the row and the field (or the path)."""


class TrainingDiverged(TrajvalInputError):
    """A GRPO run's loss or gradient norm went non-finite: stopped at that step, before a
    checkpoint of it was written; the message names the step, the precision and the remedy (a
    setting to change)."""


class NonFiniteLogits(TrajvalInputError):
    """An endpoint engine's next-token logits went non-finite (NaN or +inf): stopped at that token,
    before it was sampled, so no pass rate is computed from it; the message names the dtype and
    the remedy (a model that overflows in float16, or a checkpoint holding NaN weights)."""


class DeviceOutOfMemory(TrajvalInputError):
    """A GPU ran out of memory for what the settings ask of it (a generate call, a training step):
    stopped with the settings that lower the need named; torch's own message says how much was
    asked, not which setting asked it."""


class CheckpointWithoutModel(TrajvalInputError):
    """A probe checkpoint the manifest would name holds no model ``from_pretrained`` loads (a
    sharded training engine saved only its own state); the message names the setting that makes
    one."""


class InputOverwriteError(TrajvalInputError):
    """An output path that would replace (or join) an input of the same run."""


def first_few(names, limit: int, sep: str = ", ") -> str:
    """The first ``limit`` of ``names`` joined, `` and N more`` for the rest: how a message names
    rows or units that can number thousands."""
    names = [str(name) for name in names]
    return sep.join(names[:limit]) + (f" and {len(names) - limit:,} more" if len(names) > limit else "")
