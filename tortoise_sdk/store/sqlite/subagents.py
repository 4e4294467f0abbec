"""SQLite side of sub-agent recording: the one-statement upsert, reads, and persistent counters.

A mixin of ``SQLiteStore`` (it relies on its ``transaction`` and ``read``); the flow
is ``subagent_core.SubagentCore``'s. The upsert is a single ``INSERT ... ON CONFLICT
DO UPDATE``: every ``SET`` reads only the stored row and ``excluded`` (SQLite
evaluates all of them against the old row), so it is exactly
``tortoise_sdk.subagents.COLUMN_RULES``, with no read before the write. The rule's
``turn_id`` (a raw message id) is stored as ``turn_ref``; ``turn_id`` holds the turn
it resolves to, filled forward by ``fill_subagent_turns`` when a capture stores it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...models import SubagentContext
from ..rows import Row, and_equal, subagent_context, subagent_params, utc
from ..subagent_core import SubagentCore, health_sql, merge_sql, owner_sessions

if TYPE_CHECKING:
    from ...subagent_models import NormalizedFrame

logger = logging.getLogger(__name__)

__all__ = ("SQLiteSubagentMixin", "fill_subagent_turns", "subagent_time")

# The frame's message uuid (``turn_ref``) becomes the store's turn id: the turn with that
# external id in the row's session, else in one of its derived sub-agent sessions
# ("<session>:agent-..." or "<session>:task-...", the first by session id), else a store turn
# id given directly. NULL while no such turn is stored; the capture that stores it fills it
# forward (``fill_subagent_turns``). ``{session}``/``{ref}`` are SQL expressions. Every
# ':agent-' session sorts before every ':task-' one, so two index range lookups in that
# order give the first derived session; each range is exactly its prefix.
_RESOLVE_TURN = """COALESCE(
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = :namespace AND t.session_id = {session} AND t.external_id = {ref}),
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = :namespace AND t.external_id = {ref}
        AND t.session_id >= {session} || ':agent-' AND t.session_id < {session} || ':agent.'
      ORDER BY t.session_id, t.idx LIMIT 1),
    (SELECT t.turn_id FROM turns t
      WHERE t.namespace = :namespace AND t.external_id = {ref}
        AND t.session_id >= {session} || ':task-' AND t.session_id < {session} || ':task.'
      ORDER BY t.session_id, t.idx LIMIT 1),
    (SELECT t.turn_id FROM turns t
      WHERE t.turn_id = {ref} AND t.namespace = :namespace AND t.session_id = {session})
)"""

# One statement for COLUMN_RULES (``subagent_core.merge_sql``); unqualified names are the stored row
# (SQLite evaluates every SET against it). ``turn_ref`` is the rule's raw reference; ``turn_id`` is its
# resolution. A backfill that meets a live row, or changes nothing, updates and returns no row.
_UPSERT = f"""
INSERT INTO subagent_contexts (
    public_id, namespace, session_id, turn_ref, turn_id, agent_execution_id, tool_call_id, parent_tool_call_id, subagent_type,
    description, agent_id, child_session_id, model, agent_status, tool_status, is_async, total_tokens,
    tool_use_count, duration_ms, source, observed_at, settled_at, updated_at
) VALUES (
    :public_id, :namespace, :session_id, :turn_ref, {_RESOLVE_TURN.format(session=":session_id", ref=":turn_ref")},
    :agent_execution_id, :tool_call_id, :parent_tool_call_id,
    :subagent_type, :description, :agent_id, :child_session_id, :model, :agent_status, :tool_status, :is_async,
    :total_tokens, :tool_use_count, :duration_ms, :source, :observed_at, :settled_at, :now
)
ON CONFLICT (namespace, session_id, agent_execution_id, tool_call_id) DO UPDATE SET
    {merge_sql("", is_async="MAX(is_async, excluded.is_async)", differs="{a} IS NOT {b}")}
