"""What every prior declares: its name, the endpoint passes it reads, its settings (each with
:func:`~trajval_ops.settings.setting`: type, default, bounds, help), its score, its weight, the
range its weight can still take while a pass is under way (what the adaptive rollout budget
stops on) and its provenance, and the steps that turn a pool's pass rates into its scores and
weights (:meth:`Prior.scores`: a fit over the pool, an interval). Pure numpy; the formulas
themselves live in :mod:`trajval_ops.core`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from trajval_ops import core
from trajval_ops.settings import check_settings, declared, setting

#: the closed interval a pass rate lies in: arrays ``(low, high)``, per row
Interval = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class PassRates:
    """What a prior reads of a pool, one entry per row.

    :param early: the early window's mean pass rate.
    :param late: the late window's (None where the prior reads the early pass alone).
    :param checkpoints: every measured checkpoint's pass rate in training order, rows x
        checkpoints (the early window's, those between, the late window's), for a prior that
        reads the whole trajectory (:attr:`Prior.reads_checkpoints`); else None.
    :param rollouts: the rollouts behind ``early`` and ``late``, for a prior that reads them
        (:attr:`Prior.rollouts_read_by`); else None.
    :param groups: each row's group, for a prior that fits per group (:attr:`Prior.groups_read_by`).
    """

    early: np.ndarray
    late: np.ndarray | None = None
    checkpoints: np.ndarray | None = None
    rollouts: tuple[np.ndarray, np.ndarray] | None = None
    groups: list | None = None

    def subset(self, rows: np.ndarray) -> "PassRates":
        """The rates of the rows ``rows`` (a boolean mask) selects."""
        def take(values):
            return None if values is None else np.asarray(values)[rows]

        return PassRates(take(self.early), take(self.late), take(self.checkpoints),
                         None if self.rollouts is None else tuple(take(r) for r in self.rollouts),
                         None if self.groups is None else [g for g, keep in zip(self.groups, rows) if keep])


@dataclass(frozen=True)
class Scores:
    """A prior's scores and weights of a pool: per row the score, the weight, and an interval of
    the score where the prior estimates one; ``found``: what a fit over the pool found, recorded
    in the weight's provenance beside the prior's own record."""

    score: np.ndarray
    weight: np.ndarray
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    found: Mapping[str, Any] = field(default_factory=dict)


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
    #: whether its score reads every checkpoint's pass (:attr:`PassRates.checkpoints`), not the
    #: windows' means alone
    reads_checkpoints: ClassVar[bool] = False
    #: other settings of it that ``trajval validate`` trains as arms of their own: ``{arm: settings}``
    variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

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

    @property
    def rollouts_read_by(self) -> str:
        """What of it reads the rollouts behind each pass rate (:attr:`PassRates.rollouts`), in
        words for messages; "" where nothing does."""
        return ""

    @property
    def groups_read_by(self) -> str:
        """What of it fits per group (:attr:`PassRates.groups`), in words; "" where nothing does."""
        return ""

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

    def scores(self, rates: PassRates) -> Scores:
        """The scores and weights of a pool's rows (all of them at once: a prior may fit over the
        pool). By default each row's from its own window means. A ValueError says why the pool
        cannot be scored."""
        score = self.score(rates.early, rates.late)
        return Scores(score, self.weight(score))

    def weight_range(self, early: Interval, late: Interval | None = None) -> Interval:
        """The lowest and highest weight each row can take while its pass rates lie in the
        closed intervals ``early`` and ``late`` (None for a one-pass prior)."""
        raise NotImplementedError

    def provenance(self) -> dict:
        """How its weights are made, as the learnability mapper's provenance records it."""
        raise NotImplementedError


def rates(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)
