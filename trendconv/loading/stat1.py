"""sqlite_stat1 rows for trend_data counted while loading, so that ANALYZE need not scan millions of rows."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from trendconv.loading import schema

# Up to this many rows, a batch's (metric, step) pairs are gathered in Python: a group_by costs a fifth of a
# millisecond whatever the size, as much as a tiny shard's whole insert (benchmarks/RESULTS-scale.md).
_SMALL = 1024


class Stat1Counts:
    """How many distinct values each prefix of trend_data's keys takes, counted as batches of rows go in, so that
    its sqlite_stat1 rows are written without ANALYZE scanning two million rows (a second of the serial tail).

    The caller promises that no two shards share a (rank, step) (a dump shard holds one rank, and its global steps
    are its own), and gives a batch's rows sorted by shard, then step, then target; a batch of several shards
    numbers them in a `shard` column. So the primary key's prefixes are counted per shard and summed; only
    (metric, step) and (metric, target) need sets across batches.
    """

    def __init__(self) -> None:
        self.ranks: set[int] = set()
        self.rank_steps = 0
        self.rank_step_targets = 0
        self.metric_steps: set[tuple[int, int]] = set()

    def add(self, rows: pa.Table) -> None:
        """ROWS: one batch's trend rows, sorted by shard (if it has a `shard` column), step, then target."""
        steps, targets = rows["step"].combine_chunks(), rows["target_id"].combine_chunks()
        new_step = pc.not_equal(steps[1:], steps[:-1])
        if "shard" in rows.column_names:
            shard = rows["shard"].combine_chunks()
            new_step = pc.or_(new_step, pc.not_equal(shard[1:], shard[:-1]))
        self.ranks.update(pc.unique(rows["rank"]).to_pylist())
        self.rank_steps += 1 + _count_true(new_step)
        self.rank_step_targets += 1 + _count_true(pc.or_(new_step, pc.not_equal(targets[1:], targets[:-1])))
        if rows.num_rows > _SMALL:
            rows = rows.group_by(["metric_id", "step"]).aggregate([])
        self.metric_steps.update(zip(rows["metric_id"].to_pylist(), rows["step"].to_pylist()))

    def stat1_rows(self, rows: int, metric_targets: int) -> list[tuple[str, str, str]]:
        """What ANALYZE writes to sqlite_stat1 for trend_data's primary key and its two read indexes."""
        metrics = len({metric for metric, _ in self.metric_steps})
        primary = [len(self.ranks), self.rank_steps, self.rank_step_targets, rows]
        return _trend_rows(rows, primary, [[metrics, len(self.metric_steps)], [metrics, metric_targets]])


def counted_rows(counts: list) -> list[tuple[str, str, str]] | None:
    """trend_data's sqlite_stat1 rows from the prefix counts the index pages' writer took of the sorted keys
    (trendconv.loading.btree, "Counting": each index's, then the table's own); None without the table's counts or
    without rows, where ANALYZE has to count."""
    *per_index, table = counts
    if not table or not table[-1]:
        return None
    # the primary key's last prefix is the whole key: every row is distinct; an index's stat names its own columns
    indexed = [distinct[: len(columns)] for columns, distinct in zip(schema.TREND_INDEXES.values(), per_index)]
    return _trend_rows(table[-1], table, indexed)


def _trend_rows(rows: int, primary: list[int], indexed: list[list[int]]) -> list[tuple[str, str, str]]:
    """trend_data's sqlite_stat1 rows of ROWS rows: the distinct values of each prefix of its PRIMARY key, then of
    each read index's columns (in schema.TREND_INDEXES's order)."""
    stats = [("trend_data", "trend_data", _stat1(rows, primary))]
    return stats + [("trend_data", name, _stat1(rows, counts)) for name, counts in zip(schema.TREND_INDEXES, indexed)]


def _count_true(mask: pa.Array) -> int:
    return pc.sum(mask).as_py() or 0


def _stat1(rows: int, distinct: list[int]) -> str:
    """sqlite_stat1's text: the row count, then the average rows per distinct value of each key prefix, as
    ANALYZE rounds it (up, and to 1 when the prefix is within 10% of unique)."""
    return " ".join(map(str, [rows, *(_average_rows(rows, count) for count in distinct)]))


def _average_rows(rows: int, distinct: int) -> int:
    average = (rows + distinct - 1) // distinct
    return 1 if average == 2 and rows * 10 <= distinct * 11 else average
