"""The benchmarks' results files: a re-run rewrites the measured part and keeps what was written by hand; the
`trendconv run` command they time is read back from its own summary."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path

import pytest

from benchmarks.report import NOTES_MARK, write_results
from benchmarks.run import SAMPLE, run_command, sampled_rss
from datagen.monitor import generate
from trendconv import formats

HERE = Path(__file__).resolve().parent


def test_a_rerun_keeps_the_notes_written_by_hand(tmp_path):
    path = tmp_path / "results.txt"
    path.write_text(f"# X\n\n| old | table |\n\n{NOTES_MARK}\n\n## Why\n\n- by hand\n")
    write_results(path, "# X\n\n| new | table |\n")
    assert path.read_text() == f"# X\n\n| new | table |\n\n{NOTES_MARK}\n\n## Why\n\n- by hand\n"


def test_a_first_run_or_a_file_without_notes_is_the_measured_part_alone(tmp_path):
    path = tmp_path / "results.txt"
    write_results(path, "# X\n\n| first |\n")
    assert path.read_text() == "# X\n\n| first |\n"
    write_results(path, "# X\n\n| second |\n")
    assert path.read_text() == "# X\n\n| second |\n"


def test_every_results_file_with_notes_marks_where_they_start():
    root = HERE.parent
    marked = sorted(
        str(path.relative_to(root)) for path in root.glob("benchmarks/*.md") if NOTES_MARK in path.read_text()
    )
    assert marked == [
        "benchmarks/RESULTS-monitor.md",
        "benchmarks/RESULTS-scale.md",
        "benchmarks/RESULTS-split.md",
        "benchmarks/RESULTS.md",
    ]


def _counts_in(db: Path, files: int) -> dict:
    tables = {"rows": "trend_data", "targets": "monitoring_targets", "tags": "monitoring_tags"}
    with contextlib.closing(sqlite3.connect(db)) as conn:
        counts = {key: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for key, table in tables.items()}
        counts["tag_links"] = conn.execute("SELECT COUNT(*) FROM tag_target_mapping").fetchone()[0]
    return {"files": files, **counts}


@pytest.mark.parametrize("input_format", ["dump", "monitor"])
def test_the_timed_command_is_read_from_its_summary(tmp_path, input_format):
    if input_format == "dump":
        data, files = SAMPLE, len(list(SAMPLE.glob("step*/*/dump.json")))
    else:
        data = tmp_path / "monitor"
        generate(data, ranks=2, steps=2, layers=1, micro_batches=1, metrics=("actv",))
        files = len(list(data.glob("*/*.csv")))
    measured = run_command(input_format, data, tmp_path / "out", 2)
    db = tmp_path / "out" / formats.get(input_format).db_name
    stages = measured.stages[0]
    assert (measured.counts, sorted(stages), measured.db_sha256) == (
        _counts_in(db, files),
        ["index", "load", "parse", "scan", "total"],
        {hashlib.sha256(db.read_bytes()).hexdigest()},
    )
    assert stages["total"] <= measured.seconds[0]


def test_the_many_files_load_alone_reads_the_runs_shards(tmp_path):
    """benchmarks.monitor's `trendconv load` column: a load of the WORK its run left writes the run's database."""
    from benchmarks.monitor import load_alone

    data = tmp_path / "monitor"
    generate(data, ranks=2, steps=2, layers=1, micro_batches=1, metrics=("actv",))
    run_command("monitor", data, tmp_path / "out", 2)
    seconds, rss_kib = load_alone(tmp_path / "out")
    name = formats.get("monitor").db_name
    assert (tmp_path / "out_load" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()
    assert seconds > 0 and rss_kib > 0


def test_the_many_files_rerun_reuses_the_runs_work_and_writes_the_same_database(tmp_path):
    """benchmarks.monitor's re-run column: `trendconv run` again over a run's output, every shard reused."""
    from benchmarks.monitor import rerun

    data = tmp_path / "monitor"
    generate(data, ranks=2, steps=2, layers=1, micro_batches=1, metrics=("actv",))
    first = run_command("monitor", data, tmp_path / "out", 2)
    again = rerun(data, 2, tmp_path / "out")
    assert (again.counts, again.db_sha256) == (first.counts, first.db_sha256)
    assert again.rss_kib[0] > 16 * 1024  # sampled: a Python process that imported pyarrow, at least


def test_timed_runs_are_not_sampled_and_the_peak_memory_comes_from_a_run_of_its_own(tmp_path):
    """A sample of the process tree costs CPU that a command on both cores would pay: the timed runs go without."""
    timed = run_command("dump", SAMPLE, tmp_path / "out", 2)
    seconds = list(timed.seconds)
    assert timed.rss_kib == [0]
    sampled_rss({2: timed}, lambda workers: run_command("dump", SAMPLE, tmp_path / "again", workers, sample=True))
    assert timed.seconds == seconds  # the time is still the timed run's
    assert timed.rss_kib[0] > 16 * 1024  # the sampled run's: a Python process that imported pyarrow, at least
