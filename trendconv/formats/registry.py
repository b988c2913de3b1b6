"""The formats trendconv reads: one line each. The order is the order `format="auto"` converts them in."""

from __future__ import annotations

from trendconv.formats.contract import Format
from trendconv.formats.dump import DumpFormat
from trendconv.formats.monitor import MonitorFormat

FORMATS: dict[str, Format] = {
    fmt.name: fmt
    for fmt in (
        DumpFormat(),
        MonitorFormat(),
    )
}
