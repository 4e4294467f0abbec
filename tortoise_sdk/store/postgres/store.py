"""The shared store: PostgreSQL through psycopg 3 and a connection pool, same semantics as SQLite.

Needs the extra: ``pip install 'tortoise-sdk[postgres]'``.
"""

from __future__ import annotations

import functools
import logging
import re
import os
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from ...capture import CaptureRequest
from ...errors import (
    ConfigError,
    MigrationError,
    NotFoundError,
    ReadOnlyStore,
    StoreClosed,
    StoreError,
)
from ..deadline import DEFAULT_STORE_TIMEOUT_S, deadline, remaining, timeout_error
from ...models import CaptureReceipt, Diagnostic, NamespaceInfo, SearchHit, SessionInfo, utc_now
from ...search import INDEX_CHARS, POSTINGS_BUDGET, idf, idf_bonus, indexed_text, split_by_postings
from ...validate import not_unicode
from ..base import NAMESPACES_SQL, Store, near_offsets
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
from ..rows import and_equal
from ..rows import turn_hit as _hit
from ..subagent_core import root_session
from ..vectors import VectorKind, VectorMixin
from .deadline import POOL_NOISE, Health, bound_statements, connection_class, dropped, is_statement_timeout, watchdog
from .extraction import PostgresExtractionMixin
from .forget import SESSION_LOCK, PostgresForgetMixin
from .fts import (
    FTS_CONFIG,
    content_query,
    count_turns_sql,
    newest_turn_matches_sql,
    term_dfs_sql,
    terms_from_fts5,
    top_matches_each_sql,
    top_matches_sql,
    turn_bm25_sql,
    usable_terms,
    walk_rule,
)
from .lexemes import LexemeCache
from .migrations import POSTGRES_MIGRATIONS, migrate_postgres
from .pgvector import PgVector
from .subagents import PostgresSubagentMixin, fill_subagent_turns

__all__ = ("PostgresStore", "redact_url")

T = TypeVar("T")

_TURN_COLUMNS = "t.turn_id, t.external_id, t.session_id, s.session_date, t.idx, t.role, t.name, t.content"
# What the reflex's reads return: the content cut to what is indexed.
_INDEXED_COLUMNS = _TURN_COLUMNS.replace("t.content", f"left(t.content, {INDEX_CHARS}) AS content")
_JOIN_SESSION = "JOIN sessions s ON s.namespace = t.namespace AND s.session_id = t.session_id"
_TX_ATTEMPTS = 8
#: How long the pool keeps retrying, in the background and with a growing pause, a connection it
#: failed to open. Short, so that a server back from an outage is not waited for behind a pause
#: grown while it was down: the next call then opens its connection at once.
_RECONNECT_S = 1.0
#: How many of its newest turns stand in for a search term whose postings exceed the budget (as on SQLite).
NEWEST_TURNS = 500
#: TCP keepalives on every connection (libpq names; a URL that sets one keeps its own): a server
#: gone from the network is noticed in about 25 s even on an idle pooled connection.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def _retryable(exc: BaseException) -> bool:
    """Transaction outcomes that a whole-transaction retry resolves."""
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)):
        return True
    # Two writers raced on one idempotency key in different sessions: on retry the
    # loser finds the winner's receipt and replays it (or reports the conflict).
    # Two captures queued the first job of one session at once: on retry the loser folds into it.
    return isinstance(exc, pg_errors.UniqueViolation) and exc.diag.constraint_name in ("receipts_idempotency",
                                                                                         "jobs_one_pending")


