"""Entity resolution at write time (``EntityCore``): names, short forms, roles, merges and splits.

A mixin of ``ExtractionCore`` on both engines; its SQL is the same on both but for the
placeholder (``PARAM``) and how a time is passed (``_time_param``). The rules:

- a name resolves to the entity of that normalised name, else to one an alias names;
- a person's short form (first name, nickname, clipped name: :mod:`tortoise_sdk.names`)
  resolves to the one stored person it is a short form of (never with two candidates);
- a fuller name claims the stored people that are short forms of it and of no one else: the
  oldest is renamed to the fuller name and the others are merged in (so "Mel" then "Melanie
  Hart" ends as "Melanie Hart" known as "Mel", as the other order does);
- a role ("my wife") resolves to the person a memory or note named in that role; an entity
  that was created under the role's name before is merged into that person then;
- a host merges (``merge_entities``) and splits (``split_entity``); a split name is kept apart
  from the entity for good (``how = 'not'``).

Every alias keeps ``how`` it was resolved and its ``evidence``; merges and splits are recorded
in ``entity_events`` with what moved, so a split can put back what a merge took.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import InvalidInput, NotFoundError
from ..names import ROLE_IN_TEXT, note_role, role_key, role_statements, why_short
from ..text import fact_key, norm_content, norm_name
from .plan import EntityPlan
from .rows import entity_dicts, entity_id_for

__all__ = ("EntityCore", "Names", "entity_token", "with_tokens")

Conn = Any
_PEOPLE = ("person", "other")
#: How a short form was resolved (``names.why_short``): re-checked on every write, never taken as settled.
SHORT_HOWS = ("first name", "nickname", "clipped name")


def entity_token(entity_id: str) -> str:
    """The word an entity is in a dedupe key: letters and digits that no stemming rule changes."""
    return f"x{int(hashlib.sha1(entity_id.encode()).hexdigest()[:10], 16)}q"


def with_tokens(content: str, forms: dict[str, str], roles: dict[str, str]) -> str:
    """``content`` normalised, each name form (``{normalised form: entity id}``, a possessive "s" too)
    and each role phrase (``{role key: entity id}``) replaced by that entity's token."""
    text = f" {norm_content(content)} "
    for m in ROLE_IN_TEXT.finditer(text):
        if (eid := roles.get(role_key(m["phrase"]) or "")) is not None:
            text = text.replace(f" {m['phrase']} ", f" {entity_token(eid)} ", 1)
    for form in sorted(forms, key=len, reverse=True):
        if form:
            text = re.sub(rf"(?<= ){re.escape(form)}s?(?= )", entity_token(forms[form]), text)
    return text.strip()


@dataclass
class _Person:
    entity_id: str
    name: str
    norm: str
    kind: str
    created: str
    blocked: set[str] = field(default_factory=set)


@dataclass
class Names:
    """One write's view of the namespace's people (loaded once) and the merges it made."""

    namespace: str
    now: datetime
    session_id: str | None = None
    merged: dict[str, str] = field(default_factory=dict)
    people: list[_Person] | None = None

    def current(self, entity_id: str) -> str:
        """The entity ``entity_id`` is now (after the merges of this write)."""
        seen = set()
        while entity_id in self.merged and entity_id not in seen:
            seen.add(entity_id)
            entity_id = self.merged[entity_id]
        return entity_id


