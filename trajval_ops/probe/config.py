"""Training configuration of the probe run: the paper's GRPO regime as defaults, TRL arguments.

Every probe/GRPO setting is declared once, here, as a field of :class:`ProbeConfig` with its
type, default, bounds and help (:func:`trajval_ops.settings.setting`); the probe trainer's
parameters and docstring, the validation protocol's GRPO settings and docs/probe.md derive from
it (tests/test_probe_settings.py checks them). Every field goes into the manifest; every field
but the execution settings (:data:`EXECUTION_SETTINGS`: how many processes train, under which
accelerate config) goes into its hash (a changed value means a different probe). Runtime-only
switches (output directory, progress display) are not here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajval_ops import hardware
from trajval_ops.errors import TrajvalInputError
from trajval_ops.settings import check_settings, setting


#: How the probe's GRPO samples its rollouts (``generation``).
GENERATIONS = ("auto", "vllm", "transformers")
#: The probe's weights and autocast (``precision``; :func:`resolve_precision`).
PRECISIONS = ("auto", "bf16-mixed", "bf16", "fp32")


def vllm_importable() -> bool:
    """Whether vLLM is installed (found without importing it: importing starts its machinery)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


#: Settings that say how the probe is run, not what it is (declared with ``execution=True``): left
#: out of the identity hash, so an interrupted run may resume with another process count (the
#: global batch, and so every optimizer step's prompts, is the same: the prompt order is seeded
#: alike on every process, and a resumed run goes on in the uninterrupted run's order,
#: :mod:`trajval_ops.probe.trl_trainer`). Resumed on the one process it started on, it trains the
#: uninterrupted run's weights bit for bit (tested); on another process count the rollouts'
#: random draws and the gradients' summation order differ, and so do the weights.
EXECUTION = "execution"
#: Declared ``False`` on a setting added after probes were hashed whose default is the behaviour
#: before it: it enters the hash only when set away from that default, so those probes resume.
HASHED_AT_DEFAULT = "hashed_at_default"