class PostgresStore(PostgresExtractionMixin, PostgresSubagentMixin, PostgresForgetMixin, CursorMixin, CountsMixin,
                    VectorMixin, Store):
    """A PostgreSQL database shared by any number of processes and hosts.

    Usage::

        store = PostgresStore("postgresql://app@db.internal/tortoise")
        Memory(store=store, namespace="alice")   # or Memory("postgresql://...")

    Every capture is one transaction that locks its session row, so concurrent
    writers of one session append in turn and never lose or duplicate a turn.

    Args:
        url: a ``postgresql://`` URL (libpq syntax; ``?options=-csearch_path=tortoise``
            puts the tables in another schema); a malformed one (a space, an unknown parameter, port
            ``abc``) raises ``ConfigError`` with libpq's reason, its password hidden, and no server is asked.
        min_size: connections the pool keeps open.
        max_size: the most connections this process opens.
        connect_timeout: seconds to wait for the server to accept a connection (libpq's, at least 2).
        timeout_s: the bound on each call (waiting for a pooled connection, then its statements),
            or None for none; an enclosing ``store.deadline.within`` scope can only shorten it.
            Past it the call raises ``StoreTimeout``, even with the server frozen: the connection
            is then dropped; ``StoreError`` with libpq's reason when the server refused to connect.
    """

    PARAM = "%s"
    ROW_ORDER = "id"
    concurrent_reads = True

    def _time_param(self, value: datetime) -> Any:
        return value

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8, connect_timeout: float = 10.0,
                 timeout_s: float | None = DEFAULT_STORE_TIMEOUT_S) -> None:
        if min_size < 0 or max_size < max(min_size, 1):
            raise ConfigError("pool sizes need 0 <= min_size <= max_size and max_size >= 1")
        self.url = redact_url(url)
        self.timeout_s = timeout_s
        self._health = Health(self.url)
        self._lexemes = LexemeCache()
        self._reflex_warm = False  # prepare_reflex has warmed the connections a block reads on
        self._warm_lock = threading.Lock()
        self._pgvector: PgVector | None = None  # pgvector's search, probed on first use
        try:
            given = conninfo_to_dict(url) if url else {}
        except psycopg.ProgrammingError as exc:  # a space, an unknown ?parameter: was a traceback at the CLI
            raise _bad_url(url, exc) from None
        options: dict[str, Any] = {k: v for k, v in _KEEPALIVES.items() if k not in given}
        options["connect_timeout"] = max(int(connect_timeout), 2)
        try:
            # A direct first connection reports libpq's own reason (refused, no such
            # database, auth) and brings the schema up to date before the pool opens.
            with psycopg.connect(url, autocommit=True, **options) as conn:
                migrate_postgres(conn, POSTGRES_MIGRATIONS)
                # A standby, or default_transaction_read_only: reads are served, writes raise ReadOnlyStore.
                self.read_only = conn.execute("SHOW transaction_read_only").fetchone()[0] == "on"
        except psycopg.OperationalError as exc:
            if _BAD_VALUE.search(str(exc)):  # port=abc, sslmode=bogus: the URL's fault, no server was asked
                raise _bad_url(url, exc) from None
            raise StoreError(f"cannot connect to PostgreSQL at {self.url}: {str(exc).strip()}; {_connect_advice(exc, url)}"
                             ) from exc
        logging.getLogger("psycopg.pool").addFilter(POOL_NOISE)
        self._pool_args: dict[str, Any] = dict(
            conninfo=url, min_size=min_size, max_size=max_size, timeout=connect_timeout * 3,
            reconnect_timeout=_RECONNECT_S, kwargs={"autocommit": True, **options}, configure=self._configure,
            connection_class=connection_class(self._health), name="tortoise",
        )
        self._pool = ConnectionPool(open=True, **self._pool_args)
        self._pid = os.getpid()

    def _own_pool(self) -> ConnectionPool:
        """The pool of this process. A process forked from the one that opened the store (a prefork server, a
        multiprocessing pool) inherits its connections, whose sockets the parent still talks on: the child
        leaves them alone, never used nor closed (closing sends the server a goodbye that ends the parent's
        session; psycopg's finalizer sends none outside the process that connected), and opens its own."""
        if self._pid != os.getpid():
            with _FORK_LOCK:
                if self._pid != os.getpid():
                    self._pool = ConnectionPool(open=not self._pool.closed, **self._pool_args)
                    self._pid = os.getpid()
        return self._pool

    # -- connection and transactions ---------------------------------------------------------

    def _configure(self, conn: psycopg.Connection) -> None:
        _set_session(conn, self.timeout_s)

    def transaction(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """Run ``fn(conn)`` in one transaction, retried whole on a deadlock, a serialization
        failure or an idempotency-key race, so callers never see one; all within ``timeout_s``
        (else ``StoreTimeout``)."""
        at = deadline(self.timeout_s)

        def attempt() -> T:
            with self._connection(at, "a PostgreSQL write") as conn, conn.transaction():
                bound_statements(conn, at, local=True)
                return fn(conn)

        runner = retry(
            retry=retry_if_exception(_retryable),
            wait=wait_random_exponential(multiplier=0.01, max=0.5),
            stop=stop_after_attempt(_TX_ATTEMPTS),
            reraise=True,
        )(attempt)
        try:
            return runner()
        except UnicodeEncodeError as exc:
            raise not_unicode(exc) from None
        except (pg_errors.ReadOnlySqlTransaction, pg_errors.InsufficientPrivilege) as exc:
            raise ReadOnlyStore(f"PostgreSQL refused the write ({str(exc).strip()}): this connection is read-only "
                                "(a standby, default_transaction_read_only, or a role without write rights); "
                                "searches and reads work") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL write failed: {str(exc).strip()}") from exc

    @contextmanager
    def read(self) -> Iterator[psycopg.Connection]:
        """A pooled connection (autocommit) for reads, bounded like every call; database errors become StoreError."""
        at = deadline(self.timeout_s)
        try:
            with self._connection(at, "a PostgreSQL read") as conn:
                bound_statements(conn, at)
                yield conn
        except UnicodeEncodeError as exc:
            raise not_unicode(exc) from None
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL read failed: {str(exc).strip()}") from exc

    def _rows(self, sql: str, args: Sequence[Any] | Mapping[str, Any]) -> list[tuple[Any, ...]]:
        with self.read() as conn:
            return conn.execute(sql, args).fetchall()

    @contextmanager
    def _connection(self, at: float | None, what: str) -> Iterator[psycopg.Connection]:
        """A pooled connection for a call that must end by ``at``: the pool wait, and the call's
        time on it (watched: past ``at`` its socket is shut and it is dropped), raise ``StoreTimeout``."""
        conn = self._getconn(at, what)
        token = watchdog.arm(conn, at)
        try:
            yield conn
        except psycopg.Error as exc:
            if watchdog.fired(token) or is_statement_timeout(exc):
                raise timeout_error(what, self.timeout_s) from exc
            raise
        finally:
            if watchdog.disarm(token):
                conn.close()  # its socket was shut: never hand it out again
            self._pool.putconn(conn)

    def _getconn(self, at: float | None, what: str) -> psycopg.Connection:
        """A pooled connection, by ``at``; those the server has ended since they were last used (a
        restart) are closed and passed over, so the call gets a live one instead of their error."""
        for _ in range(self._pool.max_size):
            conn = self._pooled(at, what)
            if not dropped(conn):
                return conn
            conn.close()
            self._pool.putconn(conn)  # the pool opens another in its place
        return self._pooled(at, what)

    def _pooled(self, at: float | None, what: str) -> psycopg.Connection:
        """The pool's next connection, waited for until ``at`` (the pool's own timeout without one), in
        turns of at most ``_RECONNECT_S``: each asks the pool again, which tries to connect again once
        its last attempt gave up, so a call that began waiting in an outage is served when it ends."""
        pool = self._own_pool()
        until = deadline(pool.timeout) if at is None else at
        while True:
            left = max(remaining(until) or 0.0, 0.001)
            try:
                return pool.getconn(timeout=min(left, _RECONNECT_S))
            except PoolClosed:
                raise StoreClosed(self.url) from None
            except PoolTimeout as exc:
                if (remaining(until) or 0.0) > 0:
                    continue
                self._no_connection(exc, what)

    def _no_connection(self, exc: PoolTimeout, what: str) -> NoReturn:
        """Raise why no connection came in time: the server refusing, or a busy pool."""
        reason = self._health.down_reason
        if reason is not None:
            raise StoreError(f"cannot connect to PostgreSQL at {self.url}: {reason}; check that the server "
                             "is running and reachable (calls go on once it answers)") from exc
        raise timeout_error(f"{what} (waiting for a pooled connection)", self.timeout_s) from exc

    def migrate(self) -> list[int]:
        try:
            with self._connection(None, "a PostgreSQL migration") as conn:
                bound_statements(conn, None)
                return migrate_postgres(conn, POSTGRES_MIGRATIONS)
        except MigrationError:
            raise
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL migration failed: {str(exc).strip()}") from exc

    # -- vectors (the rest is VectorMixin's) ---------------------------------------------------

    @contextmanager
    def _unbounded(self) -> Iterator[psycopg.Connection]:
        with self._connection(None, "setting up pgvector") as conn:
            bound_statements(conn, None)
            yield conn

    def _pg_vector(self) -> PgVector:
        if self._pgvector is None:
            self._pgvector = PgVector(self.read, self._unbounded, self.read_only)
        return self._pgvector

    def pending_embeddings(self, namespace: str, model: str, limit: int, *,
                           after: tuple[VectorKind, str] | None = None) -> list[tuple[VectorKind, str, str]]:
        self._pg_vector().ensure()  # each embedding run sets pgvector up where it can, never the reflex
        return super().pending_embeddings(namespace, model, limit, after=after)

    def _vector_extra(self) -> Any:
        return self._pg_vector().column()

    def nearest_vectors(self, namespace: str, model: str, vector: Sequence[float], k: int,
                        kind: str | None = None) -> list[tuple[str, str, float]] | None:
        pg = self._pg_vector()
        return pg.nearest(namespace, model, vector, k, kind) if pg.available else None

    def vector_search(self) -> str:
        return self._pg_vector().describe()

    def schema_version(self) -> int:
        return self._rows("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", ())[0][0]

    def close(self) -> None:
        self._own_pool().close()

    # -- capture ------------------------------------------------------------------------------

    def capture(self, namespace: str, request: CaptureRequest, *, max_turns: int | None = None) -> CaptureReceipt:
        def write(c: psycopg.Connection) -> CaptureReceipt:
            receipt = self._capture_in(c, namespace, request)
            if not receipt.replayed:  # a replay's turns were counted when first stored
                self.index_turns(c, namespace, receipt.turn_ids)
            return receipt

        return self.transaction(write)

    def capture_many(self, namespace: str, requests: Sequence[CaptureRequest]) -> list[CaptureReceipt]:
        def write(c: psycopg.Connection) -> list[CaptureReceipt]:
            # Lock every session of the batch in one order, so two batches that share
            # sessions wait for each other instead of deadlocking.
            # New sessions still get created_at in request order, as on SQLite.
            stamps: dict[str, datetime] = {}
            for r in requests:
                stamps.setdefault(r.session_id, utc_now())
            # A new session is dated by its first request, as ``_capture_in`` would date it.
            dates: dict[str, str | None] = {}
            for r in requests:
                dates.setdefault(r.session_id, r.session_date)
            for session_id in sorted(stamps, key=lambda s: (root_session(s), s)):
                self._lock_session(c, namespace, session_id, dates[session_id], stamps[session_id])
            receipts = [self._capture_in(c, namespace, r) for r in requests]
            self.index_turns(c, namespace, [t for r in receipts if not r.replayed for t in r.turn_ids])
            return receipts

        return self.transaction(write)

    def _lock_session(
        self, c: psycopg.Connection, namespace: str, session_id: str, session_date: str | None, now: datetime
    ) -> tuple[bool, str | None]:
        """Create the session row if absent and lock it; return (created now, stored date).

        The session's lock (``session_lock``) is taken first, as forgetting takes it: a capture then waits
        for a forget of its session to commit, and a forget for a capture, whose new session row and turns
        it could not see (nor lock) before they were committed.
        """
        c.execute(SESSION_LOCK, (namespace, root_session(session_id)))
        created = c.execute(
            "INSERT INTO sessions (namespace, session_id, session_date, created_at, updated_at)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING session_date",
            (namespace, session_id, session_date, now, now),
        ).fetchone()
        if created is not None:
            return True, created[0]
        row = c.execute(
            "SELECT session_date FROM sessions WHERE namespace = %s AND session_id = %s FOR UPDATE",
            (namespace, session_id),
        ).fetchone()
        if row is None:  # deleted since (by a writer that does not take the lock): created anew
            return self._lock_session(c, namespace, session_id, session_date, now)
        return False, row[0]

    def _capture_in(self, c: psycopg.Connection, namespace: str, req: CaptureRequest) -> CaptureReceipt:
        now = utc_now()
        # The session lock comes first: a second writer with the same idempotency key
        # in the same session then sees the first one's receipt instead of racing it.
        created, stored_date = self._lock_session(c, namespace, req.session_id, req.session_date, now)
        if req.idempotency_key is not None:
            row = c.execute(
                "SELECT request_hash, body FROM receipts WHERE namespace = %s AND idempotency_key = %s",
                (namespace, req.idempotency_key),
            ).fetchone()
            if row is not None:
                return replay_or_conflict(req, row[0], row[1])
        warnings: list[Diagnostic] = []
        if created:
            session_date = req.session_date
        else:
            session_date, warnings = session_date_for(stored_date, req)
            c.execute(
                "UPDATE sessions SET session_date = %s, updated_at = %s WHERE namespace = %s AND session_id = %s",
                (session_date, now, namespace, req.session_id),
            )
        ids, below, latest = identities_read(req)
        existing = sorted({r[0]: (r[0], r[1], r[2]) for r in c.execute(
            "(SELECT idx, external_id, content_hash FROM turns WHERE namespace = %(ns)s AND session_id = %(sid)s"
            " ORDER BY idx DESC LIMIT %(latest)s)"
            " UNION ALL SELECT idx, external_id, content_hash FROM turns WHERE namespace = %(ns)s AND session_id = %(sid)s"
            " AND (idx < %(below)s OR external_id = ANY(%(ids)s::text[]))",
            {"ns": namespace, "sid": req.session_id, "latest": latest, "below": below, "ids": ids},
        ).fetchall()}.values())
        receipt_id = f"r_{uuid.uuid4().hex}"
        new_rows = plan_append(namespace, req, existing, receipt_id, now.isoformat())
        warnings += repeated_tail(req, existing)
        if new_rows:
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO turns (turn_id, namespace, session_id, idx, role, name, content, external_id,"
                    " timestamp, metadata, content_hash, receipt_id, created_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    new_rows,
                )
            fill_subagent_turns(c, namespace, req.session_id)
        receipt = new_receipt(namespace, req, receipt_id, session_date, new_rows, warnings)
        c.execute(
            "INSERT INTO receipts (receipt_id, namespace, session_id, idempotency_key, request_hash, body, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            receipt_row(receipt, req, now),
        )
        return receipt

    def index_turns(self, c: psycopg.Connection, namespace: str, turn_ids: Sequence[str]) -> None:
        """Count stored turns of ``namespace`` in its ranking statistics (inside the capture transaction)."""
        self._count_turns(c, namespace, turn_ids, 1)

    def unindex_turns(self, c: psycopg.Connection, namespace: str, turn_ids: Sequence[str]) -> None:
        """Take turns of ``namespace`` out of its ranking statistics: call it in the deleting
        transaction, before deleting them."""
        self._count_turns(c, namespace, turn_ids, -1)

    def _count_turns(self, c: psycopg.Connection, namespace: str, turn_ids: Sequence[str], sign: int) -> None:
        if not turn_ids:
            return
        args = {"ns": namespace, "ids": list(turn_ids), "sign": sign}
        for stmt in count_turns_sql():
            c.execute(stmt, args)
        if sign < 0:
            c.execute("DELETE FROM rank_terms WHERE namespace = %s AND n_turns <= 0", (namespace,))
            c.execute("DELETE FROM rank_namespaces WHERE namespace = %s AND n_turns <= 0", (namespace,))

    def save_receipt(self, namespace: str, receipt: CaptureReceipt) -> None:
        body = receipt.model_dump_json()

        def write(c: psycopg.Connection) -> None:
            cur = c.execute(
                "UPDATE receipts SET body = %s WHERE namespace = %s AND receipt_id = %s",
                (body, namespace, receipt.receipt_id),
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"no receipt {receipt.receipt_id!r} in namespace {namespace!r}")

        self.transaction(write)

    def receipts(self, namespace: str, session_id: str | None = None) -> list[CaptureReceipt]:
        args: list[Any] = [namespace]
        sql = and_equal("SELECT body FROM receipts WHERE namespace = %s", args, {"session_id": session_id}, "%s")
        rows = self._rows(sql + ' ORDER BY created_at, receipt_id COLLATE "C"', args)
        return [CaptureReceipt.model_validate_json(r[0]) for r in rows]

    # -- reads ----------------------------------------------------------------------------------

    def search_turns(self, namespace: str, match: str, *, k: int, session_id: str | None = None) -> list[SearchHit]:
        """Search with an expression made by ``tortoise_sdk.search.fts5_query`` (quoted terms joined by OR)."""
        return self.search_terms(namespace, terms_from_fts5(match), k=k, session_id=session_id)

    def search_terms(
        self, namespace: str, terms: Sequence[str], *, k: int, session_id: str | None = None
    ) -> list[SearchHit]:
        """BM25 over the terms with the namespace's statistics (as FTS5's formula), with bounded work on large stores.

        The same plan as ``SQLiteStore.search_terms``: terms are taken rarest first (in this
        namespace) until their postings reach ``search.POSTINGS_BUDGET``; those rank a candidate
        pool by BM25, and each remaining common term adds its IDF to the candidates whose indexed
        text mentions it. On a small namespace this is plain BM25. Ties go by session id, then position.
        """
        terms = list(dict.fromkeys(usable_terms(terms)))
        if not terms or k < 1:
            return []
        dfs = {term: int(df) for term, df in self._rows(term_dfs_sql(), {"terms": terms, "ns": namespace})}
        found = [t for t in terms if dfs.get(t)]
        if not found:
            return []
        if session_id is not None:
            return self._bm25_turns(namespace, found, k=k, session_id=session_id)
        lead, rest = split_by_postings(found, dfs, POSTINGS_BUDGET)
        among = None
        if dfs[lead[0]] > POSTINGS_BUDGET:
            # Too many postings even for the rarest term: its newest turns are the candidates, as on SQLite.
            among = [r[1] for r in self._rows(newest_turn_matches_sql(content_only=False),
                                              ([lead[0]], namespace, min(POSTINGS_BUDGET, NEWEST_TURNS)))]
        if not rest:
            return self._bm25_turns(namespace, lead, k=k, among=among)
        n_docs = self._rows("SELECT n_turns FROM rank_namespaces WHERE namespace = %s", (namespace,))[0][0]
        idfs = {t: idf(n_docs, dfs[t]) for t in rest}
        scored = [hit.model_copy(update={"score": hit.score + idf_bonus(indexed_text(hit.content), idfs)})
                  for hit in self._bm25_turns(namespace, lead, k=max(5 * k, 50), among=among)]
        scored.sort(key=lambda h: (-h.score, h.session_id, h.index))
        return scored[:k]

    def _bm25_turns(self, namespace: str, terms: Sequence[str], *, k: int,
                    session_id: str | None = None, among: Sequence[int] | None = None) -> list[SearchHit]:
        sql = turn_bm25_sql(
            select=_TURN_COLUMNS, from_=f"turns t {_JOIN_SESSION}",
            output="turn_id, external_id, session_id, session_date, idx, role, name, content",
            order_tail='matched.session_id COLLATE "C", matched.idx', session=session_id is not None,
            among=among is not None,
        )
        args = {"terms": list(terms), "ns": namespace, "k": k, "sid": session_id, "ids": list(among or ())}
        return [_hit(r, float(r[8])) for r in self._rows(sql, args)]

    def namespaces(self) -> list[NamespaceInfo]:
        return self._namespace_infos(self._rows(NAMESPACES_SQL + ' COLLATE "C"', ()))

    def sessions(self, namespace: str) -> list[SessionInfo]:
        rows = self._rows(
            "SELECT s.session_id, s.session_date, s.created_at, s.updated_at,"
            " (SELECT COUNT(*) FROM turns t WHERE t.namespace = s.namespace AND t.session_id = s.session_id)"
            ' FROM sessions s WHERE s.namespace = %s ORDER BY s.created_at, s.session_id COLLATE "C"',
            (namespace,),
        )
        return [
            SessionInfo(session_id=r[0], session_date=r[1], created_at=r[2], updated_at=r[3], turn_count=r[4])
            for r in rows
        ]

    def turns(self, namespace: str, session_id: str, *, start: int = 0, stop: int | None = None,
              last: int | None = None, external_ids: Sequence[str] | None = None,
              role: str | None = None) -> list[SearchHit]:
        sql = f"SELECT {_TURN_COLUMNS} FROM turns t {_JOIN_SESSION} WHERE t.namespace = %s AND t.session_id = %s"
        args: list[Any] = [namespace, session_id]
        if external_ids is not None:  # through the external id's index
            sql += " AND t.external_id = ANY(%s)"
            args.append(list(dict.fromkeys(external_ids)))
        if role is not None:
            sql += " AND t.role = %s"
            args.append(role)
        if start:
            sql += " AND t.idx >= %s"
            args.append(start)
        if stop is not None:
            sql += " AND t.idx < %s"
            args.append(stop)
        if last is not None:
            rows = self._rows(sql + " ORDER BY t.idx DESC LIMIT %s", [*args, last])
            return [_hit(r, 0.0) for r in reversed(rows)]
        return [_hit(r, 0.0) for r in self._rows(sql + " ORDER BY t.idx", args)]

    # -- reflex reads: tokens as the index sees them, term statistics, batched neighbours -------

    def analyze(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's lexemes in order, from the same ``tortoise_english`` configuration the index uses.

        A text analysed before comes from a bounded cache (``to_tsvector`` is immutable for a given
        text and configuration); only texts not held go to the server, in one statement.
        """
        if not texts:
            return []
        sent = [indexed_text(t).replace("\x00", " ") for t in texts]
        known = self._lexemes.get_many(sent)
        unknown = list(dict.fromkeys(s for s, k in zip(sent, known) if k is None))
        fresh: dict[str, list[str]] = {}
        if unknown:
            rows = self._rows(
                "SELECT d.ord, w.lexeme FROM unnest(%s::text[]) WITH ORDINALITY AS d(txt, ord)"
                " CROSS JOIN LATERAL (SELECT u.lexeme, p FROM unnest(to_tsvector(%s::regconfig, d.txt)) AS u,"
                " unnest(u.positions) AS p) AS w ORDER BY d.ord, w.p",
                (unknown, FTS_CONFIG),
            )
            fresh = {s: [] for s in unknown}
            for ord_, lexeme in rows:
                fresh[unknown[ord_ - 1]].append(lexeme)
            for s, lexemes in fresh.items():
                self._lexemes.put(s, lexemes)
        return [list(k) if k is not None else list(fresh[s]) for s, k in zip(sent, known)]

    def term_stats(self, namespace: str, terms: Sequence[str]) -> tuple[int, dict[str, tuple[int, int]]]:
        """The namespace's turn count, and per lexeme its turns (content, speaker name), from ``rank_terms``."""
        unique = [t for t in dict.fromkeys(terms) if t and "\x00" not in t]
        # One round trip: the total on every row, and one row without a term when none is held.
        rows = self._rows(
            "SELECT n.n_turns, r.term, r.n_content, r.n_name FROM rank_namespaces n"
            " LEFT JOIN rank_terms r ON r.namespace = n.namespace AND r.term = ANY(%s)"
            " WHERE n.namespace = %s",
            (unique, namespace),
        )
        if not rows:
            return 0, {}
        return int(rows[0][0]), {term: (content, name) for _, term, content, name in rows
                                 if term is not None and (content or name)}

    def candidate_turns(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                        per_term: int = 200) -> list[SearchHit]:
        """Turns ranked by the summed weights of the terms their content holds, newest first among equals.

        Each term contributes at most its ``per_term`` newest matches in the namespace, as on SQLite.
        """
        terms = [t for t in weighted_terms if t and "\x00" not in t]
        if k < 1 or not terms:
            return []
        rows = self._rows(_candidate_turns_sql(walk_rule()), (terms, namespace, per_term, [weighted_terms[t] for t in terms], k,
                                                   namespace))
        rows.sort(key=lambda r: (-r[0], -r[1]))
        return [_hit(r[2:], r[0]) for r in rows]

    def candidate_turns_near_each(self, namespace: str, weightings: Sequence[Mapping[str, float]], *, k: int,
                                  per_term: int = 200, known: Collection[tuple[str, int]] = (),
                                  reach: int | Sequence[int] = 1) -> tuple[list[list[SearchHit]], list[SearchHit]]:
        """``candidate_turns`` for each weighting and every turn next to one, in one statement: a term
        in several weightings is walked once (``known`` is not needed)."""
        kept = [[t for t in w if t and "\x00" not in t] for w in weightings]
        terms = list(dict.fromkeys(t for w in kept for t in w))
        if k < 1 or not terms:
            return [[] for _ in weightings], []
        ord_of = {t: i for i, t in enumerate(terms, 1)}
        pairs = [(n, ord_of[t], pos, float(w[t])) for n, (w, ts) in enumerate(zip(weightings, kept))
                 for pos, t in enumerate(ts)]
        # Integers, not user text; with no offset, the candidates' own rows stand in (``near`` may hold them).
        sql = _near_each_sql(tuple(near_offsets(reach)) or (0,), walk_rule())
        rows = self._rows(sql, (terms, namespace, per_term, *(list(c) for c in zip(*pairs)), k, namespace,
                                namespace))
        each: list[list[SearchHit]] = [[] for _ in weightings]
        for r in sorted((r for r in rows if r[0] >= 0), key=lambda r: (-r[1], -r[2])):
            each[r[0]].append(_hit(r[3:], r[1]))
        return each, [_hit(r[3:], 0.0) for r in rows if r[0] < 0]

    def prepare_reflex(self) -> None:
        """Open and warm the connections a block reads on, once per store (``reflex.context`` calls
        this outside the block's time budget, bounded by one of its own).

        A block reads on two connections at once (the memory candidates beside the turn
        candidates), and the pool opens its second only when asked. A fresh server process also
        loads the text search dictionaries and the catalog entries of each table and index the
        first time a statement needs them. Paid inside the first block, the two made a new
        process's first ``context()`` miss the 50 ms budget more often than not.
        """
        if self._reflex_warm:
            return
        with self._warm_lock:
            if self._reflex_warm:
                return
            with ExitStack() as held:  # held together, so that the pool hands out (and opens) distinct ones
                conns = [held.enter_context(self.read()) for _ in range(min(_REFLEX_CONNECTIONS, self._pool.max_size))]
                for conn in conns:
                    conn.execute(_WARM_SQL).fetchall()
            self._reflex_warm = True

    def turns_at(self, namespace: str, positions: Sequence[tuple[str, int]]) -> list[SearchHit]:
        keys = list(dict.fromkeys(positions))
        if not keys:
            return []
        rows = self._rows(
            f"SELECT {_INDEXED_COLUMNS} FROM turns t {_JOIN_SESSION}"
            " WHERE t.namespace = %s AND (t.session_id, t.idx) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
            (namespace, [k[0] for k in keys], [k[1] for k in keys]),
        )
        return [_hit(r, 0.0) for r in rows]

    def get_turn(self, namespace: str, turn_id: str) -> SearchHit:
        rows = self._rows(
            f"SELECT {_TURN_COLUMNS} FROM turns t {_JOIN_SESSION} WHERE t.namespace = %s AND t.turn_id = %s",
            (namespace, turn_id),
        )
        if not rows:
            raise NotFoundError(f"no turn {turn_id!r} in namespace {namespace!r}")
        return _hit(rows[0], 0.0)


#: The connections a block reads on at once: the turn candidates' and the memory candidates'.
_REFLEX_CONNECTIONS = 2
#: Loads the text search configuration and plans a read of each table and index a block uses (and compiles
#: the expression ``content_query`` rewrites a query with).
_WARM_SQL = f"""
    SELECT to_tsvector('{FTS_CONFIG}'::regconfig, 'warm up the stemmer'),
           (SELECT COUNT(*) FROM rank_namespaces WHERE namespace = ''),
           (SELECT COUNT(*) FROM rank_terms WHERE namespace = '' AND term = ANY('{{warm}}')),
           (SELECT COUNT(*) FROM turns t {_JOIN_SESSION}
            WHERE t.namespace = '' AND t.fts @@ phraseto_tsquery('{FTS_CONFIG}'::regconfig, 'warm')),
           (SELECT COUNT(*) FROM turns t WHERE t.namespace = '' AND t.session_id = '' AND t.idx = 0),
           (SELECT COUNT(*) FROM memories m
            WHERE m.namespace = '' AND m.fts @@ phraseto_tsquery('{FTS_CONFIG}'::regconfig, 'warm')),
           (SELECT COUNT(*) FROM (SELECT m.id FROM memories m WHERE m.namespace >= '' AND m.namespace <= ''
                                  ORDER BY m.namespace DESC, m.id DESC LIMIT 1) AS w),
           {content_query(f"phraseto_tsquery('{FTS_CONFIG}'::regconfig, 'warm')")},
           (SELECT COUNT(*) FROM memory_entities WHERE memory_id = ''),
           (SELECT COUNT(*) FROM provenance WHERE namespace = '' AND turn_id = '')
"""


@functools.cache
def _candidate_turns_sql(rule: tuple[float, float, float]) -> str:
    """``candidate_turns``' statement, built once per walk rule (``fts.walk_rule()``) rather than on every call."""
    return top_matches_sql(newest_turn_matches_sql(), alias="t", select=f"t.id, {_INDEXED_COLUMNS}",
                           from_=f"turns t {_JOIN_SESSION}", where="t.namespace = %s")


@functools.cache
def _near_each_sql(offsets: tuple[int, ...], rule: tuple[float, float, float]) -> str:
    """``candidate_turns_near_each``' statement for these neighbour offsets (integers, not user text), per walk rule."""
    top = top_matches_each_sql(newest_turn_matches_sql(), alias="t", select=f"t.id, {_INDEXED_COLUMNS}",
                               from_=f"turns t {_JOIN_SESSION}", where="t.namespace = %s")
    values = ", ".join(f"({int(d)})" for d in offsets)
    return f"""
        WITH top AS MATERIALIZED ({top})
        SELECT top.* FROM top
        UNION ALL
        SELECT -1, 0.0::float8, n.* FROM (
            SELECT DISTINCT top.session_id, top.idx + d.d AS idx FROM top CROSS JOIN (VALUES {values}) AS d(d)
        ) AS p
        CROSS JOIN LATERAL (  -- one index probe a position (a join was planned as a scan of every session)
            SELECT t.id, {_INDEXED_COLUMNS} FROM turns t {_JOIN_SESSION}
            WHERE t.namespace = %s AND t.session_id = p.session_id AND t.idx = p.idx
        ) AS n
    """


def _connect_advice(exc: psycopg.OperationalError, url: str) -> str:
    """What to do about a failed first connection: create a database the server lacks, else check the rest."""
    if "does not exist" in str(exc) and "database" in str(exc):
        parts = urlsplit(url)
        name = parts.path.lstrip("/") or "NAME"
        where = (f" -h {parts.hostname}" if parts.hostname else "") + (f" -p {parts.port}" if parts.port else "")
        user = f" -U {parts.username}" if parts.username else ""
        return f"create it first (createdb{where}{user} {name}); the store creates its tables itself"
    return "check that the server is running, the URL and the credentials"


#: Connection parameters that hold a secret, in a URL's query string (libpq's names).
_SECRET_PARAMS = frozenset({"password", "sslpassword"})

#: libpq's refusal of a connection parameter's value, before any server is contacted.
_BAD_VALUE = re.compile(r"connection is bad: invalid (?:integer value|port number|\w+ value)")


def _bad_url(url: str, exc: Exception) -> ConfigError:
    """A malformed PostgreSQL URL, in one line: libpq's reason (its secrets hidden) and the URL's shape."""
    reason = " ".join(str(exc).split()).removeprefix("connection is bad: ")
    try:
        parts = urlsplit(url)
        secrets = [parts.password, *(v for k, v in parse_qsl(parts.query) if k.lower() in _SECRET_PARAMS)]
    except ValueError:
        secrets = []
    for secret in filter(None, secrets):
        reason = reason.replace(secret, "***")
    return ConfigError(f"not a valid PostgreSQL URL ({redact_url(url)}): {reason}; write "
                       "postgresql://user:password@host:port/dbname, special characters percent-encoded (a space "
                       "is %20), and only libpq's parameters after '?' (e.g. ?sslmode=require)", field="db")


#: Taken by a forked child replacing the pool it inherited (``PostgresStore._own_pool``).
_FORK_LOCK = threading.Lock()


def redact_url(url: str) -> str:
    """The URL with its password (``user:pw@`` or ``?password=``) replaced by ``***`` (for reprs and messages)."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return "postgresql://***"
    secret_query = any(k.lower() in _SECRET_PARAMS for k, _ in query)
    if parts.password is None and not secret_query:
        return url  # as written: urlunsplit turns libpq's local-socket postgresql:///db into postgresql:/db
    if parts.password is not None:  # the host and port as written: a port such as "abc" raised ValueError here
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}")
    if secret_query:
        parts = parts._replace(query="&".join(f"{k}=***" if k.lower() in _SECRET_PARAMS else urlencode({k: v})
                                              for k, v in query))
    shown = urlunsplit(parts)
    if not parts.netloc:  # postgresql:///db?password=...: keep the '//' that makes it a URL
        shown = f"{parts.scheme}://{shown.removeprefix(parts.scheme + ':')}"
    return shown


def _set_session(conn: psycopg.Connection, timeout_s: float | None) -> None:
    conn.execute("SET TIME ZONE 'UTC'")
    # No JIT compilation: the store's statements read a few thousand rows through indexes, but on a
    # large table their estimated cost passes jit_above_cost (100,000 by default) and the server
    # spent 40-57 ms compiling each of a context()'s three candidate statements, most of a block at
    # ten million turns (EXPLAIN ANALYZE: "JIT: ... Total 57.147 ms" of 102.8 ms executed).
    conn.execute("SET jit = off")
    # The store's bound as the session's statement_timeout: calls under it never pay a round trip
    # to set one (a role's own default is replaced, so the connection knows what it has).
    ms = 0 if timeout_s is None else max(int(timeout_s * 1000), 1)
    conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(ms),))
    conn.statement_timeout_ms = ms  # type: ignore[attr-defined]
    # A transaction never outlives the bound (the watchdog drops its connection), so one left idle
    # longer belongs to a client that froze or vanished without closing its socket: the server ends
    # it and frees its row locks (a dead worker's job is then leased again, not skipped as locked).
    conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)", (str(ms),))
