"""The contract between trendconv's stages and an input format.

The stages are format-blind: the scan, the parse stage (trendconv.parsing), the shards (trendconv.shards), WORK
(trendconv.workdir), the load stage (trendconv.loading), `inspect` and the CLI ask a `Format` everything that depends
on what DATA holds. A format is one package, trendconv/formats/<name>/, with a `Format` subclass, and one line in
trendconv/formats/registry.py; nothing outside them asks which format it holds.

A format's data comes in *units*: what one parse task turns into one shard (a (step, rank) file set of dump data,
a CSV file of monitor data). A unit is a frozen dataclass: it travels to worker processes, and only its format
looks inside it. A shard's *meta* is the JSON document in its footer (trendconv.shards): the stages write its
common part, `Format.parse` the rest, and the format reads it back when loading.

Keep the class cheap to import: the registry is read by `trendconv --help`. Import the parser and the loader
inside the methods that need them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import pyarrow as pa

    from trendconv.options import ParseOptions
    from trendconv.schemas import Check
    from trendconv.selection import Selection
    from trendconv.shards import Shard
    from trendconv.summaries import LoadSummary

Unit = Any  # a format's own frozen dataclass


@dataclass
class Scanned:
    """What a scan found: the units in processing order, warnings, and files left out (reason -> count). UNITS may
    be any sequence: a list, or (for many units) a trendconv.scan.packed.PackedUnits, as the plan keeps them."""

    units: Sequence
    warnings: list[str] = field(default_factory=list)
    skipped_files: dict[str, int] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)  # outside the selection: what (a noun) -> count


class Builder(Protocol):
    """Builds one database from shards, at a private temporary path until `publish` moves it into place
    (trendconv.loading.build has the parts every builder uses).

    The load stage calls `plan` (when the format does not stream), then `add` for every shard in processing order,
    then `seal`, which completes the database at its temporary path. Once every format's database is sealed, each
    is published (trendconv.loading.build.publish_all); on any failure, `abort`, which removes the temporary file and
    leaves the database in place as it was.
    """

    final: Path  # the database, once published
    tmp: Path  # where it is built until then (a follower copies a sealed build into a database in place)
    summary: LoadSummary
    seconds: dict[str, float]  # "finish" and "index", for the run summary

    def plan(self, metas: Iterable[dict]) -> None:
        """Every shard's meta, in processing order, before the first `add` (only for a format whose `streams` is
        False). An iterable read once: a load of many files never holds every meta at once."""

    def add(self, shard: Shard) -> None: ...

    def seal(self) -> None: ...

    def publish(self) -> LoadSummary: ...

    def abort(self) -> None: ...


class Refused(Exception):
    """Shards an appender cannot add after what its database holds and still match a batch build of them all
    (a step before one already in, a changed step slot): the follower rebuilds the database in place instead."""


class Appender(Protocol):
    """Appends shards to a database in place, one SQLite transaction per batch, so that a reader that has the file
    open sees each batch whole (trendconv.following, docs/live.md). Ids follow the format's batch builder: `replay`
    and `append` of shards in the order the database took them give its state and rows.

    After `Refused` or any failure the appender is closed and a new one made (its state is then unknown); `close`
    alone only closes its connection.
    """

    final: Path  # the database, which exists (a follower sets it when it renames the file, after `close`)

    def replay(self, shard_list: list[Shard], carry: Any = None) -> None:
        """Take SHARD_LIST, which the database already holds, in the order it took them, built with CARRY (one
        database of a split: `Format.carry` of the run then): state only, no writes."""

    def moved(self, carry: Any) -> str | None:
        """Why CARRY (of the run as it is now; None: the database is the whole run) would put rows already in at
        other global steps, or None: the follower then rebuilds the database in place."""

    def append(self, shard_list: list[Shard], mark: int, carry: Any = None) -> int:
        """Add SHARD_LIST (in processing order) in one transaction that also records MARK (trendconv.following),
        with CARRY as `moved` takes it; the number of trend rows added. Refused, before anything is committed, when
        they cannot follow."""

    def close(self) -> None: ...


class Format(ABC):
    """Everything trendconv knows of one input format. The registry holds one instance per format."""

    name: str  # `--format NAME`, `format=NAME`, WORK/NAME/, and the footers' and manifests' `input_format`
    db_name: str  # the database it builds in the output directory: `dump_data.trend.db`
    looks_like: str  # what its DATA holds, for help texts and messages: `step*/rank*/dump.json`
    unit_noun: str  # one unit in words, for summaries and messages: `file set`
    metrics: tuple[str, ...]  # every metric it can have, in the order inspect counts rows per metric
    # True: the load stage takes each shard as soon as it and every shard before it are parsed (run overlaps
    # the stages). False: the builder needs every shard's meta first (`Builder.plan`).
    streams: bool
    # What names a unit in inspect's entries (JSON and table columns, in this order), and whether inspect's table
    # shows the rows of every metric (a column each).
    label_fields: tuple[str, ...]
    label_columns: tuple[str, ...]
    metric_columns: bool
    # The modules `parse` imports: the pool's forkserver imports those of the formats a run parses, once for all
    # its workers.
    parser_modules: tuple[str, ...]
    # True: the parse writes the shards of many units into one chunk file (trendconv.shards: a Parquet file per
    # unit costs more than parsing a small one); resume and inspect still go by unit.
    chunked: bool = False
    # trendconv 0.1 kept the dump part of WORK at WORK itself (trendconv.workdir reads it there, and moves it).
    old_part_at_work: bool = False
    # Split output (trendconv.loading.split): what one group of shards is called in messages (`step directory`),
    # and at most how many bytes a trend row with its index entries takes in a database of the format, including
    # the pages' free space: the split decides file sizes from row counts with it, before any database exists.
    group_noun: str = "group"
    row_bytes: int = 256

    # ---- scan (in the main process)

    @abstractmethod
    def detect(self, data: Path) -> bool:
        """Whether DATA looks like this format's data (what `format="auto"` looks for); cheap."""

    @abstractmethod
    def scan(self, data: Path, selection: Selection | None = None) -> Scanned:
        """Every unit of DATA in processing order; a DataError when there is none.

        SELECTION (`--steps`, `--ranks`; given only when it selects something) leaves out units before anything
        under their directories is opened, and a DataError naming it when nothing is selected. A format that
        cannot select need not take the argument."""

    # ---- units

    @abstractmethod
    def sources(self, unit: Unit, options: ParseOptions) -> list[tuple[str, str | Path]]:
        """The files a unit's shard is made from, as (path relative to DATA, path, as text or a Path): their sizes
        and times decide whether a shard is reused."""

    def size(self, unit: Unit) -> int | None:
        """The unit's input in bytes where the scan saw it (the parse stage plans its pool and its task groups by
        it), or None: the stage then looks at `sources`. Many small units make a second look cost."""
        return None

    @abstractmethod
    def shard_name(self, unit: Unit) -> str:
        """The unit's shard, relative to the format's shard directory (`step0_rank1.parquet`)."""

    @abstractmethod
    def place(self, unit: Unit) -> str:
        """The unit in messages: its file, then step and rank where known (trendconv.errors.place)."""

    @abstractmethod
    def order(self, unit: Unit) -> tuple:
        """The unit's sort key in processing order, which is also the load order."""

    @abstractmethod
    def label(self, unit: Unit) -> dict:
        """The `label_fields` of a unit, for inspect."""

    @abstractmethod
    def identity(self, unit: Unit) -> dict:
        """What the meta of the unit's shard says of the unit (`parse` includes it): a shard whose meta says other
        values is not this unit's."""

    # ---- parse (in worker processes)

    @abstractmethod
    def parse(self, unit: Unit, options: ParseOptions) -> tuple[Any, dict]:
        """The unit's shard rows, and its part of the shard's meta, with at least `rows`, `rows_per_metric` and
        `skipped` (reason -> count). The rows are an Arrow table, or any form of the format's own that `table`
        takes."""

    def table(self, parts: list) -> pa.Table:
        """The rows of units (what `parse` gave for each, in order) as one table: a unit's shard, or the shards of
        a chunk file. A chunked format of many small units joins them here at less cost than a table per unit;
        units that differ in their columns give their union, the cells a unit lacks null."""
        import pyarrow as pa

        return parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="default")

    # ---- shards, read back

    @abstractmethod
    def meta_fields(self) -> dict[str, Check]:
        """The keys of its shards' meta besides the common ones, each with its check (trendconv.schemas). Asked
        once per format object: the checks are kept."""

    @abstractmethod
    def check_meta(self, meta: dict) -> None:
        """What a meta's values must agree on, once each key passed its check; raise schemas.Invalid."""

    @abstractmethod
    def shard_schema(self, meta: dict) -> pa.Schema:
        """The columns a shard of this meta holds (a shard with others is refused)."""

    @abstractmethod
    def meta_shard_name(self, meta: dict) -> str:
        """`shard_name` of the unit a shard was made from, read from its meta."""

    @abstractmethod
    def meta_order(self, meta: dict) -> tuple:
        """`order` of the unit a shard was made from, read from its meta."""

    @abstractmethod
    def meta_label(self, meta: dict) -> dict:
        """`label` of the unit a shard was made from, read from its meta."""

    # ---- split output: one database per range of steps (trendconv.loading.split)

    def meta_steps(self, meta: dict) -> tuple[int, int] | None:
        """The steps of the group a shard belongs to, (first, last): a split puts a group's shards in one
        database, and a database's groups follow each other. None: the format cannot split, one group."""
        return None

    def carry(self, metas: list[dict]) -> Any:
        """What the builder of one database of a split must know of every shard of the run (METAS, in processing
        order), so that its global steps are those of the unsplit database; picklable, small."""
        return None

    def meta_selected(self, meta: dict, selection: Selection) -> bool:
        """Whether SELECTION takes the unit a shard was made from: a parse keeps the shards it does not take, for
        a later parse that does."""
        return True

    # ---- load

    @abstractmethod
    def builder(self, out_dir: Path, *, index: bool, name: str | None = None, carry: Any = None) -> Builder:
        """A builder of OUT_DIR/NAME (by default `db_name`); INDEX: build the read indexes. CARRY: `carry` of every
        shard of the run when the database holds only some of them (one of a split), else None."""

    def appender(self, final: Path) -> Appender:
        """An appender to the database FINAL, which a builder of this format made (`trendconv run --follow`)."""
        from trendconv.errors import UsageError

        raise UsageError(f"following is not available for {self.name} data; convert it with `trendconv run`")

    # ---- words

    def units(self, count: int) -> str:
        """`1 file set`, `8 file sets`."""
        return f"{count} {self.unit_noun}" if count == 1 else f"{count} {self.unit_noun}s"
