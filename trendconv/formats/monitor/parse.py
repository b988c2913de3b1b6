"""Turn one monitor CSV file into normalized trend rows (no database ids), as docs/monitor-format.md §3.3, §4.2 say."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from trendconv.errors import DataError, cannot_read
from trendconv.formats.monitor import rules
from trendconv.formats.monitor.arrays import constant
from trendconv.formats.monitor.scan import CsvFile
from trendconv.options import ParseOptions, apply_mapping


@dataclass
class MonitorRows:
    """The valid rows of one CSV file, in file order, and what the file says about its steps."""

    columns: dict[str, pa.Array]
    stats: list[str]
    has_micro_step: bool
    skipped: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.columns["target_name"])

    def micro_steps_per_step(self) -> list[list[int]]:
        """`slots` of these rows."""
        if not len(self):
            return []
        return slots(self.columns["step"].to_pylist(), self.columns["micro_step"].to_pylist(), self.has_micro_step)


def slots(steps: Sequence[int], micro_steps: Sequence[int], has_micro_step: bool) -> list[list[int]]:
    """[original step, micro-step count] pairs in step order (docs/monitor-format.md §7): max(micro_step + 1), 1
    without the column; STEPS is not empty."""
    low, high = min(steps), max(steps)
    if not has_micro_step:
        return [[low, 1]] if low == high else [[step, 1] for step in sorted(set(steps))]
    if low == high:
        return [[low, max(max(micro_steps) + 1, 0)]]
    largest: dict[int, int] = {}
    for step, micro_step in zip(steps, micro_steps):
        if largest.get(step, micro_step) <= micro_step:
            largest[step] = micro_step
    # The + 1 in Python: in int64 a micro_step of 2**63 - 1 would wrap around to the smallest count.
    return [[step, max(largest[step] + 1, 0)] for step in sorted(largest)]


def parse_general(raw: bytes, csv_file: CsvFile, options: ParseOptions) -> MonitorRows:
    """The rows of RAW, any CSV file, by pyarrow's reader and the cell rules."""
    header, cells = cells_of(raw, csv_file.path)
    stats = rules.stats_of(header)
    columns = {name: cells[header.index(name)] for name in dict.fromkeys(header)}
    rows = len(cells[0]) if cells else 0
    skipped: Counter = Counter()
    for required in ("name", "vpp_stage"):
        if required not in columns:
            skipped[f"row of a file without a {required} column"] += rows
            return MonitorRows(_empty(stats), stats, "micro_step" in columns, skipped)
    keys = {
        "target_name": rules.name_values(columns["name"], _name_kind(columns)),
        "vpp_stage": rules.integer_values(columns["vpp_stage"]),
        "step": _optional_integer(columns, "step", rows),
        "micro_step": _optional_integer(columns, "micro_step", rows),
    }
    valid = _valid_rows(keys, skipped)
    values = {stat: rules.stat_values(columns[stat]) for stat in stats}
    kept = {**keys, **values}
    if valid is not None:
        kept = {name: column.filter(valid) for name, column in kept.items()}
    kept["target_name"] = mapped(kept["target_name"], options.mapping)
    return MonitorRows(kept, stats, "micro_step" in columns, skipped)


def _name_kind(columns: dict[str, pa.Array]) -> str:
    """Only a file whose names are numbers can be all-numeric; real monitor files never are."""
    kind = rules.column_kind(columns["name"])
    if kind == rules.TEXT:
        return kind
    return rules.row_kind(list(columns.values())) or kind


def _optional_integer(columns: dict[str, pa.Array], name: str, rows: int) -> pa.Array:
    """An absent step or micro_step column means 0 for every row."""
    if name not in columns:
        return constant(0, pa.int64(), rows)
    return rules.integer_values(columns[name])


def _valid_rows(keys: dict[str, pa.Array], skipped: Counter) -> pa.Array | None:
    """The rows whose key cells are integers; None when all are."""
    if not any(keys[name].null_count for name in ("vpp_stage", "step", "micro_step")):
        return None
    valid = constant(True, pa.bool_(), len(keys["vpp_stage"]))
    for name in ("vpp_stage", "step", "micro_step"):
        invalid = pc.and_(valid, pc.is_null(keys[name]))
        count = pc.sum(invalid.cast(pa.int64())).as_py() or 0
        if count:
            skipped[f"row whose {name} is not an integer"] += count
        valid = pc.and_(valid, pc.invert(invalid))
    return valid


