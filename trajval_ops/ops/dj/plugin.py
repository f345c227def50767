"""The plugin's installation, when Data-Juicer loads it: the version gate, the operators' names,
and the load strategies registered once Data-Juicer's load-strategy module exists (importing it
while Data-Juicer's config module is still importing would be circular)."""

from __future__ import annotations

from trajval_ops.ops.dj.error_exit import RUN
from trajval_ops.ops.dj.executor import TRAJVAL_OPERATORS
from trajval_ops.ops.dj.version import check_data_juicer


_LOAD_STRATEGY_MODULE = "data_juicer.core.data.load_strategy"


def install(operator_names) -> None:
    """Called once when the plugin loads: check the version, register the load strategies.

    Data-Juicer loads plugins while its config module is still importing, and importing its
    load-strategy module then would be circular. The strategies are registered as soon as that
    module has been imported (it always is before a dataset loads): at once when it already is,
    else right after Data-Juicer imports it.
    """
    import os
    import sys
    from pathlib import Path

    check_data_juicer()
    TRAJVAL_OPERATORS.update(operator_names)
    if Path(sys.argv[0] if sys.argv else "").name == "dj-process":
        RUN["pid"] = os.getpid()
    from trajval_ops.ops.dj.loading import register_load_strategies

    _after_import(_LOAD_STRATEGY_MODULE, register_load_strategies)


def _after_import(name: str, callback) -> None:
    """Run ``callback`` once module ``name`` is fully imported (now, or right after its import)."""
    import importlib.abc
    import importlib.machinery
    import sys

    module = sys.modules.get(name)
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        callback()
        return

    class AfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return spec
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                callback()

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, AfterImport())
