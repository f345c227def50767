"""The numeric field readers: one wording for the batch and the Arrow reader, first bad row named."""

import math

import numpy as np
import pyarrow as pa
import pytest

from trajval_ops.input_checks import arrow_numeric_column
from trajval_ops.errors import TrajvalInputError
from trajval_ops.input_checks import float_column, value_problem

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


def test_repeated_ids_are_found_when_the_first_rows_have_none():
    from trajval_ops.input_checks import check_unique_ids
    from trajval_ops.pools.io import table_from_columns

    table = table_from_columns({"id": [None, "x", "x"], "prompt": ["a", "b", "c"]})
    with pytest.raises(TrajvalInputError, match="row 2 \\(id='x'\\): id field 'id' = 'x' repeats row 1"):
        check_unique_ids(table)


def test_integer_ids_beyond_64_bits_are_compared_exactly(tmp_path):
    from trajval_ops.input_checks import check_unique_ids
    from trajval_ops.pools.io import read_table

    big = 2 ** 64
    pool = tmp_path / "pool.jsonl"
    pool.write_text(f'{{"id": {big + 1}}}\n{{"id": {big + 2}}}\n')
    check_unique_ids(read_table(pool))  # distinct ids: no error (they were both read as 1.8446744073709552e+19)
    pool.write_text(f'{{"id": {big + 1}}}\n{{"id": {big + 1}}}\n')
    with pytest.raises(TrajvalInputError, match=f"id field 'id' = '{big + 1}' repeats row 0"):
        check_unique_ids(read_table(pool))


def test_a_key_with_dots_is_addressed_in_brackets_by_every_reader():
    """Issue 35: Skywork-OR1 keeps its pass counts under keys such as
    ``DeepSeek-R1-Distill-Qwen-1.5B``; a dotted path names such a key in quoted brackets, read
    the same way from a row and from an Arrow table (native struct or JSON column)."""
    import pyarrow as pa

    from trajval_ops.pools.io import table_path_values
    from trajval_ops.rows import get_path, path_parts

    key = 'extra_info.model_difficulty["DeepSeek-R1-Distill-Qwen-1.5B"]'
    assert path_parts(key) == ["extra_info", "model_difficulty", "DeepSeek-R1-Distill-Qwen-1.5B"]
    assert path_parts("a['b.c'].d") == ["a", "b.c", "d"] and path_parts("reward_model.ground_truth") == [
        "reward_model", "ground_truth"]
    rows = [{"extra_info": {"model_difficulty": {"DeepSeek-R1-Distill-Qwen-1.5B": k, "DeepSeek-R1-Distill-Qwen-7B": 9}}}
            for k in (3, 16)]
    assert [get_path(row, key) for row in rows] == [3, 16]
    assert table_path_values(pa.Table.from_pylist(rows), key) == [3, 16]
    import json

    as_text = [{"extra_info": json.dumps(row["extra_info"])} for row in rows]  # GURU-style JSON text
    assert [get_path(row, key) for row in as_text] == [3, 16]
    assert get_path({"qwen2.5_7b_pass_rate": 0.25}, "qwen2.5_7b_pass_rate") == 0.25  # a top-level key first
    for bad in ('a["b', "a[b]", "a..b", ""):
        with pytest.raises(ValueError, match="field path"):
            path_parts(bad)
