"""trendconv: msprobe dump statistics -> Trend Analyzer trend databases, in two stages (parse, load)."""

import os

__version__ = "0.1.0"

# Arrow's default pool (mimalloc) keeps ~25-30 MiB per process of freed memory for reuse; trendconv's
# Arrow work is small and short, so the C allocator, which gives it back, costs nothing measurable.
# Read when pyarrow is first imported, hence here, before any trendconv module imports it; a value the
# user set wins. Worker processes inherit it.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
