"""Endpoint passes whose pass rates a prior compares (TrajVal's early and late, every window) must
measure alike: the same sampling, verifier and prompt. Otherwise their difference is partly the
settings' (a late pass with a longer ``max_new_tokens`` truncates fewer answers), which the score
would read as learning. Checked twice: on a recipe's entries before anything runs (``dj-process``
and ``trajval cost``), and by the learnability mapper on the passes' provenance (pools whose passes
ran in other recipes).
"""

from __future__ import annotations

from typing import Any, Mapping

from trajval_ops import fields
from trajval_ops.errors import TrajvalInputError
from trajval_ops.recipe import ENDPOINT_OP, LEARNABILITY_OP, learnability_reads, pass_name

#: What an endpoint pass measures with, beside its model, as its provenance records it. Not here:
#: ``n`` and ``seed`` (noise, not bias), the engine and dtype (each row records its own).
MEASUREMENT_SETTINGS = ("temperature", "top_p", "top_k", "max_new_tokens", "verifier", "verifier_revision",
                        "template", "chat_template_kwargs", "prompt_key", "ground_truth_key")


def measurement_difference(first: Mapping[str, Any], second: Mapping[str, Any]) -> str:
    """The :data:`MEASUREMENT_SETTINGS` two passes' provenance disagree on, ``max_new_tokens 8 vs
    16; ...`` ("" when none); a setting either does not record is not compared. A pass recorded
    before verifiers had revisions read answers as revision 1, or, with the math verifier, as 1 or
    2 (not known: :func:`~trajval_ops.rollout.verifiers.unrecorded_revision`), which differs from
    a recorded revision and equals another pass recording none; one recorded before a custom
    verifier's spec held its module's sha256 is compared without it."""
    first, second = _with_revision(first), _with_revision(second)
    first, second = _with_rendering(first), _with_rendering(second)
    first, second = _without_unrecorded_source(first, second)
    return "; ".join(f"{key} {first[key]!r} vs {second[key]!r}" for key in MEASUREMENT_SETTINGS
                     if key in first and key in second and first[key] != second[key])


class _Unrecorded:
    """The revision of a pass's provenance that records none where it is not known: equal only to
    itself (two such passes are compared alike, as before revisions were recorded)."""

    def __repr__(self) -> str:
        from trajval_ops.rollout.verifiers import UNRECORDED_REVISION

        return f"none recorded ({UNRECORDED_REVISION})"


_UNRECORDED = _Unrecorded()


def _with_revision(recorded: Mapping[str, Any]) -> Mapping[str, Any]:
    from trajval_ops.rollout.verifiers import unrecorded_revision

    if "verifier" in recorded and "verifier_revision" not in recorded:
        spec = recorded["verifier"]
        revision = unrecorded_revision(spec.get("name") if isinstance(spec, Mapping) else spec)
        return {**recorded, "verifier_revision": _UNRECORDED if revision is None else revision}
    return recorded


def _with_rendering(recorded: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pass's provenance with its chat template's arguments, which it records only where set
    (template pool): none where it records a template without them."""
    if "template" in recorded and "chat_template_kwargs" not in recorded:
        return {**recorded, "chat_template_kwargs": None}
    return recorded


def _without_unrecorded_source(first: Mapping[str, Any], second: Mapping[str, Any]) -> tuple[Mapping, Mapping]:
    """Both provenances without their custom verifier's module sha256 where only one records it."""
    from trajval_ops.rollout.verifiers import SOURCE_DIGEST

    specs = [recorded.get("verifier") for recorded in (first, second)]
    if not all(isinstance(spec, Mapping) for spec in specs) or sum(SOURCE_DIGEST in spec for spec in specs) != 1:
        return first, second
    return tuple({**recorded, "verifier": {k: v for k, v in spec.items() if k != SOURCE_DIGEST}}
                 for recorded, spec in zip((first, second), specs))


def entry_measurement(settings: dict[str, Any]) -> dict:
    """What an endpoint entry of a recipe will measure with, as its provenance will record it
    (declared defaults for the settings it leaves out), before anything runs; ``{}`` for a reused
    pass (``reuse_key`` / ``reuse_preset``): it samples nothing, and how its source sampled is not
    known, so there is nothing to compare. A setting its declaration refuses raises ``ValueError``."""
    from trajval_ops.rollout.engines import DecodingConfig
    from trajval_ops.rollout.pass_rates import PromptSettings
    from trajval_ops.rollout.pass_settings import VerifierSettings, group_settings, measured_with
    from trajval_ops.rollout.reused_pass import ReuseSettings
    from trajval_ops.rollout.verifiers import build_verifier

    groups = group_settings(settings)
    if groups[ReuseSettings].settings() is not None:
        return {}
    checks = groups[VerifierSettings]
    verifier = build_verifier(checks.verifier, **(checks.verifier_options or {}))
    recorded = measured_with(groups[DecodingConfig], verifier, groups[PromptSettings])
    return {key: recorded[key] for key in MEASUREMENT_SETTINGS if key in recorded}


def check_alike_passes(entries: list[tuple[str, Mapping[str, Any]]]) -> None:
    """Refuse a recipe whose learnability mapper compares endpoint passes set to measure otherwise.

    :raises TrajvalInputError: naming the mapper, both passes and the settings that differ.
    """
    measured = {}
    for index, (name, settings) in enumerate(entries):
        if name != ENDPOINT_OP or not isinstance(settings, Mapping):
            continue
        try:
            key = fields.endpoint_output_key(settings.get("window"), settings.get("window_index"),
                                             settings.get("output_key"))
            measured[key] = (pass_name(settings, index), entry_measurement(dict(settings)))
        except (ValueError, TypeError):
            continue  # a setting its operator refuses, naming it, when it is built
    for index, (name, settings) in enumerate(entries):
        if name != LEARNABILITY_OP or not isinstance(settings, Mapping):
            continue
        try:
            keys = [key for key in learnability_reads(settings, index)[1] if key in measured]
        except (ValueError, TypeError):  # TrajvalInputError is a ValueError
            continue  # likewise
        for key in keys[1:]:
            (first, reference), (other, measurement) = measured[keys[0]], measured[key]
            if differ := measurement_difference(reference, measurement):
                raise TrajvalInputError(
                    f"process[{index}] {LEARNABILITY_OP} compares the pass rates of {first} and {other}, which are "
                    f"set to measure otherwise ({differ}): a gain between them would be partly the settings'; give "
                    "both passes the same sampling, verifier and prompt settings")
