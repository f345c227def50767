"""trajval_probe_trainer: sample the probe set P, train the base model on it with GRPO, write
the checkpoint manifest the endpoint-reward mapper reads."""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Union

from data_juicer.ops.base_op import OPERATORS, Pipeline
from loguru import logger
from pydantic import Field, PositiveInt
from typing_extensions import Annotated

from trajval_ops import fields, settings
from trajval_ops.errors import TrajvalInputError
from trajval_ops.hardware import missing_gpu
from trajval_ops.input_checks import id_key_of
from trajval_ops.rows import path_root
from trajval_ops.ops.dj.parameters import checked_parameters, safe_op_kwargs
from trajval_ops.ops.dj.table_mapper import run_whole_pool
from trajval_ops.ops.dj.tables import append_columns
from trajval_ops.probe.config import ProbeConfig
from trajval_ops.probe.probe_set import (
    DEFAULT_PROBE_FRACTION,
    probe_size_for,
    unique_row_ids,
    sample_probe_positions,
)

OP_NAME = "trajval_probe_trainer"
#: Field marking the rows of the probe set (bool).
IN_PROBE = fields.IN_PROBE

_DEFAULTS = ProbeConfig()
PROBE_SETTINGS = frozenset(f.name for f in dataclasses.fields(ProbeConfig))


