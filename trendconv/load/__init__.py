"""The load stage: shards, in (step, rank) order, into one SQLite trend database, deterministically.

Every id is assigned here: targets as msprobe data2db numbers them (see `_Ids`), tags in one block per
metric, each block in the order its targets were first used. The database is built in a private temporary
file in the output directory and renamed into place when complete, so a failed or killed load leaves the
previous database untouched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import int64, interrupt, shards
from trendconv.dump.parse import options_text
from trendconv.errors import DataError, OutputError, make_directory, os_reason, plural
from trendconv.executors import alive
from trendconv.faults import fault_point
from trendconv.load import connection, schema
from trendconv.tags import tags_of

# Trend rows per INSERT statement, at most: with 8 to 18 columns this stays under SQLite's oldest limit of
# 999 parameters per statement.
_BATCH_ROWS = 64
_MAX_PARAMETERS = 999
# msprobe data2db's row buffer (docs/dump-format.md §8.4): where its flushes fall decides the target ids.
MSPROBE_BATCH_ROWS = 5000
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
    """Target ids as msprobe data2db numbers them (docs/dump-format.md §8.4), and each metric's first uses of
    targets, which decide the tag ids.

    msprobe gives a target its id when a flush first inserts it; a flush comes after a key that leaves a
    multiple of 5000 rows in the buffer, and at each file end. A flush inserts, metric by metric in id
    order, the targets that metric uses for the first time, in first-seen order; every attempted insert
    takes a sequence value, so a target another metric created first leaves a gap.

    Work is per shard in Arrow, not per row. Each distinct (name, index) gets a *slot* (a dense number in
    first-seen order): the pair packs into one int64 key (the name as a number given on first sight), and
    `known` holds the key of every slot in order, so `index_in` gives the slots of a shard's rows and the
    nulls are the new targets. A use is (metric << 32 | slot); its first row places it in a flush.
    """

    _INDEX_BITS = 31
    _INDEX_LIMIT = 1 << _INDEX_BITS

    def __init__(self) -> None:
        self.sequence = 0  # the last value msprobe's AUTOINCREMENT handed out: sqlite_sequence
        self._slots: dict[tuple[str, int], int] = {}  # (name, index) -> slot, in slot order
        self._slot_ids = pa.array([], pa.int64())  # slot -> target id
        self._name_numbers: dict[str, int] = {}
        self._names: list[str] = []
        self._known_keys: list[int] = []  # by slot; a target whose index does not pack: -(slot + 1)
        self._known = pa.array([], pa.int64())
        self._uses: list[pa.Array] = []  # (metric << 32 | slot), each first use once, in order of first row
        self._used = pa.array([], pa.int64())

    @property
    def targets(self) -> dict[tuple[str, int], int]:
        """(name, index) -> target id, in order of first sight."""
        return dict(zip(self._slots, self._slot_ids.to_pylist()))

    @property
    def metric_targets(self) -> int:
        """How many distinct (metric, target) pairs the rows hold."""
        return len(self._used)

    @property
    def by_metric(self) -> dict[int, dict[int, None]]:
        """metric id -> target ids (as dict keys), both in order of first use."""
        ids = self._slot_ids.to_pylist()
        by_metric: dict[int, dict[int, None]] = {}
        for uses in self._uses:
            for use in uses.to_pylist():
                by_metric.setdefault(use >> 32, {})[ids[use & 0xFFFFFFFF]] = None
        return by_metric

    def target_ids(
        self, names: pa.DictionaryArray, indexes: pa.Array, metric_ids: pa.Array, flushes: list[int]
    ) -> pa.Array:
        """The target id of every row of one file's rows (in file order); FLUSHES: the rows at which msprobe
        flushed inside the file (see `flush_starts`)."""
        known_slots = len(self._slots)
        if len(indexes) and pc.max(indexes).as_py() >= self._INDEX_LIMIT:
            slots = self._slots_unpacked(names, indexes)
        else:
            slots = self._slots_packed(names, indexes)
        self._insert_new_uses(pc.add(pc.shift_left(metric_ids, 32), slots), flushes, known_slots)
        return self._slot_ids.take(slots)

    def _slots_packed(self, names: pa.DictionaryArray, indexes: pa.Array) -> pa.Array:
        numbers = pa.array([self._name_number(name) for name in names.dictionary.to_pylist()], pa.int64())
        keys = pc.add(pc.shift_left(numbers.take(names.indices), self._INDEX_BITS), indexes)
        positions = pc.index_in(keys, value_set=self._known)
        if positions.null_count:
            mask = self._INDEX_LIMIT - 1
            for key in pc.unique(keys.filter(positions.is_null())).to_pylist():
                self._new_slot(self._names[key >> self._INDEX_BITS], key & mask)
            self._known = pa.array(self._known_keys, pa.int64())
            positions = pc.index_in(keys, value_set=self._known)
        return positions.cast(pa.int64())

    def _slots_unpacked(self, names: pa.DictionaryArray, indexes: pa.Array) -> pa.Array:
        """Indexes beyond 31 bits: the pairs of the shard, one by one."""
        pairs = list(zip(pc.take(names.dictionary, names.indices).to_pylist(), indexes.to_pylist()))
        slots = {}
        for pair in pairs:
            if pair not in slots:
                known = self._slots.get(pair)
                slots[pair] = known if known is not None else self._new_slot(*pair)
        self._known = pa.array(self._known_keys, pa.int64())
        return pa.array([slots[pair] for pair in pairs], pa.int64())

    def _name_number(self, name: str) -> int:
        number = self._name_numbers.get(name)
        if number is None:
            number = self._name_numbers[name] = len(self._names)
            self._names.append(name)
        return number

    def _new_slot(self, name: str, index: int) -> int:
        slot = self._slots[(name, index)] = len(self._slots)
        packs = index < self._INDEX_LIMIT
        self._known_keys.append((self._name_number(name) << self._INDEX_BITS) + index if packs else -(slot + 1))
        return slot

    def _insert_new_uses(self, uses: pa.Array, flushes: list[int], known_slots: int) -> None:
        """msprobe's inserts for the uses first seen in this file: each takes the next sequence value, and a
        slot new in this file gets the value of its first insert as its id."""
        distinct = pc.unique(uses)
        new = distinct.filter(pc.invert(pc.is_in(distinct, value_set=self._used)))
        if not len(new):
            return
        self._uses.append(new)
        self._used = pa.concat_arrays([self._used, new])
        inserts = _insert_order(new, pc.index_in(new, value_set=uses), flushes)
        fresh = pa.array(range(known_slots, len(self._slots)), pa.int64())
        first_insert = pc.index_in(fresh, value_set=pc.bit_wise_and(inserts, 0xFFFFFFFF))
        ids = pc.add(first_insert.cast(pa.int64()), self.sequence + 1)
        self._slot_ids = pa.concat_arrays([self._slot_ids, ids])
        self.sequence += len(inserts)


def _insert_order(uses: pa.Array, first_rows: pa.Array, flushes: list[int]) -> pa.Array:
    """USES (first seen at FIRST_ROWS) in msprobe's insert order: by flush, then metric, then first row."""
    flush = pa.repeat(pa.scalar(0, pa.int64()), len(uses))
    for start in flushes:
        flush = pc.add(flush, pc.greater_equal(first_rows, start).cast(pa.int64()))
    keys = pa.table({"flush": flush, "metric": pc.shift_right(uses, 32), "row": first_rows})
    return uses.take(pc.sort_indices(keys, [(name, "ascending") for name in keys.column_names]))


