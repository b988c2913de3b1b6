"""The follower: watch DATA, and put each unit into the database once its files are complete (docs/live.md).

Format-blind: the format scans DATA and parses units (trendconv.parsing), and its appender
(trendconv.formats.contract.Appender) adds shards to the database in place. Here: when a unit is complete, which
units form a batch, whether a batch is appended or the database rebuilt in place, and the record in WORK that makes
a restart continue where the database stands (trendconv.following.record).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from trendconv import shards, workdir
from trendconv.errors import DataError, TrendconvError, internal_error
from trendconv.executors import Executor, default_workers, local_executor
from trendconv.faults import fault_point
from trendconv.following import live, record
from trendconv.following.rebuild import rebuild
from trendconv.following.summary import Batch, FollowSummary
from trendconv.formats import Format
from trendconv.formats.contract import Refused
from trendconv.options import ParseOptions
from trendconv.parsing.manifest import start_parse, write_manifest
from trendconv.parsing.reuse import OK, status_of
from trendconv.parsing.runner import chunks, plan
from trendconv.parsing.tasks import ParseTask, parse_chunk, source_stats


class Follower:
    """One format's units in DATA, and its database. `poll` looks once and converts what is complete."""

    def __init__(self, fmt: Format, data: Path, out_dir: Path, work: Path, options: ParseOptions, **kwargs):
        self.fmt, self.data, self.work, self.options = fmt, data, work, options
        self.final = out_dir / fmt.db_name
        self.part = workdir.part(work, fmt)
        self.index: bool = kwargs.get("index", True)
        self.settle: float = kwargs["settle"]
        self.workers: int | None = kwargs.get("workers")
        self.executor: Executor | None = kwargs.get("executor")
        self.on_batch: Callable[[Batch], None] = kwargs.get("on_batch") or (lambda batch: None)
        self.on_warning: Callable[[str], None] = kwargs.get("on_warning") or (lambda warning: None)
        self.summary = FollowSummary(fmt.name, self.final, work)
        self.taken: dict[str, list] = {}  # shard name -> sources, in the order the database took them
        self.mark = 0
        self.appender = None
        self.stale: str | None = None  # why the next batch must rebuild the database
        self.seen: dict[str, tuple[list, float]] = {}  # shard name -> sources, and since when they are so
        self.held: dict[str, list] = {}  # shard name -> sources that did not parse

    # ---- start

    def start(self) -> None:
        """WORK's part says what this follower parses; the database and its record say what it holds."""
        self.fmt.appender(self.final).close()  # a format that cannot append says so before anything is written
        workdir.move_old_part(self.work, self.fmt)
        start_parse(self.data, self.part, self.options, self.fmt)
        self.mark = live.read_mark(self.final)
        taken = record.read(self.part, self.mark) if self.mark else None
        record.forget_others(self.part, self.mark)
        if taken is None:
            if self.final.exists():
                self.stale = "it was not written by a follower, or WORK lost its record"
            return
        found = self._own_shards(taken)
        if found is None:
            self.stale = "WORK no longer holds the shards it was made from"
            return
        self.taken = taken
        self.summary.units = len(taken)
        self.appender = self.fmt.appender(self.final)
        self.appender.replay(found)

    def _own_shards(self, taken: dict[str, list]) -> list[shards.Shard] | None:
        """The shards of TAKEN as they were when the database took them, or None."""
        directory = shards.shard_dir(self.part)
        try:
            found = [shards.read_own(directory, name, self.fmt) for name in taken]
        except DataError:
            return None
        if any(shard.meta["sources"] != taken[name] for name, shard in zip(taken, found)):
            return None
        return found

    # ---- one look at DATA

    def poll(self) -> bool:
        """Convert the units that became complete; False when nothing happened: DATA is as at the last look, and
        every unit in it is in the database (or held)."""
        tasks = self._tasks()
        now = time.monotonic()
        changed = self._watch(tasks, now)
        ready = [task for name, task in tasks.items() if self._ready(name, now)]
        gone = [name for name in self.taken if name not in tasks]
        if ready or gone or (self.stale and tasks):
            self._batch(tasks, ready, gone)
            changed = True
        return changed or any(self._pending(name) for name in tasks)

    def _pending(self, name: str) -> bool:
        sources = self.seen[name][0]
        return self.held.get(name) != sources and self.taken.get(name) != sources

    def _tasks(self) -> dict[str, ParseTask]:
        """Every unit in DATA now, by shard name, in processing order; none while DATA has none yet."""
        try:
            _, found = plan(self.data, self.work, self.options, self.fmt)
        except DataError:
            return {}
        return {self.fmt.shard_name(task.unit): task for task in found}

    def _watch(self, tasks: dict[str, ParseTask], now: float) -> bool:
        changed = False
        for name, task in tasks.items():
            sources = source_stats(task)
            if name not in self.seen or self.seen[name][0] != sources:
                self.seen[name] = (sources, now)
                changed = True
        for name in [name for name in self.seen if name not in tasks]:
            del self.seen[name]
            changed = True
        return changed

    def _ready(self, name: str, now: float) -> bool:
        """Complete (its files unchanged for the settle time), and not in the database as it is now."""
        return now - self.seen[name][1] >= self.settle and self._pending(name)

    # ---- one batch

    def _batch(self, tasks: dict[str, ParseTask], ready: list[ParseTask], gone: list[str]) -> None:
        new = self._parse(ready)
        again = [shard for shard in new if self.fmt.meta_shard_name(shard.meta) in self.taken]
        reason = self.stale or _why_again(again, gone, self.taken)
        if not new and reason is None:
            return
        if reason is None and self.appender is None:
            reason = ""  # no database yet: the first batch makes it
        if reason is None:
            reason = self._append(new)
        if reason is not None:
            self._rebuild(new, gone, reason)
        write_manifest(self.part, self.options, [tasks[name] for name in self.taken if name in tasks], self.fmt)

    def _parse(self, ready: list[ParseTask]) -> list[shards.Shard]:
        """The shards of READY, parsed or still good in WORK; a unit that does not parse is held (and warned of)
        until its files change."""
        found, todo = [], []
        for task in ready:
            status, meta = status_of(task)
            if status == OK:
                found.append(shards.Shard(task.shard_path, meta))
            else:
                todo.append(task)
        if not todo:
            return found
        executor = self.executor or local_executor(self.workers or default_workers(len(todo)))
        with contextlib.closing(executor.imap_unordered(parse_chunk, list(chunks(todo)))) as outcomes:
            for outcome in outcomes:
                if outcome.error is not None:
                    raise internal_error(outcome.error, "running the parse workers")
                for task, meta, error in outcome.value:
                    self._parsed(task, meta, error, found)
        return found

    def _parsed(self, task: ParseTask, meta: dict | None, error: BaseException | None, found: list) -> None:
        name = self.fmt.shard_name(task.unit)
        if error is None:
            self.held.pop(name, None)
            found.append(shards.Shard(task.shard_path, meta))
        elif isinstance(error, TrendconvError):
            self.held[name] = self.seen[name][0]
            self._warn(f"{error}; not converted, waiting for its files to change")
        else:
            raise internal_error(error, f"parsing {self.fmt.place(task.unit)}")

    def _append(self, new: list[shards.Shard]) -> str | None:
        """NEW appended in one transaction; else why not (the batch is then a rebuild)."""
        new.sort(key=lambda shard: self.fmt.meta_order(shard.meta))
        taken = {**self.taken, **{_name(self.fmt, shard): shard.meta["sources"] for shard in new}}
        record.write(self.part, self.mark + 1, taken)
        try:
            rows = self.appender.append(new, self.mark + 1)
        except Refused as refused:
            self._drop_appender()
            return str(refused)
        except BaseException:
            self._drop_appender()
            raise
        self._taken(taken)
        self.summary.appended += 1
        self.summary.rows += rows
        self.on_batch(Batch(self.fmt.name, self.final, len(new), rows, self.mark))
        return None

    def _rebuild(self, new: list[shards.Shard], gone: list[str], reason: str) -> None:
        """The database as a batch build of everything complete makes it, in place, in one transaction (or made
        anew, when REASON is empty)."""
        self._drop_appender()
        created = not self.final.exists()
        kept = {name: sources for name, sources in self.taken.items() if name not in gone}
        kept.update({_name(self.fmt, shard): shard.meta["sources"] for shard in new})
        found = self._own_shards(kept)
        if found is None:
            raise DataError(f"{self.part}: a shard changed while being loaded; run the command again")
        record.write(self.part, self.mark + 1, kept)
        loaded = rebuild(self.fmt, found, self.final, self.mark + 1, index=self.index)
        for warning in loaded.warnings:
            self._warn(warning)
        ordered = sorted(found, key=lambda shard: self.fmt.meta_order(shard.meta))
        self._taken({_name(self.fmt, shard): shard.meta["sources"] for shard in ordered})
        self.stale = None
        self.summary.rebuilt += bool(reason)
        self.appender = self.fmt.appender(self.final)
        self.appender.replay(ordered)
        self.on_batch(Batch(self.fmt.name, self.final, len(new), loaded.rows, self.mark, reason or None, created))

    def _warn(self, warning: str) -> None:
        """Each warning once, when it first arises (a rebuild gives those of its load again)."""
        if warning not in self.summary.warnings:
            self.summary.warnings.append(warning)
            self.on_warning(warning)

    def _taken(self, taken: dict[str, list]) -> None:
        """The batch committed: TAKEN is what the database holds now."""
        fault_point("follow-committed")
        self.taken = taken
        self.mark += 1
        record.forget_others(self.part, self.mark)
        self.summary.units = len(taken)

    def _drop_appender(self) -> None:
        if self.appender is not None:
            self.appender.close()
            self.appender = None

    def close(self) -> None:
        self._drop_appender()
        self.summary.held = sorted(self.held)


def _name(fmt: Format, shard: shards.Shard) -> str:
    return fmt.meta_shard_name(shard.meta)


def _why_again(again: list[shards.Shard], gone: list[str], taken: dict[str, list]) -> str | None:
    """Why units the database already holds make this batch a rebuild: rewritten, or gone from DATA."""
    if again:
        return f"{again[0].meta['sources'][0]['path']} changed after it was converted"
    if gone:
        return f"{taken[gone[0]][0]['path']} is gone from DATA"
    return None
