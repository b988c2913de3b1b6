"""The load stage for monitor shards: one shard per CSV file, in processing order, into monitor_data.trend.db.

Unlike dump data, a monitor step's slots depend on every file (docs/monitor-format.md §7: the micro-step count of
an original step is the largest over all ranks and metrics), so the builder first reads every shard's footer
(`plan`), then the rows (`add`). Ids are dense and given in first-seen order; the first row of a duplicate key wins.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import int64, shards
from trendconv.dump.parse import options_text
from trendconv.errors import DataError, plural
from trendconv.faults import fault_point
from trendconv.load import (
    LoadSummary,
    abandon,
    clean_values,
    complete_build,
    insert_trend,
    open_build,
    prepare_build,
    publish,
    rows_mismatch,
    schema,
    write_tags,
    writes_db,
)
from trendconv.monitor.parse import MonitorRows
from trendconv.tags import monitor_tags_of

_KEY_SEPARATOR = "\x1f"
BATCH_ROWS = 65536


@dataclass
class MonitorPlan:
    """What the shard footers alone decide: metrics, stat columns, step slots and global_stats."""

    micro_step: bool
    metrics: list[str]  # present metrics, canonical order
    stats: dict[str, list[str]]  # per present metric, canonical order
    offsets: dict[int, int] = field(default_factory=dict)
    min_step: int = 0
    max_step: int = 0
    max_rank: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """trend_data's stat columns: every stat of a present metric, canonical order."""
        used = {stat for stats in self.stats.values() for stat in stats}
        return [stat for stat in schema.MONITOR_STATS if stat in used]


def plan_monitor(metas: list[dict]) -> MonitorPlan:
    if not metas:
        raise DataError("no monitor shards to load")
    _check_same_options(metas)
    micro_step = bool(metas[0]["options"]["micro_step"])
    with_rows = Counter(meta["metric"] for meta in metas if meta["rows"])
    metrics = [metric for metric in schema.MONITOR_METRICS if with_rows[metric]]
    if not metrics:
        raise DataError(f"no data rows in any of the {len(metas)} monitor CSV files")
    stats = {metric: _stats_of(metric, metas) for metric in metrics}
    if not any(stats.values()):
        raise DataError(f"no stat column ({', '.join(schema.MONITOR_STATS[:6])}, ...) in any monitor CSV file")
    plan = MonitorPlan(micro_step, metrics, stats, max_rank=max(meta["rank"] for meta in metas))
    plan.warnings = _rowless_metric_warnings(metas, with_rows)
    _plan_steps(plan, metas)
    return plan


def _check_same_options(metas: list[dict]) -> None:
    """Footers are checked as they are read (trendconv.schemas); here only that they agree with each other."""
    first = metas[0]
    for meta in metas:
        if meta["options"] != first["options"]:
            raise DataError(
                f"{meta['run_dir']}/{meta['file']}: parsed with {options_text(meta['options'])}, the other shards "
                f"with {options_text(first['options'])}; re-run parse"
            )


def _stats_of(metric: str, metas: list[dict]) -> list[str]:
    """The union of the stat columns of the metric's files, header-only files included (docs/monitor-format.md §4.3)."""
    found = {stat for meta in metas if meta["metric"] == metric for stat in meta["stats"]}
    return [stat for stat in schema.MONITOR_STATS if stat in found]


def _rowless_metric_warnings(metas: list[dict], with_rows: Counter) -> list[str]:
    """docs/monitor-format.md Q1: msprobe lists such a metric in global_stats (where the Trend Analyzer cannot find
    it)."""
    files = Counter(meta["metric"] for meta in metas if not with_rows[meta["metric"]])
    return [
        f"{metric}: {plural(count, 'CSV file')} without a valid data row; the metric is left out of the database "
        "(msprobe data2db lists it in global_stats and may write no trend rows at all)"
        for metric, count in sorted(files.items())
    ]


def _plan_steps(plan: MonitorPlan, metas: list[dict]) -> None:
    counts: dict[int, tuple[int, str]] = {}  # per original step: its micro-step count, and a file that has it
    for meta in metas:
        for step, count in meta["micro_steps_per_step"]:
            counts[step] = max(counts.get(step, (0, "")), (count, f"{meta['run_dir']}/{meta['file']}"))
    steps = sorted(counts)
    if plan.micro_step:
        offset, last = 0, None
        for step in steps:
            _check_slot(offset, last)
            plan.offsets[step] = offset
            offset += counts[step][0]
            last = (step, *counts[step])
        _check_slot(offset - 1, last)
        # -1 (as msprobe has it) when every micro_step is negative: no slot at all. There are rows: else no database.
        plan.min_step, plan.max_step = 0, offset - 1
    else:
        plan.min_step, plan.max_step = (steps[0] if steps else 0), max([0, *steps])


def _check_slot(slot: int, last: tuple[int, int, str] | None) -> None:
    """A step's first slot, and the last slot of all, must be 64-bit integers; LAST (step, micro-step count,
    a file with that count) is the step before, whose slots reach SLOT."""
    if last is not None and not int64.fits(slot):
        step, count, file = last
        raise DataError(
            f"{file}: step {step}, micro_step {count - 1}: with the micro-step slots of the steps before, "
            f"the global steps reach {slot}, beyond a 64-bit integer (--no-micro-step keeps the original step numbers)"
        )


