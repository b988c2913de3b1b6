"""The JSON documents trendconv writes into WORK, and the one check that a document read back is one of them.

A shard footer (one layout per input format), manifest.json and work.json are checked here, key by key, before
anything reads a value: a document that was edited, replaced by other JSON, or written by another program is
refused with the key and what is wrong with it, instead of failing later with a traceback or loading nonsense.
Every key must be present and no other; the bounds are what the parse can write (see the constants).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from trendconv.dump import rules as dump_rules
from trendconv.errors import kind_of
from trendconv.monitor import rules as monitor_rules
from trendconv.scan.monitor import RUN_DIR, metric_of

# 2: local_micro_step is int64 (construct.json micro steps reach 3000000000 and beyond).
SHARD_FORMAT = 2
DUMP, MONITOR = "dump", "monitor"
INT64 = (-(2**63), 2**63 - 1)  # what SQLite's INTEGER and the shards' int64 columns hold
COUNT = (0, 2**63 - 1)
# A file set's micro-step count is its largest local micro step + 1 (negative where every micro step is, as
# msprobe has them), and local_micro_step is an int64 column.
MICRO_STEPS = (-(2**63) + 1, 2**63)
MONITOR_RANK = (0, 99999)  # a run directory's rank has at most 5 digits (scan.monitor.RUN_DIR)
DUMP_METRICS = (dump_rules.FORWARD, dump_rules.BACKWARD, dump_rules.RECOMPUTE, dump_rules.PARAMETERS_GRAD)
SHARD_SUFFIX = ".parquet"
AGAIN = "run `trendconv parse` again"  # what fixes a document in WORK that is not what trendconv wrote
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


def obj(fields: dict[str, Check]) -> Check:
    """An object with exactly FIELDS' keys."""

    def object_check(value, name: str) -> None:
        if type(value) is not dict:
            raise _wrong(name, value, "an object")
        prefix = f"{name}." if name else ""
        for key in fields:
            if key not in value:
                raise Invalid(f"no '{prefix}{key}'")
        for key in value:
            if key not in fields:
                raise Invalid(f"unexpected key '{prefix}{key}'")
        for key, check in fields.items():
            check(value[key], prefix + key)

    return object_check


OPTIONS = obj({"micro_step": boolean, "mapping_sha256": sha256})
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
_FOOTER_FIELDS = {
    DUMP: {
        **_COMMON,
        "input_format": equal(DUMP),
        "step": integer(*INT64),
        "rank": integer(*INT64),
        "item": file_name,
        "micro_steps": integer(*MICRO_STEPS),
    },
    MONITOR: {
        **_COMMON,
        "input_format": equal(MONITOR),
        "rank": integer(*MONITOR_RANK),
        "run_dir": file_name,
        "file": file_name,
        "metric": one_of(monitor_rules.METRICS, "a monitor metric name"),
        "stats": list_of(one_of(monitor_rules.STATS, "a monitor stat name"), distinct=True),
        "has_micro_step": boolean,
        "micro_steps_per_step": list_of(pair(integer(*INT64), integer(*COUNT))),
    },
}
FOOTERS = {fmt: obj(fields) for fmt, fields in _FOOTER_FIELDS.items()}


def check_footer(document, input_format: str, rows: int) -> None:
    """Raise Invalid unless DOCUMENT is the footer of an INPUT_FORMAT shard of ROWS rows, as the parse writes it.

    The shard format and the input format come first: they say what the rest of the document should be."""
    if type(document) is not dict:
        raise _wrong("", document, "an object")
    found = document.get("shard_format")
    if type(found) is int and found != SHARD_FORMAT:
        raise OtherShardFormat(f"shard format {found}, this trendconv reads format {SHARD_FORMAT}")
    declared = document.get("input_format")
    if isinstance(declared, str) and declared in FOOTERS and declared != input_format:
        raise Invalid(f"a {declared} shard where {input_format} shards belong")
    FOOTERS[input_format](document, "")
    if document["rows"] != rows:
        raise Invalid(f"'rows' is {document['rows']}, the shard holds {rows}")
    if sum(document["rows_per_metric"].values()) != rows:
        raise Invalid(f"'rows_per_metric' adds up to {sum(document['rows_per_metric'].values())}, not 'rows'")
    (_check_dump if input_format == DUMP else _check_monitor)(document)


def _check_dump(document: dict) -> None:
    unknown = sorted(set(document["rows_per_metric"]) - set(DUMP_METRICS))
    if unknown:
        raise Invalid(f"'rows_per_metric' counts an unknown metric {unknown[0]!r}")


def _check_monitor(document: dict) -> None:
    metric, rows = document["metric"], document["rows"]
    if document["rows_per_metric"] != ({metric: rows} if rows else {}):
        raise Invalid(f"'rows_per_metric' is not the rows of metric {metric!r}")
    if metric_of(document["file"]) != metric:
        raise Invalid(f"'file' {document['file']!r} is not a CSV file name of metric {metric!r}")
    run = RUN_DIR.match(document["run_dir"])
    if run is None or int(run[2]) != document["rank"]:
        raise Invalid(f"'run_dir' {document['run_dir']!r} is not a run directory of rank {document['rank']}")
    if bool(rows) != bool(document["micro_steps_per_step"]):
        raise Invalid(f"'micro_steps_per_step' is {shown(document['micro_steps_per_step'])} for {rows} rows")
    steps = [step for step, _ in document["micro_steps_per_step"]]
    if steps != sorted(set(steps)):
        raise Invalid("'micro_steps_per_step' is not in ascending order of distinct steps")


def manifest(input_format: str) -> Check:
    """manifest.json of INPUT_FORMAT's part of WORK."""
    return obj(
        {
            "shard_format": equal(SHARD_FORMAT),
            "input_format": equal(input_format),
            "options": OPTIONS,
            "shards": list_of(shard_name, least=1, distinct=True),
        }
    )


def work_json(input_format: str) -> Check:
    """work.json of INPUT_FORMAT's part of WORK."""
    return obj({"data": text, "input_format": equal(input_format), "options": OPTIONS})
