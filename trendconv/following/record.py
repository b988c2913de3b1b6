"""What a follower keeps in WORK of the databases it appends to: WORK/<format>/follow-<mark>.json says what the
database marked <mark> holds: its file name, the shards it took, in order, with the sources each was parsed from,
and the carry it was built with (one database of a split: what it knows of the whole run, `Format.carry`).

The database says which record is its own: each transaction on a database sets its mark (SQLite's user_version)
to a number no other transaction of the format used, and the record of that number is written before the
transaction commits. A follower killed at any moment thus finds, on restart, for each database the record of
exactly what it holds, whatever its name; records no database carries are of transactions that never committed,
or superseded (docs/live.md §4).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from trendconv import workdir

_PREFIX, _SUFFIX = "follow-", ".json"


@dataclass(frozen=True)
class Record:
    """One database as its last transaction left it."""

    file: str  # its name in the output directory
    taken: dict[str, list]  # shard name -> sources, in the order the database took them
    carry: Any  # as JSON keeps it: a mapping comes back as its [key, value] pairs


def path(part: Path, mark: int) -> Path:
    return part / f"{_PREFIX}{mark}{_SUFFIX}"


def write(part: Path, mark: int, record: Record) -> None:
    document = {
        "mark": mark,
        "file": record.file,
        "carry": _plain(record.carry),
        "shards": [{"shard": name, "sources": sources} for name, sources in record.taken.items()],
    }
    workdir.write_json_atomic(path(part, mark), document)


def _plain(carry: Any) -> Any:
    """CARRY as JSON can hold it: a mapping (of int keys) as its pairs, which appenders take back (`dict`)."""
    return [[key, value] for key, value in carry.items()] if isinstance(carry, dict) else carry


def read(part: Path, mark: int) -> Record | None:
    """The record of MARK, or None where there is none that trendconv wrote."""
    try:
        document = orjson.loads(path(part, mark).read_bytes())
        if document["mark"] != mark or not isinstance(document["file"], str):
            return None
        taken = {entry["shard"]: entry["sources"] for entry in document["shards"]}
        return Record(document["file"], taken, document["carry"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None


def numbers(part: Path) -> list[int]:
    """The marks of every record in PART."""
    found = []
    for name in _names(part):
        number = name[len(_PREFIX) : -len(_SUFFIX)]
        if number.isdigit():
            found.append(int(number))
    return found


def forget(part: Path, mark: int) -> None:
    with contextlib.suppress(OSError):
        path(part, mark).unlink()


def forget_others(part: Path, kept: set[int]) -> None:
    """Every record but those of KEPT: transactions that never committed, or that later ones superseded."""
    for number in numbers(part):
        if number not in kept:
            forget(part, number)


def _names(part: Path) -> list[str]:
    return [found.name for found in part.glob(f"{_PREFIX}*{_SUFFIX}")]
