"""Data-Juicer's preflight (unknown operators and parameters, with its suggestions) run for a
trajval run when its executor is built, so that the most common recipe mistake ends the run with
one block and exit 2."""

from __future__ import annotations

from trajval_ops.ops.dj.error_exit import note_run_log_dir, user_errors
from trajval_ops.ops.dj.executor import uses_trajval_operators
from trajval_ops.ops.dj.export import check_export_path


def preflight_problems(process) -> str | None:
    """Data-Juicer's preflight of a ``process`` list (unknown operators and parameters, with its
    suggestions, and parameter types) as one line, or None when it passes."""
    from data_juicer.core.preflight import PipelineConfigError, pre_instantiation_check

    try:
        pre_instantiation_check(list(process or []))
    except PipelineConfigError as exc:
        return "; ".join(str(error) for error in exc.errors)
    return None


def post_instantiation_problems(ops, executor_type: str) -> str | None:
    """Data-Juicer's check of built operators (each one supported by the executor: a Selector
    under Ray is not) as one line, or None when it passes."""
    from types import SimpleNamespace

    from data_juicer.core.preflight import PipelineRuntimeError, post_instantiation_check

    try:
        post_instantiation_check(list(ops), None, SimpleNamespace(executor_type=executor_type))
    except PipelineRuntimeError as exc:
        return "; ".join(str(error) for error in exc.errors)
    return None


def preflight_trajval_run(cfg) -> None:
    """Check a trajval run when its executor is built (the load strategy is built there, before
    the executor's exporter and its own preflight): an export path it cannot write
    (:func:`~trajval_ops.ops.dj.export.check_export_path`), and Data-Juicer's preflight, so that a
    misspelled operator or parameter, the most common recipe mistake, ends the run with one block
    and exit 2 instead of pages of tracebacks. Runs without a trajval operator are left to
    Data-Juicer, and so is its preflight with ``strict_preflight: false``."""
    if cfg is None or not uses_trajval_operators(cfg):
        return
    note_run_log_dir(cfg)
    with user_errors():
        check_export_path(cfg)
    if not getattr(cfg, "strict_preflight", True):
        return
    problems = preflight_problems(cfg.process)
    if problems:
        from trajval_ops.errors import TrajvalInputError

        with user_errors():
            raise TrajvalInputError(f"the recipe's process list: {problems}")
