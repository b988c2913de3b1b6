"""dump.json decoding in Python: the msgspec path and the generic (orjson / Python json) path give the same rows.

Every case is parsed twice, once as it comes and once with the msgspec path switched off, and the rows
must be equal to the last detail; cases msgspec refuses must take the generic path and still be right.
The C reader is switched off here; tests/test_extract.py compares it with these paths.
"""

from __future__ import annotations

import json
import math

import pytest
from helpers import A1_CONSTRUCT, A1_DATA, ODD_DATA, file_set_of
from hypothesis import given, settings
from hypothesis import strategies as st

from trendconv.errors import DataError
from trendconv.formats.dump import decode
from trendconv.formats.dump import parse as dump_parse
from trendconv.formats.dump.parse import ParseOptions, parse_file_set

STEP_MODE = ParseOptions(micro_step=False)


@pytest.fixture(autouse=True)
def _python_paths_only():
    # A patch of its own: both_ways undoes the test's monkeypatch halfway.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dump_parse, "_extract", None)
        yield


class Paths:
    """Counts which path read each file."""

    def __init__(self, monkeypatch, *, fast: bool = True):
        self.generic = 0
        generic = decode.generic_entries

        def counted(raw, path):
            self.generic += 1
            return generic(raw, path)

        def refuse(raw):
            raise decode.Refused

        monkeypatch.setattr(decode, "generic_entries", counted)
        if not fast:
            monkeypatch.setattr(decode, "fast_entries", refuse)


def outcome(rows) -> str:
    """What a shard gets from ROWS, as text (so NaN equals NaN): its columns, skip counts and micro steps.

    Not the raw JSON values: orjson reads integers beyond 64 bits as floats, Python's json and msgspec as
    ints, and both become the same float64 in the columns.
    """
    columns = {name: column.to_pylist() for name, column in rows.columns().items()}
    return repr((columns, dict(rows.skipped), rows.micro_steps))


def both_ways(monkeypatch, file_set, options=STEP_MODE) -> tuple[str, int]:
    """The outcome of the normal and of the generic-only parse, which must be equal, and how many times
    the normal parse fell back to the generic path."""
    dump_parse._NAMING_CACHE.clear()
    normal_paths = Paths(monkeypatch)
    normal = outcome(parse_file_set(file_set, options))
    monkeypatch.undo()
    dump_parse._NAMING_CACHE.clear()
    Paths(monkeypatch, fast=False)
    generic = outcome(parse_file_set(file_set, options))
    monkeypatch.undo()
    assert normal == generic
    return normal, normal_paths.generic


@pytest.mark.parametrize(
    ("name", "data", "construct", "options"),
    [
        ("example A1, micro-step mode", A1_DATA, A1_CONSTRUCT, ParseOptions()),
        ("example A1, step mode", A1_DATA, None, STEP_MODE),
        ("odd values of every kind", ODD_DATA, None, STEP_MODE),
    ],
)
def test_fast_and_generic_paths_give_the_same_rows(tmp_path, monkeypatch, name, data, construct, options):
    text = json.dumps({"task": "statistics", "data": data}, indent=1)
    _, fallbacks = both_ways(monkeypatch, file_set_of(tmp_path, text, construct), options)
    assert (name, fallbacks) == (name, 0)


def test_odd_values_give_these_rows(tmp_path):
    rows = parse_file_set(file_set_of(tmp_path, json.dumps({"data": ODD_DATA})), STEP_MODE)
    assert rows.target_name == [
        "Functional.f.input.0",
        "Functional.f.output.0",
        "Functional.f.parameters.w",
        "Functional.f.parameters.b",
        "Functional.g.input.0",
        "Module.m.M.input.0",
        "Module.m.M.output.0",
        "Module.m.M.weight",
        "Module.m.M.bias",
    ]
    assert rows.key_metric == ["recompute", "forward", "backward", "parameters_grad"]
    assert [(t.Norm, t.Max, t.Min, t.Mean) for t in rows.tensors[1:2]] == [("NaN", "Infinity", "-Infinity", 10**30)]
    assert [t.Norm for t in rows.tensors[2:5]] == [4.0, 6.0, " 2.5 "]
    # null: one list slot, three parameters (null, [], a list not starting with an object), and two
    # parameters_grad values (a list of lists, a number); five non-tensor list slots, one nested list
    assert dict(rows.skipped) == {
        "entry not an object": 2,
        "no metric": 1,
        "null": 6,
        "nested list": 1,
        "non-tensor": 5,
    }


