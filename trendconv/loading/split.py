"""Split output: one format's shards divided into databases by ranges of steps (docs/user-guide.md, "Big runs").

A format puts each shard in a *group* (`Format.meta_steps`: a dump step directory, the files of one step range of
monitor data); a database holds whole groups, one after another in step order. The division is decided from the
shards' footers alone (their row counts), so that it is the same on every run of the same shards: a database
takes groups while `--split-steps` allows more and its estimated size (`TABLES_BYTES` + rows × `Format.row_bytes`)
stays within `--max-db-size`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trendconv.check import PLUGIN_SIZE_LIMIT
from trendconv.errors import DataError, UsageError, plural
from trendconv.formats import Format
from trendconv.loading.records import ShardList, metas_of
from trendconv.shards import Shard

DB_SUFFIX = ".trend.db"
STEP_DIGITS = 6  # the least width of the step numbers in a split database's name, so that names sort in step order
# What a database takes whatever its rows: a database of a few rows, of either format, is 19 pages of 4 KiB (one
# for each table and index, three for sqlite_stat4's samples); what more rows add is within `Format.row_bytes`
# a row, twice or more what they take (72 bytes a dump row at 32 x 4 x 16, 89 a monitor row at 4 x 50 x 8).
# Without it, a --max-db-size below ~76 KiB gave databases above it.
TABLES_BYTES = 19 * 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(iB|B|)", re.IGNORECASE)


@dataclass(frozen=True)
class Split:
    """How a format's output is divided: at most STEPS groups and MAX_SIZE estimated bytes per database, NAME
    before every file name (several runs in one directory), and how many processes build the databases."""

    steps: int | None = None
    max_size: int = PLUGIN_SIZE_LIMIT
    name: str | None = None
    load_workers: int | None = None


@dataclass
class Part:
    """One database of a split: its groups' shards in processing order, and their steps."""

    first: int
    last: int
    shards: ShardList = field(default_factory=ShardList)
    groups: int = 0
    rows: int = 0
    name: str = ""


def parse_size(text: str) -> int:
    """`--max-db-size`: bytes, or a number with K, M, G or T: powers of 1024 (also written KiB, MiB, ...), or of 1000
    when written KB, MB, GB, TB."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"{text!r} is not a size: give bytes, or a number with K, M, G or T (like 5G or 500M)")
    number, letter, suffix = match.groups()
    power = "KMGT".index(letter.upper()) + 1 if letter else 0
    base = 1000 if letter and suffix.upper() == "B" else 1024
    size = int(float(number) * base**power)
    if not 1 <= size < 2**63:
        raise UsageError(f"{text!r} is not a size from 1 byte to 8 EiB")
    return size


def check_name(name: str | None) -> None:
    """`--name` goes in file names next to other runs': a plain word."""
    if name is not None and not _NAME.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a run name: up to 100 letters, digits, '-', '_' or '.', starting with a letter or digit"
        )


def db_stem(fmt: Format, split: Split) -> str:
    """The unsplit database's name, with the run's name first: `NAME.dump_data.trend.db`."""
    return f"{split.name}.{fmt.db_name}" if split.name else fmt.db_name


def estimate(fmt: Format, rows: int) -> int:
    """The most bytes a database of FMT with ROWS trend rows takes, as the split decides it."""
    return TABLES_BYTES + rows * fmt.row_bytes


