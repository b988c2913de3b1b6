"""One measured `trendconv run` in a fresh process: prints its stage times, counts and peak RSS as JSON."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from trendconv import api


def main(data: str, out: str, workers: str) -> None:
    summary = api.run(Path(data), Path(out), api.ParseOptions(), workers=int(workers))
    report = {
        "seconds": summary.seconds,
        "rows": summary.load.rows,
        "targets": summary.load.targets,
        "tags": summary.load.tags,
        "tag_links": summary.load.tag_links,
        "files": summary.parse.files,
        "rss_main_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # KiB on Linux
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
