"""Imported, this module hides numpy from the process: `import numpy` then fails, unless numpy was imported before.

pyarrow imports numpy where it is installed, about 50 ms of every process that imports pyarrow, and trendconv hands
no Arrow data to numpy. Only processes that are trendconv's alone import this module: the pool's forkserver (first
of its preloaded modules, so the workers forked from it inherit it) and the `trendconv` command's own process when
its work runs on the local executor. A program that calls the library keeps its numpy.
"""

import sys

sys.modules.setdefault("numpy", None)
