"""What each input format means to the parse stage: its scan, its unit of work, its shard name and contents.

dump: one unit per (step, rank) file set, shards in WORK/shards. monitor: one unit per CSV file, shards in
WORK/monitor/shards/<run directory>/. The stage itself (reuse, executors, manifest) is format-blind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from trendconv import schemas, shards
from trendconv.dump.parse import ParseOptions, parse_file_set
from trendconv.errors import where
from trendconv.monitor.parse import parse_csv_file
from trendconv.scan import FileSet, scan
from trendconv.scan.monitor import CsvFile, scan_monitor

DUMP, MONITOR = schemas.DUMP, schemas.MONITOR


@dataclass
class Scanned:
    units: list
    warnings: list[str] = field(default_factory=list)
    skipped_files: dict[str, int] = field(default_factory=dict)


class DumpFormat:
    name = DUMP

    def work_dir(self, work: Path) -> Path:
        return work

    def scan(self, data: Path) -> Scanned:
        result = scan(data)
        return Scanned(result.file_sets, list(result.warnings))

    def shard_path(self, work: Path, unit: FileSet) -> Path:
        return shards.shard_path(work, unit.step, unit.rank)

    def identity(self, unit: FileSet) -> dict:
        """What a shard's footer says about the unit it was parsed from."""
        return {"step": unit.step, "rank": unit.rank, "item": unit.item}

    def sources(self, unit: FileSet, micro_step: bool) -> list[tuple[str, Path]]:
        files = [(unit.relative("dump.json"), unit.dump_json)]
        if micro_step:
            files.append((unit.relative("construct.json"), unit.construct_json))
        return files

    def place(self, unit: FileSet) -> str:
        return where(unit.dump_json, step=unit.step, rank=unit.rank)

    def order(self, unit: FileSet) -> tuple:
        return (unit.step, unit.rank)

    def parse(self, unit: FileSet, options: ParseOptions) -> tuple[pa.Table, dict]:
        rows = parse_file_set(unit, options)
        table = shards.build_table(rows.columns(), {"step": unit.step, "rank": unit.rank, "vpp_stage": 0}, len(rows))
        meta = {
            **self.identity(unit),
            "micro_steps": rows.micro_steps,
            "rows": len(rows),
            "rows_per_metric": dict(sorted(rows.metric_counts().items())),
            "skipped": dict(sorted(rows.skipped.items())),
        }
        return table, meta


class MonitorFormat:
    name = MONITOR

    def work_dir(self, work: Path) -> Path:
        return work / MONITOR

    def scan(self, data: Path) -> Scanned:
        result = scan_monitor(data)
        return Scanned(result.files, list(result.warnings), dict(sorted(result.skipped_files.items())))

    def shard_path(self, work: Path, unit: CsvFile) -> Path:
        return shards.shard_dir(work) / shards.monitor_shard_name(unit.run_dir, unit.name)

    def identity(self, unit: CsvFile) -> dict:
        """What a shard's footer says about the unit it was parsed from."""
        return {"rank": unit.rank, "run_dir": unit.run_dir, "file": unit.name, "metric": unit.metric}

    def sources(self, unit: CsvFile, micro_step: bool) -> list[tuple[str, Path]]:
        return [(unit.relative, unit.path)]

    def place(self, unit: CsvFile) -> str:
        return where(unit.path, rank=unit.rank)

    def order(self, unit: CsvFile) -> tuple:
        return unit.order

    def parse(self, unit: CsvFile, options: ParseOptions) -> tuple[pa.Table, dict]:
        rows = parse_csv_file(unit, options)
        columns = dict(rows.columns)
        count = len(rows)
        columns["rank"] = pa.repeat(pa.scalar(unit.rank, pa.int64()), count)
        columns["metric"] = pa.repeat(pa.scalar(unit.metric), count).dictionary_encode()
        columns["target_name"] = columns["target_name"].dictionary_encode()
        schema = shards.monitor_schema(rows.stats)
        table = pa.Table.from_arrays(
            [_as_type(columns[name], schema.field(name).type) for name in schema.names], schema=schema
        )
        meta = {
            **self.identity(unit),
            "stats": rows.stats,
            "has_micro_step": rows.has_micro_step,
            "micro_steps_per_step": rows.micro_steps_per_step(),
            "rows": count,
            "rows_per_metric": {unit.metric: count} if count else {},
            "skipped": dict(sorted(rows.skipped.items())),
        }
        return table, meta


def _as_type(column: pa.Array, kind: pa.DataType) -> pa.Array:
    return column if column.type == kind else column.cast(kind)


FORMATS = {DUMP: DumpFormat(), MONITOR: MonitorFormat()}
