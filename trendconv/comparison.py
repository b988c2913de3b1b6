"""Compare two trend databases logically: the same rows by names, whatever their surrogate ids.

Ignored: the values of `target_id`, `metric_id` and `tag_id` (each id is replaced by the names it stands for),
`sqlite_sequence`, indexes and `sqlite_stat*`. With `ids=True` the ids are compared too, as the `ID_VIEWS`
below. Every file is opened read-only, so a diff never changes one. Rows are streamed in SQL order and
merge-compared, so memory does not grow with the number of trend rows.

Either side may be a set of databases (a split output, docs/user-guide.md): a directory, a glob pattern or a list
of paths. The set stands for the union of its files: the dimension tables (`DICTIONARIES`) as a set of rows, the
other tables as a multiset, a column missing from one file read as NULL there, and global_stats as the one row
that combines each file's last row (`COMBINE`). A row key found in two files of a set is reported too.
"""

from __future__ import annotations

import glob
import heapq
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

__all__ = ["DiffError", "DiffReport", "DiffUsageError", "TableDiff", "diff_databases", "resolve_side"]

# id column -> (the table it identifies rows of, the columns that name such a row)
IDENTITIES = {
    "target_id": ("monitoring_targets", ("target_name", "vpp_stage", "micro_step")),
    "metric_id": ("monitoring_metrics", ("metric_name",)),
    "tag_id": ("monitoring_tags", ("tag_name", "category", "metric_id")),
}
OWN_ID = {owner: column for column, (owner, _) in IDENTITIES.items()}
BY_NAMES = {*OWN_ID, "tag_target_mapping", "trend_data"}  # the tables whose ids are replaced by names
# Compared as a list in rowid order, columns matched by name and each metric's stat list as a set: msprobe
# writes monitor metric columns in listing order and stat names in hash order. Every other table: a multiset.
ORDERED = "global_stats"

# With ids=True: label -> (table, columns), compared as a multiset of rows as stored. Given the same rows by
# names, equal targets and metrics with their ids mean equal ids everywhere. Tags: only each metric's set of
# tag ids, since msprobe numbers the tags of one metric in hash order (dump-format.md §8.7).
ID_VIEWS = {
    "monitoring_targets ids": ("monitoring_targets", ("target_id", "target_name", "vpp_stage", "micro_step")),
    "monitoring_metrics ids": ("monitoring_metrics", ("metric_id", "metric_name")),
    "monitoring_tags ids": ("monitoring_tags", ("tag_id", "metric_id")),
    "sqlite_sequence": ("sqlite_sequence", ("name", "seq")),
}

# In a set, the rows of these tables repeat from file to file (each file names what its own rows use): the union
# of their rows is a set. The other tables' rows belong to one file each.
DICTIONARIES = {*OWN_ID, "tag_target_mapping"}
# global_stats of a set: these columns combined across files; every other column is a metric's stat list (joined
# by ","), the union of the files' lists.
COMBINE = {"max_rank": max, "min_step": min, "max_step": max}
DB_SUFFIX = ".trend.db"
STEP_RANGE = re.compile(r"\.steps-\d+-\d+(?=\.trend\.db$)")  # the part a split output adds to a file name

Schema = dict[str, tuple[tuple[str, str], ...]]  # table -> ((column, declared type), ...)
Db = tuple[sqlite3.Connection, Path]


class DiffError(Exception):
    """A database cannot be opened or read."""


class DiffUsageError(DiffError):
    """The sides asked for cannot be compared as given: a directory of several runs' databases, ids of a set."""


@dataclass(frozen=True)
class TableDiff:
    table: str
    only_in_a: int = 0
    only_in_b: int = 0
    examples_a: tuple[str, ...] = ()
    examples_b: tuple[str, ...] = ()
    note: str | None = None  # a schema difference; the rows were not compared


