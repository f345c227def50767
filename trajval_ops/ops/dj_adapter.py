"""Everything trajval_ops relies on in Data-Juicer beyond its operator API, in one place.

Checked against the installed Data-Juicer when the plugin loads (:func:`check_data_juicer`).
What it provides, through Data-Juicer's own extension points:

- **Loading** (its load-strategy registry): for a run whose recipe uses a trajval operator, a
  local pool is read by :func:`trajval_ops.pool_io.read_table`, which keeps every value as it
  is (``datasets``' JSON loader rewrites mixed columns) and names the file, line and byte of
  bad input. Runs without trajval operators load exactly as Data-Juicer loads them.
- **Export** (an ``Exporter`` subclass): a trajval operator hands the run's exporter to
  :func:`adopt_exporter`, which makes that one exporter write local JSONL and parquet through
  :func:`trajval_ops.pool_io.write_table`: atomically, every value as it was read.
  Data-Juicer's writer works row by row and straight into ``export_path``.
- **Operator arguments** (:func:`safe_op_kwargs`): no silent row loss through
  ``skip_op_error`` or the text key.
- **Whole-pool work** (:func:`transform_whole_pool`): one Arrow-table path for both executors.
"""

from __future__ import annotations

from loguru import logger

#: Data-Juicer releases whose internals this module was written and tested against.
SUPPORTED_DATA_JUICER = ("1.6.1", "1.7")  # >= first, < second

#: Names of the operators this package registers (set by trajval_ops.ops).
TRAJVAL_OPERATORS: set[str] = set()


class UnsupportedDataJuicer(ImportError):
    """The installed Data-Juicer is outside the range this adapter supports."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def check_data_juicer(version: str | None = None) -> str:
    """The installed Data-Juicer version; :class:`UnsupportedDataJuicer` when it is outside
    :data:`SUPPORTED_DATA_JUICER`."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("py-data-juicer")
    low, high = SUPPORTED_DATA_JUICER
    if not _version_tuple(low) <= _version_tuple(version) < _version_tuple(high):
        raise UnsupportedDataJuicer(
            f"trajval_ops supports py-data-juicer >={low},<{high}; this environment has {version}. "
            f"Install a supported release: pip install 'py-data-juicer>={low},<{high}'"
        )
    return version


# ----------------------------------------------------------------------------- operators


def safe_op_kwargs(kwargs: dict) -> dict:
    """Adjust Data-Juicer's base keyword arguments so an operator can neither lose rows silently
    nor trip the preflight over a text key it does not read.

    - ``skip_op_error`` is forced off: Data-Juicer's default turns an exception into a dropped
      row and exit code 0; our errors name the row and must stop the run.
    - Recipes set ``text_keys: null``; our operators read no text, so an unset text key is reset
      to Data-Juicer's default name for its preflight.
    """
    kwargs["skip_op_error"] = False
    if kwargs.get("text_key") is None:
        kwargs["text_key"] = "text"
    return kwargs


def is_ray_mode() -> bool:
    """Whether this process belongs to a Data-Juicer run on the Ray executor."""
    from data_juicer.utils.ray_utils import is_ray_mode as data_juicer_ray_mode

    return data_juicer_ray_mode()


def check_ray_actor_resources(op_name: str, pool_size, num_gpus, gpus_per_engine: int = 1) -> None:
    """Stop a Ray run whose actor pool cannot be placed, before any model loads.

    :param pool_size: the operator's ``num_proc`` under Ray: actors in the pool (an int, or a
        ``[min, max]`` range of which the minimum must fit).
    :param num_gpus: GPUs reserved per actor (None or 0: a CPU pool).
    :param gpus_per_engine: GPUs one engine needs (vLLM's tensor parallel size).
    """
    import ray

    actors = min(pool_size) if isinstance(pool_size, (list, tuple)) else int(pool_size or 1)
    gpus = float(num_gpus or 0)
    if gpus_per_engine > 1 and gpus < gpus_per_engine:
        raise ValueError(f"{op_name}: tensor_parallel_size {gpus_per_engine} needs num_gpus: {gpus_per_engine} "
                         f"per actor; the recipe reserves {gpus:g}")
    if gpus <= 0 or not ray.is_initialized():
        return
    available = float(ray.cluster_resources().get("GPU", 0))
    if actors * gpus > available:
        raise ValueError(f"{op_name}: {actors} actors x num_gpus {gpus:g} = {actors * gpus:g} GPUs, but the Ray "
                         f"cluster has {available:g}; lower num_proc (the actor count) or num_gpus")


