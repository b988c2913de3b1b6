"""msprobe dump data as a `Format`: DATA/step*/rank*|proc*/{dump.json,construct.json}, one unit per (step, rank)
file set, into dump_data.trend.db (docs/dump-format.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trendconv.formats.contract import Format, Scanned
from trendconv.formats.dump.metrics import METRICS

if TYPE_CHECKING:
    from trendconv.formats.dump.scan import FileSet
    from trendconv.options import ParseOptions
    from trendconv.selection import Selection

DB_NAME = "dump_data.trend.db"

# The methods import what they use: the registry is read by `trendconv --help`, which must stay quick.


class DumpFormat(Format):
    name = "dump"
    db_name = DB_NAME
    looks_like = "step*/rank*/dump.json"
    unit_noun = "file set"
    metrics = METRICS
    streams = True  # a shard's rows depend only on the shards before it (docs/dump-format.md §8)
    label_fields = ("step", "rank")
    label_columns = ("step", "rank")
    parser_modules = ("trendconv.formats.dump.shard",)
    metric_columns = True
    old_part_at_work = True
    group_noun = "step directory"
    # A row of trend_data holds at most 4 ints and 4 reals, about 70 bytes with its cell, and each read index
    # entry at most 4 ints, about 35; with pages left part free, 160 is above every database measured (~90).
    row_bytes = 160

    def detect(self, data: Path) -> bool:
        from trendconv.formats.dump.scan import has_steps

        return has_steps(data)

    def scan(self, data: Path, selection: Selection | None = None) -> Scanned:
        from trendconv.formats.dump.scan import scan
        from trendconv.selection import EVERYTHING

        found = scan(data, selection or EVERYTHING)
        return Scanned(found.file_sets, list(found.warnings), left_out=found.left_out)

    def sources(self, unit: FileSet, options: ParseOptions) -> list[tuple[str, Path]]:
        files = [(unit.relative("dump.json"), unit.dump_json)]
        if options.micro_step:
            files.append((unit.relative("construct.json"), unit.construct_json))
        return files

    def shard_name(self, unit: FileSet) -> str:
        return _shard_name(unit.step, unit.rank)

    def place(self, unit: FileSet) -> str:
        from trendconv.errors import place

        return place(unit.dump_json, step=unit.step, rank=unit.rank)

    def order(self, unit: FileSet) -> tuple:
        return (unit.step, unit.rank)

    def label(self, unit: FileSet) -> dict:
        return {"step": unit.step, "rank": unit.rank}

    def identity(self, unit: FileSet) -> dict:
        return unit.identity

    def parse(self, unit: FileSet, options: ParseOptions):
        from trendconv.formats.dump.shard import shard_of

        return shard_of(unit, options)

    def meta_fields(self) -> dict:
        from trendconv.formats.dump.meta import FIELDS

        return FIELDS

    def check_meta(self, document: dict) -> None:
        from trendconv.formats.dump.meta import check

        check(document)

    def shard_schema(self, meta: dict):
        from trendconv.formats.dump.shard import SCHEMA

        return SCHEMA

    def meta_shard_name(self, meta: dict) -> str:
        return _shard_name(meta["step"], meta["rank"])

    def meta_order(self, meta: dict) -> tuple:
        return (meta["step"], meta["rank"])

    def meta_label(self, meta: dict) -> dict:
        return {"step": meta["step"], "rank": meta["rank"]}

    def meta_steps(self, meta: dict) -> tuple[int, int]:
        return (meta["step"], meta["step"])

    def carry(self, metas: list[dict]) -> dict[int, int] | None:
        """In micro-step mode, each step's first global step (docs/dump-format.md §3.3): the micro-step counts of
        the steps before it; in step mode nothing."""
        from trendconv.formats.dump.builder import first_global_steps

        return first_global_steps(metas)

    def meta_selected(self, meta: dict, selection: Selection) -> bool:
        return selection.step(meta["step"]) and selection.rank(meta["rank"])

    def builder(self, out_dir: Path, *, index: bool, name: str | None = None, carry=None):
        from trendconv.formats.dump.builder import DumpBuilder

        return DumpBuilder(out_dir, index=index, name=name, carry=carry)

    def appender(self, final: Path):
        from trendconv.formats.dump.append import DumpAppender

        return DumpAppender(final)


def _shard_name(step: int, rank: int) -> str:
    return f"step{step}_rank{rank}.parquet"  # schemas.SHARD_SUFFIX
