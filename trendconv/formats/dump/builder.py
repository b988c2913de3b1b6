"""dump_data.trend.db from dump shards, in (step, rank) order, deterministically.

Every id is assigned here: targets as msprobe data2db numbers them (trendconv.formats.dump.ids), tags in one block
per metric, each block in the order its targets were first used. The rows go to the writer thread shard by shard
while the next shard is prepared (trendconv.loading.writer).
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import int64, shards
from trendconv.errors import DataError, plural
from trendconv.faults import fault_point
from trendconv.formats.dump.format import DB_NAME
from trendconv.formats.dump.ids import TargetIds, flush_starts
from trendconv.formats.dump.metrics import METRICS, STATS
from trendconv.formats.dump.shard import SCHEMA
from trendconv.formats.dump.tags import tags_of
from trendconv.loading import connection, schema
from trendconv.loading.build import abandon, complete_build, open_build, prepare_build, publish, writes_db
from trendconv.loading.stat1 import Stat1Counts
from trendconv.loading.table import TablePages
from trendconv.loading.tags import write_tags
from trendconv.loading.writer import Writer
from trendconv.options import first_agreeing
from trendconv.summaries import LoadSummary

# A shard of more rows than this is read by Arrow's threads; a smaller one faster without them.
_THREADED_ROWS = 65536
# Shards of at most _SMALL_SHARD rows are prepared together, up to _BATCH_ROWS rows or _BATCH_SHARDS shards at a
# time: each Arrow call costs some microseconds whatever its size, which made a tiny shard's preparation most of
# its load time (benchmarks/RESULTS-scale.md). Few shards wait: the rows Parquet reads hold on to some 30 kB of
# the reader's memory each. Below msprobe's batch of rows, a file has no flush inside it (ids.flush_starts).
_SMALL_SHARD = 1024
_BATCH_ROWS = 8192
_BATCH_SHARDS = 64


class _Pending(list):
    """Small shards waiting to be inserted together: (rows, metric ids, global steps) each, and their rows."""

    rows = 0

    def append(self, prepared: tuple) -> None:
        super().append(prepared)
        self.rows += prepared[0].num_rows


class DumpBuilder:
    """Feed shards in (step, rank) order with `add`, then `seal` to complete the database and `publish` to move
    it into place (or `abort`)."""

    # Small shards waiting to be prepared together; None (a subclass that needs each shard's rows as it is
    # added, as the appender of trendconv.formats.dump.append does) prepares each alone.
    _pending: _Pending | None = None

    @writes_db
    def __init__(self, out_dir: Path, *, index: bool = True, name: str | None = None, carry: dict | None = None):
        self.out_dir = out_dir
        self.index = index
        self.final = out_dir / (name or DB_NAME)
        # One database of a split: each step's first global step, from every shard of the run (`first_global_steps`).
        self._carry = carry
        self._start: int | None = None  # the first global step of this database's first step
        self.summary = LoadSummary()
        self._ids = TargetIds()
        self._stat1 = Stat1Counts()
        self._metric_ids = schema.metric_ids(METRICS)
        self._first: dict | None = None
        self._step: int | None = None
        # The micro-step count of a step is the largest of its file sets'; it may be negative, as msprobe takes a
        # negative parent in construct.json for a micro step like any other. None until the step's first shard.
        self._offset, self._step_micro_steps = 0, None
        self._widest: tuple[int, int, str] = (0, 0, "")  # the farthest micro-step count from 0, and its construct.json
        self._steps: list[int] = []
        self._max_rank = 0
        self.seconds = {"finish": 0.0, "index": 0.0}
        self.tmp = prepare_build(out_dir, self.final.name)
        self._conn = _create(self.tmp)
        self._writer = Writer(self._conn, STATS, clean=True, pages=_pages(self._conn, self.tmp))
        self._pending = _Pending()

    @writes_db
    def add(self, shard: shards.Shard) -> None:
        self._check_consistent(shard)
        self._advance_step(shard.meta["step"])
        self._count_micro_steps(shard.meta)
        self._max_rank = max(self._max_rank, shard.meta["rank"])
        table = shards.read_rows(shard.path, SCHEMA, use_threads=shard.meta["rows"] > _THREADED_ROWS)
        self._check_rows(shard, table)
        self._insert_rows(shard, table)
        self.summary.shards += 1
        fault_point("load-shard")

    def _check_consistent(self, shard: shards.Shard) -> None:
        self._first = first_agreeing(self._first, shard.meta, shard.path)

    def _check_rows(self, shard: shards.Shard, table: pa.Table) -> None:
        """The step, rank and micro-step count of the rows are taken from the meta: it must describe them."""
        if table.num_rows == 0:
            return
        meta = shard.meta
        for column in ("step", "rank"):
            low, high = (value.as_py() for value in pc.min_max(table[column]).values())
            if not low == high == meta[column]:
                detail = f"{column} {low}..{high} in the rows, {meta[column]} in the footer"
                raise shards.rows_mismatch(shard.path, detail)
        # A key that construct.json gives no micro step is in micro step 0, whatever the count says.
        highest = pc.max(table["local_micro_step"]).as_py()
        if self.micro_step_mode and highest > max(meta["micro_steps"] - 1, 0):
            counted = plural(meta["micro_steps"], "micro step")
            raise shards.rows_mismatch(shard.path, f"micro step {highest} in the rows, {counted} in the footer")

    @property
    def micro_step_mode(self) -> bool:
        return bool(self._first and self._first["options"]["micro_step"])

    def _advance_step(self, step: int) -> None:
        if step == self._step:
            return
        if self._step is not None and step < self._step:
            raise DataError(f"shards out of order: step {step} after step {self._step}")
        self._offset += self._step_micro_steps or 0
        if self._carry is not None:
            self._offset = self._carry[step]
        if self._start is None:
            self._start = self._offset
        self._step, self._step_micro_steps = step, None
        self._steps.append(step)

    def _count_micro_steps(self, meta: dict) -> None:
        count = meta["micro_steps"]
        self._step_micro_steps = count if self._step_micro_steps is None else max(self._step_micro_steps, count)
        self._widest = max(self._widest, (abs(count), count, _construct_json(meta)))

    def _insert_rows(self, shard: shards.Shard, table: pa.Table) -> None:
        """A small shard waits to be prepared with the next ones (`_Pending`); a larger one goes alone."""
        if table.num_rows == 0:
            return
        prepared = (table, _metric_id_column(table, self._metric_ids, shard.path), self._global_steps(shard, table))
        if self._pending is None or table.num_rows > _SMALL_SHARD:
            self._insert_pending()
            self._insert_one(*prepared)
            return
        self._pending.append(prepared)
        if self._pending.rows >= _BATCH_ROWS or len(self._pending) >= _BATCH_SHARDS:
            self._insert_pending()

    def _insert_one(self, table: pa.Table, metric_ids: pa.Array, steps: pa.Array) -> None:
        """One shard's rows, their target ids numbered as msprobe does (trendconv.formats.dump.ids)."""
        names = table["target_name"].combine_chunks()
        flushes = flush_starts(table["key"])
        target_ids = self._ids.target_ids(names, table["micro_step"].combine_chunks(), metric_ids, flushes)
        rows = _trend_rows(table, steps, target_ids, metric_ids)
        rows = rows.sort_by([("step", "ascending"), ("target_id", "ascending"), ("metric_id", "ascending")])
        self._stat1.add(rows)
        self._writer.put(rows)

    def _insert_pending(self, batch: list | None = None) -> None:
        """The waiting shards' rows at once, in shard order and each shard's rows as `_insert_one` orders them,
        when none of them brings a new target or a new use of one, as then every id is one already given and
        no shard's numbering depends on another's. Otherwise the first half goes first (each alone at last),
        then the rest."""
        if batch is None:
            if not self._pending:
                return
            batch, self._pending = self._pending, _Pending()
        if len(batch) <= 1:
            for prepared in batch:
                self._insert_one(*prepared)
            return
        joined = pa.concat_tables([table for table, _, _ in batch]).unify_dictionaries().combine_chunks()
        metric_ids = pa.concat_arrays([ids for _, ids, _ in batch])
        target_ids = self._ids.known_ids(joined["target_name"].chunk(0), joined["micro_step"].chunk(0), metric_ids)
        if target_ids is None:
            half = len(batch) // 2
            self._insert_pending(batch[:half])
            self._insert_pending(batch[half:])
            return
        steps = pa.concat_arrays([_array(steps) for _, _, steps in batch])
        rows = _trend_rows(joined, steps, target_ids, metric_ids).append_column("shard", _shard_numbers(batch))
        keys = ("shard", "step", "target_id", "metric_id")
        rows = rows.sort_by([(key, "ascending") for key in keys])
        self._stat1.add(rows)
        self._writer.put(rows.drop_columns(["shard"]))

    def _global_steps(self, shard: shards.Shard, table: pa.Table) -> pa.Array:
        if not self.micro_step_mode:
            return table["step"]
        local = table["local_micro_step"].combine_chunks()
        low, high = (scalar.as_py() for scalar in pc.min_max(local).values())
        for micro_step in (low, high):
            if not int64.fits(self._offset + micro_step):
                raise DataError(
                    f"{_construct_json(shard.meta)}, step {shard.meta['step']}, rank {shard.meta['rank']}: micro step "
                    f"{micro_step} "
                    f"lands on global step {self._offset + micro_step}, which does not fit a 64-bit integer "
                    f"(`micro_step=False` keeps the original step numbers)"
                )
        return _shifted(local, self._offset)

    @writes_db
    def seal(self) -> None:
        """Write targets, global_stats and tags and build the indexes: the database is complete at `tmp`."""
        if self._first is None:
            raise DataError("no shards to load")
        started = time.perf_counter()
        self._insert_pending()
        self._writer.finish(self.summary)
        self._offset += self._step_micro_steps or 0
        self._check_last_step()
        self._write_targets()
        self._conn.execute(schema.dump_global_stats_ddl(METRICS))
        stats = self._global_stats()
        self._conn.execute(schema.insert_global_stats(len(stats)), stats)
        self._write_tags()
        stat1 = self._stat1.stat1_rows(self.summary.rows, self._ids.metric_targets) if self.summary.rows else None
        pages = self._writer.pages
        complete_build(self._conn, self.tmp, self.seconds, started, index=self.index, trend_stat1=stat1, pages=pages)

    @writes_db
    def publish(self) -> LoadSummary:
        return publish(self.tmp, self.final, self.summary, self.seconds)

    def _write_targets(self) -> None:
        """In id order; then the sequence as msprobe leaves it, past the last id when its last inserts were
        ignored."""
        targets = sorted((tid, name, 0, index) for (name, index), tid in self._ids.targets.items())
        self._conn.executemany(schema.INSERT_TARGET, targets)
        self._conn.execute(schema.SET_TARGET_SEQUENCE, (self._ids.sequence,))
        self.summary.targets = len(targets)

    def _check_last_step(self) -> None:
        if self.micro_step_mode and not int64.fits(self._offset - 1):
            _, count, construct = self._widest
            raise DataError(
                f"{construct}: {count} micro steps; with those of the other file sets the last global step, "
                f"{self._offset - 1}, does not fit a 64-bit integer (`micro_step=False` keeps the original step "
                "numbers)"
            )

    def _global_stats(self) -> tuple:
        if self.micro_step_mode:
            steps = (self._start, self._offset - 1)
        else:
            steps = (min(self._steps), max(self._steps))
        return (self._max_rank, *steps, *([",".join(STATS)] * len(METRICS)))

    def _write_tags(self) -> None:
        names = {tid: name for (name, _), tid in self._ids.targets.items()}
        write_tags(self._conn, self._ids.by_metric, names, tags_of, self.summary)

    def abort(self) -> None:
        self._writer.drop()
        if self._writer.pages is not None:
            self._writer.pages.close()
        abandon(self._conn, self.tmp)


