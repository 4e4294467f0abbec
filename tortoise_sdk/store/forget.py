"""Forgetting (``ForgetMixin``): a session or a memory removed from every table, in one transaction.

A mixin of both stores (it relies on their ``transaction`` and ``read``); the SQL is the
same on both engines but for the placeholder (``PARAM``, ``TEXT_PARAM``) and the hooks at
the bottom: which tables exist, and the search-index bookkeeping each engine keeps beside
its rows (SQLite: the memories' FTS5 table; PostgreSQL: the memories' BM25 totals in
``fts_stats``). The turns leave the namespace's ranking statistics through the engine's
``unindex_turns`` first.

A forgotten session takes its derived sessions (``<session>:agent-…``, ``<session>:task-…``)
with it, and with them every row that names one of them in a ``session_id`` column: the
known tables below and any table a later migration adds with ``namespace`` and
``session_id`` columns. Memories are removed only when no source is left; a memory with
sources elsewhere keeps them (and moves to the session of its first remaining source).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from contextlib import AbstractContextManager
from pathlib import PurePath
from typing import Any, ClassVar

from ..models import (CLAUDE_CODE_SHOWN_CURSOR, MODEL_PAUSE_CURSOR, OPENAI_AGENTS_CURSOR, SHOWN_CURSOR, ForgetReport,
                      Tombstone, utc_now)
from ..names import role_key, why_short
from ..text import norm_name
from .rows import iso_dt, tombstone_id_for, utc
from .subagent_core import DERIVED_MARKERS

__all__ = ("HASHED_FOLLOW", "ForgetMixin", "subject_hash")

Conn = Any

#: Tables every report lists, 0 when nothing of them was removed.
REPORTED = ("sessions", "turns", "receipts", "jobs", "extractions", "extraction_state", "subagent_contexts", "cursors",
            "memories", "provenance", "memory_entities", "entities", "entity_aliases", "entity_events")
#: Tables with a session column handled before the generic sweep (or, sessions, after it).
_OWN_ORDER = ("turns", "memories", "sessions", "tombstones")


def subject_hash(namespace: str, subject: str, subject_id: str) -> str:
    """How a tombstone names what it records: a sha256, so it never holds the forgotten id itself."""
    return hashlib.sha256(f"{namespace}\x00{subject}\x00{subject_id}".encode()).hexdigest()


class ForgetMixin:
    """``forget_session``, ``forget_memory`` and ``tombstones``; ``PARAM`` is the driver's placeholder."""

    PARAM: ClassVar[str] = "?"
    #: A placeholder whose value a text function reads (PostgreSQL needs its type spelled out).
    TEXT_PARAM: ClassVar[str] = "?"
    transaction: Callable[[Callable[[Any], Any]], Any]
    read: Callable[[], AbstractContextManager[Any]]
    _time_param: Callable[[Any], Any]  # CursorMixin's: a time as the engine stores it
    #: The ranking mixin's: take turns out of the namespace's statistics before they are deleted.
    unindex_turns: Callable[[Any, str, Sequence[str]], None]
    #: ExtractionCore's: a memory's confidence again from its (remaining) sources.
    _confide: Callable[[Any, str, int], None]
    #: EntityCore's: index an entity's memories again (under its names now).
    _reindex_entity: Callable[[Any, str], None]
    #: The engine's: index a memory again (its content, search keys and entities' names now).
    _index: Callable[[Any, str], None]

    def forget_session(self, namespace: str, session_id: str) -> ForgetReport:
        """Remove a session, its derived sessions and everything derived from their turns; one transaction.

        Idempotent: forgetting it again removes nothing and reports zeros (and leaves no new tombstone).
        """
        p = self.PARAM

        def run(c: Conn) -> ForgetReport:
            report = ForgetReport(namespace=namespace, subject="session", removed=dict.fromkeys(REPORTED, 0))
            where, args = self._forgotten("session_id", session_id)
            tables = self._session_tables(c)
            self._lock_sessions(c, namespace, session_id, where, args)
            sessions = sorted({r[0] for t in tables for r in c.execute(
                f"SELECT DISTINCT session_id FROM {t} WHERE namespace = {p} AND {where}", [namespace, *args])})
            if not sessions:
                return report
            report.sessions = sessions
            turns = f"SELECT turn_id FROM turns WHERE namespace = {p} AND {where}"
            touched = [r[0] for r in c.execute(
                f"SELECT memory_id FROM provenance WHERE namespace = {p} AND turn_id IN ({turns})"
                f" UNION SELECT memory_id FROM memories WHERE namespace = {p} AND {where}",
                [namespace, namespace, *args, namespace, *args])]
            named = self._entities_of(c, namespace, touched) | {r[0] for r in c.execute(
                f"SELECT entity_id FROM entity_aliases WHERE namespace = {p} AND {where}", [namespace, *args])}
            self._count(report, "provenance", c.execute(
                f"DELETE FROM provenance WHERE namespace = {p} AND turn_id IN ({turns})", [namespace, namespace, *args]))
            gone = []
            for memory_id in touched:
                first = c.execute(
                    f"SELECT t.session_id, s.extraction_id FROM provenance s JOIN turns t ON t.turn_id = s.turn_id"
                    f" WHERE s.memory_id = {p} ORDER BY t.session_id, t.idx LIMIT 1", (memory_id,)).fetchone()
                if first is None:
                    gone.append(memory_id)
                    continue
                # it keeps its other sources, and belongs to the session of the first of them
                moved = c.execute(
                    f"UPDATE memories SET session_id = {p}, extraction_id = {p} WHERE memory_id = {p} AND {where}",
                    [first[0], first[1], memory_id, *args]).rowcount
                self._updated(report, "memories", moved)
                if moved:
                    self._restate(c, namespace, memory_id, first[0])
                # nor does the forgotten evidence keep promoting it (the agreement it was stated with stays)
                self._confide(c, memory_id, 0)
            self._remove_memories(c, namespace, gone, report)
            other = f"NOT {where}"
            unlinked = c.execute(f"UPDATE subagent_contexts SET turn_id = NULL WHERE namespace = {p}"
                                 f" AND turn_id IN ({turns}) AND {other}", [namespace, namespace, *args, *args])
            child, child_args = self._forgotten("child_session_id", session_id)
            unlinked_child = c.execute(f"UPDATE subagent_contexts SET child_session_id = NULL WHERE namespace = {p}"
                                       f" AND {child} AND {other}", [namespace, *child_args, *args])
            self._updated(report, "subagent_contexts", unlinked.rowcount + unlinked_child.rowcount)
            self._forget_cursors(c, namespace, sessions, report)
            turn_ids = [r[0] for r in c.execute(turns, [namespace, *args])]
            self._forget_shown(c, namespace, {*turn_ids, *gone, *sessions}, report)
            self._unname_in_reports(c, namespace, gone, report)
            self.unindex_turns(c, namespace, turn_ids)
            self._count(report, "turns", c.execute(f"DELETE FROM turns WHERE namespace = {p} AND {where}",
                                                   [namespace, *args]))
            for table in [t for t in tables if t not in _OWN_ORDER]:
                self._count(report, table, c.execute(f"DELETE FROM {table} WHERE namespace = {p} AND {where}",
                                                     [namespace, *args]))
            self._count(report, "sessions", c.execute(f"DELETE FROM sessions WHERE namespace = {p} AND {where}",
                                                      [namespace, *args]))
            created, created_args = self._forgotten("created_session_id", session_id)
            named |= {r[0] for r in c.execute(f"SELECT entity_id FROM entities WHERE namespace = {p} AND {created}",
                                              [namespace, *created_args])}
            self._remove_orphan_entities(c, namespace, named, report, sessions=True)
            self._names_from_survivors(c, namespace, named)
            self._forget_notes(c, namespace, set(sessions), report)
            self._tombstone(c, report, session_id, "Memory.forget_session")
            return report

        return self.transaction(run)

    def forget_memory(self, namespace: str, memory_id: str) -> ForgetReport:
        """Remove one memory (its sources, entity links and index entry); its supersession chain is re-linked.

        Entities it leaves with no memory are removed too. Idempotent, like ``forget_session``.
        """

        def run(c: Conn) -> ForgetReport:
            report = ForgetReport(namespace=namespace, subject="memory", removed=dict.fromkeys(REPORTED, 0))
            found = c.execute(f"SELECT 1 FROM memories WHERE namespace = {self.PARAM} AND memory_id = {self.PARAM}",
                              (namespace, memory_id)).fetchone()
            if found is None:
                return report
            named = self._entities_of(c, namespace, [memory_id])
            self._remove_memories(c, namespace, [memory_id], report)
            self._forget_shown(c, namespace, {memory_id}, report)
            self._unname_in_reports(c, namespace, [memory_id], report)
            self._remove_orphan_entities(c, namespace, named, report)
            self._names_from_survivors(c, namespace, named)
            self._tombstone(c, report, memory_id, "Memory.forget_memory")
            return report

        return self.transaction(run)

    def tombstones(self, namespace: str, subject: str | None = None, subject_id: str | None = None) -> list[Tombstone]:
        """The namespace's tombstones, oldest first; with ``subject`` and ``subject_id``, only that subject's."""
        p = self.PARAM
        sql = (f"SELECT public_id, subject, subject_hash, call, removed, forgotten_at FROM tombstones"
               f" WHERE namespace = {p}")
        args: list[Any] = [namespace]
        if subject is not None and subject_id is not None:
            sql += f" AND subject_hash = {p}"
            args.append(subject_hash(namespace, subject, subject_id))
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY id", args).fetchall()
        return [Tombstone(id=r[0], namespace=namespace, subject=r[1], subject_hash=r[2], call=r[3],
                          removed=json.loads(r[4]), forgotten_at=r[5]) for r in rows]

    # -- the steps ------------------------------------------------------------------------------

    def _forgotten(self, column: str, session_id: str) -> tuple[str, list[Any]]:
        """SQL true for ``session_id`` and the sessions derived from it, with its parameters."""
        p, t = self.PARAM, self.TEXT_PARAM
        prefixes = [session_id + marker for marker in DERIVED_MARKERS]
        sql = f"({column} = {p}" + "".join(f" OR substr({column}, 1, length({t})) = {p}" for _ in prefixes) + ")"
        return sql, [session_id, *(x for prefix in prefixes for x in (prefix, prefix))]

    def _restate(self, c: Conn, namespace: str, memory_id: str, session_id: str) -> None:
        """A memory the forgotten session's extraction wrote, kept because ``session_id`` said it too, keeps only
        what that session supports: not the forgotten extraction's time words and search keys, and valid from
        ``session_id``'s date (the version before it then ends there), not the forgotten session's."""
        p = self.PARAM
        row = c.execute(f"SELECT session_date, created_at FROM sessions WHERE namespace = {p} AND session_id = {p}",
                        (namespace, session_id)).fetchone()
        since = self._time_param(iso_dt(row[0])) if row is not None and row[0] else None
        c.execute(f"UPDATE memories SET when_text = NULL, search_keys = '[]', valid_at = {p} WHERE memory_id = {p}",
                  (since, memory_id))
        # an undated session: the version before it ended when this one was captured, as S5 ends it at its run
        ended = since if since is not None or row is None else self._time_param(utc(row[1]) if isinstance(
            row[1], datetime) else iso_dt(row[1]))
        c.execute(f"UPDATE memories SET invalid_at = {p} WHERE superseded_by = {p}", (ended, memory_id))
        self._index(c, memory_id)

    def _remove_memories(self, c: Conn, namespace: str, memory_ids: Sequence[str], report: ForgetReport) -> None:
        """Delete memories with their edges and index entries, re-linking each one's supersession chain."""
        p = self.PARAM
        for memory_id in memory_ids:
            row = c.execute(f"SELECT status, invalid_at, supersedes, superseded_by FROM memories WHERE memory_id = {p}",
                            (memory_id,)).fetchone()
            status, invalid_at, before, after = row
            relinked = 0
            if before is not None and after is not None:
                # the version before it now ends where the one after it begins (not on the forgotten date)
                relinked += c.execute(
                    f"UPDATE memories SET superseded_by = {p}, invalid_at = (SELECT valid_at FROM memories"
                    f" WHERE memory_id = {p}) WHERE memory_id = {p}", (after, after, before)).rowcount
            elif before is not None:
                # the head of its chain goes: the version before it is the head again, as the head was
                relinked += c.execute(f"UPDATE memories SET superseded_by = NULL, status = {p}, invalid_at = {p}"
                                      f" WHERE memory_id = {p}", (status, invalid_at, before)).rowcount
            if after is not None:
                relinked += c.execute(f"UPDATE memories SET supersedes = {p} WHERE memory_id = {p}",
                                      (before, after)).rowcount
            self._updated(report, "memories", relinked)
            for table in ("provenance", "memory_entities"):
                self._count(report, table, c.execute(f"DELETE FROM {table} WHERE memory_id = {p}", (memory_id,)))
            # a role the memory stated goes with its words
            self._count(report, "entity_aliases", c.execute(
                f"DELETE FROM entity_aliases WHERE memory_id = {p}", (memory_id,)))
            self._unindex_memory(c, memory_id)
            self._count(report, "memories", c.execute(f"DELETE FROM memories WHERE memory_id = {p}", (memory_id,)))

    def _entities_of(self, c: Conn, namespace: str, memory_ids: Sequence[str]) -> set[str]:
        p = self.PARAM
        return {r[0] for m in memory_ids for r in c.execute(
            f"SELECT entity_id FROM memory_entities WHERE namespace = {p} AND memory_id = {p}", (namespace, m))}

    def _names_from_survivors(self, c: Conn, namespace: str, entity_ids: Iterable[str]) -> None:
        """Each entity keeps only names the memories left still use: an alias none of them uses goes, and
        an entity whose name only forgotten words said takes the first name they use that no other entity
        of its kind has (else the first one numbered: "Mel (2)"). Its memories are indexed under its names again."""
        p = self.PARAM
        for entity_id in sorted(entity_ids):
            row = c.execute(f"SELECT norm_name, kind FROM entities WHERE entity_id = {p}", (entity_id,)).fetchone()
            mentions = [r[0] for r in c.execute(
                f"SELECT me.mention FROM memory_entities me JOIN memories m ON m.memory_id = me.memory_id"
                f" WHERE me.entity_id = {p} ORDER BY m.created_at, m.memory_id", (entity_id,)).fetchall()]
            if row is None or not mentions or None in mentions:
                continue  # no memory left (the entity goes), or links that do not say which name they used
            norm, used = row[0], {norm_name(m) for m in mentions}
            if norm not in used:
                names = sorted(dict.fromkeys(m.strip() for m in mentions), key=lambda m: role_key(m) is not None)
                numbered = (f"{names[0]} ({n})" for n in itertools.count(2))
                for name in itertools.chain(names, numbered):
                    if c.execute(f"SELECT 1 FROM entities WHERE namespace = {p} AND norm_name = {p} AND kind = {p}",
                                 (namespace, norm_name(name), row[1])).fetchone() is None:
                        break
                norm = norm_name(name)
                c.execute(f"UPDATE entities SET name = {p}, norm_name = {p} WHERE entity_id = {p}",
                          (name, norm, entity_id))
                c.execute(f"DELETE FROM entity_aliases WHERE entity_id = {p} AND norm_alias = {p}"
                          " AND how NOT IN ('not', 'role')", (entity_id, norm))
            aliases = {r[0] for r in c.execute(f"SELECT norm_alias FROM entity_aliases WHERE entity_id = {p}"
                                               " AND how NOT IN ('not', 'role')", (entity_id,)).fetchall()}
            for alias in aliases - used:
                c.execute(f"DELETE FROM entity_aliases WHERE entity_id = {p} AND norm_alias = {p}"
                          " AND how NOT IN ('not', 'role')", (entity_id, alias))
            # a name a remaining memory uses, whose alias row the forgotten session's write had made
            for mention in dict.fromkeys(m.strip() for m in mentions):
                key = norm_name(mention)
                if key and key != norm and key not in aliases and role_key(mention) is None:
                    aliases.add(key)
                    c.execute(
                        "INSERT INTO entity_aliases (namespace, entity_id, alias, norm_alias, how, evidence,"
                        f" session_id, memory_id, created_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, NULL, NULL, {p})"
                        " ON CONFLICT DO NOTHING",
                        (namespace, entity_id, mention, key, why_short(key, norm) or "mention",
                         "named so by a memory that remains", self._time_param(utc_now())))
            self._reindex_entity(c, entity_id)

    def _forget_notes(self, c: Conn, namespace: str, sessions: set[str], report: ForgetReport) -> None:
        """An entity's note the forgotten sessions' extraction wrote goes, from the entity and from the record of
        a merge that carried it (a split would bring it back); a note written before notes named their session
        (migration 16) is kept."""
        p = self.PARAM
        marks = ", ".join(p for _ in sessions)
        self._updated(report, "entities", c.execute(
            f"UPDATE entities SET note = NULL, note_session_id = NULL WHERE namespace = {p}"
            f" AND note_session_id IN ({marks})", [namespace, *sorted(sessions)]).rowcount)
        for event_id, text in c.execute(f"SELECT id, detail FROM entity_events WHERE namespace = {p}"
                                        " AND kind = 'merge'", (namespace,)).fetchall():
            detail = json.loads(text)
            if detail.get("note") is not None and detail.get("note_session_id") in sessions:
                detail.update(note=None, note_session_id=None)
                c.execute(f"UPDATE entity_events SET detail = {p} WHERE id = {p}",
                          (json.dumps(detail, ensure_ascii=False), event_id))

    def _remove_orphan_entities(self, c: Conn, namespace: str, named: Iterable[str], report: ForgetReport, *,
                                sessions: bool = False) -> None:
        """The ``named`` entities (those the forgotten memories and names touched, and those the forgotten sessions'
        extractions created) left with no memory go; when ``sessions`` are forgotten, not one a session still stored
        created or wrote the note of.
        Others without a memory stay: an extraction keeps the entities a session named even when none of its items
        survived grounding, and forgetting one session must not take another's."""
        p = self.PARAM
        # forgetting a session: an entity a session still stored created, or wrote the note of, is that one's too
        theirs = (" AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.namespace = entities.namespace"
                  " AND s.session_id IN (entities.created_session_id, entities.note_session_id))") if sessions else ""
        for entity_id in sorted(named):
            self._count(report, "entities", c.execute(
                f"DELETE FROM entities WHERE namespace = {p} AND entity_id = {p} AND NOT EXISTS"
                f" (SELECT 1 FROM memory_entities me WHERE me.entity_id = entities.entity_id){theirs}",
                (namespace, entity_id)))
        # An entity's other names and its merges and splits go with it (they hold names the user said).
        for table in ("entity_aliases", "entity_events"):
            self._count(report, table, c.execute(
                f"DELETE FROM {table} WHERE namespace = {p} AND NOT EXISTS"
                f" (SELECT 1 FROM entities e WHERE e.entity_id = {table}.entity_id)", (namespace,)))

    def _forget_cursors(self, c: Conn, namespace: str, sessions: Iterable[str], report: ForgetReport) -> None:
        """Cursors named ``<anything>:<session id>`` hold that session's host state (its view, the pointers shown):
        removed. A ``follow:<path>`` cursor whose path names the session (``…/<session>.jsonl``, ``…/<session>/…``,
        as Claude Code writes them) loses the path from its name: it becomes ``follow:sha256:<hash of the path>``,
        which ``Memory.follow`` still finds, so the transcript's lines already read are not captured again."""
        p = self.PARAM
        sessions = set(sessions)
        suffixes = tuple(":" + s for s in sessions)
        names = [r[0] for r in c.execute(f"SELECT name FROM cursors WHERE namespace = {p}", (namespace,))]
        for name in names:
            if name.startswith(OWN_CURSOR_PREFIX):  # the SDK's own state (the model pause), no session's
                continue
            if name.endswith(suffixes) and not self._kept_session_named(c, namespace, name, sessions):
                self._count(report, "cursors", c.execute(
                    f"DELETE FROM cursors WHERE namespace = {p} AND name = {p}", (namespace, name)))
            elif name.startswith("follow:") and not name.startswith(HASHED_FOLLOW) and _names_session(name, sessions):
                hashed = HASHED_FOLLOW + hashlib.sha256(os.fsencode(name[len("follow:"):])).hexdigest()
                taken = c.execute(f"SELECT 1 FROM cursors WHERE namespace = {p} AND name = {p}",
                                  (namespace, hashed)).fetchone()
                self._count(report, "cursors", c.execute(
                    f"DELETE FROM cursors WHERE namespace = {p} AND name = {p}", (namespace, name)) if taken else
                    c.execute(f"UPDATE cursors SET name = {p} WHERE namespace = {p} AND name = {p}",
                              (hashed, namespace, name)))

    def _forget_shown(self, c: Conn, namespace: str, ids: set[str], report: ForgetReport) -> None:
        """The pointers the hosts' blocks showed (``reflex:shown:…``, ``claude-code:shown:…``, kept per session)
        lose the forgotten turns and memories, and the sessions a Claude Code session resumed lose the forgotten
        sessions: the other sessions' cursors held their ids."""
        p = self.PARAM
        rows = c.execute(f"SELECT name, value, revision FROM cursors WHERE namespace = {p} AND (name LIKE {p} OR"
                         f" name LIKE {p})", (namespace, *(prefix + "%" for prefix in SHOWN_PREFIXES))).fetchall()
        for name, text, revision in rows:
            value = json.loads(text)
            kept = _without(value, ids)
            if kept != value:
                self._updated(report, "cursors", c.execute(
                    f"UPDATE cursors SET value = {p}, revision = {p} WHERE namespace = {p} AND name = {p}",
                    (json.dumps(kept), revision + 1, namespace, name)).rowcount)

    def _unname_in_reports(self, c: Conn, namespace: str, memory_ids: Iterable[str], report: ForgetReport) -> None:
        """Other sessions' extraction reports and receipts (a warning, a correction's note) and the record of a merge
        name a removed memory as ``forgotten memory`` instead of by its id, which hashes the session and the fact it
        held. One scan of each table finds the rows that name any memory; each is rewritten at most once."""
        p = self.PARAM
        gone = set(memory_ids)
        if not gone:
            return
        for table, key, column in (("extractions", "extraction_id", "report"), ("receipts", "receipt_id", "body"),
                                   ("entity_events", "id", "detail")):
            for row_key, text in c.execute(f"SELECT {key}, {column} FROM {table} WHERE namespace = {p}"
                                           f" AND {column} LIKE {p} ESCAPE '!'", (namespace, "%m!_%")).fetchall():
                unnamed = _MEMORY_ID.sub(lambda m: "forgotten memory" if m.group() in gone else m.group(), text)
                if unnamed != text:
                    self._updated(report, table, c.execute(
                        f"UPDATE {table} SET {column} = {p} WHERE {key} = {p}", (unnamed, row_key)).rowcount)

    def _kept_session_named(self, c: Conn, namespace: str, name: str, sessions: set[str]) -> bool:
        """Whether cursor ``name`` is a kept session's: a host's cursor names its session after a known prefix
        (``openai-agents:user:42`` is session ``user:42``'s, not ``42``'s); another name is the longest stored
        session id it ends with."""
        owner = next((name[len(prefix):] for prefix in HOST_CURSOR_PREFIXES if name.startswith(prefix)), None)
        if owner is not None:
            return owner not in sessions
        p = self.PARAM
        longer = [name[i + 1:] for i, ch in enumerate(name) if ch == ":"]
        longer = [x for x in longer if x not in sessions and any(x.endswith(":" + s) for s in sessions)]
        return bool(longer) and c.execute(
            f"SELECT 1 FROM sessions WHERE namespace = {p} AND session_id IN ({', '.join(p for _ in longer)})",
            (namespace, *longer)).fetchone() is not None

    def _tombstone(self, c: Conn, report: ForgetReport, subject_id: str, call: str) -> None:
        if not any(report.removed.values()):
            return
        p = self.PARAM
        report.forgotten_at = utc_now()
        hashed = subject_hash(report.namespace, report.subject, subject_id)
        # The subject's own count in its namespace numbers its tombstones: no counter shared by namespaces.
        n = c.execute(f"SELECT COUNT(*) FROM tombstones WHERE namespace = {p} AND subject_hash = {p}",
                      (report.namespace, hashed)).fetchone()[0]
        while c.execute(f"SELECT 1 FROM tombstones WHERE public_id = {p}",
                        (tombstone_id_for(report.namespace, hashed, n),)).fetchone() is not None:
            n += 1
        report.tombstone_id = tombstone_id_for(report.namespace, hashed, n)
        c.execute(
            "INSERT INTO tombstones (public_id, namespace, subject, subject_hash, call, removed, forgotten_at)"
            f" VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p})",
            (report.tombstone_id, report.namespace, report.subject, hashed, call,
             json.dumps({k: v for k, v in report.removed.items() if v}), self._time_param(report.forgotten_at)),
        )

    @staticmethod
    def _count(report: ForgetReport, table: str, cursor: Any) -> None:
        report.removed[table] = report.removed.get(table, 0) + max(cursor.rowcount, 0)

    @staticmethod
    def _updated(report: ForgetReport, table: str, n: int) -> None:
        if n > 0:
            report.updated[table] = report.updated.get(table, 0) + n

    # -- engine hooks ---------------------------------------------------------------------------

    def _session_tables(self, c: Conn) -> list[str]:
        """Tables with both a ``namespace`` and a ``session_id`` column, by name."""
        raise NotImplementedError

    def _lock_sessions(self, c: Conn, namespace: str, session_id: str, where: str, args: list[Any]) -> None:
        """Make concurrent captures of ``session_id`` and its derived sessions (``where``) wait for the forgetting,
        and the forgetting for captures under way (where the engine needs it)."""

    def _unindex_memory(self, c: Conn, memory_id: str) -> None:
        """Before a memory is deleted: drop its full-text entry."""
        raise NotImplementedError


