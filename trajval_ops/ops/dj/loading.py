"""Loading a trajval run's pool (Data-Juicer's load-strategy registry): a local pool is read by
:func:`trajval_ops.pools.io.read_table`, which keeps every value as it is (``datasets``' JSON
loader rewrites mixed columns) and names the file, line and byte of bad input; under Ray it is
handed over in blocks of one batch, in order. A missing pool file is named. Runs without trajval
operators load exactly as Data-Juicer loads them."""

from __future__ import annotations

from loguru import logger

from trajval_ops.ops.dj.config_merge import restore_unset_settings
from trajval_ops.ops.dj.error_exit import note_run_log_dir, user_errors
from trajval_ops.ops.dj.executor import uses_trajval_operators
from trajval_ops.ops.dj.export import dropped_at_export
from trajval_ops.ops.dj.preflight import preflight_trajval_run
from trajval_ops.ops.dj.ray_dataset import ray_dataset_class
from trajval_ops.ops.dj.tables import table_to_dataset


def register_load_strategies() -> None:
    from data_juicer.core.data.load_strategy import (
        DataLoadStrategyRegistry,
        DefaultDataLoadStrategy,
        DefaultLocalDataLoadStrategy,
        RayLocalJsonDataLoadStrategy,
    )

    class PreflightOnBuild:
        """Built with the executor, before its own preflight: a trajval run's preflight here."""

        def __init__(self, ds_config, cfg=None):
            super().__init__(ds_config, cfg=cfg)
            preflight_trajval_run(cfg)

    class TrajvalLocalLoadStrategy(PreflightOnBuild, DefaultLocalDataLoadStrategy):
        """Local pools of trajval runs, read without rewriting a value; other runs as before."""

        def load_data(self, **kwargs):
            if not uses_trajval_operators(self.cfg):
                return super().load_data(**kwargs)
            return table_to_dataset(_read_pool(self.cfg, self.ds_config["path"]))

    class TrajvalRayLocalLoadStrategy(PreflightOnBuild, RayLocalJsonDataLoadStrategy):
        """The same for the Ray executor: the pool is read on the driver and handed to Ray, and
        the run's export writes what it read (:func:`ray_dataset_class`)."""

        def load_data(self, **kwargs):
            if not uses_trajval_operators(self.cfg):
                return super().load_data(**kwargs)
            import ray.data

            from trajval_ops.lifetime import guard_descendants

            # Under Ray the operators run in actors, not here: the driver, which started Ray's
            # local daemons (raylet, agents, workers), guards them from the start.
            guard_descendants()
            table = _read_pool(self.cfg, self.ds_config["path"])
            # output rows in input order whatever actor finished first
            ray.data.DataContext.get_current().execution_options.preserve_order = True
            # no dataset_path: Data-Juicer would rewrite media path columns to absolute paths
            dataset = ray_dataset_class()(ray.data.from_arrow(table_blocks(table, ray_block_rows(self.cfg))),
                                           cfg=self.cfg)
            dataset.source_table = table  # for the operators' whole-pool checks (TableMapper.check_pool)
            dataset.export_dropped = frozenset(dropped_at_export(getattr(self.cfg, "keep_stats_in_res_ds", False),
                                                                 getattr(self.cfg, "keep_hashes_in_res_ds", False)))
            return dataset

    class TrajvalMissingPoolStrategy(PreflightOnBuild, DefaultDataLoadStrategy):
        """Data-Juicer takes a ``dataset_path`` that is no file or folder and has at most one
        ``/`` (``pool.jsonl``) for a Hugging Face dataset name, for which its command line has
        no load strategy ("No data load strategy found for huggingface None"). A trajval run
        says the pool file is missing instead; any other run gets Data-Juicer's error."""

        def load_data(self, **kwargs):
            import os

            from trajval_ops.errors import TrajvalInputError

            path = self.ds_config.get("path")
            if not uses_trajval_operators(self.cfg):
                raise ValueError("No data load strategy found for huggingface None")
            note_run_log_dir(self.cfg)
            with user_errors():
                raise TrajvalInputError(
                    f"pool file not found: {path} (looked for {os.path.abspath(path)}; Data-Juicer takes a "
                    f"dataset_path that is no file or folder for a Hugging Face dataset name, which it cannot load)")

    DataLoadStrategyRegistry.register("default", "local", "*")(TrajvalLocalLoadStrategy)
    DataLoadStrategyRegistry.register("ray", "local", "*")(TrajvalRayLocalLoadStrategy)
    for executor in ("default", "ray"):
        DataLoadStrategyRegistry.register(executor, "huggingface", "*")(TrajvalMissingPoolStrategy)