def hand_to_ray_actors(op, **settings) -> None:
    """Make ``settings`` constructor arguments of the Ray actors that will run ``op``.

    Data-Juicer builds each actor of a pool from the operator's class and the arguments it was
    constructed with (``_init_kwargs``), not from the driver's instance: what the driver works out
    before the run (a sample drawn from the whole pool) reaches the actors only so."""
    op._init_kwargs = {**(getattr(op, "_init_kwargs", None) or {}), **settings}


def uses_trajval_operators(cfg) -> bool:
    """Whether a parsed recipe lists a trajval operator."""
    for entry in getattr(cfg, "process", None) or []:
        if isinstance(entry, dict) and any(name in TRAJVAL_OPERATORS for name in entry):
            return True
    return False


# ----------------------------------------------------------------------------- tables


def dataset_table(dataset):
    """The rows of a Hugging Face dataset as one ``pyarrow.Table``, in dataset order.

    Data-Juicer's loader may leave an index mapping over the Arrow table;
    ``Dataset.flatten_indices`` would rebuild it row by row in Python (tens of seconds for a
    million rows). An Arrow ``take`` does the same in C++.
    """
    table = dataset.data.table
    if dataset._indices is not None:
        table = table.take(dataset._indices.column(0))
    return table


def table_to_dataset(table):
    """A Data-Juicer dataset over an Arrow table (no copy).

    The dataset gets a random fingerprint: without one ``datasets`` hashes the whole in-memory
    table (0.9 s per million rows, twice a run), and an in-memory dataset writes no cache file
    that a fingerprint could find again.
    """
    from data_juicer.core.data import NestedDataset
    from datasets import Dataset
    from datasets.fingerprint import generate_random_fingerprint

    return NestedDataset(Dataset(table, fingerprint=generate_random_fingerprint()))


def _ray_data_class():
    try:
        import ray.data
    except ImportError:
        return None
    return ray.data.Dataset


def run_whole_pool(op, dataset, transform, *, exporter=None, tracer=None):
    """Data-Juicer's ``run`` contract for an operator that needs the whole pool at once.

    ``transform(pyarrow.Table) -> pyarrow.Table`` gets every row in pool order, under either
    executor. As Data-Juicer's own ``run`` does, this adopts the run's exporter, prepares the
    dataset's columns (``OP.run``) and honours the tracer: Data-Juicer's mapper tracer records
    changes of the text field, which trajval operators never change, so it is told so instead
    of being handed an empty trace.
    """
    from data_juicer.ops.base_op import OP

    start_run(exporter)
    if tracer is not None and getattr(tracer, "should_trace_op", lambda name: False)(op._name):
        logger.info(f"tracer: {op._name} adds columns and changes no text field; nothing to trace")
    ray_data = _ray_data_class()
    if ray_data is None or not isinstance(dataset, ray_data):
        dataset = OP.run(op, dataset)  # Data-Juicer's column preparation (meta / stats / index)
    with user_errors():
        return transform_whole_pool(dataset, transform)


def transform_whole_pool(dataset, transform):
    """Apply ``transform(pyarrow.Table) -> pyarrow.Table`` to the whole pool, on either executor.

    Default executor: the dataset's Arrow table. Ray: the blocks are gathered to the driver in
    order (whole-pool operators work by row position, so the order must be deterministic),
    transformed, and handed back as a Ray dataset.
    """
    ray_data = _ray_data_class()
    if ray_data is not None and isinstance(dataset, ray_data):
        import ray.data

        return ray.data.from_arrow(transform(gather_ray_table(dataset)))
    return table_to_dataset(transform(dataset_table(dataset)))


