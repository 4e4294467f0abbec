"""The dialect-neutral half of the sub-agent mixins of both stores (``SubagentCore``).

The upsert-then-count flow and counter validation; a store's mixin supplies
``transaction`` and the ``_``-hooks: the one-statement upsert and counter SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..models import LaunchingCall, SubagentContext, SubagentCounters, SubagentHealth, SubagentKey
from ..subagent_models import LAST_REPORTED
from .rows import COUNTER_NAMES, Row, counter_rows, subagent_context

if TYPE_CHECKING:
    from ..subagent_models import NormalizedFrame

__all__ = ("DERIVED_MARKERS", "SubagentCore", "health_sql", "merge_sql", "owner_sessions", "root_session")

Conn = Any

#: What follows a session id in the id of a session derived from it (a sub-agent's own turns).
DERIVED_MARKERS: tuple[str, ...] = (":agent-", ":task-")


def root_session(session_id: str) -> str:
    """The session ``session_id`` derives from (``<root>:agent-…``, the first marker), or itself."""
    at = min((i for i in (session_id.find(m, 1) for m in DERIVED_MARKERS) if i > 0), default=-1)
    return session_id[:at] if at > 0 else session_id


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


def _same_or_derived(session: str, owner: str) -> str:
    """SQL: the session ``session`` is ``owner`` or derives from it (``owner:agent-…``, ``owner:task-…``)."""
    return (f"({session} = {owner}"
            + "".join(f" OR substr({session}, 1, length({owner}) + {len(m)}) = {owner} || '{m}'"
                      for m in DERIVED_MARKERS) + ")")


def health_sql(launches: str, *, param: Callable[[str], str], names_in: str) -> tuple[str, str, str]:
    """The health check's statements: (launches, unmatched rows, row stats), for ``SubagentCore.subagent_health``.

    ``launches`` selects every tool call found in the namespace's turns as ``turn_id,
    session_id, idx, timestamp, created_at, tool_call_id, tool_name``; ``param`` spells a
    named parameter (``namespace``, ``session_id``, ``names``, ``since``: NULL or the window's
    start as the engine stores ``observed_at``) and ``names_in`` tests ``tool_name`` against the
    launching tool names. A launch in a turn of a derived session (``s:agent-x``) is matched by a
    row of that session or of the one it derives from.

    - launches: every launching call in scope, with whether a row *in the window* records it
      (the caller keeps the launches in the window: their time is turn text, parsed in Python);
    - unmatched rows: the rows in scope and window whose call is in no launch, each with whether
      its session (or one derived from it) holds any launching call at all;
    - row stats: how many rows are in scope and window, and the latest ``observed_at`` among them.
    """
    sid = param("session_id")
    in_scope = f"({sid} IS NULL OR {_same_or_derived('{col}', sid)})"
    in_window = f"({param('since')} IS NULL OR s.observed_at >= {param('since')})"
    rows = (f"subagent_contexts s WHERE s.namespace = {param('namespace')}"
            f" AND {in_scope.format(col='s.session_id')} AND {in_window}")
    calls = (f"WITH calls AS ({launches}), launched AS (SELECT * FROM calls WHERE tool_call_id IS NOT NULL"
             f" AND tool_name {names_in} AND {in_scope.format(col='session_id')})")
    recorded = (f"EXISTS (SELECT 1 FROM {rows} AND s.tool_call_id = l.tool_call_id"
                f" AND {_same_or_derived('l.session_id', 's.session_id')})")
    launch_list = (f"{calls} SELECT l.turn_id, l.session_id, l.tool_call_id, l.tool_name, l.timestamp, l.created_at,"
                   f" CASE WHEN {recorded} THEN 1 ELSE 0 END FROM launched l"
                   " ORDER BY l.session_id, l.idx, l.tool_call_id")
    unmatched = (f"{calls} SELECT s.session_id, s.agent_execution_id, s.tool_call_id, s.source, s.observed_at,"
                 " CASE WHEN EXISTS (SELECT 1 FROM launched l"
                 f" WHERE {_same_or_derived('l.session_id', 's.session_id')}) THEN 1 ELSE 0 END"
                 f" FROM {rows} AND NOT EXISTS (SELECT 1 FROM launched l"
                 f" WHERE l.tool_call_id = s.tool_call_id AND {_same_or_derived('l.session_id', 's.session_id')})"
                 " ORDER BY s.observed_at, s.session_id, s.tool_call_id, s.agent_execution_id")
    stats = f"SELECT COUNT(*), MAX(s.observed_at) FROM {rows}"
    return launch_list, unmatched, stats


def _instant(value: Any) -> datetime | None:
    """A stored time (a datetime, or ISO text, 'Z' allowed) as an aware UTC datetime; None when it is not one."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class SubagentCore:
    """Sub-agent upsert and counters, over per-dialect hooks."""

    transaction: Callable[..., Any]

    def upsert_subagent(
        self, namespace: str, frame: NormalizedFrame, now: datetime,
        increments: Mapping[str, int] | None = None,
    ) -> SubagentContext:
        """Merge one normalized frame into its row in one statement; bump ``persisted`` and ``increments`` with it."""
        params = self._upsert_params(namespace, frame, now)

        def write(c: Conn) -> SubagentContext:
            row = self._upsert_row(c, params)
            if row is None:  # a backfill that left the row untouched
                row = self._subagent_row(c, params)
            counts = dict(increments or {})
            counts["persisted"] = counts.get("persisted", 0) + 1
            self._add_counters(c, counter_rows(namespace, counts))
            return subagent_context(row)

        return self.transaction(write)

    def bump_subagent_counters(self, namespace: str, increments: Mapping[str, int]) -> None:
        """Add to the namespace's persistent counters (names of ``SubagentCounters``) in one transaction."""
        if any(increments.values()):
            self.transaction(lambda c: self._add_counters(c, counter_rows(namespace, increments)))

    def subagent_counters(self, namespace: str) -> SubagentCounters:
        """The namespace's counters (zero when never bumped).

        A namespace written before ``attempted`` and ``persisted`` existed holds ``upserted``: it is
        read as ``persisted``, and ``attempted`` is never less than the outcomes it stands for
        (``persisted + skipped_no_identity + failed``: every frame has exactly one).
        """
        values = dict.fromkeys(COUNTER_NAMES, 0)
        for name, value in self._counter_values(namespace):
            name = "persisted" if name == "upserted" else name
            if name in values:
                values[name] += value
        values["attempted"] = max(values["attempted"],
                                  values["persisted"] + values["skipped_no_identity"] + values["failed"])
        return SubagentCounters(**values)

    def subagent_health(
        self, namespace: str, *, tool_names: Collection[str], since: datetime | None = None,
        session_id: str | None = None,
    ) -> SubagentHealth:
        """Expected launches against observed rows: launches with no row (shortfall), rows with no launch.

        A launching call is an entry of a turn's ``metadata["tool_uses"]`` (``{"id", "name"}``, as
        the transcript parsers store them) whose name is in ``tool_names``. ``since`` keeps the
        launches whose turn was observed from then on (its own timestamp, else its capture time)
        and the rows observed from then on, and matches the one against the other; ``session_id``
        keeps that session and the sessions derived from it. A row with no launch is ``excess``
        when its session holds launching calls (the same kind of stream, compared like with like),
        else ``no_launch_expected`` (a host that captures no launching call).
        """
        since = _instant(since) if since is not None else None
        params = {"namespace": namespace, "session_id": session_id, "names": sorted(tool_names), "since": since}
        launches, unmatched, (observed, last) = self._health_rows(params)
        expected = [
            (LaunchingCall(turn_id=r[0], session_id=r[1], tool_call_id=r[2], tool_name=r[3],
                           observed_at=_instant(r[4]) or _instant(r[5])), bool(r[6]))
            for r in launches
        ]
        if since is not None:
            expected = [(c, hit) for c, hit in expected if c.observed_at is None or c.observed_at >= since]
        keys = [(SubagentKey(session_id=r[0], agent_execution_id=r[1], tool_call_id=r[2], source=r[3],
                             observed_at=_instant(r[4])), bool(r[5])) for r in unmatched]
        return SubagentHealth(
            shortfall=[c for c, hit in expected if not hit], excess=[k for k, comparable in keys if comparable],
            no_launch_expected=[k for k, comparable in keys if not comparable], expected=len(expected),
            observed=int(observed), last_observed_at=_instant(last), since=since, session_id=session_id,
        )

    def _health_rows(self, params: dict[str, Any]) -> tuple[list[Any], list[Any], tuple[Any, Any]]:
        """Run ``health_sql``'s statements in one read: launches, unmatched rows, (row count, last observed_at)."""
        raise NotImplementedError

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
