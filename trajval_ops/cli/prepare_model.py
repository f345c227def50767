"""Build the embedded/tiny models into the trajval cache (see :mod:`trajval_ops.models`).

    trajval prepare-model [ref ...]

Prints ``<ref>\\t<folder>`` per model; an unknown reference exits with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command's argument parser (its flags, read by ``--help`` and the generated reference)."""
    from trajval_ops.models import KNOWN_MODELS

    parser = argparse.ArgumentParser(prog=prog, description="build short-reference models into the cache "
                                     "(shipped ones are only located)")
    parser.add_argument("refs", nargs="*", help=f"default: all ({', '.join(KNOWN_MODELS)})")
    return parser


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    from trajval_ops.models import KNOWN_MODELS, resolve_model

    cli = parser(prog)
    args = cli.parse_args(argv)
    unknown = [ref for ref in args.refs if ref not in KNOWN_MODELS]
    if unknown:
        cli.error(f"unknown model reference(s) {unknown}; known: {', '.join(KNOWN_MODELS)}")
    # the models are built from installed files only: keep transformers off the hub (this command's
    # own process; a user's HF_HUB_OFFLINE=0 is kept)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for ref in args.refs or KNOWN_MODELS:
        try:
            print(f"{ref}\t{resolve_model(ref)}")
        except (FileNotFoundError, ValueError) as err:  # a package the model is built from missing, ...
            print(f"prepare_model: error: {ref}: {err}", file=sys.stderr)
            return 2
    return 0
