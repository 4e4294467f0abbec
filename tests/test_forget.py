"""Forgetting a session or a memory, on both engines, and ``tortoise forget``.

The central test compares every table of the schema, enumerated from the database itself,
before a session was captured and after it was forgotten: a table someone adds later is
covered without editing this file.
"""

from __future__ import annotations

import io
import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from test_store_conformance import T0, _finalize, _plan, ns, pg_url, req, store, store_url  # noqa: F401
from tortoise_sdk import Memory
from tortoise_sdk.errors import NotFoundError
from tortoise_sdk.store import Store
from tortoise_sdk.store.forget import subject_hash
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.store.plan import EntityPlan, ItemPlan, SourcePlan, Window
from tortoise_sdk.store.sqlite import SQLiteStore
from tortoise_sdk.streams import SubagentFrame

GONE = "sess-FORGET-me"
#: Words only the forgotten session holds: none may be found, stored or indexed afterwards.
SECRET_WORDS = ("xylophonist", "quokkaburger", "zanzibarite")

#: Tables that legitimately differ after a forgetting, and why; every other table must be as before.
EXEMPT = {
    "tombstones": "gains the audit row (checked on its own)",
    "subagent_counters": "namespace-wide recorder counters: how many frames were seen, not rows of a session",
    "schema_migrations": "not data",
    "fts_stats": "PostgreSQL BM25 totals, sharded by backend: compared as sums per table instead",
    # SQLite FTS5 segments keep delete markers until merged: searched (nothing found) instead, and after
    # vacuum their bytes are checked for the forgotten words (test_vacuum_...).
    "turns_fts_data": "FTS5 segments", "turns_fts_idx": "FTS5 segment index",
    "memories_fts_data": "FTS5 segments", "memories_fts_idx": "FTS5 segment index",
}


def _tables(store: Store) -> list[str]:
    with store.read() as c:
        if isinstance(store, SQLiteStore):
            sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        else:
            sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
        return [r[0] for r in c.execute(sql).fetchall()]


def snapshot(store: Store) -> dict[str, list[str]]:
    """Every row of every table of the database, as sorted text (the whole database, every namespace)."""
    with store.read() as c:
        return {t: sorted(repr(tuple(r)) for r in c.execute(f'SELECT * FROM "{t}"').fetchall())
                for t in _tables(store)}


def _fts_totals(store: Store) -> list[Any]:
    if isinstance(store, SQLiteStore):
        return []
    with store.read() as c:
        return c.execute("SELECT tbl, SUM(n_rows), SUM(n_tokens) FROM fts_stats GROUP BY tbl ORDER BY tbl").fetchall()


def _mark(store: Store) -> str:
    return "?" if isinstance(store, SQLiteStore) else "%s"


def seed_kept(store: Store, ns: str) -> dict[str, Any]:
    """A session that stays: turns, a memory about Maya, a sub-agent row, a job, a cursor."""
    mem = Memory(store=store, namespace=ns)
    r = store.capture(ns, req("keep", [{"role": "user", "name": "Maya", "content": "I work at Acme as a designer",
                                        "id": "k1"},
                                       {"role": "assistant", "content": "[tool_use Task]", "id": "k2"}]))
    result = store.write_extraction(ns, _plan("keep", receipt=r, entities=[EntityPlan("Maya", "person")], items=[
        ItemPlan("point", "Maya works at Acme", about=("Maya", "Acme"), sources=(SourcePlan(r.turn_ids[0], "at Acme"),)),
    ]), finalize=_finalize)
    mem.record_subagent(SubagentFrame(session_id="keep", tool_call_id="tk", turn_external_id="k2", observed_at=T0))
    store.enqueue_job(ns, "keep", r.receipt_id)
    store.put_cursor(ns, "openai-agents:keep", {"hidden": 1}, 0)
    return {"receipt": r, "memory": result.memory_ids[0]}


