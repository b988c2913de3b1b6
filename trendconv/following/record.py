"""What a follower keeps in WORK of the database it appends to: WORK/<format>/follow-<mark>.json lists the shards
the database holds, in the order it took them, with the sources each was parsed from.

The database says which record is its own: each batch's transaction sets the database's mark (SQLite's
user_version) to the batch's number, and the record of that number is written before the transaction commits. A
follower killed at any moment thus finds, on restart, the record of exactly what the database holds; records of
other numbers are of batches that never committed, or superseded (docs/live.md §4).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import orjson

from trendconv import workdir

_PREFIX, _SUFFIX = "follow-", ".json"


def path(part: Path, mark: int) -> Path:
    return part / f"{_PREFIX}{mark}{_SUFFIX}"


def write(part: Path, mark: int, taken: dict[str, list]) -> None:
    """TAKEN: shard name -> its sources, in the order the database took them."""
    document = {"mark": mark, "shards": [{"shard": name, "sources": sources} for name, sources in taken.items()]}
    workdir.write_json_atomic(path(part, mark), document)


def read(part: Path, mark: int) -> dict[str, list] | None:
    """The record of MARK, or None where there is none that trendconv wrote."""
    try:
        document = orjson.loads(path(part, mark).read_bytes())
        return {entry["shard"]: entry["sources"] for entry in document["shards"] if document["mark"] == mark}
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None


def forget_others(part: Path, mark: int) -> None:
    """Every record but MARK's: batches that never committed, or that a later one supersedes."""
    for found in part.glob(f"{_PREFIX}*{_SUFFIX}"):
        number = found.name[len(_PREFIX) : -len(_SUFFIX)]
        if number.isdigit() and int(number) != mark:
            with contextlib.suppress(OSError):
                found.unlink()
