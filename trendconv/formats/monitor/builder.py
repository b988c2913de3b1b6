"""monitor_data.trend.db from monitor shards: one shard per CSV file, in processing order.

The builder first reads every shard's meta (`plan`, trendconv.formats.monitor.plan), then the rows (`add`), in
batches of about BATCH_ROWS. Ids are dense and given in first-seen order; the first row of a duplicate key wins.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import shards
from trendconv.errors import DataError
from trendconv.faults import fault_point
from trendconv.formats.monitor.format import DB_NAME
from trendconv.formats.monitor.parse import MonitorRows
from trendconv.formats.monitor.plan import MonitorPlan, plan_monitor
from trendconv.formats.monitor.shard import schema as schema_of
from trendconv.formats.monitor.tags import tags_of
from trendconv.loading import ids, schema
from trendconv.loading.build import abandon, complete_build, open_build, prepare_build, publish, writes_db
from trendconv.loading.tags import write_tags
from trendconv.loading.writer import Writer
from trendconv.summaries import LoadSummary

_KEY_SEPARATOR = "\x1f"

BATCH_ROWS = 65536


class MonitorBuilder:
    """`plan` with every shard's meta, `add` the shards in processing order, then `seal` and `publish` (or
    `abort`)."""

    _run: list | None = None  # [chunk, first row, end]: the rows of consecutive units of one chunk, not yet sliced
    _writer: Writer | None = None  # inserts the rows on a thread of its own, from the plan on
    # the chunk file whose units are being taken, the file their errors name, and those units' metas, not yet checked
    _visit: tuple[str, Path, list[dict]] | None = None

    @writes_db
    def __init__(self, out_dir: Path, *, index: bool = True, name: str | None = None, carry: list | None = None):
        self.index = index
        self.final = out_dir / (name or DB_NAME)
        self.summary = LoadSummary()
        self.seconds = {"finish": 0.0, "index": 0.0}
        self._carry = carry  # one database of a split: `plan.micro_step_counts` of every file of the run
        self.tmp = prepare_build(out_dir, self.final.name)
        self._conn = open_build(self.tmp)
        self._plan: MonitorPlan | None = None
        self._targets: dict[str, int] = {}
        self._first_uses = ids.FirstUses()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    # The reading state, made on first use (the follower's appender shares `_read` but has its own __init__).
    @functools.cached_property
    def _unit_rows(self) -> shards.UnitRows:
        return shards.UnitRows()

    @writes_db
    def plan(self, metas: Iterable[dict]) -> MonitorPlan:
        plan = self._plan = plan_monitor(metas, self._carry)
        self.summary.warnings.extend(plan.warnings)
        self._metric_ids = schema.metric_ids(plan.metrics)
        self._step_keys = pa.array(sorted(plan.offsets), pa.int64())
        self._step_offsets = pa.array([plan.offsets[step] for step in sorted(plan.offsets)], pa.int64())
        for statement in schema.DIMENSION_TABLES:
            self._conn.execute(statement)
        self._conn.executemany(schema.INSERT_METRIC, ((metric,) for metric in plan.metrics))
        self._write_global_stats(plan)
        self._conn.execute(schema.trend_data_ddl(plan.columns))
        self._writer = Writer(self._conn, plan.columns, clean=True)
        return plan

    def _write_global_stats(self, plan: MonitorPlan) -> None:
        self._conn.execute(schema.monitor_global_stats_ddl(plan.metrics))
        texts = [",".join(plan.stats[metric]) for metric in plan.metrics]
        values = (plan.min_step, plan.max_step, plan.max_rank, *texts)
        self._conn.execute(schema.insert_global_stats(len(values)), values)

    def _read(self, shard: shards.Shard) -> pa.Table | None:
        meta = shard.meta
        if not meta["rows"] or meta["metric"] not in self._metric_ids:
            return None
        table = self._unit_rows.read(shard, schema_of(meta["stats"]))
        _check_rows(shard, table)
        return table

    @writes_db
    def add(self, shard: shards.Shard) -> None:
        self.summary.shards += 1
        meta = shard.meta
        if meta.get("chunk") is not None and meta["rows"] and meta["metric"] in self._metric_ids:
            self._extend(shard)
        else:
            self._pend(self._read(shard))
        fault_point("load-shard")

    def _pend(self, table: pa.Table | None) -> None:
        if table is not None:
            self._close_run()  # the rows stay in processing order
            self._pending.append(table)
            self._count(table.num_rows)

    def _extend(self, shard: shards.Shard) -> None:
        """A unit in a chunk file: its rows join the run of rows taken from that chunk, which becomes one slice of
        it (units of a chunk come one after another), checked as `_read` checks them."""
        meta = shard.meta
        chunk = meta["chunk"]
        if self._run is not None and (self._run[0] != chunk or self._run[2] != meta["row_start"]):
            self._close_run()
        self._note(shard)
        start, count = self._unit_rows.span(shard, schema_of(meta["stats"]))
        if self._run is None:
            self._run = [chunk, start, start]
        self._run[2] += count
        self._count(count)

    def _note(self, shard: shards.Shard) -> None:
        """SHARD's unit is checked with the other units this build takes from its chunk file in a row, at once:
        when the units of another chunk come (or at `seal`), while the chunk is still read. Only the metas of one
        chunk's units wait (a load of 100,000 files that noted every unit's before the first row grew with them)."""
        chunk = shard.meta["chunk"]
        if self._visit is not None and self._visit[0] != chunk:
            self._check_visit()
        if self._visit is None:
            self._visit = (chunk, shard.file, [])
        self._visit[2].append(shard.meta)

    def _check_visit(self) -> None:
        if self._visit is not None:
            chunk, path, metas = self._visit
            self._visit = None
            _check_chunk(path, self._unit_rows.whole(chunk), metas)

    def _close_run(self) -> None:
        if self._run is not None:
            chunk, start, end = self._run
            self._run = None
            self._pending.append(self._unit_rows.whole(chunk).slice(start, end - start))

    def _count(self, rows: int) -> None:
        self._pending_rows += rows
        if self._pending_rows >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """Insert the pending shards as one batch: Arrow work per batch, not per (often small) CSV file."""
        self._close_run()
        if not self._pending:
            return
        # Shards differ in their stat columns: the missing ones come out null.
        table = pa.concat_tables(self._pending, promote_options="default")
        self._pending, self._pending_rows = [], 0
        nulls = pa.nulls(table.num_rows, pa.float64())
        metric_ids = self._metric_id_column(table)
        columns = {
            "rank": table["rank"],
            "step": self._steps(table),
            "target_id": self._target_ids(table, metric_ids),
            "metric_id": metric_ids,
            **{stat: table[stat] if stat in table.column_names else nulls for stat in self._plan.columns},
        }
        # Stable: of rows with the same key, the first in processing order is inserted first and wins.
        rows = pa.table(columns).sort_by([("rank", "ascending"), ("step", "ascending"), ("target_id", "ascending")])
        self._writer.put(rows)  # inserted (the values cleaned) while the next batch is made

    def _metric_id_column(self, table: pa.Table) -> pa.Array:
        names = pc.cast(table["metric"], pa.string())
        return pc.add(pc.index_in(names, pa.array(self._plan.metrics)).cast(pa.int64()), 1).combine_chunks()

    def _steps(self, table: pa.Table) -> pa.Array:
        """docs/monitor-format.md §7: the original step, or in micro-step mode its first slot plus the micro step."""
        steps = table["step"].combine_chunks()
        if not self._plan.micro_step:
            return steps
        offsets = self._step_offsets.take(pc.index_in(steps, self._step_keys))
        return pc.add(offsets, table["micro_step"].combine_chunks())

    def _target_ids(self, table: pa.Table, metric_ids: pa.Array) -> pa.Array:
        """Dense ids in first-seen order of (name, vpp_stage, micro_step); micro_step 0 in micro-step mode."""
        micro = table["micro_step"]
        if self._plan.micro_step:
            micro = pa.repeat(pa.scalar(0, pa.int64()), table.num_rows)
        keys = pc.binary_join_element_wise(
            pc.cast(table["target_name"], pa.string()),
            pc.cast(table["vpp_stage"], pa.string()),
            pc.cast(micro, pa.string()),
            _KEY_SEPARATOR,
        )
        encoded = keys.combine_chunks().dictionary_encode()
        key_ids = pa.array([self._target_id(key) for key in encoded.dictionary.to_pylist()], pa.int64())
        row_ids = key_ids.take(encoded.indices)
        self._first_uses.add(pc.unique(ids.uses(metric_ids, row_ids)).to_pylist())
        return row_ids

    def _target_id(self, key: str) -> int:
        target_id = self._targets.get(key)
        if target_id is None:
            target_id = self._targets[key] = len(self._targets) + 1
        return target_id

    @writes_db
    def seal(self) -> None:
        """Write targets and tags and build the indexes: the database is complete at `tmp`."""
        if self._plan is None:
            raise DataError("no monitor shards to load")
        started = time.perf_counter()
        self._check_visit()
        self._flush()
        self._writer.finish(self.summary)
        targets = [(tid, *_split_key(key)) for key, tid in self._targets.items()]
        self._conn.executemany(schema.INSERT_TARGET, targets)
        self.summary.targets = len(targets)
        self._write_tags({tid: name for tid, name, _, _ in targets})
        complete_build(self._conn, self.tmp, self.seconds, started, index=self.index)

    @writes_db
    def publish(self) -> LoadSummary:
        return publish(self.tmp, self.final, self.summary, self.seconds)

    def _write_tags(self, names: dict[int, str]) -> None:
        """docs/monitor-format.md §9: tags per metric, in the order the metric's targets were first used."""
        uses = self._first_uses.by_metric
        by_metric = {metric_id: uses[metric_id] for metric_id in sorted(uses)}
        write_tags(self._conn, by_metric, names, tags_of, self.summary)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.drop()
        abandon(self._conn, self.tmp)


