"""A dj-process recipe read as data: its operator entries, and the checks that span entries
(each operator checks its own settings when it is built; these see the whole ``process`` list).
No Data-Juicer here: ``trajval cost`` and the run's pool loader both call it."""

from __future__ import annotations

from typing import Any, Mapping

from trajval_ops import fields
from trajval_ops.errors import TrajvalInputError

PROBE_OP = "trajval_probe_trainer"
ENDPOINT_OP = "trajval_endpoint_reward_mapper"
LEARNABILITY_OP = "trajval_learnability_mapper"
#: What decides a sampled pass's rows: its settings ``sample_<name>`` (a drawn sample adds the
#: pool's size and the ids).
SAMPLE_SETTINGS = ("fraction", "seed", "group_key")


def operator_entries(recipe: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(operator name, its settings)`` of each entry of the recipe's ``process`` list."""
    process = recipe.get("process")
    if not isinstance(process, list):
        raise ValueError("the recipe has no 'process' list of operators")
    return [(name, settings or {}) for entry in process if isinstance(entry, Mapping) and len(entry) == 1
            for name, settings in entry.items()]


def pass_name(settings: Mapping[str, Any], index: int) -> str:
    """An endpoint entry's name in messages: its output field, and its place in ``process``."""
    try:
        key = fields.endpoint_output_key(settings.get("window"), settings.get("window_index"),
                                         settings.get("output_key"))
    except ValueError:
        key = "?"
    return f"{key} (process[{index}])"


def entry_sample(settings: Mapping[str, Any]) -> dict | None:
    """The sample an endpoint entry's settings draw (as dj-process parses a recipe: every setting
    given, defaults filled), or None for a pass over every row."""
    fraction = settings.get("sample_fraction")
    if not isinstance(fraction, (int, float)) or fraction >= 1:
        return None
    return {name: settings.get(f"sample_{name}") for name in SAMPLE_SETTINGS}


def check_same_sample(passes: list[tuple[str, dict | None]]) -> None:
    """Refuse sampled endpoint passes that draw different samples.

    A sampled prior scores the rows every pass measured; two passes with another seed, fraction
    or group key would each pay for their own sample and leave only their overlap measured.

    :param passes: ``(name, sample settings)`` of each endpoint pass; None for a full pass.
    :raises TrajvalInputError: naming both passes and the settings that differ.
    """
    sampled = [(name, sample) for name, sample in passes if sample is not None]
    for other, sample in sampled[1:]:
        first, reference = sampled[0]
        differ = [key for key in SAMPLE_SETTINGS if sample[key] != reference[key]]
        if differ:
            raise TrajvalInputError(
                f"{ENDPOINT_OP}: the sampled passes {first} and {other} draw different samples ("
                + "; ".join(f"sample_{key} {reference[key]!r} vs {sample[key]!r}" for key in differ)
                + "): a sampled prior scores the rows both passes measured, so give every sampled pass the same "
                "sample_fraction, sample_seed and sample_group_key")
