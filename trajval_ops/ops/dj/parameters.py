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
            init(self, *args, **kwargs)

    return checked
