"""The key and stat columns of a regular monitor CSV file, read by the C part trendconv.formats.monitor._cells
(docs/monitor-format.md §3.3).

A regular file is what the monitor writes: an unquoted header holding name and vpp_stage, integer keys, plain
numbers. For it the cell rules (trendconv.formats.monitor.rules) are plain conversions, which the C part does in
one pass without a CSV reader's set-up per file. Any other file, and every file where the C part is missing or
turned off (TRENDCONV_PURE=1), takes the general path: pyarrow's reader and the rules, which give the same values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from trendconv import native
from trendconv.formats.monitor import rules

_cells = native.extension(native.CELLS)

_KEYS = ("vpp_stage", "step", "micro_step")


def available() -> bool:
    """Whether the C part is there and on."""
    return _cells is not None


@dataclass(frozen=True)
class Buffers:
    """A regular file's rows as the C part reads them: the names as an Arrow string column, every key and stat
    column as the bytes of its int64 or float64 values."""

    header: list[str]
    count: int
    names: pa.Array
    keys: dict[str, bytes]  # vpp_stage, step and micro_step; an absent step or micro_step column is 0 in every row
    values: dict[str, bytes]  # the stats, in rules.stats_of order


def regular_buffers(raw: bytes) -> Buffers | None:
    """The rows of RAW when it is a regular file; None for any other file, or without the C part."""
    if _cells is None or not raw.isascii() and not _utf8(raw):
        return None
    end = raw.find(b"\n")
    layout = _layout(raw[: end if end >= 0 else len(raw)])
    if layout is None:
        return None
    start = end + 1 if end >= 0 else len(raw)
    found = _cells.rows(raw, start, len(layout.header), layout.name, layout.key_columns, layout.stat_columns)
    if found is None or not found[0]:
        return None  # a header-only file is rare: the general path says what it holds
    count, offsets, names, integers, numbers = found
    if not _text_names(offsets, names):
        return None
    read = dict(zip(layout.keys, integers))
    zeros = bytes(8 * count)
    return Buffers(
        list(layout.header),
        count,
        pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(names)]),
        {key: read.get(key, zeros) for key in _KEYS},
        dict(zip(layout.stats, numbers)),
    )


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False  # the general path names the line and field
    return True


@dataclass(frozen=True)
class _Layout:
    """What a header line says of a regular file's columns: the fields, and the positions of the name, the keys
    present and the stats (rules.stats_of order)."""

    header: tuple[str, ...]
    name: int
    keys: tuple[str, ...]
    key_columns: tuple[int, ...]
    stats: tuple[str, ...]
    stat_columns: tuple[int, ...]


_CACHED_LINE = 4096  # bytes: a header line longer than any the monitor writes is not kept (nor its layout)


def _layout(line: bytes) -> _Layout | None:
    """The layout of the header LINE (without its \\n); None where the general path must read the header (a quote,
    a byte order mark, an empty line, a bare \\r) or it lacks name or vpp_stage. Cached: a run's files share a few
    headers, and working one out for every file was a tenth of the parse of small files."""
    return _cached_layout(line) if len(line) <= _CACHED_LINE else _layout_of(line)


def _layout_of(line: bytes) -> _Layout | None:
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line or b'"' in line or b"\r" in line or line.startswith(b"\xef\xbb\xbf"):
        return None
    header = line.decode("utf-8").split(",")
    if "name" not in header or "vpp_stage" not in header:
        return None
    keys = tuple(key for key in _KEYS if key in header)
    stats = tuple(rules.stats_of(header))
    return _Layout(tuple(header), header.index("name"), keys, _indexes(header, keys), stats, _indexes(header, stats))


_cached_layout = functools.lru_cache(maxsize=64)(_layout_of)


def _indexes(header: list[str], names) -> tuple[int, ...]:
    return tuple(header.index(name) for name in names)


def _text_names(offsets: bytes, names: bytes) -> bool:
    """rules.name_values keeps names as they are read only for a text column with no NA cell (the C part refuses
    a file with one): its first cell is neither a number nor a boolean (rules.column_kind)."""
    first = names[: memoryview(offsets).cast("i")[1]].decode("utf-8")
    return not rules.looks_typed(first)


def typed(buffers: dict[str, bytes], kind: pa.DataType, count: int) -> dict[str, pa.Array]:
    """Each of BUFFERS as an Arrow column of KIND."""
    return {name: pa.Array.from_buffers(kind, count, [None, pa.py_buffer(buffer)]) for name, buffer in buffers.items()}
