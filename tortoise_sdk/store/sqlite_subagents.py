"""SQLite side of sub-agent recording: the one-statement upsert, reads, and persistent counters.

A mixin of ``SQLiteStore`` (it relies on its ``transaction`` and ``read``); the flow
is ``subagent_core.SubagentCore``'s. The upsert is a single ``INSERT ... ON CONFLICT DO UPDATE``: every ``SET`` reads only
the stored row and ``excluded`` (SQLite evaluates all of them against the old
row), so it is exactly ``tortoise_sdk.subagents.COLUMN_RULES``, with no read
before the write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..models import SubagentContext
from .subagent_core import SubagentCore
from .rows import Row, and_equal, subagent_context, subagent_params, utc

if TYPE_CHECKING:
    from ..subagents import NormalizedFrame

__all__ = ("SQLiteSubagentMixin", "subagent_time")

# The frame's message uuid becomes the store's turn id: the turn with that external id in
# the frame's session, else in one of its derived sub-agent sessions ("<session>:agent-..."),
# else a store turn id given directly. NULL when none is stored (yet); a later frame fills it.
_RESOLVE_TURN = """COALESCE(
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = :namespace AND t.session_id = :session_id AND t.external_id = :turn_ref),
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = :namespace AND t.session_id > :session_id || ':' AND t.session_id < :session_id || ';'
        AND t.external_id = :turn_ref ORDER BY t.session_id LIMIT 1),
    (SELECT t.turn_id FROM turns t
      WHERE t.turn_id = :turn_ref AND t.namespace = :namespace AND t.session_id = :session_id)
)"""

# One statement per rule of COLUMN_RULES; unqualified names are the stored row.
_UPSERT = f"""
INSERT INTO subagent_contexts (
    namespace, session_id, turn_id, agent_execution_id, tool_call_id, parent_tool_call_id, subagent_type,
    description, agent_id, child_session_id, model, agent_status, tool_status, is_async, total_tokens,
    tool_use_count, duration_ms, source, observed_at, settled_at, updated_at
) VALUES (
    :namespace, :session_id, {_RESOLVE_TURN}, :agent_execution_id, :tool_call_id, :parent_tool_call_id,
    :subagent_type, :description, :agent_id, :child_session_id, :model, :agent_status, :tool_status, :is_async,
    :total_tokens, :tool_use_count, :duration_ms, :source, :observed_at, :settles_at, :now
)
ON CONFLICT (namespace, session_id, agent_execution_id, tool_call_id) DO UPDATE SET
    turn_id             = COALESCE(turn_id, excluded.turn_id),
    parent_tool_call_id = COALESCE(excluded.parent_tool_call_id, parent_tool_call_id),
    subagent_type       = COALESCE(excluded.subagent_type, subagent_type),
    description         = COALESCE(excluded.description, description),
    agent_id            = COALESCE(excluded.agent_id, agent_id),
    child_session_id    = COALESCE(excluded.child_session_id, child_session_id),
    model               = COALESCE(excluded.model, model),
    agent_status        = COALESCE(excluded.agent_status, agent_status),
    tool_status         = CASE WHEN settled_at IS NOT NULL THEN tool_status
                               ELSE COALESCE(excluded.tool_status, tool_status) END,
    is_async            = MAX(is_async, excluded.is_async),
    total_tokens        = COALESCE(excluded.total_tokens, total_tokens),
    tool_use_count      = COALESCE(excluded.tool_use_count, tool_use_count),
    duration_ms         = COALESCE(excluded.duration_ms, duration_ms),
    settled_at          = COALESCE(settled_at, excluded.settled_at),
    updated_at          = excluded.updated_at
RETURNING *
"""

_BUMP = """INSERT INTO subagent_counters (namespace, name, value) VALUES (?, ?, ?)
ON CONFLICT (namespace, name) DO UPDATE SET value = value + excluded.value"""


def subagent_time(dt: datetime) -> str:
    """A timestamp as stored: UTC, fixed width, so text order is time order (naive means UTC)."""
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


class SQLiteSubagentMixin(SubagentCore):
    """Sub-agent rows and counters for ``SQLiteStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[sqlite3.Connection]]

    def subagents(
        self, namespace: str, session_id: str | None = None, turn_id: str | None = None
    ) -> list[SubagentContext]:
        """Rows of a namespace (or one session / launching turn), by observed_at, tool_call_id, agent_execution_id."""
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM subagent_contexts WHERE namespace = ?", args,
                        {"session_id": session_id, "turn_id": turn_id})
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY observed_at, tool_call_id, agent_execution_id", args).fetchall()
        return [subagent_context(r) for r in rows]

    def _upsert_params(self, namespace: str, frame: NormalizedFrame, now: datetime) -> dict[str, Any]:
        return subagent_params(namespace, frame, now, stamp=subagent_time, is_async=1 if frame.is_async else 0)

    def _upsert_row(self, c: sqlite3.Connection, params: dict[str, Any]) -> Row:
        return c.execute(_UPSERT, params).fetchone()

    def _add_counters(self, c: sqlite3.Connection, rows: list[tuple[str, str, int]]) -> None:
        c.executemany(_BUMP, rows)

    def _counter_values(self, namespace: str) -> list[tuple[str, int]]:
        with self.read() as c:
            return c.execute("SELECT name, value FROM subagent_counters WHERE namespace = ?", (namespace,)).fetchall()
