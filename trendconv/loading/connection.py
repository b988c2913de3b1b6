"""The SQLite connection the database builders write through.

It is APSW's rather than the standard library's: APSW ships a current SQLite, where Python's sqlite3
uses the system's (3.40 on Debian 12). On the trend rows that SQLite inserts about 30 % faster and
builds the read indexes about 25 % faster (benchmarks/RESULTS.md). The files are ordinary SQLite 3
databases that any SQLite reads; the plugin and the tests read them with Python's sqlite3.

`Connection` keeps the part of the sqlite3 interface the builders use, with its transactions: a
statement other than a PRAGMA opens one if none is open, and `commit` ends it.

Where trendconv's SQLite extension `trendconv_columns` was built (trendconv/loading/_columns.c), each
connection loads it, and `insert_columns` runs an INSERT over Arrow arrays read by SQLite straight from
their buffers. Without it, the builders bind the same rows as Python values, more slowly.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path

import apsw
import pyarrow as pa

from trendconv import native

Error = apsw.Error
FullError = apsw.FullError


_COLUMNS_LIBRARY = native.location(native.COLUMNS)
_COLUMNS_ENTRY = "sqlite3_trendconvcolumns_init"
# The column description _columns.c reads: magic, rows, columns, then per column its kind, data address,
# validity address (0: none) and offset, all int64.
_SPEC_MAGIC = 0x736E6D756C6F6374
_KINDS = {pa.int64(): 0, pa.float64(): 1}
_CLEANED = 2  # a float64 column read through the value rules (trendconv.loading.insert.clean_values)
COLUMNS_MAX = 32  # MAX_COLUMNS of _columns.c


class Connection:
    def __init__(self, path: Path) -> None:
        self._conn = apsw.Connection(str(path))
        self.reads_columns = _load_columns(self._conn)

    def execute(self, statement: str, parameters: Sequence = ()) -> apsw.Cursor:
        # Pragmas run outside a transaction: journal_mode, for one, cannot change inside one.
        if statement.lstrip()[:6].upper() != "PRAGMA":
            self._begin()
        return self._conn.execute(statement, parameters)

    def executemany(self, statement: str, parameters: Iterable[Sequence]) -> None:
        self._begin()
        self._conn.executemany(statement, parameters)

    def insert_columns(self, statement: str, arrays: Sequence[pa.Array], cleaned: Collection[int] = ()) -> None:
        """Run STATEMENT, an INSERT ... SELECT ... FROM trendconv_columns(?), over the rows of ARRAYS (int64
        or float64, of one length, COLUMNS_MAX at most): column i of ARRAYS is c<i>; the float64 columns whose
        positions are in CLEANED read as `clean_values` would make them. Only where `reads_columns`."""
        spec = pa.py_buffer(column_spec(arrays, cleaned))
        self._begin()
        # The arrays and the description stay referenced here until the statement has run to its end.
        for _ in self._conn.execute(statement, (spec.address,)):
            pass

    def commit(self) -> None:
        if self.in_transaction:
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def set_busy_handler(self, handler: Callable[[int], bool]) -> None:
        self._conn.set_busy_handler(handler)

    @property
    def total_changes(self) -> int:
        return self._conn.total_changes()

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def _begin(self) -> None:
        if not self.in_transaction:
            self._conn.execute("BEGIN")


def _load_columns(conn: apsw.Connection) -> bool:
    if _COLUMNS_LIBRARY is None:
        return False
    try:
        conn.enable_load_extension(True)
        conn.load_extension(_COLUMNS_LIBRARY, _COLUMNS_ENTRY)
    except apsw.Error:
        return False  # not loadable here (built elsewhere, say): the builders bind Python values instead
    finally:
        with contextlib.suppress(apsw.Error):  # a SQLite without extension loading refuses this too
            conn.enable_load_extension(False)
    return True


def column_spec(arrays: Sequence[pa.Array], cleaned: Collection[int]) -> bytes:
    if len(arrays) > COLUMNS_MAX:
        raise ValueError(f"trendconv_columns reads {COLUMNS_MAX} columns at most, not {len(arrays)}")
    rows = len(arrays[0]) if arrays else 0
    fields = [_SPEC_MAGIC, rows, len(arrays)]
    for position, array in enumerate(arrays):
        if len(array) != rows:
            raise ValueError(f"columns of {rows} and {len(array)} rows")
        if array.type not in _KINDS:
            raise TypeError(f"trendconv_columns reads int64 and float64 arrays, not {array.type}")
        kind = _CLEANED if position in cleaned else _KINDS[array.type]
        if kind == _CLEANED and array.type != pa.float64():
            raise TypeError(f"trendconv_columns cleans float64 arrays, not {array.type}")
        validity, data = array.buffers()[:2]
        fields += [kind, data.address if data else 0, validity.address if validity else 0, array.offset]
    return struct.pack(f"<{len(fields)}q", *fields)
