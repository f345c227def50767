"""The probe on several processes: ``accelerate launch`` of ``num_processes`` ranks, each running
:func:`trajval_ops.probe.run.run_probe` (data parallel; an accelerate config file, e.g. FSDP
or DeepSpeed ZeRO, is passed through).

:func:`launch_probe` writes the probe (rows, ids, config) to a JSON job file and starts::

    python -m trajval_ops.probe.launch accelerate <accelerate launch flags> \\
        -m trajval_ops.probe.launch rank <job file>

The first process runs accelerate's launcher (torchrun) in-process after asking the kernel to
kill it with its parent; every rank it starts does the same, so a SIGKILL of the operator's
process ends them all (``TRAJVAL_PARENT_PID`` names the parent each must outlive, to catch a
parent that died before the request). The launcher's stderr, which the ranks share, is echoed
and its tail kept for the error of a failed run.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from loguru import logger

from trajval_ops.atomic import atomic_open
from trajval_ops import errors
from trajval_ops.errors import TrajvalInputError
from trajval_ops.probe.config import ProbeConfig
from trajval_ops.probe_manifest import load_manifest

#: Environment variable holding the pid of the process a launched process must not outlive.
PARENT_PID_ENV = "TRAJVAL_PARENT_PID"
#: Lines of the ranks' stderr kept for the error of a failed launch.
STDERR_TAIL_LINES = 100
#: In the job's folder: the input error (bad input or settings) a rank stopped on.
_RANK_INPUT_ERROR = "input_error.json"
_MODULE = "trajval_ops.probe.launch"


class ProbeLaunchError(RuntimeError):
    """The launched ranks failed (non-zero exit of ``accelerate launch``)."""


def launch_probe(
    rows: Sequence[Mapping[str, Any]],
    probe_ids: Sequence[str],
    config: ProbeConfig,
    output_dir: str | os.PathLike,
    *,
    show_progress: bool = True,
) -> dict:
    """Train the probe on ``config.num_processes`` processes and return its finished manifest.

    :param rows: the probe set P (JSON-serialisable rows; other values go through ``str``, as in
        the training dataset).
    :param probe_ids: ids of ``rows`` in the same order.
    :param output_dir: checkpoints and ``manifest.json`` go here (as with ``run_probe``).
    :param show_progress: the main rank's progress bar.
    :raises ProbeLaunchError: the launcher exited non-zero; the message ends with the tail of the
        ranks' stderr.
    """
    output_dir = Path(output_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="trajval-probe-job-") as folder:
        job = write_job(Path(folder) / "job.json", rows, probe_ids, config, output_dir, show_progress)
        command = [sys.executable, "-m", _MODULE, "accelerate", *accelerate_flags(config),
                   "-m", _MODULE, "rank", str(job)]
        env = launch_environment(os.environ, sys.path, os.getcwd(), os.getpid())
        logger.info(f"probe: launching {config.num_processes} training processes: {' '.join(command)}")
        returncode, tail = _run_echoing_stderr(command, env)
        input_error = _read_input_error(Path(folder)) if returncode != 0 else None
    if returncode != 0:
        # a rank's input error is the failure's cause: dj-process shows it as one block, exit 2
        raise ProbeLaunchError(
            f"probe: accelerate launch of {config.num_processes} processes (num_processes) failed with exit code "
            f"{returncode}; last lines of the ranks' stderr:\n" + "".join(tail)
        ) from input_error
    return load_manifest(output_dir)


def accelerate_flags(config: ProbeConfig) -> list[str]:
    """``accelerate launch`` flags for one machine and ``config.num_processes`` ranks.

    Without ``distributed_config``: ``--multi_gpu``, which is accelerate's torchrun route (DDP;
    the ranks use gloo on CPU, NCCL on GPUs). ``--cpu`` would take accelerate's MPI route, which
    starts one process without ``mpirun``. With it: ``--config_file`` decides the route (FSDP,
    DeepSpeed, ...); ``--num_processes`` still wins over the file's, as the batch is split by it.
    Port 0: accelerate picks a free port.

    :raises FileNotFoundError: ``distributed_config`` names no file.
    """
    flags = ["--num_processes", str(config.num_processes), "--num_machines", "1", "--main_process_port", "0"]
    if config.distributed_config is None:
        return ["--multi_gpu", "--mixed_precision", "no", "--dynamo_backend", "no", *flags]
    path = Path(config.distributed_config).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"distributed_config: no accelerate config file at {path}")
    return ["--config_file", str(path), *flags]


def launch_environment(environ: Mapping[str, str], path: Sequence[str], cwd: str, parent: int) -> dict[str, str]:
    """The launcher's environment: ``environ`` plus the parent to die with, one torch thread per
    rank unless ``OMP_NUM_THREADS`` is set, and this process's import path first in
    ``PYTHONPATH`` (the ranks import what this process can, e.g. a custom verifier's module, as a
    spawned child would)."""
    env = {**environ, PARENT_PID_ENV: str(parent)}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([entry or cwd for entry in path]
                                        + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else []))
    return env


def write_job(
    path: Path,
    rows: Sequence[Mapping[str, Any]],
    probe_ids: Sequence[str],
    config: ProbeConfig,
    output_dir: Path,
    show_progress: bool,
) -> Path:
    """Write the job file every rank reads (atomically: a rank never sees half a file)."""
    job = {"rows": list(rows), "probe_ids": list(probe_ids), "config": config.to_dict(),
           "output_dir": str(output_dir), "show_progress": show_progress}
    with atomic_open(path) as handle:
        json.dump(job, handle, default=str)
    return path


def read_job(path: str | os.PathLike) -> dict:
    """The job file as :func:`run_rank` needs it (``config`` back as a :class:`ProbeConfig`)."""
    job = json.loads(Path(path).read_text(encoding="utf-8"))
    job["config"] = ProbeConfig.from_dict(job["config"])
    return job


def run_rank(job_file: str | os.PathLike) -> dict:
    """One rank: train (every rank calls ``run_probe``; it decides who writes). A rank's error
    reaches the launcher's failure summary (torch elastic's ``record``)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    from trajval_ops.probe.run import run_probe

    job = read_job(job_file)
    try:
        return record(run_probe)(job["rows"], job["probe_ids"], job["config"], job["output_dir"],
                                 show_progress=job["show_progress"])
    except TrajvalInputError as error:  # bad input or settings: the launcher raises it again
        with atomic_open(Path(job_file).with_name(_RANK_INPUT_ERROR), "w") as out:
            json.dump({"type": type(error).__name__, "message": str(error)}, out)
        raise


