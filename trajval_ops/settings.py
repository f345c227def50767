"""Settings declared once: a dataclass field carrying its type, default, bounds and help.

As TRL's ``GRPOConfig`` does with field metadata, a setting is one line::

    epochs: int = setting(20, "GRPO epochs over P (the paper's T = 20).", ge=1)

and everything else derives from that line: the check of a value (:func:`check_settings`: type,
bounds, choices, the error naming the setting), an operator's docstring lines
(:func:`param_lines`), the documentation table (:func:`markdown_table`) and a subset of
settings with other defaults (:func:`settings_subset`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import types
import typing
from typing import Any, Iterable

_BOUND_KEYS = ("ge", "gt", "le", "lt")


def setting(default: Any = dataclasses.MISSING, help: str = "", *, default_factory: Any = dataclasses.MISSING,
            ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
            choices: tuple | None = None, why: str = "", **extra: Any):
    """A dataclass field declaring one setting.

    :param help: one sentence for docstrings, ``--help`` and the documentation.
    :param ge, gt, le, lt: bounds of a number (greater or equal, greater, ...).
    :param choices: the values a setting may take.
    :param why: appended to the bound's error message (the reason for the bound).
    :param extra: further metadata (e.g. ``execution=True``) read by the owning class.
    """
    if not help:
        raise ValueError("a setting needs its help text")
    metadata = {"help": help, "choices": choices, "why": why, **extra,
                **{k: v for k, v in zip(_BOUND_KEYS, (ge, gt, le, lt)) if v is not None}}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def type_hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


# ----------------------------------------------------------------------------- checks


def _type_problem(value: Any, hint: Any) -> str | None:
    """What is wrong with ``value`` for the annotation ``hint`` (None: it fits). Strict: a bool is
    not a number, a number is not a string, a float is not an int; an int is a float."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if all(_type_problem(value, option) for option in options):
            return f"must be {' or '.join(_type_name(o) for o in options)}, got {type(value).__name__} {value!r}"
        return None
    if hint is type(None):
        return None if value is None else "must be null"
    if hint is Any:
        return None
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return f"must be {_type_name(hint)}, got {type(value).__name__} {value!r}"
        (item, *_) = typing.get_args(hint) or (Any,)
        for element in value:
            if _type_problem(element, item):
                return f"must be {_type_name(hint)}, got {element!r} in it"
        return None
    base = origin or hint
    if base is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    elif base is int:  # numbers.Integral: numpy's integers too
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    else:
        ok = isinstance(value, base)
    return None if ok else f"must be {_type_name(hint)}, got {type(value).__name__} {value!r}"


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin in (tuple, list):
        plural = {int: "integers", float: "numbers", str: "strings"}
        item = typing.get_args(hint)[0]
        if typing.get_origin(item) in (typing.Union, types.UnionType):
            return f"a list ({type_text(item)} each)"
        return f"a list of {plural.get(item, _type_name(item))}"
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}
    return names.get(origin or hint, getattr(hint, "__name__", str(hint)))


def union_options(hint: Any) -> tuple:
    """A union's members in one order, by their words, null last. ``typing`` caches unions and
    compares them as sets, so ``Optional[list[Union[str, int]]]`` may come back as the
    ``Union[int, str]`` another module built first: the written order is not the declaration's."""
    options = typing.get_args(hint)
    return tuple(sorted((o for o in options if o is not type(None)), key=_type_name)) + (
        (type(None),) if type(None) in options else ())


def type_text(hint: Any) -> str:
    """A type annotation in words, as the errors and the reference pages say it: ``an integer``,
    ``a string or null``, ``a list of integers``, ``a list (a string or an integer each)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(option) for option in union_options(hint))
    return _type_name(hint)


def interval_text(metadata) -> str:
    """``[1, inf)``, ``(0, 1]``, ... from a setting's bounds."""
    low, low_open = (metadata["gt"], True) if "gt" in metadata else (metadata.get("ge"), False)
    high, high_open = (metadata["lt"], True) if "lt" in metadata else (metadata.get("le"), False)
    low_text = "-inf" if low is None else f"{low:g}"
    high_text = "inf" if high is None else f"{high:g}"
    return f"{'(' if low_open or low is None else '['}{low_text}, {high_text}{')' if high_open or high is None else ']'}"


def value_problem(value: Any, hint: Any, metadata) -> str | None:
    """What is wrong with one setting's value (type, choices, bounds), or None."""
    problem = _type_problem(value, hint)
    if problem:
        return problem
    choices = metadata.get("choices")
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(map(repr, choices))}, got {value!r}"
    items = value if isinstance(value, (tuple, list)) else (value,)
    infinite = next((v for v in items if isinstance(v, numbers.Real) and not math.isfinite(v)), None)
    if infinite is not None:  # NaN passes every comparison with a bound; no setting means infinity
        return f"must be a finite number, got {infinite}"
    if value is None or isinstance(value, (str, bool, dict, tuple, list)):
        return None
    low_bad = ("ge" in metadata and value < metadata["ge"]) or ("gt" in metadata and value <= metadata["gt"])
    high_bad = ("le" in metadata and value > metadata["le"]) or ("lt" in metadata and value >= metadata["lt"])
    if low_bad or high_bad:
        why = f" ({metadata['why']})" if metadata.get("why") else ""
        return f"must be in {interval_text(metadata)}{why}, got {value}"
    return None


