"""The run's export written exactly: Data-Juicer's exporter (default executor) and Ray's dataset
writers (Ray executor) write local JSONL (``.jsonl`` and ``.json``: JSON lines) and parquet through
:func:`trajval_ops.pools.io.write_table` (atomically, every value as it was read); Data-Juicer's
writer works row by row and straight into ``export_path``, Ray's rounds floats to 10 digits.
Only the objects of a trajval run change."""

from __future__ import annotations

from loguru import logger

from trajval_ops.ops.dj.error_exit import user_errors
from trajval_ops.ops.dj.tables import dataset_table, gather_ray_table


_EXACT_RAY_CLASSES: dict = {}


def exact_ray_writers(dataset):
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

    from trajval_ops.pools.io import write_table

    if os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)  # first: a user error below ends the process, which must leave no export behind
    with user_errors():
        table = gather_ray_table(dataset)
        for finish in getattr(dataset, "_trajval_finishers", ()):
            finish(table)  # raises for a run that must not be written
    # what the default executor's export leaves out (Data-Juicer's stats of a filter, ...): Ray's
    # exporter drops only the columns the dataset had before the operators ran
    dropped = getattr(dataset, "_trajval_dropped", ())
    table = table.drop_columns([name for name in table.column_names if name in dropped])
    write_table(table, path)
    logger.info(f"trajval_ops: wrote {table.num_rows} rows to {path}")


def check_export_path(cfg) -> None:
    """Refuse, before Data-Juicer's exporter is built (which raised a bare ValueError on the
    second), an ``export_path`` the run cannot write: an existing folder (the export is one file;
    atomic writes replace a file, not a folder), a path under a file, and under the default
    executor a path without a suffix when no ``export_type`` gives the format.

    :raises TrajvalInputError: naming the path.
    """
    from trajval_ops.atomic import check_output_is_writable_as_a_file
    from trajval_ops.errors import TrajvalInputError

    export_path = getattr(cfg, "export_path", None)
    if not export_path:
        return
    check_output_is_writable_as_a_file(export_path, "export_path")
    # Data-Juicer's exporter reads the format from the text after the last '.' of the path's last part
    *_, suffix = str(export_path).rsplit(".", 1) if "." in str(export_path) else ("", "/")
    if "/" in suffix and not getattr(cfg, "export_type", None) and getattr(cfg, "executor_type", "default") == "default":
        raise TrajvalInputError(f"export_path {str(export_path)!r} has no suffix: it names the file to write, whose "
                                "suffix gives its format (.jsonl, .json or .parquet); add one, or set export_type")


#: a ``.json`` export is JSON lines, as Ray's ``write_json`` writes it (Data-Juicer's pandas
#: writer would round floats, write ``1`` as ``1.0`` and mixed columns as strings)
_EXACT_SUFFIXES = ("jsonl", "json", "parquet")


def dropped_at_export(keep_stats: bool, keep_hashes: bool) -> set[str]:
    """The columns Data-Juicer's exporters leave out of the export: its stats and meta fields
    unless ``keep_stats_in_res_ds``, its hash fields unless ``keep_hashes_in_res_ds``."""
    from data_juicer.utils.constant import Fields, HashKeys

    drop = set()
    if not keep_stats:
        drop |= {Fields.stats, Fields.meta}
    if not keep_hashes:
        drop |= {HashKeys.hash, HashKeys.minhash, HashKeys.simhash, HashKeys.imagehash, HashKeys.videohash}
    return drop


def _exporter_class():
    from data_juicer.core.exporter import Exporter

    class TrajvalExporter(Exporter):
        """Data-Juicer's exporter, writing local JSONL and parquet through
        :func:`trajval_ops.pools.io.write_table` (atomic, values as read)."""

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
            drop = dropped_at_export(self.keep_stats_in_res_ds, self.keep_hashes_in_res_ds)
            from trajval_ops.pools.io import write_table

            table = dataset_table(dataset)
            table = table.drop_columns([name for name in table.column_names if name in drop])
            write_table(table, export_path)
            logger.info(f"trajval_ops: wrote {table.num_rows} rows to {export_path}")

    return TrajvalExporter


_TRAJVAL_EXPORTER = None


def adopt_exporter(exporter) -> None:
    """Make this run's Data-Juicer exporter write through :func:`trajval_ops.pools.io.write_table`
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
