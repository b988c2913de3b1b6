"""The load stage: exact contents, determinism, atomic replacement, indexes, refusals."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sqlite3
import threading
from pathlib import Path

import apsw
import pyarrow as pa
import pytest
from helpers import (
    A1_CONSTRUCT,
    A1_DATA,
    A2_CONSTRUCT,
    A2_DATA,
    TAGS_BY_NAME,
    TREND_BY_NAME,
    V,
    invoke,
    query,
    run_cli,
    write_file_set,
)

from datagen.dump import generate
from trendconv import api, shards
from trendconv.errors import DataError
from trendconv.formats import FORMATS
from trendconv.formats.dump.ids import flush_starts
from trendconv.formats.dump.shard import SCHEMA
from trendconv.loading import build, connection, insert, schema, table

STATS4 = ("norm,max,min,mean",) * 4


def convert(data: Path, root: Path, *, micro_step: bool = True, workers: int = 1, index: bool = True):
    work, out = root / "work", root / "out"
    api.parse(data, work, api.ParseOptions(micro_step=micro_step), workers=workers, input_format="dump")
    return api.load(work, out, index=index, input_format="dump")


def trend(db: Path) -> list[tuple]:
    return query(db, TREND_BY_NAME)


A1_FILE_MICRO = [
    (0, 0, "Functional.linear.input.0", 0, "forward", 2.0, 1.0, 0.0, 0.5),
    (0, 0, "Functional.linear.output.0", 0, "forward", 4.0, 3.0, -3.0, 0.0),
    (0, 0, "Module.net.Net.input.0", 0, "forward", 2.0, 1.0, 0.0, 0.5),
    (0, 0, "Module.net.Net.output.0", 0, "forward", 3.0, 2.0, -1.0, 0.25),
    (0, 0, "Module.net.Net.parameters.weight", 0, "forward", 9.0, 9.0, 9.0, 9.0),
    (0, 0, "Functional.linear.input.0", 0, "backward", 0.3, 0.2, -0.2, 0.0),
    (0, 0, "Module.net.Net.input.0", 0, "backward", 0.3, 0.2, -0.2, 0.0),
    (0, 0, "Module.net.Net.output.0", 0, "backward", 0.4, 0.1, -0.1, 0.0),
    (0, 0, "Module.net.Net.weight", 0, "parameters_grad", 0.05, 0.01, -0.01, 0.0),
    (0, 1, "Module.net.Net.input.0", 0, "forward", 2.5, 1.5, 0.0, 0.5),
    (0, 1, "Module.net.Net.output.0", 0, "forward", 3.5, 2.5, -1.0, 1000000001.0),
    (0, 1, "Functional.linear.input.0", 0, "recompute", 2.5, 1.5, 0.0, 0.5),
    (0, 1, "Functional.linear.output.0", 0, "recompute", 5.0, 4.0, -4.0, None),
]

A1_TAGS_MICRO = [
    ("forward", "Functional.linear", "function", "Functional.linear.input.0#0 Functional.linear.output.0#0"),
    (
        "forward",
        "Module",
        "default",
        "Module.net.Net.input.0#0 Module.net.Net.output.0#0 Module.net.Net.parameters.weight#0",
    ),
    ("forward", "input.0", "index", "Module.net.Net.input.0#0 Functional.linear.input.0#0"),
    (
        "forward",
        "net.Net",
        "module",
        "Module.net.Net.input.0#0 Module.net.Net.output.0#0 Module.net.Net.parameters.weight#0",
    ),
    ("forward", "output.0", "index", "Module.net.Net.output.0#0 Functional.linear.output.0#0"),
    ("forward", "parameters", "default", "Module.net.Net.parameters.weight#0"),
    ("forward", "parameters.weight", "index", "Module.net.Net.parameters.weight#0"),
    ("backward", "Functional.linear", "function", "Functional.linear.input.0#0"),
    ("backward", "Module", "default", "Module.net.Net.input.0#0 Module.net.Net.output.0#0"),
    ("backward", "input.0", "index", "Module.net.Net.input.0#0 Functional.linear.input.0#0"),
    ("backward", "net.Net", "module", "Module.net.Net.input.0#0 Module.net.Net.output.0#0"),
    ("backward", "output.0", "index", "Module.net.Net.output.0#0"),
    (
        "recompute",
        "Functional.linear",
        "function",
        "Functional.linear.input.0#0 Functional.linear.output.0#0",
    ),
    ("recompute", "input.0", "index", "Functional.linear.input.0#0"),
    ("recompute", "output.0", "index", "Functional.linear.output.0#0"),
    ("parameters_grad", "Module", "default", "Module.net.Net.weight#0"),
    ("parameters_grad", "Net.weight", "index", "Module.net.Net.weight#0"),
    ("parameters_grad", "net", "module", "Module.net.Net.weight#0"),
]


def shifted(rows: list[tuple], by: int) -> list[tuple]:
    return [(row[0], row[1] + by, *row[2:]) for row in rows]


def test_a1_micro_step_contents(a1_data, tmp_path):
    db = convert(a1_data, tmp_path).db
    assert trend(db) == A1_FILE_MICRO + shifted(A1_FILE_MICRO, 2)
    assert query(db, "SELECT * FROM monitoring_targets ORDER BY target_id") == [
        (1, "Module.net.Net.input.0", 0, 0),
        (2, "Module.net.Net.output.0", 0, 0),
        (3, "Module.net.Net.parameters.weight", 0, 0),
        (4, "Functional.linear.input.0", 0, 0),
        (5, "Functional.linear.output.0", 0, 0),
        (11, "Module.net.Net.weight", 0, 0),  # 6-8: backward re-inserts of 1, 2, 4; 9, 10: recompute's of 4, 5
    ]
    assert query(db, "SELECT * FROM sqlite_sequence") == [
        ("monitoring_metrics", 4),
        ("monitoring_targets", 11),
        ("monitoring_tags", 18),
    ]
    assert query(db, "SELECT * FROM global_stats") == [(0, 0, 3, *STATS4)]
    assert query(db, TAGS_BY_NAME) == A1_TAGS_MICRO
    assert query(db, "SELECT count(*) FROM tag_target_mapping") == [(29,)]
    assert query(db, "SELECT * FROM monitoring_metrics") == [
        (1, "forward"),
        (2, "backward"),
        (3, "recompute"),
        (4, "parameters_grad"),
    ]


def test_tag_ids_follow_the_documented_order(a1_data, tmp_path):
    """Metrics in order of their first target; inside one, tags in order of first use by its targets."""
    db = convert(a1_data, tmp_path).db
    assert query(db, "SELECT tag_id, tag_name, category, metric_id FROM monitoring_tags ORDER BY tag_id") == [
        (1, "input.0", "index", 1),
        (2, "Module", "default", 1),
        (3, "net.Net", "module", 1),
        (4, "output.0", "index", 1),
        (5, "parameters.weight", "index", 1),
        (6, "parameters", "default", 1),
        (7, "Functional.linear", "function", 1),
        (8, "input.0", "index", 3),  # recompute's first row comes before the first backward key
        (9, "Functional.linear", "function", 3),
        (10, "output.0", "index", 3),
        (11, "input.0", "index", 2),
        (12, "Module", "default", 2),
        (13, "net.Net", "module", 2),
        (14, "output.0", "index", 2),
        (15, "Functional.linear", "function", 2),
        (16, "Net.weight", "index", 4),
        (17, "Module", "default", 4),
        (18, "net", "module", 4),
    ]


def test_a1_step_mode_contents(a1_data, tmp_path):
    db = convert(a1_data, tmp_path, micro_step=False).db
    rows = trend(db)
    assert len(rows) == 26
    assert [row for row in rows if row[1] == 0] == [row for row in shifted(rows, -1) if row[1] == 0]
    assert [row[2:] for row in rows if row[1] == 0 and row[4] == "recompute"] == [
        ("Functional.linear.input.0", 1, "recompute", 2.5, 1.5, 0.0, 0.5),
        ("Functional.linear.output.0", 1, "recompute", 5.0, 4.0, -4.0, None),
    ]
    assert query(db, "SELECT * FROM monitoring_targets ORDER BY target_id") == [
        (1, "Module.net.Net.input.0", 0, 0),
        (2, "Module.net.Net.output.0", 0, 0),
        (3, "Module.net.Net.parameters.weight", 0, 0),
        (4, "Functional.linear.input.0", 0, 0),
        (5, "Functional.linear.output.0", 0, 0),
        (6, "Module.net.Net.input.0", 0, 1),
        (7, "Module.net.Net.output.0", 0, 1),
        (11, "Functional.linear.input.0", 0, 1),  # 8-10: backward re-inserts
        (12, "Functional.linear.output.0", 0, 1),
        (13, "Module.net.Net.weight", 0, 0),
    ]
    assert query(db, "SELECT seq FROM sqlite_sequence WHERE name = 'monitoring_targets'") == [(13,)]
    assert query(db, "SELECT * FROM global_stats") == [(0, 0, 1, *STATS4)]
    assert query(db, "SELECT count(*) FROM monitoring_tags") == [(18,)]
    assert query(db, "SELECT count(*) FROM tag_target_mapping") == [(35,)]


A2_TARGETS_MICRO = [
    (1, "Module.m.M.input.0", 0, 0),
    (2, "Module.m.M.parameters.w", 0, 0),
    (3, "Functional.relu.input.0", 0, 0),
    (4, "Module.m.M.w", 0, 0),
    (5, "Module.m.M.w", 0, 1),
    (6, "Module.m.M.w", 0, 5),
]
A2_TARGETS_STEP = [
    (1, "Module.m.M.input.0", 0, 0),
    (2, "Module.m.M.parameters.w", 0, 0),
    (3, "Functional.relu.input.0", 0, 3),
    (4, "Module.m.M.input.0", 0, 1),
    (5, "Module.m.M.parameters.w", 0, 1),
    (6, "Module.m.M.w", 0, 0),
    (7, "Module.m.M.w", 0, 1),
    (8, "Module.m.M.w", 0, 5),
]


@pytest.mark.parametrize(
    ("micro_step", "expected_steps", "targets", "links"),
    [(True, (0, 0, 1), A2_TARGETS_MICRO, 18), (False, (0, 0, 0), A2_TARGETS_STEP, 25)],
)
def test_a2_parameter_grads_and_duplicate(tmp_path, micro_step, expected_steps, targets, links):
    write_file_set(tmp_path / "data" / "step0" / "rank0", A2_DATA, A2_CONSTRUCT)
    summary = convert(tmp_path / "data", tmp_path, micro_step=micro_step)
    grads = [row[1:] for row in trend(summary.db) if row[4] == "parameters_grad"]
    if micro_step:
        assert grads == [
            (0, "Module.m.M.w", 0, "parameters_grad", 0.1, 0.1, 0.1, 0.1),
            (0, "Module.m.M.w", 5, "parameters_grad", 0.5, 0.5, 0.5, 0.5),
            (1, "Module.m.M.w", 1, "parameters_grad", 0.2, 0.2, 0.2, 0.2),
        ]
    else:
        assert [row[1:4] for row in grads] == [
            ("Module.m.M.w", 0, "parameters_grad"),
            ("Module.m.M.w", 1, "parameters_grad"),
            ("Module.m.M.w", 5, "parameters_grad"),
        ]
    assert (summary.rows, summary.duplicates, summary.targets, summary.tag_links) == (8, 1, len(targets), links)
    assert query(summary.db, "SELECT * FROM monitoring_targets ORDER BY target_id") == targets
    assert query(summary.db, "SELECT seq FROM sqlite_sequence WHERE name = 'monitoring_targets'") == [(len(targets),)]
    assert query(summary.db, "SELECT * FROM global_stats") == [(*expected_steps, *STATS4)]


def test_micro_step_offsets_use_the_largest_count_of_each_step(tmp_path):
    data = tmp_path / "data"
    three_roots = {**A1_CONSTRUCT, "Module.extra.E.forward.0": None}
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step0" / "rank1", A1_DATA, three_roots)
    write_file_set(data / "step5" / "rank0", A1_DATA, A1_CONSTRUCT)
    db = convert(data, tmp_path).db
    assert query(db, "SELECT * FROM global_stats") == [(1, 0, 4, *STATS4)]
    assert query(db, "SELECT DISTINCT rank, step FROM trend_data ORDER BY 1, 2") == [
        (0, 0),
        (0, 1),
        (0, 3),
        (0, 4),
        (1, 0),
        (1, 1),
    ]


def test_db_bytes_identical_for_any_worker_count(tmp_path):
    data = tmp_path / "data"
    for step in range(3):
        for rank in range(3):
            write_file_set(data / f"step{step}" / f"rank{rank}", A1_DATA, A1_CONSTRUCT)
    built = [convert(data, tmp_path / f"w{workers}", workers=workers).db.read_bytes() for workers in (1, 2, 4)]
    assert built[0] == built[1] == built[2]


def test_db_bytes_identical_across_hash_seeds(a1_data, tmp_path):
    dbs = []
    for seed in ("0", "123"):
        work, out = tmp_path / f"work{seed}", tmp_path / f"out{seed}"
        assert run_cli("parse", a1_data, "--work", work, "-q", env_extra={"PYTHONHASHSEED": seed}).returncode == 0
        assert run_cli("load", work, "--db", out, "-q", env_extra={"PYTHONHASHSEED": seed}).returncode == 0
        dbs.append((out / "dump_data.trend.db").read_bytes())
    assert dbs[0] == dbs[1]


def test_killed_load_leaves_the_old_db_untouched(a1_data, tmp_path):
    summary = convert(a1_data, tmp_path)
    before = summary.db.read_bytes()
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    for fault in ("load-shard", "load-before-rename"):
        killed = run_cli("load", tmp_path / "work", "--db", tmp_path / "out", env_extra={"TRENDCONV_FAULT": fault})
        assert killed.returncode == -9
        assert summary.db.read_bytes() == before
        assert sorted(p.name for p in (tmp_path / "out").glob("*.trend.db")) == ["dump_data.trend.db"]
    again = api.load(tmp_path / "work", tmp_path / "out", input_format="dump")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".dump_data.trend.db.files.json",
        "dump_data.trend.db",
    ]
    assert query(again.db, "SELECT max_step FROM global_stats") == [(1,)]


def test_failed_load_removes_its_temporary_file(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    path = tmp_path / "work" / "dump" / "shards" / "step1_rank0.parquet"
    table = shards.read_rows(path, SCHEMA)
    metric = table.schema.get_field_index("metric")
    bogus = pa.array(["bogus"] * table.num_rows).dictionary_encode()
    shards.write_shard(path, table.set_column(metric, "metric", bogus), shards.read_meta(path, FORMATS["dump"]))
    with pytest.raises(DataError, match=f"^{path}: unknown metric 'bogus'$"):
        api.load(tmp_path / "work", tmp_path / "out", input_format="dump")
    assert list((tmp_path / "out").iterdir()) == []


def test_db_mode_is_0640_whatever_the_umask(a1_data, tmp_path):
    old = os.umask(0o002)
    try:
        db = convert(a1_data, tmp_path).db
    finally:
        os.umask(old)
    assert oct(db.stat().st_mode & 0o777) == "0o640"


def test_a_link_planted_at_the_build_path_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"not ours")
    victim.chmod(0o644)
    (tmp_path / "build.db").symlink_to(victim)
    with pytest.raises(OSError) as raised:
        build.open_build(tmp_path / "build.db")
    assert (raised.value.errno, victim.read_bytes(), oct(victim.stat().st_mode & 0o777)) == (
        errno.ELOOP,
        b"not ours",
        "0o644",
    )
    assert (tmp_path / "build.db").is_symlink()


def test_build_connection_settings(tmp_path):
    """The index sorts spill to temporary files (temp_store 0), not to SQLite's slower in-memory ones."""
    conn = build.open_build(tmp_path / "build.db")
    settings = [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("journal_mode", "temp_store", "cache_size")]
    conn.close()
    assert settings == ["off", 0, -8192]


