"""Data-Juicer's ``RayDataset`` for a trajval run: its data written exactly at the export, and the
whole-pool hooks of the trajval mappers (``check_pool``, ``finish_pool``, a whole-pool mapper)
called on the driver, which Ray's batch-by-batch calls in actors otherwise skip, each on the
pool as it reaches the mapper and as the mapper leaves it (as under the default executor)."""

from __future__ import annotations

from trajval_ops.ops.dj.error_exit import user_errors
from trajval_ops.ops.dj.export import exact_ray_writers
from trajval_ops.ops.dj.table_mapper import TableMapper
from trajval_ops.ops.dj.tables import gather_ray_table


_RAY_DATASET_CLASS = None


def ray_dataset_class():
    """Data-Juicer's ``RayDataset`` whose Ray data writes JSONL and parquet exactly.

    The Ray executor exports ``dataset.data`` with Ray's writers, which round floats to 10
    significant digits and write ``arrow.json`` columns as strings. Every Ray dataset this
    ``RayDataset`` holds is given :func:`exact_ray_writers` (only that object changes), so the
    run's export writes through :func:`trajval_ops.pools.io.write_table`: one file at
    ``export_path`` with the bytes the default executor writes.
    """
    global _RAY_DATASET_CLASS
    if _RAY_DATASET_CLASS is None:
        import time

        from data_juicer.core.data.ray_dataset import RayDataset

        class TrajvalRayDataset(RayDataset):
            source_table = None
            #: the columns the export leaves out (:func:`~trajval_ops.ops.dj.export.dropped_at_export`)
            export_dropped: frozenset = frozenset()

            @property
            def data(self):
                return self._trajval_data

            @data.setter
            def data(self, dataset):
                self._trajval_data = exact_ray_writers(dataset)
                # the executor replaces the data (materialize) after process: the checks go along
                self._trajval_data._trajval_finishers = getattr(self, "_trajval_finishers", [])
                self._trajval_data._trajval_dropped = self.export_dropped

            def process(self, operators, *args, **kwargs):
                # Ray calls a mapper batch by batch in actors: the whole-pool checks a mapper
                # makes in ``run`` under the default executor are made here, on the driver. The
                # pool as read (before the run) and as written (at the export) stand in for the
                # pool that reaches a mapper and that it leaves where no operator between them
                # can change the rows; elsewhere the pool is gathered at the mapper (below).
                operators = operators if isinstance(operators, list) else [operators]
                self._trajval_sides = pool_sides(operators)
                table_mappers = [op for op in operators if isinstance(op, TableMapper)]
                with user_errors():
                    for op in table_mappers:
                        if self.source_table is not None and not self._trajval_sides[id(op)][0]:
                            op.check_pool(self.source_table)
                    started = time.perf_counter()
                    result = super().process(operators, *args, **kwargs)
                self._trajval_finishers = [
                    lambda table, finish=op.finish_pool: finish(table, time.perf_counter() - started)
                    for op in table_mappers if not self._trajval_sides[id(op)][1]]
                self._trajval_data._trajval_finishers = self._trajval_finishers
                return result

            def _run_single_op(self, op, cached_columns=None, tracer=None, stats_only=False):
                if not isinstance(op, TableMapper):
                    return super()._run_single_op(op, cached_columns, tracer=tracer, stats_only=stats_only)
                rows_changed_before, rows_change_after = getattr(self, "_trajval_sides", {}).get(id(op), (False, False))
                if rows_changed_before and _defines(op, "check_pool"):  # the pool that reaches it
                    self.data = self.data.materialize()
                    with user_errors():
                        op.check_pool(gather_ray_table(self.data))
                started = time.perf_counter()
                if op.needs_whole_pool:
                    # a mapper that scores the pool as a whole (a fitted estimator or predictor)
                    # cannot see it batch by batch: it runs like a Pipeline op, on the gathered pool
                    self.data = op.run(self.data, tracer=tracer)
                    cached_columns = set(self.data.columns())
                else:
                    cached_columns = super()._run_single_op(op, cached_columns, tracer=tracer, stats_only=stats_only)
                if rows_change_after and _defines(op, "finish_pool"):  # before rows are dropped or repeated
                    self.data = self.data.materialize()
                    with user_errors():
                        op.finish_pool(gather_ray_table(self.data), time.perf_counter() - started)
                return cached_columns

        _RAY_DATASET_CLASS = TrajvalRayDataset
    return _RAY_DATASET_CLASS


def _defines(op, hook: str) -> bool:
    """Whether ``op`` has its own whole-pool ``hook``: gathering the pool for the no-op default
    would cost a pass over the data for nothing."""
    return getattr(type(op), hook) is not getattr(TableMapper, hook)


def pool_sides(operators) -> dict[int, tuple[bool, bool]]:
    """For each trajval table mapper of ``operators`` (by ``id``): whether an operator before it,
    and one after it, can change the rows (drop, repeat or reorder them: a filter, a resampler);
    the trajval mappers and the probe trainer keep every row in place."""
    keeps = [isinstance(op, TableMapper) or getattr(op, "keeps_rows", False) for op in operators]
    return {id(op): (not all(keeps[:i]), not all(keeps[i + 1:]))
            for i, op in enumerate(operators) if isinstance(op, TableMapper)}
