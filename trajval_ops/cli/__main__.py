"""``python -m trajval_ops.cli``: the ``trajval`` command."""

import sys

from trajval_ops.cli import main

sys.exit(main())
