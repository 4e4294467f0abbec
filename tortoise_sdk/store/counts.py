"""A namespace's counts (``Memory.stats``) in SQL: the same statements on SQLite and PostgreSQL.

A mixin of both stores (it relies on their ``read`` and ``PARAM``). Every count reads one
namespace's rows only, through an index whose first column is the namespace (the jobs table
has none: it holds a row per extraction run, not per turn), and loads no row: on a store of
100,000 turns across namespaces, ``stats`` neither lists the sessions nor counts the other
namespaces to report one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from .base import NamespaceCounts

__all__ = ("COUNTS_SQL", "CountsMixin", "JOBS_SQL")

#: Sessions, turns, live memories, entities and sub-agent rows of one namespace; ``{p}`` is the placeholder.
COUNTS_SQL = (
    "SELECT (SELECT COUNT(*) FROM sessions WHERE namespace = {p}),"
    " (SELECT COUNT(*) FROM turns WHERE namespace = {p}),"
    " (SELECT COUNT(*) FROM memories WHERE namespace = {p} AND status = 'live'),"
    " (SELECT COUNT(*) FROM entities WHERE namespace = {p}),"
    " (SELECT COUNT(*) FROM subagent_contexts WHERE namespace = {p})"
)
#: The namespace's extraction jobs by status.
JOBS_SQL = "SELECT status, COUNT(*) FROM jobs WHERE namespace = {p} GROUP BY status"


class CountsMixin:
    """``namespace_counts``; ``PARAM`` is the driver's placeholder."""

    PARAM: ClassVar[str] = "?"
    read: Callable[[], AbstractContextManager[Any]]

    def namespace_counts(self, namespace: str) -> NamespaceCounts:
        """The namespace's sessions, turns, live memories, entities, sub-agent rows and jobs by status (by name)."""
        p = self.PARAM
        with self.read() as c:
            row = c.execute(COUNTS_SQL.format(p=p), (namespace,) * COUNTS_SQL.count("{p}")).fetchone()
            jobs = c.execute(JOBS_SQL.format(p=p), (namespace,)).fetchall()
        sessions, turns, memories, entities, subagents = (int(n) for n in row)
        return NamespaceCounts(sessions=sessions, turns=turns, memories=memories, entities=entities,
                               subagents=subagents, jobs=dict(sorted((str(s), int(n)) for s, n in jobs)))