def _check_rows(shard: shards.Shard, table: pa.Table) -> None:
    """The rank, the metric and the step slots come from the meta: it must describe the rows, and its micro-step
    counts must be what the parse makes of them."""
    meta = shard.meta
    low, high = (value.as_py() for value in pc.min_max(table["rank"]).values())
    if not low == high == meta["rank"]:
        raise shards.rows_mismatch(shard.file, f"rank {low}..{high} in the rows, {meta['rank']} in the footer")
    metrics = pc.unique(table["metric"].combine_chunks().dictionary_decode()).to_pylist()
    if metrics != [meta["metric"]]:
        raise shards.rows_mismatch(shard.file, f"metrics {metrics} in the rows, {meta['metric']!r} in the footer")
    keys = {name: table[name] for name in ("target_name", "step", "micro_step")}
    counts = MonitorRows(keys, meta["stats"], meta["has_micro_step"]).micro_steps_per_step()
    if counts != meta["micro_steps_per_step"]:
        raise shards.rows_mismatch(shard.file, "their micro-step counts per step are not the footer's")


def _check_chunk(path: Path, table: pa.Table, metas: list[dict]) -> None:
    """`_check_rows` of every unit of METAS (with rows, in the chunk file PATH whose rows are TABLE) at once: one
    grouping of the chunk's rows by (unit, step), where checking unit by unit cost more than the parse."""
    metas = sorted(metas, key=lambda meta: meta["row_start"])
    found = _per_unit(table, metas)
    for index, meta in enumerate(metas):
        ranks, metrics, counts = found.get(index, (set(), set(), []))
        if ranks != {meta["rank"]}:
            detail = f"rank {min(ranks)}..{max(ranks)} in the rows, {meta['rank']} in the footer"
            raise shards.rows_mismatch(path, detail)
        if metrics != {meta["metric"]}:
            raise shards.rows_mismatch(path, f"metrics {sorted(metrics)} in the rows, {meta['metric']!r} in the footer")
        if not meta["has_micro_step"]:
            counts = [[step, 1] for step, _ in counts]
        if counts != meta["micro_steps_per_step"]:
            raise shards.rows_mismatch(path, "their micro-step counts per step are not the footer's")


