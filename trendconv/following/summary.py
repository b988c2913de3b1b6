"""What a follower reports: each batch as it goes into the database, and the whole when it stops."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Batch:
    """One transaction on the database: units appended, or the database rebuilt in place (and why)."""

    format: str
    db: Path
    units: int  # units new in this batch
    rows: int  # trend rows appended (a rebuild: rows in the database)
    mark: int  # the batch's number, which the database records
    rebuilt: str | None = None  # why the database was rebuilt in place instead of appended to
    created: bool = False  # the first batch, which made the database


@dataclass
class FollowSummary:
    """One format followed, from the start of the command to its stop."""

    format: str
    db: Path
    work: Path
    units: int = 0  # units in the database when the follower stopped
    appended: int = 0  # batches appended
    rebuilt: int = 0  # batches that rebuilt the database in place
    rows: int = 0  # trend rows appended (rebuilds not counted)
    warnings: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # units not converted when it stopped: their files do not parse
