"""The parse options both formats read: micro-step mode, the name mapping, and the steps and ranks selected."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import orjson

from trendconv.errors import DataError
from trendconv.selection import Selection


@dataclass(frozen=True)
class ParseOptions:
    micro_step: bool = True
    mapping: tuple[tuple[str, str], ...] = ()  # (old, new) pairs, applied in order
    # Which units the scan takes; not in `record()`: a unit's shard is the same whatever else is selected.
    selection: Selection = Selection()

    @property
    def mapping_sha256(self) -> str:
        return _digest(self.mapping)

    def record(self) -> dict:
        """The options as shard footers, manifests and work.json record them (the mapping by its digest)."""
        return {"micro_step": self.micro_step, "mapping_sha256": self.mapping_sha256}


@functools.lru_cache(maxsize=8)
def _digest(mapping: tuple[tuple[str, str], ...]) -> str:
    """Every shard's footer records it: once per mapping, not once per file."""
    return hashlib.sha256(orjson.dumps([list(pair) for pair in mapping])).hexdigest()


def first_agreeing(first: dict | None, meta: dict, where: object) -> dict:
    """The first of a build's metas, once META (of the shard at WHERE) was parsed with FIRST's options: each meta is
    checked as it is read (trendconv.schemas), here only that they agree with each other."""
    if first is not None and meta["options"] != first["options"]:
        raise DataError(
            f"{where}: parsed with {options_text(meta['options'])}, the other shards with "
            f"{options_text(first['options'])}; re-run parse"
        )
    return meta if first is None else first


def options_text(record: dict) -> str:
    """A `record()` in words, for messages: `micro-step, mapping sha256 4f53cda18c2b`."""
    mode = "micro-step" if record.get("micro_step") else "no-micro-step"
    return f"{mode}, mapping sha256 {str(record.get('mapping_sha256'))[:12]}"


def apply_mapping(name: str, mapping: tuple[tuple[str, str], ...]) -> str:
    """docs/dump-format.md §4 (docs/monitor-format.md alike): each replacement in turn, on the whole name."""
    for old, new in mapping:
        name = name.replace(old, new)
    return name
