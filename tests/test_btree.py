"""trend_data's read indexes written as b-tree pages (trendconv.loading.btree and its C twin _btree): SQLite's
integrity check passes, the entries are those CREATE INDEX makes, both twins write the same bytes, and keys that
do not fit the plan leave the index to SQLite."""

from __future__ import annotations

import array
import ctypes
import random
import sqlite3
from pathlib import Path

import apsw
import pytest

import trendconv
from trendconv import native
from trendconv.loading import btree, indexes, schema
from trendconv.loading.build import _reopened

STATS = ("norm", "max", "min", "mean")
BOUNDS = [0, 1, 2, 127, 128, 32767, 32768, 8388607, 8388608, 2**31 - 1, 2**31, 2**47 - 1, 2**47]
NATIVE = native.extension(native.BTREE)


def make_table(path: Path, rows, *, page_size: int = 512, reserved: int = 0, vacuum: str = "NONE") -> int:
    """A database at PATH with trend_data holding ROWS (rank, step, target_id, metric_id): its table's root."""
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size = {page_size}; PRAGMA auto_vacuum = {vacuum}")
    if reserved:
        wanted = ctypes.c_int(reserved)  # SQLite reads the int at the address it is given
        conn.file_control("main", apsw.SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(wanted))
    conn.execute(schema.trend_data_ddl(STATS))
    with conn:
        conn.executemany("INSERT INTO trend_data VALUES (?, ?, ?, ?, 1.5, NULL, 0.0, -2.0)", rows)
    (root,) = conn.execute(schema.TREND_ROOT).fetchall()[0]
    conn.close()
    return root


def index_with_pages(path: Path, root: int) -> dict[str, int] | None:
    written = indexes.write_pages(path, root)
    roots = None if written is None else written[0]
    if roots is not None:
        with _reopened(path) as conn:
            indexes.name_pages(conn, roots)
    return roots


def index_entries(path: Path) -> dict[str, list[tuple]]:
    """Each trend index's entries in its order, read through the index alone (a covering scan)."""
    conn = sqlite3.connect(path)
    entries = {}
    for name, columns in schema.TREND_INDEXES.items():
        order = [schema.TREND_KEY[position] for position in schema.index_entry(columns)]
        query = f"SELECT {', '.join(order)} FROM trend_data INDEXED BY {name} ORDER BY {', '.join(order)}"
        entries[name] = conn.execute(query).fetchall()
    conn.close()
    return entries


