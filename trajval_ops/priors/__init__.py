"""The priors a pool can be weighted by: one module each, one registry.

Each prior (:class:`~trajval_ops.priors.base.Prior`) declares, once, the endpoint passes it
reads, its settings, its score, its weight, the range its weight can still take while a pass is
under way and its provenance. The learnability mapper writes the weight of the prior a recipe
names (``prior:``), the adaptive rollout budget stops rows on that prior's weight, ``trajval
validate``'s arms and ``trajval cost`` read the passes it needs, and the docs' table of priors
is generated from :data:`PRIORS`. A new prior is a module here, listed in :data:`PRIORS`, and
its test file.
"""

from __future__ import annotations

from typing import Any, Mapping

from trajval_ops.priors.bandpass import BandPass
from trajval_ops.priors.base import Prior
from trajval_ops.priors.trajval import TrajVal
from trajval_ops.priors.variance import Variance

#: every prior, by its name in recipes
PRIORS: dict[str, type[Prior]] = {cls.name: cls for cls in (TrajVal, Variance, BandPass)}
#: the priors that read the early pass alone
ONE_PASS_PRIORS = frozenset(name for name, cls in PRIORS.items() if cls.passes == ("early",))


#: the name of the prior a learnability mapper writes when its recipe names none
DEFAULT_PRIOR = "trajval"


def recipe_prior_name(prior: str | None, score: str | None = None) -> str:
    """The prior a learnability mapper entry names: ``prior:``, or the deprecated ``score:`` (the
    key's name until 0.2; accepted for one release, a warning logged by the mapper), or
    :data:`DEFAULT_PRIOR` where the entry gives neither (None: not given). Both given, naming
    different priors, is an error, whichever they name (``prior: trajval`` included)."""
    if prior is not None and score is not None and prior != score:
        raise ValueError(f"prior {prior!r} and the deprecated score {score!r} name different priors: give prior alone")
    return prior if prior is not None else score if score is not None else DEFAULT_PRIOR


def prior_class(name: str) -> type[Prior]:
    """The prior named ``name``; a ValueError listing the priors otherwise."""
    if name not in PRIORS:
        raise ValueError(f"prior must be one of {', '.join(PRIORS)}, got {name!r}")
    return PRIORS[name]


def setting_names(cls: type[Prior]) -> set[str]:
    """The names of a prior's declared settings: its class attributes (``name``, ``passes``,
    ``formula``, ClassVars that ``__dataclass_fields__`` lists too) are none of them."""
    from trajval_ops.settings import declared

    return {f.name for f in declared(cls)}


def build_prior(name: str, settings: Mapping[str, Any] | None = None) -> Prior:
    """The prior ``name`` with those of ``settings`` it declares (others, such as ``alpha`` for
    a one-pass prior, do not apply to it and are left out)."""
    cls = prior_class(name)
    own = setting_names(cls)
    return cls(**{key: value for key, value in (settings or {}).items() if key in own})


def prior_from_spec(spec: Mapping[str, Any]) -> Prior:
    """A prior from its :meth:`~trajval_ops.priors.base.Prior.spec` (``{"prior": name, ...}``);
    a setting it does not declare is an error (a spec is the prior's own)."""
    if not isinstance(spec, Mapping) or "prior" not in spec:
        raise ValueError(f"a prior's spec is a mapping with its name under 'prior', got {spec!r}")
    cls = prior_class(spec["prior"])
    settings = {key: value for key, value in spec.items() if key != "prior"}
    unknown = sorted(set(settings) - setting_names(cls))
    if unknown:
        raise ValueError(f"prior {cls.name!r} has no setting(s) {unknown}; its settings: {sorted(setting_names(cls))}")
    return cls(**settings)


def priors_table() -> str:
    """The docs' table of priors (docs/architecture.md), from the registry."""
    from trajval_ops.settings import declared, default_of, help_text

    lines = ["| prior | passes | score and weight | settings |", "|---|---|---|---|"]
    for name, cls in PRIORS.items():
        settings = "; ".join(f"`{f.name}` ({default_of(f)}): {help_text(f)}" for f in declared(cls))
        lines.append(f"| `{name}` | {', '.join(cls.passes)} | {cls.formula} | {settings} |")
    return "\n".join(lines)
