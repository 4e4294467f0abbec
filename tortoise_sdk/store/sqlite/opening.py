"""What is at a SQLite path, found out before anything is written to it: ``inspect_file``.

Opening used to switch the file to WAL and create ``schema_migrations`` first and ask
questions after, so a text file, a truncated database or another application's database
was changed before the refusal. ``inspect_file`` reads only, and only through SQLite: the
file is never opened with plain file I/O, because closing any descriptor of a file drops
every POSIX lock this process holds on it, those of SQLite's own connections included
(another ``Memory`` on the same file, the host's own connection); another process closing
the database would then take itself for the last user and delete the WAL under them.
``os.stat`` opens nothing. It refuses what is not a file, not a tortoise memory, or was
written by a newer tortoise-sdk, and says whether the file can be written.

A tortoise memory carries ``PRAGMA application_id = APPLICATION_ID``; one written before the
mark is recognised by its ``schema_migrations`` rows, which name tortoise's migrations (and
gets the mark when it is next opened for writing).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import threading
from dataclasses import dataclass
from urllib.parse import quote

from ...errors import ConfigError, ForeignDatabase, NotADatabase, ReadOnlyStore, SchemaTooNew, StoreError
from ..schema import names_our_migrations
from .migrations import APPLICATION_ID, SQLITE_MIGRATIONS

__all__ = ("FileState", "damaged", "file_identity", "held_database", "holding", "inspect_file", "prepare_folder",
           "read_only_uri", "refused_as_read_only")

_OUR_VERSIONS_COLUMNS = {"version", "name", "applied_at"}
_SIDE_FILES = ("", "-wal", "-shm", "-journal")
_held: dict[str, int] = {}  # absolute path of each database this process's stores have open: how many stores
_held_lock = threading.Lock()


@dataclass(frozen=True)
class FileState:
    """A SQLite path as found: its schema version (0: no schema yet) and whether it can be written."""

    version: int
    writable: bool
    uri: str | None = None  # how to open it when it cannot be written


def inspect_file(path: str, latest: int) -> FileState:
    """Look at ``path`` without writing to it, and without opening it outside SQLite.

    Raises:
        NotADatabase: not a regular file (a device, a FIFO, a directory), not a SQLite file,
            or a damaged (e.g. truncated) one.
        ForeignDatabase: a SQLite database of another application (its mark, or tables but no
            tortoise schema).
        SchemaTooNew: its schema version is above ``latest``.
    """
    if path == ":memory:":
        return FileState(version=0, writable=True)
    try:
        found = os.stat(path)
    except OSError:
        return FileState(version=0, writable=True)  # new, or unreachable: SQLite's open says which
    if not stat.S_ISREG(found.st_mode):
        raise NotADatabase(f"{path} is {_kind(found.st_mode)}, not a database file; it was left as it was: "
                           "pass the path of a file (a new one is created there)")
    writable = _writable(path)
    if found.st_size == 0:
        return FileState(version=0, writable=writable, uri=None if writable else read_only_uri(path, immutable=False))
    # Nobody has it open (no -shm, no -journal): read it "immutable", which locks nothing and creates
    # no -wal or -shm beside it. In use: read it with locks, as its users expect.
    uri = read_only_uri(path, immutable=not _in_use(path))
    try:
        version = _schema_version(path, uri, found.st_size)
    except ForeignDatabase:
        raise
    except NotADatabase:
        now = _stat(path)
        if "mode=ro" in uri or now is None or (_changes(now) == _changes(found) and not _in_use(path)):
            raise
        # Written or opened meanwhile, and the unlocked read may have seen it half-written: read again.
        uri = read_only_uri(path, immutable=not _in_use(path))
        version = _schema_version(path, uri, now.st_size)
    if version > latest:
        raise SchemaTooNew(f"{path} has schema version {version}, newer than this tortoise-sdk knows ({latest}): "
                           "upgrade tortoise-sdk (pip install -U tortoise-sdk); nothing was written to it")
    return FileState(version=version, writable=writable, uri=None if writable else uri)


def prepare_folder(path: str) -> None:
    """Create the folder of a new database at ``path``; refuse, in the SDK's terms, a place it cannot be made.

    SQLite alone says only "unable to open database file", and ``mkdir`` raises a bare ``OSError``.

    Raises:
        ReadOnlyStore: the database is new and its folder (or the nearest one that exists) cannot be written.
        ConfigError: the folder cannot be made for another reason (a part of the path is a file).
    """
    if path == ":memory:" or os.path.lexists(path):
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        where = exc.filename or folder
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ReadOnlyStore(f"cannot create the database {path}: the folder {where} cannot be created "
                                f"({exc.strerror}); give a path in a folder this process can write, "
                                "or give it write access") from None
        part = folder
        while not os.path.exists(part) and os.path.dirname(part) != part:
            part = os.path.dirname(part)
        why = f"{part} is a file, not a folder" if not os.path.isdir(part) else f"{where}: {exc.strerror}"
        raise ConfigError(f"cannot create the database {path}: {why}; give a file path whose folders "
                          "exist or can be created", field="db") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ReadOnlyStore(f"cannot create the database {path}: the folder {folder} cannot be written; give a path "
                            "in a folder this process can write, or give it write access")


def file_identity(path: str) -> tuple[int, int] | None:
    """The (device, inode) of the file at ``path`` now, or None when there is none (``os.stat`` opens nothing)."""
    found = _stat(path)
    return None if found is None else (found.st_dev, found.st_ino)


def holding(path: str, *, opened: bool) -> None:
    """Count a store of this process opening (``opened``) or closing the database at ``path``."""
    path = os.path.abspath(path)
    with _held_lock:
        _held[path] = _held.get(path, 0) + (1 if opened else -1)
        if _held[path] <= 0:
            del _held[path]


def held_database(path: str | os.PathLike[str]) -> str | None:
    """The database open in this process that ``path`` is, or is beside (its -wal, -shm, -journal); else None.

    Code that reads a file the caller names (a transcript) asks first: a plain read of any of
    these files would drop this process's SQLite locks when it closes (see the module docstring).
    """
    found = file_identity(os.fspath(path))
    if found is None:
        return None
    with _held_lock:
        held = list(_held)
    return next((db for db in held for side in _SIDE_FILES if file_identity(db + side) == found), None)


def read_only_uri(path: str, *, immutable: bool) -> str:
    """A ``sqlite3.connect(..., uri=True)`` URI that opens ``path`` read-only (``immutable``: with no -shm file)."""
    return f"file:{quote(os.path.abspath(path))}?{'immutable=1' if immutable else 'mode=ro'}"


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _changes(found: os.stat_result) -> tuple[int, int, int]:
    return found.st_ino, found.st_size, found.st_mtime_ns


def _in_use(path: str) -> bool:
    """Whether a connection has (or had, and crashed) the database open: its -shm (WAL) or -journal exists."""
    return os.path.exists(path + "-shm") or os.path.exists(path + "-journal")


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _writable(path: str) -> bool:
    """Whether this process can write the file and create its -wal and -shm beside it."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        pass
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK | os.X_OK)