def flush_starts(keys: pa.ChunkedArray, batch: int = MSPROBE_BATCH_ROWS) -> list[int]:
    """The rows of one file that start a new msprobe flush: a flush follows the key that leaves a
    non-zero multiple of BATCH rows in the buffer, and the buffer empties at each flush, so the flushes
    fall exactly where a key ends at a multiple of BATCH rows (a key's rows are contiguous, keys unique)."""
    candidates = range(batch, len(keys), batch)
    if not candidates:
        return []
    around = keys.take([row for start in candidates for row in (start - 1, start)]).to_pylist()
    return [start for start, before, after in zip(candidates, around[::2], around[1::2]) if before != after]


class _KeyPrefixes:
    """How many distinct values each prefix of trend_data's keys takes, counted as shards go in, so that its
    sqlite_stat1 rows are written without ANALYZE scanning two million rows (a second of the serial tail).

    Shards never share a (rank, step): a shard holds one rank, and its global steps are its own (micro-step
    offsets grow step by step). So the primary key's prefixes are counted per shard and summed; only
    (metric, step) and (metric, target) need sets across shards.
    """

    def __init__(self) -> None:
        self.ranks: set[int] = set()
        self.rank_steps = 0
        self.rank_step_targets = 0
        self.metric_steps: set[tuple[int, int]] = set()

    def add(self, rank: int, rows: pa.Table) -> None:
        """ROWS: one shard's trend rows, sorted by step, then target."""
        steps, targets = rows["step"].combine_chunks(), rows["target_id"].combine_chunks()
        new_step = pc.not_equal(steps[1:], steps[:-1])
        self.ranks.add(rank)
        self.rank_steps += 1 + _count_true(new_step)
        self.rank_step_targets += 1 + _count_true(pc.or_(new_step, pc.not_equal(targets[1:], targets[:-1])))
        pairs = rows.group_by(["metric_id", "step"]).aggregate([])
        self.metric_steps.update(zip(pairs["metric_id"].to_pylist(), pairs["step"].to_pylist()))

    def stat1_rows(self, rows: int, metric_targets: int) -> list[tuple[str, str, str]]:
        """What ANALYZE writes to sqlite_stat1 for trend_data's primary key and its two read indexes."""
        metrics = len({metric for metric, _ in self.metric_steps})
        primary = [len(self.ranks), self.rank_steps, self.rank_step_targets, rows]
        return [
            ("trend_data", "trend_data", _stat1(rows, primary)),
            ("trend_data", "idx_trend_metric_step", _stat1(rows, [metrics, len(self.metric_steps)])),
            ("trend_data", "idx_trend_metric_target", _stat1(rows, [metrics, metric_targets])),
        ]


