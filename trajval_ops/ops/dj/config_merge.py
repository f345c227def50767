"""A repair of Data-Juicer's config merge: its parser merges the entries of one operator into one
namespace in turn, so a setting only an earlier entry of the same operator gives reaches the later
ones. A trajval recipe lists the endpoint mapper several times; each entry gets back its own."""

from __future__ import annotations

from loguru import logger

from trajval_ops.ops.dj.executor import TRAJVAL_OPERATORS


def restore_unset_settings(cfg, argv: list[str] | None = None) -> list[str]:
    """Give each trajval operator of a recipe the settings its own entry gives, no others.

    Data-Juicer's config parser merges the entries of one operator into one namespace in turn
    (``update_op_process``), so a setting only an earlier entry of the same operator gives reaches
    the later ones: a short pass's ``output_key`` would become the early pass's, and it would
    overwrite the short one's column. The operators are built from ``cfg.process`` after the pool
    is read, so here, before, every trajval entry gets back the declared default of each of its
    own settings that its recipe entry does not give (nor the command line, which sets all of
    them). Returns what was restored, as ``op[i].setting`` (also logged).
    """
    import inspect
    import sys

    import yaml
    from data_juicer.ops.base_op import OPERATORS

    argv = sys.argv[1:] if argv is None else argv
    try:
        sources = [str(path) for path in (getattr(cfg, "config", None) or [])]
        with open(sources[-1], encoding="utf-8") as handle:
            written = (yaml.safe_load(handle) or {}).get("process") or []
    except (OSError, IndexError, yaml.YAMLError, AttributeError):
        return []  # a config built in code: nothing was merged from a file
    parsed = getattr(cfg, "process", None) or []
    restored = []
    for name in sorted(TRAJVAL_OPERATORS):
        given = [(entry.get(name) or {}) for entry in written if isinstance(entry, dict) and name in entry]
        built = [entry[name] for entry in parsed if isinstance(entry, dict) and name in entry]
        if len(given) < 2 or len(given) != len(built) or name not in OPERATORS.modules:
            continue  # one entry cannot inherit; a count that differs is not the merge this undoes
        defaults = {key: parameter.default for key, parameter in
                    inspect.signature(OPERATORS.modules[name].__init__).parameters.items()
                    if parameter.default is not inspect.Parameter.empty}
        on_command_line = {arg.split("=")[0].split(".", 1)[1] for arg in argv if arg.startswith(f"--{name}.")}
        for index, (own, settings) in enumerate(zip(given, built)):
            if not isinstance(settings, dict):
                continue
            for key, default in defaults.items():
                if key in own or key in on_command_line or key not in settings or settings[key] == default:
                    continue
                settings[key] = default
                restored.append(f"{name}[{index}].{key}")
    if restored:
        logger.info(f"trajval_ops: settings an earlier entry of the same operator gave, which Data-Juicer's config "
                    f"merge passed on, set back to their defaults: {', '.join(restored)}")
    return restored