@dataclass(frozen=True)
class ProbeConfig:
    """How the probe trains with GRPO.

    Each setting is declared once (type, default, bounds, help). Defaults follow the paper
    (GRPO, lr 1e-6, weight decay 0.1, grad clip 1.0, 64 prompts per batch, n = 16, clip ratio
    0.2, temperature 1.0, T = 20, K = 1).

    One optimizer step consumes ``prompts_per_batch`` prompts x ``num_generations`` completions
    (the global batch, whatever the process count), split evenly over ``num_processes`` processes,
    each processing its share in micro-batches of ``micro_batch_size`` completions (gradient
    accumulation).
    """

    model: str = setting("smollm2-135m-instruct", "base model: a short reference (``smollm2-135m-instruct``, "
                         "``tiny-random-llama``, ``tiny-arith``) or a Hugging Face model folder.")
    epochs: int = setting(20, "GRPO epochs over P (the paper's T = 20).", ge=1)
    learning_rate: float = setting(1e-6, "AdamW learning rate (constant schedule).", gt=0)
    weight_decay: float = setting(0.1, "AdamW weight decay.", ge=0)
    max_grad_norm: float = setting(1.0, "gradient clipping norm.", gt=0)
    prompts_per_batch: int = setting(64, "prompts per optimizer step (the paper's 64).", ge=1)
    num_generations: int = setting(16, "rollouts per prompt (the paper's n = 16).", ge=2,
                                   why="GRPO compares rollouts")
    micro_batch_size: int = setting(16, "completions per forward/backward pass in each process (gradient "
                                    "accumulation makes up the rest); micro_batch_size x num_processes must "
                                    "divide prompts_per_batch x num_generations.", ge=1)
    epsilon: float = setting(0.2, "PPO clip ratio.", gt=0)
    temperature: float = setting(1.0, "sampling temperature of the rollouts.", gt=0)
    top_p: float = setting(1.0, "nucleus sampling of the rollouts.", gt=0, le=1)
    beta: float = setting(0.0, "KL coefficient against the base model (0: no reference model).", ge=0)
    loss_type: str = setting("dapo", "TRL GRPO loss aggregation (grpo, dr_grpo, dapo, ...; dapo: token-level "
                             "mean, like verl's default).")
    max_completion_length: int = setting(1024, "maximum new tokens per rollout (paper: 8192 math, 4096 logic).",
                                         ge=1)
    window_k: int = setting(1, "K, checkpoints per window (K = 1: early = the base model, late = the last "
                            "epoch); at most epochs.", ge=1)
    keep_epochs: tuple[int, ...] = setting((), "extra epochs whose weights are kept on disk and listed in the "
                                           "manifest (e.g. for trajectory analysis); windows are unaffected.")
    seed: int = setting(0, "seed of the probe sample and of training.")
    verifier: str = setting("math", "reward verifier name (math, answer_tag, dapo, custom).")
    verifier_options: dict = setting(default_factory=dict, help="options of the verifier (e.g. "
                                     "fallback_last_number, normalize, function).")
    prompt_template: str = setting("auto", "prompt template name (math, dapo_math, logic_arc, logic_ordering, "
                                   "logic_graph, chat, auto, pool), shared with the endpoint-reward mapper.")
    chat_template_kwargs: dict | None = setting(None, "(prompt_template pool) keyword arguments of the model's chat "
                                                "template, as the main run's verl data.apply_chat_template_kwargs; "
                                                "None: none, verl's default.", hashed_at_default=False)
    prompt_key: str = setting("prompt", "field holding the question or chat-message list.")
    category_key: str = setting("category", "(logic_ordering template) field naming what is ordered.")
    ground_truth_key: str = setting("reward_model.ground_truth", "dotted path of the ground truth.")
    device: str = setting("auto", "``auto`` (GPU with vLLM generation when torch sees one, else CPU with "
                          "transformers generation), ``cpu`` or ``cuda``.", choices=("auto", "cpu", "cuda"))
    gradient_checkpointing: bool | None = setting(None, "gradient checkpointing; None: on for GPU, off for CPU.")
    generation: str = setting("auto", "how the probe's GRPO samples its rollouts: ``auto`` (vLLM on a GPU when it "
                              "imports, else TRL's transformers generation, the reason logged), ``vllm`` (TRL's "
                              "vLLM integration; a GPU and vLLM installed) or ``transformers`` (any device).",
                              choices=GENERATIONS, hashed_at_default=False)
    precision: str = setting("auto", "weights and mixed precision of the probe: ``auto`` (``bf16-mixed`` on a GPU "
                             "with native bf16, compute capability 8.0+; else ``fp32``), ``bf16-mixed`` (fp32 "
                             "weights, optimizer state and checkpoints, bf16 autocast), ``bf16`` (bf16 weights "
                             "and autocast: half the memory, updates without fp32 master weights) or ``fp32``.",
                             choices=PRECISIONS, hashed_at_default=False)
    use_lora: bool = setting(False, "train a LoRA adapter instead of all weights; checkpoints are merged into "
                             "full model folders for the endpoint mapper.")
    lora_r: int = setting(16, "LoRA rank.", ge=1)
    lora_alpha: int = setting(32, "LoRA alpha.", ge=1)
    lora_dropout: float = setting(0.0, "LoRA dropout.", ge=0, lt=1)
    lora_target_modules: str | tuple[str, ...] = setting("all-linear", "modules LoRA adapts (``all-linear`` "
                                                        "or a list of names).")
    vllm_mode: str = setting("colocate", "TRL vLLM mode on GPU (colocate, or server with ``trl vllm-serve``).",
                             choices=("colocate", "server"))
    vllm_gpu_memory_utilization: float = setting(0.3, "GPU memory share vLLM may take (colocate).", gt=0, le=1)
    vllm_tensor_parallel_size: int = setting(1, "vLLM tensor parallel size (colocate).", ge=1)
    overlong_prompt: str = setting("error", "a probe prompt longer than the model's context minus "
                                   "max_completion_length: ``error`` (naming the row) or ``truncate_left`` (keep "
                                   "its last tokens; counted and logged).", choices=("error", "truncate_left"))
    num_processes: int = setting(1, "training processes. 1: one child process; N > 1: data-parallel (DDP) ranks "
                                 "started by ``accelerate launch`` (gloo on CPU); the global batch is split over "
                                 "them, steps per epoch do not change. Not part of the probe's identity: an "
                                 "interrupted run may resume with another count.", ge=1, execution=True)
    distributed_config: str | None = setting(None, "path of an accelerate config file (e.g. FSDP or DeepSpeed "
                                             "ZeRO) for ``accelerate launch --config_file`` (num_processes > 1 "
                                             "only; num_processes overrides the file's). None: plain DDP. Only "
                                             "DDP on CPU is tested.", execution=True)

    def __post_init__(self):
        # a recipe's null for a list or a mapping is its empty default
        if self.keep_epochs is None:
            object.__setattr__(self, "keep_epochs", ())
        if self.verifier_options is None:
            object.__setattr__(self, "verifier_options", {})
        # lists from YAML recipes become tuples so the config stays hashable and canonical
        if isinstance(self.keep_epochs, list):
            object.__setattr__(self, "keep_epochs", tuple(self.keep_epochs))
        if isinstance(self.lora_target_modules, list):
            object.__setattr__(self, "lora_target_modules", tuple(self.lora_target_modules))
        check_settings(self)
        object.__setattr__(self, "keep_epochs", tuple(sorted(set(self.keep_epochs))))
        self._check_together()

    def _check_together(self) -> None:
        """Checks that involve several settings."""
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
        self.prompt_settings()  # the template and its rendering go together
        if self.generation == "vllm" and self.device == "cpu":
            raise ValueError("generation: vllm runs TRL's vLLM integration, which needs a GPU (device: cpu); use "
                             "generation: transformers or auto")
        if self.generation == "vllm" and not vllm_importable():
            raise ValueError("generation: vllm, but vLLM is not installed in this environment: install it (pip "
                             "install vllm, on a GPU machine) or set generation: transformers (or auto)")

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
        """:meth:`to_dict` without :data:`EXECUTION_SETTINGS`: what the probe's hash covers. A
        setting declared ``hashed_at_default=False`` (added after probes were hashed, its default
        the behaviour before it) enters only when set away from its default, so those probes keep
        their hash and resume."""
        return {name: value for name, value in self.to_dict().items() if name not in EXECUTION_SETTINGS
                and not (name in UNHASHED_DEFAULTS and value == UNHASHED_DEFAULTS[name])}


    def prompt_settings(self):
        """How a probe row becomes its prompt: the endpoint passes' :class:`PromptSettings`."""
        from trajval_ops.rollout.pass_rates import PromptSettings

        return PromptSettings(self.prompt_template, self.prompt_key, self.ground_truth_key, self.category_key,
                              self.chat_template_kwargs)

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