def gather_ray_table(dataset):
    """A Ray dataset's rows as one ``pyarrow.Table`` on the driver, in dataset order."""
    import pyarrow as pa
    import ray
    import ray.data

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    tables = [t for t in ray.get(dataset.to_arrow_refs()) if t.num_rows]
    return pa.concat_tables(tables, promote_options="default") if tables else dataset.schema().empty_table()


class TableMapper:
    """One Arrow path for a batched trajval mapper under both executors.

    The mapper implements ``transform_table(table, first_row)``: read the columns it needs,
    append the columns it writes, leave every other column as it is. Data-Juicer hands a
    mapper ``dict`` batches under the default executor (``datasets``) and ``pyarrow.Table``
    batches under Ray, and converts the latter to Python and back, which loses exact-JSON
    columns; :meth:`bind_table_process` routes Arrow batches straight to ``transform_table`` and
    dict batches through :meth:`process_batched`, which adds only the new columns to the dict.
    """

    #: True where a batch alone cannot be transformed: under Ray the gathered pool is transformed
    #: at once (:meth:`run`), as under the default executor.
    needs_whole_pool = False

    #: Root column names the mapper reads (its inputs and the id fields used in messages).
    def input_columns(self) -> list[str]:
        raise NotImplementedError

    def transform_table(self, table, first_row: int | None = None):
        """The table with this mapper's columns appended. ``first_row``: position of the
        table's first row in the pool, for messages (None when unknown)."""
        raise NotImplementedError

    def check_pool(self, table) -> None:
        """Whole-pool check of the pool as read, before any batch (none by default). Under Ray the
        executor's dataset calls it on the driver; under the default executor a mapper that
        needs it calls it from its ``run``."""

    def finish_pool(self, table, elapsed_s: float) -> None:
        """Whole-pool work on the pool as it will be written, after the last batch (none by
        default); raising stops the export. Called like :meth:`check_pool`."""

    def bind_table_process(self) -> None:
        """Call at the end of ``__init__``: replace the instance's ``process`` (Data-Juicer's
        dict conversion) by the Arrow-or-dict dispatch."""
        self.process = self._process_table_or_dict

    def _process_table_or_dict(self, batch, *args, **kwargs):
        import pyarrow as pa

        if isinstance(batch, pa.Table):
            return self.transform_table(batch, None)
        return self.process_batched(batch, *args, **kwargs)

    def process_batched(self, samples, indices=None, *args, **kwargs):
        """dict batch in, the same dict with this mapper's columns added out.

        :param indices: the rows' positions in the pool, when the caller knows them.
        """
        from trajval_ops.pool_io import decoded_values, table_from_columns

        num_rows = len(next(iter(samples.values()), []))
        if num_rows == 0:
            return samples
        table = table_from_columns({k: samples[k] for k in self.input_columns() if k in samples}, num_rows)
        first_row = indices[0] if indices else self._batch_first_row(num_rows)
        out = self.transform_table(table, first_row)
        for name in out.column_names:
            if name not in table.column_names:
                samples[name] = decoded_values(out.column(name))
        return samples

    def _batch_first_row(self, num_rows: int) -> int | None:
        """Position of a dict batch's first row when one process sees every batch in order."""
        if getattr(self, "num_proc", None) not in (None, 1, -1):  # -1: Data-Juicer's unset
            return None
        first = getattr(self, "_rows_seen", 0)
        self._rows_seen = first + num_rows
        return first


def append_columns(table, columns: dict):
    """``table`` with ``columns`` (name -> Arrow array) appended; a same-named column is
    replaced where it stands (as ``datasets`` does), so both executors give one column order."""
    for name, values in columns.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, values)
        else:
            table = table.append_column(name, values)
    return table


# ----------------------------------------------------------------------------- loading