def test_build_connection_transactions(tmp_path):
    """Like sqlite3's: a statement opens a transaction, a pragma does not, and commit ends it."""
    conn = connection.Connection(tmp_path / "build.db")
    states = [conn.execute(" pragma journal_mode = OFF").fetchone()[0], conn.in_transaction]
    conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY, y TEXT)")
    conn.executemany("INSERT OR IGNORE INTO t VALUES (?, ?)", [(1, "a"), (2, "b"), (1, "again")])
    states += [conn.in_transaction, conn.total_changes]
    conn.commit()
    states.append(conn.in_transaction)
    conn.commit()  # nothing open: no error
    conn.close()
    assert states == ["off", False, True, 2, False]
    assert query(tmp_path / "build.db", "SELECT x, y FROM t ORDER BY x") == [(1, "a"), (2, "b")]


INSERT_ABC = "INSERT INTO t SELECT c0, c1, c2 FROM trendconv_columns(?)"
ZEROS = pa.py_buffer(bytes(24))  # a description's size, without its magic number


@pytest.mark.c_parts
def test_insert_columns_reads_values_nulls_and_offsets(tmp_path):
    conn = connection.Connection(tmp_path / "build.db")
    conn.execute("CREATE TABLE t (a INTEGER, b REAL, c REAL)")
    ints = pa.array([7, 8, 9, 10], pa.int64()).slice(1)
    reals = pa.array([None, 0.5, None, 2.5], pa.float64()).slice(1)  # the validity bitmap starts mid-byte
    conn.insert_columns(INSERT_ABC, [ints, reals, pa.nulls(3, pa.float64())])
    conn.insert_columns(INSERT_ABC, [pa.array([], pa.int64())] * 3)
    conn.commit()
    conn.close()
    assert query(tmp_path / "build.db", "SELECT a, b, c FROM t") == [(8, 0.5, None), (9, None, None), (10, 2.5, None)]


