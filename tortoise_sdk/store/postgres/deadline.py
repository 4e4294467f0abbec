"""Deadlines on PostgreSQL calls, held even when the server never answers.

Three bounds, each for a way a call can wait:

- the server's own ``statement_timeout``, set to the call's remaining budget (``store.deadline``)
  before a statement when the connection's setting is not already close to it, so a slow query or
  a lock wait is cancelled by the server and the connection stays usable;
- a watchdog thread that shuts the socket of a connection whose call is ``GRACE_S`` past its
  deadline: a frozen server (SIGSTOP, a paused VM) cancels nothing and answers nothing, and only the
  client can stop waiting; the connection is then closed, never handed out again. The grace lets
  a live server's own cancellation arrive first, so a call that merely ran long keeps its
  connection (a reconnect would cost the next call more than the grace);
- the pool wait, bounded by the same budget by the store (``getconn(timeout=...)``), which also
  passes over pooled connections the server has ended (``dropped``), so that a server restart
  costs no call an error.

``Health`` remembers whether the latest connection attempt failed, so a pool wait that ran out
while the server refuses connections reports that (``StoreError`` naming libpq's reason), not a
busy pool (``StoreTimeout``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import socket
import threading
import time
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from ..deadline import remaining

__all__ = ("GRACE_S", "POOL_NOISE", "Health", "PoolNoise", "TimedConnection", "bound_statements", "connection_class", "dropped",
           "is_statement_timeout", "watchdog")

#: How long past a call's deadline the watchdog waits for the server's own statement_timeout.
GRACE_S = 0.1


_log = logging.getLogger("tortoise_sdk.store.postgres")


class Health:
    """Whether this store's latest connection attempt failed, and libpq's reason.

    The change either way is logged once (a warning): the server became unreachable, and it
    answers again. The pool's own lines about each attempt are kept at DEBUG (``PoolNoise``).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.down_reason: str | None = None

    def failed(self, exc: BaseException) -> None:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if self.down_reason is None:
            _log.warning("cannot connect to PostgreSQL at %s: %s; calls wait for it up to their bound, and go "
                         "on once it answers", self.url, reason)
        self.down_reason = reason

    def connected(self) -> None:
        if self.down_reason is not None:
            _log.warning("PostgreSQL at %s answers again", self.url)
        self.down_reason = None


class TimedConnection(psycopg.Connection):  # type: ignore[type-arg]
    """A connection that knows its session ``statement_timeout`` (ms, 0 = none) and reports to a ``Health``."""

    health: Health | None = None
    statement_timeout_ms: int = 0

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
        try:
            conn = super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            if cls.health is not None:
                cls.health.failed(exc)
            raise
        if cls.health is not None:
            cls.health.connected()
        return conn


def connection_class(health: Health) -> type[TimedConnection]:
    """The connection class of one store's pool: its connection attempts report to ``health``."""
    return type("TortoiseConnection", (TimedConnection,), {"health": health})


def dropped(conn: psycopg.Connection) -> bool:
    """Whether the server has ended this idle pooled connection (a restart, ``pg_terminate_backend``,
    ``idle_session_timeout``), by a look at its socket: no round trip.

    Nothing is sent to an idle connection but its end (the server's last words, then EOF): a
    socket with something to read is taken as ended. The rare other message (a setting the
    server reports after a reload) costs only a new connection.
    """
    if conn.closed:
        return True
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return True
    if not hasattr(select, "poll"):  # Windows: its select() has no limit on descriptor numbers
        return bool(select.select([fd], [], [], 0)[0])
    # poll(), not select(): a process with more than 1,024 open files has sockets select() refuses.
    watch = select.poll()
    watch.register(fd, select.POLLIN)
    return bool(watch.poll(0))


