"""``ray.data`` of the GPU-device Ray import shim (see ``ray/__init__.py``).

Data-Juicer's Ray modules use ``ray.data`` names at import time: in imports, annotations, base
classes and default arguments. Every such name is a class that can be subclassed but not
instantiated (calling it raises ``RayImportShimError``); ``isinstance(x, ray.data.Dataset)`` is False for
every object, so code that tells a Ray dataset from another takes the non-Ray path.
"""

from ray import _unavailable


class _Unavailable:
    _where = "data"

    def __init__(self, *args, **kwargs):
        raise _unavailable(f"{self._where}.{type(self).__name__}")


def _placeholder(module_globals, where, name):
    """The placeholder class ``name`` of a shim module, made once."""
    if name.startswith("__"):
        raise AttributeError(name)
    cls = type(name, (_Unavailable,), {"_where": where, "__module__": module_globals["__name__"]})
    module_globals[name] = cls
    return cls


class Dataset(_Unavailable):
    pass


class DataContext(_Unavailable):
    @classmethod
    def get_current(cls):
        raise _unavailable("data.DataContext.get_current")


from ray.data import read_api  # noqa: E402  (it subclasses _Unavailable)


def __getattr__(name):
    return _placeholder(globals(), "data", name)
