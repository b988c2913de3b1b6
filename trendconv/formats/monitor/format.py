"""msprobe training-monitor output as a `Format`: run directories of `<metric>_<a>-<b>.csv` files, one unit per CSV
file, into monitor_data.trend.db (docs/monitor-format.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trendconv.formats.contract import Format, Scanned
from trendconv.formats.monitor.metrics import METRICS

if TYPE_CHECKING:
    from trendconv.formats.monitor.scan import CsvFile
    from trendconv.options import ParseOptions
    from trendconv.selection import Selection

NAME, DB_NAME = "monitor", "monitor_data.trend.db"

# The methods import what they use: the registry is read by `trendconv --help`, which must stay quick.


class MonitorFormat(Format):
    name = NAME
    db_name = DB_NAME
    looks_like = "run directories like 'Feb20_16-27-56-rank0-1a2b3c4d' holding <metric>_<a>-<b>.csv files"
    unit_noun = "monitor CSV file"
    metrics = METRICS
    # A step's micro-step slots depend on every file (docs/monitor-format.md §7): rows wait for every footer.
    streams = False
    chunked = True  # small files: a shard file each cost more than the parse (benchmarks/RESULTS-monitor.md)
    label_fields = ("file", "rank")
    label_columns = ("rank", "file")
    parser_modules = ("trendconv.formats.monitor.shard",)
    metric_columns = False  # nine metrics, one per file: the file's name says which

    group_noun = "step range of CSV files"
    # A row of trend_data holds at most 4 ints and 14 reals, about 150 bytes with its cell, and each read index
    # entry at most 4 ints, about 35; with pages left part free, 320 is above every database measured.
    row_bytes = 320

    def detect(self, data: Path) -> bool:
        from trendconv.formats.monitor.scan import has_run_dirs

        return has_run_dirs(data)

    def scan(self, data: Path, selection: Selection | None = None) -> Scanned:
        from trendconv.formats.monitor.scan import scan_monitor
        from trendconv.selection import EVERYTHING

        found = scan_monitor(data, selection or EVERYTHING)
        left_out = dict(sorted(found.left_out.items()))
        return Scanned(found.files, list(found.warnings), dict(sorted(found.skipped_files.items())), left_out)

    def sources(self, unit: CsvFile, options: ParseOptions) -> list[tuple[str, str]]:
        return [(unit.relative, unit.file)]

    def size(self, unit: CsvFile) -> int | None:
        return unit.size

    def shard_name(self, unit: CsvFile) -> str:
        return _shard_name(unit.run_dir, unit.name)

    def place(self, unit: CsvFile) -> str:
        from trendconv.errors import place

        return place(unit.path, rank=unit.rank)

    def order(self, unit: CsvFile) -> tuple:
        return unit.order

    def label(self, unit: CsvFile) -> dict:
        return {"file": unit.relative, "rank": unit.rank}

    def identity(self, unit: CsvFile) -> dict:
        return unit.identity

    def parse(self, unit: CsvFile, options: ParseOptions):
        from trendconv.formats.monitor.shard import rows_of

        return rows_of(unit, options)

    def table(self, parts: list):
        from trendconv.formats.monitor.shard import table_of

        return table_of(parts)

    def meta_fields(self) -> dict:
        from trendconv.formats.monitor.meta import FIELDS

        return FIELDS

    def check_meta(self, document: dict) -> None:
        from trendconv.formats.monitor.meta import check

        check(document)

    def shard_schema(self, meta: dict):
        from trendconv.formats.monitor.shard import schema

        return schema(meta["stats"])

    def meta_shard_name(self, meta: dict) -> str:
        return _shard_name(meta["run_dir"], meta["file"])

    def meta_order(self, meta: dict) -> tuple:
        from trendconv.formats.monitor.scan import order

        return order(meta["rank"], meta["run_dir"], meta["file"], meta["metric"])

    def meta_label(self, meta: dict) -> dict:
        return {"file": f"{meta['run_dir']}/{meta['file']}", "rank": meta["rank"]}

    def meta_steps(self, meta: dict) -> tuple[int, int]:
        from trendconv.formats.monitor.scan import step_range

        return step_range(meta["file"], meta["metric"])

    def carry(self, metas: list[dict]) -> list[tuple[int, int]] | None:
        from trendconv.formats.monitor.plan import micro_step_counts

        return micro_step_counts(metas)

    def meta_selected(self, meta: dict, selection: Selection) -> bool:
        first, last = self.meta_order(meta)[3:5]  # the steps <a>-<b> of the file's name
        return selection.rank(meta["rank"]) and selection.step_range(first, last)

    def builder(self, out_dir: Path, *, index: bool, name: str | None = None, carry=None):
        from trendconv.formats.monitor.builder import MonitorBuilder

        return MonitorBuilder(out_dir, index=index, name=name, carry=carry)

    def appender(self, final: Path):
        from trendconv.formats.monitor.append import MonitorAppender

        return MonitorAppender(final)


def _shard_name(run_dir: str, file: str) -> str:
    return f"{run_dir}/{file}.parquet"  # schemas.SHARD_SUFFIX