class PoolNoise(logging.Filter):
    """Demotes to DEBUG psycopg_pool's warnings about this package's pools (named ``tortoise``): a
    connection attempt that failed, a retry given up, a closed connection discarded. The store
    says the same once, where it matters: ``StoreError`` naming libpq's reason, the reflex's
    ``degraded_reason``, ``tortoise worker``'s backoff line. A handler at DEBUG still gets them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING:
            message = record.getMessage()
            if "'tortoise'" in message or "TortoiseConnection" in message:
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


#: Added once to the ``psycopg.pool`` logger by each ``PostgresStore`` (adding it again changes nothing).
POOL_NOISE = PoolNoise()


def _wanted_ms(at: float | None) -> int:
    left = remaining(at)
    return 0 if left is None else max(int(left * 1000), 1)


#: How much longer than the remaining budget a connection's setting may be and still serve: the
#: server then cancels a statement at most this long after its deadline, well inside ``GRACE_S``,
#: so the connection is kept; a call's later statements (the reflex sends several in 50 ms) need
#: no ``SET`` of their own.
LATE_MS = int(GRACE_S * 1000) // 2


def _close_enough(current: int, wanted: int) -> bool:
    # At most a tenth of the budget (at least 20 ms) shorter, or LATE_MS longer: a call's statements
    # then share one setting, and calls under the store's default bound never pay a round trip for it.
    if wanted == 0 or current == 0:
        return wanted == current
    return wanted - max(wanted // 10, 20) <= current <= wanted + max(wanted // 10, LATE_MS)


def bound_statements(conn: psycopg.Connection, at: float | None, *, local: bool = False) -> None:
    """Make the server cancel statements past ``at``: ``SET`` (or, in a transaction, ``SET LOCAL``)
    ``statement_timeout`` to the remaining budget, unless the connection's setting is close to it."""
    current = getattr(conn, "statement_timeout_ms", 0)
    wanted = _wanted_ms(at)
    if _close_enough(current, wanted):
        return
    conn.execute("SELECT set_config('statement_timeout', %s, %s)", (str(wanted), local))
    if not local:
        conn.statement_timeout_ms = wanted  # type: ignore[attr-defined]


def is_statement_timeout(exc: BaseException) -> bool:
    """The server cancelled a statement for its ``statement_timeout``."""
    return isinstance(exc, pg_errors.QueryCanceled) and "statement timeout" in str(exc)


class _Watchdog:
    """One daemon thread that shuts the socket of each armed connection still armed at its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, psycopg.Connection] = {}
        self._fired: set[int] = set()
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None

    def arm(self, conn: psycopg.Connection, at: float | None) -> int | None:
        """Watch ``conn`` until ``disarm``; ``GRACE_S`` past ``at`` its socket is shut. None when there is no deadline."""
        if at is None:
            return None
        with self._cond:
            token = next(self._ids)
            self._armed[token] = conn
            heapq.heappush(self._heap, (at + GRACE_S, token))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tortoise-pg-watchdog", daemon=True)
                self._thread.start()
            if self._heap[0][1] == token:  # the earliest now: the thread must wake sooner than it planned
                self._cond.notify()
        return token

    def disarm(self, token: int | None) -> bool:
        """Stop watching; True when the deadline passed first and the socket was shut (close the connection)."""
        if token is None:
            return False
        with self._cond:
            self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def fired(self, token: int | None) -> bool:
        """Whether the socket of ``token``'s connection was shut at its deadline."""
        with self._cond:
            return token in self._fired

    def forget_inherited(self) -> None:
        """In a forked child: drop what the parent was watching (its calls run there, and shutting one of their
        sockets here would cut the parent's connection), with a lock no parent thread can be holding."""
        self._cond = threading.Condition()
        self._heap, self._armed, self._fired, self._thread = [], {}, set(), None

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)  # disarmed in time
                if not self._heap:
                    self._cond.wait()
                    continue
                at, token = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                conn = self._armed.pop(token)
                self._fired.add(token)
                _shut(conn)


def _shut(conn: psycopg.Connection) -> None:
    """Wake whoever waits on ``conn``'s socket: shut it down both ways (the fd stays open for libpq to close)."""
    try:
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=fd)
    except (OSError, psycopg.Error, ValueError):
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()  # libpq owns the descriptor


watchdog = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=watchdog.forget_inherited)
