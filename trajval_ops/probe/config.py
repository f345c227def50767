"""Training configuration of the probe run: the paper's GRPO regime as defaults, TRL arguments.

Every field of :class:`ProbeConfig` goes into the manifest; every field but the execution
settings (:data:`EXECUTION_SETTINGS`: how many processes train, under which accelerate config) goes
into its hash (a changed value means a different probe). Runtime-only switches (output directory,
progress display) are not here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


#: The one place the probe's numeric limits live: name -> (lower, lower exclusive, upper or None,
#: upper exclusive). The operator's parameters carry plain types and rely on these checks.
_BOUNDS: dict[str, tuple[float, bool, float | None, bool]] = {
    "epochs": (1, False, None, False),
    "prompts_per_batch": (1, False, None, False),
    "num_generations": (2, False, None, False),
    "micro_batch_size": (1, False, None, False),
    "max_completion_length": (1, False, None, False),
    "window_k": (1, False, None, False),
    "learning_rate": (0, True, None, False),
    "weight_decay": (0, False, None, False),
    "max_grad_norm": (0, True, None, False),
    "epsilon": (0, True, None, False),
    "temperature": (0, True, None, False),
    "top_p": (0, True, 1, False),
    "beta": (0, False, None, False),
    "lora_r": (1, False, None, False),
    "lora_alpha": (1, False, None, False),
    "lora_dropout": (0, False, 1, True),
    "vllm_gpu_memory_utilization": (0, True, 1, False),
    "vllm_tensor_parallel_size": (1, False, None, False),
    "num_processes": (1, False, None, False),
}
#: Settings that say how the probe is run, not what it is: left out of the identity hash, so an
#: interrupted run may resume with another process count (the global batch, and so every
#: optimizer step's prompts, is the same; only the rollouts' random draws differ).
EXECUTION_SETTINGS = ("num_processes", "distributed_config")
_CHOICES: dict[str, tuple[str, ...]] = {
    "overlong_prompt": ("error", "truncate_left"),
    "device": ("auto", "cpu", "cuda"),
    "vllm_mode": ("colocate", "server"),
}


@dataclass(frozen=True)
class ProbeConfig:
    """GRPO probe settings. Defaults follow the paper (GRPO, lr 1e-6, weight decay 0.1, grad
    clip 1.0, 64 prompts per batch, n = 16, clip ratio 0.2, temperature 1.0, T = 20, K = 1).

    One optimizer step consumes ``prompts_per_batch`` prompts x ``num_generations`` completions
    (the global batch, whatever the process count), split evenly over ``num_processes`` processes,
    each processing its share in micro-batches of ``micro_batch_size`` completions (gradient
    accumulation).
    """

    model: str = "smollm2-135m-instruct"
    epochs: int = 20
    learning_rate: float = 1e-6
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    prompts_per_batch: int = 64
    num_generations: int = 16
    micro_batch_size: int = 16
    epsilon: float = 0.2
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0
    loss_type: str = "dapo"
    max_completion_length: int = 1024
    window_k: int = 1
    keep_epochs: tuple[int, ...] = ()
    seed: int = 0
    verifier: str = "math"
    verifier_options: dict = field(default_factory=dict)
    prompt_template: str = "auto"
    prompt_key: str = "prompt"
    category_key: str = "category"
    ground_truth_key: str = "reward_model.ground_truth"
    device: str = "auto"
    gradient_checkpointing: bool | None = None
    use_lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: str | tuple[str, ...] = "all-linear"
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_tensor_parallel_size: int = 1
    overlong_prompt: str = "error"
    num_processes: int = 1
    distributed_config: str | None = None

    def __post_init__(self):
        # lists from YAML recipes become tuples so the config stays hashable and canonical
        object.__setattr__(self, "keep_epochs", tuple(sorted({int(e) for e in self.keep_epochs})))
        if isinstance(self.lora_target_modules, list):
            object.__setattr__(self, "lora_target_modules", tuple(self.lora_target_modules))
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {getattr(self, name)!r}")
        for name, (lower, lower_open, upper, upper_open) in _BOUNDS.items():
            value = getattr(self, name)
            too_low = value <= lower if lower_open else value < lower
            too_high = upper is not None and (value >= upper if upper_open else value > upper)
            if too_low or too_high:
                interval = f"{'(' if lower_open else '['}{lower:g}, {'inf' if upper is None else f'{upper:g}'}" \
                           f"{')' if upper_open or upper is None else ']'}"
                why = " (GRPO compares rollouts)" if name == "num_generations" else ""
                raise ValueError(f"{name} must be in {interval}{why}, got {value}")
        if self.window_k > self.epochs:
            raise ValueError(f"window_k ({self.window_k}) must not exceed epochs ({self.epochs})")
        if (self.prompts_per_batch * self.num_generations) % (self.micro_batch_size * self.num_processes):
            per_process = "" if self.num_processes == 1 else \
                f" x num_processes ({self.micro_batch_size} x {self.num_processes}; micro_batch_size is per process)"
            raise ValueError(
                f"micro_batch_size ({self.micro_batch_size}){per_process} must divide prompts_per_batch x "
                f"num_generations ({self.prompts_per_batch} x {self.num_generations}, the global batch)"
            )
        if self.distributed_config is not None and self.num_processes == 1:
            raise ValueError(
                f"distributed_config ({self.distributed_config!r}) is used only with num_processes > 1 "
                "(one process trains without accelerate launch)"
            )
        bad = [e for e in self.keep_epochs if not 0 <= e <= self.epochs]
        if bad:
            raise ValueError(f"keep_epochs {bad} outside 0..{self.epochs}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ProbeConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown probe config keys {unknown}; known: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["keep_epochs"] = list(self.keep_epochs)
        if isinstance(self.lora_target_modules, tuple):
            out["lora_target_modules"] = list(self.lora_target_modules)
        return out

    def identity(self) -> dict[str, Any]:
        """:meth:`to_dict` without :data:`EXECUTION_SETTINGS`: what the probe's hash covers."""
        return {name: value for name, value in self.to_dict().items() if name not in EXECUTION_SETTINGS}

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step in each process."""
        return self.prompts_per_batch * self.num_generations // (self.micro_batch_size * self.num_processes)

    def early_epochs(self) -> list[int]:
        """Epochs of the early window: the first K checkpoints, epoch 0 being the base model."""
        return list(range(self.window_k))

    def late_epochs(self) -> list[int]:
        """Epochs of the late window: the last K epochs."""
        return list(range(self.epochs - self.window_k + 1, self.epochs + 1))

    def kept_epochs(self) -> list[int]:
        """Every epoch whose model weights stay on disk (windows plus ``keep_epochs``)."""
        return sorted(set(self.early_epochs()) | set(self.late_epochs()) | set(self.keep_epochs))


def resolve_device(requested: str) -> str:
    """``cuda`` when asked for or when ``auto`` finds a GPU, else ``cpu``."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but torch sees no GPU")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def grpo_arguments(config: ProbeConfig, output_dir: str, device: str, show_progress: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``trl.GRPOConfig``.

    CPU: transformers generation, fp32 (``bf16`` gave no training gain on CPU and TRL defaults to
    it), no gradient checkpointing unless asked (TRL turns it on by default; it only costs time
    for small models). GPU: vLLM generation through TRL's integration, bf16, checkpointing on.
    One optimizer step per generation batch (``steps_per_generation`` = accumulation steps).
    Several processes: TRL's ``generation_batch_size`` is global and ``per_device_train_batch_size``
    per process, so each process accumulates ``gradient_accumulation_steps`` micro-batches and the
    global batch stays ``prompts_per_batch x num_generations``; gloo is the backend on CPU.
    """
    on_gpu = device == "cuda"
    checkpointing = config.gradient_checkpointing if config.gradient_checkpointing is not None else on_gpu
    args: dict[str, Any] = dict(
        output_dir=output_dir,
        num_train_epochs=config.epochs,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        lr_scheduler_type="constant",
        warmup_steps=0,
        per_device_train_batch_size=config.micro_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        generation_batch_size=config.prompts_per_batch * config.num_generations,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        epsilon=config.epsilon,
        beta=config.beta,
        loss_type=config.loss_type,
        seed=config.seed,
        data_seed=config.seed,
        save_strategy="epoch",
        save_only_model=False,
        logging_steps=1,
        report_to="none",
        disable_tqdm=not show_progress,
        gradient_checkpointing=checkpointing,
        use_cpu=not on_gpu,
        bf16=on_gpu,
        use_vllm=on_gpu,
        dataloader_num_workers=0,
    )
    if config.num_processes > 1 and not on_gpu:
        args["ddp_backend"] = "gloo"
    if on_gpu:
        args.update(
            vllm_mode=config.vllm_mode,
            vllm_gpu_memory_utilization=config.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=config.vllm_tensor_parallel_size,
        )
    return args


def lora_config(config: ProbeConfig):
    """A ``peft.LoraConfig`` for the policy when ``use_lora`` is on, else None."""
    if not config.use_lora:
        return None
    from peft import LoraConfig

    targets = config.lora_target_modules
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(targets) if isinstance(targets, tuple) else targets,
        task_type="CAUSAL_LM",
    )
