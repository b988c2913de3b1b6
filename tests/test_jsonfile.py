"""msprobe JSON reading (docs/dump-format.md §2.1): bare NaN/±Infinity, duplicate keys, stdlib fallbacks, errors.

The bare tokens deliberately become the strings "NaN", "Infinity", "-Infinity" (downstream float() parsing
gives them the same meaning).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trendconv.errors import DataError
from trendconv.jsonfile import parse_json_bytes, read_bytes

PATH = Path("/d/step0/rank0/dump.json")


def test_plain_json():
    raw = b'{"data": {"k": {"input_args": [{"Max": 1.5, "Min": -2, "ok": true, "n": null}]}}}'
    assert parse_json_bytes(raw, PATH) == {
        "data": {"k": {"input_args": [{"Max": 1.5, "Min": -2, "ok": True, "n": None}]}}
    }


def test_bare_tokens_become_strings():
    raw = b'{"a": NaN, "b": Infinity, "c": -Infinity, "d": [NaN,Infinity,-Infinity, 1]}'
    assert parse_json_bytes(raw, PATH) == {
        "a": "NaN",
        "b": "Infinity",
        "c": "-Infinity",
        "d": ["NaN", "Infinity", "-Infinity", 1],
    }


def test_python_json_dump_output_round_trip():
    obj = {"data": {"Functional.linear.1.forward": {"output": [{"Max": math.inf, "Min": -math.inf, "Mean": math.nan}]}}}
    raw = json.dumps(obj, indent=1).encode()
    assert b"NaN" in raw and b"-Infinity" in raw  # what msprobe writes
    assert parse_json_bytes(raw, PATH) == {
        "data": {"Functional.linear.1.forward": {"output": [{"Max": "Infinity", "Min": "-Infinity", "Mean": "NaN"}]}}
    }


def test_tokens_inside_strings_untouched_without_backslashes():
    raw = b'{"NaN": "x NaN Infinity -Infinity", "Infinity key": NaN, "v": [-Infinity, "NaN"]}'
    assert b"\\" not in raw
    assert parse_json_bytes(raw, PATH) == {
        "NaN": "x NaN Infinity -Infinity",
        "Infinity key": "NaN",
        "v": ["-Infinity", "NaN"],
    }


def test_tokens_inside_strings_untouched_across_lines():
    raw = b'{\n "a": "x NaN \' y",\n "b": NaN, "c": "Infinity",\n "d": [\n  -Infinity, "-Infinity NaN"\n ]\n}'
    assert b"\\" not in raw
    assert parse_json_bytes(raw, PATH) == {
        "a": "x NaN ' y",
        "b": "NaN",
        "c": "Infinity",
        "d": ["-Infinity", "-Infinity NaN"],
    }


def test_raw_newline_inside_a_string_with_tokens_is_invalid():
    with pytest.raises(DataError, match="invalid JSON"):
        parse_json_bytes(b'["x\nNaN", "y"]', PATH)


def test_tokens_inside_strings_untouched_with_escaped_quote():
    # the file holds  {"a\"NaN": NaN, "k": "x\" Infinity", "v": -Infinity}
    raw = b'{"a\\"NaN": NaN, "k": "x\\" Infinity", "v": -Infinity}'
    assert parse_json_bytes(raw, PATH) == {'a"NaN': "NaN", "k": 'x" Infinity', "v": "-Infinity"}


def test_tokens_inside_strings_untouched_with_escaped_backslash():
    # the file holds  {"p": "C:\\", "q": "NaN\\", "v": NaN, "w": "\\" }
    raw = b'{"p": "C:\\\\", "q": "NaN\\\\", "v": NaN, "w": "\\\\"}'
    assert parse_json_bytes(raw, PATH) == {"p": "C:\\", "q": "NaN\\", "v": "NaN", "w": "\\"}


def test_tokens_inside_strings_with_unicode_escape():
    raw = b'{"\\u0022NaN": Infinity, "s": "\\u00e9 NaN"}'
    assert parse_json_bytes(raw, PATH) == {'"NaN': "Infinity", "s": "\u00e9 NaN"}


def test_string_value_that_looks_like_a_token_stays_a_string():
    assert parse_json_bytes(b'["NaN", "Infinity", "-Infinity"]', PATH) == ["NaN", "Infinity", "-Infinity"]


def test_duplicate_keys_last_value_at_first_position():
    result = parse_json_bytes(b'{"a": 1, "b": 2, "a": 3}', PATH)
    assert result == {"a": 3, "b": 2}
    assert list(result) == ["a", "b"]


def test_duplicate_keys_with_bare_tokens():
    result = parse_json_bytes(b'{"a": NaN, "b": 2, "a": Infinity}', PATH)
    assert result == {"a": "Infinity", "b": 2}
    assert list(result) == ["a", "b"]


def test_key_order_is_file_order():
    result = parse_json_bytes(b'{"z": 1, "a": 2, "m": 3}', PATH)
    assert list(result) == ["z", "a", "m"]


def test_lone_surrogate_falls_back_to_stdlib():
    assert parse_json_bytes(b'{"s": "\\ud800"}', PATH) == {"s": "\ud800"}


def test_lone_surrogate_with_bare_tokens():
    assert parse_json_bytes(b'{"s": "\\udc00x", "v": NaN, "w": -Infinity}', PATH) == {
        "s": "\udc00x",
        "v": "NaN",
        "w": "-Infinity",
    }


def test_number_beyond_float_range_is_python_float():
    assert parse_json_bytes(b"[1e400, -1e400]", PATH) == [math.inf, -math.inf]


def test_huge_integer_becomes_the_nearest_float():
    """orjson reads integers beyond 64 bits as floats; statistics are floats anyway (docs/dump-format.md §7)."""
    result = parse_json_bytes(b"[123456789012345678901234567890]", PATH)
    assert result == [1.2345678901234568e29]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"a": [1, 2', "Expecting ',' delimiter at line 1 column 12"),
        (b"", "Expecting value at line 1 column 1"),
        (b'{\n "a": 1,\n "b": \n', "Expecting value at line 4 column 1"),
        (b'{"a": nan}', "Expecting value at line 1 column 7"),
        # (not a trailing comma: Python 3.13's json words that differently)
        (b'{"a": 1, 2}', "Expecting property name enclosed in double quotes at line 1 column 10"),
        (b'{"a": NaN', "Expecting ',' delimiter at line 1 column 10"),
    ],
)
def test_invalid_json_is_a_data_error(raw, message):
    with pytest.raises(DataError) as info:
        parse_json_bytes(raw, PATH)
    assert str(info.value) == f"{PATH}: invalid JSON: {message}"


def test_invalid_utf8_is_a_data_error():
    with pytest.raises(DataError) as info:
        parse_json_bytes(b'{"a": "\xff"}', PATH)
    assert str(info.value) == f"{PATH}: not valid UTF-8 JSON: invalid start byte at byte 7"


def test_too_deep_is_a_data_error():
    raw = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(DataError) as info:
        parse_json_bytes(raw, PATH)
    assert str(info.value) == f"{PATH}: invalid JSON: nested too deeply"


def test_a_file_read_and_parsed(tmp_path):
    path = tmp_path / "dump.json"
    path.write_bytes(b'{"data": {"k": {"output": [{"Max": NaN}]}}}')
    assert parse_json_bytes(read_bytes(path), path) == {"data": {"k": {"output": [{"Max": "NaN"}]}}}


def test_a_truncated_file_names_the_path(tmp_path):
    path = tmp_path / "step0" / "rank0" / "dump.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"data": {"k": {"output": [{"Max": 1.0, "Min"')
    with pytest.raises(DataError) as info:
        parse_json_bytes(read_bytes(path), path)
    assert str(info.value) == f"{path}: invalid JSON: Expecting ':' delimiter at line 1 column 46"


def test_read_bytes_of_a_missing_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(DataError) as info:
        read_bytes(path)
    assert str(info.value) == f"{path}: cannot read: No such file or directory"


def test_read_bytes_of_a_directory(tmp_path):
    with pytest.raises(DataError) as info:
        read_bytes(tmp_path)
    assert str(info.value) == f"{tmp_path}: cannot read: Is a directory"
