#!/usr/bin/env python
"""Repository wrapper of the installed command ``trajval transfer-prior``: see trajval_ops/cli/transfer_prior.py."""
import sys

from trajval_ops.cli.transfer_prior import main

if __name__ == "__main__":
    sys.exit(main())
