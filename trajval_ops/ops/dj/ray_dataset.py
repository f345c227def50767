"""Data-Juicer's ``RayDataset`` for a trajval run: its data written exactly at the export, and the
whole-pool hooks of the trajval mappers (``check_pool``, ``finish_pool``, a whole-pool mapper)
called on the driver, which Ray's batch-by-batch calls in actors otherwise skip."""

from __future__ import annotations

from trajval_ops.ops.dj.error_exit import user_errors
from trajval_ops.ops.dj.export import exact_ray_writers
from trajval_ops.ops.dj.table_mapper import TableMapper


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

            @property
            def data(self):
                return self._trajval_data

            @data.setter
            def data(self, dataset):
                self._trajval_data = exact_ray_writers(dataset)
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
