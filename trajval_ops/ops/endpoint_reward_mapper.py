"""trajval_endpoint_reward_mapper: one checkpoint's rollout pass rate on every row."""

from __future__ import annotations

import time
from typing import Dict, Optional

from data_juicer.ops.base_op import OPERATORS, Mapper
from loguru import logger

from trajval_ops.ops.dj.error_exit import SettingError, user_errors
from trajval_ops.ops.dj.executor import check_ray_actor_resources, hand_to_ray_actors, is_ray_mode
from trajval_ops.ops.dj.export import start_run
from trajval_ops.ops.dj.parameters import checked_parameters, declared_parameters, safe_op_kwargs, take_declared
from trajval_ops.ops.dj.table_mapper import TableMapper
from trajval_ops.ops.dj.tables import append_columns, dataset_table, with_column_types
from trajval_ops.rollout.endpoint_pass import build_pass
from trajval_ops.rollout.pass_settings import SETTING_GROUPS, EngineSettings
from trajval_ops.rows import batch_row

OP_NAME = "trajval_endpoint_reward_mapper"


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

    The pass itself (measured, adaptive, sampled or reused) is the class
    :func:`trajval_ops.rollout.endpoint_pass.build_pass` builds; this operator is its Data-Juicer glue.
    """

    _batched_op = True

    @checked_parameters
    @declared_parameters(*SETTING_GROUPS)
    def __init__(self, model: str = "smollm2-135m-instruct", window: Optional[str] = None,
                 window_index: Optional[int] = None, output_key: Optional[str] = None, id_key: Optional[str] = None,
                 drawn_sample: Optional[Dict] = None, *args, **kwargs):
        try:
            groups = take_declared(kwargs, SETTING_GROUPS)  # every setting checked by its declaration
        except ValueError as exc:
            raise SettingError(f"{OP_NAME}: {exc}") from None
        kwargs = safe_op_kwargs(kwargs)
        # one model copy per process: generation already uses every core
        kwargs.setdefault("num_proc", 1)
        super().__init__(*args, **kwargs)
        self.endpoint = build_pass(model, window, window_index, output_key, groups, id_key, drawn_sample, OP_NAME)
        self.output_key = self.endpoint.output_key
        engine = groups[EngineSettings]
        if engine.engine != "transformers" and not is_ray_mode():  # under Ray num_proc is the actor count
            if int(self.num_proc or 1) > 1:
                logger.info(f"{OP_NAME}: num_proc {self.num_proc} -> 1 for engine {engine.engine}: vLLM starts its "
                            "own workers (num_proc spreads only the transformers engine's)")
            self.num_proc = 1
        self.torch_threads = engine.torch_threads
        self.bind_table_process()
        if is_ray_mode():
            vllm = engine.engine == "vllm"
            check_ray_actor_resources(OP_NAME, self.num_proc, self.num_gpus, engine.tensor_parallel_size if vllm else 1,
                                      engine.gpu_memory_utilization if vllm else None)

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
        ":param drawn_sample: not a recipe setting: the sample the operator drew from the whole pool (its "
        "settings, the pool's size and the measured task ids), handed to the Ray actors it runs in.",
        __init__.__doc__.strip("\n"),  # the declared settings' lines (declared_parameters)
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