def seed_gone(store: Store, ns: str, kept: dict[str, Any]) -> dict[str, Any]:
    """The session to forget, with derived sessions, an extraction that supersedes a kept memory, jobs,
    sub-agent rows and cursors."""
    mem = Memory(store=store, namespace=ns)
    turns = [{"role": "user", "name": "Maya", "content": f"My cousin is a {SECRET_WORDS[0]} in Lisbon", "id": "g1"},
             {"role": "user", "name": "Maya", "content": f"I now work at Globex and eat {SECRET_WORDS[1]}s", "id": "g2"},
             {"role": "assistant", "content": "[tool_use Task description=look]", "id": "g3"}]
    r = store.capture(ns, req(GONE, turns))
    child = store.capture(ns, req(f"{GONE}:agent-a1", [{"role": "assistant", "id": "c1",
                                                        "content": f"child notes on {SECRET_WORDS[2]}"}]))
    store.capture(ns, req(f"{GONE}:task-t9", [{"role": "assistant", "content": "task output", "id": "t1"}]))
    plan = _plan(GONE, receipt=r, entities=[EntityPlan("Cousin", "person", "a relative")],
                 valid_at=T0 + timedelta(days=3), items=[
        ItemPlan("point", f"Maya's cousin is a {SECRET_WORDS[0]}", about=("Maya", "Cousin"),
                 search_keys=(SECRET_WORDS[0],), sources=(SourcePlan(r.turn_ids[0], "cousin"),)),
        ItemPlan("point", "Maya works at Globex", about=("Maya",), supersedes=kept["memory"],
                 sources=(SourcePlan(r.turn_ids[1], "work at Globex"),)),
        ItemPlan("event", "Maya's child agent looked things up", sources=(SourcePlan(child.turn_ids[0], None),)),
    ])
    plan.window = Window(start=0, end=2, base=-1)  # the session's extraction watermark (extraction_state)
    result = store.write_extraction(ns, plan, finalize=_finalize)
    assert store.extraction_state(ns, GONE) is not None
    store.enqueue_job(ns, GONE, r.receipt_id)
    store.enqueue_job(ns, f"{GONE}:agent-a1")
    mem.record_subagent(SubagentFrame(session_id=GONE, tool_call_id="tg", turn_external_id="g3", agent_id="a1",
                                      total_tokens=50, tool_status="completed", observed_at=T0))
    mem.ingest([json.dumps({"type": "assistant", "sessionId": f"{GONE}:agent-a1", "uuid": "c2",
                            "timestamp": "2026-02-10T22:00:00.000Z",
                            "message": {"role": "assistant", "content": [
                                {"type": "tool_use", "id": "tn", "name": "Task", "input": {"description": "x"}}]}})])
    store.put_cursor(ns, f"openai-agents:{GONE}", {"hidden": 2}, 0)
    store.put_cursor(ns, f"claude-code:shown:{GONE}:agent-a1", {"shown": ["p1"]}, 0)
    assert store.get_memory(ns, kept["memory"]).status == "superseded"
    return {"receipt": r, "memories": result.memory_ids, "turns": [*r.turn_ids, *child.turn_ids]}


def _ids_mentioned(store: Store, needles: list[str]) -> dict[str, list[str]]:
    """Rows (as text) of any table that contain one of ``needles``."""
    found: dict[str, list[str]] = {}
    for table, rows in snapshot(store).items():
        hits = [r for r in rows if any(n in r for n in needles)]
        if hits and table not in ("turns_fts_data", "turns_fts_idx", "memories_fts_data", "memories_fts_idx"):
            found[table] = hits
    return found


def test_forgetting_a_session_leaves_no_row_of_it_in_any_table(store: Store, ns):
    kept = seed_kept(store, ns)
    before, totals = snapshot(store), _fts_totals(store)
    gone = seed_gone(store, ns, kept)
    assert snapshot(store) != before
    mem = Memory(store=store, namespace=ns)
    assert mem.search(SECRET_WORDS[1]) and len(mem.subagents()) == 3

    report = mem.forget_session(GONE)

    assert report.sessions == [GONE, f"{GONE}:agent-a1", f"{GONE}:task-t9"]
    assert {k: v for k, v in report.removed.items() if v} == {
        "sessions": 3, "turns": 6, "receipts": 4, "jobs": 2, "extractions": 1, "subagent_contexts": 2,
        "cursors": 2, "memories": 3, "provenance": 3, "memory_entities": 3, "entities": 1,
        "extraction_state": 1}  # a table no step names: the sweep over every session table took it
    assert report.updated == {"memories": 1}  # the kept memory is the head of its chain again
    after = snapshot(store)
    changed = sorted(t for t in set(before) | set(after) if before.get(t) != after.get(t) and t not in EXEMPT)
    assert changed == [], {t: (before.get(t), after.get(t)) for t in changed}
    assert _fts_totals(store) == totals
    needles = [GONE, *SECRET_WORDS, *gone["turns"], *gone["memories"], gone["receipt"].receipt_id]
    assert _ids_mentioned(store, needles) == {}
    for word in SECRET_WORDS:
        assert mem.search(word) == [] and mem.store.search_terms(ns, [word], k=5) == []
        assert mem.store.candidate_memories(ns, {word: 1.0}, k=5, include_superseded=True) == []
    assert mem.store.get_memory(ns, kept["memory"]).status == "live"
    assert store.extraction_state(ns, GONE) is None
    (tomb,) = mem.tombstones(session_id=GONE)
    assert (tomb.subject, tomb.call, tomb.removed["turns"]) == ("session", "Memory.forget_session", 6)
    assert tomb.subject_hash == subject_hash(ns, "session", GONE) and tomb.id == report.tombstone_id

    again = mem.forget_session(GONE)
    assert (again.total, again.sessions, again.updated, again.tombstone_id) == (0, [], {}, None)
    assert set(again.removed) >= {"turns", "memories", "subagent_contexts"}
    assert len(mem.tombstones()) == 1


