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
        differ = sample_difference(reference, sample)
        if differ:
            raise TrajvalInputError(
                f"{ENDPOINT_OP}: the sampled passes {first} and {other} draw different samples ({differ}): a sampled "
                "prior scores the rows both passes measured, so give every sampled pass the same sample_fraction, "
                "sample_seed and sample_group_key")


def sample_difference(first: Mapping[str, Any], second: Mapping[str, Any]) -> str:
    """The sample settings two sampled passes disagree on, ``sample_seed 0 vs 1; ...`` ("" when none)."""
    return "; ".join(f"sample_{key} {first.get(key)!r} vs {second.get(key)!r}" for key in SAMPLE_SETTINGS
                     if first.get(key) != second.get(key))


def learnability_prior_spec(settings: Mapping[str, Any], index: int) -> dict:
    """The prior a learnability mapper entry writes, as its spec (``{"prior": name, ...}``): the
    priors' settings the entry gives (None: unset, as Data-Juicer's parser fills them) reach it; one
    only other priors declare is an error naming them, as the mapper says."""
    from trajval_ops.priors import given_settings, prior_with_settings, recipe_prior_name

    try:
        name = recipe_prior_name(settings.get("prior"), settings.get("score"))
        return prior_with_settings(name, given_settings(settings)).spec()
    except ValueError as exc:
        raise TrajvalInputError(f"process[{index}] {LEARNABILITY_OP}: {exc}") from None


def learnability_reads(settings: Mapping[str, Any], index: int) -> tuple[dict, list[str]]:
    """A learnability mapper entry's prior (its spec) and the pass-rate fields it reads: the
    early window's, and the late one's unless the prior is a one-pass prior, and the checkpoints'
    between (``checkpoint_keys``) for a prior that reads them."""
    from trajval_ops.priors import prior_from_spec

    spec = learnability_prior_spec(settings, index)
    early, late = fields.learnability_windows(settings.get("early_window_keys"), settings.get("late_window_keys"),
                                              settings.get("window_k"))
    prior = prior_from_spec(spec)
    keys = fields.compared_passes(early, late, settings.get("r_early_key") or fields.R_EARLY,
                                  settings.get("r_late_key") or fields.R_LATE, prior.one_pass)
    return spec, keys + (list(settings.get("checkpoint_keys") or []) if prior.reads_checkpoints else [])


def budget_priors(entries: list[tuple[str, Mapping[str, Any]]]) -> dict[int, dict]:
    """What each adaptive endpoint pass is told: the spec of the prior whose weight its budget
    bounds, that of the learnability mappers after it in the recipe that read its field (by entry
    position; where none reads it, the first learnability mapper after it).

    :raises TrajvalInputError: a pass's own ``budget_prior`` that is not the prior the recipe
        writes, or two mappers reading the pass that write different priors.
    """
    from trajval_ops.priors import prior_from_spec

    told = {}
    for index, (name, settings) in enumerate(entries):
        if name != ENDPOINT_OP or not isinstance(settings, Mapping) or settings.get("budget") != "adaptive":
            continue
        readers = _reading_mappers(entries, index)
        if not readers:
            continue  # the pass is told by its own budget_prior, or refuses
        (first, spec), *others = readers
        for other, other_spec in others:
            if other_spec != spec:
                raise TrajvalInputError(
                    f"{pass_name(settings, index)}: the recipe's {LEARNABILITY_OP} entries process[{first}] and "
                    f"process[{other}] read this adaptive pass and write different priors, {spec} and {other_spec}: its "
                    "budget stops rows on one prior's weight; read the pass with one prior, or use budget: fixed")
        given = settings.get("budget_prior")
        if given is not None:
            try:
                given = prior_from_spec(given).spec()
            except ValueError as exc:
                raise TrajvalInputError(f"{pass_name(settings, index)}: budget_prior: {exc}") from None
            if given != spec:
                raise TrajvalInputError(
                    f"{pass_name(settings, index)}: budget_prior {given} is not the prior the recipe's "
                    f"{LEARNABILITY_OP} (process[{first}]) writes, {spec}: the budget would stop rows on a weight "
                    "the recipe never writes; drop budget_prior (the recipe tells the pass)")
        told[index] = spec
    return told


def _reading_mappers(entries: list[tuple[str, Mapping[str, Any]]], index: int) -> list[tuple[int, dict]]:
    """``(position, prior spec)`` of the learnability mappers after entry ``index`` (an endpoint
    pass) that read its field; where none does (or its field is not known), the first after it."""
    settings = entries[index][1]
    later = [(i, s) for i, (n, s) in enumerate(entries) if i > index and n == LEARNABILITY_OP]
    try:
        key = fields.endpoint_output_key(settings.get("window"), settings.get("window_index"), settings.get("output_key"))
    except ValueError:
        key = None
    readers = []
    for position, mapper in later:
        spec, keys = learnability_reads(mapper or {}, position)
        if key in keys:
            readers.append((position, spec))
    return readers or [(position, learnability_prior_spec(mapper or {}, position)) for position, mapper in later[:1]]
