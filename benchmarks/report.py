"""RESULTS.md and results.png from one benchmark run."""

from __future__ import annotations

import statistics
from pathlib import Path


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _scenario_section(result: dict) -> list[str]:
    scenario, ours, reference = result["scenario"], result["ours"], result["msprobe"]
    single = ours[min(ours)].median()
    counts = ours[min(ours)].counts
    lines = [
        f"### {scenario.name}, {scenario.layers} layers",
        "",
        f"{result['files']} file sets, {_mb(result['bytes'])} of JSON (largest file {_mb(result['largest_file'])}); "
        f"rows {counts['rows']}, targets {counts['targets']}, tags {counts['tags']}, tag links {counts['tag_links']}.",
        f"msprobe data2db: **{reference.median():.2f} s** (peak RSS {max(reference.rss_kib) / 1024:.0f} MiB). "
        f"JSON floor (orjson, one core) {result['json_floor']:.2f} s; SQLite floor (bare executemany) "
        f"{result['sqlite_floor']:.2f} s. Identical DB for every worker count: "
        f"**{'yes' if result['identical'] else 'NO'}**.",
        "",
        "| workers | total s | scan | parse | load (overlapped) | index | vs 1 worker | vs msprobe | "
        "total / floor | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workers, measured in sorted(ours.items()):
        total = measured.median()
        floor = max(result["json_floor"] / workers, result["sqlite_floor"])
        stages = " | ".join(f"{measured.stage_median(stage):.2f}" for stage in ("scan", "parse", "load", "index"))
        lines.append(
            f"| {workers} | {total:.2f} | {stages} | {single / total:.2f}× | {reference.median() / total:.2f}× | "
            f"{total / floor:.2f} | {max(measured.rss_kib) / 1024:.0f} |"
        )
    lines += [
        "",
        "Stages alone, timed inside the process (no interpreter start-up):",
        "",
        "| workers | parse alone s | parse speed-up vs 1 worker |",
        "|---|---|---|",
    ]
    parse_single = result["parse_only"][min(result["parse_only"])].stage_median("total")
    for workers, measured in sorted(result["parse_only"].items()):
        parse = measured.stage_median("total")
        lines.append(f"| {workers} | {parse:.2f} | {parse_single / parse:.2f}× |")
    load = result["load_only"].stage_median("total")
    lines += [
        "",
        f"Load alone (from the shards, with indexes): {load:.2f} s = {load / result['sqlite_floor']:.2f}× the "
        "SQLite floor.",
    ]
    return lines + [""]


def _summary(results: list[dict]) -> list[str]:
    """One line per scenario: the ratios the targets speak of (vs msprobe, one worker vs two) and peak memory."""
    lines = [
        "| scenario | input bytes / row | msprobe s | 1 worker s | 2 workers s | 1 / 2 workers | msprobe / 2 workers "
        "| peak RSS MiB, 2 workers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        ours, reference = result["ours"], result["msprobe"].median()
        if not {1, 2} <= set(ours):
            continue
        one, two = ours[1].median(), ours[2].median()
        per_row = result["bytes"] / ours[2].counts["rows"]
        lines.append(
            f"| {result['scenario'].name}, {result['scenario'].layers} layers | {per_row:.0f} | {reference:.2f} | "
            f"{one:.2f} | {two:.2f} | {one / two:.2f}× | {reference / two:.2f}× | {max(ours[2].rss_kib) / 1024:.0f} |"
        )
    return [*lines, ""] if len(lines) > 2 else []


def _startup(started: dict[str, list[float]]) -> list[str]:
    lines = ["## Start-up", "", "| command | median s | min s | runs |", "|---|---|---|---|"]
    for name, seconds in started.items():
        lines.append(f"| `{name}` | {statistics.median(seconds):.3f} | {min(seconds):.3f} | {len(seconds)} |")
    return [*lines, ""]


def machine_line(machine: dict) -> str:
    """The machine, Python, both SQLite versions and trendconv's C parts, for the head of a report."""
    return (
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"Python {machine['python']}; trendconv writes with SQLite {machine['sqlite_writer']} (APSW), msprobe with "
        f"SQLite {machine['sqlite_system']} (Python's sqlite3); trendconv's {machine['native']}."
    )


# The line after which a results file is written by hand (what was measured alongside, why): kept on a re-run.
NOTES_MARK = "<!-- Written by hand from here on: the benchmark keeps it when it writes this file again. -->"


def write_results(path: Path, text: str) -> None:
    """TEXT, the benchmark's own part, then whatever follows NOTES_MARK in the file as it was."""
    notes = ""
    if path.exists():
        old = path.read_text()
        if NOTES_MARK in old:
            notes = NOTES_MARK + old.split(NOTES_MARK, 1)[1]
    path.write_text(text.rstrip("\n") + "\n\n" + notes if notes else text)


def write_report(directory: Path, command: str, machine: dict, results: list[dict], started: dict) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"Produced by `{command}`. Medians of the rounds; each round runs every measurement once, so that slow "
        "spells of this shared machine fall on all of them alike. Times are wall seconds of whole processes; "
        "trendconv's are those of the `trendconv run` command as a user types it, with the stage times its "
        "summary prints (to 10 ms).",
        machine_line(machine),
        "Peak RSS is that of the whole process tree (main process and workers), sampled every 100 ms in one more "
        "run of each trendconv command (the timed runs are not sampled: a sample costs ~11 ms of CPU, which a "
        "command using both cores would pay); msprobe's runs, one process each, are sampled as they are timed. "
        "Each command starts after a `sync`, so that no earlier command's writes are flushed during it.",
        "`total / floor` is total / max(JSON floor / workers, SQLite floor); the SQLite floor goes through the "
        "connection trendconv writes with.",
        "",
        *_summary(results),
        *_startup(started),
    ]
    for result in results:
        lines += _scenario_section(result)
    write_results(directory / "RESULTS.md", "\n".join(lines))
    _plot(directory / "results.png", results)


def _plot(path: Path, results: list[dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for axis, result in zip(axes[0], results):
        workers = sorted(result["ours"])
        axis.plot(workers, [result["ours"][count].median() for count in workers], marker="o", label="trendconv run")
        axis.axhline(result["msprobe"].median(), color="red", linestyle="--", label="msprobe data2db")
        axis.set_title(result["scenario"].name)
        axis.set_xlabel("workers")
        axis.set_ylabel("seconds")
        axis.set_xscale("log", base=2)
        axis.set_ylim(bottom=0)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
