"""The numeric field readers: one wording for the batch and the Arrow reader, first bad row named."""

import math

import numpy as np
import pyarrow as pa
import pytest

from trajval_ops.table_checks import arrow_numeric_column
from trajval_ops.validation import TrajvalInputError, float_column, value_problem

CASES = [
    # values, upper, expected message
    ([0.5, None, 0.2], 1.0, "row 1 (id=1): field 'r' is missing (null)"),
    ([0.5, math.nan], 1.0, "row 1 (id=1): field 'r' is nan"),
    ([0.5, math.inf], None, "row 1 (id=1): field 'r' is inf"),
    ([0.5, 1.5], 1.0, "row 1 (id=1): field 'r' = 1.5 is outside [0, 1]"),
    ([0.5, -0.5], None, "row 1 (id=1): field 'r' = -0.5 is not a finite number >= 0"),
    ([0.5, "0.5"], 1.0, "row 1 (id=1): field 'r' must be a number, got str '0.5'"),
    ([0.5, True], 1.0, "row 1 (id=1): field 'r' must be a number, got bool True"),
]


@pytest.mark.parametrize("values, upper, message", CASES)
def test_batch_reader_messages(values, upper, message):
    with pytest.raises(TrajvalInputError) as error:
        float_column({"id": list(range(len(values))), "r": values}, "r", upper=upper)
    assert str(error.value) == message


@pytest.mark.parametrize("values, upper, message", [c for c in CASES if not isinstance(c[0][1], (str, bool))])
def test_arrow_reader_gives_the_same_messages(values, upper, message):
    table = pa.table({"id": list(range(len(values))), "r": values})
    with pytest.raises(TrajvalInputError) as error:
        arrow_numeric_column(table, "r", upper=upper)
    assert str(error.value) == message


def test_the_first_bad_row_is_named_whatever_its_problem():
    samples = {"id": [0, 1, 2], "r": [0.5, 2.0, "x"]}
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id=1\): field 'r' = 2.0 is outside"):
        float_column(samples, "r", upper=1.0)


def test_good_columns_read_as_float64_with_numpy_scalars():
    out = float_column({"r": [0, 1, 0.25, np.float32(0.5), np.int64(1)]}, "r", upper=1.0)
    assert out.dtype == np.float64 and out.tolist() == [0.0, 1.0, 0.25, 0.5, 1.0]
    weights = arrow_numeric_column(pa.table({"w": [0, 3, 7.5]}), "w")
    assert weights.tolist() == [0.0, 3.0, 7.5]


def test_value_problem_bounds():
    assert value_problem(0.0, upper=1.0) is None and value_problem(1.0, upper=1.0) is None
    assert value_problem(1e9) is None  # no upper bound: weights
    assert value_problem(-1e-12) == "= -1e-12 is not a finite number >= 0"
