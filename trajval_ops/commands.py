"""The console commands this package starts as child processes, found from the running
interpreter (imports nothing heavy: the validation protocol's parent process uses it)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def dj_process_path() -> str:
    """Data-Juicer's ``dj-process`` for this interpreter: the script beside it (a virtualenv's
    ``bin/``), else the one on ``PATH`` (a ``pip install --target`` folder's ``bin/``)."""
    beside = Path(sys.executable).with_name("dj-process")
    found = str(beside) if beside.is_file() else shutil.which("dj-process")
    if found is None:
        raise FileNotFoundError(f"dj-process is neither beside {sys.executable} nor on PATH: install py-data-juicer "
                                f"into this Python (pip install -e . installs it)")
    return found