def _check_size(path: str, size: int, page_size: int) -> None:
    """Refuse a file cut inside a page (SQLite itself refuses one shorter than its header's page count),
    unless a WAL beside it may hold the rest."""
    wal = _stat(path + "-wal")
    if wal is not None and wal.st_size > 0:
        return  # a checkpoint may be extending the file right now
    if size % page_size:
        raise NotADatabase(f"{path} is a damaged SQLite database: {size} bytes, not a whole number of its "
                           f"{page_size}-byte pages (truncated?); it was left as it was: restore it from a backup")


def damaged(exc: sqlite3.DatabaseError) -> bool:
    """SQLITE_NOTADB or SQLITE_CORRUPT (by code where Python reports it, else by SQLite's message)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)
    return "not a database" in str(exc) or "malformed" in str(exc)


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF == 11 if code is not None else "malformed" in str(exc)


def refused_as_read_only(exc: BaseException) -> bool:
    """SQLITE_READONLY: the file system or the file refused a write."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == 8
    return isinstance(exc, sqlite3.Error) and "readonly database" in str(exc)


def _schema_version(path: str, uri: str, size: int) -> int:
    """The tortoise schema version recorded in the database (0: an empty database)."""
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite database {path!r}: {exc}; check the path and permissions") from exc
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0] & 0xFFFFFFFF
        _check_size(path, size, conn.execute("PRAGMA page_size").fetchone()[0])
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if application_id not in (0, APPLICATION_ID):
            raise ForeignDatabase(f"{path} is a SQLite database of another application (application_id "
                                  f"0x{application_id:08x}), not a tortoise memory; it was left as it was: "
                                  "give tortoise its own file")
        if not tables:
            return 0
        if application_id != APPLICATION_ID and not _names_our_migrations(conn, tables):
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise ForeignDatabase(f"{path} is a SQLite database of another application (tables: {shown}), not a "
                                  "tortoise memory; it was left as it was: give tortoise its own file")
        if "schema_migrations" not in tables:
            return 0
        return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        if damaged(exc):
            what = (f"a damaged SQLite database ({exc}; {size} bytes: truncated, or overwritten?)" if _corrupt(exc)
                    else f"not a SQLite database, or is damaged ({exc})")
            raise NotADatabase(f"{path} is {what}; it was left as it was: check the path, or restore it from a "
                               "backup") from None
        raise StoreError(f"cannot read SQLite database {path!r}: {exc}; check its permissions") from exc
    finally:
        conn.close()


def _names_our_migrations(conn: sqlite3.Connection, tables: set[str]) -> bool:
    """Whether an unmarked database is a tortoise memory written before the mark: its migrations are ours."""
    if "schema_migrations" not in tables:
        return False
    columns = {row[1] for row in conn.execute("PRAGMA table_info(schema_migrations)")}
    if not _OUR_VERSIONS_COLUMNS <= columns:
        return False
    rows = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
    if not rows:  # a first open that stopped before migration 1 (the table is created outside it)
        return tables == {"schema_migrations"}
    return names_our_migrations(rows, SQLITE_MIGRATIONS)