class MonitorDbBuilder:
    """`plan` with every shard's footer, `add` the shards in processing order, then `seal` and `publish` (or
    `abort`)."""

    @writes_db
    def __init__(self, out_dir: Path, *, index: bool = True):
        self.index = index
        self.final = out_dir / schema.MONITOR_DB_NAME
        self.summary = LoadSummary()
        self.seconds = {"finish": 0.0, "index": 0.0}
        self.tmp = prepare_build(out_dir, schema.MONITOR_DB_NAME)
        self._conn = open_build(self.tmp)
        self._plan: MonitorPlan | None = None
        self._targets: dict[str, int] = {}
        self._by_metric: dict[int, dict[int, None]] = {}
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    @writes_db
    def plan(self, metas: list[dict]) -> MonitorPlan:
        plan = self._plan = plan_monitor(metas)
        self.summary.warnings.extend(plan.warnings)
        self._metric_ids = schema.metric_ids(plan.metrics)
        self._step_keys = pa.array(sorted(plan.offsets), pa.int64())
        self._step_offsets = pa.array([plan.offsets[step] for step in sorted(plan.offsets)], pa.int64())
        for statement in schema.DIMENSION_TABLES:
            self._conn.execute(statement)
        self._conn.executemany(schema.INSERT_METRIC, ((metric,) for metric in plan.metrics))
        self._write_global_stats(plan)
        self._conn.execute(schema.trend_data_ddl(plan.columns))
        return plan

    def _write_global_stats(self, plan: MonitorPlan) -> None:
        self._conn.execute(schema.monitor_global_stats_ddl(plan.metrics))
        texts = [",".join(plan.stats[metric]) for metric in plan.metrics]
        values = (plan.min_step, plan.max_step, plan.max_rank, *texts)
        self._conn.execute(schema.insert_global_stats(len(values)), values)

    def add_all(self, shard_list: list[shards.Shard], on_shard=None) -> None:
        for shard in shard_list:
            self.add(shard)
            if on_shard:
                on_shard(shard)

    def _read(self, shard: shards.Shard) -> pa.Table | None:
        meta = shard.meta
        if not meta["rows"] or meta["metric"] not in self._metric_ids:
            return None
        table = shards.read_rows(shard.path, shards.monitor_schema(meta["stats"]), use_threads=False)
        _check_rows(shard, table)
        return table

    @writes_db
    def add(self, shard: shards.Shard) -> None:
        self.summary.shards += 1
        table = self._read(shard)
        if table is not None:
            self._pending.append(table)
            self._pending_rows += table.num_rows
            if self._pending_rows >= BATCH_ROWS:
                self._flush()
        fault_point("load-shard")

    def _flush(self) -> None:
        """Insert the pending shards as one batch: Arrow work per batch, not per (often small) CSV file."""
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
            **{stat: clean_values(table[stat]) if stat in table.column_names else nulls for stat in self._plan.columns},
        }
        # Stable: of rows with the same key, the first in processing order is inserted first and wins.
        rows = pa.table(columns).sort_by([("rank", "ascending"), ("step", "ascending"), ("target_id", "ascending")])
        inserted = insert_trend(self._conn, rows, self._plan.columns)
        self.summary.rows += inserted
        self.summary.duplicates += rows.num_rows - inserted

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
        ids = pa.array([self._target_id(key) for key in encoded.dictionary.to_pylist()], pa.int64())
        row_ids = ids.take(encoded.indices)
        for use in pc.unique(pc.add(pc.shift_left(metric_ids, 32), row_ids)).to_pylist():
            self._by_metric.setdefault(use >> 32, {})[use & 0xFFFFFFFF] = None
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
        self._flush()
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
        by_metric = {metric_id: self._by_metric[metric_id] for metric_id in sorted(self._by_metric)}
        write_tags(self._conn, by_metric, names, monitor_tags_of, self.summary)

    def abort(self) -> None:
        abandon(self._conn, self.tmp)


def _check_rows(shard: shards.Shard, table: pa.Table) -> None:
    """The rank, the metric and the step slots come from the footer: it must describe the rows, and its micro-step
    counts must be what the parse makes of them."""
    meta = shard.meta
    low, high = (value.as_py() for value in pc.min_max(table["rank"]).values())
    if not low == high == meta["rank"]:
        raise rows_mismatch(shard.path, f"rank {low}..{high} in the rows, {meta['rank']} in the footer")
    metrics = table["metric"].combine_chunks().dictionary.to_pylist()
    if metrics != [meta["metric"]]:
        raise rows_mismatch(shard.path, f"metrics {metrics} in the rows, {meta['metric']!r} in the footer")
    keys = {name: table[name] for name in ("target_name", "step", "micro_step")}
    counts = MonitorRows(keys, meta["stats"], meta["has_micro_step"]).micro_steps_per_step()
    if counts != meta["micro_steps_per_step"]:
        raise rows_mismatch(shard.path, "their micro-step counts per step are not the footer's")


def _split_key(key: str) -> tuple[str, int, int]:
    name, vpp_stage, micro_step = key.rsplit(_KEY_SEPARATOR, 2)
    return name, int(vpp_stage), int(micro_step)


def stage_monitor_shards(
    shard_list: list[shards.Shard], out_dir: Path, *, index: bool = True, on_shard=None
) -> MonitorDbBuilder:
    """The database of SHARD_LIST, complete at its temporary path: `publish` moves it into place, `abort` drops it."""
    builder = MonitorDbBuilder(out_dir, index=index)
    try:
        builder.plan([shard.meta for shard in shard_list])
        builder.add_all(shard_list, on_shard)
        builder.seal()
    except BaseException:
        builder.abort()
        raise
    return builder
