"""A recipe checked as dj-process checks it, without running it: ``trajval cost`` prices only
what ``dj-process`` would run.

Three layers, each the owner's own declarations: Data-Juicer's preflight (operator and
parameter names, the most common recipe mistake; after the operators are built, whether the
executor runs each), each trajval operator built from its entry (declared types, bounds and the
settings that do not go together) and the checks that span entries (:mod:`trajval_ops.recipe`:
samples, alike passes; :mod:`trajval_ops.ray_plan`: a Ray recipe's actors, GPUs per actor against
GPUs per engine).
"""

from __future__ import annotations

from typing import Any, Mapping

from trajval_ops.errors import TrajvalInputError
from trajval_ops.measured_alike import check_alike_passes
from trajval_ops.ray_plan import ray_plan
from trajval_ops.recipe import ENDPOINT_OP, budget_priors, check_same_sample, operator_entries, pass_name


def check_recipe(recipe: Mapping[str, Any]) -> None:
    """Refuse a recipe ``dj-process`` would refuse.

    :raises TrajvalInputError: an unknown operator or parameter (with Data-Juicer's suggestion),
        a setting a trajval operator refuses (naming the entry), or entries that disagree.
    """
    import trajval_ops.ops  # noqa: F401  (registers the trajval operators)
    from data_juicer.ops.base_op import OPERATORS

    from trajval_ops.ops.dj.executor import TRAJVAL_OPERATORS
    from trajval_ops.ops.dj.preflight import post_instantiation_problems, preflight_problems

    entries = operator_entries(recipe)
    problems = preflight_problems(recipe["process"])
    if problems:
        raise TrajvalInputError(f"the recipe's process list: {problems}")
    told = budget_priors(entries)  # as dj-process tells the adaptive passes
    entries = [(name, {**settings, "budget_prior": told[index]} if index in told else settings)
               for index, (name, settings) in enumerate(entries)]
    passes, built = [], []
    try:
        for index, (name, settings) in enumerate(entries):
            if name not in TRAJVAL_OPERATORS:
                continue
            try:
                built.append(OPERATORS.modules[name](**settings))
            except (ValueError, TypeError) as exc:  # SettingError is a ValueError
                raise TrajvalInputError(f"process[{index}]: {exc}") from None
            if name == ENDPOINT_OP:
                passes.append((pass_name(settings, index), built[-1].endpoint.sample))
        problems = post_instantiation_problems(built, recipe.get("executor_type") or "default")
        if problems:
            raise TrajvalInputError(f"the recipe's operators: {problems}")
    finally:
        for operator in built:
            release = getattr(operator, "release", None)
            if release is not None:
                release()
    check_same_sample(passes)
    check_alike_passes(entries)
    ray_plan(recipe)
