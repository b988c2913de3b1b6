"""Reading msprobe JSON files fast: orjson, with the bare NaN/Infinity tokens Python's json writes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import orjson

from trendconv.errors import DataError, cannot_read

_STRING_OR_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)', re.DOTALL)


def read_python_json(path: Path):
    """A JSON file as Python's json module reads it: bare NaN/±Infinity are floats, not strings. For small files
    whose values must be strings (--mapping), where a NaN is no string."""
    return _parse_with_stdlib(read_bytes(path), path, constant=float)


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise cannot_read(path, exc) from None


def parse_json_bytes(raw: bytes, path: Path):
    """orjson on the bytes, with the bare tokens quoted first when there are any: NaN and ±Infinity become the
    strings "NaN", "Infinity", "-Infinity", which every consumer reads with Python's float()/int() semantics.

    A failed orjson pass costs a tenth of a good one, so it is skipped when an Infinity is seen (cheap
    to look for): quoting leaves tokens inside strings alone, so if every token is inside a string the
    quoted bytes are the raw bytes. Without an Infinity, the raw bytes are tried first, as NaN is slow
    to look for and rare.
    """
    infinities = _infinity_spans(raw)
    if not infinities:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    spans = sorted(infinities + _nan_spans(raw))
    if spans:
        try:
            return orjson.loads(_quote_bare_tokens(raw, spans))
        except orjson.JSONDecodeError:
            pass
    return _parse_with_stdlib(raw, path, parse_int=_int_of_any_length)


def _int_of_any_length(text: str) -> int | float:
    """int(); for more digits than it reads (4300), the largest float of that sign. A dump.json integer is a
    statistic, and one beyond float range is clipped alike either way (rules.raw_stat), as the C reader does."""
    try:
        return int(text)
    except ValueError:
        return -sys.float_info.max if text.startswith("-") else sys.float_info.max


def parse_json_exact(raw: bytes, path: Path):
    """parse_json_bytes, except that integers beyond 64 bits stay integers, as Python's json reads them (orjson
    makes them floats). For construct.json, whose parents mean what their type says: an integer is a micro step,
    a float is none. Only a run of 19 digits can be such an integer; without one, orjson reads the file."""
    if _LONG_DIGITS.search(raw) is None:
        return parse_json_bytes(raw, path)
    return _parse_with_stdlib(raw, path)


_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def quote_bare_tokens(raw: bytes) -> bytes:
    """RAW with the bare NaN/Infinity/-Infinity tokens outside strings quoted; RAW itself if it has none."""
    spans = _token_spans(raw)
    return _quote_bare_tokens(raw, spans) if spans else raw


def _quote_bare_tokens(raw: bytes, spans: list[tuple[int, int]] | None = None) -> bytes:
    """Wrap the bare tokens that stand outside strings in quotes; leave string contents alone."""
    if b"\\" in raw:  # escaped quotes make quote counting unsound: tokenize strings properly
        return _STRING_OR_TOKEN.sub(_quote_token_match, raw)
    # Without backslashes every quote opens or closes a string, so a token is inside one when an odd
    # number of quotes stand before it; and as a string cannot hold a raw newline, counting from the
    # last newline is enough (where that is not so, the JSON is invalid before and after quoting).
    pieces, last, quotes = [], 0, 0
    for start, end in _token_spans(raw) if spans is None else spans:
        newline = raw.rfind(b"\n", last, start)
        if newline != -1:
            quotes, last_counted = 0, newline + 1
        else:
            last_counted = last
        quotes += raw.count(b'"', last_counted, start)
        pieces.append(raw[last:start])
        token = raw[start:end]
        pieces.append(token if quotes % 2 else b'"' + token + b'"')
        last = end
    pieces.append(raw[last:])
    return b"".join(pieces)


def _token_spans(raw: bytes) -> list[tuple[int, int]]:
    """Where NaN, Infinity and -Infinity stand, found with bytes.find (far faster than a regex scan)."""
    return sorted(_nan_spans(raw) + _infinity_spans(raw))


def _nan_spans(raw: bytes) -> list[tuple[int, int]]:
    spans = []
    position = raw.find(b"NaN")
    while position != -1:
        spans.append((position, position + 3))
        position = raw.find(b"NaN", position + 3)
    return spans


def _infinity_spans(raw: bytes) -> list[tuple[int, int]]:
    """Infinity and -Infinity, found through the capital I: a byte rare in dumps that `find` looks for
    with memchr, several times faster than a search for the whole word. After many Is that start no
    Infinity, the whole-word search takes over.
    """
    spans = []
    position, misses = raw.find(b"I"), 0
    while position != -1:
        if not raw.startswith(b"Infinity", position):
            misses += 1
            position = raw.find(b"Infinity" if misses > _MAX_I_MISSES else b"I", position + 1)
            continue
        start = position - 1 if raw[position - 1 : position] == b"-" else position
        spans.append((start, position + 8))
        position = raw.find(b"Infinity" if misses > _MAX_I_MISSES else b"I", position + 8)
    return spans


_MAX_I_MISSES = 1000


def _quote_token_match(match: re.Match) -> bytes:
    return b'"' + match.group(1) + b'"' if match.group(1) else match.group()


def _parse_with_stdlib(raw: bytes, path: Path, constant=str, parse_int=int):
    """Rare inputs orjson refuses but Python accepts (lone surrogates, numbers beyond float range)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=constant, parse_int=parse_int)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not valid UTF-8 JSON: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise DataError(f"{path}: invalid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more digits than Python reads (4300): msprobe cannot read it either
        raise DataError(f"{path}: unreadable JSON: {str(exc).partition('; use')[0]}") from None
