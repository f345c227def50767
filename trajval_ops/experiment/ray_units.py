"""``executor: ray``: the validation protocol's units as Ray tasks, so a run spreads over a
cluster's nodes.

The units are the same as the process pool's (:func:`.protocol.run_units` schedules them, in the
same order, after the same dependencies): a Ray task per unit, ``threads_per_worker`` CPUs and,
on a cluster with GPUs, ``gpus_per_unit`` GPUs each (Ray sets the task's
``CUDA_VISIBLE_DEVICES``). Inside its task a unit starts as it would on this machine
(:func:`.unit_process.start`): on CPU a fork of the Ray worker's own fork server, which has
imported the training stack once; on a GPU a fresh interpreter. So a CPU unit computes what the
process pool's computes, to the last digit. The units write their files where the run's folder
is: on a cluster that folder must be on storage every node sees.

The cluster: ``ray_address`` in the config, else ``RAY_ADDRESS``, else a local Ray that this
run starts (``address="local"``, never a cluster it happens to find) and shuts down when it ends;
killed instead, the run's guardian (:func:`trajval_ops.lifetime.guard_descendants`) kills the
local Ray's processes, which are its descendants. A unit's process dies with the Ray worker that
started it, and Ray ends a job's workers when its driver goes.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from loguru import logger

from trajval_ops.experiment.devices import CPU_WORKERS, numerics_here, visible_gpus
from trajval_ops.experiment.validation_config import ConfigError, ValidationConfig

#: the object store a local Ray gets: the units pass file paths and exit codes through it, nothing larger
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 ** 2
#: seconds between a task's looks at its unit's process
POLL_S = 0.2


def run_unit_in_task(command: list[str], entry: tuple[str, tuple[str, ...]] | None, log: str, cpu_only: bool) -> int:
    """In the Ray task: run one unit as :func:`.unit_process.start` runs it on this node and return
    its exit code. ``cpu_only``: the unit sees no GPU and forks from this worker's fork server."""
    from trajval_ops.experiment import unit_process

    env = unit_process.environment()
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if entry is not None:  # this node's interpreter, not the driver's path to one
        command = unit_process.python_command(*entry)
    process = unit_process.start(command, entry, env, Path(log), Path(__file__).resolve().parents[2], fork=cpu_only)
    while process.poll() is None:
        time.sleep(POLL_S)
    return process.returncode


class RayUnitTask:
    """A unit's Ray task, with the part of :class:`subprocess.Popen`'s interface the protocol uses."""

    def __init__(self, ref, name: str):
        self.ref, self.name = ref, name
        self.returncode: int | None = None

    def poll(self) -> int | None:
        import ray

        if self.returncode is None and ray.wait([self.ref], timeout=0)[0]:
            try:
                self.returncode = int(ray.get(self.ref))
            except Exception as error:  # the task itself failed (its node lost, cancelled)
                logger.error(f"validate: {self.name}: its Ray task failed: {error}")
                self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        import ray

        if self.poll() is None:
            ray.cancel(self.ref, force=True)  # the worker goes, and the unit's process with it


class RayUnits:
    """The units' executor on Ray (a context: connected, or a local Ray started, inside ``with``)."""

    def __init__(self, config: ValidationConfig):
        self.config = config
        self.gpus: list[str] = []  # no GPU pinning here: Ray places each task on the GPUs it reserves
        self.started_here = False
        self.numerics: dict[str, str] = {}
        self.workers = 1
        self.uses_gpus = False

    def __enter__(self) -> RayUnits:
        import ray

        address = self.config.ray_address or os.environ.get("RAY_ADDRESS") or None
        if address is None:
            local_gpus = visible_gpus(self.config.device)  # device: cuda without a GPU stops here
            threads = self.config.threads_per_worker
            cpus = (self.config.workers or CPU_WORKERS) * threads if not local_gpus else None
            ray.init(address="local", num_cpus=cpus, num_gpus=len(local_gpus), include_dashboard=False,
                     log_to_driver=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES)
            self.started_here = True
        else:
            if address.startswith(("http://", "https://")):
                raise ConfigError(f"executor: ray connects to {address}, a dashboard (job submission) address; the "
                                  "units' driver connects as ray.init does: set ray_address (auto, host:6379, ray://...)")
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise ConfigError(f"executor: ray: no Ray cluster answers at {address}: {error}") from None
        try:
            self._resources(address)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _resources(self, address: str | None) -> None:
        import ray
        import torch

        resources = ray.cluster_resources()
        cluster_gpus = resources.get("GPU", 0.0)
        self.uses_gpus = self.config.device != "cpu" and cluster_gpus > 0
        where = f"the Ray cluster at {address}" if address else "the local Ray"
        if self.config.device == "cuda" and not self.uses_gpus:
            raise ConfigError(f"device: cuda, but {where} has no GPU; set device: cpu, or auto")
        if self.uses_gpus and "auto" in (self.config.precision, self.config.generation) and not torch.cuda.is_available():
            raise ConfigError(f"executor: ray on {where}'s GPUs, which this machine cannot see: set precision and "
                              "generation (auto resolves them on the machine that trains)")
        self.numerics = numerics_here(self.config, ["ray"] if self.uses_gpus else [])
        capacity = (cluster_gpus / self.config.gpus_per_unit if self.uses_gpus
                    else resources.get("CPU", 1.0) / self.config.threads_per_worker)
        self.workers = self.config.workers or max(1, int(capacity))

    def __exit__(self, *exc) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # a local Ray started here stops with it; a cluster's connection closes

    def describe(self) -> str:
        placement = (f"{self.config.gpus_per_unit:g} GPU(s) each" if self.uses_gpus
                     else "on CPU, forked from each Ray worker's preloaded training process")
        return (f"{self.workers} unit(s) at a time as Ray tasks ({'a local Ray' if self.started_here else 'a cluster'}"
                f"), {self.config.threads_per_worker} CPU(s) and {placement}")

    def launch(self, unit, env: dict[str, str]) -> RayUnitTask:
        """Submit ``unit`` (prepared already) as a Ray task; ``env`` is this machine's and stays here."""
        task = _remote_unit().options(num_cpus=self.config.threads_per_worker, max_retries=0, name=unit.name,
                                      num_gpus=self.config.gpus_per_unit if self.uses_gpus else 0)
        ref = task.remote(unit.command, unit.entry, str(unit.log), not self.uses_gpus)
        return RayUnitTask(ref, unit.name)


@functools.cache
def _remote_unit():
    """:func:`run_unit_in_task` as a Ray remote function (made once, when the first unit starts)."""
    import ray

    return ray.remote(run_unit_in_task)