RAW = [math.inf, -math.inf, math.nan, 2e9, -2e9, 1e9, -0.0, 0.5, None]
CLEANED = [1e9 + 1, -1e9 - 1, None, 1e9, -1e9, 1e9, -0.0, 0.5, None]


@pytest.mark.parametrize("columns", [True, False], ids=["trendconv_columns", "bound values"])
def test_insert_trend_cleans_raw_stats_as_clean_values_does(tmp_path, monkeypatch, columns):
    if columns and connection._COLUMNS_LIBRARY is None:
        pytest.skip("trendconv_columns is not built (or TRENDCONV_PURE)")
    if not columns:
        monkeypatch.setattr(connection, "_COLUMNS_LIBRARY", None)
    conn = connection.Connection(tmp_path / "build.db")
    conn.execute(schema.trend_data_ddl(["norm", "max"]))
    keys = {name: pa.array(range(len(RAW)), pa.int64()) for name in ("rank", "step", "target_id", "metric_id")}
    raw = pa.array(RAW, pa.float64())
    rows = pa.table({**keys, "norm": raw, "max": raw})
    inserted = insert.insert_trend(conn, rows, ["norm", "max"], clean=True)
    conn.commit()
    conn.close()
    assert inserted == len(RAW)
    assert query(tmp_path / "build.db", "SELECT norm, max FROM trend_data ORDER BY rank") == [(v, v) for v in CLEANED]
    assert insert.clean_values(pa.chunked_array([raw])).to_pylist() == CLEANED