@dataclass(frozen=True)
class DiffReport:
    tables: tuple[TableDiff, ...]  # only the tables that differ, by name

    @property
    def equal(self) -> bool:
        return not self.tables

    def format(self) -> str:
        if self.equal:
            return "logically identical"
        count = len(self.tables)
        lines = [f"{count} table differs" if count == 1 else f"{count} tables differ"]
        for diff in self.tables:
            counts = f"{_rows(diff.only_in_a)} only in a, {_rows(diff.only_in_b)} only in b"
            lines.append(f"{diff.table}: {diff.note or counts}")
            lines += [f"  a: {example}" for example in diff.examples_a]
            lines += [f"  b: {example}" for example in diff.examples_b]
        return "\n".join(lines)


def diff_databases(
    a: Path | Sequence[Path], b: Path | Sequence[Path], *, limit: int = 5, ids: bool = False
) -> DiffReport:
    """What differs between the trend databases (or sets of them, `resolve_side`) A and B, with at most LIMIT
    example rows per side and table; with IDS, the ids too (`ID_VIEWS`; two single databases only)."""
    paths_a, paths_b = resolve_side(a), resolve_side(b)
    for side, paths in (("a", paths_a), ("b", paths_b)):
        if ids and len(paths) > 1:
            raise DiffUsageError(
                f"ids cannot be compared for a set of databases ({side}: {len(paths)} files, each numbering its "
                "own ids); compare its files one by one"
            )
    with ExitStack() as stack:
        side_a = _Side("a", tuple((stack.enter_context(_open(path)), path) for path in paths_a))
        side_b = _Side("b", tuple((stack.enter_context(_open(path)), path) for path in paths_b))
        diffs = _table_diffs(side_a, side_b, limit)
        if ids:
            diffs += _id_diffs(side_a.dbs[0], side_b.dbs[0], limit)
    return DiffReport(tuple(diffs))


def resolve_side(side: Path | str | Sequence[Path | str]) -> tuple[Path, ...]:
    """The databases one side names: a list of paths as given; a directory's `*.trend.db` files, which must be
    those of one run and kind (`NAME.KIND[.steps-A-B].trend.db`); a glob pattern's matches; else the one path."""
    if isinstance(side, (list, tuple)):
        if not side:
            raise DiffUsageError("an empty list of databases; give at least one path")
        return tuple(Path(path) for path in side)
    path = Path(side)
    if path.is_dir():
        return _directory_set(path)
    if not path.exists() and glob.has_magic(str(path)):
        found = sorted(Path(match) for match in glob.glob(str(path)))
        if not found:
            raise DiffError(f"cannot open {path}: no file matches this pattern")
        return tuple(found)
    return (path,)


def _directory_set(directory: Path) -> tuple[Path, ...]:
    found = sorted(path for path in directory.iterdir() if path.name.endswith(DB_SUFFIX))
    if not found:
        raise DiffError(f"cannot open {directory}: a directory without *{DB_SUFFIX} files")
    groups = sorted({STEP_RANGE.sub("", path.name) for path in found})
    if len(groups) > 1:
        stem = groups[0].removesuffix(DB_SUFFIX)
        raise DiffUsageError(
            f"{directory} holds the databases of more than one run or kind ({', '.join(groups)}); "
            f"choose one with a quoted pattern, like '{directory / stem}*{DB_SUFFIX}'"
        )
    return tuple(found)


@dataclass(frozen=True)
class _Side:
    """One side of a diff: one database, or a set of them read as their union."""

    name: str  # "a" or "b"
    dbs: tuple[Db, ...]

    @property
    def is_set(self) -> bool:
        return len(self.dbs) > 1

    def schemas(self, system: bool = False) -> list[Schema]:
        return [_schema(*db, system=system) for db in self.dbs]


