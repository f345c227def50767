"""The base of the trajval mappers: one Arrow path for a batched mapper under both executors, and
Data-Juicer's ``run`` contract for an operator that needs the whole pool at once."""

from __future__ import annotations

from loguru import logger

from trajval_ops.ops.dj.error_exit import user_errors
from trajval_ops.ops.dj.export import start_run
from trajval_ops.ops.dj.tables import ray_data_class, transform_whole_pool


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
    ray_data = ray_data_class()
    if ray_data is None or not isinstance(dataset, ray_data):
        dataset = OP.run(op, dataset)  # Data-Juicer's column preparation (meta / stats / index)
    with user_errors():
        return transform_whole_pool(dataset, transform)


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

    def place_worker(self, rank: int) -> None:
        """Called before each batch with the map worker's rank, which Data-Juicer hands a worker
        only in its GPU mode (``accelerator: cuda`` on a machine with CUDA); nothing by default."""

    def _process_table_or_dict(self, batch, rank=None):
        import pyarrow as pa

        if rank is not None:  # Data-Juicer's `with_rank`: the only argument it passes after the batch
            self.place_worker(rank)
        if isinstance(batch, pa.Table):
            return self.transform_table(batch, None)
        return self.process_batched(batch)

    def process_batched(self, samples, indices=None, *args, **kwargs):
        """dict batch in, the same dict with this mapper's columns added out.

        :param indices: the rows' positions in the pool, when the caller knows them.
        """
        from trajval_ops.pools.io import decoded_values, table_from_columns

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
