"""`trendconv check`, the warnings at the end of `run`/`load`, and output directories whatever the umask.

The checks mirror the Trend Analyzer's own (tests/test_plugin.py runs the real plugin on the same cases that
matter most: umask 002 and which database opens first).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from helpers import A1_CONSTRUCT, A1_DATA, invoke, write_file_set

from trendconv import api, check
from trendconv.errors import make_directory

ROOT = os.getuid() == 0
REFUSED = "which the Trend Analyzer refuses"


def root_note(directory: Path) -> list[str]:
    if not ROOT:
        return []
    return [
        "note: running as root, so ownership is not checked: TensorBoard run by another user needs it to own the "
        f"directory and the databases (as root: chown -R USER {directory})"
    ]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A converted output directory: OUT/dump_data.trend.db."""
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    api.run(data, tmp_path / "out", api.ParseOptions(), workers=1, input_format="dump")
    return tmp_path / "out"


def check_lines(directory: Path) -> tuple[int, list[str]]:
    result = invoke("check", directory)
    return result.exit_code, result.stdout.splitlines()


def test_a_fresh_output_passes(out):
    assert check_lines(out) == (
        0,
        [
            f"{out}: ok",
            f"{out}/dump_data.trend.db: ok",
            f"the Trend Analyzer opens dump_data.trend.db (the only *.trend.db in {out})",
            *root_note(out),
            f"result: the Trend Analyzer accepts {out} and 1 database",
        ],
    )


def test_write_bits_are_refused_and_the_fix_fixes_them(out):
    db = out / "dump_data.trend.db"
    os.chmod(out, 0o775)
    os.chmod(db, 0o646)
    assert check_lines(out) == (
        1,
        [
            f"{out}: group- or other-writable (mode 0775), {REFUSED}; fix: chmod go-w {out}",
            f"{db}: group- or other-writable (mode 0646), {REFUSED}; fix: chmod go-w {db}",
            f"the Trend Analyzer opens dump_data.trend.db (the only *.trend.db in {out})",
            *root_note(out),
            "result: 2 problems: the Trend Analyzer would refuse or fail on the above",
        ],
    )
    for path in (out, db):
        os.chmod(path, os.stat(path).st_mode & ~0o022)  # chmod go-w
    assert check_lines(out)[0] == 0


def test_another_owner_is_refused(out, monkeypatch):
    monkeypatch.setattr(os, "getuid", lambda: 54321)  # no such user: named by number
    owner = "root" if ROOT else check._user_name(os.stat(out).st_uid)
    db = out / "dump_data.trend.db"
    assert [str(problem) for problem in check.check_directory(out).problems] == [
        f"{out}: owned by {owner}, not by 54321 who runs this, {REFUSED}; fix: as root: chown 54321 {out}",
        f"{db}: owned by {owner}, not by 54321 who runs this, {REFUSED}; fix: as root: chown 54321 {db}",
    ]


def test_symbolic_links_are_refused(out, tmp_path):
    (tmp_path / "logs").mkdir()
    link_dir = tmp_path / "link"
    link_dir.symlink_to(out)
    link_db = tmp_path / "logs" / "x.trend.db"
    link_db.symlink_to(out / "dump_data.trend.db")
    dangling = tmp_path / "logs" / "gone.trend.db"
    dangling.symlink_to(tmp_path / "nowhere")
    problems = {str(problem) for problem in check.check_directory(link_dir).problems}
    problems |= {str(problem) for problem in check.check_directory(tmp_path / "logs").problems}
    assert problems == {
        f"{link_dir}: a symbolic link, {REFUSED}; fix: tensorboard --logdir {out}",
        f"{link_db}: a symbolic link, {REFUSED}; fix: cp --remove-destination {out}/dump_data.trend.db {link_db}",
        f"{dangling}: a symbolic link to nothing, which the Trend Analyzer fails on; fix: rm {dangling}",
    }


def test_paths_in_fixes_are_quoted_for_the_shell(tmp_path):
    logs = tmp_path / "my logs"
    logs.mkdir(mode=0o775)
    os.chmod(logs, 0o775)
    (logs / "a.trend.db").mkdir()
    assert [str(problem) for problem in check.check_directory(logs).problems] == [
        f"{logs}: group- or other-writable (mode 0775), {REFUSED}; fix: chmod go-w '{logs}'",
        f"{logs}/a.trend.db: not a regular file, but named like a database, so the Trend Analyzer may open it and "
        "fail; fix: rename it to a name not ending in .trend.db",
    ]