def whole_number(value: Any, name: str, lowest: int = 0) -> int:
    """``value`` as an int, checked as a count setting is (:func:`value_problem`: an integer, numpy's
    too, of at least ``lowest``): ``int()`` would read 2.7 as 2, and a NaN as an error naming nothing.

    :raises ValueError: ``<name> must be ..., got ...``.
    """
    problem = value_problem(value, int, {"ge": lowest})
    if problem:
        raise ValueError(f"{name} {problem}")
    return int(value)


def finite_float(text: str) -> float:
    """The ``argparse`` type of a number flag: a float, NaN and infinity refused as for every
    setting (``float("nan")`` parses, and would pass any bound the command checks)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def check_settings(obj) -> None:
    """Check every setting of a dataclass instance against its declaration.

    :raises ValueError: ``<setting> must be ..., got ...`` for the first bad value.
    """
    hints = type_hints(type(obj))
    for field in dataclasses.fields(obj):
        if "help" not in field.metadata:
            continue
        problem = value_problem(getattr(obj, field.name), hints[field.name], field.metadata)
        if problem:
            raise ValueError(f"{field.name} {problem}")


# ----------------------------------------------------------------------------- derived views


def declared(cls) -> list[dataclasses.Field]:
    """The settings of a dataclass (fields declared with :func:`setting`), in order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def built_groups(values: dict[str, Any], groups) -> dict[type, Any]:
    """``{group: its instance}``, each built from the settings of ``values`` it declares (flat keys,
    as a recipe entry gives them); each instance checks its values (a ``ValueError`` naming the
    setting)."""
    return {group: group(**{f.name: values[f.name] for f in declared(group) if f.name in values}) for group in groups}


def default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def limits_text(metadata) -> str:
    """A setting's choices (``one of a, b``) or bounds (``in [1, inf)``); empty without either."""
    if metadata.get("choices"):
        return f"one of {', '.join(map(str, metadata['choices']))}"
    if any(key in metadata for key in _BOUND_KEYS):
        return f"in {interval_text(metadata)}"
    return ""


def help_text(field: dataclasses.Field) -> str:
    """The help sentence with the bounds or choices appended where the text does not give them."""
    text, limits = field.metadata["help"], limits_text(field.metadata)
    if limits and not (field.metadata.get("choices") and "one of" in text):
        text += f" {limits[0].upper()}{limits[1:]}."
    return text


def param_lines(cls, names: Iterable[str] | None = None) -> str:
    """``:param name: help`` docstring lines of a class's settings (all, or ``names``)."""
    fields = {f.name: f for f in declared(cls)}
    chosen = [fields[name] for name in names] if names is not None else list(fields.values())
    return "\n".join(f":param {f.name}: {help_text(f)}" for f in chosen)


def markdown_table(cls) -> str:
    """A Markdown table of a class's settings: key, default and meaning."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for field in declared(cls):
        default = default_of(field)
        shown = "None" if default is None else (list(default) if isinstance(default, tuple) else default)
        lines.append(f"| `{field.name}` | `{shown}` | {help_text(field)} |")
    return "\n".join(lines)


def declared_as(cls, name: str) -> dataclasses.Field:
    """A field for another dataclass that takes ``cls``'s declaration of setting ``name`` whole
    (default, help, bounds, choices): one setting shared by two configs, declared once."""
    spec = {f.name: f for f in declared(cls)}[name]
    return dataclasses.field(default=spec.default, default_factory=spec.default_factory, metadata=spec.metadata)


def settings_subset(name: str, cls, defaults: dict[str, Any], module: str, doc: str = ""):
    """A frozen dataclass holding the settings ``defaults`` names, declared by ``cls`` (type,
    bounds, help) with these defaults instead; its instances check themselves.

    :param module: the ``__module__`` of the new class (the caller's ``__name__``).
    """
    hints = type_hints(cls)
    fields = {f.name: f for f in declared(cls)}
    unknown = sorted(set(defaults) - set(fields))
    if unknown:
        raise ValueError(f"{name}: {unknown} are not settings of {cls.__name__}")
    spec = [(key, hints[key], dataclasses.field(default=value, metadata=fields[key].metadata))
            for key, value in defaults.items()]
    subset = dataclasses.make_dataclass(name, spec, frozen=True, namespace={
        "__post_init__": lambda self: check_settings(self), "__doc__": doc or f"Settings of {cls.__name__}."})
    subset.__module__ = module
    return subset