def _read_input_error(folder: Path) -> TrajvalInputError | None:
    """The input error a rank raised (any rank's: they raise the same), or None."""
    path = folder / _RANK_INPUT_ERROR
    if not path.is_file():
        return None
    raised = json.loads(path.read_text())
    kind = getattr(errors, raised["type"], None)
    kind = kind if isinstance(kind, type) and issubclass(kind, TrajvalInputError) else TrajvalInputError
    return kind(raised["message"])


def _run_echoing_stderr(command: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``command``; its stderr goes on to ours line by line and its last lines are kept."""
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, errors="replace", bufsize=1)
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    def echo() -> None:
        for line in process.stderr:
            sys.stderr.write(line)
            tail.append(line)

    reader = threading.Thread(target=echo, name="trajval-probe-stderr", daemon=True)
    reader.start()
    try:
        returncode = process.wait()
    except BaseException:
        process.kill()  # interrupted here (Ctrl-C): the launcher's ranks die with it
        process.wait()
        raise
    reader.join()
    return returncode, list(tail)


def _die_with_parent() -> None:
    from trajval_ops.lifetime import die_with_parent

    parent = os.environ.get(PARENT_PID_ENV)
    die_with_parent(expected_parent=int(parent) if parent else None)


def main(argv: Sequence[str] | None = None) -> int:
    """``accelerate FLAGS...``: run accelerate's launcher here; ``rank JOB``: one training rank."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["accelerate"]:
        _die_with_parent()
        os.environ[PARENT_PID_ENV] = str(os.getpid())  # the ranks' parent is this process
        from accelerate.commands.launch import launch_command, launch_command_parser

        launch_command(launch_command_parser().parse_args(argv[1:]))
        return 0
    if argv[:1] == ["rank"] and len(argv) == 2:
        _die_with_parent()
        run_rank(argv[1])
        return 0
    print(f"usage: python -m {_MODULE} accelerate FLAGS... | rank JOB.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
