"""How fast the real Trend Analyzer answers on a trendconv database, with and without trendconv's indexes.

    python -m benchmarks.plugin_timing [--quick] [--rounds 5] [--tensorboard PATH]

Converts the "32 steps x 4 ranks" dump of benchmarks/run.py (16 layers, about 2 M trend rows) with
`trendconv run` and loads the same shards again with `--no-index` (the layout msprobe data2db writes: no
secondary index, no ANALYZE). Starts TensorBoard with the plugin on each database (benchmarks/plugin.py) and
times each request as the page sends it, over HTTP on loopback: the five requests of opening the tab, then the
other views. Every number is the median of --rounds rounds after one warm-up round (warm page cache), wall
time at the client. Writes benchmarks/RESULTS-plugin.md.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.plugin import PluginServer
from benchmarks.run import HERE, QUICK, SCENARIOS, data_for, machine

REFERENCE_TENSORBOARD = HERE.parent / ".venv-ref" / "bin" / "tensorboard"


def convert(data: Path, scratch: Path) -> dict[str, Path]:
    """The database with trendconv's indexes and the same rows without them, each in its own log directory."""
    indexed, plain = scratch / "indexed", scratch / "no-index"
    trendconv = [sys.executable, "-m", "trendconv"]
    subprocess.run([*trendconv, "run", str(data), "--db", str(indexed), "--quiet"], check=True)
    work = indexed / ".trendconv"
    subprocess.run([*trendconv, "load", str(work), "--db", str(plain), "--no-index", "--quiet"], check=True)
    return {
        "no index (as msprobe writes)": plain / "dump_data.trend.db",
        "trendconv indexes": indexed / "dump_data.trend.db",
    }


def requests(server: PluginServer) -> list[tuple[str, str, dict | None, dict | None]]:
    """(label, route, POST body, GET params) in the page's order: opening the tab (the first metric, its first
    stat, the first step), then switching dimension and clicking a cell of each heat map."""
    first = server.ask("metrics")["data"][0]
    metric, stat = first["name"], first["stats"][0]
    base = {"metric": metric, "stat": stat, "tags": []}
    modules = server.ask("values", base | {"dimension": "module_name"})["data"]
    module = min(modules, key=int)
    return [
        ("/metrics", "metrics", None, None),
        ("/values step", "values", base | {"dimension": "step"}, None),
        ("/tags", "tags", None, {"metric": metric}),
        ("/db_files", "db_files", None, None),
        ("/heatmap_data step", "heatmap_data", base | {"dimension": "step", "value": "0"}, None),
        ("/values module_name", "values", base | {"dimension": "module_name"}, None),
        ("/heatmap_data rank", "heatmap_data", base | {"dimension": "rank", "value": "0"}, None),
        ("/heatmap_data module_name", "heatmap_data", base | {"dimension": "module_name", "value": module}, None),
        ("/trend step (rank x module)", "trend", base | _cell("step", "0", "0", module), None),
        ("/trend rank (step x module)", "trend", base | _cell("rank", "0", "0", module), None),
        ("/trend module_name (step x rank)", "trend", base | _cell("module_name", module, "0", "0"), None),
    ]


PAGE_LOAD = 5  # the first five requests open the tab


def _cell(dimension: str, value: str, x: str, y: str) -> dict:
    return {"dimension": dimension, "value": value, "dimX": x, "dimYIdx": y}


def time_requests(server: PluginServer, rounds: int) -> dict[str, float]:
    """Median seconds per request, and of the page load (its five requests in a row)."""
    asked = requests(server)
    seconds: dict[str, list[float]] = {label: [] for label, *_ in asked}
    seconds["page load (5 requests)"] = []
    for round_ in range(rounds + 1):
        page = 0.0
        for position, (label, route, body, params) in enumerate(asked):
            started = time.perf_counter()
            answer = server.ask(route, body, params)
            elapsed = time.perf_counter() - started
            if isinstance(answer, dict) and answer.get("success") is False:
                raise RuntimeError(f"{label}: {answer}")
            page += elapsed if position < PAGE_LOAD else 0.0
            if round_:  # the first round warms the caches
                seconds[label].append(elapsed)
        if round_:
            seconds["page load (5 requests)"].append(page)
    return {label: statistics.median(values) for label, values in seconds.items()}