def test_size_and_read_bit(out, monkeypatch):
    db = out / "dump_data.trend.db"
    monkeypatch.setattr(check, "PLUGIN_SIZE_LIMIT", 1000)
    os.chmod(db, 0o040)
    size = db.stat().st_size
    problems = [str(problem) for problem in check.check_directory(out).problems]
    os.chmod(db, 0o640)
    assert problems == [
        f"{db}: its owner may not read it, {REFUSED}; fix: chmod u+r {db}",
        f"{db}: {size} bytes, more than the Trend Analyzer's limit of 5 GiB (1000 bytes); "
        "fix: convert fewer steps or ranks into one database",
    ]


def test_a_long_real_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "PATH_LIMIT", len(str(tmp_path)) + 3)
    logs = tmp_path / "logs"
    logs.mkdir()
    assert str(check.check_directory(logs).problems[0]) == (
        f"{logs}: its real path has {len(str(logs))} characters, more than the Trend Analyzer's limit of "
        f"{len(str(tmp_path)) + 3}; fix: move it to a shorter path"
    )


def test_no_database_is_a_problem(tmp_path):
    assert check_lines(tmp_path) == (
        1,
        [
            f"{tmp_path}: no *.trend.db file; fix: trendconv run DATA --db {tmp_path}",
            f"the Trend Analyzer finds no *.trend.db in {tmp_path} and stays inactive",
            *root_note(tmp_path),
            "result: 1 problem: the Trend Analyzer would refuse or fail on the above",
        ],
    )


def test_a_missing_directory_or_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("x")
    missing, not_dir = invoke("check", tmp_path / "nothing"), invoke("check", tmp_path / "file")
    assert (missing.exit_code, missing.stderr) == (2, f"error: {tmp_path}/nothing: does not exist\n")
    assert (not_dir.exit_code, not_dir.stderr) == (2, f"error: {tmp_path}/file: not a directory\n")


def test_which_database_opens_first_and_why_it_is_arbitrary(out, tmp_path):
    os.link(out / "dump_data.trend.db", out / "monitor_data.trend.db")
    first = next(name for name in os.listdir(out) if name.endswith(".trend.db"))
    code, lines = check_lines(out)
    assert code == 0
    assert lines[3] == (
        f"the Trend Analyzer opens {first} first: it takes the first *.trend.db in the order the file system lists "
        "the directory, not by name, so which of these 2 databases opens first is arbitrary; the tab's database "
        "menu switches between them"
    )


