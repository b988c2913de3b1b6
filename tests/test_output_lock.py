"""One writer per output (trendconv.loading.outputs.writing): WORK's lock does not cover two commands with WORKs of
their own that name one output, so the output has a lock of its own, whose file goes again when it is released."""

from __future__ import annotations

import pytest

from trendconv.errors import UsageError
from trendconv.loading.outputs import writing


def refused(output) -> str:
    return (
        f"{output}: another trendconv process is writing this output (a follower, or a run with another WORK); "
        "wait until it stops, or choose another `out` or `name`"
    )


def test_a_second_writer_of_an_output_is_refused_and_the_lock_file_goes_with_the_first(tmp_path):
    output = tmp_path / "dump_data.trend.db"
    with writing([output]):
        assert [path.name for path in tmp_path.iterdir()] == [".dump_data.trend.db.lock"]
        with pytest.raises(UsageError) as second, writing([tmp_path / "monitor_data.trend.db", output]):
            pass
        assert str(second.value) == refused(output)
        assert [path.name for path in tmp_path.iterdir()] == [".dump_data.trend.db.lock"]  # the other one let go
        with writing([tmp_path / "run2.dump_data.trend.db"]):  # another --name: another output
            pass
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_a_killed_process_left_is_taken_and_removed(tmp_path):
    left = tmp_path / ".dump_data.trend.db.lock"
    left.touch()
    with writing([tmp_path / "dump_data.trend.db"]):
        assert left.is_file()
    assert list(tmp_path.iterdir()) == []


def test_a_file_with_data_at_the_lock_name_is_kept(tmp_path):
    theirs = tmp_path / ".dump_data.trend.db.lock"
    theirs.write_text("notes\n")
    with writing([tmp_path / "dump_data.trend.db"]):
        pass
    assert theirs.read_text() == "notes\n"


@pytest.mark.parametrize("kind", ["directory", "dangling link", "missing directory"])
def test_where_no_lock_file_can_be_made_nothing_is_locked_or_removed(tmp_path, kind):
    out = tmp_path / "out"
    if kind != "missing directory":
        out.mkdir()
    lock = out / ".dump_data.trend.db.lock"
    if kind == "directory":
        lock.mkdir()
    elif kind == "dangling link":
        lock.symlink_to(tmp_path / "nowhere")
    with writing([out / "dump_data.trend.db"]), writing([out / "dump_data.trend.db"]):
        pass
    found = {"directory": lock.is_dir(), "dangling link": lock.is_symlink(), "missing directory": not out.exists()}
    assert found[kind]
    assert not (tmp_path / "nowhere").exists()