def describe(db: Path) -> dict:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT count(*) FROM trend_data").fetchone()[0]
        targets = conn.execute("SELECT count(*) FROM monitoring_targets").fetchone()[0]
    finally:
        conn.close()
    return {"rows": rows, "targets": targets, "bytes": db.stat().st_size}


def report(results: dict[str, dict[str, float]], sizes: dict[str, dict], scenario, rounds: int, load: list) -> str:
    names = list(results)
    first = sizes[names[0]]
    lines = [
        "# Trend Analyzer timings",
        "",
        f"Produced by `python -m benchmarks.plugin_timing --rounds {rounds}`. The real plugin (mindstudio-probe "
        f"26.2.0, in TensorBoard) on a trendconv database of the {scenario.name} dump "
        f"({scenario.layers} layers): {first['rows']:,} trend rows, {first['targets']:,} targets. Seconds per "
        f"request at the client over loopback HTTP, median of {rounds} rounds after a warm-up round (warm page "
        "cache); the page load is the five requests of opening the tab in a row.",
        "",
        "Machine: " + _machine() + f" One-minute load average while timing: {min(load):.1f} to {max(load):.1f}"
        " (other work shared the machine; the ratios are steadier than the seconds).",
        "",
        "| request | " + " | ".join(names) + " | speed-up |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for label in results[names[0]]:
        cells = [results[name][label] for name in names]
        lines.append(
            f"| {label} | " + " | ".join(f"{cell:.3f}" for cell in cells) + f" | {cells[0] / cells[-1]:.1f}× |"
        )
    lines += ["", "| database | size |", "|---|---|"]
    lines += [f"| {name} | {sizes[name]['bytes'] / 1e6:.0f} MB |" for name in names]
    return "\n".join(lines + ["", *NOTES]) + "\n"


NOTES = [
    "Notes:",
    "",
    "- The database without indexes is the layout msprobe data2db writes (no secondary index, no ANALYZE): the",
    "  left column is what the same rows cost in a msprobe database.",
    "- The page load is mostly `/tags`: the plugin's tag query joins every trend row of the metric before its",
    "  DISTINCT. The indexes spare it the full scan and the temporary index SQLite otherwise builds, not the join.",
    "- `/heatmap_data rank` answers every cell of the metric at one rank (the whole step axis): its time is the",
    "  plugin building and sending that answer, which no index shortens.",
    "- The indexes turn the scans behind the module list (`/values module_name`), the heat maps of a step or a",
    "  module and the step and rank line charts into lookups.",
]


def _machine() -> str:
    found = machine()
    return f"{found['cpu']}, {found['cores']} cores, {found['memory_gib']} GiB, Python {found['python']}."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small dump (a smoke test)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tensorboard", type=Path, default=REFERENCE_TENSORBOARD)
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS-plugin.md")
    args = parser.parse_args(argv)
    scenario = QUICK[0] if args.quick else SCENARIOS[2]
    data = data_for(scenario)
    with tempfile.TemporaryDirectory(prefix="trendconv-plugin-timing-") as scratch:
        databases = convert(data, Path(scratch))
        results, sizes, load = {}, {}, [os.getloadavg()[0]]
        for name, db in databases.items():
            with PluginServer(args.tensorboard, db.parent, Path(scratch)) as server:
                results[name] = time_requests(server, args.rounds)
            load.append(os.getloadavg()[0])
            sizes[name] = describe(db)
            print(name, {label: round(value, 3) for label, value in results[name].items()}, flush=True)
    text = report(results, sizes, scenario, args.rounds, load)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
