"""Would the Trend Analyzer accept this log directory? The plugin's own checks, run before TensorBoard does.

The plugin (docs/user-guide.md#checking-an-output) checks the log directory and the database it opens alike:
the real path at most 4096 characters, the path not itself a symbolic link, the owner's read bit, at most 5 GiB,
and, unless TensorBoard runs as root, owned by TensorBoard's user and neither group- nor other-writable. It then
reads the last global_stats row: every column but the three bounds is a metric, listing stats that must be on
the plugin's list and be trend_data columns, and that must have a monitoring_metrics row.

Owner checks follow the user running this; write bits are checked even for root, since TensorBoard run by any
other user refuses them. Nothing is changed: each problem comes with the command that fixes it.
"""

from __future__ import annotations

import os
import pwd
import shlex
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote  # not urllib.request: with http.client and email, ~20 ms at every command's start

from trendconv.errors import UsageError, plural

DB_SUFFIX = ".trend.db"
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
PATH_LIMIT = 4096
PLUGIN_SIZE_LIMIT = 5 * 1024**3
BOUNDS = ("max_rank", "min_step", "max_step")
# The stats the plugin will put into its SQL; any other is "Invalid stat".
PLUGIN_STATS = (
    "norm",
    "min",
    "max",
    "zeros",
    "nans",
    "mean",
    "entropy",
    "softmax_max",
    "sr",
    "kernel_norm",
    "std_x",
    "jacobian",
    "proxy",
    "token_similarity",
)
# The columns its statements name; the last two tables are optional (tag filtering is skipped without them).
COLUMNS = {
    "global_stats": BOUNDS,
    "monitoring_metrics": ("metric_id", "metric_name"),
    "monitoring_targets": ("target_id", "target_name", "vpp_stage", "micro_step"),
    "trend_data": ("rank", "step", "target_id", "metric_id"),
}
OPTIONAL_COLUMNS = {
    "monitoring_tags": ("tag_id", "tag_name", "category", "metric_id"),
    "tag_target_mapping": ("tag_id", "target_id"),
}
REFUSED = "which the Trend Analyzer refuses"


@dataclass(frozen=True)
class Problem:
    path: Path
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}; fix: {self.fix}"


@dataclass
class CheckReport:
    directory: Path
    databases: list[Path] = field(default_factory=list)  # in the directory's listing order, as the plugin sees it
    problems: list[Problem] = field(default_factory=list)
    as_root: bool = False

    def format(self) -> str:
        lines = [self._path_line(path) for path in [self.directory, *self.databases]]
        lines.append(self._first_line())
        if self.as_root:
            lines.append(
                "note: running as root, so ownership is not checked: TensorBoard run by another user needs "
                f"it to own the directory and the databases (as root: chown -R USER {_quote(self.directory)})"
            )
        lines.append(self._result_line())
        return "\n".join(lines)

    def _path_line(self, path: Path) -> str:
        found = [str(problem) for problem in self.problems if problem.path == path]
        return "\n".join(found) if found else f"{path}: ok"

    def _first_line(self) -> str:
        if not self.databases:
            return f"the Trend Analyzer finds no *{DB_SUFFIX} in {self.directory} and stays inactive"
        first = self.databases[0].name
        if len(self.databases) == 1:
            return f"the Trend Analyzer opens {first} (the only *{DB_SUFFIX} in {self.directory})"
        return (
            f"the Trend Analyzer opens {first} first: it takes the first *{DB_SUFFIX} in the order the file system "
            f"lists the directory, not by name, so which of these {len(self.databases)} databases opens first is "
            "arbitrary; the tab's database menu switches between them"
        )

    def _result_line(self) -> str:
        if not self.problems:
            return f"result: the Trend Analyzer accepts {self.directory} and {plural(len(self.databases), 'database')}"
        return f"result: {plural(len(self.problems), 'problem')}: the Trend Analyzer would refuse or fail on the above"


def check_directory(directory: Path) -> CheckReport:
    """Check DIRECTORY as a TensorBoard log directory and every *.trend.db in it; see the module's docstring."""
    directory = Path(os.path.normpath(directory))
    if not directory.is_dir():
        raise UsageError(f"{directory}: " + ("not a directory" if directory.exists() else "does not exist"))
    found = CheckReport(directory, as_root=os.getuid() == 0)
    found.problems += path_problems(directory, is_dir=True)
    names = [name for name in os.listdir(directory) if name.endswith(DB_SUFFIX)]  # unsorted: the plugin's order
    found.databases = [directory / name for name in names]
    if not names:
        found.problems.append(
            Problem(directory, f"no *{DB_SUFFIX} file", f"trendconv run DATA --db {_quote(directory)}")
        )
    for db in found.databases:
        found.problems += path_problems(db, is_dir=False)
        if db.is_file() and os.access(db, os.R_OK):
            found.problems += schema_problems(db, directory)
    return found


