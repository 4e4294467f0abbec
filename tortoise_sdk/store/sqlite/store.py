"""The embedded default store: one SQLite file, WAL, foreign keys, FTS5 over turns."""

from __future__ import annotations

import os
import queue
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from tenacity import retry, retry_if_exception, wait_random_exponential

from ...capture import CaptureRequest
from ...config import DEFAULT_BUSY_TIMEOUT_MS
from ...errors import (
    DatabaseReplaced,
    MigrationError,
    NotADatabase,
    NotFoundError,
    ReadOnlyStore,
    StoreClosed,
    StoreError,
)
from ...models import CaptureReceipt, Diagnostic, MemoryRecord, NamespaceInfo, SearchHit, SessionInfo, utc_now
from ...search import indexed_text, terms_from_fts5
from ...validate import not_unicode
from ..base import NAMESPACES_SQL, Store
from ..capture_plan import (
    identities_read,
    new_receipt,
    plan_append,
    receipt_row,
    repeated_tail,
    replay_or_conflict,
    session_date_for,
)
from ..counts import CountsMixin
from ..cursors import CursorMixin
from ..deadline import DEFAULT_STORE_TIMEOUT_S, deadline, expired, remaining, timeout_error
from ..rows import and_equal
from ..rows import turn_hit as _hit
from ..vectors import VectorMixin
from .extraction import SQLiteExtractionMixin
from .forget import SQLiteForgetMixin
from .migrations import SQLITE_MIGRATIONS, migrate_sqlite
from .opening import (
    damaged,
    file_identity,
    holding,
    inspect_file,
    prepare_folder,
    read_only_uri,
    refused_as_read_only,
)
from .ranking import INDEXED_TURN_COLUMNS as _INDEXED_COLUMNS
from .ranking import TURN_COLUMNS as _TURN_COLUMNS
from .ranking import SQLiteRankingMixin, newest_rowid, with_heads
from .subagents import SQLiteSubagentMixin, fill_subagent_turns
from .vec import SqliteVec

__all__ = ("SQLiteStore",)

T = TypeVar("T")

_WORD = re.compile(r"[^\W_]+")
_STEM_CACHE_MAX = 200_000
_LONG_TEXT = 2_048  # characters; longer texts keep their stems whole (_LONG_TEXTS_MAX of them)
_LONG_TEXTS_MAX = 64
_SHORT_TEXTS_MAX = 8_192  # shorter ones too, as many as this (at most 16 MB)
_MAX_READERS = 8
# SQLite VM steps between deadline checks while a statement runs: about a millisecond of work at most
# (a Python call every 1,000 steps cost a search scoring 2,000 postings ~4% of its time).
_PROGRESS_STEPS = 10_000


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


class _Connection(sqlite3.Connection):
    """A connection that remembers which per-connection TEMP tables it has (``temp_ready``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.temp_ready: set[str] = set()


@contextmanager
def _interrupt_at(c: sqlite3.Connection, at: float | None) -> Iterator[None]:
    """Abort the connection's running statement once ``at`` (monotonic) has passed."""
    if at is None:
        yield
        return
    c.set_progress_handler(lambda: 1 if time.monotonic() >= at else 0, _PROGRESS_STEPS)
    try:
        yield
    finally:
        c.set_progress_handler(None, 0)


def _stored_identities(c: sqlite3.Connection, namespace: str, req: CaptureRequest) -> list[tuple[int, str | None, str]]:
    """``(idx, external_id, content_hash)`` of the stored turns of ``req``'s session it can meet (``identities_read``)."""
    ids, below, latest = identities_read(req)
    cols, key = "SELECT idx, external_id, content_hash FROM turns", "namespace = ? AND session_id = ?"
    args = (namespace, req.session_id)
    rows = c.execute(f"{cols} WHERE {key} ORDER BY idx DESC LIMIT ?", (*args, latest)).fetchall()
    if len(rows) < latest:  # the whole session (a new one: a batch import's every session) is read already
        return sorted((r[0], r[1], r[2]) for r in rows)
    if below:
        rows += c.execute(f"{cols} WHERE {key} AND idx < ?", (*args, below)).fetchall()
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        rows += c.execute(f"{cols} WHERE {key} AND external_id IN ({', '.join('?' * len(part))})",
                          (*args, *part)).fetchall()
    return sorted({r[0]: (r[0], r[1], r[2]) for r in rows}.values())


