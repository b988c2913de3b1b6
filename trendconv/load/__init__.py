"""The load stage: shards, in (step, rank) order, into one SQLite trend database, deterministically.

Every id is assigned here: targets densely in first-seen order, tags per metric in the order their
targets were first used. The database is built in a private temporary file in the output directory and
renamed into place when complete, so a failed or killed load leaves the previous database untouched.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import shards
from trendconv.dump.parse import options_text
from trendconv.errors import DataError
from trendconv.faults import fault_point
from trendconv.load import schema
from trendconv.tags import tags_of

PLUGIN_SIZE_LIMIT = 5 * 1024**3
DB_MODE = 0o640


@dataclass
class LoadSummary:
    db: Path | None = None
    shards: int = 0
    rows: int = 0
    duplicates: int = 0
    targets: int = 0
    tags: int = 0
    tag_links: int = 0
    size: int = 0
    warnings: list[str] = field(default_factory=list)


class _Ids:
    """Targets and their per-metric first use, which decide target ids and tag ids.

    Work is per distinct (name, index) pair of a shard, not per row: pairs are packed into one int64
    key, and Arrow's `unique` keeps first-occurrence order, which is the order ids are given in.
    """

    _INDEX_BITS = 31

    def __init__(self) -> None:
        self.targets: dict[tuple[str, int], int] = {}
        self.by_metric: dict[int, dict[int, None]] = {}

    def target_ids(self, names: pa.DictionaryArray, indexes: pa.Array, metric_ids: pa.Array) -> pa.Array:
        keys, decode = self._pack(names, indexes)
        distinct = pc.unique(keys)
        ids = [self._target_id(decode(key)) for key in distinct.to_pylist()]
        row_ids = pa.array(ids, pa.int64()).take(pc.index_in(keys, distinct))
        self._note_metric_use(metric_ids, row_ids)
        return row_ids

    def _pack(self, names: pa.DictionaryArray, indexes: pa.Array):
        dictionary = names.dictionary.to_pylist()
        if len(indexes) and pc.max(indexes).as_py() >= 1 << self._INDEX_BITS:
            pairs = list(zip(pc.take(names.dictionary, names.indices).to_pylist(), indexes.to_pylist()))
            unique_pairs = list(dict.fromkeys(pairs))
            positions = {pair: position for position, pair in enumerate(unique_pairs)}
            keys = pa.array([positions[pair] for pair in pairs], pa.int64())
            return keys, unique_pairs.__getitem__
        keys = pc.add(pc.shift_left(names.indices.cast(pa.int64()), self._INDEX_BITS), indexes)
        mask = (1 << self._INDEX_BITS) - 1
        return keys, lambda key: (dictionary[key >> self._INDEX_BITS], key & mask)

    def _target_id(self, target: tuple[str, int]) -> int:
        target_id = self.targets.get(target)
        if target_id is None:
            target_id = self.targets[target] = len(self.targets) + 1
        return target_id

    def _note_metric_use(self, metric_ids: pa.Array, row_ids: pa.Array) -> None:
        uses = pc.unique(pc.add(pc.shift_left(metric_ids, 32), row_ids))
        for use in uses.to_pylist():
            self.by_metric.setdefault(use >> 32, {})[use & 0xFFFFFFFF] = None


class TrendDbBuilder:
    """Feed shards in (step, rank) order with `add`, then `finish` to get the database in place."""

    def __init__(self, out_dir: Path, *, index: bool = True):
        self.out_dir = out_dir
        self.index = index
        self.final = out_dir / schema.DB_NAME
        self.summary = LoadSummary()
        self._ids = _Ids()
        self._metric_ids = schema.metric_ids()
        self._first: dict | None = None
        self._step: int | None = None
        self._offset, self._step_micro_steps = 0, 0
        self._steps: list[int] = []
        self._max_rank = 0
        self.seconds = {"finish": 0.0, "index": 0.0}
        self.tmp = prepare_build(out_dir, schema.DB_NAME)
        self._conn = _create(self.tmp)

    def add(self, shard: shards.Shard) -> None:
        self._check_consistent(shard)
        self._advance_step(shard.step)
        self._step_micro_steps = max(self._step_micro_steps, shard.meta["micro_steps"])
        self._max_rank = max(self._max_rank, shard.rank)
        table = shards.read_rows(shard.path)
        self._insert_rows(shard, table)
        self.summary.shards += 1
        fault_point("load-shard")

    def _check_consistent(self, shard: shards.Shard) -> None:
        meta = shard.meta
        if meta.get("shard_format") != shards.SHARD_FORMAT:
            raise DataError(
                f"{shard.path}: shard format {meta.get('shard_format')}, this trendconv reads format "
                f"{shards.SHARD_FORMAT}; re-run parse"
            )
        if self._first is None:
            self._first = meta
        elif meta.get("options") != self._first.get("options"):
            raise DataError(
                f"{shard.path}: parsed with {options_text(meta.get('options') or {})}, the other shards with "
                f"{options_text(self._first.get('options') or {})}; re-run parse"
            )

    @property
    def micro_step_mode(self) -> bool:
        return bool(self._first and self._first["options"]["micro_step"])

    def _advance_step(self, step: int) -> None:
        if step == self._step:
            return
        if self._step is not None and step < self._step:
            raise DataError(f"shards out of order: step {step} after step {self._step}")
        self._offset += self._step_micro_steps
        self._step, self._step_micro_steps = step, 0
        self._steps.append(step)

    def _insert_rows(self, shard: shards.Shard, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        metric_ids = _metric_id_column(table, self._metric_ids, shard.path)
        names = table["target_name"].combine_chunks()
        target_ids = self._ids.target_ids(names, table["micro_step"].combine_chunks(), metric_ids)
        steps = self._global_steps(table)
        rows = pa.table(
            {
                "rank": table["rank"],
                "step": steps,
                "target_id": target_ids,
                "metric_id": metric_ids,
                **{stat: clean_values(table[stat]) for stat in schema.STATS},
            }
        ).sort_by([("step", "ascending"), ("target_id", "ascending"), ("metric_id", "ascending")])
        before = self._conn.total_changes
        self._conn.executemany(schema.INSERT_TREND, zip(*(rows[name].to_pylist() for name in rows.column_names)))
        inserted = self._conn.total_changes - before
        self.summary.rows += inserted
        self.summary.duplicates += rows.num_rows - inserted

    def _global_steps(self, table: pa.Table) -> pa.Array:
        if self.micro_step_mode:
            return pc.add(table["local_micro_step"].cast(pa.int64()), self._offset)
        return table["step"]

    def finish(self) -> LoadSummary:
        """Write targets, global_stats and tags, build indexes, then move the file into place."""
        if self._first is None:
            raise DataError("no shards to load")
        started = time.perf_counter()
        self._offset += self._step_micro_steps
        self._write_targets()
        self._conn.execute(schema.CREATE_GLOBAL_STATS)
        self._conn.execute(schema.INSERT_GLOBAL_STATS, self._global_stats())
        self._write_tags()
        self._conn.commit()
        indexed = time.perf_counter()
        if self.index:
            build_indexes(self._conn)
        self._conn.close()
        self.seconds["index"] = time.perf_counter() - indexed
        fault_point("load-before-rename")
        summary = self._publish()
        self.seconds["finish"] = time.perf_counter() - started - self.seconds["index"]
        return summary

    def _write_targets(self) -> None:
        targets = ((tid, name, 0, index) for (name, index), tid in self._ids.targets.items())
        self._conn.executemany(schema.INSERT_TARGET, targets)
        self.summary.targets = len(self._ids.targets)

    def _global_stats(self) -> tuple:
        if self.micro_step_mode:
            steps = (0, self._offset - 1)
        else:
            steps = (min(self._steps), max(self._steps))
        return (self._max_rank, *steps, *([schema.STAT_LIST] * len(schema.METRICS)))

    def _write_tags(self) -> None:
        names = {tid: name for (name, _), tid in self._ids.targets.items()}
        tag_ids: dict[tuple[str, str, int], int] = {}
        links = []
        for metric, targets in self._ids.by_metric.items():
            for target in targets:
                for tag_name, category in tags_of(names[target]):
                    tag = tag_ids.setdefault((tag_name, category, metric), len(tag_ids) + 1)
                    links.append((tag, target))
        self._conn.executemany(schema.INSERT_TAG, ((tid, *tag) for tag, tid in tag_ids.items()))
        links.sort()
        self._conn.executemany(schema.INSERT_TAG_TARGET, links)
        self.summary.tags, self.summary.tag_links = len(tag_ids), len(links)

    def _publish(self) -> LoadSummary:
        return publish(self.tmp, self.final, self.summary)

    def abort(self) -> None:
        try:
            self._conn.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def load_shards(
    shard_list: Iterable[shards.Shard],
    out_dir: Path,
    *,
    index: bool = True,
    on_shard: Callable[[shards.Shard], None] | None = None,
) -> LoadSummary:
    builder = TrendDbBuilder(out_dir, index=index)
    try:
        for shard in shard_list:
            builder.add(shard)
            if on_shard:
                on_shard(shard)
        return builder.finish()
    except BaseException:
        builder.abort()
        raise


def _metric_id_column(table: pa.Table, ids: dict[str, int], path: Path) -> pa.Array:
    metrics = table["metric"].combine_chunks()
    dictionary = metrics.dictionary.to_pylist()
    unknown = [name for name in dictionary if name not in ids]
    if unknown:
        raise DataError(f"{path}: unknown metric {unknown[0]!r}")
    lookup = pa.array([ids[name] for name in dictionary], pa.int64())
    return lookup.take(metrics.indices)


def clean_values(column: pa.ChunkedArray) -> pa.Array:
    """§7 steps 3-5: ±inf to ±(1e9+1), clip to ±1e9, NaN to NULL (as SQLite stores a bound NaN)."""
    values = column.combine_chunks()
    clipped = pc.max_element_wise(pc.min_element_wise(values, schema.VALUE_LIMIT), -schema.VALUE_LIMIT)
    infinite = pc.if_else(pc.greater(values, 0), schema.INF_VALUE, -schema.INF_VALUE)
    cleaned = pc.if_else(pc.is_inf(values), infinite, clipped)
    return pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), cleaned)


def _create(path: Path) -> sqlite3.Connection:
    conn = open_build(path)
    for statement in schema.CREATE_TABLES:
        conn.execute(statement)
    conn.executemany(schema.INSERT_METRIC, ((metric,) for metric in schema.METRICS))
    return conn


def prepare_build(out_dir: Path, db_name: str) -> Path:
    """The private temporary path a database is built at, after removing those of killed loads."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_dead_temporaries(out_dir, db_name)
    return out_dir / f".{db_name}.{os.getpid()}.tmp"


