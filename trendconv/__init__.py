"""trendconv: msprobe dump statistics -> Trend Analyzer trend databases, in two stages (parse, load)."""

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