def _table_diffs(side_a: _Side, side_b: _Side, limit: int) -> list[TableDiff]:
    schemas_a, schemas_b = side_a.schemas(), side_b.schemas()
    schema_a, schema_b = _union(schemas_a, side_a), _union(schemas_b, side_b)
    named = _named_ids(schema_a, schema_b)
    unordered = side_a.is_set or side_b.is_set  # a set's columns have no one order
    diffs = []
    for table in sorted(schema_a.keys() | schema_b.keys()):
        diff = _schema_diff(table, schema_a, schema_b, unordered)
        if diff is None:
            columns = [column for column, _ in schema_a[table]]
            diff = _rows_diff(table, columns, named, (side_a, schemas_a), (side_b, schemas_b), limit)
        diffs += [diff] if diff is not None else []
        if diff is None or diff.note is None:
            diffs += [d for d in (_overlaps(table, named, side, schemas, limit) for side, schemas in
                                  ((side_a, schemas_a), (side_b, schemas_b))) if d is not None]  # fmt: skip
    return diffs


def _union(schemas: list[Schema], side: _Side) -> Schema:
    """A set's schema: every table of any file, with every column of any file, in the order first met."""
    union: dict[str, dict[str, str]] = {}
    for schema, (_, path) in zip(schemas, side.dbs):
        for table, columns in schema.items():
            known = union.setdefault(table, {})
            for name, kind in columns:
                if known.setdefault(name, kind) != kind:
                    raise DiffError(
                        f"{path}: column {table}.{name} is {kind or 'untyped'}, not {known[name] or 'untyped'} as "
                        f"in the set's other files of {side.name}"
                    )
    return {table: tuple(columns.items()) for table, columns in union.items()}


def _id_diffs(db_a: Db, db_b: Db, limit: int) -> list[TableDiff]:
    """The `ID_VIEWS` whose rows differ; a view is left out where its table or columns are not in both files
    (the schema comparison reports those), except `sqlite_sequence`, whose absence on one side is a difference."""
    schemas = [_schema(*db, system=True) for db in (db_a, db_b)]
    diffs = []
    for label, (table, columns) in ID_VIEWS.items():
        present = [set(columns) <= {name for name, _ in schema.get(table, ())} for schema in schemas]
        if not all(present):
            if table == "sqlite_sequence" and any(present):
                diffs.append(TableDiff(label, note="table only in a" if present[0] else "table only in b"))
            continue
        sql = f"SELECT {', '.join(map(_q, columns))} FROM {_q(table)} ORDER BY {', '.join(map(_q, columns))}"
        diff = _collect(label, _merge(_read(db_a, sql), _read(db_b, sql)), _listed(columns), limit)
        if diff is not None:
            diffs.append(diff)
    return diffs


@contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    if not path.is_file():
        raise DiffError(f"cannot open {path}: {'not a file' if path.exists() else 'no such file'}")
    try:
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise DiffError(f"cannot open {path}: {exc}") from exc
    with closing(connection):
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            raise DiffError(f"cannot open {path}: {exc}") from exc
        yield connection


def _read(db: tuple[sqlite3.Connection, Path], sql: str) -> Iterator[tuple]:
    """SQL's rows. Not `yield from` the cursor: a read left unfinished (the other side failed) is closed after
    its connection, and closing the cursor then would raise once more, in a finalizer that prints it."""
    connection, path = db
    try:
        for row in connection.execute(sql):  # noqa: UP028 - see the docstring
            yield row
    except sqlite3.Error as exc:
        raise DiffError(f"cannot read {path}: {exc}") from exc


def _schema(connection: sqlite3.Connection, path: Path, *, system: bool = False) -> Schema:
    """Table -> columns; SQLite's own tables (sqlite_sequence, sqlite_stat1, ...) only with SYSTEM."""
    own = "" if system else " AND lower(substr(name, 1, 7)) <> 'sqlite_'"
    tables = _read((connection, path), f"SELECT name FROM sqlite_master WHERE type = 'table'{own}")
    return {
        name: tuple((row[1], row[2].upper()) for row in _read((connection, path), f"PRAGMA table_info({_q(name)})"))
        for (name,) in list(tables)
    }