def mapped(names: pa.Array, mapping: tuple[tuple[str, str], ...]) -> pa.Array:
    if not mapping:
        return names
    encoded = names.dictionary_encode()
    renamed = pa.array([apply_mapping(name, mapping) for name in encoded.dictionary.to_pylist()], pa.string())
    return renamed.take(encoded.indices)


def _empty(stats: list[str]) -> dict[str, pa.Array]:
    columns = {"target_name": pa.array([], pa.string())}
    columns.update({name: pa.array([], pa.int64()) for name in ("vpp_stage", "step", "micro_step")})
    columns.update({stat: pa.array([], pa.float64()) for stat in stats})
    return columns


def read_raw(csv_file: CsvFile) -> bytes:
    try:
        with open(csv_file.file, "rb") as file:
            return file.read()
    except OSError as exc:
        raise cannot_read(csv_file.path, exc) from None


def cells_of(raw: bytes, path) -> tuple[list[str], list[pa.Array]]:
    """The header and every column of RAW as text, as pandas would split the file; short rows are padded with
    NA."""
    if not raw.strip():
        raise DataError(f"{path}: empty file: no header line")
    short: list[int] = []
    table = _read_text_table(raw, path, short)
    if short:
        return _read_with_padding(raw, path)
    header = [cell for cell in table.slice(0, 1).to_pylist()[0].values()]
    return header, [column.combine_chunks().slice(1) for column in table.columns]


def _read_text_table(raw: bytes, path, short: list[int]) -> pa.Table:
    """Every field as text. Rows with too few fields are noted in SHORT; too many fields are an error."""
    long: list[tuple[int, int, int]] = []
    width = _header_width(raw, path)
    try:
        try:
            table = _read_csv(raw, width, short, long, _BLOCK)
        except pa.ArrowInvalid as exc:
            if "straddl" not in str(exc):
                raise
            # A row longer than Arrow's block: one block for the whole file reads it (in twice the time, so
            # only then). The file is in memory already.
            short.clear()
            long.clear()
            table = _read_csv(raw, width, short, long, min(len(raw), _MAX_BLOCK))
    except pa.ArrowInvalid as exc:
        raise _csv_error(exc, path) from None
    if long:
        number, actual, expected = long[0]
        raise DataError(f"{path}: line {number}: {actual} fields, the header has {expected}")
    return table


_BLOCK, _MAX_BLOCK = 1 << 20, 2**31 - 1  # Arrow's default block size, and its largest (an int32)


def _read_csv(raw: bytes, width: int, short: list[int], long: list[tuple[int, int, int]], block: int) -> pa.Table:
    def on_invalid(row) -> str:
        if row.actual_columns > row.expected_columns:
            long.append((row.number, row.actual_columns, row.expected_columns))
        else:
            short.append(row.number)
        return "skip"

    return pacsv.read_csv(
        io.BytesIO(raw),
        read_options=pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False, block_size=block),
        parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(
            column_types={f"f{index}": pa.string() for index in range(width)},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            null_values=[],
        ),
    )


def _csv_error(exc: pa.ArrowInvalid, path) -> DataError:
    reason = str(exc).splitlines()[0]
    place = re.search(r"column #(\d+): Row #(\d+)", reason)
    if "invalid UTF8" in reason and place:
        column, line = int(place[1]) + 1, int(place[2])
        return DataError(f"{path}: line {line}, field {column}: not UTF-8 text")
    return DataError(f"{path}: not a readable CSV file: {reason}")


def _header_width(raw: bytes, path) -> int:
    start = len(raw) - len(raw.lstrip(b"\r\n"))
    ends = [end for end in (raw.find(b"\n", start), raw.find(b"\r", start)) if end >= 0]  # pandas ends lines at \r too
    first = _text(raw[start : min(ends, default=None)], path)
    with _fields_of_any_size():
        return len(next(csv.reader([first])))


@contextmanager
def _fields_of_any_size():
    """Python's csv refuses fields over 128 KiB; pandas (and so msprobe) reads them."""
    limit = csv.field_size_limit(_MAX_BLOCK)
    try:
        yield
    finally:
        csv.field_size_limit(limit)


def _text(raw: bytes, path) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _read_with_padding(raw: bytes, path) -> tuple[list[str], list[pa.Array]]:
    """The slow path for files with short rows: pandas fills the missing trailing fields with NaN."""
    with _fields_of_any_size():
        lines = [row for row in csv.reader(io.StringIO(_text(raw, path), newline="")) if row]
    header, body = lines[0], lines[1:]
    padded = [row + [""] * (len(header) - len(row)) for row in body]
    return header, [pa.array([row[index] for row in padded], pa.string()) for index in range(len(header))]
