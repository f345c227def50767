"""A repair of Data-Juicer's config merge: its parser merges the entries of one operator into one
namespace in turn, so a setting only an earlier entry of the same operator gives reaches the later
ones. A trajval recipe lists the endpoint mapper several times; each entry gets back its own."""

from __future__ import annotations

from loguru import logger

from trajval_ops.ops.dj.executor import TRAJVAL_OPERATORS


#: Data-Juicer's init_configs gives every operator entry these from the run's global settings
#: where the entry leaves them out or None (``update_op_attr``): ``(entry key, global key, default)``
_GLOBAL_ATTRS = (("text_key", "text_keys", "text"), ("image_key", "image_key", "images"),
                 ("audio_key", "audio_key", "audios"), ("video_key", "video_key", "videos"),
                 ("image_bytes_key", "image_bytes_key", "image_bytes"), ("turbo", "turbo", False),
                 ("skip_op_error", "skip_op_error", True), ("auto_op_parallelism", "auto_op_parallelism", True),
                 ("work_dir", "work_dir", None))
_ABSENT = object()


def restore_unset_settings(cfg, argv: list[str] | None = None) -> list[str]:
    """Give each trajval operator of a recipe the settings its own entry gives, no others.

    Data-Juicer's config parser merges the entries of one operator into one namespace in turn
    (``update_op_process``), so a setting only an earlier entry of the same operator gives reaches
    the later ones: a short pass's ``output_key`` would become the early pass's, and it would
    overwrite the short one's column; the early pass's ``batch_size``, ``accelerator`` or
    ``num_proc`` (Data-Juicer's own operator settings) would regroup a later pass's generate calls
    or move it to a GPU. The operators are built from ``cfg.process`` after the pool is read, so
    here, before, every setting of a trajval entry that its own entry does not give (nor the
    command line, which sets all of them) and an earlier entry does give gets back what Data-Juicer
    gives an entry that leaves it out: the operator's registered default, the run's global value
    for the settings Data-Juicer fills from it, or nothing. Returns what was restored, as
    ``op[i].setting`` (also logged).
    """
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
        unset = _unset_values(cfg, OPERATORS.modules[name])
        on_command_line = {arg.split("=")[0].split(".", 1)[1] for arg in argv if arg.startswith(f"--{name}.")}
        for index, (own, settings) in enumerate(zip(given, built)):
            if not isinstance(settings, dict):
                continue
            earlier = {key for entry in given[:index] for key in entry}
            for key in sorted(set(settings) & earlier - set(own) - on_command_line):
                value = unset.get(key, _ABSENT)
                if value is _ABSENT:
                    del settings[key]
                elif settings[key] != value:
                    settings[key] = value
                else:
                    continue
                restored.append(f"{name}[{index}].{key}")
    if restored:
        logger.info(f"trajval_ops: settings an earlier entry of the same operator gave, which Data-Juicer's config "
                    f"merge passed on, set back to what an entry without them gets: {', '.join(restored)}")
    return restored


def _unset_values(cfg, op_class) -> dict:
    """What Data-Juicer gives an entry of ``op_class`` for each setting the entry leaves out: the
    parser's registered default (the operator's own settings and the base operator's it
    registers), then the run's global value where init_configs fills one in (a setting it
    neither registers nor fills, such as ``batch_size``, is left out: the operator's own default)."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_class_arguments(op_class, nested_key="op", fail_untyped=False, instantiate=False)
    values = dict(parser.get_defaults().clone().as_dict().get("op") or {})
    text_keys = getattr(cfg, "text_keys", None) or "text"
    filled = {key: (text_keys[0] if isinstance(text_keys, list) else text_keys) if key == "text_key"
              else _cfg_get(cfg, global_key, default) for key, global_key, default in _GLOBAL_ATTRS}
    if _cfg_get(cfg, "executor_type", "default") != "ray_partitioned" and not _ray_mode():
        filled["num_proc"] = _cfg_get(cfg, "np", None)
    for key, value in filled.items():
        if values.get(key) is None:
            values[key] = value
    return values


def _cfg_get(cfg, key: str, default):
    getter = getattr(cfg, "get", None)
    return getter(key, default) if callable(getter) else getattr(cfg, key, default)


def _ray_mode() -> bool:
    from data_juicer.utils.ray_utils import is_ray_mode

    return bool(is_ray_mode())