def _register_load_strategies() -> None:
    from data_juicer.core.data.load_strategy import (
        DataLoadStrategyRegistry,
        DefaultDataLoadStrategy,
        DefaultLocalDataLoadStrategy,
        RayLocalJsonDataLoadStrategy,
    )

    class TrajvalLocalLoadStrategy(DefaultLocalDataLoadStrategy):
        """Local pools of trajval runs, read without rewriting a value; other runs as before."""

        def __init__(self, ds_config, cfg=None):
            super().__init__(ds_config, cfg=cfg)
            preflight_trajval_run(cfg)

        def load_data(self, **kwargs):
            if not uses_trajval_operators(self.cfg):
                return super().load_data(**kwargs)
            return table_to_dataset(_read_pool(self.cfg, self.ds_config["path"]))

    class TrajvalRayLocalLoadStrategy(RayLocalJsonDataLoadStrategy):
        """The same for the Ray executor: the pool is read on the driver and handed to Ray, and
        the run's export writes what it read (:func:`_ray_dataset_class`)."""

        def __init__(self, ds_config, cfg=None):
            super().__init__(ds_config, cfg=cfg)
            preflight_trajval_run(cfg)

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
            dataset = _ray_dataset_class()(ray.data.from_arrow(table_blocks(table, ray_block_rows(self.cfg))),
                                           cfg=self.cfg)
            dataset.source_table = table  # for the operators' whole-pool checks (TableMapper.check_pool)
            return dataset

    class TrajvalMissingPoolStrategy(DefaultDataLoadStrategy):
        """Data-Juicer takes a ``dataset_path`` that is no file or folder and has at most one
        ``/`` (``pool.jsonl``) for a Hugging Face dataset name, for which its command line has
        no load strategy ("No data load strategy found for huggingface None"). A trajval run
        says the pool file is missing instead; any other run gets Data-Juicer's error."""

        def __init__(self, ds_config, cfg=None):
            super().__init__(ds_config, cfg=cfg)
            preflight_trajval_run(cfg)

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


def preflight_problems(process) -> str | None:
    """Data-Juicer's preflight of a ``process`` list (unknown operators and parameters, with its
    suggestions, and parameter types) as one line, or None when it passes."""
    from data_juicer.core.preflight import PipelineConfigError, pre_instantiation_check

    try:
        pre_instantiation_check(list(process or []))
    except PipelineConfigError as exc:
        return "; ".join(str(error) for error in exc.errors)
    return None


def preflight_trajval_run(cfg) -> None:
    """Run Data-Juicer's preflight for a trajval run when its executor is built (the load
    strategy is built there, before the executor's own preflight): a misspelled operator or
    parameter, the most common recipe mistake, ends the run with one block and exit 2 instead of
    pages of tracebacks. Runs without a trajval operator, or with ``strict_preflight: false``,
    are left to Data-Juicer."""
    if cfg is None or not uses_trajval_operators(cfg) or not getattr(cfg, "strict_preflight", True):
        return
    note_run_log_dir(cfg)
    problems = preflight_problems(cfg.process)
    if problems:
        from trajval_ops.errors import TrajvalInputError

        with user_errors():
            raise TrajvalInputError(f"the recipe's process list: {problems}")


def _read_pool(cfg, path):
    """The pool of a trajval run as one Arrow table, every value as it is in the file; a user
    error (the export would replace the pool, an unreadable line, a reserved column name) ends
    the run with one message."""
    from trajval_ops.pool_io import read_table

    from trajval_ops.recipe import ENDPOINT_OP, check_same_sample, entry_sample, pass_name

    note_run_log_dir(cfg)
    restore_unset_settings(cfg)
    with user_errors():
        entries = [(name, settings) for entry in getattr(cfg, "process", None) or [] if isinstance(entry, dict)
                   for name, settings in entry.items()]
        check_same_sample([(pass_name(settings, index), entry_sample(settings))
                           for index, (name, settings) in enumerate(entries)
                           if name == ENDPOINT_OP and isinstance(settings, dict)])
        check_export_spares_pool(cfg, path)
        table = read_table(path)
        check_column_names(table, path)
    logger.info(f"trajval_ops: loaded {table.num_rows} rows from {path} ({_describe_columns(table)})")
    return table