def test_forgetting_is_atomic_under_an_injected_failure(store: Store, ns, monkeypatch):
    kept = seed_kept(store, ns)
    seed_gone(store, ns, kept)
    before = snapshot(store)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected: the disk went away")

    # the last step before the tombstone: every delete of the session has run by then
    monkeypatch.setattr(type(store), "_remove_orphan_entities", fail)
    mem = Memory(store=store, namespace=ns)
    with pytest.raises(Exception, match="injected"):
        mem.forget_session(GONE)
    assert snapshot(store) == before
    assert mem.search(SECRET_WORDS[0])
    monkeypatch.undo()
    assert mem.forget_session(GONE).removed["turns"] == 6


def test_a_memory_sourced_from_two_sessions_survives_the_forgetting_of_one(store: Store, ns):
    a = store.capture(ns, req("a", [{"role": "user", "content": "I adopted a cat named Miso"}]))
    b = store.capture(ns, req("b", [{"role": "user", "content": "Miso the cat is sleeping"}]))
    first = store.write_extraction(ns, _plan("a", items=[
        ItemPlan("point", "Maya has a cat named Miso", about=("Maya",), sources=(SourcePlan(a.turn_ids[0], "a cat"),)),
        ItemPlan("point", "Maya adopted Miso recently", sources=(SourcePlan(a.turn_ids[0], "adopted"),)),
    ]), finalize=_finalize)
    second = store.write_extraction(ns, _plan("b", items=[
        ItemPlan("point", "Maya has a cat named Miso", sources=(SourcePlan(b.turn_ids[0], "Miso the cat"),)),
    ]), finalize=_finalize)
    cat, adopted = first.memory_ids
    assert second.memory_ids == [cat] and second.outcomes == {"NOOP": 1}
    mem = Memory(store=store, namespace=ns)
    assert [s.session_id for s in store.get_memory(ns, cat).sources] == ["a", "b"]

    report = mem.forget_session("a")
    assert (report.removed["memories"], report.removed["provenance"], report.updated) == (1, 2, {"memories": 1})
    survivor = store.get_memory(ns, cat)
    assert [(s.session_id, s.quote) for s in survivor.sources] == [("b", "Miso the cat")]
    assert (survivor.session_id, survivor.status, survivor.entities) == ("b", "live", ["Maya"])
    assert [m.id for m in mem.memories()] == [cat]
    with pytest.raises(Exception, match="no memory"):
        store.get_memory(ns, adopted)
    assert mem.store.search_memories(ns, '"miso"', k=5)[0][0].id == cat
    assert mem.forget_session("b").removed["memories"] == 1
    assert mem.memories(include_superseded=True) == [] and store.find_entities(ns, ["Maya"]) == []


def test_forget_memory_relinks_the_supersession_chain_and_is_idempotent(store: Store, ns):
    r = store.capture(ns, req("s1", ["I work at Acme", "now Globex", "now Initech"]))
    m1 = store.write_extraction(ns, _plan("s1", items=[ItemPlan("point", "Maya works at Acme", about=("Acme",),
                                                                sources=(SourcePlan(r.turn_ids[0], None),))]),
                                finalize=_finalize).memory_ids[0]
    m2 = store.write_extraction(ns, _plan("s1", valid_at=T0 + timedelta(days=1), items=[
        ItemPlan("point", "Maya works at Globex", about=("Globex",), supersedes=m1,
                 sources=(SourcePlan(r.turn_ids[1], None),))]), finalize=_finalize).memory_ids[0]
    m3 = store.write_extraction(ns, _plan("s1", valid_at=T0 + timedelta(days=2), items=[
        ItemPlan("point", "Maya works at Initech", supersedes=m2, sources=(SourcePlan(r.turn_ids[2], None),))]),
        finalize=_finalize).memory_ids[0]
    mem = Memory(store=store, namespace=ns)
    other = Memory(store=store, namespace=ns + "_other")
    assert other.forget_memory(m2).total == 0  # another namespace cannot reach it

    middle = mem.forget_memory(m2)
    assert {k: v for k, v in middle.removed.items() if v} == {
        "memories": 1, "provenance": 1, "memory_entities": 1, "entities": 1}  # Globex had nothing else
    assert [m.id for m in store.supersession_chain(ns, m1)] == [m1, m3]
    assert (store.get_memory(ns, m1).superseded_by, store.get_memory(ns, m3).supersedes) == (m3, m1)
    assert [e["name"] for e in store.find_entities(ns, ["Globex", "Acme"])] == ["Acme"]
    assert mem.forget_memory(m2).total == 0 and mem.forget_memory("m_nope").total == 0

    mem.forget_memory(m3)  # the newest version: the one before it is current again
    head = store.get_memory(ns, m1)
    assert (head.status, head.superseded_by, head.invalid_at) == ("live", None, None)
    assert [m.id for m in mem.memories()] == [m1] and store.supersession_chain(ns, m1) == [head]
    assert [t.subject for t in mem.tombstones()] == ["memory", "memory"]
    assert len(mem.tombstones(memory_id=m3)) == 1 and mem.tombstones(memory_id=m1) == []
    assert [s.turn_id for s in head.sources] == [r.turn_ids[0]]  # the turns stay: forget_memory is not erasure of turns


