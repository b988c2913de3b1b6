"""trend_data's read indexes written as SQLite b-tree pages directly, in one pass over the sorted keys, rather than
by `CREATE INDEX` (docs/architecture.md, "Index pages").

SQLite builds an index by sorting records it decodes and compares one by one; that was most of the index build,
which runs after the last shard with the other core idle. Here the keys of every trend row are read off the
table's own pages, packed into one integer each (the columns in the index's order, so that integer order is the
index's order), sorted as integers and laid out as full pages, leaves first. SQLite's file format is public
(https://www.sqlite.org/fileformat2.html: "B-tree Pages" and "Record Format"); `PRAGMA integrity_check`, which
compares every index entry with its row, passes on every database the tests build.

The keys can also be given (KEYS: gathered as the table's rows were written, trendconv.loading.table), and then
the table's pages are not read at all: the indexes are made while those pages are still being copied into place.

`write_indexes` is the Python twin of trendconv.loading._btree.write_indexes (the same pages, byte for byte, much
more slowly); it gives None where the keys do not fit the plan (a negative or non-integer key, more than 64 bits of
key, more than MAX_ROWS rows, given keys that do not hold every entry's columns), and the caller lets SQLite build
that index as before.
"""

from __future__ import annotations

import math
import os
import struct

MAX_ROWS = 1 << 23  # the sort holds two 8-byte words a row: 128 MiB at most, else SQLite's sorter (it spills)
MAX_COLUMNS = 8  # a record then has fewer than 128 bytes: its size is a one-byte varint
MAX_POSITION = 64  # the columns of a record that can be read: trend_data has at most 18
MAX_INDEXES = 8
HEADER_BYTES = 100  # the file header, at the start of page 1 (the file format's "The Database Header")
SMALLEST_USABLE = 480  # SQLite's least usable page size: a leaf then holds at least 6 keys

LEAF, INTERIOR = 0x0A, 0x02  # index b-tree page types
LEAF_HEADER, INTERIOR_HEADER = 8, 12
_MAX_DEPTH = 32  # far beyond any real b-tree: a deeper one is not a file this process wrote


def write_indexes(
    fd: int,
    page_size: int,
    usable: int,
    small_ints: bool,
    root: int,
    entries,
    first_page: int,
    keys=None,
    count: bool = False,
):
    """The indexes over ENTRIES (each the positions in trend_data's record of an index entry's columns, in the
    entry's order) of the WITHOUT ROWID table whose b-tree starts at page ROOT of the database open at FD (of
    FIRST_PAGE - 1 pages), written to it from page FIRST_PAGE on, one after the other: their root pages, or None
    (nothing written) where the keys do not fit the plan. The file is read a page at a time, unless KEYS gives
    every row's key: (the positions of its columns, most significant first; the bits of each; buffers of
    unsigned 64-bit integers), which must hold every entry's columns. With COUNT: (the roots, the counts), the counts
    being how many distinct values each prefix of each entry takes, then the same of the table's own order (the
    columns read, in the record's order), or None there where its keys take more than 64 bits ("Counting" below)."""
    if not _planned(entries, page_size, usable):
        return None
    columns = sorted({column for entry in entries for column in entry})
    if keys is None:
        rows = _table_keys(_Pager(fd, page_size, first_page - 1), usable, root, columns)
    else:
        rows = _given_keys(keys, columns, entries)
    if rows is None or len(rows) > MAX_ROWS:
        return None
    most = [max((row[at] for row in rows), default=0) for at in range(len(columns))]
    orders = [[columns.index(column) for column in entry] for entry in entries]
    widths = [[most[at].bit_length() for at in order] for order in orders]
    if any(sum(entry) > 64 for entry in widths):
        return None
    roots, counts = [], []
    for order, entry_widths in zip(orders, widths):
        keys = sorted(_pack([row[at] for at in order], entry_widths) for row in rows)
        pages = _Pages(fd, page_size, usable, small_ints, entry_widths, first_page)
        roots.append(pages.build(keys))
        first_page += pages.count
        if count:
            counts.append(prefix_counts(keys, entry_widths))
    if not count:
        return roots
    return roots, [*counts, _table_counts(rows, most)]


