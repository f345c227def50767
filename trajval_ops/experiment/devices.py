"""Where the validation protocol's units run: the device its config names, resolved once before
anything trains, and one GPU per running unit.

On a GPU machine each unit (the probe's ``dj-process``, every oracle and arm run) is a child
process that sees one GPU (``CUDA_VISIBLE_DEVICES``), the least busy one, so ``workers`` units
(by default one per visible GPU) train side by side without sharing a card; its evaluation
passes run on the same card. On CPU the children see no GPU at all, so nothing inside a CPU
run can pick one up by ``auto``.

A unit's numbers depend on two things its spec names only as the config does: ``precision`` and
``generation``, whose ``auto`` resolves per machine (bf16-mixed on a GPU with native bf16, fp32
elsewhere; vLLM where it imports on a GPU). A run that moves between machines, or reuses another
run's units, would compare arms trained one way with arms trained the other: every finished unit
must have resolved them as this machine does (:func:`check_same_numerics`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trajval_ops.errors import first_few
from trajval_ops.experiment.validation_config import ConfigError, ValidationConfig
from trajval_ops.hardware import missing_gpu

#: workers on CPU when the config leaves them unset (two cores here; one torch thread each)
CPU_WORKERS = 2
#: the run's record of where each finished unit ran and for how long
UNITS_RECORD = "units.json"


def visible_gpus(device: str) -> list[str]:
    """The GPUs (``CUDA_VISIBLE_DEVICES`` entries, or indices) the run's units are pinned to;
    empty on CPU. ``cuda`` without a GPU is a :class:`ConfigError` (before anything trains)."""
    if device == "cpu":
        return []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        if problem := missing_gpu(device, count):
            raise ConfigError(problem)
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [part.strip() for part in visible.split(",") if part.strip()] if visible else []
    return (ids or [str(i) for i in range(count)])[:count]


def unit_workers(config: ValidationConfig, gpus: list[str]) -> int:
    """Units run side by side: the config's ``workers``, else one per GPU (or two on CPU)."""
    if config.workers is not None:
        return config.workers
    return len(gpus) or CPU_WORKERS


class ProcessUnits:
    """The default executor: every unit a child process of this one, ``workers`` at a time, each
    pinned to one GPU of this machine (or none). A context, as :class:`.ray_units.RayUnits` is."""

    launch = None  # run_units starts the processes itself

    def __init__(self, config: ValidationConfig):
        self.gpus = visible_gpus(config.device)  # device: cuda without a GPU stops here, before any folder
        self.numerics = numerics_here(config, self.gpus)  # so does generation: vllm where there is none
        self.workers = unit_workers(config, self.gpus)

    def __enter__(self) -> ProcessUnits:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def describe(self) -> str:
        return f"{self.workers} unit(s) side by side on " + (
            f"GPU(s) {', '.join(self.gpus)}, one per unit, each a fresh process" if self.gpus else
            "CPU; training units fork from one process that imports torch, transformers and TRL once")


class GpuSlots:
    """Pins each started unit to one GPU: the one running the fewest units, the lowest first
    (``workers`` above the GPU count shares cards evenly)."""

    def __init__(self, gpus: list[str]):
        self.running = {gpu: 0 for gpu in gpus}

    def take(self) -> str | None:
        """A GPU for a unit about to start (None on CPU)."""
        if not self.running:
            return None
        gpu = min(self.running, key=lambda g: (self.running[g], list(self.running).index(g)))
        self.running[gpu] += 1
        return gpu

    def give_back(self, gpu: str | None) -> None:
        if gpu is not None:
            self.running[gpu] -= 1

    @staticmethod
    def environment(gpu: str | None) -> dict[str, str]:
        """The child's ``CUDA_VISIBLE_DEVICES``: its one GPU, or none on CPU."""
        return {"CUDA_VISIBLE_DEVICES": gpu if gpu is not None else ""}


def record_unit(path: Path, name: str, record: dict) -> None:
    """Add a finished unit's record (its GPU, its wall time) to the run's ``units.json``; a
    rerun keeps the records of units an earlier invocation ran."""
    from trajval_ops.atomic import write_json

    records = json.loads(path.read_text()) if path.is_file() else {}
    records[name] = record
    write_json(path, records)


def numerics_here(config: ValidationConfig, gpus: list[str]) -> dict[str, str]:
    """What the config's ``precision`` and ``generation`` resolve to for units on this machine
    (on ``gpus``, or on CPU when there are none); a choice this machine cannot run is a
    :class:`ConfigError`, before anything trains."""
    from trajval_ops.probe.config import resolved_numerics

    try:
        return resolved_numerics(config.precision, config.generation, "cuda" if gpus else "cpu")
    except RuntimeError as error:  # generation: vllm where device auto found no GPU
        raise ConfigError(str(error)) from None


def check_same_numerics(results: dict[str, dict], here: dict[str, str]) -> None:
    """A resumed run's units that trained (``{name: result}``, :func:`.protocol.trained_numerics`)
    must have trained as the rest will here, or its arms would be compared across precisions or
    generation engines (and an unfinished probe would train its other steps otherwise)."""
    from trajval_ops.probe.config import describe_numerics, numerics_differ

    clashes = {name: differ for name, result in results.items() if (differ := numerics_differ(result, here))}
    if not clashes:
        return
    listed = first_few((f"{name}: {describe_numerics(differ)}" for name, differ in clashes.items()), 3, "; ")
    raise ConfigError(
        f"{len(clashes)} unit(s) of this run trained with other numerics than this machine gives the units "
        f"left ({listed}); their comparisons would mix them. Go on on a machine like the one they ran "
        f"on, or set precision and generation in the config (every machine then resolves them alike) and use "
        f"another --out")
