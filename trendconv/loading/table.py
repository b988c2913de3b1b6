"""trend_data's rows written as SQLite b-tree pages while loading, rather than inserted by SQLite one by one
(docs/architecture.md, "Table pages").

trend_data is a WITHOUT ROWID table: an index b-tree whose entries are whole rows, in primary-key order (rank,
step, target, metric). Dump shards come in (step, rank) order, so each rank's rows come in key order, one shard
after another. Each rank therefore fills a leaf page of its own as its rows come; a full page goes to a scratch
file, and the row that did not fit is kept as the divider between that page and the rank's next one (an index
b-tree's interior cells are entries of their own). When the load ends, the ranks' pages and dividers are joined in
key order, the levels above the leaves are laid out, and the pages are copied into the closed database behind the
table's root page (`TablePages.write`). SQLite's file format is public (https://www.sqlite.org/fileformat2.html,
"B-tree Pages" and "Record Format"); the records are those SQLite writes for the same rows, byte for byte.

Where a row does not fit the plan (a key not after its rank's last one, a NULL key column, a record too large for
one cell), the rows written so far are handed to SQLite and it inserts every row from there on, as before
(`hand_over`). A key equal to its rank's last is a duplicate, left out as INSERT OR IGNORE leaves it out.

`append_rows` is the Python twin of trendconv.loading._table.append_rows: the same pages, byte for byte, much more
slowly.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import native
from trendconv.loading import connection
from trendconv.loading.background import Background
from trendconv.loading.btree import (  # a WITHOUT ROWID table's b-tree is an index b-tree
    HEADER_BYTES,
    INT_SIZES,
    INTERIOR,
    INTERIOR_HEADER,
    LEAF,
    LEAF_HEADER,
    encoded_varint,
    layout,
    max_local,
    page_image,
    read_varint,
    record,
    write_at,
)
from trendconv.loading.insert import insert_trend
from trendconv.loading.schema import TREND_KEY

_NATIVE = native.extension(native.TABLE)

KEYS = 4  # trend_data's primary key: its first four columns (trendconv.loading.schema.TREND_KEY)
# A rank's state, before its page in the same buffer: cells on the page, where its cell content starts, whether
# the rank's next row is a divider (its last page was written), whether it has a last key, and that key.
_STATE = struct.Struct("<8q")
STATE_BYTES = _STATE.size
_CELLS, _TOP, _PENDING, _HAS_LAST = range(4)
OPEN_BYTES = 8 << 20  # the ranks' unfinished pages kept, at most: past it, the one used longest ago is written
_VALUE_LIMIT = 1e9  # keep in step with trendconv.loading.insert.VALUE_LIMIT and INF_VALUE
_INF_VALUE = _VALUE_LIMIT + 1
_COPY = 1 << 20  # bytes a copy of the scratch file's pages moves at a time, where copy_file_range is refused
KEY_WIDTH = 16  # bits a key column has in a row's key gathered for the index pages: a wider value reads the table


# ---- one rank's rows onto its page (the twin of _table.c)


def append_rows(fd: int, columns, cleaned, start: int, end: int, buf: bytearray, next_page: int, layout):
    """Rows START to END of COLUMNS (lists of one length: KEYS integer columns, then float columns, None for
    NULL; those whose positions are in CLEANED get the value rules first) onto the rank page in BUF (its state
    first), full pages written to FD at NEXT_PAGE on. LAYOUT: (page size, usable bytes, whether 0 and 1 take no
    bytes). Returns (rows appended, the row it stopped at: END or one that does not fit the plan, the next page,
    the rank's new items: the pages written and the dividers after them, in key order)."""
    page_size, usable, small_ints = layout
    state = list(_STATE.unpack_from(buf))
    items, appended = [], 0
    for row in range(start, end):
        key = tuple(columns[at][row] for at in range(KEYS))
        follows = _follows(key, state)
        if follows is None:
            continue  # INSERT OR IGNORE keeps the first row of a key
        cell = _cell(columns, cleaned, row, key, small_ints, usable) if follows else None
        if cell is None:
            break
        if not state[_PENDING] and LEAF_HEADER + 2 * (state[_CELLS] + 1) + len(cell) > state[_TOP]:
            _finish_page(buf, state)
            _write(fd, buf, STATE_BYTES, page_size, next_page)
            items.append(next_page)
            next_page += 1
            _start_page(buf, state, usable)
            state[_PENDING] = 1  # the row that did not fit is the divider after the page
        if state[_PENDING]:
            items.append(cell)
            state[_PENDING] = 0
        else:
            _place(buf, state, cell)
        state[_HAS_LAST], state[4:8] = 1, key
        appended += 1
    else:
        row = end
    _STATE.pack_into(buf, 0, *state)
    return appended, row, next_page, items


def _follows(key: tuple, state: list) -> bool | None:
    """Whether KEY comes after the rank's last key (None: it is that key); False for a NULL key column, which
    SQLite refuses with its own message."""
    if None in key:
        return False
    if not state[_HAS_LAST]:
        return True
    last = tuple(state[4:8])
    return None if key == last else key > last


def _cell(columns, cleaned, row: int, key: tuple, small_ints: bool, usable: int) -> bytes | None:
    """The row's leaf cell (its payload's size, then its record), or None where the record would not fit in one."""
    stats = (columns[at][row] for at in range(KEYS, len(columns)))
    values = [*key, *(_clean(value) if at in cleaned else value for at, value in enumerate(stats, KEYS))]
    payload = record(values, small_ints)
    return None if len(payload) > max_local(usable) else encoded_varint(len(payload)) + payload


def _clean(value):
    """trendconv.loading.insert.clean_values on one value."""
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return _INF_VALUE if value > 0 else -_INF_VALUE
    return min(max(value, -_VALUE_LIMIT), _VALUE_LIMIT)


def _start_page(buf: bytearray, state: list, usable: int) -> None:
    buf[STATE_BYTES:] = bytes(len(buf) - STATE_BYTES)
    state[_CELLS], state[_TOP] = 0, usable


def _place(buf: bytearray, state: list, cell: bytes) -> None:
    """CELL after the page's others: its content below theirs, its pointer after theirs (as SQLite fills a page)."""
    top = state[_TOP] - len(cell)
    page = memoryview(buf)[STATE_BYTES:]
    page[top : top + len(cell)] = cell
    pointer = LEAF_HEADER + 2 * state[_CELLS]
    page[pointer : pointer + 2] = top.to_bytes(2, "big")
    state[_CELLS], state[_TOP] = state[_CELLS] + 1, top


def _finish_page(buf: bytearray, state: list) -> None:
    """The leaf's header, from its state."""
    page = memoryview(buf)[STATE_BYTES:]
    page[0:8] = bytes([LEAF, 0, 0, *state[_CELLS].to_bytes(2, "big"), *(state[_TOP] % 65536).to_bytes(2, "big"), 0])


def _write(fd: int, data, start: int, page_size: int, page: int) -> None:
    """PAGE_SIZE bytes of DATA from START as page PAGE (from 0) of FD."""
    write_at(fd, memoryview(data)[start : start + page_size], page * page_size)


# ---- every rank's pages, the levels above them, and the hand-over to SQLite


class _Rank:
    """One rank's unfinished page (with its state) and its items so far: the pages written (their numbers in the
    scratch file) and the divider after each, in key order."""

    def __init__(self, page_size: int, usable: int) -> None:
        self.buf = bytearray(STATE_BYTES + page_size)
        _STATE.pack_into(self.buf, 0, 0, usable, 0, 0, 0, 0, 0, 0)
        self.items: list = []


class TablePages:
    """Feed trend rows with `put` (in the writer's order); `write` them into the database once it is closed. Made
    by `open`, which gives None where the database's file does not suit the plan. After a `hand_over`, SQLite has
    every row and `write` does nothing."""

    def __init__(self, directory: Path, layout, cleaned) -> None:
        self.layout, self.cleaned = layout, tuple(cleaned)
        self._scratch = tempfile.TemporaryFile(dir=directory, prefix=".trendconv-rows.")  # unnamed: none left behind
        self._ranks: dict[int, _Rank] = {}
        self._open: OrderedDict[int, None] = OrderedDict()  # the ranks with an unfinished page, oldest use first
        self._most_open = max(16, OPEN_BYTES // layout[0])
        self._pages = 0  # in the scratch file
        self._keys: list[pa.Array] | None = []  # every row's key, for the index pages: see `keys`
        self._copying: Background | None = None
        self.appended = 0
        self.streaming = True

    @classmethod
    def open(cls, conn: connection.Connection, path: Path, cleaned) -> TablePages | None:
        """Pages for the database CONN builds at PATH, whose trend_data is new and empty: its header is read
        from the file, so CONN's schema is committed first. CLEANED: the stat columns' positions."""
        conn.commit()
        with open(path, "rb") as file:
            found = layout(file.read(HEADER_BYTES), file.seek(0, 2))
        return None if found is None else cls(path.parent, found[:3], cleaned)

    def put(self, rows: pa.Table) -> int | None:
        """ROWS (trend_data's columns, raw stats where cleaned) appended in order; None, or the first row that does
        not fit the plan: it and the rows after it are not appended."""
        arrays = [rows[name].combine_chunks() for name in rows.column_names]
        columns = self._columns(arrays)
        before = self.appended
        for start, end in _runs(arrays[0]):
            rank = self._rank(arrays[0][start].as_py())
            appended, stop, self._pages, items = self._append(columns, start, end, rank)
            self.appended += appended
            rank.items += items
            if stop < end:
                return stop
        self._gather(arrays[:KEYS], self.appended - before == rows.num_rows)
        return None

    def _gather(self, arrays, whole: bool) -> None:
        """The keys of ARRAYS' rows kept for `keys`, if every row was appended (WHOLE: none was a duplicate)."""
        if self._keys is not None:
            key = _packed(arrays) if whole else None
            if key is None:
                self._keys = None
            else:
                self._keys.append(key)

    @property
    def keys(self):
        """Every row's key, as trendconv.loading.btree.write_indexes takes them (the key columns' positions, most
        significant first; their bits; buffers of 64-bit keys), so that the index pages are made without reading
        the table's; None where a row was left out as a duplicate, where SQLite has the rows, or where a key
        column's value does not fit KEY_WIDTH bits."""
        if not self.streaming or self._keys is None:
            return None
        buffers = [key.buffers()[1].slice(key.offset * 8, len(key) * 8) for key in self._keys]
        return tuple(range(KEYS)), KEY_WIDTH, buffers

    def _rank(self, value: int) -> _Rank:
        rank = self._ranks.get(value)
        if rank is None:
            rank = self._ranks[value] = _Rank(*self.layout[:2])
        self._open[value] = None
        self._open.move_to_end(value)
        if len(self._open) > self._most_open:
            self._evict(self._open.popitem(last=False)[0])
        if len(rank.buf) == STATE_BYTES:  # its page was written as it was: a new one starts
            rank.buf += bytes(self.layout[0])
        return rank

    def _evict(self, value: int) -> None:
        """The rank's unfinished page written as it is (a leaf need not be full), its next row then a divider; no
        page is kept for the rank until that row comes."""
        rank = self._ranks[value]
        state = list(_STATE.unpack_from(rank.buf))
        if state[_CELLS]:
            _finish_page(rank.buf, state)
            _write(self._scratch.fileno(), rank.buf, STATE_BYTES, self.layout[0], self._pages)
            rank.items.append(self._pages)
            self._pages += 1
            _start_page(rank.buf, state, self.layout[1])
            state[_PENDING] = 1
            _STATE.pack_into(rank.buf, 0, *state)
        del rank.buf[STATE_BYTES:]

    def _append(self, columns, start: int, end: int, rank: _Rank):
        fd = self._scratch.fileno()
        if _NATIVE is not None:
            return _NATIVE.append_rows(fd, columns.address, start, end, rank.buf, self._pages, *self.layout)
        return append_rows(fd, columns, set(self.cleaned), start, end, rank.buf, self._pages, self.layout)

    def _columns(self, arrays):
        """What `_append` reads the rows from: the C part, a description of ARRAYS (which the caller keeps
        referenced); the twin, their values."""
        if _NATIVE is not None:
            return pa.py_buffer(connection.column_spec(arrays, self.cleaned))
        return [array.to_pylist() for array in arrays]

    # ---- the end: the leaves joined in key order, the levels above them

    def write(self, path: Path, root: int) -> bool:
        """The rows put, as trend_data's b-tree whose root is page ROOT of the database at PATH (no connection open
        on it, trend_data empty there): the pages are appended to the file and the root rewritten. The levels
        above the leaves are written here, and the file's header and size are the whole table's; the leaves are
        copied and synced on another thread until `wait`, which must come before the file is read. Whether they
        are (not where there is no more than one leaf, or SQLite has the rows)."""
        if not self.streaming:
            return False
        children, dividers, free = self._leaf_level(self._sequence())
        if not children:
            return False  # no rows: the root stays the empty leaf SQLite made
        with open(path, "r+b") as file:
            found = layout(file.read(HEADER_BYTES), file.seek(0, 2))
            if found is None or found[:3] != self.layout:
                raise RuntimeError(f"{path}: the database's page layout changed while its rows were loaded")
            if len(children) == 1:  # the one leaf is the root
                self._copy_pages(file.fileno(), [(children[0], root, 1)])
                return False
            copies, numbers = self._placement(children, free, found[3] + 1)
            above = _Interiors(file.fileno(), self.layout, found[3] + 1 + len(numbers))
            last = above.build([numbers[child] for child in children], dividers, root)
            os.ftruncate(file.fileno(), (last - 1) * self.layout[0])  # the leaves' place, before they are in it
            file.seek(28)
            file.write((last - 1).to_bytes(4, "big"))  # the header's page count, which SQLite trusts over the size
        self._copying = Background("trendconv-copy", self._copy_leaves, path, copies)
        return True

    def wait(self) -> None:
        """The leaves `write` copies in place (what failed raised), and the scratch file given up."""
        copying, self._copying = self._copying, None
        try:
            if copying is not None:
                copying.wait()
        finally:
            self.close()

    def close(self) -> None:
        """The scratch file given up (a build abandoned, or its pages written), once the copy of its leaves is
        over: a failure of the copy is not raised, as the build is abandoned."""
        if self._copying is not None:
            self._copying.join()
        self._scratch.close()

    def _sequence(self) -> list:
        """Every rank's items in key order, each rank's unfinished page as its rows."""
        items: list = []
        for value in sorted(self._ranks):
            rank = self._ranks[value]
            items += rank.items
            if len(rank.buf) > STATE_BYTES:
                items += leaf_cells(memoryview(rank.buf)[STATE_BYTES:], _STATE.unpack_from(rank.buf)[_CELLS])
        return items

    def _leaf_level(self, items):
        """ITEMS (pages of the scratch file, and rows) as the b-tree's leaves and the dividers between them:
        children[i] < dividers[i] < children[i + 1]. Rows between two pages become pages of their own and
        dividers; where they cannot (two rows between two pages, one at an end), the page next to them is read
        back and its rows join them. Also the scratch pages no longer used."""
        children: list[int] = []
        dividers: list[bytes] = []
        free: list[int] = []
        run: list[bytes] = []
        for item in items:
            if isinstance(item, bytes):
                run.append(item)
            elif _fits(len(run), bool(children), True):
                self._lay_out(run, bool(children), True, children, dividers, free)
                children.append(item)
                run = []
            else:  # the page's rows join the run, which goes on
                run += self._read_cells(item)
                free.append(item)
        if not _fits(len(run), bool(children), False):  # one row after the last page
            last = children.pop()
            run = [*([dividers.pop()] if children else []), *self._read_cells(last), *run]
            free.append(last)
        self._lay_out(run, bool(children), False, children, dividers, free)
        return children, dividers, sorted(free)

    def _lay_out(self, run: list, left: bool, right: bool, children: list, dividers: list, free: list) -> None:
        """RUN's rows, which lie after CHILDREN's last page if LEFT and before a page to come if RIGHT, as
        pages and dividers (`_fits` holds)."""
        if not run:
            return
        if left and right and len(run) == 1:
            dividers.append(run[0])
            return
        inner = run[1 if left else 0 : len(run) - 1 if right else len(run)]
        if left:
            dividers.append(run[0])
        cells, between = _pack(inner, self.layout[1])
        for position, page_cells in enumerate(cells):
            if position:
                dividers.append(between[position - 1])
            children.append(self._new_leaf(page_cells, free))
        if right:
            dividers.append(run[-1])

    def _new_leaf(self, cells: list[bytes], free: list[int]) -> int:
        """A page of CELLS in the scratch file: in a page given up, or after the others."""
        if free:
            page = free.pop(0)
        else:
            page, self._pages = self._pages, self._pages + 1
        _write(self._scratch.fileno(), leaf_page(cells, *self.layout[:2]), 0, self.layout[0], page)
        return page

    def _read_cells(self, page: int) -> list[bytes]:
        data = os.pread(self._scratch.fileno(), self.layout[0], page * self.layout[0])
        return leaf_cells(data, int.from_bytes(data[3:5], "big"))

    def _placement(self, children: list[int], free: list[int], first: int):
        """Where the scratch pages in use go in the database, from page FIRST on, in scratch order: the copies to
        make ((scratch page, database page, count) of each stretch), and each page's database number."""
        unused = set(free)
        used = [page for page in range(self._pages) if page not in unused]
        numbers = {page: first + position for position, page in enumerate(used)}
        return [(start, numbers[start], count) for start, count in _stretches(used)], numbers

    def _copy_leaves(self, path: Path, copies) -> None:
        """COPIES made to the database at PATH, and synced: the table's pages go to disk while the indexes are made."""
        fd = os.open(path, os.O_WRONLY)
        try:
            self._copy_pages(fd, copies)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _copy_pages(self, fd: int, copies) -> None:
        """COPIES ((scratch page, database page, count)) made from the scratch file to the database open at FD."""
        size = self.layout[0]
        for start, page, count in copies:
            _copy(self._scratch.fileno(), fd, start * size, (page - 1) * size, count * size)

    # ---- where a row does not fit the plan

    def hand_over(self, conn: connection.Connection, stats) -> None:
        """The rows put so far inserted by SQLite through CONN, in key order (trend_data's STATS columns after the
        key, their values already cleaned); from now on SQLite inserts every row, and `write` does nothing."""
        self.streaming, self._keys = False, None
        children, dividers, _ = self._leaf_level(self._sequence())
        names = [*TREND_KEY, *stats]
        batch: list[bytes] = []
        for position, child in enumerate(children):
            batch += self._read_cells(child)
            batch += dividers[position : position + 1]
            if len(batch) >= _HANDED or position == len(children) - 1:
                values = list(zip(*map(record_values, batch)))
                insert_trend(conn, pa.table([pa.array(column) for column in values], names=names), stats)
                batch = []
        self.close()
        self._ranks.clear()


_HANDED = 8192  # rows handed to SQLite at a time


class _Interiors:
    """The levels above the leaves, appended to the database open at FD from page FIRST on; the root, the one
    page of the last level, is written to the table's root page."""

    def __init__(self, fd: int, page_layout, first: int) -> None:
        self.fd, self.page_size, self.usable = fd, page_layout[0], page_layout[1]
        self.next_page = first

    def build(self, children: list[int], dividers: list[bytes], root: int) -> int:
        """The levels over CHILDREN (database pages) and DIVIDERS; the page after the last one written."""
        while len(children) > 1:
            children, dividers = self._level(children, dividers, root)
        return self.next_page

    def _level(self, children: list[int], dividers: list[bytes], root: int):
        """The level above CHILDREN, whose DIVIDERS[i] lies between CHILDREN[i] and CHILDREN[i + 1]; one page at
        ROOT where they all fit in one."""
        if INTERIOR_HEADER + sum(6 + len(cell) for cell in dividers) <= self.usable:
            self._emit(children, dividers, root)
            return [root], []
        above, promoted, first = [], [], 0
        while first < len(children):
            last, used = first, INTERIOR_HEADER
            while last + 1 < len(children) and used + 6 + len(dividers[last]) <= self.usable:
                used, last = used + 6 + len(dividers[last]), last + 1
            if last + 2 == len(children):  # the last child alone would make a page without a cell
                last -= 1
            above.append(self._emit(children[first : last + 1], dividers[first:last], self.next_page))
            self.next_page += 1
            if last + 1 < len(children):
                promoted.append(dividers[last])
            first = last + 1
        return above, promoted

    def _emit(self, children: list[int], dividers: list[bytes], number: int) -> int:
        cells = [child.to_bytes(4, "big") + cell for child, cell in zip(children, dividers)]
        page = page_image(INTERIOR, cells, self.page_size, self.usable, children[-1])
        _write(self.fd, page, 0, self.page_size, number - 1)
        return number


def _fits(rows: int, left: bool, right: bool) -> bool:
    """Whether ROWS rows between the page before them (if LEFT) and the one after (if RIGHT) can be pages and
    dividers: one divider between two pages, or a divider each side of at least one row; at an end, a divider
    and at least one row."""
    if left and right:
        return rows == 1 or rows >= 3
    if left or right:
        return rows != 1
    return True


def _pack(cells: list[bytes], usable: int):
    """CELLS (at least one) as full leaves and the dividers between them: each page has at least one cell."""
    pages, between, start = [], [], 0
    while start < len(cells):
        end, used = start, LEAF_HEADER
        while end < len(cells) and used + 2 + len(cells[end]) <= usable:
            used, end = used + 2 + len(cells[end]), end + 1
        if end == len(cells):
            pages.append(cells[start:end])
            break
        if end == len(cells) - 1:  # the last cell alone would be a divider with no page after it
            end -= 1
        pages.append(cells[start:end])
        between.append(cells[end])
        start = end + 1
    return pages, between


def leaf_page(cells: list[bytes], page_size: int, usable: int) -> bytearray:
    return page_image(LEAF, cells, page_size, usable)


def leaf_cells(page, cells: int) -> list[bytes]:
    """The first CELLS cells of the leaf PAGE, in key order (each a payload of this page alone)."""
    found = []
    for position in range(cells):
        at = int.from_bytes(page[LEAF_HEADER + 2 * position : LEAF_HEADER + 2 * position + 2], "big")
        payload, start = read_varint(page, at)
        found.append(bytes(page[at : start + payload]))
    return found


def record_values(cell: bytes) -> list:
    """The values of the record in a leaf CELL (no overflow): integers, floats, None."""
    _, at = read_varint(cell, 0)
    header, position = read_varint(cell, at)
    body, values = at + header, []
    while position < at + header:
        serial, position = read_varint(cell, position)
        size = 8 if serial == 7 else INT_SIZES.get(serial, 0)
        if serial == 7:
            values.append(struct.unpack(">d", cell[body : body + 8])[0])
        elif serial in (8, 9):
            values.append(serial - 8)
        else:
            values.append(int.from_bytes(cell[body : body + size], "big", signed=True) if size else None)
        body += size
    return values


def _packed(arrays) -> pa.Array | None:
    """The keys of the rows of ARRAYS (the key columns), KEY_WIDTH bits a column, most significant first, as
    unsigned 64-bit integers; None where a value is NULL, negative or wider."""
    key = None
    for array in arrays:
        if array.null_count:
            return None
        if len(array):
            bounds = pc.min_max(array)
            if bounds["min"].as_py() < 0 or bounds["max"].as_py() >> KEY_WIDTH:
                return None
        column = array.cast(pa.uint64())
        key = column if key is None else pc.bit_wise_or(pc.shift_left(key, pa.scalar(KEY_WIDTH, pa.uint64())), column)
    return key


def _runs(values: pa.Array):
    """(start, end) of each run of equal VALUES."""
    if not len(values):
        return []
    changes = pc.indices_nonzero(pc.not_equal(values[1:], values[:-1])).to_pylist()
    bounds = [0, *(change + 1 for change in changes), len(values)]
    return list(zip(bounds[:-1], bounds[1:]))


def _stretches(pages: list[int]):
    """(first, count) of each run of consecutive numbers in PAGES (sorted)."""
    stretches: list[list[int]] = []
    for page in pages:
        if stretches and stretches[-1][0] + stretches[-1][1] == page:
            stretches[-1][1] += 1
        else:
            stretches.append([page, 1])
    return stretches


def _copy(source: int, target: int, start: int, at: int, count: int) -> None:
    """COUNT bytes of SOURCE from START to TARGET at AT: in the kernel where it can, else read and written."""
    while count:
        try:
            done = os.copy_file_range(source, target, count, start, at)
        except OSError:  # not between these file systems, or not on this kernel
            done = 0
        if not done:
            data = os.pread(source, min(count, _COPY), start)
            if not data:
                raise OSError(f"the scratch file of the rows ended {count} bytes early")
            write_at(target, data, at)
            done = len(data)
        start, at, count = start + done, at + done, count - done
