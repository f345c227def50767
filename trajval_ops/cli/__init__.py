"""The ``trajval`` command: the package's tools as subcommands, installed with the package.

    trajval import-pool pool.parquet pools/pool.jsonl
    trajval make-pool --preset math --size 128 --out pool.jsonl
    trajval report --pool scored.jsonl --out report/
    trajval <command> --help

Each subcommand is a module of this package with ``main(argv) -> int``; the repository's
``tools/*.py`` scripts are thin wrappers of the same functions. A subcommand module is imported
only when it runs, so ``trajval --help`` imports nothing heavy.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

#: subcommand -> (module in trajval_ops.cli, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "import-pool": ("import_pool", "import a JSONL/parquet pool as canonical JSONL, deduplicated"),
    "make-pool": ("make_pool", "generate a pool offline with reasoning-gym, or check one"),
    "report": ("report", "HTML report with figures of a weighted pool"),
    "transfer-prior": ("transfer_prior", "carry an annotated pool's weights onto another pool"),
    "curve-metrics": ("curve_metrics", "Best Acc, AUC and Steps-to-Baseline of eval curves"),
    "within-bin": ("within_bin", "within-pre-bin sub-pools (r_early terciles x delta)"),
    "prepare-model": ("prepare_model", "build the embedded/tiny models into the cache"),
    "validate": ("validate", "measure TrajVal's claims end to end in one regime"),
    "verdict": ("verdict", "the verdict from your own training runs (verl, TRL, TensorBoard, CSV logs)"),
    "cost": ("cost", "what a recipe's prior costs in main-run completions, before it runs"),
}


def _parser() -> argparse.ArgumentParser:
    from trajval_ops import __version__

    width = max(map(len, COMMANDS)) + 2
    listing = "\n".join(f"  {name:{width}}{summary}" for name, (_, summary) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="trajval", usage="%(prog)s [-h] [--version] <command> [args ...]",
        description="TrajVal task-learnability tools (trajval_ops).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands:\n{listing}\n\nRun 'trajval <command> --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("command", metavar="<command>", choices=list(COMMANDS), help="one of the commands below")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``trajval <command> [args...]``: run the command's ``main`` on the remaining arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        module = importlib.import_module(f"{__name__}.{COMMANDS[argv[0]][0]}")
        try:
            return module.main(argv[1:], prog=f"trajval {argv[0]}")
        except BrokenPipeError:  # `trajval make-pool --list | head`: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    # --help and --version exit 0; no command or an unknown one exits 2 with the usage
    _parser().parse_args(argv[:1])
    return 2  # not reached
