"""What every format's appender shares (trendconv.formats.contract.Appender): the connection to a database in
place, and the parts of a batch's transaction that do not depend on the format."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from trendconv import interrupt
from trendconv.errors import OutputError
from trendconv.faults import fault_point
from trendconv.loading import connection, schema
from trendconv.loading.tags import write_tags
from trendconv.summaries import LoadSummary

WAIT_STEP = 0.05  # seconds between two tries of a commit that a reader holds up
NOTICE_AFTER = 1.0  # seconds of waiting after which the wait is said
_notices: list[Callable[[str], None]] = []  # the innermost `notices` says a wait


@contextmanager
def notices(say: Callable[[str], None]) -> Iterator[None]:
    """Meanwhile a commit that waits for readers is said through SAY."""
    _notices.append(say)
    try:
        yield
    finally:
        _notices.pop()


def open_live(final: Path) -> connection.Connection:
    """A connection to the database FINAL as it is, set for appending while readers have it open."""
    if not final.is_file():
        raise OutputError(f"{final}: the database to append to is gone")
    conn = connection.Connection(final)
    try:
        for pragma in schema.APPEND_PRAGMAS:
            conn.execute(pragma)
        wait_for_readers(conn, final)
    except BaseException:
        conn.close()
        raise
    return conn


def wait_for_readers(conn: connection.Connection | apsw.Connection, final: Path) -> None:
    """A commit on CONN waits as long as a reader holds FINAL (a read transaction left open, say), and says so
    once it waited NOTICE_AFTER: SQLite gives a writer the file only when no reader holds it, and readers that
    start meanwhile wait too. A signal ends the wait: KeyboardInterrupt, and closing CONN rolls the batch back."""

    def busy(tries: int) -> bool:
        interrupt.check()
        if tries == round(NOTICE_AFTER / WAIT_STEP):
            for say in _notices[-1:]:
                say(
                    f"{final}: waiting for a reader that holds the database to end its read (readers that start now "
                    "wait too); Ctrl-C stops the follower without this batch"
                )
        time.sleep(WAIT_STEP)
        return True

    conn.set_busy_handler(busy)


def read_mark(final: Path) -> int:
    """The batch FINAL holds (0: none of a follower's, no database, or a file that is not one: never ours)."""
    if not final.is_file():
        return 0
    try:
        conn = connection.Connection(final)
    except apsw.Error:
        return 0
    try:
        return int(conn.execute(schema.READ_MARK).fetchall()[0][0])
    except apsw.Error:
        return 0
    finally:
        conn.close()


def insert_targets(conn: connection.Connection, targets: list[tuple[int, str, int, int]]) -> list:
    """TARGETS (id, name, vpp_stage, micro_step) the database does not hold yet, inserted in id order."""
    known = {row[0] for row in conn.execute(schema.TARGET_IDS)}
    new = sorted(target for target in targets if target[0] not in known)
    conn.executemany(schema.INSERT_TARGET, new)
    return new


def rewrite_tags(conn: connection.Connection, by_metric: dict, names: dict[int, str], rule) -> LoadSummary:
    """Every tag and link again, numbered as a batch build of the same shards numbers them (a tag's id depends
    on its metric's block, so a new one may renumber those after it): tags are few next to the trend rows."""
    for statement in schema.DELETE_TAGS:
        conn.execute(statement)
    summary = LoadSummary()
    write_tags(conn, by_metric, names, rule, summary)
    return summary


def commit(conn: connection.Connection, mark: int) -> None:
    """End the batch's transaction, recording MARK in it (trendconv.following.record)."""
    conn.execute(schema.set_mark(mark))
    fault_point("follow-commit")
    conn.commit()