def restore_unset_settings(cfg, argv: list[str] | None = None) -> list[str]:
    """Give each trajval operator of a recipe the settings its own entry gives, no others.

    Data-Juicer's config parser merges the entries of one operator into one namespace in turn
    (``update_op_process``), so a setting only an earlier entry of the same operator gives reaches
    the later ones: a short pass's ``output_key`` would become the early pass's, and it would
    overwrite the short one's column. The operators are built from ``cfg.process`` after the pool
    is read, so here, before, every trajval entry gets back the declared default of each of its
    own settings that its recipe entry does not give (nor the command line, which sets all of
    them). Returns what was restored, as ``op[i].setting`` (also logged).
    """
    import inspect
    import sys

    import yaml
    from data_juicer.ops.base_op import OPERATORS

    argv = sys.argv[1:] if argv is None else argv
    try:
        sources = [str(path) for path in (getattr(cfg, "config", None) or [])]
        with open(sources[-1], encoding="utf-8") as handle:
            written = (yaml.safe_load(handle) or {}).get("process") or []
    except (OSError, IndexError, yaml.YAMLError, AttributeError):
        return []  # a config built in code: nothing was merged from a file
    parsed = getattr(cfg, "process", None) or []
    restored = []
    for name in sorted(TRAJVAL_OPERATORS):
        given = [(entry.get(name) or {}) for entry in written if isinstance(entry, dict) and name in entry]
        built = [entry[name] for entry in parsed if isinstance(entry, dict) and name in entry]
        if len(given) < 2 or len(given) != len(built) or name not in OPERATORS.modules:
            continue  # one entry cannot inherit; a count that differs is not the merge this undoes
        defaults = {key: parameter.default for key, parameter in
                    inspect.signature(OPERATORS.modules[name].__init__).parameters.items()
                    if parameter.default is not inspect.Parameter.empty}
        on_command_line = {arg.split("=")[0].split(".", 1)[1] for arg in argv if arg.startswith(f"--{name}.")}
        for index, (own, settings) in enumerate(zip(given, built)):
            if not isinstance(settings, dict):
                continue
            for key, default in defaults.items():
                if key in own or key in on_command_line or key not in settings or settings[key] == default:
                    continue
                settings[key] = default
                restored.append(f"{name}[{index}].{key}")
    if restored:
        logger.info(f"trajval_ops: settings an earlier entry of the same operator gave, which Data-Juicer's config "
                    f"merge passed on, set back to their defaults: {', '.join(restored)}")
    return restored


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
    before anything is read: the export would replace the pool it was computed from."""
    from trajval_ops.atomic import check_output_spares_inputs

    export_path = getattr(cfg, "export_path", None)
    if export_path:
        check_output_spares_inputs(export_path, {"dataset_path": dataset_path}, output_name="export_path")


def ray_block_rows(cfg) -> int:
    """Rows per Ray block: the smallest ``batch_size`` of the recipe's operators.

    Ray hands a whole block to one task or actor, so a pool read as one block runs on one actor
    however large the pool is. Blocks of one batch each let every actor of a pool take batches
    as it frees up, and put the batch boundaries where the default executor puts them (the
    transformers engine seeds each generate call from its prompts, so equal boundaries give
    equal completions).
    """
    from data_juicer.ops.base_op import DEFAULT_BATCH_SIZE

    sizes = [int(args["batch_size"]) for entry in getattr(cfg, "process", None) or [] if isinstance(entry, dict)
             for args in entry.values() if isinstance(args, dict) and args.get("batch_size")]
    return max(1, min(sizes, default=DEFAULT_BATCH_SIZE))


def table_blocks(table, rows_per_block: int) -> list:
    """``table`` as zero-copy slices of ``rows_per_block`` rows (one at least, for the schema)."""
    if table.num_rows == 0:
        return [table]
    return [table.slice(start, rows_per_block) for start in range(0, table.num_rows, rows_per_block)]


def _describe_columns(table) -> str:
    from trajval_ops.pool_io import is_json_type

    mixed = [f.name for f in table.schema if is_json_type(f.type)]
    if not mixed:
        return f"{table.num_columns} columns"
    return (f"{table.num_columns} columns; kept as exact JSON because their values differ in type or "
            f"keys between rows: {', '.join(mixed)}")


# ----------------------------------------------------------------------------- export


_RAY_DATASET_CLASS = None
_EXACT_RAY_CLASSES: dict = {}


def _ray_dataset_class():
    """Data-Juicer's ``RayDataset`` whose Ray data writes JSONL and parquet exactly.

    The Ray executor exports ``dataset.data`` with Ray's writers, which round floats to 10
    significant digits and write ``arrow.json`` columns as strings. Every Ray dataset this
    ``RayDataset`` holds is given :func:`_exact_ray_writers` (only that object changes), so the
    run's export writes through :func:`trajval_ops.pool_io.write_table`: one file at
    ``export_path`` with the bytes the default executor writes.
    """
    global _RAY_DATASET_CLASS
    if _RAY_DATASET_CLASS is None:
        import time

        from data_juicer.core.data.ray_dataset import RayDataset

        class TrajvalRayDataset(RayDataset):
            source_table = None

            @property
            def data(self):
                return self._trajval_data

            @data.setter
            def data(self, dataset):
                self._trajval_data = _exact_ray_writers(dataset)
                # the executor replaces the data (materialize) after process: the checks go along
                self._trajval_data._trajval_finishers = getattr(self, "_trajval_finishers", [])

            def process(self, operators, *args, **kwargs):
                # Ray calls a mapper batch by batch in actors: the whole-pool checks a mapper
                # makes in ``run`` under the default executor are made here, on the driver,
                # before the run (the pool as read) and at the export (the pool as written)
                operators = operators if isinstance(operators, list) else [operators]
                table_mappers = [op for op in operators if isinstance(op, TableMapper)]
                with user_errors():
                    for op in table_mappers:
                        if self.source_table is not None:
                            op.check_pool(self.source_table)
                    started = time.perf_counter()
                    result = super().process(operators, *args, **kwargs)
                self._trajval_finishers = [
                    lambda table, finish=op.finish_pool: finish(table, time.perf_counter() - started)
                    for op in table_mappers]
                self._trajval_data._trajval_finishers = self._trajval_finishers
                return result

            def _run_single_op(self, op, cached_columns=None, tracer=None, stats_only=False):
                # a mapper that scores the pool as a whole (a fitted estimator or predictor)
                # cannot see it batch by batch: it runs like a Pipeline op, on the gathered pool
                if not (isinstance(op, TableMapper) and op.needs_whole_pool):
                    return super()._run_single_op(op, cached_columns, tracer=tracer, stats_only=stats_only)
                self.data = op.run(self.data, tracer=tracer)
                return set(self.data.columns())

        _RAY_DATASET_CLASS = TrajvalRayDataset
    return _RAY_DATASET_CLASS


def _exact_ray_writers(dataset):
    """Give one Ray dataset object exact ``write_json`` / ``write_parquet`` methods."""
    base = type(dataset)
    if getattr(base, "_trajval_exact", False) or not hasattr(base, "write_json"):
        return dataset
    if base not in _EXACT_RAY_CLASSES:

        def write_json(self, path, **_ignored):
            _write_ray_dataset(self, path)

        def write_parquet(self, path, **_ignored):
            _write_ray_dataset(self, path)

        _EXACT_RAY_CLASSES[base] = type(base.__name__, (base,), {
            "write_json": write_json, "write_parquet": write_parquet, "_trajval_exact": True,
            "__doc__": base.__doc__, "__module__": base.__module__,
        })
    dataset.__class__ = _EXACT_RAY_CLASSES[base]
    return dataset


def _write_ray_dataset(dataset, path) -> None:
    """Gather a Ray dataset on the driver in order and write it as one file at ``path`` (the
    exporter made ``path`` a folder for Ray's shards; an empty one is replaced by the file).
    The operators' end-of-run checks (``TableMapper.finish_pool``) see the table first."""
    import os

    from trajval_ops.pool_io import write_table

    if os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)  # first: a user error below ends the process, which must leave no export behind
    with user_errors():
        table = gather_ray_table(dataset)
        for finish in getattr(dataset, "_trajval_finishers", ()):
            finish(table)  # raises for a run that must not be written
    write_table(table, path)
    logger.info(f"trajval_ops: wrote {table.num_rows} rows to {path}")


