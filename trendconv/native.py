"""Which of trendconv's optional C parts this install has.

setup.py builds them wherever a C compiler (and, for the SQLite extension, SQLite's headers) is found; without
them trendconv gives the same results in Python, a few times more slowly. `TRENDCONV_PURE=1` turns them
off, so that the Python twins can be run (and tested) on an install that has the C parts.
"""

from __future__ import annotations

import importlib
import os
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType

PURE_ENV = "TRENDCONV_PURE"
EXTRACT = "trendconv.formats.dump._extract"  # a Python extension module
CELLS = "trendconv.formats.monitor._cells"  # a Python extension module
COLUMNS = "trendconv.loading._columns"  # a SQLite extension: its file is loaded by SQLite, never imported
BTREE = "trendconv.loading._btree"  # a Python extension module
TABLE = "trendconv.loading._table"  # a Python extension module
PARTS = {
    "dump.json reader": EXTRACT,
    "monitor CSV reader": CELLS,
    "SQLite column reader": COLUMNS,
    "index page writer": BTREE,
    "table page writer": TABLE,
}


def pure() -> bool:
    """Whether the user turned the C parts off (any value but empty or 0)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def location(module: str) -> str | None:
    """The file of a C part, if this install has it and it is on (found, not imported: this stays cheap).

    Looked for in its package's directory without importing the package: `importlib.util.find_spec` would import
    trendconv.loading, and with it pyarrow, which `trendconv --version` has no use for."""
    if pure():
        return None
    package, _, name = module.rpartition(".")
    directory = Path(__file__).parent.joinpath(*package.split(".")[1:])
    spec = PathFinder.find_spec(name, [str(directory)])
    return spec.origin if spec is not None else None


def extension(module: str) -> ModuleType | None:
    """A C part that is a Python extension module, imported; None where it is missing or turned off."""
    if location(module) is None:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:  # built for another Python, say: the Python path gives the same rows
        return None


def built() -> dict[str, bool]:
    """Each C part by name, and whether this install has it."""
    return {name: location(module) is not None for name, module in PARTS.items()}


def describe() -> str:
    """`C parts: dump.json reader yes, SQLite column reader no`, or that TRENDCONV_PURE turned them off."""
    if pure():
        return f"C parts: off ({PURE_ENV}={os.environ[PURE_ENV]})"
    return "C parts: " + ", ".join(f"{name} {'yes' if present else 'no'}" for name, present in built().items())