def open_build(path: Path) -> sqlite3.Connection:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, DB_MODE)
    os.fchmod(fd, DB_MODE)  # whatever the umask: the plugin refuses group/other-writable files
    os.close(fd)
    conn = sqlite3.connect(path, isolation_level="DEFERRED")
    for pragma in schema.BUILD_PRAGMAS:
        conn.execute(pragma)
    return conn


def build_indexes(conn: sqlite3.Connection) -> None:
    for statement in schema.CREATE_INDEXES:
        conn.execute(statement)
    conn.commit()
    conn.execute("ANALYZE")
    conn.commit()


def publish(tmp: Path, final: Path, summary: LoadSummary) -> LoadSummary:
    """Move the finished build into place atomically and durably."""
    _fsync(tmp)
    os.replace(tmp, final)
    _fsync(final.parent)
    summary.db = final
    summary.size = final.stat().st_size
    if summary.size > PLUGIN_SIZE_LIMIT:
        summary.warnings.append(
            f"{final}: {summary.size} bytes is over the Trend Analyzer's 5 GiB limit; the plugin will refuse it"
        )
    return summary


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_dead_temporaries(out_dir: Path, db_name: str) -> None:
    """Temporary builds of killed loads: `.<db>.<pid>.tmp` whose process is gone."""
    for path in out_dir.glob(f".{db_name}.*.tmp"):
        pid = path.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
