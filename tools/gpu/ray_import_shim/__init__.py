"""A stand-in for Ray on the GPU device, which has no Ray (its wheel, ~80 MB, does not fit the
transfer). Data-Juicer 1.6.1 imports Ray while importing ``data_juicer.core`` (every executor's
package imports its Ray executor and Ray dataset modules, which use ``ray.remote``, ``ray.data``
names and ``ray.data.read_api`` at import time) and, finding no Ray, tries to pip-install it,
which fails offline. This package lets those imports succeed; the default executor (no
``executor_type: ray``) never calls Ray: ``ray.is_initialized()`` is False, ``import ray.data``
works but ``isinstance(x, ray.data.Dataset)`` is False, and anything that would use Ray raises
``RayImportShimError`` (an ImportError).

tools/gpu/fetch_wheels.sh builds it into the wheel ``trajval_gpu_ray_import_shim`` (top-level package
``ray``). Never install it next to a real Ray.
"""

__version__ = "0.0.0+trajval.import.shim"
IS_TRAJVAL_IMPORT_SHIM = True


class RayImportShimError(ImportError):
    pass


def _unavailable(what):
    return RayImportShimError(
        f"ray.{what}: Ray is not installed here (this is the trajval GPU-device import shim, "
        "tools/gpu/ray_import_shim); run without executor_type: ray"
    )


def remote(*args, **kwargs):
    """``@ray.remote`` and ``@ray.remote(...)``: the class or function, unchanged."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0]
    return lambda obj: obj


def is_initialized():
    return False


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise _unavailable(name)