def db_with(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


TABLES = (
    "CREATE TABLE monitoring_metrics (metric_id INTEGER PRIMARY KEY, metric_name TEXT)",
    "CREATE TABLE monitoring_targets (target_id INTEGER PRIMARY KEY, target_name TEXT, vpp_stage, micro_step)",
    "CREATE TABLE trend_data (rank, step, target_id, metric_id, norm, max, proxy)",
    "CREATE TABLE global_stats (max_rank, min_step, max_step, forward TEXT, backward TEXT, other TEXT)",
)


@pytest.mark.parametrize(
    ("statements", "findings"),
    [
        (
            [*TABLES, "INSERT INTO monitoring_metrics VALUES (1, 'forward'), (0, 'backward')"],
            ["global_stats has no row, so the Trend Analyzer lists no metric"],
        ),
        (
            [
                *TABLES,
                "INSERT INTO monitoring_metrics VALUES (1, 'forward'), (0, 'backward')",
                "INSERT INTO global_stats VALUES (0, 1.5, '3', 'norm,max', 'norm,bogus,min', '')",
                "INSERT INTO global_stats VALUES (1, 0, 3, 'norm,max', 'norm,bogus,min', NULL)",  # the last row counts
            ],
            [
                'metric backward has no monitoring_metrics row, so the Trend Analyzer answers "No metric found"',
                "metric backward: stat 'bogus' is not one the Trend Analyzer shows (norm, min, max, zeros, nans, "
                "mean, entropy, softmax_max, sr, kernel_norm, std_x, jacobian, proxy, token_similarity)",
                "metric backward: stat 'min' has no trend_data column",
            ],
        ),
        (
            [*TABLES, "INSERT INTO global_stats VALUES (0, 1.5, '3', NULL, x'34', NULL)"],
            [
                "global_stats.min_step is 1.5, not an integer",
                "global_stats.max_step is '3', not an integer",
                "metric backward: its stat list in global_stats is b'4', not text",
            ],
        ),
        (
            [TABLES[0], "CREATE TABLE trend_data (rank, step, target_id)", "CREATE TABLE monitoring_tags (tag_id)"],
            [
                "no global_stats table",
                "no monitoring_targets table",
                "trend_data has no metric_id column",
                "monitoring_tags has no tag_name column",
                "monitoring_tags has no category column",
                "monitoring_tags has no metric_id column",
            ],
        ),
        (
            [
                *TABLES[:3],
                "CREATE TABLE global_stats (max_rank PRIMARY KEY, min_step, max_step) WITHOUT ROWID",
                "INSERT INTO global_stats VALUES (0, 0, 0)",
            ],
            ["the Trend Analyzer cannot read global_stats (no such column: ROWID)"],
        ),
    ],
)
def test_what_the_plugins_statements_need(tmp_path, statements, findings):
    db = db_with(tmp_path / "x.trend.db", *statements)
    again = f"fix: convert the data again: trendconv run DATA --db {tmp_path}"
    assert [str(problem) for problem in check.check_directory(tmp_path).problems] == [
        f"{db}: {finding}; {again}" for finding in findings
    ]


def test_a_file_that_is_no_database(tmp_path):
    """trendconv replaces no such file (docs/migration.md, "replacing an old database"): moving it is the fix."""
    (tmp_path / "x.trend.db").write_bytes(b"not SQLite" * 100)
    assert [str(problem) for problem in check.check_directory(tmp_path).problems] == [
        f"{tmp_path}/x.trend.db: not a SQLite database: a file of another kind with the name of one; fix: move it "
        f"away: mv {tmp_path}/x.trend.db {tmp_path}/x.trend.db.bak"
    ]


def test_a_damaged_database(tmp_path):
    """A SQLite header with nothing readable after it: converting again replaces it."""
    (tmp_path / "x.trend.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 100)
    assert [str(problem) for problem in check.check_directory(tmp_path).problems] == [
        f"{tmp_path}/x.trend.db: not a readable SQLite database (file is not a database); fix: convert the data "
        f"again: trendconv run DATA --db {tmp_path}"
    ]


def test_a_database_under_a_name_with_uri_characters_is_read(tmp_path):
    """The database is opened by a file: URI, where an unquoted ?, # or % would cut or change the path."""
    directory = tmp_path / "run ?a=1#b%41"
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    api.run(data, directory, api.ParseOptions(), workers=1, input_format="dump")
    found = check.check_directory(directory)
    assert ([str(problem) for problem in found.problems], [db.name for db in found.databases]) == (
        [],
        ["dump_data.trend.db"],
    )


def test_check_reads_without_writing(out):
    db = out / "dump_data.trend.db"
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(out)))
    check.check_directory(out)
    assert (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(out))) == before


@pytest.mark.parametrize("mask", [0o000, 0o002, 0o022, 0o077])
def test_directories_are_never_group_or_other_writable(tmp_path, mask):
    old = os.umask(mask)
    try:
        make_directory(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    modes = [oct(os.stat(tmp_path / path).st_mode & 0o777) for path in ("a", "a/b", "a/b/c")]
    assert modes == [oct(0o755 & ~mask)] * 3


def test_existing_directories_are_left_as_they_are(tmp_path):
    (tmp_path / "a").mkdir()
    os.chmod(tmp_path / "a", 0o775)
    make_directory(tmp_path / "a" / "b")
    assert oct(os.stat(tmp_path / "a").st_mode & 0o777) == "0o775"


@pytest.mark.parametrize("command", ["run", "load"])
def test_run_and_load_under_umask_002_leave_nothing_to_warn_about(tmp_path, command):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    out = tmp_path / "new" / "out"
    old = os.umask(0o002)
    try:
        if command == "run":
            result = invoke("run", data, "--db", out, "--quiet")
        else:
            api.parse(data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
            result = invoke("load", tmp_path / "work", "--db", out, "--quiet")
    finally:
        os.umask(old)
    modes = [oct(path.stat().st_mode & 0o777) for path in (tmp_path / "new", out, out / "dump_data.trend.db")]
    assert (result.exit_code, result.stderr, modes) == (0, "", ["0o755", "0o755", "0o640"])


def test_run_into_a_group_writable_directory_warns_with_the_fix(tmp_path):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o775)
    result = invoke("run", data, "--db", out, "--quiet")
    assert (result.exit_code, result.stderr) == (
        0,
        f"warning: {out}: group- or other-writable (mode 0775), {REFUSED}; fix: chmod go-w {out}\n",
    )
    assert oct(out.stat().st_mode & 0o777) == "0o775"  # not ours to change
