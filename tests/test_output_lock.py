"""One writer per output (trendconv.loading.outputs.writing): WORK's lock does not cover two commands with WORKs of
their own that name one output, so the output has a lock of its own, whose file goes again when it is released."""

from __future__ import annotations

import pytest

from trendconv.errors import OutputError, UsageError
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


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("directory", "Is a directory"), ("dangling link", "a symbolic link"), ("link", "a symbolic link")],
)
def test_what_cannot_be_the_lock_stops_the_output_and_is_left_as_it_is(tmp_path, kind, reason):
    """Without its lock another process could write the output at the same time: no lock, no output."""
    lock = tmp_path / ".dump_data.trend.db.lock"
    target = tmp_path / "target"
    if kind == "directory":
        lock.mkdir()
    else:
        if kind == "link":
            target.write_text("theirs\n")
        lock.symlink_to(target)
    with pytest.raises(OutputError) as raised, writing([tmp_path / "dump_data.trend.db"]):
        pass
    assert str(raised.value) == (
        f"{lock}: cannot use it as the lock of the output ({reason}); it is trendconv's name for that lock: move it "
        f"away (`mv '{lock}' '{lock}.bak'`)"
    )
    assert lock.is_dir() if kind == "directory" else lock.is_symlink()
    assert target.read_text() == "theirs\n" if kind == "link" else not target.exists()


def test_a_missing_directory_is_not_locked_and_not_made(tmp_path):
    """The database's own write says what is wrong with the directory."""
    with writing([tmp_path / "out" / "dump_data.trend.db"]), writing([tmp_path / "out" / "dump_data.trend.db"]):
        pass
    assert list(tmp_path.iterdir()) == []
