"""Ids a caller of one namespace sees reveal nothing of other namespaces, on both engines.

Each id is either derived from the namespace's own data (turns, memories, entities, sub-agent rows,
tombstones: a hash) or random (receipts, jobs, extraction runs): never a counter shared by all
namespaces, whose gaps would tell how many rows other tenants wrote meanwhile.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import pytest
from pgtemp import require_postgres, temp_database

from tortoise_sdk import Memory
from tortoise_sdk.store import open_store
from tortoise_sdk.store.forget import subject_hash
from tortoise_sdk.store.rows import subagent_id_for, tombstone_id_for
from tortoise_sdk.streams import SubagentFrame

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
UNICODE_NS = "équipe-東京-🦊"
#: The migration that gave sub-agent rows and tombstones their opaque ids; the test builds a store just before it.
OPAQUE_IDS = 11


@contextmanager
def _database(engine: str, tmp_path: Any, name: str) -> Iterator[str]:
    if engine == "sqlite":
        yield str(tmp_path / f"{name}.db")
        return
    require_postgres()
    with temp_database(f"tortoise_ids_{name}") as url:
        yield url


@pytest.fixture(params=("sqlite", "postgres"))
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


def _frame(session: str, call: str) -> SubagentFrame:
    return SubagentFrame(session_id=session, tool_call_id=call, subagent_type="explore", observed_at=T0)


def _says(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


def _tenant_b(url: str, crowd: Any) -> dict[str, Any]:
    """B's scenario, with ``crowd()`` (other tenants' writes) between each of its steps; every id B sees."""
    seen: dict[str, Any] = {}
    with Memory(url, namespace="b") as b:
        b.capture("s1", _says("hello there", "I sail on weekends"))
        b.record_subagent(_frame("s1", "call-1"))
        crowd()
        b.capture("s2", _says("a second talk"))
        b.record_subagent(_frame("s2", "call-2"))
        crowd()
        seen["forget_s1"] = b.forget_session("s1").tombstone_id
        crowd()
        b.capture("s1", _says("the same session again"))
        b.record_subagent(_frame("s1", "call-1"))
        seen["forget_s1_again"] = b.forget_session("s1").tombstone_id
        crowd()
        b.record_subagent(_frame("s2", "call-3"))
        b.record_subagent(_frame("s3", "call-0"))
        b.remember("B sails with the harbour club", about=["Harbour Club"])
        crowd()
        seen["memories"] = [m.id for m in b.memories()]
        seen["entities"] = [e["id"] for e in b.entities()]
        b.store.enqueue_job("b", "s2")
        seen["jobs"] = [j.job_id for j in b.jobs()]
        seen["subagents"] = [r.id for r in b.subagents()]
        seen["tombstones"] = [t.id for t in b.tombstones()]
        seen["turns"] = [t.turn_id for s in ("s2",) for t in b.turns(s)]
        seen["receipts"] = [r.receipt_id for r in b.store.receipts("b", "s2")]
    return seen


def _crowd(url: str) -> Any:
    """Tenant A: 50 sub-agent rows and five forgotten sessions per call."""
    calls = iter(range(10**6))

    def write() -> None:
        with Memory(url, namespace="a") as a:
            for _ in range(50):
                a.record_subagent(_frame("x", f"c{next(calls)}"))
            for i in range(5):
                session = f"gone-{next(calls)}-{i}"
                a.capture(session, _says("something to forget"))
                a.forget_session(session)
            a.remember(f"A fact number {next(calls)}", about=["Harbour Club"])
    return write


def test_other_tenants_writes_leave_every_id_a_tenant_sees_unchanged(engine, tmp_path):
    with _database(engine, tmp_path, "alone") as alone, _database(engine, tmp_path, "crowded") as crowded:
        quiet = _tenant_b(alone, lambda: None)
        busy = _tenant_b(crowded, _crowd(crowded))
    random_ids = {"receipts", "jobs"}
    assert {k: v for k, v in quiet.items() if k not in random_ids} == \
        {k: v for k, v in busy.items() if k not in random_ids}
    assert len(set(quiet["subagents"])) == 3 and len(set(quiet["tombstones"])) == 2
    assert len(quiet["memories"]) == 1 and len(quiet["entities"]) == 1 and quiet["jobs"]
    assert quiet["tombstones"] == [quiet["forget_s1"], quiet["forget_s1_again"]]
    for ids in (quiet, busy):  # random, not counted: a uuid4's 32 hex digits
        assert all(re.fullmatch(r"r_[0-9a-f]{32}", r) for r in ids["receipts"])
        assert all(re.fullmatch(r"j_[0-9a-f]{32}", j) for j in ids["jobs"])
    assert all(re.fullmatch(r"a_[0-9a-f]{20}", i) for i in quiet["subagents"])
    assert all(re.fullmatch(r"f_[0-9a-f]{20}", i) for i in quiet["tombstones"])


def test_ids_are_the_same_on_both_engines_and_follow_their_formula(engine, tmp_path):
    with _database(engine, tmp_path, "formula") as url:
        seen = _tenant_b(url, lambda: None)
    assert seen["subagents"] == [subagent_id_for("b", s, "unknown", c)
                                 for s, c in (("s3", "call-0"), ("s2", "call-2"), ("s2", "call-3"))]
    gone = subject_hash("b", "session", "s1")
    assert seen["tombstones"] == [tombstone_id_for("b", gone, 0), tombstone_id_for("b", gone, 1)]


# -- migrating a store written before the ids were opaque ------------------------------------------

def _previous_schema(url: str) -> None:
    """Bring an empty database to the schema before opaque ids and write rows as that version did."""
    from tortoise_sdk.store.postgres.migrations import POSTGRES_MIGRATIONS, migrate_postgres
    from tortoise_sdk.store.sqlite.migrations import SQLITE_MIGRATIONS, migrate_sqlite

    sub = ("INSERT INTO subagent_contexts (namespace, session_id, turn_id, turn_ref, agent_execution_id, tool_call_id,"
           " subagent_type, is_async, source, observed_at, updated_at) VALUES ({p}, {p}, NULL, {p}, 'unknown', {p},"
           " 'explore', {f}, 'live', {p}, {p})")
    tomb = ("INSERT INTO tombstones (namespace, subject, subject_hash, call, removed, forgotten_at)"
            " VALUES ({p}, {p}, {p}, 'Memory.forget_session', '{{\"turns\": 1}}', {p})")
    subs = [("a", "x", None, "c1"), ("b", "s1", "m-1", "call-1"), ("a", "x", None, "c2"), ("b", "s2", None, "call-2"),
            (UNICODE_NS, "séance ☕", None, "appel-𝟙")]
    tombs = [("a", "session", subject_hash("a", "session", "g")), ("b", "session", subject_hash("b", "session", "s9")),
             ("b", "session", subject_hash("b", "session", "s9")), ("b", "memory", subject_hash("b", "memory", "m_1")),
             (UNICODE_NS, "session", subject_hash(UNICODE_NS, "session", "séance ☕"))]
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            migrate_postgres(conn, [m for m in POSTGRES_MIGRATIONS if m.version < OPAQUE_IDS])
            for ns, sid, ref, call in subs:
                conn.execute(sub.format(p="%s", f="false"), (ns, sid, ref, call, T0, T0))
            for ns, subject, h in tombs:
                conn.execute(tomb.format(p="%s"), (ns, subject, h, T0))
    else:
        conn = sqlite3.connect(url, isolation_level=None)
        migrate_sqlite(conn, [m for m in SQLITE_MIGRATIONS if m.version < OPAQUE_IDS])
        for ns, sid, ref, call in subs:
            conn.execute(sub.format(p="?", f="0"), (ns, sid, ref, call, T0.isoformat(), T0.isoformat()))
        for ns, subject, h in tombs:
            conn.execute(tomb.format(p="?"), (ns, subject, h, T0.isoformat()))
        conn.close()


def test_a_store_of_the_previous_version_gets_opaque_ids_and_keeps_every_row(engine, tmp_path):
    with _database(engine, tmp_path, "previous") as url:
        _previous_schema(url)
        store = open_store(url)
        try:
            rows = store.subagents("b")
            assert [(r.session_id, r.tool_call_id, r.turn_ref, r.subagent_type) for r in rows] == [
                ("s1", "call-1", "m-1", "explore"), ("s2", "call-2", None, "explore")]
            assert [r.id for r in rows] == [subagent_id_for("b", "s1", "unknown", "call-1"),
                                            subagent_id_for("b", "s2", "unknown", "call-2")]
            assert len(store.subagents("a")) == 2
            s9 = subject_hash("b", "session", "s9")
            tombs = store.tombstones("b")
            assert [(t.subject, t.subject_hash, t.removed) for t in tombs] == [
                ("session", s9, {"turns": 1}), ("session", s9, {"turns": 1}),
                ("memory", subject_hash("b", "memory", "m_1"), {"turns": 1})]
            assert [t.id for t in tombs] == [tombstone_id_for("b", s9, 0), tombstone_id_for("b", s9, 1),
                                             tombstone_id_for("b", subject_hash("b", "memory", "m_1"), 0)]
            assert store.tombstones("b", "session", "s9") == tombs[:2]
            # the SQL that computes them on PostgreSQL hashes the UTF-8 bytes, as Python does
            assert [r.id for r in store.subagents(UNICODE_NS)] == [
                subagent_id_for(UNICODE_NS, "séance ☕", "unknown", "appel-𝟙")]
            assert [t.id for t in store.tombstones(UNICODE_NS)] == [
                tombstone_id_for(UNICODE_NS, subject_hash(UNICODE_NS, "session", "séance ☕"), 0)]
            # rows written after the migration carry on: the frame merges into its row, a new forgetting counts on
            again = store.upsert_subagent("b", _normalized(_frame("s1", "call-1")), now=T0)
            assert again.id == rows[0].id and again.turn_ref == "m-1"
            store.capture("b", _req("s9", ["back again"]))
            report = store.forget_session("b", "s9")
            assert report.tombstone_id == tombstone_id_for("b", s9, 2) == store.tombstones("b")[-1].id
        finally:
            store.close()


def _normalized(frame: SubagentFrame) -> Any:
    from tortoise_sdk.subagents import normalize_frame

    return normalize_frame(frame)[0]


def _req(session: str, turns: list[str]) -> Any:
    from tortoise_sdk.capture import prepare_capture

    return prepare_capture(session, [{"role": "user", "content": t} for t in turns], max_turns=100)
