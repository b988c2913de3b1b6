"""The WORK directory: its lock, and one part per format.

WORK/lock                      held (flock) by the one trendconv process using WORK
WORK/<format>/work.json        DATA and parse options of the format's latest parse, written when it starts
WORK/<format>/manifest.json    the complete shard list, written last by a successful parse
WORK/<format>/shards/...       the shards (trendconv.shards)

trendconv 0.1 kept the dump part at WORK itself (WORK/shards, WORK/work.json, WORK/manifest.json). Reading (load,
inspect) finds such a part where it is; a parse moves it to WORK/<format> first (`move_old_part`).
"""

from __future__ import annotations

import fcntl
import itertools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

import orjson

from trendconv import schemas
from trendconv.errors import DataError, OutputError, UsageError, cannot_write, make_directory, os_reason
from trendconv.shards.files import shard_dir

if TYPE_CHECKING:
    from collections.abc import Iterable

    from trendconv.formats import Format

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


def forget_manifest(part: Path) -> None:
    """The shard set of PART is about to change. A directory in the manifest's place is not trendconv's to delete."""
    try:
        manifest_path(part).unlink(missing_ok=True)
    except OSError as exc:
        path = manifest_path(part)
        raise OutputError(f"{path}: cannot remove the old manifest: {os_reason(exc, path)}") from None


class Streamed:
    """A list of strings, a top-level value of a document for `write_json_atomic`, written a block at a time: a
    manifest of 100,000 units need not be held as one list and one JSON text besides (the peak of a parse's
    memory)."""

    BLOCK = 4096

    def __init__(self, items: Iterable[str]) -> None:
        self.items = items

    def write(self, file: IO[bytes]) -> None:
        items = iter(self.items)
        first = True
        while block := list(itertools.islice(items, self.BLOCK)):
            file.write((b"[" if first else b",") + b",".join(b"\n    " + orjson.dumps(item) for item in block))
            first = False
        file.write(b"[]" if first else b"\n  ]")


def write_json_atomic(path: Path, document: dict) -> None:
    """Write to a temporary name, then rename; on failure (a full disk) nothing is left but an OutputError. The
    text is orjson's with sorted keys and an indent of 2, a `Streamed` value written as orjson would write its
    list."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as file:
            _write_document(file, document)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)  # also when interrupted


def _write_document(file: IO[bytes], document: dict) -> None:
    """DOCUMENT as orjson writes it with OPT_INDENT_2 and OPT_SORT_KEYS, one value at a time. A value's own text
    is indented one level more: its line breaks are all between tokens (JSON strings escape theirs)."""
    if not document:
        file.write(b"{}\n")
        return
    for number, key in enumerate(sorted(document)):
        file.write((b"," if number else b"{") + b"\n  " + orjson.dumps(key) + b": ")
        value = document[key]
        if isinstance(value, Streamed):
            value.write(file)
        else:
            file.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).replace(b"\n", b"\n  "))
    file.write(b"\n}\n")


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


def manifest_path(part: Path) -> Path:
    return part / MANIFEST


def work_json_path(part: Path) -> Path:
    return part / WORK_JSON


def part(work: Path, fmt: Format) -> Path:
    """The part of WORK that a parse of FMT's data writes."""
    return work / fmt.name


def found_part(work: Path, fmt: Format) -> Path:
    """Where FMT's part of WORK is to be read: WORK/<format>, or in a WORK of trendconv 0.1 WORK itself."""
    return work if not part(work, fmt).exists() and _old_part(work, fmt) else part(work, fmt)


def move_old_part(work: Path, fmt: Format) -> None:
    """Move FMT's part of a WORK of trendconv 0.1 to WORK/<format>, so that a parse reuses its shards. The old
    manifest goes first: a parse interrupted here finds no finished parse, and moves what is left next time."""
    if part(work, fmt).exists() or not _old_part(work, fmt):
        return
    forget_manifest(work)
    make_work_dir(part(work, fmt))
    try:
        if shard_dir(work).is_dir():
            os.replace(shard_dir(work), shard_dir(part(work, fmt)))
        work_json_path(work).unlink(missing_ok=True)
    except OSError as exc:
        raise cannot_write(work, exc) from None


def _old_part(work: Path, fmt: Format) -> bool:
    """Whether WORK itself holds FMT's part, as trendconv 0.1 wrote it (its own documents, not just any)."""
    if not fmt.old_part_at_work:
        return False
    checks = ((work_json_path(work), schemas.work_json(fmt.name)), (manifest_path(work), schemas.manifest(fmt.name)))
    return any(_is_document(path, check) for path, check in checks)


def _is_document(path: Path, check: schemas.Check) -> bool:
    try:
        read_json_document(path, "", check)
    except DataError:
        return False
    return True