def _read_pool(cfg, path):
    """The pool of a trajval run as one Arrow table, every value as it is in the file; a user
    error (the export would replace the pool, an unreadable line, a reserved column name) ends
    the run with one message."""
    from trajval_ops.pools.io import read_table

    from trajval_ops.measured_alike import check_alike_passes
    from trajval_ops.recipe import ENDPOINT_OP, budget_priors, check_same_sample, entry_sample, pass_name

    note_run_log_dir(cfg)
    restore_unset_settings(cfg)
    with user_errors():
        entries = [(name, settings) for entry in getattr(cfg, "process", None) or [] if isinstance(entry, dict)
                   for name, settings in entry.items()]
        check_same_sample([(pass_name(settings, index), entry_sample(settings))
                           for index, (name, settings) in enumerate(entries)
                           if name == ENDPOINT_OP and isinstance(settings, dict)])
        # the operators are built from cfg.process after the pool is read: an adaptive pass is
        # told here the prior whose weight its budget bounds
        for index, spec in budget_priors(entries).items():
            entries[index][1]["budget_prior"] = spec
        check_alike_passes(entries)
        check_export_spares_pool(cfg, path)
        check_export_unsharded(cfg)
        table = read_table(path)
        check_column_names(table, path)
    logger.info(f"trajval_ops: loaded {table.num_rows} rows from {path} ({_describe_columns(table)})")
    return table


#: Data-Juicer's own column names begin so; its exporter moves such columns out or drops them.
DATA_JUICER_PREFIX = "__dj__"


def check_column_names(table, path) -> None:
    """Refuse a pool column named like Data-Juicer's own: the export would move it out (stats,
    meta) or drop it (hashes) without a word."""
    reserved = [name for name in table.column_names if name.startswith(DATA_JUICER_PREFIX)]
    if reserved:
        from trajval_ops.errors import TrajvalInputError

        raise TrajvalInputError(f"{path}: column '{reserved[0]}' is named like Data-Juicer's own ('{DATA_JUICER_PREFIX}"
                                "...'), which its exporter moves out of the output or drops; rename the column")


def check_export_spares_pool(cfg, dataset_path) -> None:
    """Refuse a run whose ``export_path`` is its ``dataset_path`` (or lies inside a pool folder)
    before anything is read: the export would replace the pool it was computed from. (An export
    path that is a folder is refused earlier, by the preflight.)"""
    from trajval_ops.atomic import check_output_spares_inputs

    export_path = getattr(cfg, "export_path", None)
    if export_path:
        check_output_spares_inputs(export_path, {"dataset_path": dataset_path}, output_name="export_path")


def check_export_unsharded(cfg) -> None:
    """Refuse ``export_shard_size`` > 0 before anything runs: Data-Juicer's shard writer rounds
    floats, writes non-atomically and swallows a shard's write error (an empty file, exit 0);
    a trajval run's export is one file written by :func:`trajval_ops.pools.io.write_table`."""
    size = getattr(cfg, "export_shard_size", 0) or 0
    if size > 0:
        from trajval_ops.errors import TrajvalInputError

        raise TrajvalInputError(f"export_shard_size = {size}: a trajval run exports one file, written exactly and "
                                "atomically (Data-Juicer's shard writer drops a shard's write errors); set "
                                "export_shard_size to 0 and split the export afterwards if needed")


def ray_block_rows(cfg) -> int:
    """Rows per Ray block: the greatest common divisor of the endpoint passes' ``batch_size``
    (Data-Juicer's default where a pass sets none); without a pass, the smallest ``batch_size``.

    Ray hands a whole block to one task or actor, so a pool read as one block runs on one actor
    however large the pool is. Small blocks let every actor of a pool take batches as it frees
    up, and a pass's batches are whole blocks: blocks that divide every pass's batch size put each
    pass's batch boundaries where the default executor puts them (the transformers engine seeds
    each generate call from its prompts, so equal boundaries give equal completions). The
    smallest size alone did not: with passes of 64 and 48, the first's batches were 64, 32, 48.
    """
    import math

    from data_juicer.ops.base_op import DEFAULT_BATCH_SIZE

    from trajval_ops.recipe import ENDPOINT_OP

    entries = [(name, args) for entry in getattr(cfg, "process", None) or [] if isinstance(entry, dict)
               for name, args in entry.items() if isinstance(args, dict)]
    passes = [int(args.get("batch_size") or DEFAULT_BATCH_SIZE) for name, args in entries if name == ENDPOINT_OP]
    if passes:
        rows = math.gcd(*passes)
        if rows < min(passes):
            logger.info(f"Ray blocks of {rows} rows, the greatest common divisor of the endpoint passes' batch sizes "
                        f"({', '.join(map(str, passes))}), so every pass's batches begin where the default executor's "
                        "do; batch sizes that divide one another give larger blocks")
        return max(1, rows)
    sizes = [int(args["batch_size"]) for _, args in entries if args.get("batch_size")]
    return max(1, min(sizes, default=DEFAULT_BATCH_SIZE))


def table_blocks(table, rows_per_block: int) -> list:
    """``table`` as zero-copy slices of ``rows_per_block`` rows (one at least, for the schema)."""
    if table.num_rows == 0:
        return [table]
    return [table.slice(start, rows_per_block) for start in range(0, table.num_rows, rows_per_block)]


def _describe_columns(table) -> str:
    from trajval_ops.pools.io import is_json_type

    mixed = [f.name for f in table.schema if is_json_type(f.type)]
    if not mixed:
        return f"{table.num_columns} columns"
    return (f"{table.num_columns} columns; kept as exact JSON because their values differ in type or "
            f"keys between rows: {', '.join(mixed)}")
