"""The WORK directory: its lock, what the last parse was asked to do, and the manifest of a finished parse.

WORK/lock            held (flock) by the one trendconv process using WORK
WORK/work.json       DATA and parse options of the latest parse, written when it starts
WORK/manifest.json   the complete shard list, written last by a successful parse
WORK/shards/*.parquet
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

import orjson

from trendconv.errors import DataError, OutputError, UsageError, make_directory, os_reason

LOCK, WORK_JSON, MANIFEST = "lock", "work.json", "manifest.json"


@contextmanager
def locked(work: Path):
    """Exclusive use of WORK; a second process fails at once instead of mixing shards."""
    try:
        make_directory(work)
        fd = os.open(work / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(f"{work}: cannot use it as the WORK directory: {os_reason(exc)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{work}: another trendconv process is using this WORK directory") from None
        yield
    finally:
        os.close(fd)


def write_json_atomic(path: Path, document: dict) -> None:
    """Write to a temporary name, then rename; on failure (a full disk) nothing is left but an OutputError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)  # also when interrupted


def read_json_document(path: Path, what: str) -> dict:
    if not path.is_file():
        raise DataError(f"{path}: not found: {what}")
    try:
        document = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        document = None
    if not isinstance(document, dict):
        raise DataError(f"{path}: unreadable; run `trendconv parse` again")
    return document


def manifest_path(work: Path) -> Path:
    return work / MANIFEST


def work_json_path(work: Path) -> Path:
    return work / WORK_JSON
