"""Finding formats: by name, and in DATA."""

from __future__ import annotations

from pathlib import Path

from trendconv.errors import DataError, UsageError
from trendconv.formats.contract import Format
from trendconv.formats.registry import FORMATS
from trendconv.scan import check_data

AUTO = "auto"


def names() -> list[str]:
    """Every format's name, in registry order."""
    return list(FORMATS)


def get(name: str) -> Format:
    """The format called NAME; a UsageError for an unknown name."""
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"format {name!r}: expected {_choices([AUTO, *FORMATS])}") from None


def detect(data: Path) -> list[Format]:
    """Every format whose data DATA holds, in registry order; a DataError when there is none."""
    check_data(data)
    found = [fmt for fmt in FORMATS.values() if fmt.detect(data)]
    if not found:
        kinds = " nor ".join(f"{fmt.name} data ({fmt.looks_like})" for fmt in FORMATS.values())
        raise DataError(f"{data}: neither {kinds}")
    return found


def chosen(data: Path, name: str) -> list[Format]:
    """The format NAME, or for `auto` every format found in DATA."""
    return detect(data) if name == AUTO else [get(name)]


def _choices(names: list[str]) -> str:
    quoted = [repr(name) for name in names]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