def _count_true(mask: pa.Array) -> int:
    return pc.sum(mask).as_py() or 0


def _stat1(rows: int, distinct: list[int]) -> str:
    """sqlite_stat1's text: the row count, then the average rows per distinct value of each key prefix, as
    ANALYZE rounds it (up, and to 1 when the prefix is within 10% of unique)."""
    return " ".join(map(str, [rows, *(_average_rows(rows, count) for count in distinct)]))


def _average_rows(rows: int, distinct: int) -> int:
    average = (rows + distinct - 1) // distinct
    return 1 if average == 2 and rows * 10 <= distinct * 11 else average


def writes_db(method):
    """A builder method whose SQLite or file-system failure (disk full, no permission) is an OutputError
    naming the database, rather than a traceback. The caller's abort removes the unfinished build."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (connection.Error, OSError) as exc:
            raise OutputError(f"{self.final}: cannot write the database: {_write_failure(exc)}") from None

    return wrapper


def _write_failure(exc: connection.Error | OSError) -> str:
    if isinstance(exc, OSError):
        return os_reason(exc)
    if isinstance(exc, connection.FullError):
        return f"{exc} (the index build also writes SQLite temporary files, to SQLITE_TMPDIR, TMPDIR or /tmp)"
    return str(exc)


class _Writer:
    """Inserts trend rows on a thread of its own, in the order they are given, while the loader reads and
    prepares the next shard: SQLite runs without the GIL, so the two overlap. One thread and a short queue
    keep the order (and so the database bytes) and bound the rows in flight. A failed insert is raised
    again by the next `put` or by `close`; later rows are then dropped, as the build is abandoned."""

    _IN_FLIGHT = 2

    def __init__(self, conn: connection.Connection, stats) -> None:
        self._conn, self._stats = conn, stats
        self.offered = self.inserted = 0
        self._error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(self._IN_FLIGHT)
        self._thread = threading.Thread(target=self._run, name="trendconv-writer", daemon=True)
        self._thread.start()

    def put(self, rows: pa.Table) -> None:
        self._raise()
        self.offered += rows.num_rows
        self._queue.put(rows)

    def close(self) -> None:
        """Wait until every row given is inserted (or the first failure, raised here)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()

    def _run(self) -> None:
        while (rows := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.inserted += insert_trend(self._conn, rows, self._stats)
                except BaseException as exc:  # noqa: BLE001 - handed to the loading thread
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class TrendDbBuilder:
    """Feed shards in (step, rank) order with `add`, then `seal` to complete the database and `publish` to move
    it into place (or `abort`)."""

    @writes_db
    def __init__(self, out_dir: Path, *, index: bool = True):
        self.out_dir = out_dir
        self.index = index
        self.final = out_dir / schema.DB_NAME
        self.summary = LoadSummary()
        self._ids = _Ids()
        self._prefixes = _KeyPrefixes()
        self._metric_ids = schema.metric_ids()
        self._first: dict | None = None
        self._step: int | None = None
        # The micro-step count of a step is the largest of its file sets'; it may be negative, as msprobe takes a
        # negative parent in construct.json for a micro step like any other. None until the step's first shard.
        self._offset, self._step_micro_steps = 0, None
        self._widest: tuple[int, int, str] = (0, 0, "")  # the farthest micro-step count from 0, and its construct.json
        self._steps: list[int] = []
        self._max_rank = 0
        self.seconds = {"finish": 0.0, "index": 0.0}
        self.tmp = prepare_build(out_dir, schema.DB_NAME)
        self._conn = _create(self.tmp)
        self._writer = _Writer(self._conn, schema.STATS)

    @writes_db
    def add(self, shard: shards.Shard) -> None:
        self._check_consistent(shard)
        self._advance_step(shard.step)
        self._count_micro_steps(shard.meta)
        self._max_rank = max(self._max_rank, shard.rank)
        table = shards.read_rows(shard.path)
        self._check_rows(shard, table)
        self._insert_rows(shard, table)
        self.summary.shards += 1
        fault_point("load-shard")

    def _check_consistent(self, shard: shards.Shard) -> None:
        """Footers are checked as they are read (trendconv.schemas); here only that they agree with each other."""
        meta = shard.meta
        if self._first is None:
            self._first = meta
        elif meta["options"] != self._first["options"]:
            raise DataError(
                f"{shard.path}: parsed with {options_text(meta['options'])}, the other shards with "
                f"{options_text(self._first['options'])}; re-run parse"
            )

    def _check_rows(self, shard: shards.Shard, table: pa.Table) -> None:
        """The step, rank and micro-step count of the rows are taken from the footer: they must describe them."""
        if table.num_rows == 0:
            return
        meta = shard.meta
        for column in ("step", "rank"):
            low, high = (value.as_py() for value in pc.min_max(table[column]).values())
            if not low == high == meta[column]:
                raise rows_mismatch(shard.path, f"{column} {low}..{high} in the rows, {meta[column]} in the footer")
        # A key that construct.json gives no micro step is in micro step 0, whatever the count says.
        highest = pc.max(table["local_micro_step"]).as_py()
        if self.micro_step_mode and highest > max(meta["micro_steps"] - 1, 0):
            counted = plural(meta["micro_steps"], "micro step")
            raise rows_mismatch(shard.path, f"micro step {highest} in the rows, {counted} in the footer")

    @property
    def micro_step_mode(self) -> bool:
        return bool(self._first and self._first["options"]["micro_step"])

    def _advance_step(self, step: int) -> None:
        if step == self._step:
            return
        if self._step is not None and step < self._step:
            raise DataError(f"shards out of order: step {step} after step {self._step}")
        self._offset += self._step_micro_steps or 0
        self._step, self._step_micro_steps = step, None
        self._steps.append(step)

    def _count_micro_steps(self, meta: dict) -> None:
        count = meta["micro_steps"]
        self._step_micro_steps = count if self._step_micro_steps is None else max(self._step_micro_steps, count)
        self._widest = max(self._widest, (abs(count), count, _construct_json(meta)))

    def _insert_rows(self, shard: shards.Shard, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        metric_ids = _metric_id_column(table, self._metric_ids, shard.path)
        names = table["target_name"].combine_chunks()
        flushes = flush_starts(table["key"])
        target_ids = self._ids.target_ids(names, table["micro_step"].combine_chunks(), metric_ids, flushes)
        steps = self._global_steps(shard, table)
        rows = pa.table(
            {
                "rank": table["rank"],
                "step": steps,
                "target_id": target_ids,
                "metric_id": metric_ids,
                **{stat: clean_values(table[stat]) for stat in schema.STATS},
            }
        ).sort_by([("step", "ascending"), ("target_id", "ascending"), ("metric_id", "ascending")])
        self._prefixes.add(shard.rank, rows)
        self._writer.put(rows)

    def _global_steps(self, shard: shards.Shard, table: pa.Table) -> pa.Array:
        if not self.micro_step_mode:
            return table["step"]
        local = table["local_micro_step"].combine_chunks()
        low, high = (scalar.as_py() for scalar in pc.min_max(local).values())
        for micro_step in (low, high):
            if not int64.fits(self._offset + micro_step):
                raise DataError(
                    f"{_construct_json(shard.meta)}, step {shard.step}, rank {shard.rank}: micro step {micro_step} "
                    f"lands on global step {self._offset + micro_step}, which does not fit a 64-bit integer "
                    f"(--no-micro-step keeps the original step numbers)"
                )
        return _shifted(local, self._offset)

    @writes_db
    def seal(self) -> None:
        """Write targets, global_stats and tags and build the indexes: the database is complete at `tmp`."""
        if self._first is None:
            raise DataError("no shards to load")
        started = time.perf_counter()
        self._writer.close()
        self.summary.rows, self.summary.duplicates = self._writer.inserted, self._writer.offered - self._writer.inserted
        self._offset += self._step_micro_steps or 0
        self._check_last_step()
        self._write_targets()
        self._conn.execute(schema.CREATE_GLOBAL_STATS)
        self._conn.execute(schema.INSERT_GLOBAL_STATS, self._global_stats())
        self._write_tags()
        stat1 = self._prefixes.stat1_rows(self.summary.rows, self._ids.metric_targets) if self.summary.rows else None
        complete_build(self._conn, self.tmp, self.seconds, started, index=self.index, trend_stat1=stat1)

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
                f"{self._offset - 1}, does not fit a 64-bit integer (--no-micro-step keeps the original step numbers)"
            )

    def _global_stats(self) -> tuple:
        if self.micro_step_mode:
            steps = (0, self._offset - 1)
        else:
            steps = (min(self._steps), max(self._steps))
        return (self._max_rank, *steps, *([schema.STAT_LIST] * len(schema.METRICS)))

    def _write_tags(self) -> None:
        names = {tid: name for (name, _), tid in self._ids.targets.items()}
        write_tags(self._conn, self._ids.by_metric, names, tags_of, self.summary)

    def abort(self) -> None:
        with contextlib.suppress(BaseException):  # the failure being handled is the one to report
            self._writer.close()
        abandon(self._conn, self.tmp)


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


def stage_shards(
    shard_list: Iterable[shards.Shard],
    out_dir: Path,
    *,
    index: bool = True,
    on_shard: Callable[[shards.Shard], None] | None = None,
) -> TrendDbBuilder:
    """The database of SHARD_LIST, complete at its temporary path: `publish` moves it into place, `abort` drops it."""
    builder = TrendDbBuilder(out_dir, index=index)
    try:
        for shard in shard_list:
            builder.add(shard)
            if on_shard:
                on_shard(shard)
        builder.seal()
    except BaseException:
        builder.abort()
        raise
    return builder


def publish_all(builders: list) -> None:
    """Move sealed builds into place, one right after another. A directory where a database goes is the one
    failure to expect here: it is looked for first, so that it stops them all."""
    for builder in builders:
        if builder.final.is_dir():
            raise OutputError(f"{builder.final}: cannot write the database: it is a directory")
    fault_point("load-before-rename")
    interrupt.check()  # the last moment a signal keeps every previous database
    with interrupt.deferred():  # a signal now is one too late: all databases go in place, then exit 130
        previous = [_keep_previous(builder.final) for builder in builders]
        done = 0
        try:
            for builder in builders:
                builder.publish()
                done += 1
        except BaseException:  # a rename refused (an immutable file, say): the ones done are undone
            for builder, kept in zip(builders[:done], previous):
                if kept:
                    os.replace(kept, builder.final)
                else:
                    builder.final.unlink()
            raise
        finally:
            for kept in filter(None, previous):
                kept.unlink(missing_ok=True)
                interrupt.finished(kept)


def _keep_previous(final: Path) -> Path | None:
    """A second name (a hard link) for the database at FINAL, to put it back; None where there is none."""
    kept = interrupt.unfinished(final.with_name(f".{final.name}.previous.{os.getpid()}.tmp"))
    try:
        kept.unlink(missing_ok=True)
        os.link(final, kept)
    except OSError:  # no database there yet, or a file system without hard links
        interrupt.finished(kept)
        return None
    return kept


def rows_mismatch(path: Path, detail: str) -> DataError:
    return DataError(f"{path}: the rows do not match the footer ({detail}); {shards.DELETE_AGAIN}")


def _metric_id_column(table: pa.Table, ids: dict[str, int], path: Path) -> pa.Array:
    metrics = table["metric"].combine_chunks()
    dictionary = metrics.dictionary.to_pylist()
    unknown = [name for name in dictionary if name not in ids]
    if unknown:
        raise DataError(f"{path}: unknown metric {unknown[0]!r}")
    lookup = pa.array([ids[name] for name in dictionary], pa.int64())
    return lookup.take(metrics.indices)


def clean_values(column: pa.ChunkedArray) -> pa.Array:
    """docs/dump-format.md §7 steps 3-5 (docs/monitor-format.md §8 alike): ±inf to ±(1e9+1), clip to ±1e9, NaN to
    NULL (as SQLite stores a bound NaN)."""
    values = column.combine_chunks()
    clipped = pc.max_element_wise(pc.min_element_wise(values, schema.VALUE_LIMIT), -schema.VALUE_LIMIT)
    infinite = pc.if_else(pc.greater(values, 0), schema.INF_VALUE, -schema.INF_VALUE)
    cleaned = pc.if_else(pc.is_inf(values), infinite, clipped)
    return pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), cleaned)


