"""Rebuilding a database in place: a batch build of every shard (trendconv.loading), copied into the database
file that readers have open in one transaction, so that they see the old contents or the new, never a mix, and
never lose the file (a database replaced by rename is never seen by the Trend Analyzer, docs/trend-db.md §6)."""

from __future__ import annotations

from pathlib import Path

import apsw

from trendconv.faults import fault_point
from trendconv.following import live
from trendconv.formats import Format
from trendconv.loading import schema
from trendconv.loading.build import check_place, publish_all, writes_db
from trendconv.loading.stage import stage_shards
from trendconv.shards import Shard
from trendconv.summaries import LoadSummary


def rebuild(fmt: Format, shard_list: list[Shard], final: Path, mark: int, *, index: bool, carry=None) -> LoadSummary:
    """FINAL as a batch build of SHARD_LIST (in the order a batch build takes them; CARRY for one database of a
    split) makes it, marked MARK: moved into place when there is no database yet, else copied into it."""
    check_place(final)  # before the build, which a document in its place would only waste
    builder = stage_shards(fmt, shard_list, final.parent, index=index, name=final.name, carry=carry)
    try:
        _Copy(builder.tmp).mark(mark)
        if final.exists():
            _Copy(final).replace_with(builder.tmp, mark)
            builder.summary.db, builder.summary.size = final, final.stat().st_size
        else:
            publish_all([builder])
            return builder.summary
    finally:
        builder.abort()  # removes the build unless it was moved into place
    return builder.summary


class _Copy:
    """One database file, through its own SQLite connection (ATTACH needs one outside any transaction)."""

    def __init__(self, final: Path):
        self.final = final

    @writes_db
    def mark(self, mark: int) -> None:
        conn = apsw.Connection(str(self.final))
        try:
            conn.execute(schema.set_mark(mark))
        finally:
            conn.close()

    @writes_db
    def replace_with(self, build: Path, mark: int) -> None:
        conn = apsw.Connection(str(self.final))
        try:
            for pragma in schema.APPEND_PRAGMAS:
                conn.execute(pragma)
            live.wait_for_readers(conn, self.final)
            conn.execute("ATTACH DATABASE ? AS fresh", (str(build),))
            conn.execute("BEGIN IMMEDIATE")
            _copy(conn)
            conn.execute(schema.set_mark(mark))
            fault_point("follow-commit")
            conn.execute("COMMIT")
        finally:
            conn.close()  # an unfinished transaction is rolled back


def _copy(conn: apsw.Connection) -> None:
    """Drop every table of main, create fresh's in its order, fill them, then the indexes and statistics."""
    for (name,) in conn.execute(schema.OWN_TABLES.format(schema="main")).fetchall():
        conn.execute(f"DROP TABLE main.{_q(name)}")
    for name, sql in conn.execute(schema.OWN_OBJECTS.format(schema="fresh"), ("table",)).fetchall():
        conn.execute(sql)
        conn.execute(f"INSERT INTO main.{_q(name)} SELECT * FROM fresh.{_q(name)}")
    for system in ("sqlite_sequence", "sqlite_stat1"):
        if _exists(conn, "fresh", system):
            if not _exists(conn, "main", system):
                conn.execute("ANALYZE main.global_stats")  # the one way to make sqlite_stat1
            conn.execute(f"DELETE FROM main.{system}")
            conn.execute(f"INSERT INTO main.{system} SELECT * FROM fresh.{system}")
        elif _exists(conn, "main", system):
            conn.execute(f"DELETE FROM main.{system}")
    for _, sql in conn.execute(schema.OWN_OBJECTS.format(schema="fresh"), ("index",)).fetchall():
        conn.execute(sql)


def _exists(conn: apsw.Connection, schema_name: str, table: str) -> bool:
    rows = conn.execute(f"SELECT 1 FROM {schema_name}.sqlite_master WHERE type = 'table' AND name = ?", (table,))
    return bool(rows.fetchall())


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
