"""The progress observer that `convert`, `parse` and `load` report to; the CLI's progress bars are one."""

from __future__ import annotations


class Progress:
    """Told what a conversion does as it goes, in the calling thread. Every method does nothing here: subclass it
    and override what you need.

    For each format in turn: `planned` once its units (one shard each) are known, then `parsed` for each unit
    (parse, convert) and `loaded` for each shard that goes into the database (load, convert), interleaved as the
    stages overlap.
    """

    def planned(self, format: str, units: int) -> None:
        """FORMAT's data has UNITS units to go through."""

    def parsed(self, format: str, *, reused: bool) -> None:
        """One more unit of FORMAT has its shard; REUSED: the shard of an earlier parse was still good."""

    def loaded(self, format: str) -> None:
        """One more shard of FORMAT is in its database."""
