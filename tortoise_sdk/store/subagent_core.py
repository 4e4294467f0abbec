"""The dialect-neutral half of the sub-agent mixins of both stores (``SubagentCore``).

The upsert-then-count flow and counter validation; a store's mixin supplies
``transaction`` and the ``_``-hooks: the one-statement upsert and counter SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..models import SubagentContext, SubagentCounters
from ..subagent_models import LAST_REPORTED
from .rows import COUNTER_NAMES, Row, counter_rows, subagent_context

if TYPE_CHECKING:
    from ..subagent_models import NormalizedFrame

__all__ = ("DERIVED_MARKERS", "SubagentCore", "merge_sql", "owner_sessions")

Conn = Any

#: What follows a session id in the id of a session derived from it (a sub-agent's own turns).
DERIVED_MARKERS: tuple[str, ...] = (":agent-", ":task-")


def owner_sessions(session_id: str) -> list[str]:
    """``session_id`` and every session it derives from: ``s:agent-a:task-b`` -> itself, ``s:agent-a``, ``s``.

    The sessions whose sub-agent rows may resolve their turn reference to a turn of ``session_id``.
    """
    owners = {session_id}
    for marker in DERIVED_MARKERS:
        at = session_id.find(marker, 1)
        while at > 0:
            owners.add(session_id[:at])
            at = session_id.find(marker, at + 1)
    return sorted(owners)


def merge_sql(old: str, *, is_async: str, differs: str) -> str:
    """The ``DO UPDATE SET ... WHERE ...`` of the one-statement upsert: ``subagents.COLUMN_RULES`` in SQL.

    ``old`` prefixes a stored column (``""`` or ``"s."``); ``is_async`` is the sticky flag's
    expression; ``differs`` formats a null-safe "not equal" of ``{a}`` and ``{b}``. Every ``SET``
    reads only the stored row and ``excluded``. The ``WHERE`` is the backfill rule: a backfill
    frame meeting a live row, or changing nothing, leaves the row untouched (``DO NOTHING``,
    ``updated_at`` included; the statement then returns no row).
    """
    sets = {
        "turn_ref": f"COALESCE({old}turn_ref, excluded.turn_ref)",
        # the resolution of the kept reference: taken from this frame only when it carries that reference
        "turn_id": f"COALESCE({old}turn_id, CASE WHEN {old}turn_ref IS NULL OR {old}turn_ref = excluded.turn_ref"
                   " THEN excluded.turn_id END)",
        **{c: f"COALESCE(excluded.{c}, {old}{c})" for c in LAST_REPORTED},
        "tool_status": f"CASE WHEN {old}settled_at IS NOT NULL THEN {old}tool_status"
                       f" ELSE COALESCE(excluded.tool_status, {old}tool_status) END",
        "is_async": is_async,
        "source": f"CASE WHEN excluded.source = 'live' THEN 'live' ELSE {old}source END",
        "settled_at": f"COALESCE({old}settled_at, excluded.settled_at)",
    }
    changes = " OR ".join(differs.format(a=f"({expr})", b=f"{old}{column}") for column, expr in sets.items())
    assignments = ",\n    ".join(f"{column} = {expr}" for column, expr in sets.items())
    return (f"{assignments},\n    updated_at = excluded.updated_at\n"
            f"WHERE excluded.source = 'live' OR ({old}source = 'backfill' AND ({changes}))")


class SubagentCore:
    """Sub-agent upsert and counters, over per-dialect hooks."""

    transaction: Callable[..., Any]

    def upsert_subagent(
        self, namespace: str, frame: NormalizedFrame, now: datetime,
        increments: Mapping[str, int] | None = None,
    ) -> SubagentContext:
        """Merge one normalized frame into its row in one statement; bump ``upserted`` and ``increments`` with it."""
        params = self._upsert_params(namespace, frame, now)

        def write(c: Conn) -> SubagentContext:
            row = self._upsert_row(c, params)
            if row is None:  # a backfill that left the row untouched
                row = self._subagent_row(c, params)
            counts = dict(increments or {})
            counts["upserted"] = counts.get("upserted", 0) + 1
            self._add_counters(c, counter_rows(namespace, counts))
            return subagent_context(row)

        return self.transaction(write)

    def bump_subagent_counters(self, namespace: str, increments: Mapping[str, int]) -> None:
        """Add to the namespace's persistent counters (names of ``SubagentCounters``) in one transaction."""
        if any(increments.values()):
            self.transaction(lambda c: self._add_counters(c, counter_rows(namespace, increments)))

    def subagent_counters(self, namespace: str) -> SubagentCounters:
        """The namespace's counters (zero when never bumped)."""
        return SubagentCounters(**{name: value for name, value in self._counter_values(namespace)
                                   if name in COUNTER_NAMES})

    def _upsert_params(self, namespace: str, frame: NormalizedFrame, now: datetime) -> dict[str, Any]:
        raise NotImplementedError

    def _upsert_row(self, c: Conn, params: dict[str, Any]) -> Row | None:
        """Run the one-statement upsert; return the merged row (None when it left a row untouched)."""
        raise NotImplementedError

    def _subagent_row(self, c: Conn, params: dict[str, Any]) -> Row:
        """The stored row of the key in ``params``."""
        raise NotImplementedError

    def _add_counters(self, c: Conn, rows: list[tuple[str, str, int]]) -> None:
        """Add ``(namespace, name, n)`` to the counters."""
        raise NotImplementedError

    def _counter_values(self, namespace: str) -> list[tuple[str, int]]:
        raise NotImplementedError
