"""What the machine offers (native bf16 on the CPU or GPU, the usable cores) and what a process
used of it (its device, its peak memory).

Imports nothing of the package, so every module (engines, the vLLM child, trainers) can use it.
"""

from __future__ import annotations

import os


#: The CPU's bf16 instructions: torch computes bf16 with them (oneDNN's matrix products), and where
#: there is one the endpoint passes' dtype ``auto`` is bf16 on CPU.
BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> set[str]:
    """The CPU's instruction-set flags as Linux lists them (empty where it does not)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def cpu_supports_bf16() -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX-BF16)."""
    return bool(cpu_flags() & set(BF16_INSTRUCTIONS))


#: Native bf16 arithmetic on NVIDIA GPUs starts at compute capability 8.0 (Ampere). On older GPUs
#: (V100 7.0, T4 7.5) torch emulates bf16, slowly and without an error, and vLLM refuses it.
BF16_GPU_CAPABILITY = (8, 0)


def gpu_capability(device: str = "cuda") -> tuple[int, int]:
    """The compute capability of ``device`` (``cuda:<i>``; bare ``cuda`` is the launcher's
    ``LOCAL_RANK`` GPU, else GPU 0: read by index, so a rank that has not picked its GPU yet asks
    about its own; a ``LOCAL_RANK`` inherited by a process that sees fewer GPUs reads GPU 0)."""
    import torch

    index = device.partition(":")[2]
    if not index:
        index = int(os.environ.get("LOCAL_RANK", 0))
        index = index if index < torch.cuda.device_count() else 0
    return tuple(torch.cuda.get_device_capability(int(index)))


def computes_bf16(device: str, capability: tuple[int, int] | None = None) -> bool:
    """Whether ``device`` (``cpu`` or ``cuda[:i]``) has native bf16 arithmetic.

    :param capability: the GPU's compute capability when the caller has it (vLLM's child reads it
        without starting CUDA); else it is read from torch.
    """
    if not device.startswith("cuda"):
        return cpu_supports_bf16()
    return tuple(capability or gpu_capability(device)) >= BF16_GPU_CAPABILITY


def auto_dtype(device: str, capability: tuple[int, int] | None = None) -> str:
    """An engine's ``dtype: auto``: ``bfloat16`` where ``device`` computes it natively, else ``float32``."""
    return "bfloat16" if computes_bf16(device, capability) else "float32"


def gpu_count() -> int:
    """The GPUs this process sees (0 without CUDA), read through NVML where it can be: unlike
    ``torch.cuda.is_available()``, which starts the CUDA driver, this leaves workers forked
    afterwards (Data-Juicer's default) able to use CUDA."""
    import torch

    return torch.cuda.device_count()


def missing_gpu(device: str, count: int | None = None) -> str | None:
    """What is wrong with ``device: cuda`` where torch sees no GPU, in one line naming the remedy;
    None for any other device or where there is a GPU. ``count``: the GPUs the caller counted
    (default :func:`gpu_count`, which leaves later forked workers able to use CUDA)."""
    if device != "cuda" or (gpu_count() if count is None else count):
        return None
    return ("device: cuda, but torch sees no GPU on this machine; set device: cpu, or auto to use a GPU only where "
            "there is one")


def worker_device(rank: int) -> str:
    """The device of the map worker of this rank: GPU ``rank`` mod the GPU count where CUDA is (as
    Data-Juicer places its own models on GPUs), else the CPU."""
    count = gpu_count()
    return f"cuda:{int(rank) % count}" if count else "cpu"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: Environment settings that choose the CPU kernels torch runs: ATen's vectorised kernels, MKL's
#: float32 and oneDNN's bf16 matrix products. Each changes a CPU unit's float roundings
#: (docs/validation.md, "What reproduces where").
CPU_KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "DNNL_MAX_CPU_ISA")


def cpu_kernels() -> dict:
    """For records: the instruction set torch's CPU kernels dispatch on (``cpu_capability``:
    ``AVX512``, ``AVX2``, ``DEFAULT``...; the CPU's best unless ``ATEN_CPU_CAPABILITY`` lowers it),
    the CPU's bf16 instructions and each of :data:`CPU_KERNEL_SETTINGS` the environment sets."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "bf16_instructions": sorted(cpu_flags() & set(BF16_INSTRUCTIONS)),
            **{key: os.environ[key] for key in CPU_KERNEL_SETTINGS if key in os.environ}}


def device_name(device: str) -> str:
    """The device a process ran on, for records: ``cpu``, or ``cuda:<i> (<GPU name>)``."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    index = torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def out_of_memory_summary(error: BaseException) -> str:
    """torch's out-of-memory message up to what it says of the GPU (what was asked, what is free);
    the rest is allocator advice."""
    text = " ".join(str(error).split())
    for advice in (" Of the allocated memory", " See documentation for Memory Management"):
        text = text.split(advice)[0]
    return text.rstrip(". ")


def peak_memory_gib(device: str) -> float:
    """This process's peak memory so far: torch's peak allocation on its GPU, or its peak
    resident set on CPU (Linux reports ``ru_maxrss`` in KiB)."""
    if device.startswith("cuda"):
        import torch

        return round(torch.cuda.max_memory_allocated() / 2**30, 3)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
