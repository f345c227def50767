#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval cost``: see trajval_ops/cli/cost.py."""
import sys

from trajval_ops.cli.cost import main

if __name__ == "__main__":
    sys.exit(main())