RETURNING *
"""

# The rows of one session still waiting for their turn, resolved against the turns stored now.
_FILL = f"""
UPDATE subagent_contexts
   SET turn_id = {_RESOLVE_TURN.format(session="subagent_contexts.session_id", ref="subagent_contexts.turn_ref")}
 WHERE namespace = :namespace AND session_id = :session_id AND turn_id IS NULL AND turn_ref IS NOT NULL
"""

# Every tool call a turn's metadata records (``tool_uses``: [{"id", "name", ...}]), for the health check.
_HEALTH = health_sql(
    "SELECT t.turn_id, t.session_id, t.idx, t.timestamp, t.created_at, json_extract(u.value, '$.id') AS tool_call_id,"
    " json_extract(u.value, '$.name') AS tool_name FROM turns t, json_each(t.metadata, '$.tool_uses') AS u"
    " WHERE t.namespace = :namespace AND t.metadata LIKE '%\"tool_uses\"%' AND u.type = 'object'",
    param=lambda name: f":{name}", names_in="IN (SELECT value FROM json_each(:names))",
)

_BUMP = """INSERT INTO subagent_counters (namespace, name, value) VALUES (?, ?, ?)
ON CONFLICT (namespace, name) DO UPDATE SET value = value + excluded.value"""


def fill_subagent_turns(c: sqlite3.Connection, namespace: str, session_id: str) -> None:
    """Fill forward the ``turn_id`` of rows whose turn a capture of ``session_id`` may just have stored.

    Runs inside the capture's transaction: the rows of ``session_id`` and of every session
    it derives from (``s`` for ``s:agent-x``). Never fails the capture: a failure logs a
    warning and the rows stay pending (a later capture or frame fills them).
    """
    try:
        for owner in owner_sessions(session_id):
            c.execute(_FILL, {"namespace": namespace, "session_id": owner})
    except sqlite3.Error as exc:
        logger.warning("subagent turn ids of session %r were not filled forward: %s", session_id, exc)


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
        """Rows of a namespace (or one session / launching turn), by observed_at, tool_call_id,
        agent_execution_id, session_id, then insertion."""
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM subagent_contexts WHERE namespace = ?", args,
                        {"session_id": session_id, "turn_id": turn_id})
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY observed_at, tool_call_id, agent_execution_id, session_id, id",
                             args).fetchall()
        return [subagent_context(r) for r in rows]

    def _upsert_params(self, namespace: str, frame: NormalizedFrame, now: datetime) -> dict[str, Any]:
        return subagent_params(namespace, frame, now, stamp=subagent_time, is_async=1 if frame.is_async else 0)

    def _upsert_row(self, c: sqlite3.Connection, params: dict[str, Any]) -> Row | None:
        return c.execute(_UPSERT, params).fetchone()

    def _subagent_row(self, c: sqlite3.Connection, params: dict[str, Any]) -> Row:
        return c.execute("SELECT * FROM subagent_contexts WHERE namespace = :namespace AND session_id = :session_id"
                         " AND agent_execution_id = :agent_execution_id AND tool_call_id = :tool_call_id",
                         params).fetchone()

    def _health_rows(self, params: dict[str, Any]) -> tuple[list[Any], list[Any], tuple[Any, Any]]:
        launches, unmatched, stats = _HEALTH
        since = params["since"]
        args = {**params, "names": json.dumps(params["names"]),
                "since": None if since is None else subagent_time(since)}
        with self.read() as c:
            return (c.execute(launches, args).fetchall(), c.execute(unmatched, args).fetchall(),
                    tuple(c.execute(stats, args).fetchone()))

    def _add_counters(self, c: sqlite3.Connection, rows: list[tuple[str, str, int]]) -> None:
        c.executemany(_BUMP, rows)

    def _counter_values(self, namespace: str) -> list[tuple[str, int]]:
        with self.read() as c:
            return c.execute("SELECT name, value FROM subagent_counters WHERE namespace = ?", (namespace,)).fetchall()