# ---- counting
#
# sqlite_stat1 says, for the table and each index, how many distinct values each prefix of its key takes (as
# averages: trendconv.loading.stat1). The keys are sorted here anyway, so counting them costs one pass, where
# ANALYZE would read the table and both indexes again.


def prefix_counts(keys, widths) -> list[int]:
    """How many distinct values each prefix of the sorted KEYS (packed in WIDTHS) takes: its first 1, 2, ...
    columns."""
    counts, shift = [], sum(widths)
    for width in widths:
        shift -= width
        counts.append(len({key >> shift for key in keys}))
    return counts


def _table_counts(rows, most) -> list[int] | None:
    """`prefix_counts` of ROWS (their values in the record's order) in that order; None where the keys would take
    more than 64 bits."""
    widths = [value.bit_length() for value in most]
    if sum(widths) > 64:
        return None
    return prefix_counts(sorted(_pack(row, widths) for row in rows), widths)


def _given_keys(keys, columns, entries):
    """The values at COLUMNS of each key of KEYS (see `write_indexes`), or None where they are not those of every
    entry: the table's pages would then have to be read."""
    positions, width, buffers = keys
    if sorted(positions) != columns or any(sorted(entry) != columns for entry in entries):
        return None
    if not 1 <= width <= 63 or width * len(positions) > 64:
        return None
    order = [list(positions).index(column) for column in columns]
    rows = []
    for buffer in buffers:
        for key in memoryview(buffer).cast("B").cast("Q"):
            fields = _unpack(key, [width] * len(positions))
            rows.append([fields[at] for at in order])
    return rows


def _planned(entries, page_size: int, usable: int) -> bool:
    if not 1 <= len(entries) <= MAX_INDEXES or not SMALLEST_USABLE <= usable <= page_size <= 65536:
        return False
    if len({column for entry in entries for column in entry}) > MAX_COLUMNS:  # the columns read, all indexes
        return False
    return all(1 <= len(entry) <= MAX_COLUMNS and all(0 <= at < MAX_POSITION for at in entry) for entry in entries)


def _pack(values, widths) -> int:
    key = 0
    for value, width in zip(values, widths):
        key = (key << width) | value
    return key


def _unpack(key: int, widths) -> list[int]:
    values = []
    for width in reversed(widths):
        values.append(key & ((1 << width) - 1))
        key >>= width
    return values[::-1]


# ---- reading the table's rows


class _Pager:
    """The pages of the database open at FD, of PAGES pages, one read at a time."""

    def __init__(self, fd: int, page_size: int, pages: int) -> None:
        self.fd, self.page_size, self.pages = fd, page_size, pages

    def read(self, page: int) -> bytes | None:
        if not 2 <= page <= self.pages:
            return None
        data = os.pread(self.fd, self.page_size, (page - 1) * self.page_size)
        return data if len(data) == self.page_size else None


def _table_keys(pager: _Pager, usable: int, root: int, columns):
    """COLUMNS of every row of the b-tree at ROOT, or None where one is not a non-negative integer within the
    cell's local bytes (or the pages are not a b-tree this process could have written)."""
    rows = []
    pending = [(root, 0)]
    while pending:
        page, depth = pending.pop()
        data = pager.read(page)
        if data is None or depth > _MAX_DEPTH or data[0] not in (LEAF, INTERIOR):
            return None
        kind = data[0]
        header = LEAF_HEADER if kind == LEAF else INTERIOR_HEADER
        if kind == INTERIOR:
            pending.append((int.from_bytes(data[8:12], "big"), depth + 1))
        for cell in range(int.from_bytes(data[3:5], "big")):
            at = int.from_bytes(data[header + 2 * cell : header + 2 * cell + 2], "big")
            if kind == INTERIOR:
                pending.append((int.from_bytes(data[at : at + 4], "big"), depth + 1))
                at += 4
            values = _cell_values(data, at, usable, usable, columns)
            if values is None:
                return None
            rows.append(values)
    return rows


