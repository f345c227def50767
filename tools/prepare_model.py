#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval prepare-model``: see trajval_ops/cli/prepare_model.py."""
import sys

from trajval_ops.cli.prepare_model import main

if __name__ == "__main__":
    sys.exit(main())
