"""trend_data's rows written as b-tree pages while loading (trendconv.loading.table and its C twin _table): the
table holds what SQLite's inserts give, record for record, SQLite's integrity check passes, both twins write the
same bytes, and rows that do not fit the plan are handed to SQLite."""

from __future__ import annotations

import ctypes
import math
import random
import sqlite3
from pathlib import Path

import apsw
import pyarrow as pa
import pytest

import trendconv
from trendconv import native
from trendconv.formats.dump import builder as dump_builder
from trendconv.loading import btree, connection, schema, table
from trendconv.loading.writer import Writer

STATS = ("norm", "max", "min", "mean")
NATIVE = native.extension(native.TABLE)
ODD_VALUES = [0.0, -0.0, 1.5, math.nan, math.inf, -math.inf, 1e12, -1e12, -3e-310, 5e-324, None, 2.0**60, 1e9, -1e9]


def new_database(path: Path, stats=STATS, *, page_size: int = 4096, reserved: int = 0, vacuum: str = "NONE"):
    conn = connection.Connection(path)
    conn.execute(f"PRAGMA page_size = {page_size}")
    conn.execute(f"PRAGMA auto_vacuum = {vacuum}")
    if reserved:
        wanted = ctypes.c_int(reserved)  # SQLite reads the int at the address it is given
        conn._conn.file_control("main", apsw.SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(wanted))
    for pragma in schema.BUILD_PRAGMAS:
        conn.execute(pragma)
    conn.execute(schema.trend_data_ddl(stats))
    return conn


def build(path: Path, batches, *, pages: bool, stats=STATS, **layout):
    """trend_data of BATCHES (raw values) through the loader's writer, as pages or by SQLite: (rows inserted,
    the pages, or None)."""
    conn = new_database(path, stats, **layout)
    cleaned = range(4, 4 + len(stats))
    written = table.TablePages.open(conn, path, cleaned) if pages else None
    writer = Writer(conn, stats, clean=True, pages=written)
    for batch in batches:
        writer.put(batch)
    writer.close()
    conn.commit()
    (root,) = conn.execute(schema.TREND_ROOT).fetchall()[0]
    conn.close()
    if written is not None:
        written.write(path, root)
        written.wait()
    return writer.inserted, written


def contents(path: Path):
    """(the integrity check, the rows in key order, every record of trend_data's b-tree, sorted)."""
    conn = sqlite3.connect(path)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchall()
        rows = conn.execute(f"SELECT * FROM trend_data ORDER BY {', '.join(schema.TREND_KEY)}").fetchall()
    finally:
        conn.close()
    return check, _nan_free(rows), sorted(records(path))


def _nan_free(rows):
    return [tuple("nan" if isinstance(value, float) and math.isnan(value) else value for value in row) for row in rows]