class EntityCore:
    """Resolution, merge and split of entities, over the store's ``PARAM`` and ``transaction``."""

    PARAM: str
    #: Appended to a text ORDER BY so that it compares bytes on both engines (PostgreSQL's collations do not).
    BYTE_ORDER: str = ""
    transaction: Any
    read: Any
    _time_param: Any

    # -- hooks the extraction mixins supply -----------------------------------------------------------

    def _find_entity(self, c: Conn, namespace: str, key: str, kind: str) -> tuple[str, str | None] | None:
        raise NotImplementedError

    def _insert_entity(self, c: Conn, namespace: str, entity_id: str, e: EntityPlan, key: str,
                       now: datetime, note_session_id: str | None, session_id: str | None = None) -> None:
        """Insert the entity; ``note_session_id`` names the session whose extraction wrote ``e.note``, ``session_id``
        the one whose extraction created it (None: the host's)."""
        raise NotImplementedError

    def _index(self, c: Conn, memory_id: str) -> None:
        raise NotImplementedError

    def _begin_s5(self, c: Conn, namespace: str) -> datetime:
        raise NotImplementedError

    # -- resolution ----------------------------------------------------------------------------------

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.PARAM)

    @staticmethod
    def _many(c: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            cur = c.cursor()  # both drivers' cursors have executemany; a psycopg connection has not
            try:
                cur.executemany(sql, rows)
            finally:
                cur.close()

    def resolve_entity(self, c: Conn, names: Names, e: EntityPlan) -> str:
        """The id of the entity ``e`` names, created when none does (see the module docstring)."""
        ns, key = names.namespace, norm_name(e.name)
        person_like = norm_name(e.kind) in _PEOPLE
        role = role_key(e.name) if person_like else None
        if role is not None:
            found = self._alias_target(c, ns, role, role=True)
            if found is not None:
                return found
        exact = self._find_entity(c, ns, key, e.kind)
        if exact is not None:
            entity_id, note = exact
            if e.note and not note:
                self._set_note(c, names, entity_id, e.note)
            self._role_from_note(c, names, entity_id, e.note)
            return entity_id
        if role is None:
            found = self._alias_target(c, ns, key, role=False)
            if found is not None:
                return found
        if person_like and role is None:
            people = self._people(c, names)
            whole = [p for p in people if p.kind == "person" and key not in p.blocked and why_short(key, p.norm)]
            if len(whole) == 1:
                p = whole[0]
                self._add_alias(c, names, p.entity_id, e.name, key, why_short(key, p.norm) or "",
                                f"{why_short(key, p.norm)} of {p.name}")
                return p.entity_id
            if not whole and norm_name(e.kind) == "person":
                claimed = self._claimed(people, key)
                if claimed:
                    return self._claim(c, names, claimed, e, key)
        entity_id = self._free_entity_id(c, ns, e.name, e.kind)
        self._insert_entity(c, ns, entity_id, e, key, names.now, names.session_id if e.note else None, names.session_id)
        if person_like and names.people is not None:
            names.people.append(_Person(entity_id, e.name.strip(), key, e.kind, str(names.now)))
        self._role_from_note(c, names, entity_id, e.note)
        return entity_id

    def _set_note(self, c: Conn, names: Names, entity_id: str, note: str) -> None:
        """Give ``entity_id`` the note this write's session said of it, unless it has one already."""
        c.execute(self._q("UPDATE entities SET note = ?, note_session_id = ?, updated_at = ?"
                          " WHERE entity_id = ? AND COALESCE(note, '') = ''"),
                  (note, names.session_id, self._time_param(names.now), entity_id))

    def _free_entity_id(self, c: Conn, namespace: str, name: str, kind: str) -> str:
        """The first :func:`entity_id_for` of ``name`` no entity holds (a renamed one keeps its first id)."""
        n = 0
        while c.execute(self._q("SELECT 1 FROM entities WHERE entity_id = ?"),
                        (entity_id := entity_id_for(namespace, name, kind, n),)).fetchone() is not None:
            n += 1
        return entity_id

    def _claimed(self, people: list[_Person], key: str) -> list[_Person]:
        """Stored people that are short forms of ``key`` and of no other stored person."""
        out = []
        for p in people:
            if key in p.blocked or not why_short(p.norm, key):
                continue
            if any(q is not p and not why_short(q.norm, key) and q.norm != key and why_short(p.norm, q.norm)
                   for q in people):
                continue
            out.append(p)
        return out

    def _claim(self, c: Conn, names: Names, claimed: list[_Person], e: EntityPlan, key: str) -> str:
        """Rename the oldest claimed person to the fuller name ``e`` and merge the other claimed ones in."""
        survivor, *rest = claimed
        why = why_short(survivor.norm, key) or "short form"
        self._add_alias(c, names, survivor.entity_id, survivor.name, survivor.norm, why,
                        f"{why} of {e.name.strip()}")
        c.execute(self._q("UPDATE entities SET name = ?, norm_name = ?, kind = 'person', updated_at = ?"
                          " WHERE entity_id = ?"),
                  (e.name.strip(), key, self._time_param(names.now), survivor.entity_id))
        if e.note:
            self._set_note(c, names, survivor.entity_id, e.note)
        survivor.name, survivor.norm, survivor.kind = e.name.strip(), key, "person"
        for p in rest:
            why_p = why_short(p.norm, key) or "short form"
            self._merge(c, names, survivor.entity_id, p.entity_id, how=why_p,
                        evidence=f"{why_p} of {e.name.strip()}", reason="resolved at write time")
        self._reindex_entity(c, survivor.entity_id)
        self._role_from_note(c, names, survivor.entity_id, e.note)
        return survivor.entity_id

    def _people(self, c: Conn, names: Names) -> list[_Person]:
        if names.people is None:
            rows = c.execute(self._q(
                "SELECT entity_id, name, norm_name, kind, created_at FROM entities WHERE namespace = ?"
                " AND kind IN ('person', 'other')"), (names.namespace,)).fetchall()
            blocked: dict[str, set[str]] = {}
            for eid, alias in c.execute(self._q(
                    "SELECT entity_id, norm_alias FROM entity_aliases WHERE namespace = ? AND how = 'not'"),
                    (names.namespace,)).fetchall():
                blocked.setdefault(eid, set()).add(alias)
            names.people = sorted((_Person(r[0], r[1], r[2], r[3], str(r[4]), blocked.get(r[0], set()))
                                   for r in rows), key=lambda p: (p.created, p.entity_id))
        return names.people

    def _alias_target(self, c: Conn, namespace: str, key: str, *, role: bool) -> str | None:
        # A short form found before ("first name", "nickname", "clipped name") is not taken as settled: the
        # rule runs again, so a second person it could be makes it ambiguous, as in any other order.
        how = "how = 'role'" if role else f"how NOT IN ('not', 'role', {', '.join(repr(h) for h in SHORT_HOWS)})"
        row = c.execute(self._q(f"SELECT entity_id FROM entity_aliases WHERE namespace = ? AND norm_alias = ?"
                                f" AND {how} ORDER BY created_at, entity_id LIMIT 1"), (namespace, key)).fetchone()
        return None if row is None else row[0]

    def _add_alias(self, c: Conn, names: Names, entity_id: str, alias: str, key: str, how: str,
                   evidence: str | None, memory_id: str | None = None) -> None:
        added = c.execute(self._q(
            "INSERT INTO entity_aliases (namespace, entity_id, alias, norm_alias, how, evidence, session_id,"
            " memory_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
            (names.namespace, entity_id, alias.strip(), key, how, evidence, names.session_id, memory_id,
             self._time_param(names.now))).rowcount
        if added and how not in ("not", "role"):
            self._reindex_entity(c, entity_id)  # its memories are found by the new name too

    # -- the dedupe key ------------------------------------------------------------------------------

    def entity_key(self, c: Conn, content: str, about: Sequence[str], mentions: Sequence[str]) -> str:
        """The fact key of ``content`` with each name of its ``about`` entities (their names, aliases,
        roles and the ``mentions`` used) replaced by the entity's :func:`entity_token`."""
        marks = ", ".join(self.PARAM for _ in about)
        forms: dict[str, str] = {}
        for eid, mention in zip(about, mentions):
            forms.setdefault(norm_name(mention), eid)
        rows = c.execute(f"SELECT entity_id, norm_name FROM entities WHERE entity_id IN ({marks})"
                         f" UNION ALL SELECT entity_id, norm_alias FROM entity_aliases WHERE entity_id IN ({marks})"
                         " AND how NOT IN ('not', 'role')", [*about, *about]).fetchall()
        roles = {r[0]: r[1] for r in c.execute(
            f"SELECT norm_alias, entity_id FROM entity_aliases WHERE entity_id IN ({marks}) AND how = 'role'",
            list(about)).fetchall()}
        for eid, form in rows:
            forms.setdefault(form, eid)
        return fact_key(with_tokens(content, forms, roles))

    def _retoken(self, c: Conn, memory_ids: Sequence[str], old: str, new: str) -> None:
        """Memories that named ``old`` in their key name ``new`` now (a merge or a split moved them)."""
        self._many(c, self._q("UPDATE memories SET entity_key = REPLACE(entity_key, ?, ?) WHERE memory_id = ?"),
                   [(entity_token(old), entity_token(new), m) for m in memory_ids])

    # -- roles ---------------------------------------------------------------------------------------

    def _role_from_note(self, c: Conn, names: Names, entity_id: str, note: str | None) -> None:
        role = note_role(note)
        if role is not None:
            self.assign_role(c, names, entity_id, role, evidence=f"note: {note}")

    def roles_stated(self, c: Conn, names: Names, memory_id: str, content: str, about: Sequence[str],
                     ids: dict[str, str]) -> None:
        """Record the roles a memory states for the people it is about ("Melanie is the user's wife")."""
        for name, role in role_statements(content, list(about)):
            entity_id = ids.get(norm_name(name))
            if entity_id is not None:
                self.assign_role(c, names, names.current(entity_id), role, evidence=content, memory_id=memory_id)

    def assign_role(self, c: Conn, names: Names, entity_id: str, role: str, *, evidence: str,
                    memory_id: str | None = None) -> None:
        """Name ``entity_id`` by ``role`` (the first person named in a role keeps it) and merge into it any
        entity created under the role's name."""
        held = self._alias_target(c, names.namespace, role, role=True)
        if held is not None and held != entity_id:
            return
        self._add_alias(c, names, entity_id, role, role, "role", evidence, memory_id)
        for p in list(self._people(c, names)):
            if p.entity_id != entity_id and role_key(p.name) == role:
                self._merge(c, names, entity_id, p.entity_id, how="role", evidence=evidence,
                            reason="resolved at write time")
                self._reindex_entity(c, entity_id)

    # -- merge and split -----------------------------------------------------------------------------

    def _merge(self, c: Conn, names: Names, keep: str, drop: str, *, how: str, evidence: str,
               reason: str) -> None:
        """Move everything of ``drop`` to ``keep`` (links, aliases, its name as an alias) and record it."""
        ns = names.namespace
        row = c.execute(self._q("SELECT name, norm_name, kind, note, note_session_id FROM entities"
                                " WHERE entity_id = ?"), (drop,)).fetchone()
        if row is None or keep == drop:
            return
        name, norm, kind, note, note_session = row
        links = c.execute(self._q("SELECT memory_id, relation, mention FROM memory_entities WHERE entity_id = ?"),
                          (drop,)).fetchall()
        # memories that named both: a split puts ``drop``'s link back and leaves ``keep``'s
        kept = {r[0] for r in c.execute(self._q("SELECT memory_id FROM memory_entities WHERE entity_id = ?"),
                                        (keep,)).fetchall()}
        self._many(c, self._q(
            "INSERT INTO memory_entities (namespace, memory_id, entity_id, relation, mention) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING"), [(ns, m, keep, rel, mention or name) for m, rel, mention in links])
        c.execute(self._q("DELETE FROM memory_entities WHERE entity_id = ?"), (drop,))
        aliases = c.execute(self._q("SELECT alias, norm_alias, how, evidence, session_id, memory_id, created_at"
                                    " FROM entity_aliases WHERE entity_id = ?"), (drop,)).fetchall()
        self._many(c, self._q(
            "INSERT INTO entity_aliases (namespace, entity_id, alias, norm_alias, how, evidence, session_id,"
            " memory_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
            [(ns, keep, *a) for a in aliases if a[2] != "not"])
        c.execute(self._q("DELETE FROM entity_aliases WHERE entity_id = ?"), (drop,))
        c.execute(self._q("DELETE FROM entity_aliases WHERE entity_id = ? AND how = 'not' AND norm_alias = ?"),
                  (keep, norm))
        if role_key(name) is None:
            self._add_alias(c, names, keep, name, norm, how, evidence)
        note_copied = bool(note) and c.execute(self._q(
            "UPDATE entities SET note = ?, note_session_id = ? WHERE entity_id = ? AND note IS NULL"),
            (note, note_session, keep)).rowcount > 0
        c.execute(self._q("DELETE FROM entities WHERE entity_id = ?"), (drop,))
        detail = {"name": name, "kind": kind, "note": note, "note_session_id": note_session,
                  "memory_ids": sorted({m for m, _, _ in links}),
                  "shared_memory_ids": sorted({m for m, _, _ in links} & kept), "note_copied": note_copied,
                  "aliases": sorted({a[1] for a in aliases if a[2] != "not"} | {norm}), "how": how,
                  "evidence": evidence}
        self._event(c, names, "merge", keep, drop, detail, reason)
        self._retoken(c, sorted({m for m, _, _ in links}), drop, keep)
        names.merged[drop] = keep
        if names.people is not None:
            names.people = [p for p in names.people if p.entity_id != drop]
        for memory_id, _, _ in links:
            self._index(c, memory_id)

    def _event(self, c: Conn, names: Names, kind: str, entity_id: str, other_id: str, detail: dict[str, Any],
               reason: str) -> None:
        c.execute(self._q("INSERT INTO entity_events (namespace, kind, entity_id, other_id, detail, reason,"
                          " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"),
                  (names.namespace, kind, entity_id, other_id, json.dumps(detail, ensure_ascii=False), reason,
                   self._time_param(names.now)))

    def _reindex_entity(self, c: Conn, entity_id: str) -> None:
        for (memory_id,) in c.execute(self._q("SELECT memory_id FROM memory_entities WHERE entity_id = ?"),
                                      (entity_id,)).fetchall():
            self._index(c, memory_id)

    def _entity_ref(self, c: Conn, namespace: str, ref: str) -> tuple[str, str, str, str]:
        """``(entity_id, name, norm_name, kind)`` of an entity given by id, name or alias. Raises NotFoundError."""
        row = c.execute(self._q("SELECT entity_id, name, norm_name, kind FROM entities WHERE namespace = ?"
                                " AND entity_id = ?"), (namespace, ref)).fetchone()
        if row is None:
            row = c.execute(self._q("SELECT entity_id, name, norm_name, kind FROM entities WHERE namespace = ?"
                                    " AND norm_name = ? ORDER BY created_at, entity_id LIMIT 1"),
                            (namespace, norm_name(ref))).fetchone()
        if row is None:
            row = c.execute(self._q(
                "SELECT e.entity_id, e.name, e.norm_name, e.kind FROM entity_aliases a JOIN entities e"
                " ON e.entity_id = a.entity_id WHERE a.namespace = ? AND a.norm_alias IN (?, ?) AND a.how <> 'not'"
                " ORDER BY a.created_at, e.entity_id LIMIT 1"),
                (namespace, norm_name(ref), role_key(ref) or "")).fetchone()
        if row is None:
            raise NotFoundError(f"no entity {ref!r} in namespace {namespace!r}; list them with mem.entities()")
        return row[0], row[1], row[2], row[3]

    def merge_entities(self, namespace: str, keep: str, other: str, *, now: datetime,
                       reason: str = "merged by the host") -> dict[str, Any]:
        """Merge entity ``other`` into ``keep`` (each an id, a name or an alias); returns the kept entity.

        ``other``'s memories, aliases and name move to ``keep`` (its name as an alias, ``how="merge"``),
        and the merge is recorded with what moved. Raises NotFoundError; InvalidInput when both are one.
        """

        def write(c: Conn) -> dict[str, Any]:
            self._begin_s5(c, namespace)  # serialised with the namespace's S5 writes, as they are with each other
            k = self._entity_ref(c, namespace, keep)
            o = self._entity_ref(c, namespace, other)
            if k[0] == o[0]:
                raise InvalidInput(f"{keep!r} and {other!r} are one entity already ({k[1]})", field="other")
            names = Names(namespace, now)
            self._merge(c, names, k[0], o[0], how="merge", evidence=reason, reason=reason)
            self._reindex_entity(c, k[0])
            return self._entity_dict(c, k[0])

        return self.transaction(write)

    def split_entity(self, namespace: str, entity: str, name: str, *, now: datetime,
                     reason: str = "split by the host") -> dict[str, Any]:
        """Take the name ``name`` back out of ``entity`` as an entity of its own; returns the new entity.

        The memories that named it so (and those a merge of an entity of that name brought) move to
        the new entity with the aliases that merge brought; ``name`` never resolves to ``entity``
        again. Raises NotFoundError; InvalidInput when ``name`` is the entity's own name or not one of its names.
        """

        def write(c: Conn) -> dict[str, Any]:
            self._begin_s5(c, namespace)
            eid, ename, enorm, kind = self._entity_ref(c, namespace, entity)
            key = norm_name(name)
            if not key or key == enorm:
                raise InvalidInput(f"{name!r} is {ename!r}'s own name; split out one of its other names",
                                   field="name")
            names = Names(namespace, now)
            aliases = {r[0] for r in c.execute(self._q(
                "SELECT norm_alias FROM entity_aliases WHERE entity_id = ? AND how <> 'not'"), (eid,)).fetchall()}
            links = c.execute(self._q("SELECT memory_id, relation, mention FROM memory_entities WHERE entity_id = ?"),
                              (eid,)).fetchall()
            merged_in = [json.loads(r[0]) for r in c.execute(self._q(
                "SELECT detail FROM entity_events WHERE namespace = ? AND entity_id = ? AND kind = 'merge'"
                " ORDER BY created_at"), (namespace, eid)).fetchall()]
            linked = {m for m, _, _ in links}
            # a merge's record counts while a memory it brought is still here (forgetting may have taken them)
            brought = [d for d in merged_in if norm_name(d["name"]) == key and linked & set(d["memory_ids"])]
            if key not in aliases and not any(m and norm_name(m) == key for _, _, m in links) and not brought:
                raise InvalidInput(f"{name!r} is not a name of {ename!r}; its names are in mem.entities()",
                                   field="name")
            moving_ids = {m for m, _, mention in links if mention and norm_name(mention) == key}
            moving_ids |= {m for d in brought for m in d["memory_ids"]}
            moving_aliases = {key} | {a for d in brought for a in d["aliases"]}
            new_kind = brought[-1]["kind"] if brought else kind
            held = c.execute(self._q("SELECT entity_id FROM entities WHERE namespace = ? AND norm_name = ?"
                                     " AND kind = ?"), (namespace, key, new_kind)).fetchone()
            if held is not None:  # an entity of that name already (a short form two people share): it takes them
                new_id = held[0]
            else:
                new_id = self._free_entity_id(c, namespace, name, new_kind)
                last = brought[-1] if brought else {}
                note, note_session = last.get("note"), last.get("note_session_id")
                self._insert_entity(c, namespace, new_id, EntityPlan(name, new_kind, note), key, now, note_session)
            # a memory that named both before the merge keeps its link here and names the split one again
            shared = {m for d in brought for m in d.get("shared_memory_ids", ())} - {
                m for m, _, mention in links if mention and norm_name(mention) == key}
            moved = [(m, rel, name.strip() if m in shared else mention) for m, rel, mention in links
                     if m in moving_ids]
            self._many(c, self._q(
                "INSERT INTO memory_entities (namespace, memory_id, entity_id, relation, mention)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
                [(namespace, m, new_id, rel, mention) for m, rel, mention in moved])
            self._many(c, self._q("DELETE FROM memory_entities WHERE entity_id = ? AND memory_id = ?"),
                          [(eid, m) for m, _, _ in moved if m not in shared])
            self._retoken(c, [m for m, _, _ in moved if m not in shared], eid, new_id)
            for a in sorted(moving_aliases - {key}):
                c.execute(self._q("UPDATE entity_aliases SET entity_id = ? WHERE entity_id = ? AND norm_alias = ?"
                                  " AND how <> 'not'"), (new_id, eid, a))
            c.execute(self._q("DELETE FROM entity_aliases WHERE entity_id = ? AND norm_alias = ?"), (eid, key))
            if brought and brought[-1].get("note_copied"):  # the note the merge brought goes with the name
                c.execute(self._q("UPDATE entities SET note = NULL, note_session_id = NULL"
                                  " WHERE entity_id = ? AND note = ?"),
                          (eid, brought[-1]["note"]))
            self._add_alias(c, names, eid, name, key, "not", reason)
            self._event(c, names, "split", eid, new_id,
                        {"name": name.strip(), "kind": new_kind, "memory_ids": sorted(moving_ids),
                         "aliases": sorted(moving_aliases)}, reason)
            self._reindex_entity(c, eid)
            self._reindex_entity(c, new_id)
            return self._entity_dict(c, new_id)

        return self.transaction(write)

    # -- reads ---------------------------------------------------------------------------------------

    def _entity_dict(self, c: Conn, entity_id: str) -> dict[str, Any]:
        row = c.execute(self._q("SELECT entity_id, name, kind, note FROM entities WHERE entity_id = ?"),
                        (entity_id,)).fetchone()
        return {"id": row[0], "name": row[1], "kind": row[2], "note": row[3],
                "aliases": self._aliases_of(c, [entity_id]).get(entity_id, [])}

    def entities(self, namespace: str) -> list[dict[str, Any]]:
        """Every entity of the namespace, oldest first: ``{id, name, kind, note, aliases}`` (each alias
        ``{name, how, evidence}``)."""
        with self.read() as c:
            rows = c.execute(self._q("SELECT entity_id, name, kind, note FROM entities WHERE namespace = ?"
                                     f" ORDER BY created_at, entity_id{self.BYTE_ORDER}"), (namespace,)).fetchall()
            aliases = self._aliases_of(c, [r[0] for r in rows])
        return [{**d, "aliases": aliases.get(d["id"], [])} for d in entity_dicts(rows)]

    def _aliases_of(self, c: Conn, entity_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        if not entity_ids:
            return out
        marks = ", ".join(self.PARAM for _ in entity_ids)
        rows = c.execute(f"SELECT entity_id, alias, how, evidence FROM entity_aliases WHERE entity_id IN ({marks})"
                         " AND how <> 'not' ORDER BY created_at, norm_alias", list(entity_ids)).fetchall()
        for eid, alias, how, evidence in rows:
            out.setdefault(eid, []).append({"name": alias, "how": how, "evidence": evidence})
        return out

    def entity_events(self, namespace: str, entity: str | None = None) -> list[dict[str, Any]]:
        """The merges and splits of the namespace (or touching one entity: an id, a name or an alias), oldest first.

        An id of an entity merged away still finds its events. Raises NotFoundError for a name no entity has.
        """
        sql = "SELECT kind, entity_id, other_id, detail, reason, created_at FROM entity_events WHERE namespace = ?"
        args: list[Any] = [namespace]
        with self.read() as c:
            if entity is not None:
                try:
                    entity = self._entity_ref(c, namespace, entity)[0]
                except NotFoundError:
                    known = c.execute(self._q("SELECT 1 FROM entity_events WHERE namespace = ? AND "
                                              "(entity_id = ? OR other_id = ?) LIMIT 1"),
                                      (namespace, entity, entity)).fetchone()
                    if known is None:
                        raise
                sql += " AND (entity_id = ? OR other_id = ?)"
                args += [entity, entity]
            rows = c.execute(self._q(sql + " ORDER BY id"), args).fetchall()
        return [{"kind": r[0], "entity_id": r[1], "other_id": r[2], "detail": json.loads(r[3]), "reason": r[4],
                 "created_at": r[5]} for r in rows]
