"""What every prior declares: its name, the endpoint passes it reads, its settings (each with
:func:`~trajval_ops.settings.setting`: type, default, bounds, help), its score, its weight, the
range its weight can still take while a pass is under way (what the adaptive rollout budget
stops on) and its provenance. Pure numpy; the formulas themselves live in :mod:`trajval_ops.core`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trajval_ops import core
from trajval_ops.settings import check_settings, declared, setting

#: the closed interval a pass rate lies in: arrays ``(low, high)``, per row
Interval = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Prior:
    """A prior written as the pool's weight. Subclasses set :attr:`name`, :attr:`passes` and
    :attr:`formula`, declare their settings as fields and implement :meth:`score`,
    :meth:`weight` and :meth:`weight_range`."""

    #: its name in recipes (``prior:``) and in the weight's provenance
    name: ClassVar[str] = ""
    #: the endpoint passes it reads, of ``("early", "late")``
    passes: ClassVar[tuple[str, ...]] = ("early",)
    #: its score and weight in one line, for the documentation
    formula: ClassVar[str] = ""

    eps: float = setting(core.DEFAULT_EPS, "Probability floor of the weight (the paper's 0.05).", gt=0, le=1)

    def __post_init__(self):
        check_settings(self)

    @property
    def one_pass(self) -> bool:
        """Whether it reads the early pass alone (no probe, no late pass)."""
        return self.passes == ("early",)

    @property
    def per_row(self) -> bool:
        """Whether a row's weight depends on its own pass rates alone (what the adaptive budget
        needs to bound it while the row's pass is under way)."""
        return True

    def settings(self) -> dict:
        """Its declared settings and their values."""
        return {f.name: getattr(self, f.name) for f in declared(type(self))}

    def spec(self) -> dict:
        """Everything that decides its weights: ``{"prior": name, **settings}`` (what the adaptive
        budget is told, and its cache key)."""
        return {"prior": self.name, **self.settings()}

    def score(self, r_early, r_late=None) -> np.ndarray:
        raise NotImplementedError

    def weight(self, score) -> np.ndarray:
        raise NotImplementedError

    def weights(self, r_early, r_late=None) -> np.ndarray:
        """The weight of each row's pass rates."""
        return self.weight(self.score(r_early, r_late))

    def weight_range(self, early: Interval, late: Interval | None = None) -> Interval:
        """The lowest and highest weight each row can take while its pass rates lie in the
        closed intervals ``early`` and ``late`` (None for a one-pass prior)."""
        raise NotImplementedError

    def provenance(self) -> dict:
        """How its weights are made, as the learnability mapper's provenance records it."""
        raise NotImplementedError


def rates(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)
