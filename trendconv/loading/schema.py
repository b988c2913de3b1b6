"""The trend database schemas (docs/dump-format.md §8.2-§8.3, docs/monitor-format.md §5) and the read indexes.

This is the one place to edit them: every SQL statement trendconv runs is here. The formats supply only names
(their metrics, stat columns, database file names, in trendconv/formats/<name>/); the two global_stats layouts
are msprobe's, one per database, and named after it.

A change here followed by `trendconv load WORK --db OUT` gives the new database without re-parsing.
"""

from __future__ import annotations

# The tables both databases share; only trend_data's stat columns and global_stats differ.
DIMENSION_TABLES = (
    """CREATE TABLE IF NOT EXISTS monitoring_targets (
    target_id INTEGER PRIMARY KEY AUTOINCREMENT,
    target_name TEXT NOT NULL,
    vpp_stage INTEGER NOT NULL,
    micro_step INTEGER NOT NULL DEFAULT 0,
    UNIQUE(target_name, vpp_stage, micro_step)
)""",
    """CREATE TABLE IF NOT EXISTS monitoring_metrics (
    metric_id INTEGER PRIMARY KEY AUTOINCREMENT,
    metric_name TEXT UNIQUE NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS monitoring_tags (
    tag_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tag_name TEXT NOT NULL,
    category TEXT NOT NULL,
    metric_id INTEGER NOT NULL,
    UNIQUE(tag_name, category, metric_id),
    FOREIGN KEY (metric_id) REFERENCES monitoring_metrics(metric_id)
)""",
    # The misspelt table name in the foreign key is the reference's (docs/dump-format.md Q19); foreign keys are not
    # enforced.
    """CREATE TABLE IF NOT EXISTS tag_target_mapping (
    tag_id INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    PRIMARY KEY (tag_id, target_id),
    FOREIGN KEY (tag_id) REFERENCES monitoring_tags(tag_id),
    FOREIGN KEY (target_id) REFERENCES monitoring_target(target_id)
)""",
)


# trend_data's primary key: a WITHOUT ROWID table's record holds these first, in this order, then the other columns.
TREND_KEY = ("rank", "step", "target_id", "metric_id")


def trend_data_ddl(stats) -> str:
    return f"""CREATE TABLE IF NOT EXISTS trend_data (
    rank INTEGER NOT NULL,
    step INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    metric_id INTEGER NOT NULL,
    {", ".join(f"{stat} REAL DEFAULT NULL" for stat in stats)},
    PRIMARY KEY ({", ".join(TREND_KEY)}),
    FOREIGN KEY (target_id) REFERENCES monitoring_targets(target_id),
    FOREIGN KEY (metric_id) REFERENCES monitoring_metrics(metric_id)
) WITHOUT ROWID"""


def insert_trend(stats, rows: int = 1) -> str:
    """INSERT OR IGNORE of ROWS rows in one statement. SQLite inserts them in order, each on its own (a
    duplicate is ignored alone), so the table is the same as row by row, for far less VM work."""
    values = f"({', '.join('?' * (4 + len(stats)))})"
    return f"INSERT OR IGNORE INTO trend_data VALUES {', '.join([values] * rows)}"


def insert_trend_columns(width: int) -> str:
    """INSERT OR IGNORE of the rows trendconv_columns reads from WIDTH Arrow arrays (load.connection), in
    their order: the same table as `insert_trend` row by row."""
    columns = ", ".join(f"c{i}" for i in range(width))
    return f"INSERT OR IGNORE INTO trend_data SELECT {columns} FROM trendconv_columns(?)"


def dump_global_stats_ddl(metrics) -> str:
    """dump_data.trend.db's layout: the rank, then the step bounds, then one TEXT column per metric. Created after
    the data, as the reference does; the plugin orders it by ROWID, so never WITHOUT ROWID."""
    return f"""CREATE TABLE IF NOT EXISTS global_stats (
    max_rank INTEGER DEFAULT 0,
    min_step INTEGER DEFAULT 0,
    max_step INTEGER DEFAULT 0,
    {", ".join(f"{metric} TEXT DEFAULT NULL" for metric in metrics)}
)"""


INSERT_METRIC = "INSERT OR IGNORE INTO monitoring_metrics (metric_name) VALUES (?)"
INSERT_TARGET = "INSERT INTO monitoring_targets (target_id, target_name, vpp_stage, micro_step) VALUES (?, ?, ?, ?)"
# The dump loader gives target ids as msprobe does; its sequence can end past the largest id (docs/dump-format.md §8.4).
SET_TARGET_SEQUENCE = "UPDATE sqlite_sequence SET seq = ? WHERE name = 'monitoring_targets'"

INSERT_TAG = "INSERT INTO monitoring_tags (tag_id, tag_name, category, metric_id) VALUES (?, ?, ?, ?)"
INSERT_TAG_TARGET = "INSERT INTO tag_target_mapping (tag_id, target_id) VALUES (?, ?)"

