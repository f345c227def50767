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
