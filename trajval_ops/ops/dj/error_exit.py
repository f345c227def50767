"""A user error of a trajval run (bad input, a setting that cannot work) ends ``dj-process`` with
one readable block and exit code 2: Data-Juicer's own handlers would print its traceback twice
and pages of variable dumps. The traceback goes to a file in the run's log folder."""

from __future__ import annotations

from loguru import logger


#: the dj-process main process (set when the plugin loads) and the run's log folder (set when
#: the pool loads); user errors raised in that process end the run with one readable message
RUN: dict = {"pid": None, "log_dir": None}


#: exit code of a run stopped by a user error (bad input or settings)
USER_ERROR_EXIT = 2


def note_run_log_dir(cfg) -> None:
    """Remember where Data-Juicer writes this run's logs (``event_log_dir``, else ``<work_dir>/logs``)."""
    import os

    log_dir = getattr(cfg, "event_log_dir", None)
    work_dir = getattr(cfg, "work_dir", None)
    if log_dir or work_dir:
        RUN["log_dir"] = log_dir or os.path.join(work_dir, "logs")


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
        if error is None or RUN["pid"] != os.getpid():
            return False
        _exit_with_message(error, exc)


def _exit_with_message(error: BaseException, raised: BaseException) -> None:
    import os
    import sys
    import tempfile
    import traceback

    log_dir = RUN["log_dir"] or tempfile.gettempdir()
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
