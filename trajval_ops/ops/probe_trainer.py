"""trajval_probe_trainer: sample the probe set P, train the base model on it with GRPO, write
the checkpoint manifest the endpoint-reward mapper reads."""

from __future__ import annotations

from data_juicer.ops.base_op import OPERATORS, Pipeline

from trajval_ops.errors import TrajvalInputError
from trajval_ops.hardware import missing_gpu
from trajval_ops.ops.dj.error_exit import SettingError
from trajval_ops.ops.dj.parameters import checked_parameters, declared_parameters, safe_op_kwargs, take_declared
from trajval_ops.ops.dj.table_mapper import run_whole_pool
from trajval_ops.ops.dj.tables import append_columns
from trajval_ops.probe.config import ProbeConfig
from trajval_ops.probe.probe_set import ProbeSetSettings, probe_positions

OP_NAME = "trajval_probe_trainer"


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
    @declared_parameters(ProbeSetSettings, ProbeConfig)
    def __init__(self, output_dir: str = "", show_progress: bool = True, *args, **kwargs):
        try:
            groups = take_declared(kwargs, (ProbeSetSettings, ProbeConfig))
        except ValueError as exc:
            raise SettingError(f"{OP_NAME}: {exc}") from None
        super().__init__(*args, **safe_op_kwargs(kwargs))
        if not output_dir:
            raise ValueError(f"{OP_NAME}: output_dir is required (checkpoints and manifest.json go there)")
        self.output_dir, self.show_progress = output_dir, show_progress
        self.probe_set, self.config = groups[ProbeSetSettings], groups[ProbeConfig]

    __init__.__doc__ = "\n".join([
        "Initialization method. How P is chosen is declared in :class:`trajval_ops.probe.probe_set.ProbeSetSettings`, "
        "the GRPO settings (``model`` ... ``distributed_config``) in :class:`trajval_ops.probe.config.ProbeConfig`; "
        "each checks its own.",
        "",
        ":param output_dir: directory for checkpoints and ``manifest.json`` (required; one probe per directory).",
        ":param show_progress: show the trainer's progress bar.",
        __init__.__doc__.strip("\n"),  # the declared settings' lines (declared_parameters)
    ])

    @property
    def in_probe_key(self) -> str:
        return self.probe_set.in_probe_key

    def probe_positions(self, table):
        """Sorted positions of P in a pyarrow.Table of the pool, and their ids."""
        return probe_positions(table, self.probe_set, self.config.seed, OP_NAME)

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
