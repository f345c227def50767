"""trajval_endpoint_reward_mapper: one checkpoint's rollout pass rate on every row."""

from __future__ import annotations

import time
from typing import Dict, Optional

from data_juicer.ops.base_op import OPERATORS, Mapper
from loguru import logger

from trajval_ops import fields, settings
from trajval_ops.ops.dj.error_exit import user_errors
from trajval_ops.ops.dj.executor import check_ray_actor_resources, hand_to_ray_actors, is_ray_mode
from trajval_ops.ops.dj.export import start_run
from trajval_ops.ops.dj.parameters import checked_parameters, safe_op_kwargs
from trajval_ops.ops.dj.table_mapper import TableMapper
from trajval_ops.ops.dj.tables import append_columns, dataset_table, with_column_types
from trajval_ops.rollout.endpoint_pass import build_pass
from trajval_ops.rollout.engines import DecodingConfig
from trajval_ops.rollout.pass_rates import PromptSettings
from trajval_ops.rollout.pass_settings import (
    SETTING_GROUPS, BudgetSettings, CacheSettings, EngineSettings, SampleSettings, VerifierSettings, group_settings,
)
from trajval_ops.rollout.reused_pass import ReuseSettings
from trajval_ops.rows import batch_row

OP_NAME = "trajval_endpoint_reward_mapper"
#: the declared defaults of every setting group, read by the signature below
_DECODING, _ENGINE, _PROMPT, _VERIFIER, _CACHE, _BUDGET, _SAMPLE, _REUSE = (group() for group in SETTING_GROUPS)


