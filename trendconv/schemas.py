"""The JSON documents trendconv writes into WORK, and the one check that a document read back is one of them.

A shard's meta (its footer), manifest.json and work.json are checked here, key by key, before anything reads a
value: a document that was edited, replaced by other JSON, or written by another program is refused with the key
and what is wrong with it, instead of failing later with a traceback or loading nonsense. Every key must be present
and no other; the bounds are what the parse can write (see the constants). A meta's keys are the common ones below
and its format's (`Format.meta_fields`, `Format.check_meta`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from trendconv.errors import kind_of

if TYPE_CHECKING:
    from trendconv.formats import Format

# 2: local_micro_step is int64 (construct.json micro steps reach 3000000000 and beyond).
SHARD_FORMAT = 2
INT64 = (-(2**63), 2**63 - 1)  # what SQLite's INTEGER and the shards' int64 columns hold
COUNT = (0, 2**63 - 1)
SHARD_SUFFIX = ".parquet"
AGAIN = "run `trendconv.parse()` again"  # what fixes a document in WORK that is not what trendconv wrote
_SHA256 = re.compile(r"[0-9a-f]{64}")

Check = Callable[[object, str], None]


class Invalid(Exception):
    """What is wrong with a document, in words: `'step' is a string ('5'), expected an integer ...`."""


class OtherShardFormat(Invalid):
    """A footer of another shard format: written by another version of trendconv, not damaged."""


def shown(value) -> str:
    """A JSON value in a message: numbers and constants as they are, strings quoted and cut short."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 24 else f"{text[:20]}..."
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return f"a list of {len(value)}" if value else "an empty list"
    return kind_of(value)


def _wrong(name: str, value, expected: str) -> Invalid:
    return Invalid(f"{_quoted(name)} is {shown(value)}, expected {expected}")


def _quoted(name: str) -> str:
    return f"'{name}'" if name else "the document"


def integer(low: int, high: int) -> Check:
    def check(value, name: str) -> None:
        if type(value) is not int or not low <= value <= high:  # bool is an int to Python, not to JSON
            raise _wrong(name, value, f"an integer from {low} to {high}")

    return check


def equal(expected: int | str) -> Check:
    def check(value, name: str) -> None:
        if type(value) is not type(expected) or value != expected:
            raise _wrong(name, value, repr(expected))

    return check


def boolean(value, name: str) -> None:
    if type(value) is not bool:
        raise _wrong(name, value, "true or false")


def text(value, name: str) -> None:
    if type(value) is not str or not value:
        raise _wrong(name, value, "a non-empty string")


def one_of(choices: tuple[str, ...], what: str) -> Check:
    def check(value, name: str) -> None:
        if type(value) is not str or value not in choices:
            raise _wrong(name, value, what)

    return check


def file_name(value, name: str) -> None:
    """One path component, as a directory listing gives it."""
    if not _is_file_name(value):
        raise _wrong(name, value, "a file name")


def _is_file_name(value) -> bool:
    return type(value) is str and value not in ("", ".", "..") and "/" not in value and "\0" not in value


def shard_name(value, name: str) -> None:
    """A shard's path relative to the shard directory: file names joined by '/', ending in .parquet."""
    if type(value) is not str or not value.endswith(SHARD_SUFFIX) or not all(map(_is_file_name, value.split("/"))):
        raise _wrong(name, value, f"a relative path ending in {SHARD_SUFFIX}")


def sha256(value, name: str) -> None:
    if type(value) is not str or not _SHA256.fullmatch(value):
        raise _wrong(name, value, "a sha256 digest (64 hex digits)")


def optional(check: Check) -> Check:
    def optional_check(value, name: str) -> None:
        if value is not None:
            check(value, name)

    return optional_check


def list_of(check: Check, *, least: int = 0, distinct: bool = False) -> Check:
    def list_check(value, name: str) -> None:
        if type(value) is not list or len(value) < least:
            raise _wrong(name, value, "a non-empty list" if least else "a list")
        for index, item in enumerate(value):
            check(item, f"{name}[{index}]")
        if distinct and len({repr(item) for item in value}) != len(value):
            raise Invalid(f"{_quoted(name)} lists an entry twice")

    return list_check


def pair(first: Check, second: Check) -> Check:
    def pair_check(value, name: str) -> None:
        if type(value) is not list or len(value) != 2:
            raise _wrong(name, value, "a list of two")
        first(value[0], f"{name}[0]")
        second(value[1], f"{name}[1]")

    return pair_check


def mapping(check: Check) -> Check:
    """An object with any keys, every value passing CHECK."""

    def mapping_check(value, name: str) -> None:
        if type(value) is not dict:
            raise _wrong(name, value, "an object")
        for key, item in value.items():
            check(item, f"{name}.{key}")

    return mapping_check


