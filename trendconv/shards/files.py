"""Parquet shards: the self-describing, atomically written intermediate between parse and load.

One shard per unit of a format (trendconv.formats), at WORK/<format>/shards/<Format.shard_name(unit)>. Its footer
metadata (key `trendconv`) holds a JSON document, its *meta*, saying where it came from and what it holds, checked
by trendconv.schemas whenever it is read; the rows carry no database ids. Each format says which columns its shards
have (`Format.shard_schema`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trendconv import schemas
from trendconv.errors import DataError, cannot_write, make_directory
from trendconv.faults import fault_point

if TYPE_CHECKING:
    from trendconv.formats import Format

SHARD_FORMAT = schemas.SHARD_FORMAT
META_KEY = b"trendconv"
# A shard whose meta reads fine is reused by parse, so parse alone does not replace one with broken rows.
DELETE_AGAIN = "delete it and run `trendconv.parse()` again"
SHARD_DIR = "shards"

# The type of a shard's text columns: most values repeat, and a dictionary stores each once.
DICT_STRING = pa.dictionary(pa.int32(), pa.string())


class Shard:
    """A unit's shard: `path`, its own file or its name in a chunk, and `meta`, the footer document (in a chunk:
    the unit's entry, with its chunk and first row). Made from the path's text, it makes the Path when asked for:
    the load stage hands 100,000 shards around, and most are never opened by their own path."""

    __slots__ = ("_path", "meta")

    def __init__(self, path: Path | str, meta: dict):
        self._path, self.meta = path, meta

    @property
    def path(self) -> Path:
        if type(self._path) is str:
            self._path = Path(self._path)
        return self._path

    @property
    def text(self) -> str:
        """The path as text, without making a Path."""
        return self._path if type(self._path) is str else str(self._path)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Shard:
            return NotImplemented
        return (self.path, self.meta) == (other.path, other.meta)

    __hash__ = None  # as the meta, a dict

    def __repr__(self) -> str:
        return f"Shard(path={self.path!r}, meta={self.meta!r})"

    @property
    def file(self) -> Path:
        """The file that holds the rows: the shard's own, or its chunk."""
        chunk = self.meta.get("chunk")
        return self.path if chunk is None else Path(chunk)


class OtherShardFormat(DataError):
    """A shard written by a trendconv of another shard format: stale, not damaged."""


def shard_dir(part: Path) -> Path:
    """The shard directory of a format's part of WORK (trendconv.workdir)."""
    return part / SHARD_DIR


def write_shard(path: Path, table: pa.Table, meta: dict) -> None:
    """Write to a temporary name in the same directory, then rename: readers never see half a shard.

    META goes into the file's key-value metadata alone. As the schema's metadata it was also kept inside the
    serialized Arrow schema that pyarrow writes beside it: a chunk's footer held every unit's meta twice (once in
    base64), and opening a chunk of 256 monitor files took twice as long as its rows. A reader gets META as the
    schema's metadata all the same."""
    table = table.replace_schema_metadata(None)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        make_directory(path.parent)
        _write_parquet(tmp, table, meta)
        fault_point("shard-before-rename")
        os.replace(tmp, path)
    except OSError as exc:  # WORK's fault (full, read-only, a directory in the way), never the input file's
        raise cannot_write(path, exc, ours=tmp) from None
    finally:
        with contextlib.suppress(OSError):  # whatever is left at our temporary name is ours (as pq.write_table had it)
            os.remove(tmp)


