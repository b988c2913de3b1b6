"""The read indexes the Trend Analyzer's queries need, and the statistics SQLite's planner reads.

trend_data's indexes are written as b-tree pages straight into the closed database file (trendconv.loading.btree,
or its C twin trendconv.loading._btree) and then named in sqlite_schema; where the keys do not fit that plan,
SQLite builds them with CREATE INDEX, as it does the small table's index.
"""

from __future__ import annotations

from pathlib import Path

from trendconv import native
from trendconv.loading import btree, connection, schema, stat1

_NATIVE = native.extension(native.BTREE)
write_indexes = _NATIVE.write_indexes if _NATIVE is not None else btree.write_indexes


def write_pages(
    path: Path, table_root: int, keys=None, *, count: bool = False
) -> tuple[dict[str, int], list | None] | None:
    """trend_data's indexes appended to the database at PATH (no connection open on it), whose table b-tree
    starts at page TABLE_ROOT: each index's root page by name, and with COUNT trend_data's sqlite_stat1 rows
    counted from the sorted keys (else, or where they cannot be: None; `stat1.counted_rows`); or None (and the
    file as it was) where they do not fit the plan. With KEYS (trendconv.loading.table.TablePages.keys), the
    table's pages are not read."""
    with open(path, "r+b") as file:
        layout = btree.layout(file.read(btree.HEADER_BYTES), file.seek(0, 2))
        if layout is None:
            return None
        page_size, usable, small_ints, pages = layout
        entries = [schema.index_entry(columns) for columns in schema.TREND_INDEXES.values()]
        fd = file.fileno()
        written = write_indexes(fd, page_size, usable, small_ints, table_root, entries, pages + 1, keys, count)
        if written is None:
            return None
        pages = file.seek(0, 2) // page_size
        file.seek(28)
        file.write(pages.to_bytes(4, "big"))  # the header's page count, which SQLite trusts over the file's size
    roots, counts = written if count else (written, None)
    return dict(zip(schema.TREND_INDEXES, roots)), counts and stat1.counted_rows(counts)


def name_pages(conn: connection.Connection, roots: dict[str, int]) -> None:
    """The indexes whose pages `write_pages` wrote, made known to SQLite: their rows in sqlite_schema, as CREATE
    INDEX would have written them, and the schema's version moved on as far. The connection must be reopened
    before it runs anything else, so that it reads the new schema."""
    version = conn.execute(schema.SCHEMA_VERSION).fetchall()[0][0]
    conn.execute(schema.WRITABLE_SCHEMA.format("ON"))
    for name, root in roots.items():
        sql = schema.index_sql(name, "trend_data", schema.TREND_INDEXES[name])
        conn.execute(schema.NAME_INDEX, (name, root, sql))
    conn.execute(f"{schema.SCHEMA_VERSION} = {version + len(roots)}")
    conn.commit()
    conn.execute(schema.WRITABLE_SCHEMA.format("OFF"))


def build_indexes(
    conn: connection.Connection, written: bool, trend_stat1: list[tuple[str, str, str]] | None = None
) -> None:
    """The read indexes not WRITTEN as pages, then ANALYZE; with TREND_STAT1 (trend_data's sqlite_stat1 rows,
    known from the load) ANALYZE reads only the small tables."""
    if not written:
        for name, columns in schema.TREND_INDEXES.items():
            conn.execute(schema.index_sql(name, "trend_data", columns))
    for name, (table, columns) in schema.OTHER_INDEXES.items():
        conn.execute(schema.index_sql(name, table, columns))
    conn.commit()
    if trend_stat1 is None:
        conn.execute("ANALYZE")
    else:
        for table in schema.SMALL_TABLES:
            conn.execute(f"ANALYZE {table}")
        conn.executemany("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)", trend_stat1)
    conn.commit()
