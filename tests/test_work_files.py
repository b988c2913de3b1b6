"""All-or-nothing conversion of dump and monitor data together."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import A1_CONSTRUCT, A1_DATA, write_file_set
from test_monitor import ACTV, GRAD, RUN, write_run
from test_parse_stage import invoke

from trendconv import api
from trendconv.cli import report
from trendconv.load import monitor as monitor_load


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[Path, Path]:
    """(DATA, OUT): dump data of two steps beside monitor data, converted once; tests work on copies of OUT."""
    root = tmp_path_factory.mktemp("converted")
    data = root / "data"
    write_run(data, {"actv_0-1.csv": ACTV, "grad_reduced_0-1.csv": GRAD})
    for step in (0, 1):
        write_file_set(data / f"step{step}" / "rank0", A1_DATA, A1_CONSTRUCT)
    api.run_all(data, root / "out", api.ParseOptions(), workers=1)
    return data, root / "out"


@pytest.fixture
def out(converted, tmp_path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(converted[1], copy)
    return copy


@pytest.fixture
def data(converted) -> Path:
    return converted[0]


def databases(out: Path) -> dict[str, tuple[int, bytes]]:
    """The files directly in OUT (the databases), by name: inode and bytes, to tell `left alone` from `rewritten`."""
    return {path.name: (path.stat().st_ino, path.read_bytes()) for path in out.iterdir() if path.is_file()}


def leftovers(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.tmp"))


# --- all or nothing ----------------------------------------------------------------------------------------------


def broken_monitor(data: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of DATA whose dump data changed (a new database would differ) and with a monitor CSV that fails."""
    copy = tmp_path / "changed"
    shutil.copytree(data, copy)
    write_file_set(copy / "step2" / "rank0", A1_DATA, A1_CONSTRUCT)
    bad = copy / RUN / "other_0-0.csv"
    bad.write_bytes(b"vpp_stage,name,step,norm\n0,w,0,1,2\n")
    return copy, bad


@pytest.mark.parametrize("command", ["run", "data2db"])
def test_auto_replaces_no_database_unless_all_formats_convert(out, data, tmp_path, command):
    changed, bad = broken_monitor(data, tmp_path)
    before = databases(out)
    if command == "run":
        result = invoke("run", changed, "--db", out, "-j", "1")
    else:
        result = invoke("data2db", "--data", changed, "--db", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"warning: {out / 'dump_data.trend.db'}: left unchanged: the monitor data failed, and the databases of all "
        f"formats are replaced together or not at all\nerror: {bad}: line 2: 5 fields, the header has 4\n",
    )
    assert result.stdout == ""
    assert databases(out) == before and leftovers(out) == []
    bad.unlink()
    fixed = invoke("run", changed, "--db", out, "-j", "1", "-q")
    assert fixed.exit_code == 0, fixed.output
    after = databases(out)
    assert after["dump_data.trend.db"][1] != before["dump_data.trend.db"][1]
    assert sorted(after) == ["dump_data.trend.db", "monitor_data.trend.db"]


def test_an_interrupted_auto_run_replaces_no_database(out, data, tmp_path, monkeypatch):
    changed, bad = broken_monitor(data, tmp_path)
    bad.unlink()
    before = databases(out)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(monitor_load.MonitorDbBuilder, "seal", interrupted)
    result = invoke("run", changed, "--db", out, "-j", "1")
    assert (result.exit_code, result.stderr) == (130, "error: interrupted\n")
    assert databases(out) == before and leftovers(out) == []


def test_load_of_both_formats_replaces_both_or_neither(out, monkeypatch):
    before = databases(out)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(monitor_load.MonitorDbBuilder, "seal", interrupted)
    result = invoke("load", out / ".trendconv", "--db", out)
    assert (result.exit_code, result.stderr) == (130, "error: interrupted\n")
    assert databases(out) == before and leftovers(out) == []
    monkeypatch.undo()
    (out / "monitor_data.trend.db").unlink()
    (out / "monitor_data.trend.db").mkdir()
    result = invoke("load", out / ".trendconv", "--db", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {out / 'monitor_data.trend.db'}: cannot write the database: it is a directory\n",
    )
    assert databases(out) == {"dump_data.trend.db": before["dump_data.trend.db"]} and leftovers(out) == []
    (out / "monitor_data.trend.db").rmdir()
    result = invoke("load", out / ".trendconv", "--db", out)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(" (")[0] for line in lines[::2]] == [
        f"wrote {out / 'dump_data.trend.db'}",
        f"wrote {out / 'monitor_data.trend.db'}",
    ]
    assert {name: content for name, (_, content) in databases(out).items()} == {
        name: content for name, (_, content) in before.items()
    }


def test_progress_bars_start_over_for_each_format(monkeypatch):
    monkeypatch.setattr(report.sys.stderr, "isatty", lambda: True)
    progress = report.RunProgress(enabled=True)
    with progress:
        progress.plan(["step0", "step1"])
        progress.parsed(None, None, None)
        progress.plan(["actv", "grad", "other"])
        bars = [(task.description, task.total, task.completed) for task in progress._progress.tasks]
    assert bars == [("parse", 3, 0), ("load ", 3, 0)]
