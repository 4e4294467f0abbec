"""The embedded default store: one SQLite file, WAL, foreign keys, FTS5 over turns."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

from ..capture import CaptureRequest, turn_id_for
from ..config import DEFAULT_BUSY_TIMEOUT_MS
from ..errors import CaptureConflict, IdempotencyConflict, NotFoundError, StoreError
from ..models import CaptureReceipt, Diagnostic, SearchHit, SessionInfo, utc_now
from .base import Store
from .migrations import SQLITE_MIGRATIONS, migrate_sqlite

__all__ = ("SQLiteStore",)

T = TypeVar("T")

_TURN_COLUMNS = "t.turn_id, t.external_id, t.session_id, s.session_date, t.idx, t.role, t.name, t.content"


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


class SQLiteStore(Store):
    """A SQLite database file shared safely by threads and processes.

    Writers take ``BEGIN IMMEDIATE`` and wait on a busy timeout; a transaction
    that still meets a lock is retried whole, so callers never see
    "database is locked".
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
                 synchronous: str = "FULL") -> None:
        self.path = str(path)
        self.url = self.path
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.path = str(Path(self.path).expanduser())
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}; check the path and permissions") from exc
        self._conn.row_factory = sqlite3.Row
        self._retry_window_s = max(busy_timeout_ms / 1000, 1.0) * 2
        self._pragmas(busy_timeout_ms, synchronous)
        self.migrate()

    # -- connection and transactions ---------------------------------------------------------

    def _pragmas(self, busy_timeout_ms: int, synchronous: str) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._call_with_lock_retry(lambda: c.execute("PRAGMA journal_mode = WAL"))
        c.execute(f"PRAGMA synchronous = {synchronous}")
        c.execute("PRAGMA foreign_keys = ON")

    def _call_with_lock_retry(self, fn: Callable[[], T]) -> T:
        runner = retry(
            retry=retry_if_exception(_is_busy),
            wait=wait_random_exponential(multiplier=0.01, max=0.5),
            stop=stop_after_delay(self._retry_window_s),
            reraise=True,
        )(fn)
        return runner()

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT``; roll back on any error.

        A lock that outlasts the busy timeout retries the whole transaction.
        """

        def attempt() -> T:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(self._conn)
                    self._conn.execute("COMMIT")
                    return result
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise

        try:
            return self._call_with_lock_retry(attempt)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite write failed: {exc}") from exc

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection, for a read that must not interleave with another thread's transaction."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite read failed: {exc}") from exc

    def migrate(self) -> list[int]:
        with self._lock:
            return self._call_with_lock_retry(lambda: migrate_sqlite(self._conn, SQLITE_MIGRATIONS))

    def schema_version(self) -> int:
        with self.read() as c:
            return c.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- capture ------------------------------------------------------------------------------

    def capture(self, namespace: str, request: CaptureRequest, *, max_turns: int | None = None) -> CaptureReceipt:
        return self.transaction(lambda c: self._capture_in(c, namespace, request))

    def capture_many(self, namespace: str, requests: Sequence[CaptureRequest]) -> list[CaptureReceipt]:
        return self.transaction(lambda c: [self._capture_in(c, namespace, r) for r in requests])

    def _capture_in(self, c: sqlite3.Connection, namespace: str, req: CaptureRequest) -> CaptureReceipt:
        if req.idempotency_key is not None:
            row = c.execute(
                "SELECT request_hash, body FROM receipts WHERE namespace = ? AND idempotency_key = ?",
                (namespace, req.idempotency_key),
            ).fetchone()
            if row is not None:
                if row["request_hash"] != req.request_hash:
                    raise IdempotencyConflict(req.idempotency_key)
                stored = CaptureReceipt.model_validate_json(row["body"])
                return stored.model_copy(update={"replayed": True})
        now = utc_now().isoformat()
        receipt_id = f"r_{uuid.uuid4().hex}"
        session = c.execute(
            "SELECT session_date FROM sessions WHERE namespace = ? AND session_id = ?",
            (namespace, req.session_id),
        ).fetchone()
        warnings = []
        if session is None:
            c.execute(
                "INSERT INTO sessions (namespace, session_id, session_date, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                (namespace, req.session_id, req.session_date, now, now),
            )
            session_date = req.session_date
        else:
            session_date = session["session_date"] or req.session_date
            if session["session_date"] and req.session_date and session["session_date"] != req.session_date:
                warnings.append(_diag("session_date_kept",
                                      f"session already dated {session['session_date']}; kept it, ignored {req.session_date}"))
            c.execute(
                "UPDATE sessions SET session_date = ?, updated_at = ? WHERE namespace = ? AND session_id = ?",
                (session_date, now, namespace, req.session_id),
            )
        existing = c.execute(
            "SELECT idx, external_id, content_hash FROM turns WHERE namespace = ? AND session_id = ?",
            (namespace, req.session_id),
        ).fetchall()
        new_rows = plan_append(namespace, req, [(r[0], r[1], r[2]) for r in existing], receipt_id, now)
        c.executemany(
            "INSERT INTO turns (turn_id, namespace, session_id, idx, role, name, content, external_id, timestamp,"
            " metadata, content_hash, receipt_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            new_rows,
        )
        receipt = CaptureReceipt(
            receipt_id=receipt_id,
            namespace=namespace,
            session_id=req.session_id,
            session_date=session_date,
            turns_received=len(req.turns),
            turns_stored=len(new_rows),
            turn_ids=[r[0] for r in new_rows],
            idempotency_key=req.idempotency_key,
            warnings=warnings,
        )
        c.execute(
            "INSERT INTO receipts (receipt_id, namespace, session_id, idempotency_key, request_hash, body, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (receipt_id, namespace, req.session_id, req.idempotency_key, req.request_hash,
             receipt.model_dump_json(), now),
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
        sql = "SELECT body FROM receipts WHERE namespace = ?"
        args: list[Any] = [namespace]
        if session_id is not None:
            sql += " AND session_id = ?"
            args.append(session_id)
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY created_at, receipt_id", args).fetchall()
        return [CaptureReceipt.model_validate_json(r[0]) for r in rows]

    # -- reads ----------------------------------------------------------------------------------

    def search_turns(self, namespace: str, match: str, *, k: int, session_id: str | None = None) -> list[SearchHit]:
        sql = (
            f"SELECT {_TURN_COLUMNS}, bm25(turns_fts, 1.0, 0.5) AS rank FROM turns_fts"
            " JOIN turns t ON t.rowid = turns_fts.rowid"
            " JOIN sessions s ON s.namespace = t.namespace AND s.session_id = t.session_id"
            " WHERE turns_fts MATCH ? AND t.namespace = ?"
        )
        args: list[Any] = [match, namespace]
        if session_id is not None:
            sql += " AND t.session_id = ?"
            args.append(session_id)
        sql += " ORDER BY rank, t.session_id, t.idx LIMIT ?"
        args.append(k)
        with self.read() as c:
            rows = c.execute(sql, args).fetchall()
        return [_hit(r, -r["rank"]) for r in rows]

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

    def turns(self, namespace: str, session_id: str, *, start: int = 0, stop: int | None = None) -> list[SearchHit]:
        with self.read() as c:
            rows = c.execute(
                f"SELECT {_TURN_COLUMNS} FROM turns t JOIN sessions s"
                " ON s.namespace = t.namespace AND s.session_id = t.session_id"
                " WHERE t.namespace = ? AND t.session_id = ? AND t.idx >= ? AND t.idx < ? ORDER BY t.idx",
                (namespace, session_id, start, stop if stop is not None else 2**62),
            ).fetchall()
        return [_hit(r, 0.0) for r in rows]

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


def plan_append(
    namespace: str,
    req: CaptureRequest,
    existing: Sequence[tuple[int, str | None, str]],
    receipt_id: str,
    now: str,
) -> list[tuple[Any, ...]]:
    """Rows to insert for a capture, given the stored ``(idx, external_id, content_hash)`` of its session.

    Identity is the caller's id when given, else the position plus content hash.
    A known identity with a different content raises CaptureConflict.
    """
    by_ext = {ext: h for _, ext, h in existing if ext is not None}
    by_idx = {idx: h for idx, _, h in existing}
    next_idx = max(by_idx, default=-1) + 1
    rows: list[tuple[Any, ...]] = []
    for pos, (turn, h) in enumerate(zip(req.turns, req.hashes)):
        if turn.id is not None and turn.id in by_ext:
            if by_ext[turn.id] != h:
                raise CaptureConflict(
                    f"turn id {turn.id!r} is already stored with different content; "
                    "stored turns are never overwritten — use a new id for a new message",
                    field=f"turns[{pos}]",
                )
            continue
        if turn.id is None and pos in by_idx:
            if by_idx[pos] != h:
                raise CaptureConflict(
                    f"differs from the turn already stored at position {pos} of session {req.session_id!r}; "
                    "send the whole conversation so far in order, or give each turn an 'id'",
                    field=f"turns[{pos}]",
                )
            continue
        rows.append((
            turn_id_for(namespace, req.session_id, next_idx), namespace, req.session_id, next_idx,
            turn.role, turn.name, turn.content, turn.id, turn.timestamp,
            json.dumps(turn.metadata, ensure_ascii=False) if turn.metadata is not None else None,
            h, receipt_id, now,
        ))
        by_idx[next_idx] = h
        if turn.id is not None:
            by_ext[turn.id] = h
        next_idx += 1
    return rows


def _hit(row: sqlite3.Row, score: float) -> SearchHit:
    return SearchHit(
        turn_id=row[0], external_id=row[1], session_id=row[2], session_date=row[3], index=row[4],
        role=row[5], name=row[6], content=row[7], score=score,
    )


def _diag(code: str, message: str) -> Diagnostic:
    return Diagnostic(stage="capture", code=code, message=message)