@pytest.mark.parametrize(
    ("name", "text", "norm"),
    [
        ("a number beyond float range", '{"data": {"F.f.0.forward": {"output": [%s]}}}', math.inf),
        ("a lone surrogate", '{"data": {"F.f.0.forward": {"output": [%s], "x": "\\ud800"}}}', 1.5),
        ("a non-ASCII name", '{"data": {"F.f\u00e9.0.forward": {"output": [%s]}}}', 1.5),
        (
            "a lone surrogate in an entry without rows",
            '{"data": {"nope": {"x": "\\udc00"}, "F.f.0.forward": {"output": [%s]}}}',
            1.5,
        ),
    ],
)
def test_what_msgspec_refuses_takes_the_generic_path(tmp_path, monkeypatch, name, text, norm):
    tensor = '{"type": "torch.Tensor", "dtype": "torch.float32", "Norm": %s}' % ("1e400" if norm == math.inf else "1.5")
    file_set = file_set_of(tmp_path, text % tensor)
    _, fallbacks = both_ways(monkeypatch, file_set)
    assert (name, fallbacks) == (name, 1)
    assert [tensor.Norm for tensor in parse_file_set(file_set, STEP_MODE).tensors] == [norm]


def test_invalid_utf8_in_an_entry_without_rows_is_still_an_error(tmp_path):
    raw = b'{"data": {"nope": {"x": "\xff"}, "F.f.0.forward": {"output": []}}}'
    file_set = file_set_of(tmp_path, raw)
    with pytest.raises(DataError) as raised:
        parse_file_set(file_set, STEP_MODE)
    assert str(raised.value) == f"{file_set.dump_json}: not valid UTF-8 JSON: invalid start byte at byte 25"


def test_a_repeated_field_keeps_its_last_value_on_both_paths(tmp_path, monkeypatch):
    text = (
        '{"data": {"F.f.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "torch.float32", '
        '"Norm": 1, "Norm": 2}], "output": [{"type": "torch.Tensor", "dtype": "Float16", "Norm": 3, "Norm": 4}]}}}'
    )
    file_set = file_set_of(tmp_path, text)
    _, fallbacks = both_ways(monkeypatch, file_set)
    assert fallbacks == 0
    assert parse_file_set(file_set, STEP_MODE).tensors == [decode.Tensor("torch.Tensor", "Float16", Norm=4)]


def test_a_repeated_key_keeps_its_first_place_and_last_value(tmp_path):
    text = (
        '{"data": {"F.a.0.forward": {"output": []}, "F.b.0.forward": {"output": []}, '
        '"F.a.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "Float32", "Norm": 5}]}}}'
    )
    rows = parse_file_set(file_set_of(tmp_path, text), STEP_MODE)
    assert (rows.key, rows.target_name) == (["F.a.0.forward", "F.b.0.forward"], ["F.a.output.0"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(min_value=-(10**40), max_value=10**40),
            st.sampled_from(["1E5", "-0.0", "1e-400", "0.1000000000000000055511151231257827", "4.9e-324"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_statistics_read_as_python_json_reads_them(tmp_path_factory, values):
    """Numbers as Python's json writes them (bare NaN/Infinity) and some it does not, read on the normal path."""
    numbers = [value if isinstance(value, str) else json.dumps(value) for value in values]
    tensors = ", ".join(f'{{"type": "torch.Tensor", "dtype": "Float32", "Max": {number}}}' for number in numbers)
    text = f'{{"data": {{"F.f.0.forward": {{"output": [{tensors}]}}}}}}'
    file_set = file_set_of(tmp_path_factory.mktemp("stats"), text)
    dump_parse._NAMING_CACHE.clear()
    rows = parse_file_set(file_set, STEP_MODE)
    expected = [json.loads(number, parse_constant=str) for number in numbers]
    assert [repr(tensor.Max) for tensor in rows.tensors] == [repr(value) for value in expected]
