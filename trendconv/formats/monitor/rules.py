"""Cell rules of monitor CSV files (docs/monitor-format.md §3.3, §4.2, §8): what pandas and the reference make of text.

The reference reads each file with pandas `read_csv` defaults, so a cell's meaning depends on the type pandas
infers for its whole column. Columns arrive here as text; each rule first finds that type, then converts.
The common case (every cell a plain number) is one vectorized Arrow cast.
"""

from __future__ import annotations

import math
import re
import sys

import pyarrow as pa
import pyarrow.compute as pc

from trendconv import int64
from trendconv.formats.monitor.metrics import STATS

# pandas' default na_values: these cells are NaN in any column.
NA_TOKENS = (
    "",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "<NA>",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "None",
    "n/a",
    "nan",
    "null",
)
_NA = pa.array(NA_TOKENS)
# What pandas' C parser takes for numbers (ASCII digits only, no underscores, unlike Python's int/float).
_INT = re.compile(r"\s*[+-]?[0-9]+\s*")
_FLOAT = re.compile(r"\s*[+-]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity)\s*", re.IGNORECASE)
_BOOLEANS = {"true": True, "false": False}
INT, FLOAT, BOOL, TEXT = "int", "float", "bool", "text"


def stats_of(header: list[str]) -> list[str]:
    """The supported stat columns of a header, in canonical order."""
    present = set(header)
    return [stat for stat in STATS if stat in present]


def stat_values(column: pa.Array) -> pa.Array:
    """docs/monitor-format.md §8 steps 1-2 as float64: numbers and number text convert, NA cells are NaN, other
    text is null."""
    try:
        return pc.cast(column, pa.float64())  # Arrow reads the NA spellings it knows ('nan') as NaN too
    except pa.ArrowInvalid:
        pass
    na = pc.is_in(column, _NA)
    try:
        return pc.if_else(na, math.nan, pc.cast(pc.if_else(na, "nan", column), pa.float64()))
    except pa.ArrowInvalid:
        pass
    if column_kind(column) == BOOL:
        return pa.array([float(value) for value in typed_values(column, BOOL)], pa.float64())
    values = [math.nan if is_na else _float_or_none(text) for text, is_na in _cells(column, na)]
    return pa.array(values, pa.float64())


def _float_or_none(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def integer_values(column: pa.Array) -> pa.Array:
    """`int()` of each cell as pandas typed it; null where that fails (the row is skipped)."""
    if len(column) and not pc.any(pc.match_substring_regex(column, r"[^0-9-]")).as_py():
        try:
            return pc.cast(column, pa.int64())
        except (pa.ArrowInvalid, OverflowError):
            pass
    kind = column_kind(column)
    return pa.array([_int_or_none(value) for value in typed_values(column, kind)], pa.int64())


def _int_or_none(value) -> int | None:
    try:
        number = int(value)
    except (ValueError, TypeError, OverflowError):
        return None
    return number if int64.fits(number) else None


def name_values(column: pa.Array, kind: str) -> pa.Array:
    """`str()` of each cell as pandas typed it: an NA cell is the name 'nan', a numeric column's names are numbers.

    KIND is the column's (column_kind), or FLOAT when every column of the file is numeric and one is float:
    pandas then hands over whole rows as float64 and an integer name `1` reads `1.0`.
    """
    na = pc.is_in(column, _NA)
    if kind == TEXT:
        return pc.if_else(na, "nan", column)
    return pa.array([str(value) for value in typed_values(column, kind)], pa.string())


def row_kind(columns: list[pa.Array]) -> str | None:
    """FLOAT when every column is numeric and one is float (pandas then hands over rows as float64)."""
    kinds = {column_kind(column) for column in columns}
    return FLOAT if kinds == {INT, FLOAT} or kinds == {FLOAT} else None


def column_kind(column: pa.Array) -> str:
    """The dtype pandas infers for a column of text cells: int, float, bool or text (object)."""
    na = pc.is_in(column, _NA)
    if pc.all(na).as_py() is not False:
        return FLOAT
    first = column.filter(pc.invert(na))[0].as_py()
    if not looks_typed(first):
        return TEXT  # one cell that is neither a number nor a boolean makes the whole column text
    any_na = pc.any(na).as_py()
    if _all_match(column, na, _INT.pattern):
        if _has_unreadable_integer(column):
            return TEXT
        return FLOAT if any_na else INT
    if _all_match(column, na, "(?i)" + _FLOAT.pattern):
        return FLOAT
    if pc.all(pc.or_(na, pc.is_in(pc.utf8_lower(column), pa.array(list(_BOOLEANS))))).as_py():
        return BOOL
    return TEXT


def looks_typed(first: str) -> bool:
    """Whether a column's first non-NA cell is a number or a boolean: otherwise pandas keeps the column as text."""
    return bool(_FLOAT.fullmatch(first)) or first.lower() in _BOOLEANS


def _has_unreadable_integer(column: pa.Array) -> bool:
    """An integer of more digits than Python reads (4300) makes pandas keep the whole column as text."""
    long = column.filter(pc.greater(pc.utf8_length(column), _INT_DIGITS))
    return any(len(text.strip().lstrip("+-")) > _INT_DIGITS for text in long.to_pylist())


_INT_DIGITS = sys.int_info.default_max_str_digits


def _all_match(column: pa.Array, na: pa.Array, pattern: str) -> bool:
    return pc.all(pc.or_(na, pc.match_substring_regex(column, f"^(?:{pattern})$"))).as_py()


def typed_values(column: pa.Array, kind: str) -> list:
    """Each cell as the Python value pandas would hand the reference for a column of that kind."""
    na = pc.is_in(column, _NA)
    convert = {
        INT: lambda text: int(text.strip()),
        FLOAT: lambda text: float(text.strip()),
        BOOL: lambda text: _BOOLEANS[text.lower()],
    }
    to_value = convert.get(kind, str)
    return [math.nan if is_na else to_value(text) for text, is_na in _cells(column, na)]


def _cells(column: pa.Array, na: pa.Array):
    return zip(column.to_pylist(), na.to_pylist())
