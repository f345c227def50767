"""Keyword handling shared by every trajval operator's ``__init__``."""

from __future__ import annotations


def safe_op_kwargs(kwargs: dict) -> dict:
    """Adjust Data-Juicer's base keyword arguments so an operator can neither lose rows silently
    nor trip the preflight over a text key it does not read.

    - ``skip_op_error`` is forced off: Data-Juicer's default turns an exception into a dropped
      row and exit code 0; our errors name the row and must stop the run.
    - Recipes set ``text_keys: null`` so Data-Juicer's loader cannot drop rows whose text field
      is None. Our operators read no text; an unset text key is reset to Data-Juicer's default
      name so the preflight does not look for a column called None.

    It also installs the atomic JSONL export (:mod:`trajval_ops.ops.jsonl_export`) for the
    run that builds the operator.
    """
    from trajval_ops.ops.jsonl_export import install_jsonl_export

    install_jsonl_export()
    kwargs["skip_op_error"] = False
    if kwargs.get("text_key") is None:
        kwargs["text_key"] = "text"
    return kwargs


def dataset_table(dataset):
    """The rows of a Hugging Face dataset as one ``pyarrow.Table``, in dataset order.

    Data-Juicer's loader filters the pool, which leaves an index mapping over the Arrow table;
    ``Dataset.flatten_indices`` would rebuild it row by row in Python (tens of seconds for a
    million rows). An Arrow ``take`` does the same in C++.
    """
    table = dataset.data.table
    if dataset._indices is not None:
        table = table.take(dataset._indices.column(0))
    return table


def table_to_dataset(table):
    """A Data-Juicer dataset over an Arrow table (no copy)."""
    from data_juicer.core.data import NestedDataset
    from datasets import Dataset

    return NestedDataset(Dataset(table))


def transform_whole_pool(dataset, transform):
    """Apply ``transform(pyarrow.Table) -> pyarrow.Table`` to the whole pool, on either executor.

    Default executor: the Hugging Face dataset's Arrow table. Ray: the blocks are gathered to
    the driver in order (whole-pool operators draw by row position, so the order must be
    deterministic), transformed, and handed back as a Ray dataset.
    """
    try:
        import ray.data
    except ImportError:
        ray = None
    if ray is not None and isinstance(dataset, ray.data.Dataset):
        import pyarrow as pa

        ray.data.DataContext.get_current().execution_options.preserve_order = True
        tables = [t for t in ray.get(dataset.to_arrow_refs()) if t.num_rows]
        table = pa.concat_tables(tables, promote_options="default") if tables else dataset.schema().empty_table()
        return ray.data.from_arrow(transform(table))
    return table_to_dataset(transform(dataset_table(dataset)))