_EXACT_SUFFIXES = ("jsonl", "parquet")


def _exporter_class():
    from data_juicer.core.exporter import Exporter
    from data_juicer.utils.constant import Fields, HashKeys

    class TrajvalExporter(Exporter):
        """Data-Juicer's exporter, writing local JSONL and parquet through
        :func:`trajval_ops.pool_io.write_table` (atomic, values as read)."""

        def _exact(self, export_path, suffix) -> bool:
            from urllib.parse import urlparse

            return (suffix in _EXACT_SUFFIXES and self.export_shard_size <= 0
                    and not getattr(self, "encrypt_before_export", False)
                    and urlparse(str(export_path)).scheme in ("", "file"))

        def _export_impl(self, dataset, export_path, suffix, export_stats=True):
            if not self._exact(export_path, suffix):
                return super()._export_impl(dataset, export_path, suffix, export_stats)
            if export_stats:  # Data-Juicer's stats side file, if any; not the data
                export_ds, self.export_ds = self.export_ds, False
                try:
                    super()._export_impl(dataset, export_path, suffix, export_stats)
                finally:
                    self.export_ds = export_ds
            if not self.export_ds:
                return
            drop = set()
            if not self.keep_stats_in_res_ds:
                drop |= {Fields.stats, Fields.meta}
            if not self.keep_hashes_in_res_ds:
                drop |= {HashKeys.hash, HashKeys.minhash, HashKeys.simhash, HashKeys.imagehash, HashKeys.videohash}
            from trajval_ops.pool_io import write_table

            table = dataset_table(dataset)
            table = table.drop_columns([name for name in table.column_names if name in drop])
            write_table(table, export_path)
            logger.info(f"trajval_ops: wrote {table.num_rows} rows to {export_path}")

    return TrajvalExporter