def _create(path: Path) -> connection.Connection:
    conn = open_build(path)
    try:
        for statement in schema.CREATE_TABLES:
            conn.execute(statement)
        conn.executemany(schema.INSERT_METRIC, ((metric,) for metric in schema.METRICS))
    except BaseException:
        abandon(conn, path)
        raise
    return conn


def write_tags(conn: connection.Connection, by_metric: dict, names: dict[int, str], rule, summary: LoadSummary) -> None:
    """Tags per metric (metrics in BY_METRIC's order, each metric's targets in first-use order, each target's
    tags in RULE's order), and every (tag, target) link, sorted."""
    tag_ids: dict[tuple[str, str, int], int] = {}
    links = []
    for metric, targets in by_metric.items():
        for target in targets:
            for tag_name, category in rule(names[target]):
                tag = tag_ids.setdefault((tag_name, category, metric), len(tag_ids) + 1)
                links.append((tag, target))
    conn.executemany(schema.INSERT_TAG, ((tid, *tag) for tag, tid in tag_ids.items()))
    links.sort()
    conn.executemany(schema.INSERT_TAG_TARGET, links)
    summary.tags, summary.tag_links = len(tag_ids), len(links)


def complete_build(
    conn: connection.Connection,
    tmp: Path,
    seconds: dict,
    started: float,
    *,
    index: bool,
    trend_stat1: list[tuple[str, str, str]] | None = None,
) -> None:
    """Commit, build the read indexes, close and sync: the database is complete at TMP, for `publish`. SECONDS
    gets `index` and `finish` (the time since STARTED without the indexes). See `build_indexes` for TREND_STAT1."""
    conn.commit()
    indexed = time.perf_counter()
    if index:
        build_indexes(conn, trend_stat1)
    conn.close()
    seconds["index"] = time.perf_counter() - indexed
    _fsync(tmp)  # here, not in `publish`: the databases of several formats are then renamed in one short moment
    seconds["finish"] = time.perf_counter() - started - seconds["index"]