def _cell_values(db, at: int, page_end: int, usable: int, columns):
    """The integers at COLUMNS of the record in the cell at AT, or None."""
    payload, at = read_varint(db, at)
    end = min(at + _local(payload, usable), page_end)
    header, position = read_varint(db, at)
    starts, start, position = [], at + header, position
    while position < at + header:
        serial, position = read_varint(db, position)
        starts.append((serial, start))
        start += _serial_size(serial)
    values = []
    for column in columns:
        if column >= len(starts):
            return None
        value = _integer(db, *starts[column], end)
        if value is None or value < 0:
            return None
        values.append(value)
    return values


def max_local(usable: int) -> int:
    """The largest payload an index b-tree cell holds on its page: a larger one spills to overflow pages."""
    return (usable - 12) * 64 // 255 - 23


def _local(payload: int, usable: int) -> int:
    """How many of a payload's bytes an index b-tree cell holds on its page (the file format's "B-tree Pages")."""
    most = max_local(usable)
    if payload <= most:
        return payload
    least = (usable - 12) * 32 // 255 - 23
    kept = least + (payload - least) % (usable - 4)
    return kept if kept <= most else least


INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}  # serial type -> bytes; 7 is a float of 8, 8 to 11 take none


def _serial_size(serial: int) -> int:
    if serial >= 12:
        return (serial - 12) // 2
    return 8 if serial == 7 else INT_SIZES.get(serial, 0)


def _integer(db, serial: int, start: int, end: int):
    if serial in (8, 9):
        return serial - 8
    size = INT_SIZES.get(serial)
    if size is None or start + size > end:
        return None
    return int.from_bytes(db[start : start + size], "big", signed=True)


def read_varint(db, at: int) -> tuple[int, int]:
    value = 0
    for offset in range(8):
        byte = db[at + offset]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + offset + 1
    return (value << 8) | db[at + 8], at + 9


# ---- writing the index's pages


def record(values, small_ints: bool) -> bytes:
    """VALUES (integers, floats or None) as the record SQLite writes for them in a table of REAL stat columns (an
    index entry is integers only): each integer in the fewest bytes, floats in eight (a zero as +0.0, as SQLite
    stores -0.0), None in none; NaN, which SQLite stores as NULL, is None here."""
    serials, body = bytearray(), bytearray()
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            serials.append(0)
        elif isinstance(value, float):
            serials.append(7)
            body += struct.pack(">d", value if value else 0.0)
        else:
            serial, size = _serial(value, small_ints)
            serials.append(serial)
            body += value.to_bytes(size, "big", signed=True) if size else b""
    return encoded_varint(len(serials) + 1) + serials + body


def _serial(value: int, small_ints: bool) -> tuple[int, int]:
    if small_ints and value in (0, 1):
        return 8 + value, 0
    magnitude = ~value if value < 0 else value
    for serial, size in ((1, 1), (2, 2), (3, 3), (4, 4), (5, 6)):
        if magnitude < 1 << (8 * size - 1):
            return serial, size
    return 6, 8


def encoded_varint(value: int) -> bytes:
    """VALUE (below 2**56: no nine-byte varint is needed here) as SQLite's varint."""
    if value > 0x00FFFFFFFFFFFFFF:
        raise ValueError("a varint of nine bytes is never needed here")
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(out))


def layout(head: bytes, size: int):
    """(page size, usable bytes a page, whether 0 and 1 take no bytes, pages) of a database whose first
    HEADER_BYTES are HEAD and whose file has SIZE bytes; None for one these pages cannot be appended to: pointer-map
    pages (auto-vacuum), a page count that is not the file's, a page too small for the plan."""
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if int.from_bytes(head[52:56], "big") or not page_size or pages * page_size != size:
        return None
    usable = page_size - head[20]
    if usable < SMALLEST_USABLE:
        return None
    return page_size, usable, int.from_bytes(head[44:48], "big") >= 4, pages


