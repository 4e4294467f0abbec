"""SQLite side of sub-agent recording: the one-statement upsert, reads, and persistent counters.

A mixin of ``SQLiteStore`` (it relies on its ``transaction`` and ``read``). The
upsert is a single ``INSERT ... ON CONFLICT DO UPDATE``: every ``SET`` reads only
the stored row and ``excluded`` (SQLite evaluates all of them against the old
row), so it is exactly ``tortoise_sdk.subagents.COLUMN_RULES``, with no read
before the write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..models import SubagentContext, SubagentCounters

if TYPE_CHECKING:
    from ..subagents import NormalizedFrame

__all__ = ("SQLiteSubagentMixin", "subagent_time")

_COUNTER_NAMES = tuple(SubagentCounters.model_fields)

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
    dt = dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _params(namespace: str, frame: NormalizedFrame, now: datetime) -> dict[str, Any]:
    stamp = subagent_time(now)
    return {
        "namespace": namespace,
        "session_id": frame.session_id,
        "turn_ref": frame.turn_id,
        "agent_execution_id": frame.agent_execution_id,
        "tool_call_id": frame.tool_call_id,
        "parent_tool_call_id": frame.parent_tool_call_id,
        "subagent_type": frame.subagent_type,
        "description": frame.description,
        "agent_id": frame.agent_id,
        "child_session_id": frame.child_session_id,
        "model": frame.model,
        "agent_status": frame.agent_status,
        "tool_status": frame.tool_status,
        "is_async": 1 if frame.is_async else 0,
        "total_tokens": frame.total_tokens,
        "tool_use_count": frame.tool_use_count,
        "duration_ms": frame.duration_ms,
        "source": frame.source,
        "observed_at": subagent_time(frame.observed_at),
        "settles_at": stamp if frame.terminal else None,
        "now": stamp,
    }


def _bump(c: sqlite3.Connection, namespace: str, increments: Mapping[str, int]) -> None:
    rows = [(namespace, name, n) for name, n in increments.items() if n]
    unknown = [name for _, name, _ in rows if name not in _COUNTER_NAMES]
    if unknown:
        raise ValueError(f"unknown subagent counters {unknown}; use {', '.join(_COUNTER_NAMES)}")
    c.executemany(_BUMP, rows)


def _context(row: sqlite3.Row) -> SubagentContext:
    data = dict(row)
    data["id"] = str(data["id"])
    data["is_async"] = bool(data["is_async"])
    return SubagentContext.model_validate(data)


class SQLiteSubagentMixin:
    """Sub-agent rows and counters for ``SQLiteStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[sqlite3.Connection]]

    def upsert_subagent(
        self, namespace: str, frame: NormalizedFrame, now: datetime,
        increments: Mapping[str, int] | None = None,
    ) -> SubagentContext:
        """Merge one normalized frame into its row in one statement; bump ``upserted`` and ``increments`` with it."""
        params = _params(namespace, frame, now)

        def write(c: sqlite3.Connection) -> SubagentContext:
            row = c.execute(_UPSERT, params).fetchone()
            counts = dict(increments or {})
            counts["upserted"] = counts.get("upserted", 0) + 1
            _bump(c, namespace, counts)
            return _context(row)

        return self.transaction(write)

    def subagents(
        self, namespace: str, session_id: str | None = None, turn_id: str | None = None
    ) -> list[SubagentContext]:
        """Rows of a namespace (or one session / launching turn), by observed_at, tool_call_id, agent_execution_id."""
        sql = "SELECT * FROM subagent_contexts WHERE namespace = ?"
        args: list[Any] = [namespace]
        if session_id is not None:
            sql += " AND session_id = ?"
            args.append(session_id)
        if turn_id is not None:
            sql += " AND turn_id = ?"
            args.append(turn_id)
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY observed_at, tool_call_id, agent_execution_id", args).fetchall()
        return [_context(r) for r in rows]

    def bump_subagent_counters(self, namespace: str, increments: Mapping[str, int]) -> None:
        """Add to the namespace's persistent counters (names of ``SubagentCounters``) in one transaction."""
        if any(increments.values()):
            self.transaction(lambda c: _bump(c, namespace, increments))

    def subagent_counters(self, namespace: str) -> SubagentCounters:
        """The namespace's counters (zero when never bumped)."""
        with self.read() as c:
            rows = c.execute("SELECT name, value FROM subagent_counters WHERE namespace = ?", (namespace,)).fetchall()
        return SubagentCounters(**{name: value for name, value in rows if name in _COUNTER_NAMES})
