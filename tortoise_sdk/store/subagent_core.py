"""The dialect-neutral half of the sub-agent mixins of both stores (``SubagentCore``).

The upsert-then-count flow and counter validation; a store's mixin supplies
``transaction`` and the ``_``-hooks: the one-statement upsert and counter SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..models import SubagentContext, SubagentCounters
from .rows import COUNTER_NAMES, Row, counter_rows, subagent_context

if TYPE_CHECKING:
    from ..subagent_models import NormalizedFrame

__all__ = ("DERIVED_MARKERS", "SubagentCore", "owner_sessions")

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

    def _upsert_row(self, c: Conn, params: dict[str, Any]) -> Row:
        """Run the one-statement upsert; return the merged row."""
        raise NotImplementedError

    def _add_counters(self, c: Conn, rows: list[tuple[str, str, int]]) -> None:
        """Add ``(namespace, name, n)`` to the counters."""
        raise NotImplementedError

    def _counter_values(self, namespace: str) -> list[tuple[str, int]]:
        raise NotImplementedError
