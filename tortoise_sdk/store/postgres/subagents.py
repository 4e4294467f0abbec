"""PostgreSQL side of sub-agent recording: the same one-statement upsert, reads and counters as SQLite.

A mixin of ``PostgresStore`` (it relies on its ``transaction`` and ``read``); the flow
is ``subagent_core.SubagentCore``'s. Every
``SET`` of the upsert reads only the stored row (``s``) and ``EXCLUDED``, so it is
exactly ``tortoise_sdk.subagents.COLUMN_RULES`` with no read before the write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from ...models import SubagentContext
from ..rows import Row, and_equal, subagent_context, subagent_params, utc
from ..subagent_core import SubagentCore, health_sql, merge_sql, owner_sessions

if TYPE_CHECKING:
    from ...subagent_models import NormalizedFrame

logger = logging.getLogger(__name__)

__all__ = ("PostgresSubagentMixin", "fill_subagent_turns")

# See sqlite.subagents._RESOLVE_TURN: the same lookups in the same order, the same derived prefixes.
_RESOLVE_TURN = """COALESCE(
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = %(namespace)s AND t.session_id = {session} AND t.external_id = {ref}),
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = %(namespace)s AND t.external_id = {ref} AND starts_with(t.session_id, {session} || ':agent-')
      ORDER BY t.session_id COLLATE "C", t.idx LIMIT 1),
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = %(namespace)s AND t.external_id = {ref} AND starts_with(t.session_id, {session} || ':task-')
      ORDER BY t.session_id COLLATE "C", t.idx LIMIT 1),
    (SELECT t.turn_id FROM turns t
      WHERE t.turn_id = {ref} AND t.namespace = %(namespace)s AND t.session_id = {session})
)"""

_UPSERT = f"""
INSERT INTO subagent_contexts AS s (
    public_id, namespace, session_id, turn_ref, turn_id, agent_execution_id, tool_call_id, parent_tool_call_id, subagent_type,
    description, agent_id, child_session_id, model, agent_status, tool_status, is_async, total_tokens,
    tool_use_count, duration_ms, source, observed_at, settled_at, updated_at
) VALUES (
    %(public_id)s, %(namespace)s, %(session_id)s, %(turn_ref)s::text,
    {_RESOLVE_TURN.format(session="%(session_id)s::text", ref="%(turn_ref)s::text")},
    %(agent_execution_id)s, %(tool_call_id)s,
    %(parent_tool_call_id)s, %(subagent_type)s, %(description)s, %(agent_id)s, %(child_session_id)s, %(model)s,
    %(agent_status)s, %(tool_status)s, %(is_async)s, %(total_tokens)s, %(tool_use_count)s, %(duration_ms)s,
    %(source)s, %(observed_at)s, %(settled_at)s, %(now)s
)
ON CONFLICT (namespace, session_id, agent_execution_id, tool_call_id) DO UPDATE SET
    {merge_sql("s.", is_async="s.is_async OR EXCLUDED.is_async", differs="{a} IS DISTINCT FROM {b}")}
RETURNING *
"""

# See sqlite.subagents._FILL: the rows of one session still waiting for their turn.
_FILL = f"""
UPDATE subagent_contexts AS s
   SET turn_id = {_RESOLVE_TURN.format(session="s.session_id", ref="s.turn_ref")}
 WHERE s.namespace = %(namespace)s AND s.session_id = %(session_id)s AND s.turn_id IS NULL AND s.turn_ref IS NOT NULL
