"""What a follower reports: each batch as it goes into a database, and the whole when it stops."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Batch:
    """One transaction on a database: units appended, or the database rebuilt in place (and why); or, with no
    transaction, a database of a split renamed (its steps' range changed) or removed (its steps are in others)."""

    format: str
    db: Path
    units: int  # units new in this database in this batch
    rows: int  # trend rows appended (a rebuild: rows in the database)
    mark: int  # the transaction's number, which the database records
    rebuilt: str | None = None  # why the database was rebuilt in place instead of appended to
    created: bool = False  # the first batch, which made the database
    was: Path | None = None  # renamed: its name before
    removed: bool = False


@dataclass
class FollowSummary:
    """One format followed, from the start of the command to its stop."""

    format: str
    db: Path  # its database, or the first of a split
    work: Path
    units: int = 0  # units in the databases when the follower stopped
    appended: int = 0  # transactions that appended
    rebuilt: int = 0  # transactions that rebuilt a database in place
    rows: int = 0  # trend rows appended (rebuilds not counted)
    warnings: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # the places of units not converted: their files do not parse
    files: list[Path] = field(default_factory=list)  # its databases when it stopped, in step order