def _schema_diff(table: str, schema_a: Schema, schema_b: Schema, unordered: bool = False) -> TableDiff | None:
    if table not in schema_b:
        return TableDiff(table, note="table only in a")
    if table not in schema_a:
        return TableDiff(table, note="table only in b")
    columns_a, columns_b = schema_a[table], schema_b[table]
    if table == ORDERED or unordered:
        columns_a, columns_b = sorted(columns_a), sorted(columns_b)
    if columns_a != columns_b:
        return TableDiff(table, note=f"columns differ: a {_columns(schema_a[table])} vs b {_columns(schema_b[table])}")
    return None


def _columns(columns: tuple[tuple[str, str], ...]) -> str:
    return "(" + ", ".join(f"{name} {kind}".rstrip() for name, kind in columns) + ")"


def _named_ids(schema_a: Schema, schema_b: Schema) -> set[str]:
    """The id columns that can be replaced by names: their table has the id and name columns in both databases."""
    named = set()
    for column, (owner, names) in IDENTITIES.items():
        needed = {column, *names}
        if all(needed <= {name for name, _ in schema.get(owner, ())} for schema in (schema_a, schema_b)):
            named.add(column)
    return named


def _rows_diff(table, columns, named, a, b, limit) -> TableDiff | None:
    """A and B: (side, its files' schemas)."""
    if table == ORDERED:
        differences = _positional(_stats_rows(table, columns, *a), _stats_rows(table, columns, *b), key=_stat_sets)
        return _collect(table, differences, _numbered(columns), limit)
    own_id = OWN_ID.get(table)  # dropped when the ids are replaced by names, else compared as stored
    kept = [column for column in columns if column != own_id or own_id not in named]
    parts = _Query(named if table in BY_NAMES else set()).parts(kept)
    differences = _merge(_side_rows(table, kept, named, *a), _side_rows(table, kept, named, *b))
    return _collect(table, differences, lambda row: _render(parts, row), limit)


def _file_rows(table: str, columns: list[str], named: set[str], db: Db, schema: Schema) -> Iterator[tuple]:
    """One file's rows of TABLE by names, sorted; a column it lacks reads NULL, a table it lacks no row."""
    if table not in schema:
        return iter(())
    query = _Query(named if table in BY_NAMES else set(), {name for name, _ in schema[table]})
    return _read(db, query.sql(table, query.parts(columns)))


def _side_rows(table: str, columns: list[str], named: set[str], side: _Side, schemas: list[Schema]):
    """A side's rows of TABLE by names, sorted: a set's merged, its dimension tables' without repeats."""
    streams = [_file_rows(table, columns, named, db, schema) for db, schema in zip(side.dbs, schemas)]
    if not side.is_set:
        return streams[0]
    merged = heapq.merge(*streams, key=_order)
    return (row for row, _ in _runs(merged)) if table in DICTIONARIES else merged


def _stats_rows(table: str, columns: list[str], side: _Side, schemas: list[Schema]) -> Iterator[tuple]:
    """global_stats of one database, row by row; of a set, the one row that combines each file's last row."""

    def select(schema: Schema, last: bool) -> str:
        present = {name for name, _ in schema.get(table, ())}
        exprs = [_q(column) if column in present else "NULL" for column in columns]
        return f"SELECT {', '.join(exprs)} FROM {_q(table)} ORDER BY rowid{' DESC LIMIT 1' if last else ''}"

    if not side.is_set:
        return _read(side.dbs[0], select(schemas[0], False))
    rows = [row for db, schema in zip(side.dbs, schemas) if table in schema for row in _read(db, select(schema, True))]
    return iter([_combined(columns, rows)] if rows else [])


def _combined(columns: list[str], rows: list[tuple]) -> tuple:
    combined = []
    for column, values in zip(columns, zip(*rows)):
        present = [value for value in values if value is not None]
        if column in COMBINE:
            combined.append(COMBINE[column](present) if present else None)
        else:
            stats = dict.fromkeys(stat for value in present for stat in str(value).split(","))
            combined.append(",".join(stats) if present else None)
    return tuple(combined)


