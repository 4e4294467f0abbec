"""PostgreSQL side of forgetting: its tables, session locks and memory BM25 totals (``ForgetMixin``'s hooks).

A turn's or a memory's tsvector lives in its row and goes with it; the turns leave their
namespace's ranking statistics (``PostgresStore.unindex_turns``) and the memories the
engine-wide memory totals (``fts_stats``; kept exact, though memory BM25 now counts the
namespace's own memories at query time), in the same transaction. Deleted
rows stay in the table files as dead tuples until VACUUM (see ``vacuum``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...errors import ReadOnlyStore, StoreError
from ..forget import ForgetMixin
from ..subagent_core import root_session
from .deadline import bound_statements
from .fts import STAT_SHARDS

__all__ = ("SESSION_LOCK", "PostgresForgetMixin", "vacuum_schema")

#: A session's lock, for the transaction: captures of a session and of the sessions derived from it
#: (``root_session``) take it, and so does forgetting it. A session row lock alone cannot order them: a
#: capture's new session row (and its turns) is invisible to a forget until committed, so the forget read
#: turns to take out of the ranking statistics in one statement and deleted more in the next.
SESSION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s || chr(31) || %s, 25))"

_UNINDEX_MEMORY = (
    "INSERT INTO fts_stats (tbl, shard, n_rows, n_tokens)"
    f" SELECT 'memories', mod(pg_backend_pid(), {STAT_SHARDS}), -COUNT(*), -COALESCE(SUM(fts_len), 0)"
    " FROM memories WHERE memory_id = %s AND fts_len IS NOT NULL"
    " ON CONFLICT (tbl, shard) DO UPDATE"
    " SET n_rows = fts_stats.n_rows + excluded.n_rows, n_tokens = fts_stats.n_tokens + excluded.n_tokens"
)


def vacuum_schema(conn: psycopg.Connection, options: str) -> None:
    """``VACUUM (options)`` of every table of the connection's schema, and of no other schema's
    (a bare ``VACUUM`` would take every table of the database); outside a transaction."""
    tables = [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]
    conn.execute(f"VACUUM ({options}) " + ", ".join(f'"{t}"' for t in tables))


class PostgresForgetMixin(ForgetMixin):
    """Forgetting for ``PostgresStore``."""

    TEXT_PARAM = "%s::text"
    url: str
    read_only: bool
    _connection: Any

    def vacuum(self) -> None:
        """``VACUUM (FULL, ANALYZE)`` of every table in the schema: rewritten without their dead tuples.

        The ranking statistics are first counted again from the stored turns and memories: a replayed capture
        used to count its turns once more, and this repairs a store it inflated. Each table is locked while it
        is rewritten (readers and writers wait): run it in a quiet period.
        """
        from .fts import rebuild_stats_sql

        if self.read_only:
            raise ReadOnlyStore(f"{self.url} is read-only here: run vacuum against the primary")
        try:
            with self._connection(None, "a PostgreSQL vacuum") as conn:
                bound_statements(conn, None)  # a rewrite of every table takes what it takes
                with conn.transaction():
                    for statement in rebuild_stats_sql():
                        conn.execute(statement)
                vacuum_schema(conn, "FULL, ANALYZE")
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL vacuum failed: {str(exc).strip()}") from exc

    def _session_tables(self, c: psycopg.Connection) -> list[str]:
        return [r[0] for r in c.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND column_name IN ('namespace', 'session_id') GROUP BY table_name HAVING COUNT(*) = 2"
            " ORDER BY table_name")]

    def _lock_sessions(self, c: psycopg.Connection, namespace: str, session_id: str, where: str,
                       args: list[Any]) -> None:
        c.execute(SESSION_LOCK, (namespace, root_session(session_id)))
        c.execute(f"SELECT 1 FROM sessions WHERE namespace = %s AND {where} ORDER BY session_id FOR UPDATE",
                  [namespace, *args])

    def _unindex_memory(self, c: psycopg.Connection, memory_id: str) -> None:
        c.execute(_UNINDEX_MEMORY, (memory_id,))
