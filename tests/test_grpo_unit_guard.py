"""A validation unit whose weights go non-finite stops with the guard's error, also on a step
that evaluates (the evaluation runs at the step's end, before the step's log)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")


def test_a_non_finite_step_that_evaluates_stops_with_the_guards_error(tmp_path, monkeypatch):
    """Evaluations run in ``on_step_end``, the guard read the step's log, which comes after: on an
    evaluation step the held-out pass sampled from NaN weights first (on CPU torch's bare
    "probability tensor contains either inf, nan or element < 0"; on a GPU the device-side assert
    the guard exists to prevent)."""
    from transformers import TrainerCallback

    import trajval_ops.experiment.grpo_run as grpo_run
    from tests.test_grpo_unit_cpu_result import _spec
    from trajval_ops.errors import TrainingDiverged

    class PoisonSecondStep(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step == 1:
                next(model.parameters()).register_hook(lambda grad: grad * float("nan"))

    evaluations = grpo_run._evaluation_callbacks
    monkeypatch.setattr(grpo_run, "_evaluation_callbacks", lambda spec: evaluations(spec) + [PoisonSecondStep()])
    spec = _spec(tmp_path)
    spec["evaluations"][0]["every_steps"] = 2  # step 2 evaluates
    with pytest.raises(TrainingDiverged, match=r"cpu-reference: step 2: a weight after the update is not finite "
                                               r"\(precision fp32"):
        grpo_run.run(spec)


def test_a_unit_whose_weights_cannot_sample_stops_naming_the_learning_rate(tmp_path):
    """Issue 57's probe case in a validation unit: at learning_rate 1e12 the weights stay finite
    after step 1 and the logits are NaN, so step 2's generation died in torch ("probability tensor
    contains either inf, nan or element < 0", a bare RuntimeError in the unit's log). The guard's
    sampling check (the probe's) stops step 1 naming the learning rate."""
    import trajval_ops.experiment.grpo_run as grpo_run
    from tests.test_grpo_unit_cpu_result import _spec
    from trajval_ops.errors import TrainingDiverged

    spec = _spec(tmp_path)
    spec["grpo"]["learning_rate"] = 1e12
    with pytest.raises(TrainingDiverged, match=r"cpu-reference: step 1: the next-token distribution .* learning rate "
                                               r"1e\+12\); likely cause: the learning rate is too high"):
        grpo_run.run(spec)
