"""msprobe dump data (docs/dump-format.md): scan, construct.json, dump.json readers, rules, shards, loader, tags."""

from trendconv.formats.dump.format import DumpFormat

__all__ = ["DumpFormat"]
