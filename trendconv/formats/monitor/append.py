"""Appending monitor shards to monitor_data.trend.db in place (`trendconv run --follow`, docs/live.md).

The appender is the batch builder (trendconv.formats.monitor.builder) with another end: the same plan, step slots,
dense target ids in first-seen order and tag blocks, but each batch goes into the database in place in one
transaction. A batch is refused (and the follower rebuilds the database) when it would change what rows already in
depend on: the metrics or stat columns (the tables' columns), the first slot of a step already in (micro-step
mode), or the row kept for a key already in (the first in processing order wins, docs/monitor-format.md §7).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from trendconv import shards
from trendconv.following import live
from trendconv.formats.contract import Refused
from trendconv.formats.monitor.builder import MonitorBuilder
from trendconv.formats.monitor.plan import MonitorPlan, plan_monitor
from trendconv.formats.monitor.tags import tags_of
from trendconv.loading import ids, schema
from trendconv.loading.build import writes_db
from trendconv.loading.insert import insert_trend
from trendconv.summaries import LoadSummary

_KEY = ["rank", "step", "target_id", "metric_id"]


class MonitorAppender(MonitorBuilder):
    """`replay` the shards the database holds, then `append` batches; a refused batch leaves this appender
    unusable (its state has taken the batch)."""

    def __init__(self, final: Path):  # the builder's state, without a file of its own
        self.index = True
        self.final = final
        self.summary = LoadSummary()
        self.seconds = {"finish": 0.0, "index": 0.0}
        self._conn = None
        self._carry = None  # one database of the whole run
        self._plan: MonitorPlan | None = None
        self._targets: dict[str, int] = {}
        self._first_uses = ids.FirstUses()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._metas: list[dict] = []

    def replay(self, shard_list: list[shards.Shard]) -> None:
        self._use_plan(plan_monitor(self._metas + [shard.meta for shard in shard_list]))
        self._take(shard_list)
        self._rows()

    @writes_db
    def append(self, shard_list: list[shards.Shard], mark: int) -> int:
        plan = plan_monitor(self._metas + [shard.meta for shard in shard_list])
        self._check_plan(plan)
        self._use_plan(plan)
        self._take(shard_list)
        if self._conn is None:
            self._conn = live.open_live(self.final)
        rows = self._insert(self._rows())
        self._write_dimensions()
        live.commit(self._conn, mark)
        return rows

    def _use_plan(self, plan: MonitorPlan) -> None:
        self._plan = plan
        self._metric_ids = schema.metric_ids(plan.metrics)
        self._step_keys = pa.array(sorted(plan.offsets), pa.int64())
        self._step_offsets = pa.array([plan.offsets[step] for step in sorted(plan.offsets)], pa.int64())

    def _check_plan(self, plan: MonitorPlan) -> None:
        """What the rows and columns already in depend on must stay as it is."""
        old = self._plan
        if old is None:
            return
        if (plan.metrics, plan.stats) != (old.metrics, old.stats):
            raise Refused("the metrics or their stat columns changed")
        moved = [step for step, offset in old.offsets.items() if plan.offsets[step] != offset]
        if moved:
            raise Refused(f"the micro-step slots of step {min(moved)} moved (a step before it came late or grew)")

    def _take(self, shard_list: list[shards.Shard]) -> None:
        for shard in shard_list:
            self._metas.append(shard.meta)
            table = self._read(shard)
            if table is not None:
                self._pending.append(table)

    def _rows(self) -> pa.Table | None:
        """The pending shards' trend rows, as the builder's `_flush` makes them (ids taken in the same order)."""
        if not self._pending:
            return None
        table = pa.concat_tables(self._pending, promote_options="default")
        self._pending = []
        nulls = pa.nulls(table.num_rows, pa.float64())
        metric_ids = self._metric_id_column(table)
        columns = {
            "rank": table["rank"],
            "step": self._steps(table),
            "target_id": self._target_ids(table, metric_ids),
            "metric_id": metric_ids,
            **{stat: _clean(table, stat, nulls) for stat in self._plan.columns},
        }
        return pa.table(columns).sort_by([("rank", "ascending"), ("step", "ascending"), ("target_id", "ascending")])

    def _insert(self, rows: pa.Table | None) -> int:
        """ROWS; a key already in the database (before this batch) is refused: which row a batch build keeps for
        it depends on the order of the files, not of their arrival."""
        if rows is None:
            return 0
        inserted = insert_trend(self._conn, rows, self._plan.columns)
        distinct = rows.group_by(_KEY).aggregate([]).num_rows
        if inserted < distinct:
            self._conn.execute("ROLLBACK")
            raise Refused(f"{distinct - inserted} rows repeat a (rank, step, target, metric) already in")
        return inserted

    def _write_dimensions(self) -> None:
        targets = [(tid, *_split(key)) for key, tid in self._targets.items()]
        live.insert_targets(self._conn, targets)
        plan = self._plan
        texts = [",".join(plan.stats[metric]) for metric in plan.metrics]
        columns = ("min_step", "max_step", "max_rank", *plan.metrics)
        self._conn.execute(schema.update_global_stats(columns), (plan.min_step, plan.max_step, plan.max_rank, *texts))
        uses = self._first_uses.by_metric
        by_metric = {metric_id: uses[metric_id] for metric_id in sorted(uses)}
        live.rewrite_tags(self._conn, by_metric, {tid: name for tid, name, _, _ in targets}, tags_of)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # a transaction still open is rolled back
            self._conn = None

    def abort(self) -> None:
        self.close()


def _clean(table: pa.Table, stat: str, nulls: pa.Array) -> pa.Array:
    from trendconv.loading.insert import clean_values

    return clean_values(table[stat]) if stat in table.column_names else nulls


def _split(key: str) -> tuple[str, int, int]:
    from trendconv.formats.monitor.builder import _split_key

    return _split_key(key)