def _write_parquet(tmp: Path, table: pa.Table, meta: dict) -> None:
    with pq.ParquetWriter(
        tmp,
        table.schema,
        compression="snappy",
        use_dictionary=_dictionary_columns(table.schema),
        write_statistics=False,  # nothing filters shards; statistics were a third of the write time
        write_page_checksum=True,  # a changed byte in the rows fails the read (`_open`), not loads other values
    ) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
        writer.add_key_value_metadata({META_KEY: orjson.dumps(meta, option=orjson.OPT_SORT_KEYS)})


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns that are dictionaries in memory; trying a dictionary on number columns costs time for nothing."""
    return [field.name for field in schema if pa.types.is_dictionary(field.type)]


def read_meta(path: Path, fmt: Format) -> dict:
    """The meta alone (cheap: no rows are read), once trendconv.schemas found it to be the meta of a shard of FMT
    with the columns and the number of rows it says; otherwise a DataError naming it."""
    document, rows, columns = _footer(path)
    if type(document) is dict and "chunk_format" in document:
        raise ChunkFile(f"{path}: a chunk of many units' shards, not one unit's")
    try:
        schemas.check_meta(document, fmt, rows)
    except schemas.OtherShardFormat as exc:
        raise OtherShardFormat(f"{path}: {exc}; {schemas.AGAIN}") from None
    except schemas.Invalid as exc:
        raise DataError(f"{path}: unexpected footer: {exc}; {schemas.AGAIN}") from None
    if columns.remove_metadata() != fmt.shard_schema(document):
        raise DataError(f"{path}: unexpected shard columns; {schemas.AGAIN}")
    return document


def _footer(path: Path) -> tuple[object, int, pa.Schema]:
    """The footer document of the shard file at PATH, its number of rows and its columns."""
    if not path.is_file():  # not even opened: a FIFO would block
        raise DataError(f"{path}: not a readable trendconv shard (not a file); {schemas.AGAIN}")
    try:
        with pq.ParquetFile(path) as parquet:
            rows, columns, pairs = parquet.metadata.num_rows, parquet.schema_arrow, parquet.metadata.metadata
        document = orjson.loads((pairs or {})[META_KEY])  # the file's key-value metadata (see `write_shard`)
    except (OSError, pa.ArrowException, KeyError, orjson.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)}); {schemas.AGAIN}") from None
    return document, rows, columns


def footer_document(path: Path) -> object:
    """The footer document of a shard file, unchecked (only to tell whose an unreadable old shard is)."""
    return _footer(path)[0]


def read_own(directory: Path, name: str, fmt: Format) -> Shard:
    """The shard DIRECTORY/NAME, if it is one trendconv wrote there: its meta is valid and names NAME."""
    path = directory / name
    meta = read_meta(path, fmt)
    if fmt.meta_shard_name(meta) != name:
        raise DataError(f"{path}: unexpected footer: it describes {fmt.meta_shard_name(meta)}; {schemas.AGAIN}")
    return Shard(path, meta)


def read_rows(path: Path, schema: pa.Schema, *, use_threads: bool = True) -> pa.Table:
    """The rows of a shard, which must have the columns of SCHEMA; USE_THREADS False halves the time for small
    shards (no thread-pool round trip)."""
    try:
        table = _open(path).read(use_threads=use_threads)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)}); {DELETE_AGAIN}") from None
    if table.schema.remove_metadata() != schema:
        raise DataError(f"{path}: unexpected shard columns; {schemas.AGAIN}")
    return table


def list_shards(part: Path) -> Iterator[Path]:
    """Every entry named *.parquet under the shard directory of PART, in sorted order (as `sorted` orders their
    Paths), one at a time: a list of 100,000 dump shards' Paths was 32 MiB of a re-run's main process. Symbolic
    links to directories are not followed: what they lead to is not WORK's. A directory that cannot be listed is
    passed over, as `os.walk` passes it over."""
    return _entries_under(str(shard_dir(part)))


def _entries_under(directory: str) -> Iterator[Path]:
    try:
        with os.scandir(directory) as listing:
            # a directory's own entries are listed before any is given: the caller may remove them meanwhile
            entries = sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing)
    except OSError:
        return
    for name, is_directory in entries:
        path = os.path.join(directory, name)
        if name.endswith(schemas.SHARD_SUFFIX):
            yield Path(path)
        if is_directory:  # its entries sort after it and before the next name
            yield from _entries_under(path)


def rows_mismatch(path: Path, detail: str) -> DataError:
    """A shard whose rows are not what its meta says."""
    return DataError(f"{path}: the rows do not match the footer ({detail}); {DELETE_AGAIN}")


def _open(path: Path) -> pq.ParquetFile:
    """A shard file whose pages' checksums are checked as they are read: a byte changed in WORK then fails the
    load with the shard's name. Snappy alone lets many changes through (as other numbers, loaded as if parsed)."""
    return pq.ParquetFile(path, page_checksum_verification=True)


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return "no trendconv metadata"
    if isinstance(exc, OSError) and exc.errno:  # the system's words, not Arrow's sentence around them
        return os.strerror(exc.errno)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# ---- chunks: one Parquet file holding the shards of many units (docs/architecture.md, "Chunk files")

CHUNK_DIR = "_chunks"  # no format's shard name starts with it: run directories hold "-rank", dump names "step"
CHUNK_FORMAT = schemas.CHUNK_FORMAT
CHUNK_KEYS = ("chunk", "row_start")  # what an in-memory meta of a unit in a chunk has besides its footer entry


class ChunkFile(DataError):
    """A chunk file, read where a unit's own shard was expected."""


def chunk_path(directory: Path, name: str) -> Path:
    return directory / CHUNK_DIR / name


def write_chunk(path: Path, table: pa.Table, metas: list[dict]) -> list[dict]:
    """The rows of many units (TABLE, in the order of METAS, each unit's `rows` of them) as one shard file; the
    metas of the units as `read_chunk` gives them (each with its chunk and first row)."""
    units, start = [], 0
    for meta in metas:
        units.append({**meta, "row_start": start})
        start += meta["rows"]
    if start != table.num_rows:
        raise AssertionError(f"{path}: {table.num_rows} rows for units of {start}")
    document = {"chunk_format": CHUNK_FORMAT, "chunk": _chunk_name(path), "units": units}
    write_shard(path, table, document)
    return [_located(unit, path) for unit in units]


def _chunk_name(path: Path) -> str:
    return f"{CHUNK_DIR}/{path.name}"


def _located(unit: dict, path: Path) -> dict:
    return {**unit, "chunk": str(path)}


