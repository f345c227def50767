"""Build the embedded/tiny models into the trajval cache: ``python tools/prepare_model.py [ref ...]``."""

import sys

from trajval_ops.models import main

if __name__ == "__main__":
    sys.exit(main(["prepare", *sys.argv[1:]]))