def test_forgetting_keeps_other_sessions_and_namespaces_and_only_unlinks_what_pointed_in(store: Store, ns):
    for session in ("s", "s:other", "s10", "s:agent-x"):
        store.capture(ns, req(session, [{"role": "user", "content": f"hello from {session}", "id": f"m-{session}"}]))
    store.capture(ns + "_b", req("s", [{"role": "user", "content": "hello from s", "id": "m-s"}]))
    mem = Memory(store=store, namespace=ns)
    # a row of s:other points at the child session s:agent-x: forgetting s:agent-x unlinks it, keeps the row
    mem.record_subagent(SubagentFrame(session_id="s:other", tool_call_id="t1", child_session_id="s:agent-x",
                                      observed_at=T0))
    mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="t2", turn_external_id="m-s:agent-x",
                                      observed_at=T0))
    assert mem.subagents(session_id="s")[0].turn_id is not None

    report = mem.forget_session("s:agent-x")
    assert report.sessions == ["s:agent-x"] and report.updated == {"subagent_contexts": 2}
    (linked,) = mem.subagents(session_id="s")
    assert linked.turn_id is None and linked.turn_ref == "m-s:agent-x"
    assert mem.subagents(session_id="s:other")[0].child_session_id is None

    mem.forget_session("s")
    assert [s.session_id for s in mem.sessions()] == ["s:other", "s10"]
    assert [s.session_id for s in Memory(store=store, namespace=ns + "_b").sessions()] == ["s"]
    assert sorted(h.session_id for h in mem.search("hello")) == ["s10", "s:other"]


def test_a_late_extraction_of_a_forgotten_session_writes_nothing(store: Store, ns):
    from tortoise_sdk.store.plan import Fence

    r = store.capture(ns, req("s1", ["I like green tea"]))
    job = store.enqueue_job(ns, "s1", r.receipt_id)
    leased = store.lease_job(ns, lease_s=30, max_attempts=3)
    assert Memory(store=store, namespace=ns).forget_session("s1").removed["jobs"] == 1
    plan = _plan("s1", receipt=r, items=[ItemPlan("point", "Maya likes green tea",
                                                  sources=(SourcePlan(r.turn_ids[0], "green tea"),))])
    with pytest.raises(Exception, match="no job"):  # a worker's fenced write: its job is gone
        store.write_extraction(ns, plan, finalize=_finalize, fence=Fence(job.job_id, leased.revision))
    with pytest.raises(NotFoundError, match="is not stored"):  # an inline write: its session is gone
        store.write_extraction(ns, plan, finalize=_finalize)
    # A reviewer's: a write with no source to refuse (every item failed grounding) brought back the session's
    # watermark, an extraction run quoting it and an entity with its note.
    bare = _plan("s1", entities=[EntityPlan("Cousin", "person", "a xylophonist")])
    with pytest.raises(NotFoundError, match="is not stored"):
        store.write_extraction(ns, bare, finalize=_finalize)
    assert store.memories(ns, include_superseded=True) == [] and store.sessions(ns) == []
    assert store.entities(ns) == [] and store.extraction_state(ns, "s1") is None


def _dated(store: Store, ns: str, session: str, text: str, day: int) -> str:
    return store.capture(ns, req(session, [text], date=f"2024-0{day}-01")).turn_ids[0]


def test_a_memory_kept_by_another_session_keeps_only_what_that_session_supports(store: Store, ns):
    """A reviewer's: the forgotten extraction's time words and search keys stayed on the memory, searchable and
    shown in the block, and it stayed valid from the forgotten session's date."""
    g = _dated(store, ns, "G", "My cousin plays xylophone at the Quokkaburger bar every Tuesday", 3)
    k = _dated(store, ns, "K", "my cousin plays xylophone", 2)
    fact = "Maya's cousin plays xylophone"
    store.write_extraction(ns, _plan("G", [ItemPlan("point", fact, when="every Tuesday at the Quokkaburger bar",
                                                    search_keys=("quokkaburger",),
                                                    sources=(SourcePlan(g, "My cousin plays xylophone"),))],
                                     valid_at=T0 + timedelta(days=60)), finalize=_finalize)
    store.write_extraction(ns, _plan("K", [ItemPlan("point", fact, sources=(SourcePlan(k, "my cousin plays"),))]),
                           finalize=_finalize)
    Memory(store=store, namespace=ns).forget_session("G")
    [m] = store.memories(ns)
    assert (m.session_id, m.when, m.search_keys) == ("K", None, [])
    assert m.valid_at is not None and m.valid_at.date().isoformat() == "2024-02-01"  # K's date
    assert Memory(store=store, namespace=ns).search_memories("quokkaburger") == []


