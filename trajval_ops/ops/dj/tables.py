"""A Data-Juicer dataset as one Arrow table and back, on either executor, without a row-by-row
copy: the whole-pool operators work on Arrow tables."""

from __future__ import annotations

from trajval_ops.pools.io import append_columns  # noqa: F401  (the operators' import of it)


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


def ray_data_class():
    try:
        import ray.data
    except ImportError:
        return None
    return ray.data.Dataset


def transform_whole_pool(dataset, transform):
    """Apply ``transform(pyarrow.Table) -> pyarrow.Table`` to the whole pool, on either executor.

    Default executor: the dataset's Arrow table. Ray: the blocks are gathered to the driver in
    order (whole-pool operators work by row position, so the order must be deterministic),
    transformed, and handed back as a Ray dataset.
    """
    ray_data = ray_data_class()
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


def with_column_types(dataset, types: dict[str, str]):
    """``dataset`` with an all-null column for each of ``types`` (name -> Arrow type name) it
    lacks, so that a map writing that column writes it in that type.

    ``datasets``' map fixes a new column's type from the first batch it writes: a column null
    throughout that batch (a sampled pass's rows it left out have no pass rate) would stay
    null-typed, and a later batch holding a value stops the run ("Couldn't write column ...: its
    type in this file is null"). A column the dataset has is written in its own type first (map's
    ``try_original_type``). The dataset gets a random fingerprint, as :func:`table_to_dataset`'s.
    """
    from datasets import Value
    from datasets.fingerprint import generate_random_fingerprint

    for name, kind in types.items():
        if name not in dataset.column_names:
            dataset = dataset.add_column(name, [None] * len(dataset), feature=Value(kind),
                                         new_fingerprint=generate_random_fingerprint())
    return dataset