#: A memory id (``rows.memory_id_for``).
_MEMORY_ID = re.compile(r"m_[0-9a-f]{20}")

#: The cursors of the SDK's own state in a namespace (the model pause): never a session's.
OWN_CURSOR_PREFIX = MODEL_PAUSE_CURSOR.partition(":")[0] + ":"
#: The cursors that keep, per session, the pointers its blocks showed (turn and memory ids).
SHOWN_PREFIXES = (SHOWN_CURSOR, CLAUDE_CODE_SHOWN_CURSOR)
#: The cursors the adapters keep per session, named by one of these and the session id.
HOST_CURSOR_PREFIXES = (*SHOWN_PREFIXES, OPENAI_AGENTS_CURSOR)

#: The name of a ``Memory.follow`` cursor that does not spell its path.
HASHED_FOLLOW = "follow:sha256:"


def _without(value: Any, ids: set[str]) -> Any:
    """``value`` (JSON) with every string in ``ids`` taken out of its lists."""
    if isinstance(value, list):
        return [_without(v, ids) for v in value if not (isinstance(v, str) and v in ids)]
    if isinstance(value, dict):
        return {k: _without(v, ids) for k, v in value.items()}
    return value


def _names_session(name: str, sessions: set[str]) -> bool:
    """Whether the path of a ``follow:<path>`` cursor has a session id as a directory or a file stem."""
    path = PurePath(name[len("follow:"):])
    return bool(sessions & ({*path.parts} | {path.stem}))
