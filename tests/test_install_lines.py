"""Every `pip install` line README.md and docs/**/*.md give, through pip's own parser (issue 54,
item 1): README.md once gave `pip install "trajval_ops[rollout,train] @ ."`, which pip refuses
(`Invalid requirement`). Each line runs as `pip install --dry-run --no-deps --no-index` against an
empty link folder, config files off: no network, nothing installed; a line pip cannot parse, an
option it does not know or a folder it cannot build fails, while "no matching distribution" (no
index here) is what a line pip parsed meets. The package is not on any index: a line naming
`trajval_ops` instead of the clone (`.`) is refused too."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
#: what pip says of a requirement it parsed but cannot find without an index
NOT_FOUND = re.compile(r"No matching distribution found for|Could not find a version that satisfies")


def pip_install_lines(text: str) -> list[str]:
    """The `pip install ...` commands of a Markdown text: each inline code span holding one, and
    each command of a fenced block (continuation lines joined, comments and `&&` chains split)."""
    commands = []
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    for block in fenced:
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;", line.split(" #")[0]):
                if "pip install" in part:
                    commands.append(part.strip())
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    commands += [span.strip() for span in re.findall(r"`([^`\n]*pip install[^`\n]*)`", prose)]
    return commands


def _install_args(command: str) -> list[str]:
    words = shlex.split(command)
    start = next(i for i in range(len(words)) if words[i:i + 2] == ["pip", "install"])
    return words[start + 2:]


def _requirements(args: list[str]) -> list[str]:
    """The positional arguments (requirements or paths), options and their values left out."""
    takes_value = {"-c", "--constraint", "-r", "--requirement", "-t", "--target", "--index-url", "-i",
                   "--extra-index-url", "-f", "--find-links", "--prefix", "--root"}
    positional, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif arg == "-e" or arg == "--editable":
            continue
        elif not arg.startswith("-"):
            positional.append(arg)
    return positional


def _lines():
    found = []
    for document in DOCUMENTS:
        for command in pip_install_lines(document.read_text()):
            args = _install_args(command)
            if _requirements(args):  # `pip install` named in prose, without a requirement, is no install line
                found.append((document.relative_to(REPO).as_posix(), command, args))
    return found


LINES = _lines()


def _pip_dry_run(args: list[str], links) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", "--no-build-isolation",
         "--isolated", "--disable-pip-version-check", "--find-links", str(links), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})


def test_the_docs_give_install_lines_and_the_gpu_line_is_among_them():
    commands = [command for _, command, _ in LINES]
    assert any(command.startswith("pip install -e") for command in commands)  # tools/install.sh's, in the docs
    assert 'pip install ".[rollout,train,analysis]" "vllm>=0.22,<0.32"' in commands  # the GPU node's line
    # pages in docs/' folders are read too (the trainers' installs live in docs/howto/)
    assert any(where.startswith("docs/howto/") for where, _, _ in LINES)
    assert pip_install_lines('a `pip install "x @ ."` b\n```bash\npip install a \\\n  b  # c\n```\n') == [
        "pip install a    b", 'pip install "x @ ."']


def test_pip_parses_every_install_line_of_the_docs(tmp_path):
    """One dry run per distinct line (two at a time); the first failure of each names its file."""
    distinct = {tuple(args): (where, command) for where, command, args in LINES}
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(distinct, pool.map(lambda args: _pip_dry_run(list(args), tmp_path), distinct)))
    refused = []
    for args, result in results.items():
        where, command = distinct[args]
        for requirement in _requirements(list(args)):
            try:
                parsed = Requirement(requirement)
            except InvalidRequirement:
                continue  # a path (".", ".[extra]"): pip's own run below judges it
            if canonicalize_name(parsed.name) == "trajval-ops" and not parsed.url:
                refused.append(f"{where}: {command}: trajval_ops is on no index: install from a clone "
                               f"('.' or '.[extras]')")
        if result.returncode != 0 and not NOT_FOUND.search(result.stderr):
            refused.append(f"{where}: {command}: {result.stderr.strip().splitlines()[-1]}")
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("line, refused", [
    ('pip install "trajval_ops[rollout,train] @ ."', "Invalid requirement"),
    ('pip install ".[rollout,train]" "vllm>=0.22,<0.32"', None),
])
def test_the_check_fails_a_line_pip_refuses(tmp_path, line, refused):
    result = _pip_dry_run(_install_args(line), tmp_path)
    if refused:
        assert result.returncode != 0 and refused in result.stderr and not NOT_FOUND.search(result.stderr)
    else:  # the package's folder builds; vllm is parsed and only not found
        assert "Invalid requirement" not in result.stderr and NOT_FOUND.search(result.stderr)
