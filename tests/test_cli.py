"""The command line as a whole: --version, help texts, the docs naming every option, `diff`."""

from __future__ import annotations

import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from helpers import A1_CONSTRUCT, A1_DATA, invoke, write_file_set

from trendconv import __version__, api, native
from trendconv.cli import app
from trendconv.formats.dump import parse as dump_parse
from trendconv.loading import connection, table

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ["parse", "load", "run", "inspect", "diff", "data2db", "check"]


def test_version(monkeypatch):
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    result = invoke("--version")
    assert (result.exit_code, result.stdout) == (
        0,
        f"trendconv {__version__} (C parts: dump.json reader yes, monitor CSV reader yes, SQLite column reader yes, "
        "index page writer yes, table page writer yes)\n",
    )


def test_version_says_the_c_parts_are_turned_off(monkeypatch):
    monkeypatch.setenv(native.PURE_ENV, "1")
    result = invoke("--version")
    assert (result.exit_code, result.stdout) == (0, f"trendconv {__version__} (C parts: off (TRENDCONV_PURE=1))\n")


def test_the_c_parts_are_built_and_used_unless_turned_off(tmp_path):
    # setup.py builds them wherever a C compiler and SQLite's headers are; without them every test would pass
    # on the Python paths alone. TRENDCONV_PURE=1 (CI's second run) must turn both off.
    conn = connection.Connection(tmp_path / "build.db")
    used = (dump_parse._extract is not None, conn.reads_columns, table._NATIVE is not None)
    conn.close()
    assert used == ((False, False, False) if native.pure() else (True, True, True))


def test_version_says_which_c_parts_are_missing(monkeypatch):
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setattr(native, "PARTS", {**native.PARTS, "SQLite column reader": "trendconv.loading._nowhere"})
    assert native.describe() == (
        "C parts: dump.json reader yes, monitor CSV reader yes, SQLite column reader no, index page writer yes, "
        "table page writer yes"
    )


def test_every_command_is_listed():
    names = sorted(command.name or command.callback.__name__ for command in app.registered_commands)
    assert names == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_what_and_gives_an_example(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert f"Usage: trendconv {command} " in result.stdout
    assert f"Example: trendconv {command} " in result.stdout


def options_of(command: str) -> list[str]:
    help_text = invoke(command, "--help").stdout
    return sorted(set(re.findall(r"(--[a-z][a-z_-]+)", help_text)) - {"--help"})


@pytest.mark.parametrize("command", COMMANDS)
def test_docs_mention_every_option(command):
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))
    missing = [option for option in options_of(command) if option not in docs]
    assert missing == []


def test_diff_equal_and_different(tmp_path):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    micro = api.run(data, tmp_path / "a", api.ParseOptions(), workers=1, input_format="dump").load.db
    again = api.run(data, tmp_path / "b", api.ParseOptions(), workers=1, input_format="dump").load.db
    plain = api.run(data, tmp_path / "c", api.ParseOptions(micro_step=False), workers=1, input_format="dump").load.db
    same = invoke("diff", micro, again)
    assert (same.exit_code, same.stdout) == (0, "logically identical\n")
    different = invoke("diff", micro, plain, "--limit", "1")
    assert different.exit_code == 1
    assert different.stdout.splitlines()[:3] == [
        "4 tables differ",
        "global_stats: 1 row only in a, 1 row only in b",
        "  a: #1 max_rank=0, min_step=0, max_step=1, forward='norm,max,min,mean', backward='norm,max,min,mean', "
        "recompute='norm,max,min,mean', parameters_grad='norm,max,min,mean'",
    ]


def test_diff_ids_option(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    a = api.run(tmp_path / "data", tmp_path / "a", api.ParseOptions(), workers=1, input_format="dump").load.db
    b = tmp_path / "b.db"
    shutil.copyfile(a, b)
    with closing(sqlite3.connect(b)) as db, db:
        db.execute("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'monitoring_targets'")
    assert (invoke("diff", a, b).exit_code, invoke("diff", a, b, "--ids").exit_code) == (0, 1)
    assert invoke("diff", a, b, "--ids").stdout == (
        "1 table differs\n"
        "sqlite_sequence: 1 row only in a, 1 row only in b\n"
        "  a: name='monitoring_targets', seq=11\n"
        "  b: name='monitoring_targets', seq=12\n"
    )


def test_diff_of_a_missing_file(tmp_path):
    result = invoke("diff", tmp_path / "nope.db", tmp_path / "other.db")
    assert (result.exit_code, result.stderr) == (1, f"error: cannot open {tmp_path / 'nope.db'}: no such file\n")


def test_progress_bars_only_on_a_terminal_and_not_quiet(monkeypatch):
    from trendconv.cli import report

    assert report.Bars(("parse", "load"), enabled=True)._progress is None  # pytest's stderr is not a terminal
    monkeypatch.setattr(report.sys.stderr, "isatty", lambda: True)
    assert report.Bars(("parse", "load"), enabled=False)._progress is None
    bars = report.Bars(("parse", "load"), enabled=True)
    with bars:
        bars.planned("dump", 2)
        bars.parsed("dump", reused=False)
        bars.loaded("dump")
        bars.loaded("dump")
    assert [(t.description, t.completed, t.total) for t in bars._progress.tasks] == [("parse", 1, 2), ("load ", 2, 2)]
