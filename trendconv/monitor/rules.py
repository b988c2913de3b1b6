"""Cell rules of monitor CSV files (monitor-format.md §3.3, §4.2, §8): what pandas and the reference make of text.

The reference reads each file with pandas `read_csv` defaults, so a cell's meaning depends on the type pandas
infers for its whole column. Columns arrive here as text; each rule first finds that type, then converts.
The common case (every cell a plain number) is one vectorized Arrow cast.
"""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pyarrow.compute as pc

# Canonical orders (§4.2, §4.4): metric ids and trend_data stat columns follow them.
METRICS = (
    "actv",
    "actv_grad",
    "exp_avg",
    "exp_avg_sq",
    "grad_unreduced",
    "grad_reduced",
    "param_origin",
    "param_updated",
    "other",
)
STATS = (
    "norm",
    "min",
    "max",
    "zeros",
    "nans",
    "mean",
    "entropy",
    "softmax_max",
    "sr",
    "kernel_norm",
    "std_x",
    "jacobian",
    "proxy",
    "token_similarity",
)
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
_INT = re.compile(r"\s*[+-]?\d+\s*")
_TRUE, _FALSE = ("True", "TRUE", "true"), ("False", "FALSE", "false")
INT, FLOAT, BOOL, TEXT = "int", "float", "bool", "text"


def stats_of(header: list[str]) -> list[str]:
    """The supported stat columns of a header, in canonical order."""
    present = set(header)
    return [stat for stat in STATS if stat in present]


def stat_values(column: pa.Array) -> pa.Array:
    """§8 steps 1-2 as float64: numbers and number text convert, NA cells are NaN, other text is null."""
    na = pc.is_in(column, _NA)
    try:
        return pc.if_else(na, math.nan, pc.cast(column, pa.float64()))
    except pa.ArrowInvalid:
        return pa.array(
            [math.nan if is_na else _float_or_none(text) for text, is_na in _cells(column, na)], pa.float64()
        )


def _float_or_none(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def integer_values(column: pa.Array) -> pa.Array:
    """`int()` of each cell as pandas typed it; null where that fails (the row is skipped)."""
    if len(column) and pc.all(pc.match_substring_regex(column, r"^[+-]?\d{1,18}$")).as_py():
        return pc.cast(column, pa.int64())
    kind = column_kind(column)
    return pa.array([_int_or_none(value) for value in typed_values(column, kind)], pa.int64())


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (ValueError, TypeError, OverflowError):
        return None


def name_values(column: pa.Array) -> pa.Array:
    """`str()` of each cell as pandas typed it: an NA cell is the name 'nan', a numeric column's names are numbers."""
    na = pc.is_in(column, _NA)
    kind = column_kind(column)
    if kind == TEXT:
        return pc.if_else(na, "nan", column)
    return pa.array([str(value) for value in typed_values(column, kind)], pa.string())


def column_kind(column: pa.Array) -> str:
    """The dtype pandas infers for a column of text cells: int, float, bool or text (object)."""
    na = pc.is_in(column, _NA)
    cells = [text for text, is_na in _cells(column, na) if not is_na]
    any_na = len(cells) < len(column)
    if not cells:
        return FLOAT
    if all(_INT.fullmatch(text) for text in cells):
        return FLOAT if any_na else INT
    if all(_float_or_none(text) is not None for text in cells):
        return FLOAT
    if all(text in _TRUE or text in _FALSE for text in cells):
        return TEXT if any_na else BOOL
    return TEXT


def typed_values(column: pa.Array, kind: str) -> list:
    """Each cell as the Python value pandas would hand the reference for a column of that kind."""
    na = pc.is_in(column, _NA)
    convert = {
        INT: lambda text: int(text.strip()),
        FLOAT: lambda text: float(text.strip()),
        BOOL: lambda text: text in _TRUE,
    }
    to_value = convert.get(kind, str)
    return [math.nan if is_na else to_value(text) for text, is_na in _cells(column, na)]


def _cells(column: pa.Array, na: pa.Array):
    return zip(column.to_pylist(), na.to_pylist())
