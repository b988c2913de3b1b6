"""trendconv: msprobe statistics (dump data, training-monitor CSV files) -> Trend Analyzer trend databases.

    import trendconv
    for summary in trendconv.convert("msprobe_out", "trend_out", workers=4):
        print(summary.load.db, summary.load.rows)

convert, parse, load, inspect and diff are the library behind the `trendconv` command (docs/python-api.md).
Importing trendconv is cheap: each name is imported from its module when first used.
"""

import os

__version__ = "0.1.0"

# Arrow's default pool (mimalloc) keeps ~25-30 MiB per process of freed memory for reuse; trendconv's
# Arrow work is small and short, so the C allocator, which gives it back, costs nothing measurable.
# Read when pyarrow is first imported, hence here, before any trendconv module imports it; a value the
# user set wins. Worker processes inherit it.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# pyarrow imports numpy where it is installed, and numpy's OpenBLAS starts a thread per core that spins while
# it waits for work. trendconv does no linear algebra; on a 2-core machine those threads took ~0.6 s of CPU
# from the parse and load processes of `run --workers 2` (32 steps x 4 ranks: 6.3 s -> 5.7 s, medians of 5).
# Only read when numpy is first imported; a value the user set wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# name -> the module it is re-exported from
_EXPORTS = {
    "convert": "trendconv.library",
    "parse": "trendconv.library",
    "load": "trendconv.library",
    "inspect": "trendconv.library",
    "diff": "trendconv.library",
    "follow": "trendconv.library",
    "Progress": "trendconv.progress",
    "ConvertSummary": "trendconv.summaries",
    "ParseSummary": "trendconv.summaries",
    "LoadSummary": "trendconv.summaries",
    "DiffReport": "trendconv.comparison",
    "TrendconvError": "trendconv.errors",
    "DataError": "trendconv.errors",
    "UsageError": "trendconv.errors",
    "OutputError": "trendconv.errors",
    "InternalError": "trendconv.errors",
    "ExitStatus": "trendconv.errors",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trendconv' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