def integrity(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()


def random_rows(count: int, seed: int, values=None) -> list[tuple[int, int, int, int]]:
    rng = random.Random(seed)
    pick = (lambda: rng.choice(values)) if values else (lambda: rng.randrange(1 << rng.choice([1, 3, 9, 15])))
    return list({(pick(), pick(), pick(), pick()) for _ in range(count)})


def sqlite_built(tmp_path: Path, rows, **layout) -> Path:
    path = tmp_path / "sqlite.db"
    make_table(path, rows, **layout)
    conn = apsw.Connection(str(path))
    for name, columns in schema.TREND_INDEXES.items():
        conn.execute(schema.index_sql(name, "trend_data", columns))
    conn.close()
    return path


@pytest.mark.parametrize(
    ("count", "seed", "layout"),
    [
        (0, 0, {}),
        (1, 1, {}),
        (3000, 2, {}),
        (20000, 3, {}),
        (5000, 4, {"page_size": 4096}),
        (4000, 5, {"page_size": 1024, "reserved": 32}),
        (30000, 6, {"page_size": 65536}),
    ],
)
def test_index_pages_pass_the_integrity_check_and_hold_what_create_index_does(tmp_path, count, seed, layout):
    rows = random_rows(count, seed)
    path = tmp_path / "pages.db"
    root = make_table(path, rows, **layout)
    assert index_with_pages(path, root) is not None
    assert integrity(path) == [("ok",)]
    assert index_entries(path) == index_entries(sqlite_built(tmp_path, rows, **layout))


@pytest.mark.parametrize("column", range(4))
def test_every_integer_size_sqlite_writes_is_read_and_written(tmp_path, column):
    """COLUMN takes values at each of SQLite's integer size bounds (48 bits of key), the others 0 to 31."""
    rng = random.Random(column)
    rows = {tuple(rng.choice(BOUNDS) if i == column else rng.randrange(32) for i in range(4)) for _ in range(3000)}
    path = tmp_path / "pages.db"
    assert index_with_pages(path, make_table(path, rows)) is not None
    assert integrity(path) == [("ok",)]
    assert index_entries(path) == index_entries(sqlite_built(tmp_path, rows))


def tree_shape(path: Path, root: int) -> tuple[int, int]:
    """(depth, pages) of the b-tree at ROOT, checking that every page but the root has a cell and that every leaf
    is as deep as the others."""
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big")
    depths, pages = set(), 0
    pending = [(root, 1)]
    while pending:
        page, depth = pending.pop()
        base = (page - 1) * page_size
        cells = int.from_bytes(data[base + 3 : base + 5], "big")
        assert cells or page == root, f"page {page} has no cell"
        pages += 1
        if data[base] == btree.LEAF:
            depths.add(depth)
            continue
        pending.append((int.from_bytes(data[base + 8 : base + 12], "big"), depth + 1))
        for cell in range(cells):
            at = base + int.from_bytes(data[base + 12 + 2 * cell : base + 14 + 2 * cell], "big")
            pending.append((int.from_bytes(data[at : at + 4], "big"), depth + 1))
    assert len(depths) <= 1
    return max(depths), pages


@pytest.mark.parametrize("twin", ["python", pytest.param("native", marks=pytest.mark.c_parts)])
def test_no_page_is_left_without_a_cell_where_a_level_ends(tmp_path, monkeypatch, twin):
    """Key counts around each place where the last key of the leaves, or the last child of a level above, would
    be alone: every page keeps a cell and every leaf is as deep."""
    monkeypatch.setattr(indexes, "write_indexes", btree.write_indexes if twin == "python" else NATIVE.write_indexes)
    # Keys (r, 0, t, m) with 2 <= r, t, m < 128 are 8-byte records: a leaf cell of 9 bytes and its pointer of 2
    # make (512 - 8) // 11 = 45 keys to a leaf, and an interior cell of 13 bytes 33 cells (34 children) to a page.
    small = range(2, 128)
    keys = [(r, 0, t, m) for r in small for t in small for m in small]
    leaf_edges = [46 * leaves for leaves in (1, 2, 3)]  # a leaf and its divider take 46 keys: the last one alone
    # 35 leaves: a page of the level above takes 34, one is left; 1,158 leaves: 35 pages above them, one is left
    interior_edges = [46 * 34 + 23, 46 * 1157 + 23]
    depths = {}
    for count in [edge + extra for edge in leaf_edges + interior_edges for extra in (-1, 0, 1)]:
        path = tmp_path / f"{count}.db"
        roots = index_with_pages(path, make_table(path, keys[:count]))
        assert integrity(path) == [("ok",)], count
        depths[count] = tree_shape(path, roots["idx_trend_metric_target"])[0]
    assert depths == {
        **{count: 1 for count in (45,)},
        **{count: 2 for count in (46, 47, 91, 92, 93, 137, 138, 139)},
        **{count: 3 for count in (1586, 1587, 1588)},
        **{count: 4 for count in (53244, 53245, 53246)},
    }


def written(twin, path: Path, root: int, keys=None) -> tuple[list[int] | None, bytes]:
    """TWIN's write_indexes of trend_data's indexes at the end of the database at PATH (from KEYS, if given): the
    roots, the file."""
    entries = [schema.index_entry(columns) for columns in schema.TREND_INDEXES.values()]
    with open(path, "r+b") as file:
        roots = twin(file.fileno(), 512, 512, True, root, entries, path.stat().st_size // 512 + 1, keys)
    return roots, path.read_bytes()


@pytest.mark.c_parts
@pytest.mark.parametrize(("count", "seed"), [(0, 8), (1, 9), (5000, 10), (20000, 11)])
def test_both_twins_write_the_same_pages(tmp_path, count, seed):
    rows = {(rank % 32, step, target % 32, metric % 32) for rank, step, target, metric in random_rows(count, seed)}
    rows |= {(0, bound, 0, 0) for bound in BOUNDS}  # every size of integer SQLite writes, in the step column
    root = make_table(tmp_path / "python.db", rows)
    make_table(tmp_path / "native.db", rows)
    before = (tmp_path / "python.db").stat().st_size // 512
    python = written(btree.write_indexes, tmp_path / "python.db", root)
    assert written(NATIVE.write_indexes, tmp_path / "native.db", root) == python
    roots, data = python
    assert before < roots[0] < roots[1] == len(data) // 512  # each root is its index's last page, in order


@pytest.mark.parametrize(
    ("rows", "layout"),
    [
        ([(0, -1, 1, 1)], {}),  # a negative step
        ([(2**40, 2**30, 1, 1)], {}),  # 41 + 31 + 1 + 1 bits of key
        ([(0, 0, 1, 1)], {"vacuum": "FULL"}),  # pointer-map pages
    ],
)
def test_keys_that_do_not_fit_the_plan_leave_the_file_as_it_was(tmp_path, rows, layout):
    path = tmp_path / "pages.db"
    root = make_table(path, rows, **layout)
    before = path.read_bytes()
    assert indexes.write_pages(path, root) is None
    assert path.read_bytes() == before


def test_a_key_that_is_not_an_integer_leaves_the_index_to_sqlite(tmp_path):
    path = tmp_path / "pages.db"
    conn = apsw.Connection(str(path))
    conn.execute(schema.trend_data_ddl(STATS))
    conn.execute("INSERT INTO trend_data VALUES (0, 0, 1, 1, 1, 1, 1, 1), (0, 'x', 1, 1, 1, 1, 1, 1)")
    (root,) = conn.execute(schema.TREND_ROOT).fetchall()[0]
    conn.close()
    assert indexes.write_pages(path, root) is None


def test_too_many_rows_are_left_to_sqlite(tmp_path, monkeypatch):
    path = tmp_path / "pages.db"
    root = make_table(path, random_rows(2000, 11))
    rows = len(random_rows(2000, 11))
    monkeypatch.setattr(btree, "MAX_ROWS", rows - 1)
    assert written(btree.write_indexes, path, root)[0] is None
    monkeypatch.setattr(btree, "MAX_ROWS", rows)
    assert written(btree.write_indexes, path, root)[0] is not None


@pytest.mark.c_parts
def test_the_c_twin_has_the_same_row_limit():
    assert NATIVE.MAX_ROWS == btree.MAX_ROWS == 1 << 23


def database_answers(db: Path) -> dict[str, list]:
    conn = sqlite3.connect(db)
    queries = {
        "schema": "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY rowid",
        "stat1": "SELECT * FROM sqlite_stat1 ORDER BY tbl, idx",
        "rows": "SELECT * FROM trend_data ORDER BY rank, step, target_id, metric_id",
        "integrity": "PRAGMA integrity_check",
    }
    answers = {name: conn.execute(query).fetchall() for name, query in queries.items()}
    conn.close()
    return answers | index_entries(db)


def test_a_database_whose_keys_do_not_fit_gets_sqlite_s_indexes_and_the_same_answers(tmp_path, a1_data, monkeypatch):
    [written] = trendconv.convert(a1_data, tmp_path / "pages", format="dump")
    monkeypatch.setattr(indexes, "write_indexes", lambda *args: None)  # as for keys that do not fit the plan
    [created] = trendconv.convert(a1_data, tmp_path / "sqlite", format="dump")
    assert database_answers(created.load.db) == database_answers(written.load.db)
    assert database_answers(written.load.db)["integrity"] == [("ok",)]
    assert created.load.db.read_bytes() != written.load.db.read_bytes()  # the pages are laid out otherwise


def packed_keys(rows, positions, width: int = 16) -> list[int]:
    """ROWS' keys as TablePages.keys gives them: the columns at POSITIONS, WIDTH bits each, most significant first."""
    keys = []
    for row in rows:
        key = 0
        for position in positions:
            key = (key << width) | row[position]
        keys.append(key)
    return keys


def key_buffers(keys: list[int], pieces: int) -> list[bytes]:
    """KEYS as PIECES buffers of native 64-bit integers (some of them empty where there are fewer keys)."""
    size = -(-len(keys) // pieces) if keys else 1
    return [array.array("Q", keys[start : start + size]).tobytes() for start in range(0, size * pieces, size)]


TWINS = ["python", pytest.param("native", marks=pytest.mark.c_parts)]


def twin_of(name: str):
    return btree.write_indexes if name == "python" else NATIVE.write_indexes


def stat1_by_sqlite(path: Path, rows) -> list[tuple]:
    """trend_data's sqlite_stat1 rows as ANALYZE writes them for ROWS, with SQLite's own indexes, in a new database
    at PATH."""
    make_table(path, rows)
    conn = sqlite3.connect(path)
    for name, columns in schema.TREND_INDEXES.items():
        conn.execute(schema.index_sql(name, "trend_data", columns))
    conn.execute("ANALYZE")
    analyzed = conn.execute("SELECT tbl, idx, stat FROM sqlite_stat1 WHERE tbl = 'trend_data' ORDER BY idx").fetchall()
    conn.close()
    return analyzed


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize(("count", "seed"), [(1, 13), (700, 14), (5000, 15)])
def test_the_counted_statistics_are_those_analyze_writes(tmp_path, monkeypatch, twin, count, seed):
    """The prefix counts taken of the sorted keys give the sqlite_stat1 rows of ANALYZE over the table and SQLite's
    indexes; steps of every integer size, and ranks and targets spread so that each prefix differs."""
    monkeypatch.setattr(indexes, "write_indexes", twin_of(twin))
    rows = {(rank % 7, step % 97, target % 13, metric % 3) for rank, step, target, metric in random_rows(count, seed)}
    rows |= {(1, bound, 2, 1) for bound in BOUNDS}
    path = tmp_path / "pages.db"
    _, counted = indexes.write_pages(path, make_table(path, rows), count=True)
    assert sorted(counted, key=lambda row: row[1]) == stat1_by_sqlite(tmp_path / "sqlite.db", rows)


@pytest.mark.parametrize("twin", TWINS)
def test_without_count_the_pages_are_the_same_and_nothing_is_counted(tmp_path, monkeypatch, twin):
    monkeypatch.setattr(indexes, "write_indexes", twin_of(twin))
    rows = random_rows(500, 16)
    paths = [tmp_path / "counted.db", tmp_path / "not.db"]
    roots = [make_table(path, rows) for path in paths]
    counted, not_counted = (
        indexes.write_pages(path, root, count=count) for path, root, count in zip(paths, roots, (True, False))
    )
    assert not_counted == (counted[0], None)
    assert counted[1] is not None
    assert paths[0].read_bytes() == paths[1].read_bytes()


@pytest.mark.parametrize("twin", TWINS)
def test_a_table_key_of_more_than_64_bits_is_not_counted(tmp_path, twin):
    """Entries of two columns each fit 64 bits where the four columns together do not: the indexes are written and
    counted, the table is not (ANALYZE then counts it)."""
    path = tmp_path / "wide.db"
    root = make_table(path, [(2**39, 1, 2**39, 1), (0, 0, 0, 0)])
    with open(path, "r+b") as file:
        roots, counts = twin_of(twin)(
            file.fileno(), 512, 512, True, root, [(0, 1), (2, 3)], path.stat().st_size // 512 + 1, None, True
        )
    assert (len(roots), counts) == (2, [[2, 2], [2, 2], None])


@pytest.mark.parametrize("twin", TWINS)
def test_an_empty_table_is_left_to_analyze(tmp_path, monkeypatch, twin):
    monkeypatch.setattr(indexes, "write_indexes", twin_of(twin))
    path = tmp_path / "empty.db"
    written = indexes.write_pages(path, make_table(path, []), count=True)
    assert written is not None and written[1] is None


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize(
    ("count", "positions", "pieces"),
    [(0, (0, 1, 2, 3), 1), (1, (3, 1, 0, 2), 3), (3000, (0, 1, 2, 3), 7), (3000, (2, 0, 3, 1), 3000)],
)
def test_given_keys_write_the_pages_that_reading_the_table_writes(tmp_path, twin, count, positions, pieces):
    rows = sorted(
        {(rank % 32, step, target % 32, metric % 32) for rank, step, target, metric in random_rows(count, 12)}
    )
    random.Random(count).shuffle(rows)  # the keys come in any order: they are sorted
    rows_read = tmp_path / "read.db"
    root = make_table(rows_read, rows)
    make_table(tmp_path / "given.db", rows)
    read = written(twin_of(twin), rows_read, root)
    table_pages = (tmp_path / "given.db").stat().st_size
    with open(tmp_path / "given.db", "r+b") as file:  # the table's pages are not read: they may be anything
        file.seek(512)
        file.write(b"\xff" * (table_pages - 512))
    keys = (positions, 16, key_buffers(packed_keys(rows, positions), pieces))
    given = written(twin_of(twin), tmp_path / "given.db", root, keys)
    assert given[0] == read[0]
    assert given[1][table_pages:] == read[1][table_pages:]


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize(
    ("positions", "width"),
    [
        ((0, 1, 2), 16),  # a column of the entries missing
        ((0, 1, 2, 3, 4), 16),  # a column no entry has
        ((0, 1, 1, 3), 16),  # a column twice, another missing
        ((0, 1, 2, 3), 17),  # 68 bits of key
        ((0, 1, 2, 3), 0),
    ],
)
def test_given_keys_that_do_not_fit_the_plan_write_nothing(tmp_path, twin, positions, width):
    rows = [(0, 1, 2, 3, 4)]
    path = tmp_path / "given.db"
    root = make_table(path, [row[:4] for row in rows])
    before = path.read_bytes()
    keys = (positions, width, key_buffers(packed_keys(rows, positions, width), 1))
    assert written(twin_of(twin), path, root, keys) == (None, before)


@pytest.mark.c_parts
def test_the_c_twin_refuses_a_buffer_of_part_of_a_key(tmp_path):
    path = tmp_path / "given.db"
    root = make_table(path, [(0, 1, 2, 3)])
    with pytest.raises(ValueError) as raised:
        written(NATIVE.write_indexes, path, root, ((0, 1, 2, 3), 16, [bytes(8), bytes(12)]))
    assert str(raised.value) == "a buffer of keys is not a whole number of 64-bit keys"