def is_chunk(path: Path, directory: Path) -> bool:
    return path.parent == directory / CHUNK_DIR


def read_chunk(path: Path, fmt: Format) -> list[dict]:
    """The metas of the units of the chunk at PATH, once trendconv.schemas found its footer to be a chunk's that
    names PATH, each unit's meta a valid meta of FMT, its rows tiling the file's and its columns those of the
    file; otherwise a DataError naming it."""
    document, rows, columns = _footer(path)
    try:
        units = schemas.check_chunk(document, fmt, rows, _chunk_name(path))
    except schemas.OtherShardFormat as exc:
        raise OtherShardFormat(f"{path}: {exc}; {schemas.AGAIN}") from None
    except schemas.Invalid as exc:
        raise DataError(f"{path}: unexpected footer: {exc}; {schemas.AGAIN}") from None
    # each distinct schema once (a format caches them: a chunk's units mostly share one)
    parts = list({id(part): part for part in map(fmt.shard_schema, units)}.values())
    if not _union_of(columns.remove_metadata(), parts):
        raise DataError(f"{path}: unexpected shard columns; {schemas.AGAIN}")
    return [_located(unit, path) for unit in units]


def _union_of(columns: pa.Schema, parts: list[pa.Schema]) -> bool:
    """Whether COLUMNS are the columns of PARTS together, each of the type every part gives it."""
    kinds = {}
    for part in parts:
        for field in part:
            if kinds.setdefault(field.name, field.type) != field.type:
                return False
    return len(columns) == len(kinds) and all(kinds.get(field.name) == field.type for field in columns)


class UnitRows:
    """The rows of units' shards, in their own files or in chunks. A chunk is read whole once and kept while
    its units come one after another (the load takes units in processing order, and a chunk holds a run of
    them), so that a Parquet read is paid per chunk, not per unit."""

    def __init__(self, keep: int = 2):
        self._tables: dict[str, tuple[pa.Table, set[str]]] = {}
        self._keep = keep
        self._checked: set[tuple[str, tuple[str, ...]]] = set()  # (chunk, columns) found of the shard types
        self._schemas: dict[int, tuple[pa.Schema, tuple[str, ...]]] = {}

    def read(self, shard: Shard, schema: pa.Schema) -> pa.Table:
        """The rows of SHARD, which must have the columns of SCHEMA."""
        chunk = shard.meta.get("chunk")
        if chunk is None:
            return read_rows(shard.path, schema, use_threads=False)
        table, names = self._chunk(chunk)
        start, count = shard.meta["row_start"], shard.meta["rows"]
        if start + count > table.num_rows or not names.issuperset(schema.names):
            raise rows_mismatch(Path(chunk), f"rows {start} to {start + count - 1} of {table.num_rows}")
        part = table.slice(start, count).select(schema.names)
        if part.schema.remove_metadata() != schema:
            raise DataError(f"{chunk}: unexpected shard columns; {schemas.AGAIN}")
        return part

    def span(self, shard: Shard, schema: pa.Schema) -> tuple[int, int]:
        """Where the rows of SHARD (a unit in a chunk) are in its chunk file, (first row, count), checked as `read`
        checks them; the columns once per chunk and set of columns. Slicing once per run of units is the
        caller's: a slice and a table per small file cost more than its rows."""
        chunk = shard.meta["chunk"]
        table, names = self._chunk(chunk)
        start, count = shard.meta["row_start"], shard.meta["rows"]
        wanted = self._names_of(schema)
        if start + count > table.num_rows or not names.issuperset(wanted):
            raise rows_mismatch(Path(chunk), f"rows {start} to {start + count - 1} of {table.num_rows}")
        key = (chunk, wanted)
        if key not in self._checked:
            if table.select(wanted).schema.remove_metadata() != schema:
                raise DataError(f"{chunk}: unexpected shard columns; {schemas.AGAIN}")
            self._checked.add(key)
        return start, count

    def _names_of(self, schema: pa.Schema) -> tuple[str, ...]:
        """SCHEMA's column names, found once per schema object (a format's schemas are few and cached, and Arrow
        makes a new list of them each time it is asked: two a unit were a tenth of the load of small files). The
        schema is kept with them, so that its id names no other schema meanwhile."""
        found = self._schemas.get(id(schema))
        if found is None or found[0] is not schema:
            found = self._schemas[id(schema)] = (schema, tuple(schema.names))
        return found[1]

    def whole(self, chunk: str) -> pa.Table:
        """Every row of the chunk file CHUNK."""
        return self._chunk(chunk)[0]

    def _chunk(self, chunk: str) -> tuple[pa.Table, set[str]]:
        found = self._tables.get(chunk)
        if found is None:
            table = _read_table(Path(chunk))
            if len(self._tables) >= self._keep:
                self._tables.pop(next(iter(self._tables)))
            found = self._tables[chunk] = (table, set(table.column_names))
        return found


def _read_table(path: Path) -> pa.Table:
    try:
        return _open(path).read(use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)}); {DELETE_AGAIN}") from None
