#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval report``: see trajval_ops/cli/report.py."""
import sys

from trajval_ops.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