class Partitioner:
    """Decides, group after group in step order, where a database ends. `add` takes one group's shards and says
    whether a new database starts with it."""

    def __init__(self, fmt: Format, split: Split):
        self.fmt, self.split = fmt, split
        self.parts: list[Part] = []

    def add(self, steps: tuple[int, int], members: list[Shard]) -> bool:
        rows = sum(shard.meta["rows"] for shard in members)
        self._check_fits(steps, rows)
        current = self.parts[-1] if self.parts else None
        starts = current is None or not self._room(current, rows)
        if starts:
            current = Part(*steps)
            self.parts.append(current)
        current.shards.extend(members)
        current.groups += 1
        current.rows += rows
        current.last = max(current.last, steps[1])
        return starts

    def _room(self, part: Part, rows: int) -> bool:
        if self.split.steps is not None and part.groups >= self.split.steps:
            return False
        return estimate(self.fmt, part.rows + rows) <= self.split.max_size

    def _check_fits(self, steps: tuple[int, int], rows: int) -> None:
        most = estimate(self.fmt, rows)
        if most > self.split.max_size:
            raise DataError(
                f"the {self.fmt.group_noun} of {_steps_text(steps)}: {plural(rows, 'row')}, up to "
                f"{most} bytes in a database ({self.fmt.row_bytes} bytes a row at most, and "
                f"{TABLES_BYTES} for its tables), more than the {self.split.max_size} bytes of "
                f"--max-db-size, and a {self.fmt.group_noun} is never divided; raise --max-db-size (the Trend "
                f"Analyzer opens files up to {PLUGIN_SIZE_LIMIT} bytes)"
            )

    def named(self) -> list[Part]:
        """The parts, each with its file name: the unsplit name when there is one part."""
        stem = db_stem(self.fmt, self.split)
        if not self.parts:  # no shards: loading them says so
            self.parts.append(Part(0, 0))
        if len(self.parts) == 1:
            self.parts[0].name = stem
            return self.parts
        width = max(STEP_DIGITS, *(len(str(part.last)) for part in self.parts))
        base = stem.removesuffix(DB_SUFFIX)
        for part in self.parts:
            part.name = f"{base}.steps-{part.first:0{width}d}-{part.last:0{width}d}{DB_SUFFIX}"
        return self.parts


@dataclass
class Census:
    """What deciding on one database needs of every shard: their rows and their groups' steps. `run` counts them as
    the parse's shards come (their metas are dicts then), so the load does not read every meta once more."""

    rows: int = 0
    steps: set[tuple[int, int]] = field(default_factory=set)

    def add(self, fmt: Format, meta: dict) -> tuple[int, int]:
        """Count META's shard; the steps of its group."""
        steps = fmt.meta_steps(meta) or (0, 0)
        self.rows += meta["rows"]
        self.steps.add(steps)
        return steps


def partition(fmt: Format, shard_list: list[Shard], split: Split, census: Census | None = None) -> list[Part]:
    """SHARD_LIST (in processing order) divided into databases, each with its shards in processing order; CENSUS:
    of SHARD_LIST, where it was counted already."""
    one = _one_part(fmt, shard_list, split, census)
    if one is not None:
        return [one]
    partitioner = Partitioner(fmt, split)
    for steps, members in groups(fmt, shard_list):
        partitioner.add(steps, members)
    return partitioner.named()


def _one_part(fmt: Format, shard_list: list[Shard], split: Split, census: Census | None) -> Part | None:
    """The one database of an output that `--split-steps` does not divide and whose estimated size is within
    `--max-db-size` (then every group fits too): the database `Partitioner` makes, its shards in processing order,
    without grouping them first (~40 µs a shard, 0.07 s of the load after the parse of 1,800 monitor files)."""
    if split.steps is not None:
        return None
    if census is None:
        census = Census()
        for meta in metas_of(shard_list):
            census.add(fmt, meta)
    if estimate(fmt, census.rows) > split.max_size:
        return None
    steps = census.steps
    first, last = (min(steps)[0], max(last for _, last in steps)) if steps else (0, 0)
    return Part(first, last, shard_list, len(steps), census.rows, db_stem(fmt, split))


def groups(fmt: Format, shard_list: list[Shard]) -> list[tuple[tuple[int, int], ShardList]]:
    """The shards by group, in step order; within a group in processing order. A format that cannot split has
    one group."""
    by_steps: dict[tuple[int, int], ShardList] = {}
    last = None
    for shard in shard_list:
        steps = fmt.meta_steps(shard.meta) or (0, 0)
        if last is not None and last != steps:  # compressed as soon as it ends, if its shards are together
            by_steps[last].close()
        by_steps.setdefault(steps, ShardList()).append(shard)
        last = steps
    for members in by_steps.values():
        members.close()
    return sorted(by_steps.items(), key=lambda item: item[0])


def _steps_text(steps: tuple[int, int]) -> str:
    first, last = steps
    return f"step {first}" if first == last else f"steps {first}-{last}"