#: The settings declared with ``execution=True`` (how the probe runs, not what it is).
EXECUTION_SETTINGS = tuple(f.name for f in dataclasses.fields(ProbeConfig) if f.metadata.get(EXECUTION))
#: Settings declared with ``hashed_at_default=False``, by their defaults (:meth:`ProbeConfig.identity`).
UNHASHED_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ProbeConfig)
                     if f.metadata.get(HASHED_AT_DEFAULT) is False}


def resolve_device(requested: str) -> str:
    """``cuda`` when asked for or when ``auto`` finds a GPU, else ``cpu``.

    :raises TrajvalInputError: ``cuda`` where torch sees no GPU."""
    import torch

    if problem := hardware.missing_gpu(requested):
        raise TrajvalInputError(problem)
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def resolve_generation(generation: str, device: str) -> tuple[str, str]:
    """``(engine, reason)``: the engine the probe's GRPO generates with (``vllm`` or
    ``transformers``) and why, for the log and the manifest."""
    if generation == "transformers":
        return "transformers", "generation: transformers"
    if generation == "vllm":
        if device != "cuda":
            raise RuntimeError("generation: vllm needs a GPU, and torch sees none (device auto resolved to cpu); set "
                               "generation: transformers or auto")
        return "vllm", "generation: vllm"
    if device != "cuda":
        return "transformers", "generation: auto on CPU (TRL's vLLM integration needs a GPU)"
    if not vllm_importable():
        return "transformers", ("generation: auto on a GPU without vLLM installed (pip install vllm for faster "
                                "rollouts)")
    return "vllm", "generation: auto on a GPU with vLLM installed"