class _Pages:
    """The pages of one index: full leaves in key order, each level's dividers (one key between two pages) in
    the next level up, until one page, the root, holds the rest. Every page has at least one cell, as SQLite's
    own b-trees do: where the last page of a level would have none, its neighbour gives it one."""

    def __init__(self, fd: int, page_size: int, usable: int, small_ints: bool, widths, first_page: int) -> None:
        self.fd, self.page_size, self.usable, self.small_ints, self.widths = fd, page_size, usable, small_ints, widths
        self.first_page, self.count = first_page, 0

    def build(self, keys) -> int:
        """The pages of KEYS (sorted) written; the root's number."""
        children, dividers = self._leaves(keys)
        while len(children) > 1:
            children, dividers = self._interiors(children, dividers)
        if not children:  # no rows: the root is an empty leaf
            children = [self._emit(LEAF, [], 0)]
        return children[0]

    def _payload(self, key: int) -> bytes:
        return record(_unpack(key, self.widths), self.small_ints)

    def _leaves(self, keys):
        children, dividers, start = [], [], 0
        while start < len(keys):
            end, used = start, LEAF_HEADER
            while end < len(keys) and used + (cell := 2 + 1 + len(self._payload(keys[end]))) <= self.usable:
                used, end = used + cell, end + 1
            if end == len(keys):
                children.append(self._leaf(keys[start:end]))
                break
            if end == len(keys) - 1:  # the last key alone would be the divider: the last leaf gets a key
                end -= 1
            children.append(self._leaf(keys[start:end]))
            dividers.append(keys[end])
            start = end + 1
        return children, dividers

    def _interiors(self, children, dividers):
        """The level above CHILDREN, whose DIVIDERS[i] lies between CHILDREN[i] and CHILDREN[i + 1]."""
        above, promoted, first = [], [], 0
        while first < len(children):
            last, used = first, INTERIOR_HEADER
            while last + 1 < len(children) and used + (cell := 7 + len(self._payload(dividers[last]))) <= self.usable:
                used, last = used + cell, last + 1
            if last + 1 == len(children):
                above.append(self._interior(children[first : last + 1], dividers[first:last]))
                break
            if last + 2 == len(children):  # the last child alone would make a page without a cell
                last -= 1
            above.append(self._interior(children[first : last + 1], dividers[first:last]))
            promoted.append(dividers[last])
            first = last + 1
        return above, promoted

    def _leaf(self, keys) -> int:
        cells = [bytes([len(payload)]) + payload for payload in map(self._payload, keys)]
        return self._emit(LEAF, cells, 0)

    def _interior(self, children, dividers) -> int:
        cells = [
            child.to_bytes(4, "big") + bytes([len(payload)]) + payload
            for child, payload in zip(children, map(self._payload, dividers))
        ]
        return self._emit(INTERIOR, cells, children[-1])

    def _emit(self, kind: int, cells, right: int) -> int:
        """A page of CELLS written after the others; its number."""
        number = self.first_page + self.count
        write_at(self.fd, page_image(kind, cells, self.page_size, self.usable, right), (number - 1) * self.page_size)
        self.count += 1
        return number


def page_image(kind: int, cells, page_size: int, usable: int, right: int = 0) -> bytearray:
    """An index b-tree page of KIND holding CELLS (RIGHT: an interior page's rightmost child), the first cell at
    the end of the usable space, as SQLite fills a page."""
    page = bytearray(page_size)
    header = LEAF_HEADER if kind == LEAF else INTERIOR_HEADER
    top = usable
    for position, cell in enumerate(cells):
        top -= len(cell)
        page[top : top + len(cell)] = cell
        page[header + 2 * position : header + 2 * position + 2] = top.to_bytes(2, "big")
    page[0] = kind
    page[3:5] = len(cells).to_bytes(2, "big")
    page[5:7] = (top % 65536).to_bytes(2, "big")  # 65,536 is written 0
    if kind == INTERIOR:
        page[8:12] = right.to_bytes(4, "big")
    return page


def write_at(fd: int, data, offset: int) -> None:
    """DATA written to FD at OFFSET, whole."""
    view = memoryview(data)
    while view:  # a short write (a disk filling up) is followed by one that raises
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
