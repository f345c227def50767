"""NaN and infinity are refused for every numeric setting: the declared ones (found by walking the
package for ``setting(``), operator parameters, number flags and the validation config."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import re
import typing
from typing import List, Optional, Union

import pytest

from tests.conftest import REPO
from trajval_ops import settings

NON_FINITE = (math.nan, math.inf, -math.inf)
_DECLARES = re.compile(r"\b(setting|settings_subset|declared_as)\(")


def _declaring_modules() -> list[str]:
    """Every module of the package that declares settings (a new one is found by its text)."""
    names = []
    for path in sorted((REPO / "trajval_ops").rglob("*.py")):
        if path.name != "settings.py" and _DECLARES.search(path.read_text(encoding="utf-8")):
            names.append(".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"))
    return names


def _settings_classes() -> list[type]:
    """Every dataclass with a declared setting in those modules (an optional trainer not installed
    here leaves its module out)."""
    classes = {}
    for name in _declaring_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name.split(".")[0] == "trajval_ops":
                raise
            continue
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and settings.declared(value):
                classes[f"{value.__module__}.{value.__qualname__}"] = value
    return [classes[key] for key in sorted(classes)]


def _is_number(hint) -> bool:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType) else (hint,)
    return any(option in (int, float) for option in options)


def _numeric_settings() -> list[tuple[type, str]]:
    cases = []
    for cls in _settings_classes():
        hints = settings.type_hints(cls)
        cases += [(cls, f.name) for f in settings.declared(cls) if _is_number(hints[f.name])]
    return cases


def _valid_required(cls) -> dict:
    """A value within its bounds for each setting the class declares without a default (a name for
    a string without one, such as a validation config's name or a data section's files)."""
    required = {}
    declared = {field.name for field in settings.declared(cls)}
    hints = settings.type_hints(cls)
    for field in dataclasses.fields(cls):
        if settings.default_of(field) is not dataclasses.MISSING:
            continue
        if field.name not in declared or not _is_number(hints[field.name]):
            required[field.name] = "name"
            continue
        low = field.metadata.get("ge", field.metadata.get("gt", 0))
        required[field.name] = low if "ge" in field.metadata else low + 1
    return required


def test_the_walk_finds_the_settings_of_every_part_of_the_package():
    found = {cls.__name__ for cls in _settings_classes()}
    assert {"ProbeConfig", "DecodingConfig", "EngineSettings", "SampleSettings", "TrajVal", "BandPass",
            "GrpoSettings", "BotsSettings", "GresoSettings"} <= found, found


@pytest.mark.parametrize("cls, name", _numeric_settings(), ids=lambda case: getattr(case, "__name__", case))
def test_every_numeric_setting_refuses_nan_and_infinity_naming_itself(cls, name):
    """A new setting is covered as soon as it is declared: NaN passed every bound (``nan < 0`` is
    False), so ``top_p: .nan`` sampled as 1.0 and ``eps: nan`` priced a recipe."""
    for value in NON_FINITE:
        with pytest.raises(ValueError, match=rf"\b{name} must be (a finite number|an integer)"):
            cls(**{**_valid_required(cls), name: value})


def test_no_declared_setting_takes_infinity():
    """Infinity is no value of any setting (an unbounded one reads it as a number like any other):
    a setting meaning "no limit" would say so in its declaration, and none does."""
    hints_of = {cls: settings.type_hints(cls) for cls in _settings_classes()}
    for cls, hints in hints_of.items():
        for field in settings.declared(cls):
            if _is_number(hints[field.name]):
                assert settings.value_problem(math.inf, hints[field.name], field.metadata), (cls, field.name)


def test_a_list_of_numbers_refuses_nan_in_it():
    assert settings.value_problem([1.0, math.nan], tuple[float, ...], {}) == "must be a finite number, got nan"
    assert settings.value_problem([1.0, 2], tuple[float, ...], {}) is None


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN", "Infinity"])
def test_a_number_flag_refuses_nan_and_infinity(text):
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=settings.finite_float)
    with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number"):
        settings.finite_float(text)
    assert parser.parse_args(["--x", "0.25"]).x == 0.25


@pytest.mark.parametrize("command, flag", [("report", "--alpha"), ("report", "--eps"), ("pretrain", "--learning-rate"),
                                           ("pretrain", "--min-lr-ratio"), ("pretrain", "--weight-decay"),
                                           ("pretrain", "--weights")])
def test_the_commands_number_flags_refuse_nan(command, flag, tmp_path, capsys):
    """(``trajval cost``'s --main-epochs checks its own bound, finite included: tests/test_cost.py.)"""
    from trajval_ops.cli import main
    from trajval_ops.regime import pretrain

    value = "add1=nan" if flag == "--weights" else "nan"
    with pytest.raises(SystemExit) as exit_info:
        if command == "report":
            main(["report", "--pool", "p.jsonl", "--out", "o", flag, value])
        else:
            pretrain.main(["--out", str(tmp_path / "model"), flag, value])
    assert exit_info.value.code == 2
    assert "must be a finite number, got 'nan'" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("operator, parameter", [
    ("resampler", "threshold"), ("resampler", "eps"), ("learnability", "eps"), ("learnability", "alpha"),
    ("learnability", "predict_coverage"), ("endpoint", "top_p"), ("endpoint", "temperature"),
    ("endpoint", "sample_fraction"), ("probe", "top_p"), ("probe", "learning_rate")])
@pytest.mark.parametrize("value", NON_FINITE)
def test_operator_parameters_refuse_nan_and_infinity_naming_the_parameter(operator, parameter, value):
    from trajval_ops.ops.dj.error_exit import SettingError
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper
    from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer
    from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler

    cls, required = {"resampler": (TrajvalWeightedResampler, {}), "learnability": (TrajvalLearnabilityMapper, {}),
                     "endpoint": (TrajvalEndpointRewardMapper, {}),
                     "probe": (TrajvalProbeTrainer, {"output_dir": "x"})}[operator]
    # a parameter of the operator's own, or a setting declared by its settings' dataclass (the
    # learnability mapper's are generated from the declarations: trajval_ops.settings checks them)
    with pytest.raises(SettingError, match=rf"parameter '{parameter}' = {value}: Input should be a finite number|"
                                           rf"{parameter} must be a finite number, got {value}"):
        cls(**required, **{parameter: value})


@pytest.mark.parametrize("section, key", [("probe", "weight_tolerance"), ("probe", "probe_fraction"),
                                          ("grpo", "temperature"), ("grpo", "learning_rate")])
def test_a_validation_config_refuses_nan_in_any_numeric_key(tmp_path, section, key):
    from trajval_ops.experiment.validation_config import ConfigError, load_config

    path = tmp_path / "config.yaml"
    path.write_text(f"name: x\ntasks: {{}}\n{section}: {{{key}: .nan}}\n")
    with pytest.raises(ConfigError, match=rf"{section}: {key} must be a finite number, got nan"):
        load_config(path)


def test_a_unions_words_do_not_depend_on_which_module_built_it_first():
    # typing caches unions and compares them as sets: Optional[list[Union[str, int]]] may come back
    # as the Union[int, str] another import built first (vLLM's did, and a reference page changed)
    from typing import Optional, Union

    from trajval_ops.settings import type_text

    assert type_text(Union[str, int]) == type_text(Union[int, str]) == "a string or an integer"
    assert type_text(Union[None, int]) == type_text(Optional[int]) == "an integer or null"


@pytest.mark.parametrize("hint, text", [
    (Optional[List[Union[str, int]]], "a list (a string or an integer each) or null"),
    (List[Union[int, str]], "a list (a string or an integer each)"),
    (List[str], "a list of strings"),
    (Optional[int], "an integer or null"),
])
def test_a_type_is_said_in_words(hint, text):
    """The reference pages and the errors say a type in words: a list of mixed items read 'a list
    of Union' (the probe set's forced_ids)."""
    assert settings.type_text(hint) == text
