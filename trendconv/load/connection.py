"""The SQLite connection the database builders write through.

It is APSW's rather than the standard library's: APSW ships a current SQLite, where Python's sqlite3
uses the system's (3.40 on Debian 12). On the trend rows that SQLite inserts about 30 % faster and
builds the read indexes about 25 % faster (benchmarks/RESULTS.md). The files are ordinary SQLite 3
databases that any SQLite reads; the plugin and the tests read them with Python's sqlite3.

`Connection` keeps the part of the sqlite3 interface the builders use, with its transactions: a
statement other than a PRAGMA opens one if none is open, and `commit` ends it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import apsw

Error = apsw.Error
FullError = apsw.FullError


class Connection:
    def __init__(self, path: Path) -> None:
        self._conn = apsw.Connection(str(path))

    def execute(self, statement: str, parameters: Sequence = ()) -> apsw.Cursor:
        # Pragmas run outside a transaction: journal_mode, for one, cannot change inside one.
        if statement.lstrip()[:6].upper() != "PRAGMA":
            self._begin()
        return self._conn.execute(statement, parameters)

    def executemany(self, statement: str, parameters: Iterable[Sequence]) -> None:
        self._begin()
        self._conn.executemany(statement, parameters)

    def commit(self) -> None:
        if self.in_transaction:
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    @property
    def total_changes(self) -> int:
        return self._conn.total_changes()

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def _begin(self) -> None:
        if not self.in_transaction:
            self._conn.execute("BEGIN")
