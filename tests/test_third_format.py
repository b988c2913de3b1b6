"""A third input format is one `Format` subclass and one registry entry: the stages need nothing else.

The toy format here reads `*.toy` files of `target step norm` lines into a one-metric database. It goes through
the same machinery as dump and monitor data: scan, parse with reuse, WORK/toy/, the manifest, the load stage with
the shared build helpers, all-or-nothing publishing, inspect and `format="auto"`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import query

import trendconv
from trendconv import schemas, shards
from trendconv.errors import DataError
from trendconv.formats import FORMATS, Format, Scanned
from trendconv.loading import build, schema
from trendconv.summaries import LoadSummary

SCHEMA = pa.schema([("target", pa.string()), ("step", pa.int64()), ("norm", pa.float64())])


@dataclass(frozen=True)
class ToyFile:
    path: Path
    name: str


class ToyFormat(Format):
    name = "toy"
    db_name = "toy_data.trend.db"
    looks_like = "*.toy files"
    unit_noun = "toy file"
    metrics = ("value",)
    streams = True
    label_fields = label_columns = ("file",)
    metric_columns = True
    parser_modules = ()

    def detect(self, data: Path) -> bool:
        return any(data.glob("*.toy"))

    def scan(self, data: Path) -> Scanned:
        units = [ToyFile(path, path.name) for path in sorted(data.glob("*.toy"))]
        if not units:
            raise DataError(f"{data}: no *.toy files")
        return Scanned(units)

    def sources(self, unit: ToyFile, options) -> list[tuple[str, Path]]:
        return [(unit.name, unit.path)]

    def shard_name(self, unit: ToyFile) -> str:
        return f"{unit.name}.parquet"

    def place(self, unit: ToyFile) -> str:
        return str(unit.path)

    def order(self, unit: ToyFile) -> tuple:
        return (unit.name,)

    def label(self, unit: ToyFile) -> dict:
        return {"file": unit.name}

    def identity(self, unit: ToyFile) -> dict:
        return {"file": unit.name}

    def parse(self, unit: ToyFile, options) -> tuple[pa.Table, dict]:
        lines = [line.split() for line in unit.path.read_text().splitlines()]
        table = pa.table(
            [[t for t, _, _ in lines], [int(s) for _, s, _ in lines], [float(n) for *_, n in lines]], schema=SCHEMA
        )
        rows = len(lines)
        return table, {
            "file": unit.name,
            "rows": rows,
            "rows_per_metric": {"value": rows} if rows else {},
            "skipped": {},
        }

    def meta_fields(self) -> dict:
        return {"file": schemas.file_name}

    def check_meta(self, meta: dict) -> None:
        pass

    def shard_schema(self, meta: dict) -> pa.Schema:
        return SCHEMA

    def meta_shard_name(self, meta: dict) -> str:
        return f"{meta['file']}.parquet"

    def meta_order(self, meta: dict) -> tuple:
        return (meta["file"],)

    def meta_label(self, meta: dict) -> dict:
        return {"file": meta["file"]}

    def builder(self, out_dir: Path, *, index: bool, name: str | None = None, carry=None):
        return ToyBuilder(out_dir, index, name or self.db_name)  # no meta_steps: never split, CARRY unused


class ToyBuilder:
    """Rank 0, one metric; targets numbered in first-seen order; global_stats in the dump layout."""

    def __init__(self, out_dir: Path, index: bool, name: str):
        self.final, self.index = out_dir / name, index
        self.summary, self.seconds = LoadSummary(), {"finish": 0.0, "index": 0.0}
        self.tmp = build.prepare_build(out_dir, name)
        self.conn = build.open_build(self.tmp)
        for statement in (*schema.DIMENSION_TABLES, schema.trend_data_ddl(["norm"])):
            self.conn.execute(statement)
        self.conn.executemany(schema.INSERT_METRIC, [("value",)])
        self.targets: dict[str, int] = {}
        self.steps: set[int] = set()

    def plan(self, metas: list[dict]) -> None:
        pass

    def add(self, shard: shards.Shard) -> None:
        table = shards.read_rows(shard.path, SCHEMA).to_pylist()
        rows = [(0, row["step"], self._target(row["target"]), 1, row["norm"]) for row in table]
        self.conn.executemany(schema.insert_trend(["norm"]), rows)
        self.steps.update(row["step"] for row in table)
        self.summary.rows += len(rows)
        self.summary.shards += 1

    def _target(self, name: str) -> int:
        return self.targets.setdefault(name, len(self.targets) + 1)

    def seal(self) -> None:
        started = time.perf_counter()
        self.conn.executemany(schema.INSERT_TARGET, [(tid, name, 0, 0) for name, tid in self.targets.items()])
        self.conn.execute(schema.dump_global_stats_ddl(ToyFormat.metrics))
        self.conn.execute(schema.insert_global_stats(4), (0, min(self.steps), max(self.steps), "norm"))
        self.summary.targets = len(self.targets)
        build.complete_build(self.conn, self.tmp, self.seconds, started, index=self.index)

    def publish(self) -> LoadSummary:
        return build.publish(self.tmp, self.final, self.summary, self.seconds)

    def abort(self) -> None:
        build.abandon(self.conn, self.tmp)


@pytest.fixture
def toy(monkeypatch, tmp_path) -> Path:
    monkeypatch.setitem(FORMATS, "toy", ToyFormat())  # the one registry line
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.toy").write_text("layer.0 0 1.5\nlayer.1 0 2.5\n")
    (data / "b.toy").write_text("layer.0 1 3.5\n")
    return data


def test_a_third_format_converts_resumes_and_inspects(toy, tmp_path):
    [summary] = trendconv.convert(toy, tmp_path / "out", format="toy", workers=1)
    db = tmp_path / "out" / "toy_data.trend.db"
    assert (summary.load.db, summary.parse.files, summary.load.rows, summary.load.targets) == (db, 2, 3, 2)
    trend = "SELECT step, target_name, norm FROM trend_data JOIN monitoring_targets USING (target_id) ORDER BY 1, 2"
    assert query(db, trend) == [
        (0, "layer.0", 1.5),
        (0, "layer.1", 2.5),
        (1, "layer.0", 3.5),
    ]
    assert query(db, "SELECT * FROM global_stats") == [(0, 0, 1, "norm")]
    work = tmp_path / "out" / ".trendconv"
    assert sorted(path.name for path in (work / "toy" / "shards").iterdir()) == ["a.toy.parquet", "b.toy.parquet"]
    [again] = trendconv.convert(toy, tmp_path / "out", format="toy", workers=1)
    assert (again.parse.parsed, again.parse.reused, again.load.db.read_bytes()) == (0, 2, db.read_bytes())
    document = trendconv.inspect(work)
    assert (document["input_format"], document["shards"][0], document["totals"]["rows_per_metric"]) == (
        "toy",
        {
            "file": "a.toy",
            "shard": "a.toy.parquet",
            "status": "ok",
            "rows": 2,
            "rows_per_metric": {"value": 2},
            "skipped": {},
        },
        {"value": 3},
    )


def test_auto_finds_the_third_format_beside_the_others(toy, tmp_path):
    (toy / "step0" / "rank0").mkdir(parents=True)
    (toy / "step0" / "rank0" / "dump.json").write_text('{"data": {}}')
    summaries = trendconv.convert(toy, tmp_path / "out", micro_step=False, workers=1)
    assert [(summary.format, summary.load.db.name) for summary in summaries] == [
        ("dump", "dump_data.trend.db"),
        ("toy", "toy_data.trend.db"),
    ]
    [loaded] = trendconv.load(tmp_path / "out" / ".trendconv", tmp_path / "again")[1:]
    assert loaded.db.read_bytes() == summaries[1].load.db.read_bytes()