def _per_unit(table: pa.Table, metas: list[dict]) -> dict[int, tuple[set, set, list]]:
    """Per unit (its index in METAS): its ranks, its metrics and [step, largest micro_step + 1] in step order."""
    ends, values, end = [], [], 0
    for index, meta in enumerate(metas):
        if meta["row_start"] > end:  # rows of units this build does not take
            ends.append(meta["row_start"])
            values.append(-1)
        end = meta["row_start"] + meta["rows"]
        ends.append(end)
        values.append(index)
    if end < table.num_rows:
        ends.append(table.num_rows)
        values.append(-1)
    units = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(pa.array(ends, pa.int64()), pa.array(values)))
    rows = pa.table(
        {
            "unit": units,
            "step": table["step"],
            "micro_step": table["micro_step"],
            "rank": table["rank"],
            "metric": pc.cast(table["metric"], pa.string()),
        }
    )
    groups = rows.group_by(["unit", "step", "rank", "metric"]).aggregate([("micro_step", "max")])
    groups = groups.sort_by([("unit", "ascending"), ("step", "ascending")])
    found: dict[int, tuple[set, set, list]] = {}
    columns = [groups[name].to_pylist() for name in ("unit", "step", "rank", "metric", "micro_step_max")]
    for unit, step, rank, metric, largest in zip(*columns):
        ranks, metrics, counts = found.setdefault(unit, (set(), set(), []))
        ranks.add(rank)
        metrics.add(metric)
        # The + 1 in Python: in int64 a micro_step of 2**63 - 1 would wrap around (as in parse.slots).
        count = max(largest + 1, 0)
        if counts and counts[-1][0] == step:
            counts[-1][1] = max(counts[-1][1], count)
        else:
            counts.append([step, count])
    return found


def _split_key(key: str) -> tuple[str, int, int]:
    name, vpp_stage, micro_step = key.rsplit(_KEY_SEPARATOR, 2)
    return name, int(vpp_stage), int(micro_step)
