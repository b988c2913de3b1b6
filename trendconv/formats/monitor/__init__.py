"""msprobe training-monitor CSV output (docs/monitor-format.md): scan, cell rules, shards, loader, tags."""

from trendconv.formats.monitor.format import MonitorFormat

__all__ = ["MonitorFormat"]