def resolve_precision(precision: str, device: str) -> str:
    """``bf16-mixed``, ``bf16`` or ``fp32``: ``auto`` is ``bf16-mixed`` on a GPU with native bf16
    (fp32 master weights, so small updates are not lost to bf16's rounding) and ``fp32`` on older GPUs (V100, T4: torch would emulate
    bf16) and on CPU (bf16 autocast gave no training gain on CPU and costs precision)."""
    if precision == "auto":
        return "bf16-mixed" if device == "cuda" and hardware.computes_bf16(device) else "fp32"
    return precision


#: the settings whose ``auto`` resolves per machine (bf16-mixed with native bf16, fp32 elsewhere;
#: vLLM where it imports on a GPU) and that decide a run's numbers as much as its seed does
NUMERICS = ("precision", "generation")


def resolved_numerics(precision: str, generation: str, device: str) -> dict[str, str]:
    """What ``precision`` and ``generation`` resolve to on ``device``, keyed by :data:`NUMERICS`."""
    return {"precision": resolve_precision(precision, device), "generation": resolve_generation(generation, device)[0]}


def numerics_differ(recorded: dict, here: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{setting: (recorded, here)}`` for each of :data:`NUMERICS` that a run (or a finished
    unit) recorded otherwise than ``here``; a record from before it held a setting differs in none."""
    return {key: (recorded[key], here[key]) for key in NUMERICS
            if recorded.get(key) is not None and recorded[key] != here[key]}


def describe_numerics(differ: dict[str, tuple[str, str]]) -> str:
    return ", ".join(f"{key} {theirs} (here {ours})" for key, (theirs, ours) in differ.items())


def precision_note(precision: str, device: str) -> str | None:
    """What a run on ``device`` should say about ``precision``: why ``auto`` chose fp32 on a GPU,
    or that an asked-for bf16 runs emulated there (slowly, with no error from torch)."""
    if device != "cuda" or hardware.computes_bf16(device):
        return None
    capability = ".".join(map(str, hardware.gpu_capability(device)))
    if precision == "auto":
        return (f"precision auto -> fp32: this GPU (compute capability {capability}) has no native bf16 "
                f"(it starts at {'.'.join(map(str, hardware.BF16_GPU_CAPABILITY))})")
    if precision != "fp32":
        return (f"precision {precision} on a GPU of compute capability {capability}, which has no native bf16: "
                "torch emulates it, slowly; precision: auto trains in fp32 there")
    return None


def autocasts_bf16(precision: str, device: str) -> bool:
    """Whether the trainer runs its forward and backward passes under bf16 autocast."""
    return resolve_precision(precision, device) in ("bf16", "bf16-mixed")


#: accelerate's ``mixed_precision`` (the trainer's autocast) under each resolved precision.
_ACCELERATE_AUTOCAST = {"bf16-mixed": "bf16", "bf16": "bf16", "fp32": "no"}


def check_autocast(precision: str, autocast: str, distributed_config: str | None = None) -> None:
    """The trainer autocasts as the resolved ``precision`` says. Where TRL's arguments ask for no
    bf16, accelerate takes ``mixed_precision`` from the environment (``ACCELERATE_MIXED_PRECISION``,
    which ``accelerate launch`` fills from a config file): an fp32 run would train under bf16
    autocast and record fp32.

    :param autocast: the trainer's ``accelerator.mixed_precision``.
    :raises TrajvalInputError: naming both and where the other came from, before any step.
    """
    if _ACCELERATE_AUTOCAST[precision] == autocast:
        return
    where = f"distributed_config ({distributed_config}) or by " if distributed_config else ""
    raise TrajvalInputError(
        f"precision is {precision}, but accelerate would train with mixed_precision {autocast}, set by {where}"
        "ACCELERATE_MIXED_PRECISION in the environment: the run would record one precision and train in another. "
        "Set precision: bf16-mixed for bf16 autocast, or mixed_precision to 'no' there")


def torch_dtype(precision: str, device: str):
    """The torch dtype the probe's weights load in (and its checkpoints are written in)."""
    import torch

    return torch.bfloat16 if resolve_precision(precision, device) == "bf16" else torch.float32


def grpo_arguments(config: ProbeConfig, output_dir: str, device: str, show_progress: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``trl.GRPOConfig``.

    CPU: transformers generation, fp32 unless ``precision: bf16`` (``bf16`` gave no training gain
    on CPU and TRL defaults to it), no gradient checkpointing unless asked (TRL turns it on by
    default; it only costs time for small models). GPU: bf16 and checkpointing on, and the
    generation ``generation`` resolves to (:func:`resolve_generation`: vLLM through TRL's
    integration where it is installed, else TRL's transformers generation).
    One optimizer step per generation batch (``steps_per_generation`` = accumulation steps).
    Several processes: TRL's ``generation_batch_size`` is global and ``per_device_train_batch_size``
    per process, so each process accumulates ``gradient_accumulation_steps`` micro-batches and the
    global batch stays ``prompts_per_batch x num_generations``; gloo is the backend on CPU.
    """
    on_gpu = device == "cuda"
    use_vllm = resolve_generation(config.generation, device)[0] == "vllm"
    checkpointing = config.gradient_checkpointing if config.gradient_checkpointing is not None else on_gpu
    bf16 = autocasts_bf16(config.precision, device)
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
        bf16=bf16,
        use_vllm=use_vllm,
        dataloader_num_workers=0,
    )
    if config.num_processes > 1 and not on_gpu:
        args["ddp_backend"] = "gloo"
    if use_vllm:
        args.update(
            vllm_mode=config.vllm_mode,
            vllm_gpu_memory_utilization=config.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=config.vllm_tensor_parallel_size,
        )
    return args


#: accelerate's data-parallel types: every process holds the whole model (DDP), on any device.
_DATA_PARALLEL = frozenset({"MULTI_CPU", "MULTI_GPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
                            "MULTI_HPU"})


def strategy_mismatch(distributed_config: str | None, running: str) -> str | None:
    """What ``distributed_config`` asks accelerate for and the ranks do not run (``running``,
    accelerate's ``distributed_type``), or None. accelerate runs FSDP and DeepSpeed only on
    accelerators: on CPU it trains the same ranks with plain DDP and says nothing."""
    if distributed_config is None:
        return None
    import yaml

    asked = yaml.safe_load(Path(distributed_config).expanduser().read_text()) or {}
    requested = str(asked.get("distributed_type", "")).upper() if isinstance(asked, dict) else ""
    if not requested or requested == running or {requested, running} <= _DATA_PARALLEL:
        return None
    return (f"distributed_config ({distributed_config}) asks for distributed_type {requested}, but the ranks run "
            f"{running}: FSDP and DeepSpeed need GPUs (or other accelerators); without them accelerate trains with "
            "plain DDP, every process holding the whole model")


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