def first_global_steps(metas: list[dict]) -> dict[int, int] | None:
    """Each step's first global step in micro-step mode, as `add` counts them: the sum of the micro-step counts
    of the steps before it, a step's count being the largest of its file sets' (None in step mode)."""
    if not metas or not metas[0]["options"]["micro_step"]:
        return None
    counts: dict[int, int] = {}
    for meta in metas:
        step = meta["step"]
        counts[step] = max(counts.get(step, meta["micro_steps"]), meta["micro_steps"])
    firsts, offset = {}, 0
    for step in sorted(counts):
        firsts[step] = offset
        offset += counts[step]
    return firsts


def _construct_json(meta: dict) -> str:
    """The construct.json a dump shard's micro steps came from, as its footer names it (relative to DATA)."""
    return meta["sources"][-1]["path"]


def _shifted(values: pa.Array, offset: int) -> pa.Array:
    """VALUES + OFFSET, where every sum fits int64 but OFFSET itself may not (negative micro-step counts bring
    the running offset back): added in parts that do, each partial sum lying between a value and its sum."""
    while offset:
        part = min(max(offset, int64.MIN), int64.MAX)
        values = pc.add(values, pa.scalar(part, pa.int64()))
        offset -= part
    return values


def _trend_rows(table: pa.Table, steps, target_ids: pa.Array, metric_ids: pa.Array) -> pa.Table:
    """trend_data's columns for TABLE's rows (their stats still raw: the writer cleans them)."""
    return pa.table(
        {
            "rank": table["rank"],
            "step": steps,
            "target_id": target_ids,
            "metric_id": metric_ids,
            **{stat: table[stat] for stat in STATS},
        }
    )


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _shard_numbers(batch: list) -> pa.Array:
    """Each row's shard in BATCH (0, 1, ...): the first key of the batch's order."""
    return pa.array([number for number, (table, _, _) in enumerate(batch) for _ in range(table.num_rows)], pa.int32())


def _metric_id_column(table: pa.Table, ids: dict[str, int], path: Path) -> pa.Array:
    metrics = table["metric"].combine_chunks()
    dictionary = metrics.dictionary.to_pylist()
    unknown = [name for name in dictionary if name not in ids]
    if unknown:
        raise DataError(f"{path}: unknown metric {unknown[0]!r}")
    lookup = pa.array([ids[name] for name in dictionary], pa.int64())
    return lookup.take(metrics.indices)


def _pages(conn: connection.Connection, path: Path) -> TablePages | None:
    """trend_data's rows written as pages (trendconv.loading.table): they come in key order for each rank. The
    stat columns, after the key, get the value rules as they are written."""
    try:
        return TablePages.open(conn, path, range(len(schema.TREND_KEY), len(schema.TREND_KEY) + len(STATS)))
    except BaseException:
        abandon(conn, path)
        raise


def _create(path: Path) -> connection.Connection:
    conn = open_build(path)
    try:
        for statement in (*schema.DIMENSION_TABLES, schema.trend_data_ddl(STATS)):
            conn.execute(statement)
        conn.executemany(schema.INSERT_METRIC, ((metric,) for metric in METRICS))
    except BaseException:
        abandon(conn, path)
        raise
    return conn