@OPERATORS.register_module(OP_NAME)
class TrajvalEndpointRewardMapper(TableMapper, Mapper):
    """Estimate one model checkpoint's pass rate on every row from ``n`` sampled rollouts.

    Each row's prompt is built from a named template (or passed through when it already is a
    chat message list), rendered with the model's chat template, sampled ``n`` times (default 16
    at temperature 1.0) and every completion is scored by a verifier (``math``, ``answer_tag``,
    ``dapo`` or ``custom``). Writes the pass rate (mean score, in [0, 1]) to ``output_key``, the rollout
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

    The pass itself (measured, adaptive, sampled or reused) is
    the class :func:`trajval_ops.rollout.endpoint_pass.build_pass` builds; this operator is its Data-Juicer glue.
    """

    _batched_op = True

    @checked_parameters
    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        window: Optional[str] = None,
        window_index: Optional[int] = None,
        output_key: Optional[str] = None,
        engine: str = _ENGINE.engine,
        n: int = _DECODING.n,
        temperature: float = _DECODING.temperature,
        top_p: float = _DECODING.top_p,
        top_k: int = _DECODING.top_k,
        max_new_tokens: int = _DECODING.max_new_tokens,
        seed: int = _DECODING.seed,
        verifier: str = _VERIFIER.verifier,
        verifier_options: Optional[Dict] = _VERIFIER.verifier_options,
        template: str = _PROMPT.template,
        prompt_key: str = _PROMPT.prompt_key,
        ground_truth_key: str = _PROMPT.ground_truth_key,
        category_key: str = _PROMPT.category_key,
        chat_template_kwargs: Optional[Dict] = _PROMPT.chat_template_kwargs,
        prompts_per_generate: int = _ENGINE.prompts_per_generate,
        dtype: str = _ENGINE.dtype,
        torch_threads: Optional[int] = _ENGINE.torch_threads,
        max_model_len: int = _ENGINE.max_model_len,
        enforce_eager: bool = _ENGINE.enforce_eager,
        kv_cache_space_gb: float = _ENGINE.kv_cache_space_gb,
        tensor_parallel_size: int = _ENGINE.tensor_parallel_size,
        gpu_memory_utilization: float = _ENGINE.gpu_memory_utilization,
        engine_kwargs: Optional[Dict] = _ENGINE.engine_kwargs,
        use_cache: bool = _CACHE.use_cache,
        cache_dir: Optional[str] = _CACHE.cache_dir,
        keep_completions: bool = _CACHE.keep_completions,
        max_bad_truth_share: float = _VERIFIER.max_bad_truth_share,
        overlong_prompt: str = _VERIFIER.overlong_prompt,
        id_key: Optional[str] = None,
        reuse_key: Optional[str] = _REUSE.reuse_key,
        reuse_n: Optional[int] = _REUSE.reuse_n,
        reuse_n_key: Optional[str] = _REUSE.reuse_n_key,
        reuse_form: Optional[str] = _REUSE.reuse_form,
        reuse_preset: Optional[str] = _REUSE.reuse_preset,
        reuse_missing: str = _REUSE.reuse_missing,
        budget: str = _BUDGET.budget,
        round_size: Optional[int] = _BUDGET.round_size,
        weight_tolerance: float = _BUDGET.weight_tolerance,
        early_key: str = _BUDGET.early_key,
        budget_prior: Optional[Dict] = _BUDGET.budget_prior,
        sample_fraction: float = _SAMPLE.sample_fraction,
        sample_seed: int = _SAMPLE.sample_seed,
        sample_group_key: Optional[str] = _SAMPLE.sample_group_key,
        drawn_sample: Optional[Dict] = None,
        *args,
        **kwargs,
    ):
        given = dict(locals())
        kwargs = safe_op_kwargs(kwargs)
        # one model copy per process: generation already uses every core
        kwargs.setdefault("num_proc", 1)
        super().__init__(*args, **kwargs)
        if window not in (None, *fields.WINDOWS):
            raise ValueError(f"{OP_NAME}: window must be one of {fields.WINDOWS} or null, got {window!r}")
        try:
            groups = group_settings(given)  # every setting checked by its declaration
        except ValueError as exc:
            raise ValueError(f"{OP_NAME}: {exc}") from None
        self.endpoint = build_pass(model, window, window_index, output_key, groups, id_key, drawn_sample, OP_NAME)
        self.output_key = self.endpoint.output_key
        if engine != "transformers" and not is_ray_mode():  # under Ray num_proc is the actor count
            if int(self.num_proc or 1) > 1:
                logger.info(f"{OP_NAME}: num_proc {self.num_proc} -> 1 for engine {engine}: vLLM starts its own "
                            "workers (num_proc spreads only the transformers engine's)")
            self.num_proc = 1
        self.torch_threads = torch_threads
        self.bind_table_process()
        if is_ray_mode():
            check_ray_actor_resources(OP_NAME, self.num_proc, self.num_gpus,
                                      tensor_parallel_size if engine == "vllm" else 1,
                                      gpu_memory_utilization if engine == "vllm" else None)

    __init__.__doc__ = "\n".join([
        "Initialization method. The pass's settings are declared in groups "
        "(:mod:`trajval_ops.rollout.pass_settings`), which check them.",
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
        ":param id_key: dotted path of the row id used in error messages; None tries common id fields and "
        "falls back to the position in the batch.",
        *(settings.param_lines(group) for group in (DecodingConfig, EngineSettings, PromptSettings, VerifierSettings,
                                                    CacheSettings, BudgetSettings, SampleSettings, ReuseSettings)),
        ":param drawn_sample: not a recipe setting: the sample the operator drew from the whole pool (its "
        "settings, the pool's size and the measured task ids), handed to the Ray actors it runs in.",
    ])

    def use_ray_actor(self) -> bool:
        """Under Ray, an actor pool by default (``ray_execution_mode: task`` opts out): an actor
        keeps its engine across batches, where a task would load the model for every batch."""
        return self.ray_execution_mode != "task"

    def place_worker(self, rank: int) -> None:
        """``accelerator: cuda``: the transformers engine of worker ``rank`` runs on GPU ``rank`` mod
        the GPU count, so ``num_proc`` workers spread over the node's GPUs instead of all loading on GPU 0."""
        from trajval_ops.hardware import worker_device

        self.endpoint.device = worker_device(rank)

    def _worker_threads(self) -> int:
        """Torch threads of this worker's engine: the recipe's, else under Ray the CPUs Ray
        reserved for the actor, else the usable cores shared by the worker processes."""
        from trajval_ops.hardware import usable_cpus

        if self.torch_threads:
            return self.torch_threads
        if is_ray_mode() and self.num_cpus:
            return max(1, int(self.num_cpus))
        return max(1, usable_cpus() // max(1, int(self.num_proc or 1)))

    # ------------------------------------------------------------------ the batch

    def input_columns(self) -> list[str] | None:
        return None  # every column: a custom verifier receives the whole row

    def score_rows(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        """The output columns for rows in pool order (the pass's ``columns``)."""
        self.endpoint.threads = self._worker_threads()
        return self.endpoint.columns(rows, first_row)

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
        from trajval_ops.pools.io import table_from_columns, table_rows

        if table.num_rows == 0:
            return table
        new = table_from_columns(self.score_rows(table_rows(table), first_row))
        return append_columns(table, dict(zip(new.column_names, new.columns)))

    # ------------------------------------------------------------------ whole run (default executor)

    def run(self, dataset, *, exporter=None, tracer=None):
        """Log the settings and, at the end, the figures; free the model afterwards."""
        start_run(exporter)
        with user_errors():  # a user error ends the run with one readable message (the engine freed first)
            self.check_pool(dataset_table(dataset))
            self._check_worker_placement()
            start = time.perf_counter()
            try:
                # a batch may hold no pass rate at all (a sampled pass's rows it leaves out)
                typed = with_column_types(dataset, {self.endpoint.output_key: "float64"})
                result = super().run(typed, exporter=exporter, tracer=tracer)
            finally:
                self.release()
            self.finish_pool(dataset_table(result), time.perf_counter() - start)
        return result

    def _check_worker_placement(self) -> None:
        """Outside Data-Juicer's GPU mode the map workers get no rank (:meth:`place_worker`): on a
        node with several GPUs every transformers worker would load on GPU 0, so say so and how."""
        from trajval_ops.hardware import gpu_count

        workers = int(self.num_proc or 1)
        gpus = gpu_count() if workers > 1 and not self.use_cuda() else 0
        if gpus > 1:
            logger.warning(f"{OP_NAME}: {workers} workers (num_proc) on a machine with {gpus} GPUs, without "
                           f"accelerator: cuda: every worker loads its model on GPU 0; set accelerator: cuda "
                           f"to run worker i on GPU i mod {gpus}")

    def check_pool(self, table) -> None:
        """Before the first batch: the pass's whole-pool checks; a sampled pass's draw handed to
        the Ray actors that will run the batches."""
        drawn = self.endpoint.check_pool(table)
        if drawn is not None:
            hand_to_ray_actors(self, drawn_sample=drawn)
        if is_ray_mode() or int(self.num_proc or 1) > 1:
            self.endpoint.warn_repeats_across_workers(
                table, "Ray actors" if is_ray_mode() else f"{int(self.num_proc)} worker processes (num_proc)")

    def finish_pool(self, table, elapsed_s: float) -> None:
        """After the last batch: the pass's figures; too many bad ground truths stop the export."""
        self.endpoint.finish(table, elapsed_s)

    def release(self) -> None:
        """Free the model and every process the pass started (the pass's ``release``)."""
        self.endpoint.release()
