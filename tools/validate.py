#!/usr/bin/env python
"""Measure TrajVal's claims end to end in one regime (see docs/validation.md).

    python tools/validate.py --config recipes/validation/full.yaml --out outputs/validation [--seed N]
"""

import sys

from trajval_ops.experiment.protocol import main

if __name__ == "__main__":
    sys.exit(main())