"""

# Parameters that may be NULL need a type for ``IS NULL``.
_TYPED = {"session_id": "%(session_id)s::text", "since": "%(since)s::timestamptz"}

# See sqlite.subagents._HEALTH; ``metadata`` is JSON text (``json``, not ``jsonb``: any string it holds casts).
_HEALTH = health_sql(
    "SELECT t.turn_id, t.session_id, t.idx, t.timestamp, t.created_at, u ->> 'id' AS tool_call_id,"
    " u ->> 'name' AS tool_name FROM turns t CROSS JOIN LATERAL json_array_elements(CASE"
    " WHEN json_typeof(t.metadata::json -> 'tool_uses') = 'array' THEN t.metadata::json -> 'tool_uses'"
    " ELSE '[]'::json END) AS u WHERE t.namespace = %(namespace)s AND t.metadata LIKE '%%\"tool_uses\"%%'",
    param=lambda name: _TYPED.get(name, f"%({name})s"),
    names_in="= ANY(%(names)s::text[])",
)

_BUMP = """INSERT INTO subagent_counters AS k (namespace, name, value) VALUES (%s, %s, %s)
ON CONFLICT (namespace, name) DO UPDATE SET value = k.value + EXCLUDED.value"""


def fill_subagent_turns(c: psycopg.Connection, namespace: str, session_id: str) -> None:
    """Fill forward the ``turn_id`` of rows whose turn a capture of ``session_id`` may just have stored.

    See ``sqlite.subagents.fill_subagent_turns``. Runs in a savepoint of the capture's
    transaction; a failure other than a deadlock or serialization conflict (which the
    capture's transaction retries) logs a warning and leaves the rows pending.
    """
    try:
        with c.transaction():
            for owner in owner_sessions(session_id):
                c.execute(_FILL, {"namespace": namespace, "session_id": owner})
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
        raise
    except psycopg.Error as exc:
        logger.warning("subagent turn ids of session %r were not filled forward: %s", session_id, exc)


class PostgresSubagentMixin(SubagentCore):
    """Sub-agent rows and counters for ``PostgresStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[psycopg.Connection]]

    def subagents(
        self, namespace: str, session_id: str | None = None, turn_id: str | None = None
    ) -> list[SubagentContext]:
        """Rows of a namespace (or one session / launching turn), by observed_at, tool_call_id,
        agent_execution_id, session_id, then insertion (text in byte order, as on SQLite)."""
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM subagent_contexts WHERE namespace = %s", args,
                        {"session_id": session_id, "turn_id": turn_id}, "%s")
        sql += (' ORDER BY observed_at, tool_call_id COLLATE "C", agent_execution_id COLLATE "C",'
                ' session_id COLLATE "C", id')
        with self.read() as c, c.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(sql, args).fetchall()
        return [subagent_context(r) for r in rows]

    def _upsert_params(self, namespace: str, frame: NormalizedFrame, now: datetime) -> dict[str, Any]:
        return subagent_params(namespace, frame, now, stamp=utc, is_async=bool(frame.is_async))

    def _upsert_row(self, c: psycopg.Connection, params: dict[str, Any]) -> Row | None:
        with c.cursor(row_factory=dict_row) as cur:
            return cur.execute(_UPSERT, params).fetchone()

    def _subagent_row(self, c: psycopg.Connection, params: dict[str, Any]) -> Row:
        with c.cursor(row_factory=dict_row) as cur:
            row = cur.execute("SELECT * FROM subagent_contexts WHERE namespace = %(namespace)s"
                              " AND session_id = %(session_id)s AND agent_execution_id = %(agent_execution_id)s"
                              " AND tool_call_id = %(tool_call_id)s", params).fetchone()
        assert row is not None  # the upsert found this row in conflict
        return row

    def _health_rows(self, params: dict[str, Any]) -> tuple[list[Any], list[Any], tuple[Any, Any]]:
        launches, unmatched, stats = _HEALTH
        with self.read() as c:
            return (c.execute(launches, params).fetchall(), c.execute(unmatched, params).fetchall(),
                    tuple(c.execute(stats, params).fetchone()))

    def _add_counters(self, c: psycopg.Connection, rows: list[tuple[str, str, int]]) -> None:
        if rows:
            with c.cursor() as cur:
                cur.executemany(_BUMP, rows)

    def _counter_values(self, namespace: str) -> list[tuple[str, int]]:
        with self.read() as c:
            return c.execute("SELECT name, value FROM subagent_counters WHERE namespace = %s", (namespace,)).fetchall()
