"""An engine session: one rollout engine and every process it starts, owned by one object.

``with EngineSession("vllm", model_path, **options) as session: session.generate(...)``
starts the engine on entry (or on :meth:`EngineSession.start`) and on exit stops it and every
process it started. Each session has a tag that the processes of its engine carry in their
environment, so the owner of a session whose engine lives in another process (a Data-Juicer
map worker) can wait for those processes to end, and end them, without pid files:
:func:`end_session_processes`.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from trajval_ops.lifetime import end_tagged
from trajval_ops.rollout.engines import RolloutEngine, DecodingConfig, build_engine
from trajval_ops.rollout.vllm_process import SESSION_ENV


class EngineSession:
    """Owns one engine (``transformers``, ``vllm`` or ``auto``) for a model folder.

    :param kind: engine name (see :func:`trajval_ops.rollout.engines.build_engine`).
    :param model_path: the model folder.
    :param tag: the session tag (default: a fresh one); sessions of one operator share it.
    :param options: engine options (dtype, max_model_len, ...).
    """

    def __init__(self, kind: str, model_path: str | Path, tag: str | None = None, **options):
        self.kind = kind
        self.model_path = model_path
        self.tag = tag or uuid.uuid4().hex
        self.options = options
        self.engine: RolloutEngine | None = None
        self.startup_s = 0.0

    def start(self) -> "EngineSession":
        """Build the engine (imports included in :attr:`startup_s`); idempotent."""
        if self.engine is None:
            start = time.perf_counter()
            self.engine = build_engine(self.kind, self.model_path, session=self.tag, **self.options)
            self.startup_s = time.perf_counter() - start
        return self

    @property
    def tokenizer(self):
        return self.start().engine.tokenizer

    @property
    def name(self) -> str:
        return self.start().engine.name

    @property
    def max_context(self) -> int:
        return self.start().engine.max_context

    @property
    def seeds_each_prompt(self) -> bool:
        return self.start().engine.seeds_each_prompt

    @property
    def dtype(self):
        return getattr(self.start().engine, "dtype", None)

    def generate(self, prompts: list[str], decoding: DecodingConfig) -> list[list[str]]:
        """``decoding.n`` completions for each rendered prompt, in prompt order."""
        return self.start().engine.generate(prompts, decoding)

    def generate_counted(self, prompts: list[str], decoding: DecodingConfig) -> tuple[list[list[str]], list[int]]:
        """:meth:`generate` and the completion tokens generated per prompt."""
        return self.start().engine.generate_counted(prompts, decoding)

    def close(self) -> None:
        """Stop the engine and every process it started (idempotent)."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
        end_session_processes(self.tag)

    def __enter__(self) -> "EngineSession":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def end_session_processes(tag: str) -> int:
    """Wait for the processes of session ``tag`` to end by themselves (an engine in a process
    that just finished stops its own), SIGKILL what is left after the grace period; returns how
    many had to be killed."""
    return end_tagged(SESSION_ENV, tag)
