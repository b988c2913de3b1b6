"""The read indexes the Trend Analyzer's queries need, and the statistics SQLite's planner reads."""

from __future__ import annotations

from trendconv.loading import connection, schema


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
