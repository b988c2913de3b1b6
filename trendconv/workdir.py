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

from trendconv import schemas
from trendconv.errors import DataError, OutputError, UsageError, make_directory, os_reason

LOCK, WORK_JSON, MANIFEST = "lock", "work.json", "manifest.json"


@contextmanager
def locked(work: Path):
    """Exclusive use of WORK; a second process fails at once instead of mixing shards."""
    make_work_dir(work)
    try:
        fd = os.open(work / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(f"{work}: cannot use it as the WORK directory: {os_reason(exc, work)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{work}: another trendconv process is using this WORK directory") from None
        yield
    finally:
        os.close(fd)


def require_work(work: Path) -> None:
    """WORK, to be read, must be a directory."""
    if not work.is_dir():
        raise UsageError(f"{work}: WORK is not a directory" if work.exists() else f"{work}: WORK does not exist")


def make_work_dir(work: Path) -> None:
    """WORK (or a format's part of it), made if needed."""
    try:
        make_directory(work)
    except OSError as exc:
        raise OutputError(f"{work}: cannot use it as the WORK directory: {os_reason(exc, work)}") from None


def forget_manifest(work: Path) -> None:
    """The shard set of WORK is about to change. A directory in the manifest's place is not trendconv's to delete."""
    try:
        manifest_path(work).unlink(missing_ok=True)
    except OSError as exc:
        path = manifest_path(work)
        raise OutputError(f"{path}: cannot remove the old manifest: {os_reason(exc, path)}") from None


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


def read_json_document(path: Path, what: str, schema: schemas.Check) -> dict:
    """WORK's JSON document at PATH, once SCHEMA found it to be what trendconv writes there; WHAT says what its
    absence means."""
    if not path.exists():
        raise DataError(f"{path}: not found: {what}")
    if not path.is_file():
        raise DataError(f"{path}: not a file; {schemas.AGAIN}")
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        raise DataError(f"{path}: unreadable; {schemas.AGAIN}") from None
    try:
        schema(document, "")
    except schemas.Invalid as exc:
        raise DataError(f"{path}: unexpected contents: {exc}; {schemas.AGAIN}") from None
    return document


def manifest_path(work: Path) -> Path:
    return work / MANIFEST


def work_json_path(work: Path) -> Path:
    return work / WORK_JSON
