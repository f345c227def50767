"""A validation unit's process: a fresh interpreter, or on CPU a fork of one process that has
imported the training stack already.

Every unit is a child process of its own: its memory, its GPU, its log, its exit code, and a kill
that ends it alone. A fresh interpreter spends 7-13 s on these cores importing torch,
transformers and TRL before a smoke-sized CPU training unit's 1-2 s of work, and
``recipes/validation/smoke.yaml`` has 50 such units. So on CPU a unit that names a Python entry
(``python -m MODULE ARGS``) starts as a fork of one process that imported
:data:`TRAINING_STACK` once (multiprocessing's fork server) and runs ``MODULE.main(ARGS)``
there. A unit on a GPU stays a fresh interpreter: CUDA cannot be used in a child forked from a
process that has initialised it, and a GPU unit's minutes dwarf the import.

A forked unit gets what a fresh one gets: the environment it is given, the working folder, the
log on its stdout and stderr, a ``sys.argv`` of the module and its arguments, and death with its
parent. A fresh unit dies with the process that started it (``trajval validate``): it starts as
``python -m trajval_ops.experiment.unit_process PARENT COMMAND...``, which asks the kernel for
that, exits at once if the parent is already gone, then executes ``COMMAND`` (the request
survives the exec). So ``dj-process`` (the probe) needs no knowledge of it, and a kill of the
run in the instant after a unit started, before the run's guardian has seen the unit, leaves
nothing behind. A forked unit dies with the fork server, which exits when it notices the process
that started it is gone, seconds later (a unit can finish meanwhile): so
:func:`~trajval_ops.experiment.protocol.run_units` starts the run's guardian
(:func:`trajval_ops.lifetime.guard_descendants`), which kills every unit at once.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

#: What a training unit (:mod:`trajval_ops.experiment.grpo_run`) imports before its first step:
#: imported once, by the fork server, so that every forked unit starts with it imported.
TRAINING_STACK = (
    "torch", "transformers", "trl", "trl.trainer.grpo_trainer", "trajval_ops.samplers.trl",
    "trajval_ops.probe.run", "trajval_ops.probe.config", "trajval_ops.experiment.trajectory_callback",
    "trajval_ops.rollout.verifiers", "trajval_ops.experiment.grpo_run",
)


def environment() -> dict[str, str]:
    """A unit's environment: this process's, with one thread per math library (the units run side
    by side on the cores; ``threads_per_worker`` sets torch's own)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def python_command(module: str, args: tuple[str, ...]) -> list[str]:
    """The fresh-interpreter command of a Python entry."""
    return [sys.executable, "-m", module, *args]


class ForkedProcess:
    """A forked unit, with the part of :class:`subprocess.Popen`'s interface the protocol uses."""

    def __init__(self, process):
        self._process = process
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
            self._process.close()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            self._process.kill()


def start(command: list[str], entry: tuple[str, tuple[str, ...]] | None, env: dict[str, str], log: Path,
          cwd: Path, fork: bool) -> subprocess.Popen | ForkedProcess:
    """Start a unit: ``entry`` (module, args) in a fork of the preloaded process when ``fork`` is
    set and the unit has one, else ``command`` in a fresh process; its output goes to ``log``."""
    if fork and entry is not None:
        context = _fork_server(env)
        process = context.Process(target=_run_forked, args=(entry, env, str(log), str(cwd)), name=entry[0])
        process.start()
        return ForkedProcess(process)
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid()), *command],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)


def _fork_server(env: dict[str, str]):
    """multiprocessing's fork-server context, its server started (once per process) under the
    units' environment, so that the thread settings torch reads on import are theirs."""
    import multiprocessing
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    with _environment(env):
        context.set_forkserver_preload(list(TRAINING_STACK))
        forkserver.ensure_running()
    return context


@contextmanager
def _environment(env: dict[str, str]):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_forked(entry: tuple[str, tuple[str, ...]], env: dict[str, str], log: str, cwd: str) -> None:
    """In the forked child: become the unit's process, then run the entry's ``main``."""
    from trajval_ops.lifetime import die_with_parent

    die_with_parent(expected_parent=os.getppid())  # the fork server's death
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    module, args = entry
    sys.argv = [module, *args]
    sys.exit(importlib.import_module(module).main(list(args)))


def main(argv: list[str]) -> None:
    """``PARENT COMMAND...``: die with process ``PARENT`` (this process's parent), then become
    ``COMMAND``."""
    from trajval_ops.lifetime import die_with_parent

    die_with_parent(expected_parent=int(argv[0]))
    os.execvp(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
