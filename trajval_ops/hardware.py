"""What the machine offers (bf16 on the CPU, the usable cores) and what a process used of it
(its device, its peak memory).

Imports nothing of the package, so every module (engines, the vLLM child, trainers) can use it.
"""

from __future__ import annotations

import os


def cpu_supports_bf16() -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX-BF16)."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def device_name(device: str) -> str:
    """The device a process ran on, for records: ``cpu``, or ``cuda:<i> (<GPU name>)``."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    index = torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def peak_memory_gib(device: str) -> float:
    """This process's peak memory so far: torch's peak allocation on its GPU, or its peak
    resident set on CPU (Linux reports ``ru_maxrss`` in KiB)."""
    if device.startswith("cuda"):
        import torch

        return round(torch.cuda.max_memory_allocated() / 2**30, 3)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
