"""An operator's parameters as Data-Juicer hands them over: checked strictly against their declared
types and bounds before the operator is built, and Data-Juicer's base arguments that could lose
rows silently made safe."""

from __future__ import annotations

from trajval_ops.ops.dj.error_exit import SettingError, user_errors


def safe_op_kwargs(kwargs: dict) -> dict:
    """Adjust Data-Juicer's base keyword arguments so an operator can neither lose rows silently
    nor trip the preflight over a text key it does not read.

    - ``skip_op_error`` is forced off: Data-Juicer's default turns an exception into a dropped
      row and exit code 0; our errors name the row and must stop the run.
    - Recipes set ``text_keys: null``; our operators read no text, so an unset text key is reset
      to Data-Juicer's default name for its preflight.
    """
    kwargs["skip_op_error"] = False
    if kwargs.get("text_key") is None:
        kwargs["text_key"] = "text"
    return kwargs


def checked_parameters(init):
    """Decorate an operator's ``__init__``: every argument is checked against its declared type
    and bounds (pydantic, strict: no bool for a number, no 2.5 for an integer, no NaN or
    infinity, no unknown choice) before the operator is built, the error naming the parameter; a setting error then
    ends a dj-process run with one readable message (:class:`user_errors`). The signature and
    docstring stay the operator's own (Data-Juicer's config parser reads them)."""
    import functools
    import inspect
    import os
    import typing

    signature = inspect.signature(init)
    hints = typing.get_type_hints(init, include_extras=True)
    var_keyword = next((p.name for p in signature.parameters.values() if p.kind == inspect.Parameter.VAR_KEYWORD),
                       None)
    adapters = {}

    def adapter(name):
        if name not in adapters:
            from pydantic import ConfigDict, TypeAdapter

            # NaN passes every bound (nan > 0 is no error to a comparison): refused as for every setting
            adapters[name] = TypeAdapter(hints[name], config=ConfigDict(allow_inf_nan=False))
        return adapters[name]

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        from pydantic import ValidationError

        with user_errors(settings=True):
            bound = signature.bind_partial(self, *args, **kwargs)
            for name, value in bound.arguments.items():
                if name not in hints or signature.parameters[name].kind in (inspect.Parameter.VAR_POSITIONAL,
                                                                           inspect.Parameter.VAR_KEYWORD):
                    continue
                try:  # a path object where a path string is declared is a path all the same
                    adapter(name).validate_python(os.fspath(value) if isinstance(value, os.PathLike) else value,
                                                  strict=True)
                except ValidationError as exc:
                    reason = exc.errors()[0]["msg"]
                    raise SettingError(f"{getattr(self, '_name', type(self).__name__)}: parameter '{name}' = "
                                       f"{value!r}: {reason}") from None
            _refuse_unknown(self, bound.arguments.get(var_keyword, {}))
            init(self, *args, **kwargs)

    return checked


def _refuse_unknown(op, extra: dict) -> None:
    """A keyword that is neither the operator's parameter nor Data-Juicer's own is refused, as
    Data-Juicer's preflight refuses it in a recipe (its message, the nearest key suggested): an
    operator built in Python would otherwise swallow a misspelled setting."""
    if not extra:
        return
    from trajval_ops.ops.dj.preflight import preflight_problems

    name = getattr(op, "_name", None)
    if name and (problems := preflight_problems([{name: extra}])):
        raise SettingError(problems)


def declared_parameters(*groups):
    """Decorate an operator's ``__init__`` (below :func:`checked_parameters`): its signature gains,
    as keyword-only parameters, every setting the dataclasses ``groups`` declare (type and default
    from the declaration), and its docstring their ``:param:`` lines, so that no operator restates
    a declared setting. Data-Juicer's config parser (jsonargparse's ``add_class_arguments``) and its
    preflight (unknown keys refused with the nearest one suggested) read the generated signature:
    both follow ``__signature__``. The call receives the settings given in ``**kwargs``;
    :func:`take_declared` builds the groups from them."""
    import inspect

    from trajval_ops.settings import declared, default_of, param_lines, type_hints

    def decorate(init):
        signature = inspect.signature(init)
        kinds = inspect.Parameter
        plain = [p for p in signature.parameters.values() if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]
        var_positional = [p for p in signature.parameters.values() if p.kind == kinds.VAR_POSITIONAL]
        var_keyword = [p for p in signature.parameters.values() if p.kind == kinds.VAR_KEYWORD]
        if not var_keyword:
            raise TypeError(f"{init.__qualname__}: declared settings arrive in **kwargs, which it lacks")
        names = {p.name for p in plain}
        added = []
        for group in groups:
            hints = type_hints(group)
            for field in declared(group):
                if field.name in names:
                    raise TypeError(f"{init.__qualname__}: setting {field.name!r} is declared twice ({group.__name__})")
                names.add(field.name)
                added.append(kinds(field.name, kinds.KEYWORD_ONLY, default=default_of(field),
                                   annotation=_preflight_annotation(hints[field.name])))
        init.__signature__ = signature.replace(parameters=plain + var_positional + added + var_keyword)
        init.__doc__ = "\n".join([init.__doc__ or "", *(param_lines(group) for group in groups)])
        init.declared_groups = groups
        return init

    return decorate


def _preflight_annotation(hint):
    """A declared type as the signature gives it: ``X | None`` spelled ``Optional[X]``. Data-Juicer's
    preflight leaves typing's unions to the operator (whose declarations check the value) and names
    the expected type of any other mismatch, and a ``|`` union has no name to give."""
    import types
    import typing

    return typing.Union[typing.get_args(hint)] if isinstance(hint, types.UnionType) else hint


def take_declared(kwargs: dict, groups) -> dict:
    """``{group: its instance}``, each built from the settings of ``kwargs`` it declares (taken out
    of ``kwargs``, which then holds Data-Juicer's own arguments); each instance checks its values
    against their declarations (a ``ValueError`` naming the setting)."""
    from trajval_ops.settings import built_groups, declared

    instances = built_groups(kwargs, groups)
    for group in groups:
        for field in declared(group):
            kwargs.pop(field.name, None)
    return instances
