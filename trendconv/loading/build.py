"""Building a database safely: a private temporary file in the output directory, complete before anything is
renamed, then moved into place (`publish`), so that a failed, killed or interrupted load leaves the database in place
untouched. Every builder uses these."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from trendconv import interrupt
from trendconv.check import SQLITE_HEADER
from trendconv.errors import OutputError, make_directory, os_reason
from trendconv.executors import alive
from trendconv.faults import fault_point
from trendconv.heap import trim
from trendconv.loading import connection, schema
from trendconv.loading.background import Background
from trendconv.loading.indexes import build_indexes, name_pages, write_pages
from trendconv.loading.records import metas_of, unpacked
from trendconv.loading.table import TablePages
from trendconv.summaries import LoadSummary

DB_MODE = 0o640


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


def prepare_build(out_dir: Path, db_name: str) -> Path:
    """The private temporary path a database is built at, after removing those of killed loads."""
    make_directory(out_dir)
    remove_dead_temporaries(out_dir, db_name)
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


def complete_build(
    conn: connection.Connection,
    tmp: Path,
    seconds: dict,
    started: float,
    *,
    index: bool,
    trend_stat1: list[tuple[str, str, str]] | None = None,
    pages: TablePages | None = None,
) -> None:
    """Commit, write trend_data's PAGES (if its rows were written as pages: trendconv.loading.table), build the
    read indexes, close and sync: the database is complete at TMP, for `publish`. SECONDS gets `index` and
    `finish` (the time since STARTED without the indexes). See `build_indexes` for TREND_STAT1. CONN is closed;
    the caller's `abandon` of it after a failure here still removes TMP."""
    conn.commit()
    trim()  # the rows' batches are freed: the index sorts start from a heap given back (trendconv.heap)
    (table_root,) = conn.execute(schema.TREND_ROOT).fetchall()[0]
    conn.close()  # trend_data's pages are written to the file with no connection on it
    # trend_data's leaves are copied and synced on another thread until `pages.wait()`
    copying = pages is not None and pages.write(tmp, table_root)
    indexed = time.perf_counter()
    if index:
        syncing = None if copying else Background("trendconv-sync", _fsync, tmp)  # the rows go to disk meanwhile
        _index(tmp, table_root, trend_stat1, pages)
        if syncing is not None:
            syncing.wait()
    elif pages is not None:
        pages.wait()
    seconds["index"] = time.perf_counter() - indexed
    _fsync(tmp)  # here, not in `publish`: the databases of several formats are then renamed in one short moment
    seconds["finish"] = time.perf_counter() - started - seconds["index"]


def _index(tmp: Path, table_root: int, trend_stat1, pages: TablePages | None) -> None:
    """The read indexes of the database at TMP, whose trend_data starts at page TABLE_ROOT and whose PAGES, if
    any, may still be being copied: the index pages are made from their keys meanwhile."""
    keys = pages.keys if pages is not None else None
    if keys is None and pages is not None:
        pages.wait()  # the keys are read from trend_data's pages: all must be in place
    # trend_data's sqlite_stat1 rows counted as the keys are sorted, unless the loader counted them already
    roots, counted = write_pages(tmp, table_root, keys, count=trend_stat1 is None) or (None, None)
    if pages is not None:
        pages.wait()  # SQLite opens the file next
    if roots is not None:
        with _reopened(tmp) as named:
            name_pages(named, roots)
    with _reopened(tmp) as indexed:  # a new connection: it reads the schema with the named indexes
        build_indexes(indexed, roots is not None, trend_stat1 or counted)


@contextlib.contextmanager
def _reopened(path: Path):
    """A new build connection to the database at PATH, closed at the end."""
    conn = connection.Connection(path)
    try:
        for pragma in schema.BUILD_PRAGMAS:
            conn.execute(pragma)
        yield conn
    finally:
        conn.close()


def abandon(conn: connection.Connection, tmp: Path) -> None:
    """A failed build: close it and remove its file; the database in place, if any, is untouched."""
    try:
        conn.close()
    finally:
        tmp.unlink(missing_ok=True)
        interrupt.finished(tmp)


def publish_all(builders: list) -> None:
    """Move sealed builds into place, one right after another. What is in a database's place and is not a
    database is the one failure to expect here: it is looked for first, so that it stops them all."""
    for builder in builders:
        check_place(builder.final)
        settle_journal(builder.final)
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


def check_place(final: Path) -> None:
    """Only a database (or an empty file) at FINAL is replaced: a document that happens to have its name is not
    trendconv's to destroy (docs/migration.md, "replacing an old database")."""
    try:
        if final.is_dir():
            raise OutputError(f"{final}: cannot write the database: it is a directory")
        if final.exists() and not final.is_file():  # a FIFO would block the read below
            raise OutputError(f"{final}: cannot write the database: something that is not a file has its name")
        with open(final, "rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:  # what cannot be read cannot be told from a document
        raise OutputError(f"{final}: cannot write the database: cannot read what is there: {os_reason(exc)}") from None
    if head and head != SQLITE_HEADER:
        raise OutputError(
            f"{final}: cannot write the database: a file that is not a SQLite database has its name; "
            f"move it away (`mv '{final}' '{final}.bak'`) or choose another `out`"
        )


def settle_journal(final: Path) -> None:
    """A writer killed in a transaction on the database at FINAL (a follower, docs/live.md §4) left its rollback
    journal beside it, and SQLite would roll that journal into whatever file next has FINAL's name: into the new
    database, which it would corrupt. Opened once, the old database takes its journal back (SQLite removes it);
    one that is still there (its database is gone, or cannot be opened) belongs to no database that stays."""
    journal = final.with_name(f"{final.name}-journal")
    if not journal.is_file():
        return
    if final.is_file():
        with contextlib.suppress(connection.Error):
            old = connection.Connection(final)
            try:
                old.execute("SELECT count(*) FROM sqlite_master").fetchall()  # a read rolls a hot journal back
            finally:
                old.close()
    try:
        journal.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputError(
            f"{journal}: cannot remove the journal of the database it replaces: {os_reason(exc)}"
        ) from None


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


def remove_dead_temporaries(out_dir: Path, db_name: str) -> None:
    """Temporary builds of killed loads: `.<db>.<pid>.tmp` whose process is gone."""
    for path in out_dir.glob(f".{db_name}.*.tmp"):
        pid = path.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not alive(int(pid)):
            path.unlink(missing_ok=True)


def stage_shards(
    fmt,
    shard_list: list,
    out_dir: Path,
    *,
    index: bool = True,
    on_shard: Callable | None = None,
    name: str | None = None,
    carry=None,
):
    """The builder of OUT_DIR/NAME (by default the format's database) fed SHARD_LIST (in processing order), sealed:
    the database is complete at its temporary path; `publish` moves it into place, `abort` drops it."""
    builder = fmt.builder(out_dir, index=index, name=name, carry=carry)
    try:
        if not fmt.streams:
            builder.plan(metas_of(shard_list))  # read once: not every meta at once
        add_shards(builder, shard_list, on_shard)
        builder.seal()
    except BaseException:
        builder.abort()
        raise
    return builder


def add_shards(builder, shard_list: Iterable, on_shard) -> None:
    """SHARD_LIST (whole or packed, trendconv.loading.records) into BUILDER, each whole only while it is added."""
    for shard in shard_list:
        builder.add(unpacked(shard))
        if on_shard:
            on_shard(shard)