def records(path: Path) -> list[bytes]:
    """The payload of every cell of every index b-tree page of the file (trend_data is the only such b-tree)."""
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    found = []
    for number in range(1, len(data) // page_size):
        page = data[number * page_size : (number + 1) * page_size]
        if page[0] not in (table.LEAF, table.INTERIOR):
            continue
        header = 8 if page[0] == table.LEAF else 12
        for position in range(int.from_bytes(page[3:5], "big")):
            at = int.from_bytes(page[header + 2 * position : header + 2 * position + 2], "big")
            at += 4 if page[0] == table.INTERIOR else 0
            size, start = btree.read_varint(page, at)
            found.append(page[start : start + size])
    return found


def trend_batch(rank_rows: dict[int, list[tuple]], stats=STATS) -> pa.Table:
    """A batch of trend rows: for each rank in order, its (step, target, metric, *values) rows."""
    rows = [(rank, *row) for rank, its in rank_rows.items() for row in its]
    columns = list(zip(*rows)) if rows else [[] for _ in range(4 + len(stats))]
    names = [*schema.TREND_KEY, *stats]
    types = [pa.int64()] * 4 + [pa.float64()] * len(stats)
    return pa.table([pa.array(column, kind) for column, kind in zip(columns, types)], names=names)


def random_batches(seed: int, ranks: int, steps: int, sizes, *, duplicates: bool = False, stats=STATS):
    """Batches as a dump load gives them: a shard per (step, rank), rows sorted by step, target and metric."""
    rng = random.Random(seed)
    batches = []
    for step in range(steps):
        for rank in range(ranks):
            count = rng.choice(sizes)
            keys = sorted({(rng.randrange(1 << rng.choice([2, 9, 17])), rng.randrange(1, 9)) for _ in range(count)})
            if duplicates and keys:
                keys = sorted(keys + rng.sample(keys, max(1, len(keys) // 10)))
            values = [[_value(rng) for _ in stats] for _ in keys]
            rows = [(step, target, metric, *value) for (target, metric), value in zip(keys, values)]
            batches.append(trend_batch({rank - ranks // 2: rows}, stats))
    return batches


def _value(rng: random.Random):
    return rng.choice(ODD_VALUES) if rng.random() < 0.3 else rng.uniform(-1e10, 1e10)


def same_as_sqlite(tmp_path: Path, batches, **layout):
    """Builds BATCHES both ways and asserts the same table; the pages."""
    inserted, _ = build(tmp_path / "sqlite.db", batches, pages=False, **layout)
    written, pages = build(tmp_path / "pages.db", batches, pages=True, **layout)
    expected = contents(tmp_path / "sqlite.db")
    assert expected[0] == [("ok",)]
    assert (written, contents(tmp_path / "pages.db")) == (inserted, expected)
    return pages


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "layout", [{"page_size": 512}, {"page_size": 1024, "reserved": 32}, {"page_size": 4096}, {"page_size": 65536}]
)
def test_the_pages_hold_what_sqlite_inserts_record_for_record(tmp_path, seed, layout):
    sizes = [[0, 1], [1, 2, 3], [1, 20, 200], [300, 900]][seed % 4]
    pages = same_as_sqlite(tmp_path, random_batches(seed, [1, 3, 8][seed % 3], [1, 4, 9][seed % 3], sizes), **layout)
    assert pages.streaming


def test_a_duplicate_key_keeps_the_first_row_as_insert_or_ignore_does(tmp_path):
    rows = {0: [(1, 5, 1, 1.0, 2.0, 3.0, 4.0), (1, 5, 1, 9.0, 9.0, 9.0, 9.0), (1, 6, 1, 5.0, 6.0, 7.0, 8.0)]}
    pages = same_as_sqlite(tmp_path, [trend_batch(rows), trend_batch({0: [(1, 6, 1, 0.0, 0.0, 0.0, 0.0)]})])
    assert (pages.streaming, pages.appended) == (True, 2)
    assert contents(tmp_path / "pages.db")[1] == [(0, 1, 5, 1, 1.0, 2.0, 3.0, 4.0), (0, 1, 6, 1, 5.0, 6.0, 7.0, 8.0)]


def per_page(page_size: int) -> int:
    """How many rows of four non-null floats, all key columns one byte, fill a leaf of PAGE_SIZE."""
    cell = 1 + 1 + 8 + 4 + 4 * 8  # payload size, header size, 8 serial types, the keys, the floats
    return (page_size - 8) // (2 + cell)


def ranks_of(counts: list[int]) -> pa.Table:
    """One batch: rank i with COUNTS[i] rows (step 2, targets 2, 3, ...; every key column one byte)."""
    rows = [[(2, 2 + row % 100, 2 + row // 100, 1.5, 2.5, 3.5, 4.5) for row in range(count)] for count in counts]
    return trend_batch(dict(enumerate(rows)))


@pytest.mark.parametrize("first", [1, 2, 3, "full", "full+1", "full+2", "2full+1"])
@pytest.mark.parametrize("second", [1, 2, "full", "full+1", "full+2"])
def test_ranks_that_end_anywhere_on_a_page_are_joined_into_one_tree(tmp_path, first, second):
    full = per_page(512)
    count = {"full": full, "full+1": full + 1, "full+2": full + 2, "2full+1": 2 * full + 1}
    counts = [count.get(first, first), count.get(second, second), 1, count.get(first, first)]
    same_as_sqlite(tmp_path, [ranks_of(counts)], page_size=512)


def test_a_lone_row_between_two_ranks_pages_makes_a_page_read_back(tmp_path, monkeypatch):
    # Rank 0 fills a page and has one row more (the divider after it), rank 1 has one row, rank 2 fills a page:
    # two rows between two pages cannot be a divider each side of a page of their own.
    full = per_page(512)
    reads = []
    monkeypatch.setattr(table.TablePages, "_read_cells", _counting(table.TablePages._read_cells, reads))
    same_as_sqlite(tmp_path, [ranks_of([full + 1, 1, full + 1])], page_size=512)
    assert reads == [1]  # rank 2's page (scratch page 1) is read back and its rows join the two


@pytest.mark.parametrize(("counts", "read"), [([1, "full+1"], 0), (["full+1", "full+1"], 1)])
def test_one_row_at_either_end_makes_the_page_next_to_it_read_back(tmp_path, monkeypatch, counts, read):
    full = per_page(512)
    reads = []
    monkeypatch.setattr(table.TablePages, "_read_cells", _counting(table.TablePages._read_cells, reads))
    same_as_sqlite(tmp_path, [ranks_of([full + 1 if count == "full+1" else count for count in counts])], page_size=512)
    assert reads == [read]


def _counting(method, calls: list):
    def counted(self, page):
        calls.append(page)
        return method(self, page)

    return counted


def test_more_ranks_than_pages_kept_write_their_pages_early(tmp_path, monkeypatch):
    monkeypatch.setattr(table, "OPEN_BYTES", 0)  # sixteen pages at most
    batches = random_batches(7, 40, 3, [1, 30, 80])
    pages = same_as_sqlite(tmp_path, batches, page_size=512)
    assert (pages._most_open, len(pages._open)) == (16, 16)


def test_a_row_out_of_order_hands_every_row_to_sqlite(tmp_path):
    batches = random_batches(3, 2, 3, [50, 100])
    backwards = trend_batch({0: [(0, 1, 1, 1.0, 1.0, 1.0, 1.0)]})  # step 0 of rank 0 again, after step 2
    pages = same_as_sqlite(tmp_path, [*batches, backwards, *random_batches(4, 2, 2, [10])])
    assert pages.streaming is False


def test_a_record_too_large_for_one_cell_is_left_to_sqlite(tmp_path):
    stats = tuple(f"s{number}" for number in range(12))  # a record of 114 bytes or more: a cell holds 94 here
    rows = [(0, target, 1, *[0.5] * 12) for target in range(40)]
    batch = trend_batch({0: rows}, stats)
    pages = same_as_sqlite(tmp_path, [batch], stats=stats, page_size=512, reserved=32)
    assert (pages.streaming, pages.appended) == (False, 0)


def test_a_database_with_pointer_map_pages_is_left_to_sqlite(tmp_path):
    conn = new_database(tmp_path / "vacuum.db", vacuum="FULL")
    try:
        assert table.TablePages.open(conn, tmp_path / "vacuum.db", range(4, 8)) is None
    finally:
        conn.close()


def test_no_rows_leave_the_empty_root_sqlite_made(tmp_path):
    pages = same_as_sqlite(tmp_path, [trend_batch({})])
    assert (pages.appended, (tmp_path / "pages.db").stat().st_size) == (0, (tmp_path / "sqlite.db").stat().st_size)


@pytest.mark.parametrize("twin", ["c", "python"])
def test_a_null_key_stops_the_rows_where_it_is(tmp_path, twin):
    if twin == "c" and NATIVE is None:
        pytest.skip("the C part is not built")
    batch = trend_batch({0: [(1, 1, 1, 1.0, 1.0, 1.0, 1.0), (2, 1, 1, 1.0, 1.0, 1.0, 1.0)]})
    batch = batch.set_column(1, "step", pa.array([1, None], pa.int64()))
    conn = new_database(tmp_path / "null.db")
    pages = table.TablePages.open(conn, tmp_path / "null.db", range(4, 8))
    conn.close()
    if twin == "python":
        table._NATIVE, native_part = None, table._NATIVE
    try:
        assert (pages.put(batch), pages.appended) == (1, 1)
    finally:
        if twin == "python":
            table._NATIVE = native_part
        pages.close()


@pytest.mark.skipif(NATIVE is None, reason="the C part is not built")
@pytest.mark.parametrize("seed", range(4))
def test_both_twins_write_the_same_pages(tmp_path, monkeypatch, seed):
    batches = random_batches(seed, 5, 4, [[1, 2], [1, 40, 300], [500]][seed % 3], duplicates=True)
    build(tmp_path / "c.db", batches, pages=True, page_size=1024)
    monkeypatch.setattr(table, "_NATIVE", None)
    build(tmp_path / "python.db", batches, pages=True, page_size=1024)
    assert (tmp_path / "c.db").read_bytes() == (tmp_path / "python.db").read_bytes()


def test_the_records_are_sqlite_s_for_every_integer_size(tmp_path):
    bounds = [0, 1, 2, 127, 128, 32767, 32768, 8388607, 8388608, 2**31 - 1, 2**31, 2**47 - 1, 2**47, 2**63 - 1]
    keys = sorted({sign * bound for bound in bounds for sign in (1, -1)})
    rows = {rank: [(step, 0, 1, float(step), None, -0.0, math.inf) for step in keys] for rank in keys[:3] + keys[-3:]}
    same_as_sqlite(tmp_path, [trend_batch(rows)], page_size=512)


def test_a_dump_load_writes_its_rows_as_pages(tmp_path, a1_data, monkeypatch):
    trendconv.convert(a1_data, tmp_path / "pages", work=tmp_path / "work", workers=1)
    monkeypatch.setattr(dump_builder, "_pages", lambda conn, path: None)
    trendconv.load(tmp_path / "work", tmp_path / "sqlite")
    pages, sqlite = (tmp_path / name / "dump_data.trend.db" for name in ("pages", "sqlite"))
    assert contents(pages)[:2] == contents(sqlite)[:2]
    assert pages.read_bytes() != sqlite.read_bytes()  # the same rows, laid out by trendconv


def given_keys(pages: table.TablePages) -> list[tuple] | None:
    """The keys PAGES gathered, as (rank, step, target, metric) rows in key order; None where it gave none."""
    if pages.keys is None:
        return None
    positions, width, buffers = pages.keys
    assert (positions, width) == ((0, 1, 2, 3), 16)
    keys = [key for buffer in buffers for key in memoryview(buffer).cast("B").cast("Q")]
    return sorted(tuple((key >> (width * (3 - at))) & 0xFFFF for at in range(4)) for key in keys)


def small_batches(seed: int, top: int) -> list[pa.Table]:
    """A shard per (step, rank) of 3 ranks and 4 steps, key values up to TOP."""
    rng = random.Random(seed)
    batches = []
    for step in (0, 1, 7, top):
        for rank in (2, 0, top):
            keys = sorted({(rng.randrange(top + 1), rng.randrange(top + 1)) for _ in range(rng.choice([0, 5, 300]))})
            batches.append(trend_batch({rank: [(step, target, metric, 1.0, 2.0, 3.0, 4.0) for target, metric in keys]}))
    return batches


@pytest.mark.parametrize("twin", ["python", pytest.param("c", marks=pytest.mark.c_parts)])
def test_the_keys_gathered_for_the_indexes_are_the_table_s(tmp_path, monkeypatch, twin):
    if twin == "python":
        monkeypatch.setattr(table, "_NATIVE", None)
    pages = same_as_sqlite(tmp_path, small_batches(5, 65535))
    conn = sqlite3.connect(tmp_path / "pages.db")
    rows = conn.execute(f"SELECT {', '.join(schema.TREND_KEY)} FROM trend_data ORDER BY 1, 2, 3, 4").fetchall()
    conn.close()
    assert (len(rows), given_keys(pages)) == (pages.appended, rows)


@pytest.mark.parametrize(
    "batches",
    [
        small_batches(6, 65536),  # a key value wider than 16 bits
        [trend_batch({0: [(1, 5, 1, 1.0, 2.0, 3.0, 4.0), (1, 5, 1, 9.0, 9.0, 9.0, 9.0)]})],  # a duplicate left out
        [
            trend_batch({0: [(2, 5, 1, 1.0, 2.0, 3.0, 4.0)]}),
            trend_batch({0: [(1, 5, 1, 1.0, 2.0, 3.0, 4.0)]}),
        ],  # out of order
        [trend_batch({-1: [(2, 5, 1, 1.0, 2.0, 3.0, 4.0)]})],  # a negative key value
    ],
)
def test_rows_whose_keys_cannot_be_gathered_leave_the_indexes_to_read_the_table(tmp_path, batches):
    pages = same_as_sqlite(tmp_path, batches)
    assert pages.keys is None
