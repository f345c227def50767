"""The Data-Juicer adapter: version check, plugin loading, load strategies only for trajval runs."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from trajval_ops.ops import dj_adapter


@pytest.mark.parametrize("version", ["1.6.1", "1.6.9", "1.6.2rc1"])
def test_supported_versions(version):
    assert dj_adapter.check_data_juicer(version) == version


@pytest.mark.parametrize("version", ["1.5.9", "1.7.0", "2.0"])
def test_unsupported_versions_say_what_is_supported(version):
    with pytest.raises(dj_adapter.UnsupportedDataJuicer, match=r"supports py-data-juicer >=1.6.1,<1.7; this environment has"):
        dj_adapter.check_data_juicer(version)


def test_plugin_loads_cleanly_and_registers_its_load_strategies():
    code = (
        "import data_juicer.config\n"  # the order dj-process imports in: plugins load mid-import
        "from data_juicer.core.data.load_strategy import DataLoadStrategyRegistry as R\n"
        "print(R.get_strategy_class('default', 'local', None).__name__, R.get_strategy_class('ray', 'local', None).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["TrajvalLocalLoadStrategy", "TrajvalRayLocalLoadStrategy"]
    assert "Failed to load operator plugin" not in result.stderr


def test_only_recipes_with_trajval_operators_use_them():
    import trajval_ops.ops  # noqa: F401 - registers the operator names

    assert dj_adapter.uses_trajval_operators(SimpleNamespace(process=[{"trajval_learnability_mapper": {}}]))
    assert not dj_adapter.uses_trajval_operators(SimpleNamespace(process=[{"text_length_filter": {"min_len": 1}}]))
    assert not dj_adapter.uses_trajval_operators(SimpleNamespace())
