"""PostgreSQL side of sub-agent recording: the same one-statement upsert, reads and counters as SQLite.

A mixin of ``PostgresStore`` (it relies on its ``transaction`` and ``read``); the flow
is ``subagent_core.SubagentCore``'s. Every
``SET`` of the upsert reads only the stored row (``s``) and ``EXCLUDED``, so it is
exactly ``tortoise_sdk.subagents.COLUMN_RULES`` with no read before the write.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row

from ..models import SubagentContext
from .subagent_core import SubagentCore
from .rows import Row, and_equal, subagent_context, subagent_params, utc

if TYPE_CHECKING:
    import psycopg

    from ..subagents import NormalizedFrame

__all__ = ("PostgresSubagentMixin",)

# See sqlite_subagents._RESOLVE_TURN: the same three lookups.
_RESOLVE_TURN = """COALESCE(
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = %(namespace)s AND t.session_id = %(session_id)s AND t.external_id = %(turn_ref)s::text),
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = %(namespace)s AND starts_with(t.session_id, %(session_id)s::text || ':')
        AND t.external_id = %(turn_ref)s::text ORDER BY t.session_id COLLATE "C" LIMIT 1),
    (SELECT t.turn_id FROM turns t
      WHERE t.turn_id = %(turn_ref)s::text AND t.namespace = %(namespace)s AND t.session_id = %(session_id)s)
)"""

_UPSERT = f"""
INSERT INTO subagent_contexts AS s (
    namespace, session_id, turn_id, agent_execution_id, tool_call_id, parent_tool_call_id, subagent_type,
    description, agent_id, child_session_id, model, agent_status, tool_status, is_async, total_tokens,
    tool_use_count, duration_ms, source, observed_at, settled_at, updated_at
) VALUES (
    %(namespace)s, %(session_id)s, {_RESOLVE_TURN}, %(agent_execution_id)s, %(tool_call_id)s,
    %(parent_tool_call_id)s, %(subagent_type)s, %(description)s, %(agent_id)s, %(child_session_id)s, %(model)s,
    %(agent_status)s, %(tool_status)s, %(is_async)s, %(total_tokens)s, %(tool_use_count)s, %(duration_ms)s,
    %(source)s, %(observed_at)s, %(settles_at)s, %(now)s
)
ON CONFLICT (namespace, session_id, agent_execution_id, tool_call_id) DO UPDATE SET
    turn_id             = COALESCE(s.turn_id, EXCLUDED.turn_id),
    parent_tool_call_id = COALESCE(EXCLUDED.parent_tool_call_id, s.parent_tool_call_id),
    subagent_type       = COALESCE(EXCLUDED.subagent_type, s.subagent_type),
    description         = COALESCE(EXCLUDED.description, s.description),
    agent_id            = COALESCE(EXCLUDED.agent_id, s.agent_id),
    child_session_id    = COALESCE(EXCLUDED.child_session_id, s.child_session_id),
    model               = COALESCE(EXCLUDED.model, s.model),
    agent_status        = COALESCE(EXCLUDED.agent_status, s.agent_status),
    tool_status         = CASE WHEN s.settled_at IS NOT NULL THEN s.tool_status
                               ELSE COALESCE(EXCLUDED.tool_status, s.tool_status) END,
    is_async            = s.is_async OR EXCLUDED.is_async,
    total_tokens        = COALESCE(EXCLUDED.total_tokens, s.total_tokens),
    tool_use_count      = COALESCE(EXCLUDED.tool_use_count, s.tool_use_count),
    duration_ms         = COALESCE(EXCLUDED.duration_ms, s.duration_ms),
    settled_at          = COALESCE(s.settled_at, EXCLUDED.settled_at),
    updated_at          = EXCLUDED.updated_at
RETURNING *
"""

_BUMP = """INSERT INTO subagent_counters AS k (namespace, name, value) VALUES (%s, %s, %s)
ON CONFLICT (namespace, name) DO UPDATE SET value = k.value + EXCLUDED.value"""


class PostgresSubagentMixin(SubagentCore):
    """Sub-agent rows and counters for ``PostgresStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[psycopg.Connection]]

    def subagents(
        self, namespace: str, session_id: str | None = None, turn_id: str | None = None
    ) -> list[SubagentContext]:
        """Rows of a namespace (or one session / launching turn), by observed_at, tool_call_id, agent_execution_id."""
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM subagent_contexts WHERE namespace = %s", args,
                        {"session_id": session_id, "turn_id": turn_id}, "%s")
        sql += ' ORDER BY observed_at, tool_call_id COLLATE "C", agent_execution_id COLLATE "C"'
        with self.read() as c, c.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(sql, args).fetchall()
        return [subagent_context(r) for r in rows]

    def _upsert_params(self, namespace: str, frame: NormalizedFrame, now: datetime) -> dict[str, Any]:
        return subagent_params(namespace, frame, now, stamp=utc, is_async=bool(frame.is_async))

    def _upsert_row(self, c: psycopg.Connection, params: dict[str, Any]) -> Row:
        with c.cursor(row_factory=dict_row) as cur:
            row = cur.execute(_UPSERT, params).fetchone()
        assert row is not None  # an upsert always returns its row
        return row

    def _add_counters(self, c: psycopg.Connection, rows: list[tuple[str, str, int]]) -> None:
        if rows:
            with c.cursor() as cur:
                cur.executemany(_BUMP, rows)

    def _counter_values(self, namespace: str) -> list[tuple[str, int]]:
        with self.read() as c:
            return c.execute("SELECT name, value FROM subagent_counters WHERE namespace = %s", (namespace,)).fetchall()
