"""The C reader of dump.json (trendconv.formats.dump._extract) against the Python paths.

Every case is parsed with the C reader and with it switched off; the shards must be the same bytes. What
the C reader refuses (it says why) goes to the Python path, which gives the rows or the error.
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import struct
from decimal import Decimal, localcontext

import pytest
from helpers import (
    A1_CONSTRUCT,
    A1_DATA,
    A2_CONSTRUCT,
    A2_DATA,
    ODD_DATA,
    STEP_MODE,
    UNHASHABLE_DATA,
    T,
    V,
    both_readers,
    file_set_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_dumps import dump_trees, write_tree

from datagen.dump import generate
from trendconv.errors import DataError
from trendconv.formats.dump import parse as dump_parse
from trendconv.formats.dump import rules
from trendconv.formats.dump.parse import ExtractedRows, ParseOptions, Rows, parse_file_set
from trendconv.formats.dump.scan import scan

_extract = dump_parse._extract


pytestmark = pytest.mark.c_parts  # the C reader against the Python paths: nothing to compare when it is off


# A parameter object without `type` is no tensor (skipped as null); one with `type` null, or the first
# object of a list, is a tensor candidate of no known type (skipped as non-tensor).
TYPELESS_PARAMETERS = {
    "F.f.0.forward": {
        "input_args": [{"no": "type"}],
        "output": [],
        "parameters": {"w": {"dtype": "Float32"}, "x": {"type": None}, "y": [{"no": "type"}], "z": [1, V(2.0)]},
    },
    "M.m.parameters_grad.0": {"w": {"dtype": "Float32", "Norm": 1.0}, "b": [{"Max": 2.0}], "g": V(3.0)},
}


def dump_text(data: dict) -> str:
    return json.dumps({"task": "statistics", "data": data}, indent=1)


@pytest.mark.parametrize(
    ("name", "data", "construct", "options"),
    [
        ("example A1, micro-step mode", A1_DATA, A1_CONSTRUCT, ParseOptions()),
        ("example A1, step mode", A1_DATA, None, STEP_MODE),
        ("example A2, micro-step mode", A2_DATA, A2_CONSTRUCT, ParseOptions()),
        ("odd values of every kind, is_recompute 1", ODD_DATA, None, STEP_MODE),
        ("a list or an object as type or dtype", UNHASHABLE_DATA, None, STEP_MODE),
        ("parameters without a type (docs/dump-format.md Q1)", TYPELESS_PARAMETERS, None, STEP_MODE),
        ("a mapping", A1_DATA, None, ParseOptions(micro_step=False, mapping=((".Net", ".N\u00e9t"), ("0", "")))),
    ],
)
def test_the_c_reader_gives_the_python_shard(tmp_path, name, data, construct, options):
    expected = Rows if name.endswith("is_recompute 1") else ExtractedRows  # 1 is truthy: Python decides
    kind = both_readers(file_set_of(tmp_path, dump_text(data), construct), options, tmp_path)
    assert (name, kind) == (name, expected)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=dump_trees(), micro_step=...)
def test_random_dumps_give_the_python_shards(tmp_path_factory, tree, micro_step: bool):
    data = tmp_path_factory.mktemp("random") / "data"
    write_tree(data, tree)
    for file_set in scan(data).file_sets:
        both_readers(file_set, ParseOptions(micro_step=micro_step), data.parent)


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_generated_dumps_give_the_python_shards_on_the_c_reader(tmp_path, framework):
    generate(tmp_path / "data", steps=2, ranks=2, layers=2, seed=4, framework=framework, recompute=True)
    for file_set in scan(tmp_path / "data").file_sets:
        for options in (ParseOptions(), STEP_MODE):
            assert both_readers(file_set, options, tmp_path) is ExtractedRows


TENSOR = '{"type": "torch.Tensor", "dtype": "torch.float32", "Norm": 1.5}'


def extract(text: str) -> ExtractedRows:
    """The C reader alone, in step mode."""
    return dump_parse._extracted_rows(text.encode(), dump_parse._Naming({}, {}), STEP_MODE)


# @T stands for an eligible tensor.
REFUSALS = [
    ("an escaped key", '{"data": {"F.f.0.forw\\u0061rd": {"output": [@T]}}}', "escaped key at byte 11"),
    (
        "a non-ASCII byte",
        '{"data": {"F.f.0.forward": {"output": [@T], "x": "\u00e9"}}}',
        "non-ASCII byte at byte 111",
    ),
    (
        "a repeated key",
        '{"data": {"F.f.0.forward": {}, "F.f.0.forward": {"output": [@T]}}}',
        "duplicate key at byte 32",
    ),
    (
        "a repeated parameter",
        '{"data": {"M.m.parameters_grad.0": {"w": [@T], "w": []}}}',
        "duplicate parameter name at byte 109",
    ),
    (
        "fields out of order",
        '{"data": {"F.f.0.forward": {"output": [], "input_args": [@T]}}}',
        "entry fields repeated or out of order at byte 43",
    ),
    (
        "a repeated field",
        '{"data": {"F.f.0.forward": {"output": [], "output": [@T]}}}',
        "entry fields repeated or out of order at byte 43",
    ),
    (
        "an escaped type",
        '{"data": {"F.f.0.forward": {"output": [{"type": "torch.\\u0054ensor", "dtype": "Float32"}]}}}',
        "escaped tensor type at byte 49",
    ),
    (
        "an escaped statistic",
        '{"data": {"F.f.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "Float32", "Max": "\\u0031"}]}}}',
        "escaped statistic at byte 92",
    ),
    (
        "is_recompute a number",
        '{"data": {"F.f.0.forward": {"output": [@T], "is_recompute": 0}}}',
        "is_recompute neither a bool nor null at byte 121",
    ),
    ("parameters a list", '{"data": {"F.f.0.forward": {"parameters": [@T]}}}', "'parameters' not an object at byte 42"),
    ("output null", '{"data": {"F.f.0.forward": {"output": null}}}', "list field not a list at byte 38"),
    ("no data", '{"task": "statistics"}', "no 'data'"),
    ("data a list", '{"data": [1]}', "'data' not an object at byte 9"),
]


@pytest.mark.parametrize(("name", "text", "refusal"), REFUSALS)
def test_what_the_c_reader_refuses_the_python_path_reads(tmp_path, name, text, refusal):
    text = text.replace("@T", TENSOR)
    with pytest.raises(_extract.Refused) as refused:
        extract(text)
    assert (name, str(refused.value)) == (name, refusal)
    file_set = file_set_of(tmp_path, text)
    try:
        assert both_readers(file_set, STEP_MODE, tmp_path) is Rows
    except DataError as error:  # the Python path's own message, the same with the C reader on
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(dump_parse, "_extract", None)
            with pytest.raises(DataError) as python:
                parse_file_set(file_set, STEP_MODE)
        assert str(error) == str(python.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # (not a trailing comma: Python 3.13's json words that differently)
        ('{"data": {"F.f.0.forward": {"output": [1, }}}', "invalid JSON: Expecting value at line 1 column 43"),
        ('{"data": {"F.f.0.forward": {"output": [01]}}}', "invalid JSON: Expecting ',' delimiter at line 1 column 41"),
        ('{"data": {"F.f.0.forward": {"output": [-NaN]}}}', "invalid JSON: Expecting value at line 1 column 40"),
        (
            '{"data": {"F.f.0.forward": {"output": ["a\tb"]}}}',
            "invalid JSON: Invalid control character at at line 1 column 42",
        ),
        ('{"data": {"F.f.0.forward": {"output": ["\\x"]}}}', "invalid JSON: Invalid \\escape at line 1 column 41"),
        ('{"data": {}} {}', "invalid JSON: Extra data at line 1 column 14"),
    ],
)
def test_invalid_json_is_refused_and_worded_by_the_python_path(tmp_path, text, message):
    with pytest.raises(_extract.Refused):
        extract(text)
    file_set = file_set_of(tmp_path, text)
    with pytest.raises(DataError) as raised:
        parse_file_set(file_set, STEP_MODE)
    assert str(raised.value) == f"{file_set.dump_json}: {message}"


def test_a_key_error_names_the_key_with_the_c_reader_on(tmp_path):
    text = dump_text({"F.f.99999999999999999999.forward": {"output": [V(1.0)]}})
    file_set = file_set_of(tmp_path, text)
    with pytest.raises(DataError) as raised:
        parse_file_set(file_set, STEP_MODE)
    assert str(raised.value) == (
        f"{file_set.dump_json}, step 0, rank 0, key 'F.f.99999999999999999999.forward': "
        "target index 99999999999999999999 does not fit a 64-bit integer"
    )


def test_extract_returns_arrow_ready_buffers():
    text = dump_text(
        {
            "Functional.f.0.forward": {"input_args": [V(0.5), None, V("2")], "output": [[V(1)]], "is_recompute": True},
            "M.m.parameters_grad.0": {"w": [V(-0.0)], "b": V(None)},
            "Skipped.key": {"output": [V(7)]},
            "not an object": 3,
        }
    ).encode()
    infos = {
        "Functional.f.0.forward": ("forward", True, "Functional.f", 0, 0),
        "M.m.parameters_grad.0": ("parameters_grad", False, "M.m", 0, 2),
        "Skipped.key": "no metric",
    }
    keys, metrics, indexes, local, row_key, offsets, names, stats, count, skipped = _extract.extract(
        text, {}, infos.__getitem__, rules.raw_stat, dump_parse._SLOT_SKIPS, rules.TENSOR_TYPES, rules.FLOAT_DTYPES
    )
    assert (keys, metrics, indexes, local) == (
        ["Functional.f.0.forward", "M.m.parameters_grad.0"],
        ["recompute", "parameters_grad"],
        [0, 0],
        [0, 2],
    )
    assert count == 4
    assert struct.unpack("<4i", row_key) == (0, 0, 1, 1)
    assert struct.unpack("<5i", offsets) == (0, 20, 40, 45, 50)
    assert names == b"Functional.f.input.0Functional.f.input.2M.m.wM.m.b"
    norm_values, norm_validity = stats[0]
    assert struct.unpack("<4d", norm_values)[:3] == (0.5, 2.0, -0.0)
    assert norm_validity == bytes([0b0111])
    assert skipped == {"null": 1, "nested list": 1, "no metric": 1, "entry not an object": 1}


FLOAT_MAX = 1.7976931348623157e308


def python_value(token: str) -> float:
    """What the Python path makes of a JSON number token: float() of a float, raw_stat of an int."""
    if any(mark in token for mark in ".eE"):
        return float(token)
    return rules.raw_stat(int(token))


def halfway_tokens():
    """Decimal tokens at, just below and just above the midpoint of two neighbouring doubles."""
    doubles = st.floats(min_value=5e-324, max_value=math.nextafter(FLOAT_MAX, 0), allow_nan=False)

    def around(x: float, nudge: int) -> str:
        with localcontext(prec=1200):  # the midpoint exactly: up to about 770 digits
            midpoint = (Decimal(x) + Decimal(math.nextafter(x, math.inf))) / 2
        digits, exponent = format(midpoint, "e").split("e")
        digits = digits.rstrip("0").rstrip(".")
        if nudge:
            digits = digits[:-1] + str((int(digits[-1]) + nudge) % 10)
        return f"{digits}e{int(exponent)}"

    return st.builds(around, doubles, st.sampled_from([0, 1, -1]))


@settings(max_examples=3000, deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.integers(min_value=-(10**330), max_value=10**330).map(str),
        st.builds(
            "{}{}.{}e{}".format,
            st.sampled_from(["", "-"]),
            st.integers(0, 10**22),
            st.integers(0, 10**20),
            st.integers(-360, 330),
        ),
        halfway_tokens(),
        st.sampled_from(["-0", "0e400", "1e400", "-1e400", "4.9e-324", "2.4703282292062328e-324", "1" + "0" * 400]),
    )
)
def test_numbers_are_read_as_python_reads_them(token):
    assert struct.pack("<d", _extract.number(token.encode())) == struct.pack("<d", python_value(token))


@pytest.mark.parametrize("token", [b"", b"1.", b".5", b"01", b"1e", b"+1", b"1 ", b"NaN", b"--1"])
def test_number_takes_json_number_tokens_only(token):
    with pytest.raises(ValueError) as raised:
        _extract.number(token)
    assert str(raised.value) == "not a JSON number token"


@pytest.fixture
def guarded():
    """Writable memory followed by a page that may not be read: text placed at the end of the first part
    crashes the reader if it reads one byte too far."""
    size = 4 * mmap.PAGESIZE
    memory = mmap.mmap(-1, size + mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(address + size, mmap.PAGESIZE, 0) == 0  # PROT_NONE
    yield memoryview(memory)[:size]
    libc.mprotect(address + size, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE)


def test_a_document_cut_short_anywhere_is_refused_without_reading_past_its_end(guarded):
    odd = {"F.odd.0.forward": {"output": [T(math.nan, math.inf, -math.inf, " 2.5 "), None, [V(1.0)], "x", True]}}
    whole = dump_text({**A1_DATA, **TYPELESS_PARAMETERS, **UNHASHABLE_DATA, **odd}).encode()
    naming = dump_parse._Naming({}, {})
    assert len(dump_parse._extracted_rows(whole, naming, STEP_MODE)) == 17  # as the Python path gives
    size = len(guarded)
    assert len(whole) < size
    for end in range(len(whole)):
        guarded[size - end :] = whole[:end]
        with pytest.raises(_extract.Refused):
            dump_parse._extracted_rows(guarded[size - end :], naming, STEP_MODE)
