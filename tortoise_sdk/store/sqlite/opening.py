"""What is at a SQLite path, found out before anything is written to it: ``inspect_file``.

Opening used to switch the file to WAL and create ``schema_migrations`` first and ask
questions after, so a text file, a truncated database or another application's database
was changed before the refusal. ``inspect_file`` reads only: the header with plain file
I/O, then the schema through a read-only connection. It refuses what is not a tortoise
memory, or was written by a newer tortoise-sdk, and says whether the file can be written.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from ...errors import ForeignDatabase, NotADatabase, SchemaTooNew, StoreError

__all__ = ("FileState", "damaged", "inspect_file", "read_only_uri", "refused_as_read_only")

_MAGIC = b"SQLite format 3\x00"
_OUR_VERSIONS_COLUMNS = {"version", "name", "applied_at"}


@dataclass(frozen=True)
class FileState:
    """A SQLite path as found: its schema version (0: no schema yet) and whether it can be written."""

    version: int
    writable: bool
    uri: str | None = None  # how to open it when it cannot be written


def inspect_file(path: str, latest: int) -> FileState:
    """Look at ``path`` without writing to it.

    Raises:
        NotADatabase: not a SQLite file, or a damaged (e.g. truncated) one.
        ForeignDatabase: a SQLite database with tables but no tortoise schema.
        SchemaTooNew: its schema version is above ``latest``.
    """
    if path == ":memory:" or not os.path.isfile(path):
        return FileState(version=0, writable=True)  # new, or not a file at all: SQLite's open says which
    size = os.path.getsize(path)
    writable = _writable(path)
    if size == 0:
        return FileState(version=0, writable=writable, uri=None if writable else read_only_uri(path, immutable=False))
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise NotADatabase(f"{path} is not a SQLite database, or is damaged (it does not start with SQLite's "
                           "header); it was left as it was: check the path")
    _check_size(path, header, size)
    wal_without_readers = header[18] == 2 and not os.path.exists(path + "-shm")
    # A WAL database nobody has open has no -shm; reading it "immutable" creates none.
    uri = read_only_uri(path, immutable=wal_without_readers)
    try:
        version = _schema_version(path, uri)
    except ForeignDatabase:
        raise
    except NotADatabase:
        if not (wal_without_readers and os.path.exists(path + "-shm")):
            raise
        # Someone opened it meanwhile, and an immutable read may race their checkpoint: read again, properly.
        version = _schema_version(path, read_only_uri(path, immutable=False))
    if version > latest:
        raise SchemaTooNew(f"{path} has schema version {version}, newer than this tortoise-sdk knows ({latest}): "
                           "upgrade tortoise-sdk (pip install -U tortoise-sdk); nothing was written to it")
    return FileState(version=version, writable=writable, uri=None if writable else uri)


def read_only_uri(path: str, *, immutable: bool) -> str:
    """A ``sqlite3.connect(..., uri=True)`` URI that opens ``path`` read-only (``immutable``: with no -shm file)."""
    return f"file:{quote(os.path.abspath(path))}?{'immutable=1' if immutable else 'mode=ro'}"


def _writable(path: str) -> bool:
    """Whether this process can write the file and create its -wal and -shm beside it."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        pass
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK | os.X_OK)


def _check_size(path: str, header: bytes, size: int) -> None:
    """Refuse a file shorter than its header says (a truncated copy), unless a WAL beside it may hold the rest."""
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise NotADatabase(f"{path} is a damaged SQLite database (its header gives a page size of {page_size}); "
                           "it was left as it was: restore it from a backup")
    pages = int.from_bytes(header[28:32], "big")
    counted = header[24:28] == header[92:96]  # the page count is valid only when these agree
    wal = Path(path + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return  # a checkpoint may be extending the file right now
    if size % page_size or (counted and pages and size < pages * page_size):
        raise NotADatabase(f"{path} is a damaged SQLite database: {size} bytes, where its header gives "
                           f"{pages} pages of {page_size} bytes (truncated?); it was left as it was: "
                           "restore it from a backup")


def damaged(exc: sqlite3.DatabaseError) -> bool:
    """SQLITE_NOTADB or SQLITE_CORRUPT (by code where Python reports it, else by SQLite's message)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)
    return "not a database" in str(exc) or "malformed" in str(exc)


def refused_as_read_only(exc: BaseException) -> bool:
    """SQLITE_READONLY: the file system or the file refused a write."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == 8
    return isinstance(exc, sqlite3.Error) and "readonly database" in str(exc)


def _schema_version(path: str, uri: str) -> int:
    """The tortoise schema version recorded in the database (0: an empty database)."""
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite database {path!r}: {exc}; check the path and permissions") from exc
    try:
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if not tables:
            return 0
        columns = {row[1] for row in conn.execute("PRAGMA table_info(schema_migrations)")}
        if not _OUR_VERSIONS_COLUMNS <= columns:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise ForeignDatabase(f"{path} is a SQLite database of another application (tables: {shown}), not a "
                                  "tortoise memory; it was left as it was: give tortoise its own file")
        return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        if damaged(exc):
            raise NotADatabase(f"{path} is not a SQLite database, or is damaged ({exc}); it was left as it was: "
                               "check the path, or restore it from a backup") from None
        raise StoreError(f"cannot read SQLite database {path!r}: {exc}; check its permissions") from exc
    finally:
        conn.close()