@OPERATORS.register_module(OP_NAME)
class TrajvalProbeTrainer(Pipeline):
    """Run the TrajVal probe: GRPO on a small uniform sample P of the pool, keeping checkpoints.

    Samples P (seeded; ``probe_size`` rows or ``probe_fraction`` of the pool, default the
    paper's 512/17,398; ``forced_ids`` always included), trains ``model`` on P with TRL's
    GRPOTrainer for ``epochs`` epochs (paper regime by default; vLLM generation on a GPU,
    transformers on CPU), keeps the early window (the first ``window_k`` checkpoints, epoch 0 =
    the base model) and the late window (the last ``window_k`` epochs), and writes
    ``<output_dir>/manifest.json``. Every row passes through unchanged and in order, with
    ``in_probe_key`` (bool) added. A finished probe with the same configuration is reused, an
    interrupted one resumes, a different one in ``output_dir`` is refused. Works under the
    default and the Ray executor (under Ray the pool is gathered to the driver, which trains).
    """

    #: it appends its in-probe column and keeps every row in place (a Ray run reads the pool as
    #: read for the mappers after it)
    keeps_rows = True

    @checked_parameters
    def __init__(
        self,
        output_dir: str = "",
        model: str = _DEFAULTS.model,
        probe_size: Optional[PositiveInt] = None,
        probe_fraction: Optional[Annotated[float, Field(gt=0, le=1)]] = None,
        forced_ids: Optional[List[Union[str, int]]] = None,
        seed: int = _DEFAULTS.seed,
        id_key: Optional[str] = None,
        in_probe_key: str = IN_PROBE,
        prompt_key: str = _DEFAULTS.prompt_key,
        prompt_template: str = _DEFAULTS.prompt_template,
        category_key: str = _DEFAULTS.category_key,
        chat_template_kwargs: Optional[dict] = _DEFAULTS.chat_template_kwargs,
        ground_truth_key: str = _DEFAULTS.ground_truth_key,
        verifier: str = _DEFAULTS.verifier,
        verifier_options: Optional[dict] = None,
        epochs: int = _DEFAULTS.epochs,
        learning_rate: float = _DEFAULTS.learning_rate,
        weight_decay: float = _DEFAULTS.weight_decay,
        max_grad_norm: float = _DEFAULTS.max_grad_norm,
        prompts_per_batch: int = _DEFAULTS.prompts_per_batch,
        num_generations: int = _DEFAULTS.num_generations,
        micro_batch_size: int = _DEFAULTS.micro_batch_size,
        epsilon: float = _DEFAULTS.epsilon,
        temperature: float = _DEFAULTS.temperature,
        top_p: float = _DEFAULTS.top_p,
        beta: float = _DEFAULTS.beta,
        loss_type: str = _DEFAULTS.loss_type,
        max_completion_length: int = _DEFAULTS.max_completion_length,
        window_k: int = _DEFAULTS.window_k,
        keep_epochs: Optional[List[int]] = None,
        device: str = _DEFAULTS.device,
        gradient_checkpointing: Optional[bool] = None,
        generation: str = _DEFAULTS.generation,
        precision: str = _DEFAULTS.precision,
        use_lora: bool = _DEFAULTS.use_lora,
        lora_r: int = _DEFAULTS.lora_r,
        lora_alpha: int = _DEFAULTS.lora_alpha,
        lora_dropout: float = _DEFAULTS.lora_dropout,
        lora_target_modules: Union[str, List[str]] = _DEFAULTS.lora_target_modules,
        vllm_mode: str = _DEFAULTS.vllm_mode,
        vllm_gpu_memory_utilization: float = _DEFAULTS.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size: int = _DEFAULTS.vllm_tensor_parallel_size,
        overlong_prompt: str = _DEFAULTS.overlong_prompt,
        num_processes: int = _DEFAULTS.num_processes,
        distributed_config: Optional[str] = _DEFAULTS.distributed_config,
        show_progress: bool = True,
        *args,
        **kwargs,
    ):
        given = dict(locals())
        super().__init__(*args, **safe_op_kwargs(kwargs))
        if not output_dir:
            raise ValueError(f"{OP_NAME}: output_dir is required (checkpoints and manifest.json go there)")
        self.output_dir = output_dir
        self.probe_size = probe_size
        self.probe_fraction = probe_fraction
        self.forced_ids = [str(i) for i in (forced_ids or [])]
        self.id_key = id_key
        self.in_probe_key = in_probe_key
        self.show_progress = show_progress
        # The operator's parameters named like ProbeConfig fields are the probe's settings: one
        # list (the signature), checked once (ProbeConfig).
        given = {name: value for name, value in given.items() if name in PROBE_SETTINGS}
        given["keep_epochs"] = tuple(keep_epochs or ())
        given["verifier_options"] = dict(verifier_options or {})
        self.config = ProbeConfig(**given)

    __init__.__doc__ = "\n".join([
        "Initialization method. The GRPO settings (``model`` ... ``distributed_config``) are declared in",
        ":class:`trajval_ops.probe.config.ProbeConfig`, which checks them.",
        "",
        ":param output_dir: directory for checkpoints and ``manifest.json`` (required; one probe per directory).",
        ":param probe_size: rows in P; overrides ``probe_fraction``.",
        ":param probe_fraction: share of the pool in P (default 512/17398, about 2.9 %), rounded to the nearest "
        "row (halves up), at least 1. A probe larger than the pool is an error.",
        ":param forced_ids: row ids always put in P (e.g. to share tasks between two probes).",
        ":param id_key: dotted path of the row id; None: the first of id, task_id, extra_info.index, "
        "extra_info.id, index, uid present, else the row position.",
        ":param in_probe_key: output field, True for rows of P.",
        ":param show_progress: show the trainer's progress bar.",
        settings.param_lines(ProbeConfig),
    ])

    def probe_positions(self, table):
        """Sorted positions of P in a pyarrow.Table of the pool, and their ids."""
        size = probe_size_for(table.num_rows, self.probe_size, self.probe_fraction)
        id_key = id_key_of(table, self.id_key)  # any row's id field, as the passes read it, not the first row's
        if id_key is None:
            ids = [str(i) for i in range(table.num_rows)]
        else:
            root = path_root(id_key) if id_key not in table.column_names else id_key
            ids = unique_row_ids(table.select([root]).to_pylist(), id_key)
        positions = sample_probe_positions(ids, size, self.config.seed, self.forced_ids)
        fraction = self.probe_fraction if self.probe_fraction is not None else DEFAULT_PROBE_FRACTION
        logger.info(
            f"{OP_NAME}: probe of {size} rows from {table.num_rows} "
            f"({'probe_size' if self.probe_size else f'fraction {fraction:.4g}'}, seed {self.config.seed}, "
            f"{len(self.forced_ids)} forced, ids from {id_key or 'row position'})"
        )
        return positions, [ids[p] for p in positions]

    def process_table(self, table):
        """Mark P, train on it, return the table with ``in_probe_key`` added (both executors)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        import numpy as np
        import pyarrow as pa

        from trajval_ops.probe.launch import launch_probe
        from trajval_ops.probe.run import run_probe

        if table.num_rows == 0:
            raise ValueError(f"{OP_NAME}: the pool is empty (0 rows): nothing to probe")
        if problem := missing_gpu(self.config.device):  # here, not as the child's traceback
            raise TrajvalInputError(f"{OP_NAME}: {problem}")
        positions, ids = self.probe_positions(table)
        probe_rows = table.take(pa.array(positions, type=pa.int64())).to_pylist()
        # Train in a spawned child (or launched ranks): torch's thread pool must not start in this
        # process, because later ops fork worker processes and a fork after OpenMP use deadlocks
        # (observed with the endpoint-reward mapper). The child's memory is also returned when it ends.
        if self.config.num_processes > 1:
            launch_probe(probe_rows, ids, self.config, self.output_dir, show_progress=self.show_progress)
        else:
            from trajval_ops.lifetime import die_with_parent

            with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                     initializer=die_with_parent) as pool:
                pool.submit(run_probe, probe_rows, ids, self.config, self.output_dir,
                            show_progress=self.show_progress).result()
        mask = np.zeros(table.num_rows, dtype=bool)
        mask[positions] = True
        return append_columns(table, {self.in_probe_key: pa.array(mask, type=pa.bool_())})

    def run(self, dataset, *, exporter=None, tracer=None):
        return run_whole_pool(self, dataset, self.process_table, exporter=exporter, tracer=tracer)