def _overlaps(table: str, named: set[str], side: _Side, schemas: list[Schema], limit: int) -> TableDiff | None:
    """The row keys (primary key columns, ids by names) of TABLE found in more than one file of a set."""
    keys = [row[1] for row in _read(side.dbs[0], f"PRAGMA table_info({_q(table)})") if row[5] > 0]
    if not side.is_set or table in DICTIONARIES or not keys or table not in schemas[0]:
        return None
    parts = _Query(named if table in BY_NAMES else set()).parts(keys)
    streams = [
        _tagged(_file_rows(table, keys, named, *file), index) for index, file in enumerate(zip(side.dbs, schemas))
    ]
    count, examples = 0, []
    for key, group in _grouped(heapq.merge(*streams, key=lambda item: _order(item[0]))):
        files = sorted({index for _, index in group})
        if len(files) > 1:
            count += 1
            if len(examples) < limit:
                names = ", ".join(side.dbs[index][1].name for index in files)
                examples.append(f"{_render(parts, key)} in {names}")
    if not count:
        return None
    where = {"examples_a" if side.name == "a" else "examples_b": tuple(examples)}
    return TableDiff(f"{table} (set {side.name})", note=f"{_rows(count)} in more than one file", **where)


def _tagged(rows: Iterable[tuple], index: int) -> Iterator[tuple[tuple, int]]:
    return ((row, index) for row in rows)


def _grouped(items: Iterable[tuple[tuple, int]]) -> Iterator[tuple[tuple, list]]:
    """Runs of equal keys of a sorted stream of (key, file index)."""
    group: list = []
    for item in items:
        if group and item[0] != group[0][0]:
            yield group[0][0], group
            group = []
        group.append(item)
    if group:
        yield group[0][0], group


@dataclass(frozen=True)
class _Part:
    """One column of a compared row, or the group of name columns that replaces an id column."""

    label: str
    exprs: tuple[str, ...]
    render: Callable[[tuple], str]


class _Query:
    """Builds the SELECT that lists a table's rows by names, sorted on every column; with PRESENT, a column of
    the table not in it is read as NULL."""

    def __init__(self, named: set[str], present: set[str] | None = None):
        self.named = named
        self.present = present
        self.joins: list[str] = []

    def parts(self, columns: list[str]) -> list[_Part]:
        return [self.column("r", column) for column in columns]

    def column(self, source: str, column: str) -> _Part:
        expr = f"{source}.{_q(column)}"
        if source == "r" and self.present is not None and column not in self.present:
            width = len(IDENTITIES[column][1]) + 1 if column in self.named else 1  # the shape of the named part
            return _Part(column, ("NULL",) * width, lambda values: _show(values[0]))
        if column not in self.named:
            return _Part(column, (expr,), lambda values: _show(values[0]))
        owner, names = IDENTITIES[column]
        alias = f"j{len(self.joins)}"
        self.joins.append(f"LEFT JOIN {_q(owner)} AS {alias} ON {alias}.{_q(column)} = {expr}")
        parts = [self.column(alias, name) for name in names]
        missing = f"CASE WHEN {alias}.{_q(column)} IS NULL THEN quote({expr}) END"
        label = column.removesuffix("_id")
        return _Part(label, (*(e for part in parts for e in part.exprs), missing), _identity(column, parts))

    def sql(self, table: str, parts: list[_Part]) -> str:
        exprs = [expr for part in parts for expr in part.exprs]
        keys = ", ".join(f"({expr}) COLLATE BINARY" for expr in exprs)
        joins = "".join(f" {join}" for join in self.joins)
        return f"SELECT {', '.join(exprs)} FROM {_q(table)} AS r{joins} ORDER BY {keys}"


def _identity(column: str, parts: list[_Part]) -> Callable[[tuple], str]:
    def render(values: tuple) -> str:
        if values[-1] is not None:
            return f"<missing {column}={values[-1]}>"
        shown = [part.render(chunk) for part, chunk in zip(parts, _split(parts, values))]
        return shown[0] if len(shown) == 1 else f"({', '.join(shown)})"

    return render


