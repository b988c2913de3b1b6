"""The follower: watch DATA, and put each unit into the databases once its files are complete (docs/live.md).

Format-blind: the format scans DATA and parses units (trendconv.parsing), and its appender
(trendconv.formats.contract.Appender) adds shards to a database in place. Here: when a unit is complete, which
units form a batch, which database of the split each goes to (trendconv.following.files), whether a database is
appended to, rebuilt in place, renamed or removed, and the records in WORK that make a restart continue where the
databases stand (trendconv.following.record).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from trendconv import shards, workdir
from trendconv.errors import DataError, OutputError, TrendconvError, internal_error, make_directory, os_reason
from trendconv.executors import Executor, default_workers, local_executor
from trendconv.faults import fault_point
from trendconv.following import live, record
from trendconv.following.files import Held, pair
from trendconv.following.rebuild import rebuild
from trendconv.following.summary import Batch, FollowSummary
from trendconv.formats import Format
from trendconv.formats.contract import Refused
from trendconv.loading.outputs import family, renamed, replace_set, writing
from trendconv.loading.split import Part, Split, db_stem, partition
from trendconv.options import ParseOptions
from trendconv.parsing.manifest import start_parse, write_manifest
from trendconv.parsing.reuse import OK, status_of
from trendconv.parsing.runner import chunks, plan
from trendconv.parsing.tasks import ParseTask, parse_chunk, source_stats
from trendconv.scan import is_dir


class Follower:
    """One format's units in DATA, and its databases. `poll` looks once and converts what is complete."""

    def __init__(self, fmt: Format, data: Path, out_dir: Path, work: Path, options: ParseOptions, **kwargs):
        self.fmt, self.data, self.out_dir, self.work, self.options = fmt, data, out_dir, work, options
        self.split: Split = kwargs.get("split") or Split()
        self.stem = db_stem(fmt, self.split)
        self.part = workdir.part(work, fmt)
        self.index: bool = kwargs.get("index", True)
        self.settle: float = kwargs["settle"]
        self.workers: int | None = kwargs.get("workers")
        self.executor: Executor | None = kwargs.get("executor")
        self.on_batch: Callable[[Batch], None] = kwargs.get("on_batch") or (lambda batch: None)
        self.on_warning: Callable[[str], None] = kwargs.get("on_warning") or (lambda warning: None)
        self.summary = FollowSummary(fmt.name, out_dir / self.stem, work)
        self.files: dict[str, Held] = {}  # file name -> the database the follower wrote there
        self.shards: dict[str, shards.Shard] = {}  # every shard the databases hold, by name
        self.last_mark = 0
        self.stale: dict[str, str] = {}  # a file of the output's names that no record describes -> why
        self.dirty = False  # the databases may not be the split of what they hold (a restart): look once
        self.seen: dict[str, tuple[list, float]] = {}  # shard name -> sources, and since when they are so
        self.held: dict[str, list] = {}  # shard name -> sources that did not parse
        self.held_at: dict[str, tuple] = {}  # shard name -> (processing order, the unit's place), for the summary
        self.lock = contextlib.ExitStack()
        self.scan_warnings: list[str] = []  # the last look's: said when the follower stops, if they still hold

    # ---- start

    def start(self) -> None:
        """WORK's part says what this follower parses; the databases and their records say what they hold. The
        output is this process's alone until `close`."""
        with contextlib.suppress(OSError):  # else no database can be made there either: its build says why
            make_directory(self.out_dir)
        self.lock.enter_context(writing([self.out_dir / self.stem]))
        self.fmt.appender(self.out_dir / self.stem).close()  # a format that cannot append says so first
        workdir.move_old_part(self.work, self.fmt)
        start_parse(self.data, self.part, self.options, self.fmt)
        marks = []  # of every file of the output's names: no transaction may take one of them again
        for path in family(self.out_dir, self.stem):
            marks.append(live.read_mark(path))
            self._adopt(path, marks[-1])
        self.last_mark = max(marks, default=0)
        record.forget_others(self.part, {held.mark for held in self.files.values()})
        self.dirty = bool(self.files or self.stale)
        self.summary.units = len(self.shards)

    def _adopt(self, path: Path, mark: int) -> None:
        """The database at PATH, continued where its record says it stands; else stale (rebuilt in place when
        the split names it)."""
        found = record.read(self.part, mark) if mark else None
        if found is None or any(held.mark == mark for held in self.files.values()):
            self.stale[path.name] = "it was not written by a follower, or WORK lost its record"
            return
        shard_list = self._own_shards(found.taken)
        if shard_list is None:
            self.stale[path.name] = "WORK no longer holds the shards it was made from"
            return
        held = Held(path, mark, found.taken, found.carry, self.fmt.appender(path))
        held.appender.replay(shard_list, found.carry)
        self.files[path.name] = held
        self.shards.update(zip(found.taken, shard_list))

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
        gone = [name for name in self.shards if name not in tasks] if tasks else []  # DATA empty: nothing to do
        # After a restart, a look at the databases once, with the units that settle meanwhile (not before: a split
        # of fewer units than DATA has would rename files back and forth).
        settling = any(self._pending(name) for name in tasks if tasks[name] not in ready)
        if ready or gone or (self.dirty and tasks and not settling):
            self._batch(tasks, ready, gone)
            changed = True
        return changed or any(self._pending(name) for name in tasks)

    def _pending(self, name: str) -> bool:
        sources = self.seen[name][0]
        taken = self.shards[name].meta["sources"] if name in self.shards else None
        return self.held.get(name) != sources and taken != sources

    def _tasks(self) -> dict[str, ParseTask]:
        """Every unit in DATA now, by shard name, in processing order; none while DATA has none yet, or is gone
        (the databases stay as they are)."""
        try:
            if not is_dir(self.data):  # gone since the loop looked (trendconv.following.loop says so)
                return {}
            scanned, found = plan(self.data, self.work, self.options, self.fmt)
        except DataError:
            return {}
        self.scan_warnings = scanned.warnings
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
            self.held.pop(name, None)  # gone from DATA: no longer waited for
            self.held_at.pop(name, None)
            changed = True
        return changed

    def _ready(self, name: str, now: float) -> bool:
        """Complete (its files unchanged for the settle time), and not in the database as it is now."""
        return now - self.seen[name][1] >= self.settle and self._pending(name)

    # ---- one batch

    def _batch(self, tasks: dict[str, ParseTask], ready: list[ParseTask], gone: list[str]) -> None:
        with live.notices(self.on_warning):
            self._convert(tasks, ready, gone)

    def _convert(self, tasks: dict[str, ParseTask], ready: list[ParseTask], gone: list[str]) -> None:
        new = self._parse(ready)
        if not new and not gone and not self.dirty:
            return
        wanted = {name: shard for name, shard in self.shards.items() if name not in gone}
        wanted.update({_name(self.fmt, shard): shard for shard in new})
        if wanted:  # else every unit is gone from DATA: the databases are left as they are
            self._divide(sorted(wanted.values(), key=lambda shard: self.fmt.meta_order(shard.meta)))
            self.shards = wanted
        self.dirty = False
        self.summary.units = len(self.shards)
        write_manifest(self.part, self.options, [tasks[name].unit for name in self.shards if name in tasks], self.fmt)

    def _divide(self, ordered: list[shards.Shard]) -> None:
        """The databases made the split of ORDERED (every complete unit, in processing order), as a batch run
        makes it: each paired file renamed, appended to or rebuilt in place, new ones made, the rest removed."""
        parts = partition(self.fmt, ordered, self.split)
        carry = None if len(parts) == 1 else self.fmt.carry([shard.meta for shard in ordered])
        if len(parts) == 1:
            parts[0].shards = ordered  # one database takes them in processing order, as `trendconv run`
        pairs = pair(self.fmt, parts, self.files, self.shards)
        for part, held in pairs:
            if part is not None and held is not None and held.path.name != part.name:
                self._rename(held, part.name)
        everything = {_name(self.fmt, shard) for shard in ordered}
        for part, held in pairs:
            if part is not None:
                self._update(part, held, carry, everything)
        for part, held in pairs:
            if part is None:
                self._remove(held)
        for warning in replace_set(self.out_dir, self.stem, [part.name for part in parts]):
            self._warn(warning)

    def _update(self, part: Part, held: Held | None, carry, everything: set[str]) -> None:
        """PART's database as a batch build makes it: HELD appended to where it can be, else rebuilt in place."""
        if held is None:
            self._build(part, None, carry, self.stale.pop(part.name, ""))
            return
        reason = self._why_again(part, held, everything) or held.appender.moved(carry)
        fresh = [shard for shard in part.shards if _name(self.fmt, shard) not in held.taken]
        if reason is None and fresh:
            reason = self._append(held, fresh, carry)
        if reason is not None:
            self._build(part, held, carry, reason)

    def _why_again(self, part: Part, held: Held, everything: set[str]) -> str | None:
        """Why HELD cannot grow into PART: a unit it took changed, is gone from DATA, or is now in another
        database of the split."""
        wanted = {_name(self.fmt, shard): shard.meta["sources"] for shard in part.shards}
        for name, sources in held.taken.items():
            if name not in wanted:
                where = "now belongs in another database of the split" if name in everything else "is gone from DATA"
                return f"{sources[0]['path']} {where}"
            if wanted[name] != sources:
                return f"{sources[0]['path']} changed after it was converted"
        return None

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
            self.held_at.pop(name, None)
            found.append(shards.Shard(task.shard_path, meta))
        elif isinstance(error, TrendconvError):
            self.held[name] = self.seen[name][0]
            self.held_at[name] = (self.fmt.order(task.unit), self._failed_place(task, error))
            self._warn(f"{error}; not converted, waiting for its files to change")
        else:
            raise internal_error(error, f"parsing {self.fmt.place(task.unit)}")

    def _failed_place(self, task: ParseTask, error: TrendconvError) -> str:
        """Where ERROR is, as it names it (`file, step S, rank R: ...`) when that is one of the unit's files (a
        file set's construct.json, say); else the unit's place."""
        text = str(error)
        for _, path in self.fmt.sources(task.unit, task.options):
            rest = text.removeprefix(str(path))
            if rest != text and rest[:1] in (":", ",") and ": " in rest:
                return text[: len(text) - len(rest) + rest.index(": ")]
        return self.fmt.place(task.unit)

    def _append(self, held: Held, fresh: list[shards.Shard], carry) -> str | None:
        """FRESH appended to HELD in one transaction; else why not (the database is then rebuilt)."""
        mark = self._next_mark()
        taken = {**held.taken, **{_name(self.fmt, shard): shard.meta["sources"] for shard in fresh}}
        record.write(self.part, mark, record.Record(held.path.name, taken, carry))
        try:
            rows = held.appender.append(fresh, mark, carry)
        except Refused as refused:  # nothing was written: the rebuild takes its number
            held.close()
            self.last_mark = mark - 1
            return str(refused)
        except BaseException:
            held.close()
            raise
        self._committed(held, mark, taken, carry)
        self.summary.appended += 1
        self.summary.rows += rows
        self.on_batch(Batch(self.fmt.name, held.path, len(fresh), rows, mark))
        return None

    def _build(self, part: Part, held: Held | None, carry, reason: str) -> None:
        """PART's database as a batch build makes it, in place of HELD's in one transaction (or made anew, when
        there is no file yet)."""
        target = self.out_dir / part.name
        created = not target.exists()
        if held is not None:
            held.close()
        mark = self._next_mark()
        taken = {_name(self.fmt, shard): shard.meta["sources"] for shard in part.shards}
        record.write(self.part, mark, record.Record(part.name, taken, carry))
        loaded = rebuild(self.fmt, part.shards, target, mark, index=self.index, carry=carry)
        for warning in loaded.warnings:
            self._warn(warning)
        fresh = len([name for name in taken if held is None or name not in held.taken])
        done = Held(target, 0 if held is None else held.mark, {}, None)
        self._committed(done, mark, taken, carry)
        done.appender = self.fmt.appender(target)
        done.appender.replay(part.shards, carry)
        self.files[part.name] = done
        if not created:
            self.summary.rebuilt += 1
            reason = reason or "it was not written by this follower"
        self.on_batch(Batch(self.fmt.name, target, fresh, loaded.rows, mark, None if created else reason, created))

    def _rename(self, held: Held, name: str) -> None:
        """HELD's steps give it another name: the same file (an open reader keeps it), listed under the new one.
        Its connection is closed first: SQLite names a transaction's journal after the database's path."""
        held.appender.close()  # its state is kept
        target = self.out_dir / name
        was = held.path
        try:
            os.replace(was, target)
        except OSError as exc:
            raise OutputError(f"{was}: cannot rename it to {name}: {os_reason(exc)}") from None
        renamed(self.out_dir, self.stem, was.name, name)
        del self.files[was.name]
        self.stale.pop(name, None)  # a file there that no record described: replaced, as `trendconv run` would
        held.path = held.appender.final = target
        self.files[name] = held
        self.on_batch(Batch(self.fmt.name, target, 0, 0, held.mark, was=was))

    def _remove(self, held: Held) -> None:
        """HELD's steps are all in other databases now: removed, if it is still as this follower left it."""
        held.close()
        if live.read_mark(held.path) == held.mark:
            held.path.unlink()
        record.forget(self.part, held.mark)
        del self.files[held.path.name]
        self.on_batch(Batch(self.fmt.name, held.path, 0, 0, held.mark, removed=True))

    def _warn(self, warning: str) -> None:
        """Each warning once, when it first arises (a rebuild gives those of its load again)."""
        if warning not in self.summary.warnings:
            self.summary.warnings.append(warning)
            self.on_warning(warning)

    def _committed(self, held: Held, mark: int, taken: dict[str, list], carry) -> None:
        """HELD's transaction MARK committed: it holds TAKEN now, and its previous record is superseded."""
        fault_point("follow-committed")
        record.forget(self.part, held.mark)
        held.mark, held.taken, held.carry = mark, taken, carry

    def _next_mark(self) -> int:
        self.last_mark += 1
        return self.last_mark

    def close(self) -> None:
        for held in self.files.values():
            held.close()
        self.lock.close()
        for warning in self.scan_warnings:  # not as they arise: a unit's directory is there before its files
            self._warn(warning)
        self.summary.held = [place for _, place in sorted(self.held_at.values())]
        self.summary.files = [held.path for _, held in sorted(self.files.items())]
        if self.summary.files:
            self.summary.db = self.summary.files[0]


def _name(fmt: Format, shard: shards.Shard) -> str:
    return fmt.meta_shard_name(shard.meta)