def test_insert_columns_refuses_to_clean_integers(tmp_path):
    conn = connection.Connection(tmp_path / "build.db")
    conn.execute("CREATE TABLE t (a INTEGER, b REAL, c REAL)")
    with pytest.raises(TypeError) as raised:
        conn.insert_columns(INSERT_ABC, [pa.array([1])] * 3, cleaned=[0])
    conn.close()
    assert str(raised.value) == "trendconv_columns cleans float64 arrays, not int64"


@pytest.mark.parametrize(
    ("arrays", "error", "message"),
    [
        ([pa.array([1, 2]), pa.array([1.0])], ValueError, "columns of 2 and 1 rows"),
        ([pa.array(["x"])], TypeError, "trendconv_columns reads int64 and float64 arrays, not string"),
        ([pa.array([1])] * 33, ValueError, "trendconv_columns reads 32 columns at most, not 33"),
    ],
)
def test_insert_columns_refuses_other_arrays(tmp_path, arrays, error, message):
    conn = connection.Connection(tmp_path / "build.db")
    conn.execute("CREATE TABLE t (a INTEGER, b REAL, c REAL)")
    with pytest.raises(error) as raised:
        conn.insert_columns(INSERT_ABC, arrays)
    conn.close()
    assert str(raised.value) == message


@pytest.mark.c_parts
@pytest.mark.parametrize(
    ("statement", "argument", "message"),
    [
        ("SELECT * FROM trendconv_columns", (), "trendconv_columns needs its spec argument"),
        ("SELECT * FROM trendconv_columns(?)", (0,), "trendconv_columns: not a column description"),
        ("SELECT * FROM trendconv_columns(?)", (ZEROS.address,), "trendconv_columns: not a column description"),
    ],
)
def test_trendconv_columns_refuses_a_missing_or_wrong_description(tmp_path, statement, argument, message):
    conn = connection.Connection(tmp_path / "build.db")
    with pytest.raises(apsw.SQLError) as raised:
        conn.execute(statement, argument).fetchall()
    conn.close()
    assert str(raised.value) == message


def test_both_ways_of_inserting_give_the_same_bytes(tmp_path, monkeypatch):
    generate(tmp_path / "data", steps=2, ranks=2, layers=2, seed=3)
    write_file_set(tmp_path / "data" / "step9" / "rank0", A2_DATA, A2_CONSTRUCT)  # a duplicate row
    columns = convert(tmp_path / "data", tmp_path / "columns")
    monkeypatch.setattr(connection, "_COLUMNS_LIBRARY", None)
    values = convert(tmp_path / "data", tmp_path / "values")
    assert (columns.rows, columns.duplicates) == (values.rows, values.duplicates) == (8396, 1)
    assert columns.db.read_bytes() == values.db.read_bytes()