_TRAJVAL_EXPORTER = None


def adopt_exporter(exporter) -> None:
    """Make this run's Data-Juicer exporter write through :func:`trajval_ops.pool_io.write_table`
    (only this exporter object changes; other exporters keep Data-Juicer's writer)."""
    global _TRAJVAL_EXPORTER
    if exporter is None:
        return
    from data_juicer.core.exporter import Exporter

    if _TRAJVAL_EXPORTER is None:
        _TRAJVAL_EXPORTER = _exporter_class()
    if type(exporter) is Exporter:
        exporter.__class__ = _TRAJVAL_EXPORTER


def start_run(exporter) -> None:
    """What every trajval operator does first in ``run``: adopt the run's exporter, and start the
    guardian that ends this process's descendants if it is killed (:mod:`trajval_ops.lifetime`)."""
    from trajval_ops.lifetime import guard_descendants

    adopt_exporter(exporter)
    guard_descendants()


_LOAD_STRATEGY_MODULE = "data_juicer.core.data.load_strategy"


def install(operator_names) -> None:
    """Called once when the plugin loads: check the version, register the load strategies.

    Data-Juicer loads plugins while its config module is still importing, and importing its
    load-strategy module then would be circular. The strategies are registered as soon as that
    module has been imported (it always is before a dataset loads): at once when it already is,
    else right after Data-Juicer imports it.
    """
    import os
    import sys
    from pathlib import Path

    check_data_juicer()
    TRAJVAL_OPERATORS.update(operator_names)
    if Path(sys.argv[0] if sys.argv else "").name == "dj-process":
        _RUN["pid"] = os.getpid()
    _after_import(_LOAD_STRATEGY_MODULE, _register_load_strategies)


def _after_import(name: str, callback) -> None:
    """Run ``callback`` once module ``name`` is fully imported (now, or right after its import)."""
    import importlib.abc
    import importlib.machinery
    import sys

    module = sys.modules.get(name)
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        callback()
        return

    class AfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return spec
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                callback()

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, AfterImport())


# ----------------------------------------------------------------------------- user errors

#: the dj-process main process (set when the plugin loads) and the run's log folder (set when
#: the pool loads); user errors raised in that process end the run with one readable message
_RUN: dict = {"pid": None, "log_dir": None}
#: exit code of a run stopped by a user error (bad input or settings)
USER_ERROR_EXIT = 2


