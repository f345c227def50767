#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval import-pool``: see trajval_ops/cli/import_pool.py."""
import sys

from trajval_ops.cli.import_pool import main

if __name__ == "__main__":
    sys.exit(main())