def test_databases_are_written_by_the_bundled_sqlite(a1_data, tmp_path):
    # Bytes 96-99 of the header: the SQLITE_VERSION_NUMBER of the library that wrote the file last.
    header = convert(a1_data, tmp_path).db.read_bytes()[:100]
    major, minor, patch = map(int, apsw.sqlite_lib_version().split("."))
    assert int.from_bytes(header[96:100], "big") == major * 1_000_000 + minor * 1000 + patch
    assert (major, minor) >= (3, 50)


@pytest.mark.parametrize(
    ("pages", "generated"),
    [
        (3, False),  # no room for the schema: the build fails before any row
        (30, True),  # room for the schema, not for the indexes: the rows are pages, written past SQLite's count
    ],
)
def test_full_disk_is_a_clear_error_and_keeps_the_old_db(a1_data, tmp_path, monkeypatch, pages, generated):
    data = a1_data
    if generated:
        data = tmp_path / "generated"
        generate(data, steps=2, ranks=2, layers=2, seed=3)
    db = convert(data, tmp_path).db
    before = db.read_bytes()
    # max_page_count makes SQLite report SQLITE_FULL as a full disk would.
    monkeypatch.setattr(schema, "BUILD_PRAGMAS", (*schema.BUILD_PRAGMAS, f"PRAGMA max_page_count = {pages}"))
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {db}: cannot write the database: database or disk is full (the index build also writes SQLite "
        "temporary files, to SQLITE_TMPDIR, TMPDIR or /tmp)\n",
    )
    assert (sorted(path.name for path in db.parent.iterdir()), db.read_bytes()) == (
        [".dump_data.trend.db.files.json", "dump_data.trend.db"],
        before,
    )


def generated_load(tmp_path: Path, monkeypatch, patches: dict) -> tuple:
    """A load of generated data with each function named (dotted) in PATCHES replaced by its value: (exit status,
    stderr, what the output directory holds, whether the database there is the one before)."""
    generate(tmp_path / "data", steps=2, ranks=2, layers=2, seed=3)
    db = convert(tmp_path / "data", tmp_path).db
    before = db.read_bytes()
    for name, replacement in patches.items():
        monkeypatch.setattr(name, replacement)
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out")
    return result.exit_code, result.stderr, sorted(path.name for path in db.parent.iterdir()), db.read_bytes() == before


