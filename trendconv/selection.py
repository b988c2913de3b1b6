"""A subset of a run to convert: which steps and which ranks (`--steps`, `--ranks`), whatever the format.

A SPEC is comma-separated numbers and inclusive ranges `A-B`, like `0-9,12`; docs/user-guide.md has the rules. Each
format's scan applies a `Selection` before it opens anything under a directory left out.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_NUMBERS = re.compile(r"(-?[0-9]+)(?:-(-?[0-9]+))?", re.ASCII)
_LARGEST = 2**63 - 1  # steps and ranks are 64-bit integers in the database
EXAMPLE = "0-9,12"


class SpecError(ValueError):
    """A SPEC that is no list of numbers and ranges; the message says which part and why."""


@dataclass(frozen=True)
class Numbers:
    """One SPEC: sorted inclusive (first, last) spans, none touching another."""

    spans: tuple[tuple[int, int], ...]

    def contains(self, number: int) -> bool:
        index = bisect.bisect_right(self.spans, (number, _LARGEST)) - 1
        return index >= 0 and self.spans[index][1] >= number

    def covers(self, first: int, last: int) -> bool:
        """Whether every number from FIRST to LAST is in."""
        index = bisect.bisect_right(self.spans, (first, _LARGEST)) - 1
        return index >= 0 and self.spans[index][1] >= last

    def meets(self, first: int, last: int) -> bool:
        """Whether any number from FIRST to LAST is in."""
        return any(a <= last and b >= first for a, b in self.spans)

    @property
    def text(self) -> str:
        """The spec in its shortest spelling: `0-3,5` for `5,0-1,2-3`."""
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.spans)


def parse_spec(spec: str) -> Numbers:
    """SPEC as `Numbers`; a SpecError when it is empty, has an empty part, a negative number, a reversed range
    or a part that is neither a number nor a range."""
    if not spec.strip():
        raise SpecError(f"empty: give numbers and inclusive ranges, like {EXAMPLE}")
    spans = sorted(_span(part.strip(), spec) for part in spec.split(","))
    return Numbers(_merged(spans))


def _span(part: str, spec: str) -> tuple[int, int]:
    if not part:
        raise SpecError(f"{spec!r} has an empty part: give numbers and ranges between commas, like {EXAMPLE}")
    match = _NUMBERS.fullmatch(part)
    if match is None:
        raise SpecError(f"{part!r} is not a number or a range A-B, like {EXAMPLE}")
    first, last = match[1], match[2] if match[2] is not None else match[1]
    if first.startswith("-") or last.startswith("-"):
        raise SpecError(f"{part!r} is negative: only steps and ranks from 0 up can be selected")
    for number in (first, last):
        if int(number) > _LARGEST:
            raise SpecError(f"{number} does not fit a 64-bit integer")
    if int(first) > int(last):
        raise SpecError(f"{part!r} is a reversed range: write {int(last)}-{int(first)}")
    return int(first), int(last)


def _merged(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Overlapping and adjacent spans as one: `0-3,4,6` is `0-4,6`."""
    merged: list[tuple[int, int]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


@dataclass(frozen=True)
class Selection:
    """The steps and ranks to convert; None: all of them."""

    steps: Numbers | None = None
    ranks: Numbers | None = None

    def __bool__(self) -> bool:
        return self.steps is not None or self.ranks is not None

    def step(self, number: int) -> bool:
        return self.steps is None or self.steps.contains(number)

    def rank(self, number: int) -> bool:
        return self.ranks is None or self.ranks.contains(number)

    def step_range(self, first: int, last: int) -> bool:
        """Whether every step from FIRST to LAST is selected."""
        return self.steps is None or self.steps.covers(first, last)

    def record(self) -> dict:
        """As work.json and manifest.json record it: `{"steps": "0-3", "ranks": null}`."""
        return {"steps": _text(self.steps), "ranks": _text(self.ranks)}

    def __str__(self) -> str:
        """In words, for messages and summaries: `steps 0-3, ranks 1,4`."""
        named = (("steps", self.steps), ("ranks", self.ranks))
        parts = [f"{name} {numbers.text}" for name, numbers in named if numbers]
        return ", ".join(parts) or "everything"


EVERYTHING = Selection()


def from_record(record: dict | None) -> Selection:
    """The Selection a `record()` describes (none recorded: everything)."""
    if not record:
        return EVERYTHING
    return Selection(*(None if record.get(key) is None else parse_spec(record[key]) for key in ("steps", "ranks")))


def _text(numbers: Numbers | None) -> str | None:
    return None if numbers is None else numbers.text
