#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval curve-metrics``: see trajval_ops/cli/curve_metrics.py."""
import sys

from trajval_ops.cli.curve_metrics import main

if __name__ == "__main__":
    sys.exit(main())
