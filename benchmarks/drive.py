"""One measured trendconv stage in a fresh process: prints its times and counts as JSON.

python -m benchmarks.drive run DATA OUT WORKERS     parse + load, overlapped
python -m benchmarks.drive parse DATA OUT WORKERS   the parse stage alone, into OUT/.trendconv
python -m benchmarks.drive load WORK OUT 1          the load stage alone

Like the command line, it starts the worker pool's forkserver before importing the library.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from trendconv.executors import prestart


def run(source: Path, out: Path, workers: int, executor=None, input_format: str = "dump") -> dict:
    import trendconv

    [summary] = trendconv.convert(source, out, format=input_format, workers=workers, executor=executor)
    return {
        "seconds": summary.seconds,
        "rows": summary.load.rows,
        "targets": summary.load.targets,
        "tags": summary.load.tags,
        "tag_links": summary.load.tag_links,
        "files": summary.parse.files,
    }


def parse(source: Path, out: Path, workers: int) -> dict:
    import trendconv

    started = time.perf_counter()
    [summary] = trendconv.parse(source, out / ".trendconv", format="dump", workers=workers)
    return {"seconds": {"total": time.perf_counter() - started, "scan": summary.scan_seconds}, "rows": summary.rows}


def load(source: Path, out: Path, workers: int) -> dict:
    import trendconv

    started = time.perf_counter()
    [summary] = trendconv.load(source, out)
    return {"seconds": {"total": time.perf_counter() - started}, "rows": summary.rows}


def dask(source: Path, out: Path, workers: int) -> dict:
    return run(source, out, workers, "dask")


def main(mode: str, source: str, out: str, workers: str) -> None:
    modes = {"run": run, "parse": parse, "load": load, "dask": dask}
    if mode in ("run", "parse"):
        prestart(int(workers), Path(source))
    report = modes[mode](Path(source), Path(out), int(workers))
    report["rss_main_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
