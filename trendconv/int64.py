"""The 64-bit integer range: what SQLite's INTEGER and Arrow's int64 hold, so the most a step, rank or micro
step may be. msprobe keeps Python integers until SQLite refuses them (an OverflowError traceback); here a number
outside the range is a data error naming where it came from."""

from __future__ import annotations

MIN, MAX = -(2**63), 2**63 - 1


def fits(number: int) -> bool:
    return MIN <= number <= MAX