def test_forgetting_a_middle_version_ends_the_one_before_where_the_next_begins(store: Store, ns):
    """A reviewer's: the version before kept the forgotten version's date as its end, a gap in the history."""
    turns = {s: _dated(store, ns, s, f"I live in {city}", day) for s, city, day in
             (("K", "Oslo", 1), ("G", "Zanzibar", 2), ("L", "Rome", 4))}
    for s, city, day in (("K", "Oslo", 1), ("G", "Zanzibar", 2), ("L", "Rome", 4)):
        live = [m.id for m in store.memories(ns)]
        store.write_extraction(ns, _plan(s, [ItemPlan("point", f"Maya lives in {city}", supersedes=live[0] if live
                                                      else None, sources=(SourcePlan(turns[s], f"live in {city}"),))],
                                         valid_at=datetime(2024, day, 1, tzinfo=timezone.utc)), finalize=_finalize)
    Memory(store=store, namespace=ns).forget_session("G")
    chain = {m.content: m for m in store.memories(ns, include_superseded=True)}
    assert set(chain) == {"Maya lives in Oslo", "Maya lives in Rome"}
    assert chain["Maya lives in Oslo"].invalid_at == chain["Maya lives in Rome"].valid_at


def test_forgetting_keeps_another_session_s_entities_that_have_no_memory(store: Store, ns):
    """A reviewer's: an extraction keeps the entities a session named when none of its items survived, and any
    forgetting removed every such entity of the namespace."""
    store.capture(ns, req("K", ["Dr. Okafor at Helix Health"]))
    store.write_extraction(ns, _plan("K", entities=[EntityPlan("Dr. Okafor", "person", "a doctor")]),
                           finalize=_finalize)
    g = store.capture(ns, req("G", ["I like green tea"])).turn_ids[0]
    store.write_extraction(ns, _plan("G", [ItemPlan("point", "Maya likes green tea", sources=(SourcePlan(g, "tea"),))]),
                           finalize=_finalize)
    # ... while one the forgotten session's extraction created, that no memory names, goes with it (a reviewer's
    # second look: limiting the sweep to the forgotten memories' entities had kept "Quokkaburger")
    store.write_extraction(ns, _plan("G", entities=[EntityPlan("Quokkaburger", "place", "a bar")]), finalize=_finalize)
    mem = Memory(store=store, namespace=ns)
    mem.forget_memory(store.memories(ns)[0].id)
    assert {e["name"] for e in store.entities(ns)} == {"Dr. Okafor", "Quokkaburger"}
    mem.forget_session("G")
    assert [(e["name"], e["note"]) for e in store.entities(ns)] == [("Dr. Okafor", "a doctor")]


def test_forgetting_a_session_keeps_the_cursors_of_a_session_whose_id_ends_like_it(store: Store, ns):
    """A reviewer's: forgetting "42" removed the host cursors of "user:42" (names matched by their ending)."""
    for s in ("42", "user:42"):
        store.capture(ns, req(s, [f"turn of {s}"]))
    mem = Memory(store=store, namespace=ns)
    for name in ("openai-agents:user:42", "reflex:shown:user:42", "myhost:user:42", "openai-agents:42", "myhost:42"):
        mem.save_cursor(name, {"k": 1}, revision=0)
    assert mem.forget_session("42").removed["cursors"] == 2
    assert {n: mem.cursor(n).revision for n in ("openai-agents:user:42", "reflex:shown:user:42", "myhost:user:42",
                                                "openai-agents:42", "myhost:42")} == {
        "openai-agents:user:42": 1, "reflex:shown:user:42": 1, "myhost:user:42": 1, "openai-agents:42": 0,
        "myhost:42": 0}


def test_vacuum_leaves_no_byte_of_the_forgotten_words_in_a_sqlite_file(tmp_path):
    db = tmp_path / "m.db"
    with Memory(str(db), namespace="n") as mem:
        mem.capture("keep", [{"role": "user", "content": "an ordinary sentence"}])
        mem.capture(GONE, [{"role": "user", "content": " ".join(SECRET_WORDS * 50)}])
        mem.forget_session(GONE)
        assert mem.search(SECRET_WORDS[0]) == []
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("m.db*"))
        assert SECRET_WORDS[0].encode() in raw  # deleted, but still in free pages and index segments
        mem.vacuum()
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("m.db*"))
        assert not any(w.encode() in raw for w in SECRET_WORDS) and GONE.encode() not in raw
        assert [h.content for h in mem.search("ordinary")] == ["an ordinary sentence"]
        mem.capture("later", [{"role": "user", "content": "still writable"}])