def _end_read(conn: _Connection) -> None:
    """End a read's transaction, keeping the TEMP tables it made (COMMIT: a read wrote nothing else).

    A transaction SQLite already rolled back (an interrupted statement) may have taken TEMP tables made
    in it: they are made again (``IF NOT EXISTS``) by the next read that needs them.
    """
    try:
        if conn.in_transaction:
            conn.execute("COMMIT")
            return
    except sqlite3.Error:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
    conn.temp_ready.clear()


class SQLiteStore(SQLiteRankingMixin, SQLiteExtractionMixin, SQLiteSubagentMixin, SQLiteForgetMixin, CursorMixin,
                  CountsMixin, VectorMixin, Store):
    """A SQLite database file shared safely by threads and processes.

    Writers take ``BEGIN IMMEDIATE`` on the store's one write connection and wait on a busy
    timeout; a transaction that still meets a lock is retried whole, so callers never see
    "database is locked". Reads use connections of their own (WAL lets them run beside a
    write), so a long capture on one thread never holds up ``context()`` on another. Every
    call ends within ``timeout_s`` (or an enclosing ``deadline.within`` scope), else raises
    ``StoreTimeout``. Any number of stores may share one file in one process (nothing opens it
    outside SQLite); once the file at the path is no longer the one opened (deleted, moved,
    replaced), every call raises ``DatabaseReplaced``.
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
                 synchronous: str = "FULL", timeout_s: float | None = DEFAULT_STORE_TIMEOUT_S) -> None:
        self.path = str(path)
        self.url = self.path
        if self.path != ":memory:":
            self.path = str(Path(self.path).expanduser())
            prepare_folder(self.path)
        self.timeout_s = timeout_s
        self._busy_timeout_ms = busy_timeout_ms
        self._lock = threading.RLock()
        self._local = threading.local()
        self._stem_cache: dict[str, tuple[str, ...]] = {}
        self._long_texts: dict[str, list[str]] = {}
        self._short_texts: dict[str, list[str]] = {}
        # Idle read connections (None for ":memory:", whose data only its own connection sees).
        self._readers: queue.LifoQueue[_Connection] | None = None if self.path == ":memory:" else queue.LifoQueue()
        self._opened_readers = 0
        self._readers_lock = threading.Lock()
        self._closed = False
        self._retry_window_s = max(busy_timeout_ms / 1000, 1.0) * 2
        self._identity: tuple[int, int] | None = None  # the opened file's (device, inode): see _check_file
        # As SQLite resolves it when it opens the file, whatever chdir follows.
        self._abs_path = self.path if self.path == ":memory:" else os.path.abspath(self.path)
        self._vec: SqliteVec | None = None  # the sqlite-vec search, probed on first use
        # Nothing is written before the file is known to be a tortoise memory this code can run.
        state = inspect_file(self.path, SQLITE_MIGRATIONS[-1].version)
        self._uri = state.uri
        if state.writable:
            self._open_writable(state.version, busy_timeout_ms, synchronous)
        else:
            self._open_read_only(state.version)
        if self.path != ":memory:":
            self._identity = file_identity(self._abs_path)
            holding(self._abs_path, opened=True)

    def _open_writable(self, version: int, busy_timeout_ms: int, synchronous: str) -> None:
        self._conn = self._open()
        try:
            self._pragmas(busy_timeout_ms, synchronous)
            self.migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if damaged(exc):
                raise NotADatabase(f"{self.path} is not a SQLite database, or is damaged ({exc}); "
                                   "it was left as it was: check the path") from None
            if not refused_as_read_only(exc):
                raise
            # Writable by its mode, refused by the system (an immutable file, a read-only mount): read-only.
            self._uri = read_only_uri(self.path, immutable=False)
            self._open_read_only(version)
        except MigrationError as exc:
            self._conn.close()
            if not refused_as_read_only(exc.__cause__ or exc):
                raise
            self._uri = read_only_uri(self.path, immutable=False)
            self._open_read_only(version)

    @property
    def read_only(self) -> bool:
        """Whether the database was opened read-only (its file, folder or file system cannot be written)."""
        return self._uri is not None

    def _open_read_only(self, version: int) -> None:
        latest = SQLITE_MIGRATIONS[-1].version
        if version < latest:
            at = "empty" if version == 0 else f"at schema version {version}"
            raise ReadOnlyStore(f"{self.path} is read-only and {at}; this tortoise-sdk needs version {latest}: "
                                "open it once with write access (it is brought up to date on open)")
        self._conn = self._open()
        self._conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        self._conn.execute("PRAGMA temp_store = MEMORY")

    def _open(self) -> _Connection:
        try:
            return self._connect()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}; check the path and permissions") from exc

    # -- connection and transactions ---------------------------------------------------------

    def _connect(self) -> _Connection:
        conn = sqlite3.connect(self._uri or self._abs_path, uri=self._uri is not None, isolation_level=None,
                               check_same_thread=False, timeout=self._busy_timeout_ms / 1000, factory=_Connection)
        conn.row_factory = sqlite3.Row
        return conn  # type: ignore[return-value]

    def _pragmas(self, busy_timeout_ms: int, synchronous: str) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._call_with_lock_retry(lambda: c.execute("PRAGMA journal_mode = WAL"), None)
        c.execute(f"PRAGMA synchronous = {synchronous}")
        c.execute("PRAGMA foreign_keys = ON")
        c.execute("PRAGMA cache_size = -65536")  # 64 MiB: FTS5 segment merges during imports stay in memory
        c.execute("PRAGMA temp_store = MEMORY")

    def _call_with_lock_retry(self, fn: Callable[[], T], at: float | None) -> T:
        window = self._retry_window_s

        def stop(state: Any) -> bool:
            return state.seconds_since_start >= window or expired(at)

        runner = retry(
            retry=retry_if_exception(_is_busy),
            wait=wait_random_exponential(multiplier=0.01, max=0.5),
            stop=stop,
            reraise=True,
        )(fn)
        return runner()

    def _busy_ms(self, at: float | None) -> int:
        left = remaining(at)
        return self._busy_timeout_ms if left is None else max(min(int(left * 1000), self._busy_timeout_ms), 1)

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT``; roll back on any error.

        A lock that outlasts the busy timeout retries the whole transaction, within the call's
        time bound (``timeout_s``); past it, ``StoreTimeout``.
        """
        if self._closed:
            raise StoreClosed(repr(self.path))
        if self.read_only:
            raise ReadOnlyStore(f"{self.path} is open read-only (the file, its folder or its file system cannot be "
                                "written): searches and reads work; to write, give this process write access")
        at = deadline(self.timeout_s)

        def attempt() -> T:
            left = remaining(at)
            if not self._lock.acquire(timeout=-1 if left is None else left):
                raise timeout_error("a SQLite write (waiting for this process's other writer)", self.timeout_s)
            try:
                c = self._conn
                c.execute(f"PRAGMA busy_timeout = {self._busy_ms(at)}")
                with _interrupt_at(c, at):
                    c.execute("BEGIN IMMEDIATE")
                    self._local.in_tx = True
                    try:
                        result = fn(c)
                        self._check_file()
                        c.execute("COMMIT")
                        return result
                    except BaseException:
                        if c.in_transaction:
                            c.set_progress_handler(None, 0)  # the rollback itself must not be interrupted
                            c.execute("ROLLBACK")
                        # TEMP tables first made in this transaction went with it (made again, IF NOT EXISTS).
                        c.temp_ready.clear()  # type: ignore[attr-defined]
                        raise
                    finally:
                        self._local.in_tx = False
            finally:
                self._lock.release()

        try:
            return self._call_with_lock_retry(attempt, at)
        except UnicodeEncodeError as exc:
            raise not_unicode(exc) from None
        except sqlite3.Error as exc:
            if expired(at) and (_is_busy(exc) or "interrupted" in str(exc)):
                raise timeout_error("a SQLite write", self.timeout_s) from exc
            if refused_as_read_only(exc):
                raise ReadOnlyStore(f"{self.path} cannot be written ({exc}): searches and reads work; to write, "
                                    "give this process write access to the file and its folder") from exc
            raise StoreError(f"SQLite write failed: {exc}") from exc

    def _check_file(self) -> None:
        """Refuse to use a file that is no longer at the path (``os.stat``: microseconds, opens nothing).

        Deleted, moved or replaced (a restore, another memory renamed over it), the file this
        process holds would take commits that no other process could ever see, and answer reads
        that no longer hold (new read connections would open the new file: a mix of both).
        """
        if self._identity is not None and file_identity(self._abs_path) != self._identity:
            raise DatabaseReplaced(f"{self.path} is no longer the file this process opened (it was deleted, moved or "
                                   "replaced while open); nothing was read or written: close this Memory and open "
                                   "it again to use the file now at the path")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reads: a read connection of this thread's own, or the write connection
        inside this thread's transaction (so it sees its own writes)."""
        at = deadline(self.timeout_s)
        own_tx = getattr(self._local, "in_tx", False)
        if not own_tx:
            self._check_file()
        shared = self._readers is None or own_tx
        if shared:
            left = remaining(at)
            if not self._lock.acquire(timeout=-1 if left is None else left):
                raise timeout_error("a SQLite read (waiting for this process's writer)", self.timeout_s)
            conn: _Connection = self._conn  # type: ignore[assignment]
        else:
            conn = self._checkout(at)
        # A read inside this thread's read of the shared connection (":memory:") is part of that read: its
        # snapshot, its deadline (a second BEGIN would raise; clearing the progress handler, drop the outer's).
        joined = own_tx or (shared and conn.in_transaction)
        began = False
        try:
            if not joined:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms(at)}")
            with _interrupt_at(conn, None if joined else at):
                if not joined:
                    # One snapshot for the whole read: statistics read in two statements (a namespace's
                    # turn count, then a term's) must not straddle another connection's commit.
                    conn.execute("BEGIN")
                    began = True
                yield conn
        except UnicodeEncodeError as exc:
            raise not_unicode(exc) from None
        except sqlite3.Error as exc:
            if expired(at) and (_is_busy(exc) or "interrupted" in str(exc)):
                raise timeout_error("a SQLite read", self.timeout_s) from exc
            raise StoreError(f"SQLite read failed: {exc}") from exc
        finally:
            if began:
                _end_read(conn)
            if shared:
                self._lock.release()
            else:
                self._checkin(conn)

    def _checkout(self, at: float | None) -> _Connection:
        assert self._readers is not None
        if self._closed:
            raise StoreClosed(repr(self.path))
        try:
            return self._readers.get_nowait()
        except queue.Empty:
            pass
        with self._readers_lock:
            opening = self._opened_readers < _MAX_READERS
            self._opened_readers += opening
        if opening:
            try:
                conn = self._connect()
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute("PRAGMA cache_size = -16384")
                conn.execute("PRAGMA temp_store = MEMORY")
                return conn
            except sqlite3.Error as exc:
                with self._readers_lock:
                    self._opened_readers -= 1
                raise StoreError(f"cannot open a read connection to {self.path!r}: {exc}") from exc
        try:
            left = remaining(at)
            return self._readers.get(timeout=left)
        except queue.Empty:
            raise timeout_error("a SQLite read (waiting for a free read connection)", self.timeout_s) from None

    def _checkin(self, conn: _Connection) -> None:
        assert self._readers is not None
        if self._closed:
            conn.close()
            with self._readers_lock:
                self._opened_readers -= 1
        else:
            self._readers.put(conn)

    def migrate(self) -> list[int]:
        if self.read_only:
            return []
        with self._lock:
            return self._call_with_lock_retry(lambda: migrate_sqlite(self._conn, SQLITE_MIGRATIONS), None)

    def schema_version(self) -> int:
        with self.read() as c:
            return c.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if not self._closed and self.path != ":memory:":
                holding(self._abs_path, opened=False)
            self._closed = True
            self._conn.close()
            if self._vec is not None:
                self._vec.close()
            while self._readers is not None:
                try:
                    self._readers.get_nowait().close()
                except queue.Empty:
                    break

    # -- vectors (the rest is VectorMixin's) ---------------------------------------------------

    def _sqlite_vec(self) -> SqliteVec:
        if self._vec is None:
            self._vec = SqliteVec(self._abs_path)
        return self._vec

    def nearest_vectors(self, namespace: str, model: str, vector: Sequence[float], k: int,
                        kind: str | None = None) -> list[tuple[str, str, float]] | None:
        vec = self._sqlite_vec()
        if not vec.available:
            return None
        if self._closed:
            raise StoreClosed(repr(self.path))
        self._check_file()
        try:
            return vec.nearest(namespace, model, vector, k, kind)
        except Exception as exc:  # sqlite3's or apsw's: one boundary for both drivers
            raise StoreError(f"sqlite-vec search failed: {exc}") from exc

    def vector_search(self) -> str:
        return self._sqlite_vec().describe()

    # -- capture ------------------------------------------------------------------------------

    def capture(self, namespace: str, request: CaptureRequest, *, max_turns: int | None = None) -> CaptureReceipt:
        return self.capture_many(namespace, [request])[0]

    def capture_many(self, namespace: str, requests: Sequence[CaptureRequest]) -> list[CaptureReceipt]:
        def write(c: sqlite3.Connection) -> list[CaptureReceipt]:
            last_rowid = c.execute("SELECT COALESCE(MAX(rowid), 0) FROM turns").fetchone()[0]
            receipts = [self._capture_in(c, namespace, r) for r in requests]
            self.index_turns(c, namespace, last_rowid)
            return receipts

        return self.transaction(write)

    def _capture_in(self, c: sqlite3.Connection, namespace: str, req: CaptureRequest) -> CaptureReceipt:
        if req.idempotency_key is not None:
            row = c.execute(
                "SELECT request_hash, body FROM receipts WHERE namespace = ? AND idempotency_key = ?",
                (namespace, req.idempotency_key),
            ).fetchone()
            if row is not None:
                return replay_or_conflict(req, row["request_hash"], row["body"])
        now = utc_now().isoformat()
        receipt_id = f"r_{uuid.uuid4().hex}"
        session = c.execute(
            "SELECT session_date FROM sessions WHERE namespace = ? AND session_id = ?",
            (namespace, req.session_id),
        ).fetchone()
        warnings: list[Diagnostic] = []
        if session is None:
            c.execute(
                "INSERT INTO sessions (namespace, session_id, session_date, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                (namespace, req.session_id, req.session_date, now, now),
            )
            session_date = req.session_date
        else:
            session_date, warnings = session_date_for(session["session_date"], req)
            c.execute(
                "UPDATE sessions SET session_date = ?, updated_at = ? WHERE namespace = ? AND session_id = ?",
                (session_date, now, namespace, req.session_id),
            )
        existing = _stored_identities(c, namespace, req)
        new_rows = plan_append(namespace, req, existing, receipt_id, now)
        warnings += repeated_tail(req, existing)
        c.executemany(
            "INSERT INTO turns (turn_id, namespace, session_id, idx, role, name, content, external_id, timestamp,"
            " metadata, content_hash, receipt_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            new_rows,
        )
        if new_rows:
            fill_subagent_turns(c, namespace, req.session_id)
        receipt = new_receipt(namespace, req, receipt_id, session_date, new_rows, warnings)
        c.execute(
            "INSERT INTO receipts (receipt_id, namespace, session_id, idempotency_key, request_hash, body, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            receipt_row(receipt, req, now),
        )
        return receipt

    def save_receipt(self, namespace: str, receipt: CaptureReceipt) -> None:
        def write(c: sqlite3.Connection) -> None:
            cur = c.execute(
                "UPDATE receipts SET body = ? WHERE namespace = ? AND receipt_id = ?",
                (receipt.model_dump_json(), namespace, receipt.receipt_id),
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"no receipt {receipt.receipt_id!r} in namespace {namespace!r}")

        self.transaction(write)

    def receipts(self, namespace: str, session_id: str | None = None) -> list[CaptureReceipt]:
        args: list[Any] = [namespace]
        sql = and_equal("SELECT body FROM receipts WHERE namespace = ?", args, {"session_id": session_id})
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY created_at, receipt_id", args).fetchall()
        return [CaptureReceipt.model_validate_json(r[0]) for r in rows]

    # -- reads ----------------------------------------------------------------------------------

    def search_turns(self, namespace: str, match: str, *, k: int, session_id: str | None = None) -> list[SearchHit]:
        """Search with an expression made by ``tortoise_sdk.search.fts5_query`` (quoted terms joined by OR)."""
        return self.search_terms(namespace, terms_from_fts5(match), k=k, session_id=session_id)

    def namespaces(self) -> list[NamespaceInfo]:
        with self.read() as c:
            return self._namespace_infos(c.execute(NAMESPACES_SQL).fetchall())

    def sessions(self, namespace: str) -> list[SessionInfo]:
        with self.read() as c:
            rows = c.execute(
                "SELECT s.session_id, s.session_date, s.created_at, s.updated_at,"
                " (SELECT COUNT(*) FROM turns t WHERE t.namespace = s.namespace AND t.session_id = s.session_id) AS n"
                " FROM sessions s WHERE s.namespace = ? ORDER BY s.created_at, s.session_id",
                (namespace,),
            ).fetchall()
        return [
            SessionInfo(session_id=r[0], session_date=r[1], created_at=datetime.fromisoformat(r[2]),
                        updated_at=datetime.fromisoformat(r[3]), turn_count=r[4])
            for r in rows
        ]

    def turns(self, namespace: str, session_id: str, *, start: int = 0, stop: int | None = None,
              last: int | None = None, external_ids: Sequence[str] | None = None,
              role: str | None = None) -> list[SearchHit]:
        if external_ids is not None:
            hits = [h for h in self._turns_named(namespace, session_id, external_ids)
                    if start <= h.index < (stop if stop is not None else 2**62) and role in (None, h.role)]
            return hits if last is None else hits[-last:]
        with self.read() as c:
            rows = c.execute(
                f"SELECT {_TURN_COLUMNS} FROM turns t JOIN sessions s"
                " ON s.namespace = t.namespace AND s.session_id = t.session_id"
                " WHERE t.namespace = ? AND t.session_id = ? AND t.idx >= ? AND t.idx < ?"
                + ("" if role is None else " AND t.role = ?")
                + (" ORDER BY t.idx" if last is None else " ORDER BY t.idx DESC LIMIT ?"),
                (namespace, session_id, start, stop if stop is not None else 2**62, *(() if role is None else (role,)),
                 *(() if last is None else (last,))),
            ).fetchall()
        return [_hit(r, 0.0) for r in (rows if last is None else reversed(rows))]

    def _turns_named(self, namespace: str, session_id: str, external_ids: Sequence[str]) -> list[SearchHit]:
        """The session's turns captured under ``external_ids``, in order (through the external id's index)."""
        ids = list(dict.fromkeys(external_ids))
        rows: list[Any] = []
        with self.read() as c:
            for i in range(0, len(ids), 500):
                part = ids[i:i + 500]
                rows += c.execute(
                    f"SELECT {_TURN_COLUMNS} FROM turns t JOIN sessions s"
                    " ON s.namespace = t.namespace AND s.session_id = t.session_id"
                    f" WHERE t.namespace = ? AND t.session_id = ? AND t.external_id IN ({', '.join('?' * len(part))})",
                    (namespace, session_id, *part),
                ).fetchall()
        return sorted((_hit(r, 0.0) for r in rows), key=lambda h: h.index)

    def get_turn(self, namespace: str, turn_id: str) -> SearchHit:
        with self.read() as c:
            row = c.execute(
                f"SELECT {_TURN_COLUMNS} FROM turns t JOIN sessions s"
                " ON s.namespace = t.namespace AND s.session_id = t.session_id"
                " WHERE t.namespace = ? AND t.turn_id = ?",
                (namespace, turn_id),
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no turn {turn_id!r} in namespace {namespace!r}")
        return _hit(row, 0.0)

    # -- reflex reads: tokens as the index sees them, term statistics, batched neighbours -------

    def analyze(self, texts: Sequence[str]) -> list[list[str]]:
        # Words are stemmed by a per-connection TEMP FTS5 table with the turn index's tokenizer:
        # the exact stems the index holds, with no schema change and no second stemmer. Each
        # word is analysed once per connection (a bounded cache), so a warm call is dict lookups.
        texts = [indexed_text(t) for t in texts]
        # A turn comes back in every block it is a candidate for (the newest matches of a common
        # word, a pasted log's head): a text's stems are kept whole (bounded caches, long and
        # short texts apart), so it is not split into words again each time.
        known = [(self._long_texts if len(t) > _LONG_TEXT else self._short_texts).get(t) for t in texts]
        words = [[] if k is not None else _WORD.findall(t.lower()) for t, k in zip(texts, known)]
        cache = self._stem_cache
        unknown = list(dict.fromkeys(w for ws in words for w in ws if w not in cache))
        if unknown:
            if len(cache) + len(unknown) > _STEM_CACHE_MAX:
                cache.clear()
            with self.read() as c:
                _ensure_analyze_temp(c)
                c.execute(_ANALYZE_CLEAR)
                c.executemany("INSERT INTO temp.tortoise_analyze (rowid, x) VALUES (?, ?)",
                              [(i + 1, w) for i, w in enumerate(unknown)])
                rows = c.execute("SELECT doc, term FROM temp.tortoise_analyze_v ORDER BY doc, offset").fetchall()
                c.execute(_ANALYZE_CLEAR)
            stems: dict[int, list[str]] = {}
            for doc, term in rows:
                stems.setdefault(doc, []).append(term)
            for i, w in enumerate(unknown):
                cache[w] = tuple(stems.get(i + 1, ()))
        out = []
        for t, ws, k in zip(texts, words, known):
            if k is not None:
                out.append(list(k))
                continue
            stems = [s for w in ws for s in cache.get(w, ())]
            kept, most = (self._long_texts, _LONG_TEXTS_MAX) if len(t) > _LONG_TEXT else (self._short_texts,
                                                                                         _SHORT_TEXTS_MAX)
            if len(kept) >= most:
                kept.clear()
            kept[t] = stems
            out.append(list(stems))
        return out

    def turns_at(self, namespace: str, positions: Sequence[tuple[str, int]]) -> list[SearchHit]:
        by_session: dict[str, list[int]] = {}
        for session_id, index in positions:
            by_session.setdefault(session_id, []).append(index)
        out: list[SearchHit] = []
        with self.read() as c:
            for session_id, indexes in by_session.items():
                idx = sorted(set(indexes))[:500]
                marks = ", ".join("?" for _ in idx)
                rows = c.execute(
                    f"SELECT {_INDEXED_COLUMNS} FROM turns t JOIN sessions s"
                    " ON s.namespace = t.namespace AND s.session_id = t.session_id"
                    f" WHERE t.namespace = ? AND t.session_id = ? AND t.idx IN ({marks})",
                    [namespace, session_id, *idx],
                ).fetchall()
                out.extend(_hit(r, 0.0) for r in with_heads(c, rows, 7))
        return out

    def candidate_turns(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                        per_term: int = 200) -> list[SearchHit]:
        return self.candidate_turns_each(namespace, [weighted_terms], k=k, per_term=per_term)[0]

    def candidate_turns_each(self, namespace: str, weightings: Sequence[Mapping[str, float]], *, k: int,
                             per_term: int = 200) -> list[list[SearchHit]]:
        # One index walk per term, newest first, stopping after ``per_term`` rows of this
        # namespace: the cost is bounded by per_term, not by how common the term is (a ranked
        # FTS5 query scores every match). Ties go to the newer turn. A term several weightings
        # hold is walked once.
        if k < 1:
            return [[] for _ in weightings]
        out: list[list[SearchHit]] = []
        walked: dict[str, list[int]] = {}
        with self.read() as c:
            row = c.execute("SELECT ns_id FROM rank_namespaces WHERE namespace = ?", (namespace,)).fetchone()
            if row is None:
                return [[] for _ in weightings]
            newest = newest_rowid(c, row[0])  # the walks start at the namespace's newest turn, not the store's
            for weighted_terms in weightings:
                scores: dict[int, float] = {}
                for term, weight in weighted_terms.items():
                    if not term or "\x00" in term:
                        continue
                    if term not in walked:
                        match = 'content : "' + term.replace('"', '""') + '"'
                        walked[term] = [rid for (rid,) in c.execute(
                            "SELECT f.rowid FROM turns_fts f JOIN rank_turns i ON i.rowid = f.rowid"
                            " WHERE turns_fts MATCH ? AND i.ns_id = ? AND f.rowid <= ? ORDER BY f.rowid DESC LIMIT ?",
                            (match, row[0], newest, per_term),
                        )]
                    for rid in walked[term]:
                        scores[rid] = scores.get(rid, 0.0) + weight
                out.append(_top_turns(c, namespace, scores, k))
        return out

    def _turn_fact_rows(self, namespace: str, turn_ids: list[str]) -> Sequence[Sequence[Any]]:
        with self.read() as c:
            return c.execute(
                "SELECT p.turn_id, SUM(m.status = 'live'), SUM(m.status != 'live'),"
                " GROUP_CONCAT(CASE WHEN m.status != 'live' THEN m.superseded_by END, ' ') FROM provenance p"
                " JOIN memories m ON m.memory_id = p.memory_id"
                f" WHERE p.namespace = ? AND p.turn_id IN ({', '.join('?' * len(turn_ids))}) GROUP BY p.turn_id",
                [namespace, *turn_ids],
            ).fetchall()

    def candidate_memories(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                           per_term: int = 200, include_superseded: bool = False,
                           newest_first: bool = False) -> list[tuple[MemoryRecord, float]]:
        # The same bounded walk as candidate_turns, over memory content, search keys and entity names
        # (FTS5 walks the index newest first whatever the word: ``newest_first`` changes nothing here),
        # from the namespace's newest memory: never through other namespaces' newer ones.
        if k < 1:
            return []
        statuses = ("live", "superseded") if include_superseded else ("live",)
        marks = ", ".join("?" for _ in statuses)
        scores: dict[int, float] = {}
        with self.read() as c:
            newest = c.execute("SELECT MAX(rowid) FROM memories WHERE namespace = ?", (namespace,)).fetchone()[0]
            if newest is None:
                return []
            for term, weight in weighted_terms.items():
                if not term or "\x00" in term:
                    continue
                for (rid,) in c.execute(
                    "SELECT f.rowid FROM memories_fts f JOIN memories m ON m.rowid = f.rowid"
                    f" WHERE memories_fts MATCH ? AND f.rowid <= ? AND m.namespace = ? AND m.status IN ({marks})"
                    " ORDER BY f.rowid DESC LIMIT ?",
                    ('"' + term.replace('"', '""') + '"', newest, namespace, *statuses, per_term),
                ):
                    scores[rid] = scores.get(rid, 0.0) + weight
            top = sorted(scores, key=lambda r: (-scores[r], -r))[:k]
            if not top:
                return []
            rows = c.execute(f"SELECT m.rowid AS rid, m.* FROM memories m WHERE m.rowid IN ({', '.join('?' for _ in top)})",
                             top).fetchall()
            rows.sort(key=lambda r: (-scores[r["rid"]], -r["rid"]))
            records = self._records(c, rows)
        return [(rec, scores[r["rid"]]) for rec, r in zip(records, rows)]

    def prepare_reflex(self) -> None:
        """Create a read connection's TEMP analysis tables and warm them (a few ms once per connection)."""
        self.analyze(["warm up the stemmer"])


_ANALYZE_CLEAR = "INSERT INTO temp.tortoise_analyze (tortoise_analyze) VALUES ('delete-all')"


def _ensure_analyze_temp(c: sqlite3.Connection) -> None:
    done: set[str] = getattr(c, "temp_ready", set())
    if "analyze" in done:
        return
    # Contentless: only its terms are read, and emptying it is one 'delete-all', not a second tokenization.
    c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_analyze USING fts5"
              "(x, content='', tokenize='porter unicode61 remove_diacritics 2')")
    c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.tortoise_analyze_v"
              " USING fts5vocab(temp, tortoise_analyze, 'instance')")
    done.add("analyze")


def _top_turns(c: sqlite3.Connection, namespace: str, scores: Mapping[int, float], k: int) -> list[SearchHit]:
    """The ``k`` best-scored turns (by rowid) as hits, best first; ties go to the newer turn."""
    top = sorted(scores, key=lambda r: (-scores[r], -r))[:k]
    if not top:
        return []
    marks = ", ".join("?" for _ in top)
    rows = c.execute(
        f"SELECT t.rowid AS rid, {_INDEXED_COLUMNS} FROM turns t JOIN sessions s"
        " ON s.namespace = t.namespace AND s.session_id = t.session_id"
        # "+": look rows up by rowid; the namespace index would scan the whole namespace.
        f" WHERE +t.namespace = ? AND t.rowid IN ({marks})",
        [namespace, *top],
    ).fetchall()
    rows = with_heads(c, rows, 8)
    rows.sort(key=lambda r: (-scores[r[0]], -r[0]))
    return [_hit(r[1:], scores[r[0]]) for r in rows]
