"""trendconv: msprobe dump statistics -> Trend Analyzer trend databases, in two stages (parse, load)."""

__version__ = "0.1.0"
