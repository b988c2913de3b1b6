"""The README's picture: the Trend Analyzer tab on a trendconv database, taken by headless Chromium.

    python -m benchmarks.plugin_screenshot [--tensorboard PATH] [--chromium PATH] [--out docs/trend-analyzer.png]

Converts a generated dump (3 steps x 8 ranks, 2 layers), starts TensorBoard with the plugin on it
(benchmarks/plugin.py) and lets Chromium (Debian's `chromium` package; CJK labels need a font such as
`fonts-wqy-microhei`) load the tab with a fresh profile and 20 s of virtual time, enough for the page's requests
and the heat map's drawing. The default view: the first metric (forward), its first stat (norm), step 0.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.plugin import PluginServer
from benchmarks.plugin_timing import REFERENCE_TENSORBOARD
from benchmarks.run import HERE
from datagen.dump import generate

QUIET_CHROMIUM = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,760",
    "--virtual-time-budget=20000",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensorboard", type=Path, default=REFERENCE_TENSORBOARD)
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "trend-analyzer.png")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trendconv-screenshot-") as scratch:
        root = Path(scratch)
        generate(root / "data", steps=3, ranks=8, layers=2, seed=2)
        convert = [sys.executable, "-m", "trendconv", "run", str(root / "data"), "--db", str(root / "out"), "-q"]
        subprocess.run(convert, check=True)
        (root / "profile").mkdir()
        with PluginServer(args.tensorboard, root / "out", root) as server:
            shoot = [args.chromium, *QUIET_CHROMIUM, f"--user-data-dir={root / 'profile'}"]
            shoot += [f"--screenshot={args.out.resolve()}", server.url("/#TrendVis")]
            subprocess.run(shoot, check=True, capture_output=True, timeout=120)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
