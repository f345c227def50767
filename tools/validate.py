#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval validate``: see trajval_ops/cli/validate.py."""
import sys

from trajval_ops.cli.validate import main

if __name__ == "__main__":
    sys.exit(main())
