"""What each stage reports when it is done; the Python API returns these, and the CLI prints them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ParseSummary:
    """One format's parse."""

    format: str  # the format's name: "dump", "monitor"
    files: int = 0  # units of work found in DATA (dump file sets, monitor CSV files)
    parsed: int = 0  # units parsed into a new shard
    reused: int = 0  # units whose shard from an earlier parse was still good
    rows: int = 0  # rows in all the shards
    skipped: Counter = field(default_factory=Counter)  # values left out, reason -> count
    skipped_files: dict[str, int] = field(default_factory=dict)  # files left out, reason -> count
    warnings: list[str] = field(default_factory=list)
    removed_orphans: int = 0  # shards of units no longer in DATA, removed
    selection: str | None = None  # the steps and ranks selected, in words (None: everything)
    left_out: dict[str, int] = field(default_factory=dict)  # outside the selection: what (a noun) -> count
    scan_seconds: float = 0.0
    shard_dir: Path | None = None  # where the shards are


@dataclass
class LoadSummary:
    """One database's load."""

    db: Path | None = None  # the database, in place
    shards: int = 0
    rows: int = 0  # trend rows inserted
    duplicates: int = 0  # rows dropped for a (rank, step, target, metric) seen before
    targets: int = 0
    tags: int = 0
    tag_links: int = 0
    size: int = 0  # bytes
    warnings: list[str] = field(default_factory=list)
    parts: list[LoadSummary] = field(default_factory=list)  # a split output: each database's own; db is the first


@dataclass
class ConvertSummary:
    """One format converted: its parse and its load (`trendconv.convert`, `trendconv run`)."""

    parse: ParseSummary
    load: LoadSummary
    work: Path  # the WORK directory the shards are kept in
    seconds: dict[str, float] = field(default_factory=dict)  # scan, parse, load, index and total wall seconds

    @property
    def format(self) -> str:
        return self.parse.format

    @property
    def warnings(self) -> list[str]:
        return self.parse.warnings + self.load.warnings
