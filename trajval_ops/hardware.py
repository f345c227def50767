"""What the machine offers: bf16 on the CPU, and the torch thread count of a process.

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