def test_vacuum_runs_on_both_engines(store: Store, ns):
    store.capture(ns, req("s1", ["kept after vacuum"]))
    Memory(store=store, namespace=ns).vacuum()
    assert [h.content for h in store.search_terms(ns, ["vacuum"], k=3)] == ["kept after vacuum"]


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def two_sessions(db: str) -> str:
    with Memory(db) as mem:
        mem.capture("s1", [{"role": "user", "content": "forget me"}])
        mem.capture("s2", [{"role": "user", "content": "keep me"}])
    return db


def test_cli_forget_with_yes_prints_the_report(capsys, two_sessions):
    code, out, _ = run_cli(capsys, "--db", two_sessions, "forget", "--session", "s1", "--yes", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["removed"]["turns"] == 1 and doc["sessions"] == ["s1"] and doc["tombstone_id"]
    code, out, _ = run_cli(capsys, "--db", two_sessions, "forget", "--session", "s1", "--yes")
    assert code == 0 and out.startswith("nothing to forget")
    with Memory(two_sessions) as mem:
        assert [s.session_id for s in mem.sessions()] == ["s2"]


def test_cli_forget_refuses_without_yes_when_no_one_can_confirm(capsys, two_sessions, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, err = run_cli(capsys, "--db", two_sessions, "forget", "--session", "s1")
    assert code == 2 and "--yes" in err and out == ""
    with Memory(two_sessions) as mem:
        assert len(mem.sessions()) == 2


@pytest.mark.parametrize(("answer", "code", "sessions"), [("y\n", 0, ["s2"]), ("n\n", 0, ["s1", "s2"])])
def test_cli_forget_asks_on_a_terminal(capsys, two_sessions, monkeypatch, answer, code, sessions):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty(answer))
    got, out, err = run_cli(capsys, "--db", two_sessions, "forget", "--session", "s1")
    assert got == code and "cannot be undone" in err
    with Memory(two_sessions) as mem:
        assert [s.session_id for s in mem.sessions()] == sessions


def test_cli_forget_memory_and_argument_errors(capsys, two_sessions):
    code, out, _ = run_cli(capsys, "--db", two_sessions, "forget", "--memory", "m_nope", "--yes")
    assert code == 0 and out.startswith("nothing to forget")
    code, _, err = run_cli(capsys, "--db", two_sessions, "forget", "--yes")
    assert code == 2
    code, _, err = run_cli(capsys, "--db", two_sessions, "forget", "--session", " ", "--yes")
    assert code == 2 and "--session: must be a non-empty string" in err
    code, _, err = run_cli(capsys, "--db", str(Path(two_sessions).with_name("none.db")), "forget", "--session", "s",
                           "--yes")
    assert code == 2


def test_cli_vacuum(capsys, two_sessions):
    code, out, _ = run_cli(capsys, "--db", two_sessions, "vacuum")
    assert code == 0 and "vacuumed" in out
    assert sqlite3.connect(two_sessions).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_read_only_store_refuses_to_forget_or_vacuum_and_keeps_everything(tmp_path, monkeypatch):
    from tortoise_sdk.errors import ReadOnlyStore

    with Memory(str(tmp_path / "m.db"), namespace="n") as mem:
        mem.capture("s1", [{"role": "user", "content": "kept"}])
        monkeypatch.setattr(SQLiteStore, "read_only", property(lambda self: True))
        with pytest.raises(ReadOnlyStore):
            mem.forget_session("s1")
        with pytest.raises(ReadOnlyStore, match="vacuum"):
            mem.vacuum()
        assert [h.content for h in mem.turns("s1")] == ["kept"]


def test_forgetting_a_hooked_session_leaves_its_id_nowhere_and_captures_nothing_again(tmp_path, monkeypatch, capsys):
    """Issue 24: the ``follow:`` cursor named after the transcript path (which holds the session id) and the
    hook log's ``session=<id>`` lines outlived ``forget_session`` and ``vacuum``."""
    from test_claude_code_hooks import SHORT, SHORT_SESSION, payload, run_hook

    db = tmp_path / "m.db"
    transcript = tmp_path / "projects" / f"{SHORT_SESSION}.jsonl"
    transcript.parent.mkdir()
    transcript.write_bytes(SHORT.read_bytes())
    run_hook(monkeypatch, capsys, db, payload("Stop", SHORT_SESSION, transcript))
    for session, path in ((SHORT_SESSION, tmp_path / "gone.jsonl"), ("other-session", tmp_path / "gone.jsonl")):
        run_hook(monkeypatch, capsys, db, payload("Stop", session, path))  # a missing transcript: one log line
    log = tmp_path / "hooks.log"
    assert f"session={SHORT_SESSION} " in log.read_text()
    with Memory(str(db)) as mem:
        assert mem.forget_session(SHORT_SESSION).removed["cursors"] >= 1
        mem.vacuum()
        again = mem.follow(transcript, "claude-code")  # the hook's next call: nothing captured twice
        assert again.turns_stored == 0 and mem.sessions() == []
    traces = {  # where the id could stay, and what it holds afterwards
        "database files": b"".join(p.read_bytes() for p in tmp_path.glob("m.db*")),
        "hooks.log": log.read_bytes(),
    }
    for where, raw in traces.items():
        assert SHORT_SESSION.encode() not in raw, where
    assert b"session=other-session " in traces["hooks.log"]  # other sessions' lines stay


def test_forgetting_takes_a_hook_log_record_whole_with_its_traceback(tmp_path):
    """A reviewer's: only a record's first line names its session, so a traceback's lines (which may quote the
    transcript) stayed in the hook log."""
    from tortoise_sdk.cli.hosts import _hook_log

    db = str(tmp_path / "m.db")
    with Memory(db, namespace="n") as mem:
        mem.capture("G", [{"role": "user", "content": "secret"}])
        for session in ("G", "K"):
            with _hook_log(db, {"event": {"hook_event_name": "Stop", "session_id": session}}) as log:
                try:
                    raise RuntimeError(f"could not read {session}.jsonl:\nline 3: 'xylophone of {session}'")
                except RuntimeError as exc:
                    log.error("%s", exc, exc_info=exc)
        mem.forget_session("G")
    text = (tmp_path / "hooks.log").read_text()
    assert "xylophone of G" not in text and "G.jsonl" not in text
    assert "xylophone of K" in text and "Traceback" in text  # K's record stays whole


def test_forgetting_a_session_while_it_is_captured_keeps_the_ranking_statistics_exact(store_url, ns):
    """A reviewer's race (PostgreSQL): a forget could not see a capture's uncommitted new session, so it counted
    some turns out of the statistics in one statement and deleted more in the next (n_turns 11 over 0 turns), and
    an append whose session row was deleted under it raised TypeError."""
    import threading

    stop = threading.Event()
    failures: list[BaseException] = []

    def forget() -> None:
        with Memory(store_url, namespace=ns) as m:
            while not stop.is_set():
                m.forget_session("s")

    forgetter = threading.Thread(target=forget)
    forgetter.start()
    try:
        with Memory(store_url, namespace=ns) as m:
            for i in range(120):
                try:
                    m.append("s", [{"role": "user", "content": f"hello number {i}"}])
                except Exception as exc:  # noqa: BLE001 - collected: every append must succeed
                    failures.append(exc)
    finally:
        stop.set()
        forgetter.join()
    assert failures == []
    with Memory(store_url, namespace=ns) as m:
        stored = len(m.turns("s")) if any(s.session_id == "s" for s in m.sessions()) else 0
        n, terms = m.store.term_stats(ns, m.store.analyze(["hello"])[0])
        assert n == stored and sum(df for df, _ in terms.values()) == stored


def test_other_sessions_cursors_and_reports_lose_the_forgotten_memory_s_id(store: Store, ns):
    """A reviewer's: the pointers another session's blocks showed, its receipt's warning and a correction's report
    kept the forgotten memory's id (a hash of the session and the fact: it confirms a guess)."""
    g = _dated(store, ns, "G", "I moved to Zanzibar", 3)
    lr = store.capture(ns, req("L", ["I lived in Oslo"], date="2024-01-01"))
    [gm] = store.write_extraction(ns, _plan("G", [ItemPlan("point", "Maya lives in Zanzibar", sources=(
        SourcePlan(g, "moved to Zanzibar"),))], valid_at=datetime(2024, 3, 1, tzinfo=timezone.utc)),
        finalize=_finalize).memory_ids
    store.write_extraction(ns, _plan("L", [ItemPlan("point", "Maya lives in Oslo", supersedes=gm, sources=(
        SourcePlan(lr.turn_ids[0], "lived in Oslo"),))], receipt=lr), finalize=lambda r: ExtractionReport(
        status="ok", warnings=r.warnings))
    mem = Memory(store=store, namespace=ns)
    mem.save_cursor("reflex:shown:L", {"turns": [[gm, lr.turn_ids[0]], [g]]}, revision=0)
    mem.correct_memory(gm, "Maya lives in Stone Town")
    assert gm in str(mem.receipts("L"))  # the older_than_live warning names it
    mem.forget_session("G")
    assert mem.cursor("reflex:shown:L").value == {"turns": [[lr.turn_ids[0]], []]}
    assert gm not in str(mem.receipts("L")) and "forgotten memory" in str(mem.receipts("L"))
    with store.read() as c:
        assert not any(gm in str(row) for t in ("extractions", "receipts", "cursors")
                       for row in c.execute(f"SELECT * FROM {t}").fetchall())


def test_a_report_lists_the_same_tables_whether_or_not_anything_was_removed(store: Store, ns):
    """A reviewer's: `forget --json` of a real forget listed entity_aliases, extraction_state and entity_events,
    and of a no-op did not: awkward for a parser."""
    g = store.capture(ns, req("G", ["I like green tea"])).turn_ids[0]
    store.write_extraction(ns, _plan("G", [ItemPlan("point", "Maya likes green tea", sources=(SourcePlan(g, "tea"),))],
                                     entities=[EntityPlan("Maya", "person")]), finalize=_finalize)
    mem = Memory(store=store, namespace=ns)
    real, again = mem.forget_session("G"), mem.forget_session("G")
    assert set(real.removed) == set(again.removed) and set(again.removed.values()) == {0}


def test_the_version_before_a_restated_memory_of_an_undated_session_keeps_no_forgotten_date(store: Store, ns):
    """A reviewer's: with the surviving session undated, the version before kept the forgotten session's date as its
    end (a date only that session supplied)."""
    o = _dated(store, ns, "O", "I live in Oslo", 1)
    g = _dated(store, ns, "G", "I moved to Rome", 6)
    k = store.capture(ns, req("K", ["I live in Rome"])).turn_ids[0]  # undated
    store.write_extraction(ns, _plan("O", [ItemPlan("point", "Maya lives in Oslo", sources=(SourcePlan(o, "Oslo"),))],
                                     valid_at=datetime(2024, 1, 1, tzinfo=timezone.utc)), finalize=_finalize)
    oslo = store.memories(ns)[0].id
    store.write_extraction(ns, _plan("G", [ItemPlan("point", "Maya lives in Rome", supersedes=oslo, sources=(
        SourcePlan(g, "moved to Rome"),))], valid_at=datetime(2024, 6, 1, tzinfo=timezone.utc)), finalize=_finalize)
    store.write_extraction(ns, _plan("K", [ItemPlan("point", "Maya lives in Rome", sources=(SourcePlan(k, "Rome"),))],
                                     valid_at=None), finalize=_finalize)
    Memory(store=store, namespace=ns).forget_session("G")
    chain = {m.content: m for m in store.memories(ns, include_superseded=True)}
    assert chain["Maya lives in Rome"].valid_at is None
    assert chain["Maya lives in Oslo"].invalid_at is not None
    assert chain["Maya lives in Oslo"].invalid_at.date().isoformat() != "2024-06-01"


def test_an_entity_another_stored_session_created_or_described_stays(store: Store, ns):
    """A reviewer's: the sweep of the forgotten session's memory-less entities took one a stored session had
    described (its note with it), and one a stored session had created."""
    for sid in ("A", "B"):
        store.capture(ns, req(sid, [f"turn of {sid}"]))
    store.write_extraction(ns, _plan("A", entities=[EntityPlan("Quokkaburger", "place")]), finalize=_finalize)
    store.write_extraction(ns, _plan("B", entities=[EntityPlan("Quokkaburger", "place", "a bar on Main street")]),
                           finalize=_finalize)
    Memory(store=store, namespace=ns).forget_session("A")
    assert [(e["name"], e["note"]) for e in store.entities(ns)] == [("Quokkaburger", "a bar on Main street")]

    store.capture(ns, req("C", ["Dr. Okafor"]))
    d = store.capture(ns, req("D", ["Dr. Okafor treats me"])).turn_ids[0]
    store.write_extraction(ns, _plan("C", entities=[EntityPlan("Dr. Okafor", "person", "a doctor")]),
                           finalize=_finalize)
    store.write_extraction(ns, _plan("D", [ItemPlan("point", "Dr. Okafor treats Maya", about=("Dr. Okafor",),
                                                    sources=(SourcePlan(d, "Dr. Okafor treats me"),))],
                                     entities=[EntityPlan("Dr. Okafor", "person")]), finalize=_finalize)
    Memory(store=store, namespace=ns).forget_session("D")
    assert ("Dr. Okafor", "a doctor") in [(e["name"], e["note"]) for e in store.entities(ns)]


def test_forgetting_a_session_named_like_the_sdk_s_own_state_keeps_that_state(store: Store, ns):
    store.capture(ns, req("model-pause", ["hello"]))
    mem = Memory(store=store, namespace=ns)
    mem.save_cursor("tortoise:model-pause", {"key": "k"}, revision=0)
    mem.forget_session("model-pause")
    assert mem.cursor("tortoise:model-pause").value == {"key": "k"}
