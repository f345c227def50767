"""The priors a pool can be weighted by: one module each, one registry.

Each prior (:class:`~trajval_ops.priors.base.Prior`) declares, once, the endpoint passes it
reads, its settings, its score, its weight, the range its weight can still take while a pass is
under way and its provenance. The learnability mapper writes the weight of the prior a recipe
names (``prior:``, its settings flat beside it), the adaptive rollout budget stops rows on that
prior's weight, ``trajval validate``'s arms, weight columns and agreement lines and ``trajval
cost`` read the passes it needs, and the docs' table of priors is generated from :data:`PRIORS`.

A new prior is a module here, listed in :data:`BUILT_IN`, with its test file; or, without
touching this package, a :class:`Prior` subclass in a module of its own that an installed
distribution names in the entry-point group :data:`ENTRY_POINT_GROUP`
(``[project.entry-points."trajval_ops.priors"] mine = "my_pkg.my_prior:MyPrior"``), read once
when this package is imported.
"""

from __future__ import annotations

from typing import Any, Mapping

from trajval_ops.priors.bandpass import BandPass
from trajval_ops.priors.base import Prior
from trajval_ops.priors.limr import Limr
from trajval_ops.priors.trajval import TrajVal
from trajval_ops.priors.variance import Variance

#: the priors this package ships
BUILT_IN: tuple[type[Prior], ...] = (TrajVal, Variance, BandPass, Limr)
#: the entry-point group whose entries name further priors (``name = "module:Class"``)
ENTRY_POINT_GROUP = "trajval_ops.priors"


def _registered() -> dict[str, type[Prior]]:
    """The built-in priors, then those the installed distributions name in
    :data:`ENTRY_POINT_GROUP`; an entry that is no prior, or whose name is taken, is an error
    naming it."""
    from importlib.metadata import entry_points

    registry = {cls.name: cls for cls in BUILT_IN}
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        where = f"entry point {entry.name} = {entry.value!r} (group {ENTRY_POINT_GROUP})"
        cls = entry.load()
        if not (isinstance(cls, type) and issubclass(cls, Prior) and cls.name):
            raise TypeError(f"{where}: names {cls!r}, not a Prior subclass with a name")
        if registry.get(cls.name, cls) is not cls:
            raise ValueError(f"{where}: prior name {cls.name!r} is taken by {registry[cls.name].__module__}")
        registry[cls.name] = cls
    return registry


#: every prior, by its name in recipes
PRIORS: dict[str, type[Prior]] = _registered()
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
    """The prior ``name`` with those of ``settings`` it declares (others, such as the fields of a
    provenance record it is read from, are left out)."""
    cls = prior_class(name)
    own = setting_names(cls)
    return cls(**{key: value for key, value in (settings or {}).items() if key in own})


def setting_owners() -> dict[str, list[str]]:
    """Every setting a registered prior declares, with the priors that declare it."""
    from trajval_ops.settings import declared

    owners: dict[str, list[str]] = {}
    for name, cls in PRIORS.items():
        for spec in declared(cls):
            owners.setdefault(spec.name, []).append(name)
    return owners


def given_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The priors' settings among ``settings`` (a recipe entry) that it gives: None is unset."""
    owners = setting_owners()
    return {key: value for key, value in settings.items() if key in owners and value is not None}


def prior_with_settings(name: str, settings: Mapping[str, Any]) -> Prior:
    """The prior ``name`` built from the priors' settings a recipe entry gives
    (:func:`given_settings`); a setting only other priors declare is an error naming them: it
    would not reach the prior written."""
    cls = prior_class(name)
    own, owners = setting_names(cls), setting_owners()
    foreign = {key: owners[key] for key in settings if key not in own and key in owners}
    if foreign:
        whose = "; ".join(f"{key} is a setting of the {_listed(names)} prior{'s' if len(names) > 1 else ''}"
                          for key, names in sorted(foreign.items()))
        raise ValueError(f"{whose}, not of the {name} prior written here (its settings: {', '.join(sorted(own))}): "
                         f"leave {'it' if len(foreign) == 1 else 'them'} out, or name that prior")
    return cls(**{key: value for key, value in settings.items() if key in own})


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def settings_union():
    """A dataclass declaring every setting of every registered prior once, each unset (None) by
    default: what the learnability mapper's signature is generated from (a recipe entry's setting
    then reaches the prior it names, and a setting left out is the prior's own default). Two
    priors that declare one name with different types are an error naming both."""
    import dataclasses
    from typing import Optional

    from trajval_ops.settings import declared, default_of, type_hints

    fields, types, owners = [], {}, setting_owners()
    for name, cls in PRIORS.items():
        hints = type_hints(cls)
        for spec in declared(cls):
            if spec.name in types:
                if types[spec.name][0] != hints[spec.name]:
                    raise TypeError(f"setting {spec.name!r} is declared as {types[spec.name][0]} by prior "
                                    f"{types[spec.name][1]!r} and as {hints[spec.name]} by prior {name!r}")
                continue
            types[spec.name] = (hints[spec.name], name)
            declaring = owners[spec.name]
            whose = ("every prior" if len(declaring) == len(PRIORS) else
                     f"the {_listed(declaring)} prior{'s' if len(declaring) > 1 else ''}")
            help_text = f"{spec.metadata['help']} A setting of {whose}; unset: its default ({default_of(spec)})."
            fields.append((spec.name, Optional[hints[spec.name]],
                           dataclasses.field(default=None, metadata={**spec.metadata, "help": help_text})))
    union = dataclasses.make_dataclass("PriorSettings", fields, frozen=True, namespace={
        "__doc__": "The priors' settings, given beside prior: each reaches the prior named, which checks it."})
    return union


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


def arm_priors() -> dict[str, tuple[str, dict]]:
    """Every arm of ``trajval validate`` that is one prior: ``{arm: (prior, settings)}``, each
    registered prior under its own name (its default settings) and its declared variants."""
    arms: dict[str, tuple[str, dict]] = {}
    for name, cls in PRIORS.items():
        for arm, settings in {name: {}, **cls.variants}.items():
            if arm in arms:
                raise ValueError(f"prior {name!r} declares the arm {arm!r}, which prior {arms[arm][0]!r} declares")
            arms[arm] = (name, dict(settings))
    return arms


def priors_table() -> str:
    """The docs' table of priors (docs/architecture.md), from the registry."""
    from trajval_ops.settings import declared, default_of, help_text

    lines = ["| prior | passes | score and weight | settings | `trajval validate` arms |", "|---|---|---|---|---|"]
    for name, cls in PRIORS.items():
        settings = "; ".join(f"`{f.name}` ({default_of(f)}): {help_text(f)}" for f in declared(cls))
        passes = ", ".join(cls.passes) + (", the checkpoints between" if cls.reads_checkpoints else "")
        arms = ", ".join(f"`{arm}`" + (f" ({', '.join(f'{k}: {v}' for k, v in variant.items())})" if variant else "")
                         for arm, (prior, variant) in arm_priors().items() if prior == name)
        lines.append(f"| `{name}` | {passes} | {cls.formula} | {settings} | {arms} |")
    return "\n".join(lines)