def path_problems(path: Path, *, is_dir: bool) -> list[Problem]:
    """The plugin's file checks of PATH, as a directory or as a regular file."""
    real = Path(os.path.realpath(path))
    if path.is_symlink() and not real.exists():
        return [Problem(path, "a symbolic link to nothing, which the Trend Analyzer fails on", f"rm {_quote(path)}")]
    problems = []
    if len(str(real)) > PATH_LIMIT:
        what = f"its real path has {len(str(real))} characters, more than the Trend Analyzer's limit of {PATH_LIMIT}"
        problems.append(Problem(path, what, "move it to a shorter path"))
    if path.is_symlink():
        fix = (
            f"tensorboard --logdir {_quote(real)}"
            if is_dir
            else f"cp --remove-destination {_quote(real)} {_quote(path)}"
        )
        problems.append(Problem(path, f"a symbolic link, {REFUSED}", fix))
    if not is_dir and not real.is_file():
        what = "not a regular file, but named like a database, so the Trend Analyzer may open it and fail"
        problems.append(Problem(path, what, f"rename it to a name not ending in {DB_SUFFIX}"))
        return problems
    return problems + _mode_problems(path, os.stat(real), is_dir=is_dir)


def _mode_problems(path: Path, st: os.stat_result, *, is_dir: bool) -> list[Problem]:
    problems = []
    if not st.st_mode & stat.S_IRUSR:
        problems.append(Problem(path, f"its owner may not read it, {REFUSED}", f"chmod u+r {_quote(path)}"))
    if not is_dir and st.st_size > PLUGIN_SIZE_LIMIT:
        what = f"{st.st_size} bytes, more than the Trend Analyzer's limit of 5 GiB ({PLUGIN_SIZE_LIMIT} bytes)"
        problems.append(Problem(path, what, "convert fewer steps or ranks into one database"))
    user = os.getuid()
    if user != 0 and st.st_uid != user:
        what = f"owned by {_user_name(st.st_uid)}, not by {_user_name(user)} who runs this, {REFUSED}"
        problems.append(Problem(path, what, f"as root: chown {_user_name(user)} {_quote(path)}"))
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        what = f"group- or other-writable (mode {stat.S_IMODE(st.st_mode):04o}), {REFUSED}"
        problems.append(Problem(path, what, f"chmod go-w {_quote(path)}"))
    return problems


def schema_problems(db: Path, directory: Path) -> list[Problem]:
    """What the plugin's statements need from DB: its tables and columns, a global_stats row, known stats."""
    again = f"convert the data again: trendconv run DATA --db {_quote(directory)}"
    if not _sqlite_or_empty(db):  # not a database at all: trendconv replaces none such, and the plugin lists it
        what = "not a SQLite database: a file of another kind with the name of one"
        return [Problem(db, what, f"move it away: mv {_quote(db)} {_quote(db.with_name(db.name + '.bak'))}")]
    try:
        # percent-encoded: a ? or # in a path would end the file name of the URI
        conn = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [Problem(db, f"not a readable SQLite database ({exc})", again)]
    try:
        return [Problem(db, what, again) for what in _schema_findings(conn)]
    except sqlite3.Error as exc:
        return [Problem(db, f"not a readable SQLite database ({exc})", again)]
    finally:
        conn.close()


def _sqlite_or_empty(db: Path) -> bool:
    """As trendconv.loading.build.check_place tells what it may replace."""
    try:
        with open(db, "rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except OSError:
        return True  # the owner's read bit is checked above; SQLite then says what it cannot read
    return not head or head == SQLITE_HEADER


def _schema_findings(conn: sqlite3.Connection) -> list[str]:
    tables = {table: _columns(conn, table) for table in [*COLUMNS, *OPTIONAL_COLUMNS]}
    findings = [f"no {table} table" for table in COLUMNS if not tables[table]]
    for table, needed in {**COLUMNS, **OPTIONAL_COLUMNS}.items():
        if tables[table]:
            findings += [f"{table} has no {column} column" for column in needed if column not in tables[table]]
    if findings:
        return findings
    return _global_stats_findings(conn, tables["trend_data"])


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _global_stats_findings(conn: sqlite3.Connection, trend_columns: list[str]) -> list[str]:
    """The plugin's reading of global_stats: its last row by ROWID, the bounds as integers, then each metric."""
    try:
        cursor = conn.execute("SELECT * FROM global_stats ORDER BY ROWID DESC LIMIT 1")
    except sqlite3.Error as exc:
        return [f"the Trend Analyzer cannot read global_stats ({exc})"]
    row = cursor.fetchone()
    if row is None:
        return ["global_stats has no row, so the Trend Analyzer lists no metric"]
    values = dict(zip([column[0] for column in cursor.description], row))
    findings = [
        f"global_stats.{bound} is {values[bound]!r}, not an integer"
        for bound in BOUNDS
        if type(values[bound]) is not int
    ]
    ids = dict(conn.execute("SELECT metric_name, metric_id FROM monitoring_metrics"))
    for metric, stats in values.items():
        if metric not in BOUNDS and stats:
            findings += _metric_findings(metric, stats, ids.get(metric), trend_columns)
    return findings


def _metric_findings(metric: str, stats, metric_id, trend_columns: list[str]) -> list[str]:
    if not isinstance(stats, str):
        return [f"metric {metric}: its stat list in global_stats is {stats!r}, not text"]
    findings = []
    if not metric_id:  # the plugin takes a missing row and id 0 alike
        findings.append(
            f'metric {metric} has no monitoring_metrics row, so the Trend Analyzer answers "No metric found"'
        )
    for name in stats.split(","):
        if name not in PLUGIN_STATS:
            findings.append(
                f"metric {metric}: stat {name!r} is not one the Trend Analyzer shows ({', '.join(PLUGIN_STATS)})"
            )
        elif name not in trend_columns:
            findings.append(f"metric {metric}: stat {name!r} has no trend_data column")
    return findings


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _quote(path: Path) -> str:
    return shlex.quote(str(path))
