"""An operator's settings declared once: the signature Data-Juicer reads is generated from the
declarations, its preflight refuses an unknown key with the nearest one, and a keyword an operator
built in Python does not know is refused rather than swallowed."""

import inspect
from dataclasses import dataclass
from typing import Optional

import pytest
from data_juicer.ops.base_op import OPERATORS, Mapper

from trajval_ops.ops.dj.error_exit import SettingError
from trajval_ops.ops.dj.parameters import checked_parameters, declared_parameters, take_declared
from trajval_ops.settings import check_settings, setting


@dataclass(frozen=True)
class _Decoding:
    n: int = setting(4, "Rollouts per row.", ge=1)
    temperature: float = setting(1.0, "Sampling temperature.", gt=0)
    greedy: bool | None = setting(None, "Greedy decoding; None: by the temperature.")

    def __post_init__(self):
        check_settings(self)


OP_NAME = "trajval_test_declared_mapper"


@OPERATORS.register_module(OP_NAME)
class _DeclaredMapper(Mapper):
    @checked_parameters
    @declared_parameters(_Decoding)
    def __init__(self, model: str = "tiny-arith", *args, **kwargs):
        """Initialization method.

        :param model: the model."""
        self.groups = take_declared(kwargs, (_Decoding,))
        super().__init__(*args, **kwargs)
        self.model = model


def test_the_signature_holds_every_declared_setting_with_its_type_and_default():
    parameters = inspect.signature(_DeclaredMapper.__init__).parameters
    assert list(parameters)[:2] == ["self", "model"]
    assert parameters["n"].default == 4 and parameters["n"].annotation is int
    assert parameters["temperature"].kind is inspect.Parameter.KEYWORD_ONLY
    assert ":param n: Rollouts per row. In [1, inf)." in _DeclaredMapper.__init__.__doc__


def test_the_settings_reach_their_group_checked():
    op = _DeclaredMapper(n=8, batch_size=7)
    assert op.groups[_Decoding] == _Decoding(n=8) and op.batch_size == 7
    with pytest.raises(ValueError, match="n must be in"):
        _DeclaredMapper(n=0)


def test_an_unknown_keyword_is_refused_with_the_nearest_key():
    with pytest.raises(SettingError, match=r"Unknown parameter 'nn' \(did you mean: n\?\)"):
        _DeclaredMapper(nn=8)


def test_data_juicers_preflight_and_config_parser_read_the_generated_signature():
    from data_juicer.core.preflight import PipelineConfigError, pre_instantiation_check
    from jsonargparse import ArgumentParser

    pre_instantiation_check([{OP_NAME: {"n": 8, "temperature": 0.7, "model": "m"}}])
    # a `|` union is spelled Optional[...]: the preflight leaves it to the declaration's check, where
    # it named the expected type and a `|` union has no name (AttributeError)
    assert inspect.signature(_DeclaredMapper.__init__).parameters["greedy"].annotation == Optional[bool]
    pre_instantiation_check([{OP_NAME: {"greedy": 1}}])
    with pytest.raises(ValueError, match="greedy must be true or false or null, got int 1"):
        _DeclaredMapper(greedy=1)
    with pytest.raises(PipelineConfigError, match="did you mean: temperature"):
        pre_instantiation_check([{OP_NAME: {"temperatur": 0.7}}])
    added = ArgumentParser().add_class_arguments(_DeclaredMapper, nested_key=OP_NAME, fail_untyped=False,
                                                 instantiate=False)
    assert {f"{OP_NAME}.n", f"{OP_NAME}.temperature", f"{OP_NAME}.model"} <= set(added)


def test_a_setting_declared_twice_is_refused_when_the_operator_is_defined():
    with pytest.raises(TypeError, match="declared twice"):
        declared_parameters(_Decoding)(lambda self, n=1, **kwargs: None)