def _split(parts: list[_Part], values: tuple) -> Iterator[tuple]:
    start = 0
    for part in parts:
        yield values[start : start + len(part.exprs)]
        start += len(part.exprs)


def _render(parts: list[_Part], values: tuple) -> str:
    return ", ".join(f"{part.label}={part.render(chunk)}" for part, chunk in zip(parts, _split(parts, values)))


def _show(value) -> str:
    return "NULL" if value is None else repr(value)


def _runs(rows: Iterable[tuple]) -> Iterator[tuple[tuple, int]]:
    """Count the runs of equal rows of a sorted stream: (row, how many times)."""
    previous, count = None, 0
    for row in rows:
        if count and row == previous:
            count += 1
            continue
        if count:
            yield previous, count
        previous, count = row, 1
    if count:
        yield previous, count


def _merge(rows_a: Iterable[tuple], rows_b: Iterable[tuple]) -> Iterator[tuple[tuple, int]]:
    """Merge two sorted row streams: yield (row, times in a - times in b) for every row where that is not 0."""
    runs_a, runs_b = _runs(rows_a), _runs(rows_b)
    a, b = next(runs_a, None), next(runs_b, None)
    while a is not None or b is not None:
        if a is not None and b is not None and a[0] == b[0]:
            if a[1] != b[1]:
                yield a[0], a[1] - b[1]
            a, b = next(runs_a, None), next(runs_b, None)
        elif b is None or (a is not None and _order(a[0]) < _order(b[0])):
            yield a
            a = next(runs_a, None)
        else:
            yield b[0], -b[1]
            b = next(runs_b, None)


def _order(values: tuple) -> tuple:
    """A Python key in SQLite's BINARY order: NULL < numbers (compared as numbers) < text < blobs."""
    return tuple(
        (0, 0) if v is None else (1, v) if isinstance(v, int | float) else (2, v) if isinstance(v, str) else (3, v)
        for v in values
    )


def _positional(rows_a: Iterable[tuple], rows_b: Iterable[tuple], key: Callable) -> Iterator[tuple[tuple, int]]:
    """Rows whose KEY differs position by position, as ((position, row), +1 for a / -1 for b)."""
    for position, (row_a, row_b) in enumerate(zip_longest(rows_a, rows_b), start=1):
        if row_a is None or row_b is None or key(row_a) != key(row_b):
            yield from (((position, row), side) for row, side in ((row_a, 1), (row_b, -1)) if row is not None)


def _stat_sets(row: tuple) -> tuple:
    """A global_stats row with each stat list ('norm,min,max') in sorted order."""
    return tuple(",".join(sorted(value.split(","))) if isinstance(value, str) else value for value in row)


def _listed(columns: tuple[str, ...]) -> Callable[[tuple], str]:
    def render(row: tuple) -> str:
        return ", ".join(f"{column}={_show(value)}" for column, value in zip(columns, row))

    return render


def _numbered(columns: list[str]) -> Callable[[tuple], str]:
    def render(item: tuple) -> str:
        position, row = item
        return f"#{position} " + ", ".join(f"{column}={_show(value)}" for column, value in zip(columns, row))

    return render


def _collect(table, differences: Iterable[tuple[tuple, int]], render, limit: int) -> TableDiff | None:
    """Count the surplus rows of each side; render the first LIMIT of each side as examples."""
    counts = {1: 0, -1: 0}
    examples: dict[int, list[str]] = {1: [], -1: []}
    for row, surplus in differences:
        side, times = (1 if surplus > 0 else -1), abs(surplus)
        counts[side] += times
        if len(examples[side]) < limit:
            examples[side].append(render(row) if times == 1 else f"{render(row)} (x{times})")
    if not counts[1] and not counts[-1]:
        return None
    return TableDiff(table, counts[1], counts[-1], tuple(examples[1]), tuple(examples[-1]))


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
