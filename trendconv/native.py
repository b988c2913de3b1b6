"""Which of trendconv's optional C parts this install has.

setup.py builds them wherever a C compiler (and, for the second, SQLite's headers) is found; without
them trendconv gives the same results in Python, a few times more slowly.
"""

from __future__ import annotations

from importlib.util import find_spec

COLUMNS = "trendconv.load._columns"  # a SQLite extension: its file is loaded by SQLite, never imported
PARTS = {
    "dump.json reader": "trendconv.dump._extract",
    "SQLite column reader": COLUMNS,
}


def location(module: str) -> str | None:
    """The file of a C part, if this install has it (found, not imported: this stays cheap)."""
    spec = find_spec(module)
    return spec.origin if spec is not None else None


def built() -> dict[str, bool]:
    """Each C part by name, and whether this install has it."""
    return {name: location(module) is not None for name, module in PARTS.items()}


def describe() -> str:
    """`C parts: dump.json reader yes, SQLite column reader no`."""
    return "C parts: " + ", ".join(f"{name} {'yes' if present else 'no'}" for name, present in built().items())
