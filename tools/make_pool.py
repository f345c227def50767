#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval make-pool``: see trajval_ops/cli/make_pool.py."""
import sys

from trajval_ops.cli.make_pool import main

if __name__ == "__main__":
    sys.exit(main())
