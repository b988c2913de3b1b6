"""Appending dump shards to dump_data.trend.db in place (`trendconv run --follow`, docs/live.md).

The appender is the batch builder (trendconv.formats.dump.builder) with another end: the same steps, micro-step
offsets, target ids (msprobe's numbering, trendconv.formats.dump.ids) and tag blocks, but each batch goes into the
database in place in one transaction instead of into a new file. Shards must come in (step, rank) order, as in a
batch build: a micro-step slot depends on every step before it, and a target id on every shard before it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from trendconv import shards
from trendconv.following import live
from trendconv.formats.contract import Refused
from trendconv.formats.dump.builder import DumpBuilder, first_global_steps
from trendconv.formats.dump.ids import TargetIds
from trendconv.formats.dump.metrics import METRICS, STATS
from trendconv.formats.dump.tags import tags_of
from trendconv.loading import schema
from trendconv.loading.build import writes_db
from trendconv.loading.insert import insert_trend
from trendconv.loading.stat1 import Stat1Counts
from trendconv.summaries import LoadSummary

_STAT_COLUMNS = ("max_rank", "min_step", "max_step", *METRICS)


class _Rows:
    """Stands in for the builder's writer thread: the rows of the shards being added, kept for the batch."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.offered = self.inserted = 0

    def put(self, rows: pa.Table) -> None:
        self.tables.append(rows)

    def close(self) -> None:
        pass


class DumpAppender(DumpBuilder):
    """`replay` the shards the database holds, then `append` batches in (step, rank) order."""

    def __init__(self, final: Path):  # the builder's state, without a file of its own
        self.final = final
        self.index = True
        self.summary = LoadSummary()
        self._ids = TargetIds()
        self._stat1 = Stat1Counts()
        self._metric_ids = schema.metric_ids(METRICS)
        self._first: dict | None = None
        self._step: int | None = None
        self._offset, self._step_micro_steps = 0, None
        self._widest: tuple[int, int, str] = (0, 0, "")
        self._steps: list[int] = []
        self._max_rank = 0
        self._carry, self._start = None, None  # one database of the whole run, from step 0
        self.seconds = {"finish": 0.0, "index": 0.0}
        self._writer = _Rows()
        self._last: tuple | None = None
        self._conn = None
        self._firsts: dict[int, int] = {}  # each step's first global step, as its rows have it
        self._metas: list[dict] = []

    def replay(self, shard_list: list[shards.Shard], carry=None) -> None:
        self._carry = _mapping(carry)
        for shard in shard_list:
            self._take(shard)
        self._writer.tables.clear()

    def moved(self, carry) -> str | None:
        """Why CARRY (of the run as it is now; None: this database is the whole run) would give rows already in
        other global steps, or None."""
        expected = _mapping(carry) if carry is not None else first_global_steps(self._metas)
        if expected is None:  # step mode: the global step is the step
            return None
        for step, first in self._firsts.items():
            if expected.get(step) != first:
                return f"the micro-step slots of step {step} moved (a step before it came late or grew)"
        return None

    @writes_db
    def append(self, shard_list: list[shards.Shard], mark: int, carry=None) -> int:
        self._check_order(shard_list)
        reason = self.moved(carry)
        if reason is not None:
            raise Refused(reason)
        self._carry = _mapping(carry)
        for shard in shard_list:
            self._take(shard)
        if self._conn is None:
            self._conn = live.open_live(self.final)
        rows = sum(insert_trend(self._conn, table, STATS, clean=True) for table in self._writer.tables)
        self._writer.tables.clear()
        self._write_dimensions()
        live.commit(self._conn, mark)
        return rows

    def _check_order(self, shard_list: list[shards.Shard]) -> None:
        """A shard before the last one taken would change the slots or ids of rows already in."""
        last = self._last
        for shard in shard_list:
            order = (shard.meta["step"], shard.meta["rank"])
            if last is not None and order <= last:
                raise Refused(f"step {order[0]}, rank {order[1]} came after step {last[0]}, rank {last[1]}")
            if self._first is not None and shard.meta["options"] != self._first["options"]:
                raise Refused(f"{shard.path} was parsed with other options")
            last = order

    def _take(self, shard: shards.Shard) -> None:
        self.add(shard)
        self._metas.append(shard.meta)
        self._last = (shard.meta["step"], shard.meta["rank"])

    def _advance_step(self, step: int) -> None:
        super()._advance_step(step)
        self._firsts.setdefault(step, self._offset)

    def _write_dimensions(self) -> None:
        """New targets, the sequence, the global_stats row and the tags, as `seal` writes them."""
        targets = [(tid, name, 0, index) for (name, index), tid in self._ids.targets.items()]
        live.insert_targets(self._conn, targets)
        self._conn.execute(schema.SET_TARGET_SEQUENCE, (self._ids.sequence,))
        offset = self._offset
        self._offset += self._step_micro_steps or 0  # as `seal` counts the last step
        try:
            self._check_last_step()
            stats = self._global_stats()
        finally:
            self._offset = offset
        self._conn.execute(schema.update_global_stats(_STAT_COLUMNS), stats)
        names = {tid: name for (name, _), tid in self._ids.targets.items()}
        live.rewrite_tags(self._conn, self._ids.by_metric, names, tags_of)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # a transaction still open is rolled back
            self._conn = None

    def abort(self) -> None:
        self.close()


def _mapping(carry) -> dict[int, int] | None:
    """A carry as `Format.carry` gives it, or as a follower's record keeps it (its pairs)."""
    return None if carry is None else {int(step): first for step, first in dict(carry).items()}