def abandon(conn: connection.Connection, tmp: Path) -> None:
    """A failed build: close it and remove its file; the database in place, if any, is untouched."""
    try:
        conn.close()
    finally:
        tmp.unlink(missing_ok=True)
        interrupt.finished(tmp)


def insert_trend(conn: connection.Connection, rows: pa.Table, stats) -> int:
    """Insert ROWS (trend_data's columns, in order) in table order; returns how many were inserted (INSERT
    OR IGNORE: a duplicate key keeps the row inserted first)."""
    before = conn.total_changes
    if conn.reads_columns and rows.num_columns <= connection.COLUMNS_MAX:
        arrays = [rows[name].combine_chunks() for name in rows.column_names]
        conn.insert_columns(schema.insert_trend_columns(len(arrays)), arrays)
    else:
        _insert_values(conn, rows, stats)
    return conn.total_changes - before


def _insert_values(conn: connection.Connection, rows: pa.Table, stats) -> None:
    """The same rows bound as Python values, many rows to a statement."""
    width = len(rows.column_names)
    per_statement = min(_BATCH_ROWS, _MAX_PARAMETERS // width)
    flat = list(chain.from_iterable(zip(*(rows[name].to_pylist() for name in rows.column_names))))
    chunk = width * per_statement
    whole = len(flat) - len(flat) % chunk
    if whole:
        statement = schema.insert_trend(stats, per_statement)
        conn.executemany(statement, (flat[start : start + chunk] for start in range(0, whole, chunk)))
    if whole < len(flat):
        conn.execute(schema.insert_trend(stats, (len(flat) - whole) // width), flat[whole:])


def prepare_build(out_dir: Path, db_name: str) -> Path:
    """The private temporary path a database is built at, after removing those of killed loads."""
    make_directory(out_dir)
    _remove_dead_temporaries(out_dir, db_name)
    return interrupt.unfinished(out_dir / f".{db_name}.{os.getpid()}.tmp")


def open_build(path: Path) -> connection.Connection:
    """A new database at PATH, set up for building; if that fails, PATH is removed again. A symbolic link planted
    at PATH is refused (ELOOP), not followed: its target is not ours to truncate or chmod."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, DB_MODE)
    try:
        os.fchmod(fd, DB_MODE)  # whatever the umask: the plugin refuses group/other-writable files
        os.close(fd)
        conn = connection.Connection(path)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    try:
        for pragma in schema.BUILD_PRAGMAS:
            conn.execute(pragma)
    except BaseException:
        abandon(conn, path)
        raise
    return conn


def build_indexes(conn: connection.Connection, trend_stat1: list[tuple[str, str, str]] | None = None) -> None:
    """The read indexes, then ANALYZE; with TREND_STAT1 (trend_data's sqlite_stat1 rows, known from the load)
    ANALYZE reads only the small tables."""
    for statement in schema.CREATE_INDEXES:
        conn.execute(statement)
    conn.commit()
    if trend_stat1 is None:
        conn.execute("ANALYZE")
    else:
        for table in schema.SMALL_TABLES:
            conn.execute(f"ANALYZE {table}")
        conn.executemany("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)", trend_stat1)
    conn.commit()


def publish(tmp: Path, final: Path, summary: LoadSummary, seconds: dict) -> LoadSummary:
    """Move a complete build into place atomically and durably."""
    started = time.perf_counter()
    os.replace(tmp, final)
    interrupt.finished(tmp)
    _fsync(final.parent)
    summary.db = final
    summary.size = final.stat().st_size
    seconds["finish"] += time.perf_counter() - started
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
        if pid.isdigit() and not alive(int(pid)):
            path.unlink(missing_ok=True)
