#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval verdict``: see trajval_ops/cli/verdict.py."""
import sys

from trajval_ops.cli.verdict import main

if __name__ == "__main__":
    sys.exit(main())
