"""Inserting trend rows: through trendconv_columns where SQLite has it (load/_columns.c), else as bound values;
and the value rules both formats apply first."""

from __future__ import annotations

from itertools import chain

import pyarrow as pa
import pyarrow.compute as pc

from trendconv.loading import connection, schema

# Trend rows per INSERT statement, at most: with 8 to 18 columns this stays under SQLite's oldest limit of
# 999 parameters per statement.
_BATCH_ROWS = 64
_MAX_PARAMETERS = 999
VALUE_LIMIT = 1e9
INF_VALUE = VALUE_LIMIT + 1
# As Arrow scalars once, not converted on every call (see trendconv.loading.ids).
_LIMITS = {value: pa.scalar(value, pa.float64()) for value in (VALUE_LIMIT, -VALUE_LIMIT, INF_VALUE, -INF_VALUE, 0.0)}


def clean_values(column: pa.ChunkedArray) -> pa.Array:
    """docs/dump-format.md §7 steps 3-5 (docs/monitor-format.md §8 alike): ±inf to ±(1e9+1), clip to ±1e9, NaN to
    NULL (as SQLite stores a bound NaN)."""
    values = column.combine_chunks()
    clipped = pc.max_element_wise(pc.min_element_wise(values, _LIMITS[VALUE_LIMIT]), _LIMITS[-VALUE_LIMIT])
    infinite = pc.if_else(pc.greater(values, _LIMITS[0.0]), _LIMITS[INF_VALUE], _LIMITS[-INF_VALUE])
    cleaned = pc.if_else(pc.is_inf(values), infinite, clipped)
    return pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), cleaned)


def insert_trend(conn: connection.Connection, rows: pa.Table, stats, *, clean: bool = False) -> int:
    """Insert ROWS (trend_data's columns, in order) in table order; returns how many were inserted (INSERT
    OR IGNORE: a duplicate key keeps the row inserted first). With CLEAN, the STATS columns are raw values
    that `clean_values` applies to first: trendconv_columns does that as it reads them, on this thread."""
    before = conn.total_changes
    if conn.reads_columns and rows.num_columns <= connection.COLUMNS_MAX:
        arrays = [rows[name].combine_chunks() for name in rows.column_names]
        cleaned = [rows.column_names.index(stat) for stat in stats] if clean else []
        conn.insert_columns(schema.insert_trend_columns(len(arrays)), arrays, cleaned)
    else:
        _insert_values(conn, _cleaned(rows, stats) if clean else rows, stats)
    return conn.total_changes - before


def _cleaned(rows: pa.Table, stats) -> pa.Table:
    for stat in stats:
        rows = rows.set_column(rows.column_names.index(stat), stat, clean_values(rows[stat]))
    return rows


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