def note_run_log_dir(cfg) -> None:
    """Remember where Data-Juicer writes this run's logs (``event_log_dir``, else ``<work_dir>/logs``)."""
    import os

    log_dir = getattr(cfg, "event_log_dir", None)
    work_dir = getattr(cfg, "work_dir", None)
    if log_dir or work_dir:
        _RUN["log_dir"] = log_dir or os.path.join(work_dir, "logs")


def user_error_of(exc: BaseException):
    """The user error (bad input or settings of a trajval operator) behind ``exc``, or None:
    ``exc`` itself or one it was raised from (a Ray task error wraps the actor's)."""
    from trajval_ops.errors import TrajvalInputError

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (TrajvalInputError, SettingError)):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


class SettingError(ValueError):
    """A trajval operator's parameter or setting that cannot work (raised when the operator is built)."""


class user_errors:
    """``with user_errors():`` around a trajval entry point: in the dj-process main process a user
    error prints one readable block (the message, and the file holding its traceback) and ends
    the run with exit code 2; Data-Juicer's and Python's tracebacks of it, pages of variable
    dumps, are not printed. Elsewhere (map workers, Ray actors, tests) it propagates.

    :param settings: also treat a ``ValueError`` as a user error (an operator's parameter checks).
    """

    def __init__(self, settings: bool = False):
        self.settings = settings

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        import os

        error = user_error_of(exc) if exc is not None else None
        if error is None and self.settings and isinstance(exc, ValueError):
            error = exc
        if error is None or _RUN["pid"] != os.getpid():
            return False
        _exit_with_message(error, exc)


def _exit_with_message(error: BaseException, raised: BaseException) -> None:
    import os
    import sys
    import tempfile
    import traceback

    log_dir = _RUN["log_dir"] or tempfile.gettempdir()
    path = os.path.join(log_dir, f"trajval_error-{os.getpid()}.log")
    try:
        os.makedirs(log_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(traceback.format_exception(type(raised), raised, raised.__traceback__)))
    except OSError:
        path = None
    logger.opt(exception=raised).debug("trajval_ops: the run stopped on a user error")  # Data-Juicer's debug log
    logger.complete()
    where = f"\n  (traceback: {path})" if path else ""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # to the process's own stderr: Data-Juicer redirects sys.stderr into its logger
    os.write(2, f"\ntrajval_ops: error: {error}{where}\n".encode("utf-8", "replace"))
    os._exit(USER_ERROR_EXIT)  # Data-Juicer's handlers would print the traceback twice more


def checked_parameters(init):
    """Decorate an operator's ``__init__``: every argument is checked against its declared type
    and bounds (pydantic, strict: no bool for a number, no 2.5 for an integer, no unknown
    choice) before the operator is built, the error naming the parameter; a setting error then
    ends a dj-process run with one readable message (:class:`user_errors`). The signature and
    docstring stay the operator's own (Data-Juicer's config parser reads them)."""
    import functools
    import inspect
    import os
    import typing

    signature = inspect.signature(init)
    hints = typing.get_type_hints(init, include_extras=True)
    adapters = {}

    def adapter(name):
        if name not in adapters:
            from pydantic import TypeAdapter

            adapters[name] = TypeAdapter(hints[name])
        return adapters[name]

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        from pydantic import ValidationError

        with user_errors(settings=True):
            bound = signature.bind_partial(self, *args, **kwargs)
            for name, value in bound.arguments.items():
                if name not in hints or signature.parameters[name].kind in (inspect.Parameter.VAR_POSITIONAL,
                                                                           inspect.Parameter.VAR_KEYWORD):
                    continue
                try:  # a path object where a path string is declared is a path all the same
                    adapter(name).validate_python(os.fspath(value) if isinstance(value, os.PathLike) else value,
                                                  strict=True)
                except ValidationError as exc:
                    reason = exc.errors()[0]["msg"]
                    raise SettingError(f"{getattr(self, '_name', type(self).__name__)}: parameter '{name}' = "
                                       f"{value!r}: {reason}") from None
            init(self, *args, **kwargs)

    return checked