def obj(fields: dict[str, Check], maybe: dict[str, Check] | None = None) -> Check:
    """An object with exactly FIELDS' keys, and any of MAYBE's."""
    maybe = maybe or {}
    # the keys compared as sets first (in C): a re-run checks every meta of 100,000 files' chunks
    required, allowed = set(fields), {*fields, *maybe}
    checks, optional_checks = tuple(fields.items()), tuple(maybe.items())

    def object_check(value, name: str) -> None:
        if type(value) is not dict:
            raise _wrong(name, value, "an object")
        prefix = f"{name}." if name else ""
        if not required <= value.keys():
            missing = next(key for key in fields if key not in value)
            raise Invalid(f"no '{prefix}{missing}'")
        if not value.keys() <= allowed:
            unexpected = next(key for key in value if key not in allowed)
            raise Invalid(f"unexpected key '{prefix}{unexpected}'")
        for key, check in checks:
            check(value[key], prefix + key)
        for key, check in optional_checks:
            if key in value:
                check(value[key], prefix + key)

    return object_check


def spec(value, name: str) -> None:
    """A `--steps`/`--ranks` SPEC (trendconv.selection)."""
    from trendconv.selection import SpecError, parse_spec

    text(value, name)
    try:
        parse_spec(value)
    except SpecError as exc:
        raise Invalid(f"{_quoted(name)} is {shown(value)}: {exc}") from None


# manifest.json of a format whose units share chunk files: which file holds each unit of "shards", in runs
# [chunk name or null (the unit's own file), how many units] that cover the list in order.
LOCATED = {"located": list_of(pair(optional(shard_name), integer(1, 2**63 - 1)))}
OPTIONS = obj({"micro_step": boolean, "mapping_sha256": sha256})
SELECTION = {"selection": obj({"steps": optional(spec), "ranks": optional(spec)})}  # only when a parse selects
SOURCE = obj({"path": text, "size": optional(integer(*COUNT)), "mtime_ns": optional(integer(*INT64))})
_COMMON = {
    "shard_format": equal(SHARD_FORMAT),
    "trendconv_version": text,
    "options": OPTIONS,
    "sources": list_of(SOURCE, least=1),
    "rows": integer(*COUNT),
    "rows_per_metric": mapping(integer(*COUNT)),
    "skipped": mapping(integer(*COUNT)),
}


def check_meta(document, fmt: Format, rows: int) -> None:
    """Raise Invalid unless DOCUMENT is the meta of a shard of FMT with ROWS rows, as the parse writes it.

    The shard format and the input format come first: they say what the rest of the document should be."""
    from trendconv.formats import FORMATS

    if type(document) is not dict:
        raise _wrong("", document, "an object")
    found = document.get("shard_format")
    if type(found) is int and found != SHARD_FORMAT:
        raise OtherShardFormat(f"shard format {found}, this trendconv reads format {SHARD_FORMAT}")
    declared = document.get("input_format")
    if isinstance(declared, str) and declared in FORMATS and declared != fmt.name:
        raise Invalid(f"a {declared} shard where {fmt.name} shards belong")
    _meta_check(fmt)(document, "")
    if document["rows"] != rows:
        raise Invalid(f"'rows' is {document['rows']}, the shard holds {rows}")
    if sum(document["rows_per_metric"].values()) != rows:
        raise Invalid(f"'rows_per_metric' adds up to {sum(document['rows_per_metric'].values())}, not 'rows'")
    fmt.check_meta(document)


@functools.cache  # by the format object: its checks made once, as a chunk holds 256 units' metas
def _meta_check(fmt: Format) -> Check:
    return obj({**_COMMON, "input_format": equal(fmt.name), **fmt.meta_fields()})


CHUNK_FORMAT = 1


def check_chunk(document, fmt: Format, rows: int, name: str) -> list[dict]:
    """The units' metas of DOCUMENT, once it is found to be the footer of the chunk file NAME (relative to the
    shard directory) with ROWS rows: each unit's meta is checked as `check_meta` checks a shard's, with the first
    row of its rows (`row_start`) besides, and the units' rows follow each other and fill the file."""
    if type(document) is not dict:
        raise _wrong("", document, "an object")
    found = document.get("chunk_format")
    if type(found) is int and found != CHUNK_FORMAT:
        raise OtherShardFormat(f"chunk format {found}, this trendconv reads format {CHUNK_FORMAT}")
    obj({"chunk_format": equal(CHUNK_FORMAT), "chunk": equal(name), "units": list_of(_is_dict, least=1)})(document, "")
    units, start = [], 0
    for index, entry in enumerate(document["units"]):
        unit = dict(entry)
        if unit.pop("row_start", None) != start:
            raise Invalid(f"'units[{index}].row_start' is {shown(entry.get('row_start'))}, expected {start}")
        try:
            check_meta(unit, fmt, unit.get("rows"))
        except OtherShardFormat:
            raise
        except Invalid as exc:
            raise Invalid(f"units[{index}]: {exc}") from None
        start += unit["rows"]
        units.append(entry)
    if start != rows:
        raise Invalid(f"the units' rows add up to {start}, the chunk holds {rows}")
    return units


def _is_dict(value, name: str) -> None:
    if type(value) is not dict:
        raise _wrong(name, value, "an object")


def manifest(name: str) -> Check:
    """manifest.json of the part of WORK of the format NAME."""
    return obj(
        {
            "shard_format": equal(SHARD_FORMAT),
            "input_format": equal(name),
            "options": OPTIONS,
            "shards": list_of(shard_name, least=1, distinct=True),
        },
        {**SELECTION, **LOCATED},
    )


def work_json(name: str) -> Check:
    """work.json of the part of WORK of the format NAME."""
    return obj({"data": text, "input_format": equal(name), "options": OPTIONS}, SELECTION)
