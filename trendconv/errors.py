"""Errors and exit statuses shared by every stage: one place decides what a failure means to the user."""

from __future__ import annotations

import enum
import errno
import os
import traceback
from pathlib import Path


class ExitStatus(enum.IntEnum):
    OK = 0
    DATA_ERROR = 1
    USAGE_ERROR = 2
    INTERRUPTED = 130


class TrendconvError(Exception):
    """A failure the user can act on; the message is shown as one line, without a traceback."""

    exit_status = ExitStatus.DATA_ERROR

    def __init__(self, message: str, *, warnings: list[str] | None = None):
        super().__init__(message)
        self.warnings = warnings or []  # what was noticed before the failure, shown first


class DataError(TrendconvError):
    """The input data (dumps, shards, an existing database) is missing, malformed or inconsistent."""


class OutputError(TrendconvError):
    """An output could not be written: no space left, no permission, a file where a directory must be."""


class UsageError(TrendconvError):
    """The command line or an option's file is wrong."""

    exit_status = ExitStatus.USAGE_ERROR


class InternalError(TrendconvError):
    """trendconv's own failure (a bug, a worker pool that broke), never blamed on the input: the message says
    what failed and where in the code; `detail` holds the traceback, which `trendconv --debug` shows."""

    def __init__(self, message: str, *, detail: str = "", warnings: list[str] | None = None):
        super().__init__(message, warnings=warnings)
        self.detail = detail


DEBUG_ENV = "TRENDCONV_DEBUG"


def internal_error(exc: BaseException, doing: str) -> InternalError:
    """EXC, an exception trendconv did not expect while DOING (`parsing step0/rank0/dump.json`), as one line.

    A system error on a named file (no permission in WORK, say) is that file's problem, in the system's words.
    """
    detail = "".join(traceback.format_exception(exc))
    if isinstance(exc, OSError) and exc.filename:
        return InternalError(f"{exc.filename}: {exc.strerror or exc} (while {doing})", detail=detail)
    line = _code_line(exc)
    return InternalError(
        f"internal error while {doing}: {type(exc).__name__}: {exc}{f' (at {line})' if line else ''}; a "
        f"trendconv bug, not a data error: please report it with its traceback (the error's `detail`)",
        detail=detail,
    )


def _code_line(exc: BaseException) -> str | None:
    """The innermost line of trendconv's own code in EXC's traceback: `trendconv/loading/monitor.py:143`."""
    package = Path(__file__).resolve().parent
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(package):
            line = f"trendconv/{path.relative_to(package).as_posix()}:{frame.lineno}"
    return line


def place(path, *, step=None, rank=None, key=None) -> str:
    """Name the place of a problem: the file, then step, rank and key where known."""
    parts = [str(path)]
    if step is not None:
        parts.append(f"step {step}")
    if rank is not None:
        parts.append(f"rank {rank}")
    if key is not None:
        parts.append(f"key {key!r}")
    return ", ".join(parts)


def kind_of(value) -> str:
    """A JSON value's kind in words, for messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def plural(count: int, noun: str) -> str:
    """`1 file`, `2 files`: counts in messages."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def cannot_read(path, exc: OSError) -> DataError:
    """The one error for an input file or directory that cannot be read (`data/step0: cannot read: Permission
    denied`)."""
    return DataError(f"{path}: cannot read: {exc.strerror or exc}")


def require_utf8(path, error: type[TrendconvError] = DataError) -> None:
    """PATH's name is recorded as text (work.json, shard footers) and handed to Arrow and SQLite, which take UTF-8
    only: a name of other bytes (Python shows them as \\udcXX) is an ERROR naming it, not a crash of ours."""
    try:
        str(path).encode()
    except UnicodeEncodeError:
        raise error(f"{path}: not a UTF-8 path (the bytes shown as \\udcXX); rename it") from None


def cannot_write(path, exc: OSError, *, ours=None) -> OutputError:
    """The one error for an output (in WORK or the database directory) that cannot be written: a full disk,
    no permission. It names the file or directory the system names, else PATH; PATH too where the system names
    OURS, a temporary file PATH is written through (the user knows PATH, not it)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)  # Arrow's own wording buries the system's
    named = exc.filename if exc.filename and exc.filename != str(ours) else path
    return OutputError(f"{named}: cannot write: {reason}")


def os_reason(exc: OSError, path=None) -> str:
    """An OSError in words, with the file it names unless that is PATH (named already): `Not a directory:
    /data/out`."""
    reason = exc.strerror or str(exc)
    return f"{reason}: {exc.filename}" if exc.filename and exc.filename != str(path) else reason


# What trendconv creates directories with: mkdir masks it with the umask, so they are never group- or
# other-writable, which the Trend Analyzer refuses in a log directory (docs/user-guide.md#checking-an-output).
DIRECTORY_MODE = 0o755


def make_directory(path: Path) -> None:
    """`mkdir -p PATH`, each directory it creates with DIRECTORY_MODE; existing ones are left as they are.
    A file at PATH is ENOTDIR: mkdir's own EEXIST ("File exists") reads in `os_reason`'s words as if the
    directory were there and fine."""
    if path.is_file():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    if path.is_dir():
        return
    if path.parent != path:
        make_directory(path.parent)
    try:
        os.mkdir(path, DIRECTORY_MODE)
    except FileExistsError:
        if not path.is_dir():  # a concurrent mkdir is fine; anything else at PATH is not
            raise