def _full(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _failing_off_the_main_thread(fd):
    if threading.current_thread() is not threading.main_thread():
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    FSYNC(fd)


FSYNC = os.fsync
COPIED = []


def _copied(*args):
    """table._copy, noting the thread it ran on."""
    COPIED.append(threading.current_thread().name)
    COPY(*args)


COPY = table._copy


@pytest.mark.parametrize(
    ("patches", "reason"),
    [
        # the disk fills while the rows are written as pages (the twin's writes; the C part's are the same calls)
        ({"trendconv.loading.table.write_at": _full}, "No space left on device"),
        # the disk fills while the table's pages are copied into the database, on their own thread
        ({"trendconv.loading.table._copy": _full}, "No space left on device"),
        # their sync, on that thread while the indexes are made, fails: the error is not lost
        ({"os.fsync": _failing_off_the_main_thread}, "Input/output error"),
        # the same where SQLite wrote the rows: the sync has a thread of its own
        (
            {
                "os.fsync": _failing_off_the_main_thread,
                "trendconv.formats.dump.builder._pages": lambda conn, path: None,
            },
            "Input/output error",
        ),
    ],
)
def test_a_failed_write_or_sync_of_the_rows_is_a_clear_error(tmp_path, monkeypatch, patches, reason):
    monkeypatch.setattr(table, "_NATIVE", None)
    found = generated_load(tmp_path, monkeypatch, patches)
    db = tmp_path / "out" / "dump_data.trend.db"
    assert found == (
        1,
        f"error: {db}: cannot write the database: {reason}\n",
        [".dump_data.trend.db.files.json", "dump_data.trend.db"],
        True,
    )


def test_the_table_s_pages_are_copied_on_their_own_thread(tmp_path, monkeypatch):
    COPIED.clear()
    assert generated_load(tmp_path, monkeypatch, {"trendconv.loading.table._copy": _copied})[0] == 0
    assert set(COPIED) == {"trendconv-copy"}


def test_db_directory_that_is_a_file(a1_data, tmp_path):
    """--db names a directory: a file there is a usage error said first, by every command that writes databases
    (before parsing, and whatever WORK is), and the file is left alone."""
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    out = tmp_path / "out"
    out.write_text("not a directory")
    said = f"error: {out}: not a directory: the databases go into a directory, which is made if missing\n"
    commands = [
        ("load", tmp_path / "work", "--db", out),
        ("run", a1_data, "--db", out),
        ("run", a1_data, "--db", out, "--work", tmp_path / "other_work"),
        ("run", a1_data, "--db", out, "--follow", "--stop-after-idle", "0.1"),
        ("data2db", "--data", a1_data, "--db", out),
    ]
    for command in commands:
        result = invoke(*command)
        assert (command[0], result.exit_code, result.stderr) == (command[0], 2, said)
    assert out.read_text() == "not a directory"
    assert not (tmp_path / "other_work").exists()
    result = invoke("parse", a1_data, "--work", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {out}: cannot use it as the WORK directory: Not a directory\n",
    )


def index_names(db: Path) -> list[str]:
    return [
        row[0]
        for row in query(db, "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
    ]


def test_indexes_and_analyze(a1_data, tmp_path):
    db = convert(a1_data, tmp_path).db
    assert index_names(db) == ["idx_trend_metric_step", "idx_trend_metric_target", "idx_ttm_target"]
    assert query(db, "SELECT count(*) > 0 FROM sqlite_stat1") == [(1,)]
    assert query(db, "PRAGMA journal_mode") == [("delete",)]


def stat1(db: Path) -> list[tuple]:
    return query(db, "SELECT tbl, idx, stat FROM sqlite_stat1 ORDER BY tbl, idx")


def stat1_by_analyze(db: Path, copy: Path) -> list[tuple]:
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM sqlite_stat1")
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()
    return stat1(copy)


def write_stat1_cases(data: Path, case: str) -> bool:
    """DATA for one case; returns whether it is converted in micro-step mode."""
    if case == "three steps, two ranks, micro steps":
        for step, rank in [(0, 0), (0, 1), (1, 0), (1, 1), (4, 1)]:
            write_file_set(data / f"step{step}" / f"rank{rank}", A1_DATA, A1_CONSTRUCT)
        return True
    if case == "steps shared by ranks":
        for step, rank in [(0, 0), (0, 1), (2, 0), (2, 1)]:
            write_file_set(data / f"step{step}" / f"rank{rank}", A1_DATA)
        return False
    if case == "duplicate rows":
        write_file_set(data / "step0" / "rank0", A2_DATA, A2_CONSTRUCT)
        return True
    # 20 rows over 19 (rank, step, target) triples: ANALYZE rounds the average of 2 down to 1 there
    forward = {"output": [V(float(position)) for position in range(19)]}
    write_file_set(data / "step0" / "rank0", {"F.f.0.forward": forward, "F.f.0.backward": {"output": [V(1.0)]}})
    return False


@pytest.mark.parametrize(
    "case", ["three steps, two ranks, micro steps", "steps shared by ranks", "duplicate rows", "nearly unique"]
)
def test_trend_data_statistics_are_what_analyze_writes(tmp_path, case):
    micro_step = write_stat1_cases(tmp_path / "data", case)
    db = convert(tmp_path / "data", tmp_path, micro_step=micro_step).db
    assert (case, stat1(db)) == (case, stat1_by_analyze(db, tmp_path / "analyzed.db"))


def test_trend_data_statistics_of_the_nearly_unique_case(tmp_path):
    write_stat1_cases(tmp_path / "data", "nearly unique")
    db = convert(tmp_path / "data", tmp_path, micro_step=False).db
    assert [row for row in stat1(db) if row[0] == "trend_data"] == [
        ("trend_data", "idx_trend_metric_step", "20 10 10"),
        ("trend_data", "idx_trend_metric_target", "20 10 1"),
        ("trend_data", "trend_data", "20 20 20 1 1"),
    ]


def test_no_index(a1_data, tmp_path):
    db = convert(a1_data, tmp_path, index=False).db
    assert index_names(db) == []
    assert query(db, "SELECT name FROM sqlite_master WHERE name = 'sqlite_stat1'") == []


PLUGIN_QUERIES = {
    "S7 heat map by step": (
        "SELECT t.rank, t.step, t.target_id, t.norm, m.target_name, m.vpp_stage, m.micro_step FROM trend_data t "
        "JOIN monitoring_targets m ON t.target_id = m.target_id WHERE t.metric_id = ? AND t.step = ?",
        (1, 0),
        "idx_trend_metric_step",
    ),
    "S5 module list": (
        "SELECT DISTINCT mt.target_id, mt.vpp_stage, mt.target_name, mt.micro_step FROM monitoring_targets mt "
        "WHERE mt.target_id IN (SELECT DISTINCT target_id FROM trend_data WHERE metric_id = ?)",
        (1,),
        "idx_trend_metric_target",
    ),
    "S8 line chart by rank dimension": (
        "SELECT t.step, t.rank, t.target_id, t.norm, m.target_name, m.vpp_stage, m.micro_step FROM trend_data t "
        "JOIN monitoring_targets m ON t.target_id = m.target_id "
        "WHERE t.metric_id = ? AND t.step = ? AND t.target_id = ?",
        (1, 0, 1),
        "SEARCH t USING",
    ),
}


@pytest.mark.parametrize("name", sorted(PLUGIN_QUERIES))
def test_plugin_queries_use_an_index(a1_data, tmp_path, name):
    db = convert(a1_data, tmp_path).db
    sql, params, index = PLUGIN_QUERIES[name]
    plan = " | ".join(row[-1] for row in query_params(db, "EXPLAIN QUERY PLAN " + sql, params))
    assert index in plan
    assert "SCAN t" not in plan and "SCAN trend_data" not in plan


def query_params(db: Path, sql: str, params: tuple) -> list[tuple]:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def test_load_needs_a_finished_parse(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    (tmp_path / "work" / "dump" / "shards" / "step1_rank0.parquet").unlink()
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out")
    shard = tmp_path / "work" / "dump" / "shards" / "step1_rank0.parquet"
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {shard}: shard missing; run `trendconv parse` again to rebuild it\n",
    )
    (tmp_path / "work" / "dump" / "manifest.json").unlink()
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out")
    manifest = tmp_path / "work" / "dump" / "manifest.json"
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {manifest}: not found: the parse of this WORK did not finish; run `trendconv parse` again\n",
    )
    assert not (tmp_path / "out" / "dump_data.trend.db").exists()


def test_mixed_parse_options_are_refused(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "micro", api.ParseOptions(), workers=1, input_format="dump")
    api.parse(a1_data, tmp_path / "plain", api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    shutil.copy(tmp_path / "plain" / "dump" / "shards" / "step1_rank0.parquet", tmp_path / "micro" / "dump" / "shards")
    result = invoke("load", tmp_path / "micro", "--db", tmp_path / "out")
    digest = api.ParseOptions().mapping_sha256[:12]
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {tmp_path / 'micro' / 'dump' / 'shards' / 'step1_rank0.parquet'}: parsed with no-micro-step, mapping "
        f"sha256 {digest}, the other shards with micro-step, mapping sha256 {digest}; re-run parse\n"
    )


def test_other_shard_format_is_refused(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    path = tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet"
    meta = shards.read_meta(path, FORMATS["dump"])
    shards.write_shard(path, shards.read_rows(path, SCHEMA), {**meta, "shard_format": 99})
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {path}: shard format 99, this trendconv reads format 2; run `trendconv parse` again\n",
    )


def test_load_cli_summary(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out")
    db = tmp_path / "out" / "dump_data.trend.db"
    assert result.exit_code == 0
    assert result.stdout == (
        f"wrote {db} ({db.stat().st_size} bytes) from 2 shards\n  rows 26, targets 6, tags 18, tag links 29\n"
    )


def test_manifest_lists_shards(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    manifest = json.loads((tmp_path / "work" / "dump" / "manifest.json").read_text())
    assert manifest["shards"] == ["step0_rank0.parquet", "step1_rank0.parquet"]


def test_target_indexes_beyond_31_bits(tmp_path):
    data = {
        "Module.m.M.parameters_grad.99999999999": {"w": [V(1)]},
        "Module.m.M.parameters_grad.3": {"w": [V(2)]},
        "Module.m.M.parameters_grad.099999999999": {"w": [V(3)]},
    }
    write_file_set(tmp_path / "data" / "step0" / "rank0", data)
    summary = convert(tmp_path / "data", tmp_path, micro_step=False)
    assert query(summary.db, "SELECT * FROM monitoring_targets ORDER BY target_id") == [
        (1, "Module.m.M.w", 0, 99999999999),
        (2, "Module.m.M.w", 0, 3),
    ]
    assert (summary.rows, summary.duplicates) == (2, 1)
    assert query(summary.db, "SELECT target_id, norm FROM trend_data ORDER BY target_id") == [(1, 1.0), (2, 2.0)]


def test_target_ids_across_shards_with_and_without_31_bit_indexes(tmp_path):
    """Targets first seen in a shard whose indexes do not pack keep their ids in the shards that do."""
    grad = "Module.m.M.parameters_grad"
    steps = [(3, 5), (99999999999, 3, 7), (7, 99999999999, 9, 5)]
    for step, indexes in enumerate(steps):
        data = {f"{grad}.{index}": {"w": [V(step * 100 + index % 100)]} for index in indexes}
        write_file_set(tmp_path / "data" / f"step{step}" / "rank0", data)
    summary = convert(tmp_path / "data", tmp_path, micro_step=False)
    assert query(summary.db, "SELECT target_id, micro_step FROM monitoring_targets ORDER BY target_id") == [
        (1, 3),
        (2, 5),
        (3, 99999999999),
        (4, 7),
        (5, 9),
    ]
    assert query(summary.db, "SELECT step, target_id, norm FROM trend_data ORDER BY step, target_id") == [
        (0, 1, 3.0),
        (0, 2, 5.0),
        (1, 1, 103.0),
        (1, 3, 199.0),
        (1, 4, 107.0),
        (2, 2, 205.0),
        (2, 3, 299.0),
        (2, 4, 207.0),
        (2, 5, 209.0),
    ]


def test_duplicates_across_insert_batches(tmp_path):
    """Rows go to SQLite many to a statement; a duplicate is still ignored alone, the first row kept."""
    data = {}
    for index in range(150):  # `N` and `0N` name the same target: 150 duplicates, some across batches
        data[f"Functional.relu.{index}.forward"] = {"input_args": [V(index)], "output": []}
        data[f"Functional.relu.0{index}.forward"] = {"input_args": [V(1000 + index)], "output": []}
    write_file_set(tmp_path / "data" / "step0" / "rank0", data)
    summary = convert(tmp_path / "data", tmp_path, micro_step=False)
    assert (summary.rows, summary.duplicates) == (150, 150)
    got = query(summary.db, "SELECT m.micro_step, t.norm FROM trend_data t JOIN monitoring_targets m USING (target_id)")
    assert sorted(got) == [(index, float(index)) for index in range(150)]


def test_warning_over_the_plugin_size_limit(a1_data, tmp_path, monkeypatch):
    import trendconv.check

    monkeypatch.setattr(trendconv.check, "PLUGIN_SIZE_LIMIT", 1000)
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    result = invoke("load", tmp_path / "work", "--db", tmp_path / "out", "--quiet")
    db = tmp_path / "out" / "dump_data.trend.db"
    assert result.exit_code == 0
    assert result.stderr == (
        f"warning: {db}: {db.stat().st_size} bytes, more than the Trend Analyzer's limit of 5 GiB (1000 bytes); "
        "fix: convert fewer steps or ranks into one database\n"
    )


def test_temporary_files_are_never_taken_for_results(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    stray_shard = tmp_path / "work" / "dump" / "shards" / ".step0_rank0.parquet.999999.tmp"
    stray_shard.write_bytes(b"half a shard")
    found = shards.list_shards(tmp_path / "work" / "dump")
    assert [p.name for p in found] == ["step0_rank0.parquet", "step1_rank0.parquet"]
    import pyarrow.dataset as ds

    assert ds.dataset(tmp_path / "work" / "dump" / "shards", format="parquet").to_table().num_rows == 26
    (tmp_path / "out").mkdir()
    dead_build = tmp_path / "out" / ".dump_data.trend.db.999999.tmp"  # a killed load's build (pid 999999 is gone)
    dead_build.write_bytes(b"half a database")
    api.load(tmp_path / "work", tmp_path / "out", input_format="dump")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".dump_data.trend.db.files.json",
        "dump_data.trend.db",
    ]


def test_a_library_that_will_not_load_leaves_the_values_way(tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "_COLUMNS_LIBRARY", str(tmp_path / "not-a-library.so"))
    conn = connection.Connection(tmp_path / "build.db")
    loaded = conn.reads_columns
    conn.close()
    assert loaded is False


def test_flush_starts_are_key_ends_at_multiples_of_the_batch():
    """Keys a (rows 0-2), b (3-4), c (5-8), d (9), in two chunks as a shard may be read."""
    keys = pa.chunked_array([pa.array(list("aaabb")).dictionary_encode(), pa.array(list("ccccd")).dictionary_encode()])
    # batch 3: a ends at 3; 6 falls inside c, whose end leaves 2 + 4 = 6 rows buffered, at row 9
    assert flush_starts(keys, batch=3) == [3, 9]
    assert flush_starts(keys, batch=5) == [5]
    assert flush_starts(keys, batch=2) == []  # no key ends on an even count of buffered rows
    assert flush_starts(keys, batch=10) == []  # the end of the file is a flush of its own
    assert flush_starts(keys[:0], batch=3) == []


def tensors(count: int, value: float) -> list[dict]:
    return [V(value)] * count


def test_ids_follow_msprobe_flushes(tmp_path):
    """dump-format.md §8.4 on two files, worked out by hand: flushes after 5000 rows and after 10000 (the
    file crosses 5000 inside key c), and at each file end; forward before backward in each flush; every
    insert, ignored or not, takes a sequence value."""
    first = {
        "Functional.b.0.backward": {"input": tensors(1, 1)},  # B: 5000, after forward's 4999 of the flush
        "Functional.a.0.forward": {"input_args": tensors(4999, 2), "output": []},  # A.0-4998: 1-4999
        "Functional.c.0.forward": {"input_args": tensors(5001, 3), "output": []},  # 5001-10001
        "Functional.d.0.backward": {"input": tensors(4999, 4)},  # 10002-15000
        "Functional.a.0.backward": {"input": tensors(1, 5)},  # A.0 again, for backward: 15002, ignored
        "Functional.e.0.forward": {"input_args": tensors(1, 6), "output": []},  # 15001
    }
    second = {
        "Functional.f.0.backward": {"input": tensors(1, 7)},  # 15003
        "Functional.e.0.backward": {"input": tensors(1, 8)},  # E.0 again: 15004, ignored
    }
    write_file_set(tmp_path / "data" / "step0" / "rank0", first)
    write_file_set(tmp_path / "data" / "step1" / "rank0", second)
    db = convert(tmp_path / "data", tmp_path, micro_step=False).db
    named = ("b.input.0", "a.input.0", "a.input.4998", "c.input.0", "c.input.5000", "d.input.0", "d.input.4998")
    names = ", ".join(f"'Functional.{name}'" for name in (*named, "e.input.0", "f.input.0"))
    assert query(db, f"SELECT target_name, target_id FROM monitoring_targets WHERE target_name IN ({names})") == [
        ("Functional.a.input.0", 1),
        ("Functional.a.input.4998", 4999),
        ("Functional.b.input.0", 5000),
        ("Functional.c.input.0", 5001),
        ("Functional.c.input.5000", 10001),
        ("Functional.d.input.0", 10002),
        ("Functional.d.input.4998", 15000),
        ("Functional.e.input.0", 15001),
        ("Functional.f.input.0", 15003),
    ]
    assert query(db, "SELECT count(*), max(target_id) FROM monitoring_targets") == [(15002, 15003)]
    assert query(db, "SELECT seq FROM sqlite_sequence WHERE name = 'monitoring_targets'") == [(15004,)]
    rows = "SELECT step, target_id, metric_id, norm FROM trend_data WHERE target_id IN (1, 15001) ORDER BY 2, 3"
    assert query(db, rows) == [
        (0, 1, 1, 2.0),
        (0, 1, 2, 5.0),
        (0, 15001, 1, 6.0),
        (1, 15001, 2, 8.0),
    ]


@pytest.mark.parametrize("micro_step", [True, False])
def test_small_shards_prepared_together_give_the_bytes_of_each_alone(tmp_path, monkeypatch, micro_step):
    """Tiny shards are prepared many at a time when they bring no new target; shards that do (a new file set's
    targets in the middle of a step, a duplicate row) are numbered alone, and the bytes are those of every shard
    prepared alone."""
    from trendconv.formats.dump import builder, ids

    generate(tmp_path / "data", steps=3, ranks=40, layers=1, micro_batches=1, tiny=True, seed=5)
    write_file_set(tmp_path / "data" / "step1" / "rank17", A2_DATA, A2_CONSTRUCT)  # new targets, a duplicate
    write_file_set(tmp_path / "data" / "step2" / "rank3", A1_DATA, A1_CONSTRUCT)
    looked_up = []
    known_ids = ids.TargetIds.known_ids
    monkeypatch.setattr(
        ids.TargetIds, "known_ids", lambda self, *args: looked_up.append(known_ids(self, *args)) or looked_up[-1]
    )
    together = convert(tmp_path / "data", tmp_path / "together", micro_step=micro_step)
    batches = [found is not None for found in looked_up]
    assert batches.count(True) >= 2 and batches.count(False) >= 1  # both ways were taken
    monkeypatch.setattr(builder, "_SMALL_SHARD", 0)
    alone = convert(tmp_path / "data", tmp_path / "alone", micro_step=micro_step)
    assert (together.rows, together.duplicates) == (alone.rows, alone.duplicates)
    assert together.db.read_bytes() == alone.db.read_bytes()
