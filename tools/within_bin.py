#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval within-bin``: see trajval_ops/cli/within_bin.py."""
import sys

from trajval_ops.cli.within_bin import main

if __name__ == "__main__":
    sys.exit(main())