# What the Trend Analyzer's queries need (docs/trend-db.md §7); ANALYZE only ever runs after these. trend_data's
# are written as pages where they can be (trendconv.loading.btree), in this order, with the text SQLite keeps.
TREND_INDEXES = {"idx_trend_metric_step": ("metric_id", "step"), "idx_trend_metric_target": ("metric_id", "target_id")}
OTHER_INDEXES = {"idx_ttm_target": ("tag_target_mapping", ("target_id", "tag_id"))}


# Writing index pages (trendconv.loading.btree): where trend_data's rows start, and an index named in the schema.
TREND_ROOT = "SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'trend_data'"
NAME_INDEX = "INSERT INTO sqlite_schema (type, name, tbl_name, rootpage, sql) VALUES ('index', ?, 'trend_data', ?, ?)"
SCHEMA_VERSION = "PRAGMA schema_version"
WRITABLE_SCHEMA = "PRAGMA writable_schema = {}"


def index_sql(name: str, table: str, columns) -> str:
    """An index's CREATE statement as SQLite keeps it in sqlite_schema (without IF NOT EXISTS)."""
    return f"CREATE INDEX {name} ON {table}({', '.join(columns)})"


def index_entry(columns) -> tuple[int, ...]:
    """Where the columns of an index entry of trend_data over COLUMNS are in the table's record: the index's
    columns, then the primary key's others in its order (SQLite's layout of an index on a WITHOUT ROWID table)."""
    entry = [*columns, *(column for column in TREND_KEY if column not in columns)]
    return tuple(TREND_KEY.index(column) for column in entry)


# Every table but trend_data, whose sqlite_stat1 rows a loader may write itself (ANALYZE would scan it).
SMALL_TABLES = ("monitoring_targets", "monitoring_metrics", "monitoring_tags", "tag_target_mapping", "global_stats")

# Safe while building: the file is private until it is renamed into place, and a failed build is removed.
# Rows arrive in (rank, step) runs, so inserts touch few pages: an 8 MiB cache loads as fast as 32 MiB
# (the file bytes do not depend on it) and keeps the loading process small while workers parse.
# temp_store stays the default (files): the index sorts spill there, and SQLite's in-memory temporary
# files made the two index builds of 2 M rows ~1 s slower (and would hold a large database's sort in RAM).
BUILD_PRAGMAS = (
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA cache_size = -8192",
)


def metric_ids(metrics) -> dict[str, int]:
    """monitoring_metrics' ids: METRICS numbered from 1, in order."""
    return {metric: position + 1 for position, metric in enumerate(metrics)}


def monitor_global_stats_ddl(metrics) -> str:
    """monitor_data.trend.db's layout (docs/monitor-format.md §5-§6): the step bounds first, then the rank; one TEXT
    column per metric follows."""
    columns = ["min_step INTEGER DEFAULT 0", "max_step INTEGER DEFAULT 0", "max_rank INTEGER DEFAULT 0"]
    columns += [f"{metric} TEXT DEFAULT NULL" for metric in metrics]
    return "CREATE TABLE IF NOT EXISTS global_stats (\n    " + ",\n    ".join(columns) + "\n)"


def insert_global_stats(columns: int) -> str:
    return f"INSERT INTO global_stats VALUES ({', '.join('?' * columns)})"


# ---- appending to a database in place (trendconv.following, docs/live.md)

# A follower's connection: the default rollback journal, which the Trend Analyzer needs (docs/trend-db.md §3), and
# full syncs. While a reader holds the file, its commit waits (trendconv.following.live.wait_for_readers).
APPEND_PRAGMAS = ("PRAGMA journal_mode = DELETE", "PRAGMA synchronous = FULL")
# Which batch of appends a database holds: written in the batch's own transaction (the header is journaled).
READ_MARK = "PRAGMA user_version"


def set_mark(mark: int) -> str:
    return f"PRAGMA user_version = {int(mark)}"


def update_global_stats(columns) -> str:
    """The one global_stats row, updated in place (the Trend Analyzer reads the last row by ROWID)."""
    assignments = ", ".join(f"{column} = ?" for column in columns)
    return f"UPDATE global_stats SET {assignments} WHERE ROWID = (SELECT max(ROWID) FROM global_stats)"


DELETE_TAGS = ("DELETE FROM tag_target_mapping", "DELETE FROM monitoring_tags")
TARGET_IDS = "SELECT target_id FROM monitoring_targets"
# A database's own tables (not SQLite's), and its tables or indexes with their SQL in creation order.
OWN_TABLES = "SELECT name FROM {schema}.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
OWN_OBJECTS = (
    "SELECT name, sql FROM {schema}.sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL "
    "ORDER BY rowid"
)
