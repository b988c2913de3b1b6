"""The benchmarks' results files: a re-run rewrites the measured part and keeps what was written by hand."""

from __future__ import annotations

from pathlib import Path

from benchmarks.report import NOTES_MARK, write_results

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
