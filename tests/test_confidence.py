"""Confidence: the promotion rule (pure), what S5 stores on both engines, migration 13, the block's marker."""

from __future__ import annotations

import itertools
import sqlite3
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.confidence import (
    AGREED,
    BASE,
    PROMOTION_CAP,
    PROMOTION_STEP,
    S2_ONLY,
    S4_ONLY,
    VETTED,
    agreement,
    confidence,
    is_low,
)
from tortoise_sdk.models import ExtractionReport, MemoryRecord
from tortoise_sdk.reflex.render import render
from tortoise_sdk.reflex.shapes import Candidate, Reading
from tortoise_sdk.reflex.tokens import approx_tokens
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import ExtractionPlan, ItemPlan, SourcePlan
from tortoise_sdk.store.sqlite.migrations import SQLITE_MIGRATIONS, migrate_sqlite
from tortoise_sdk.text import fact_key

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
LEVELS = st.integers(S4_ONLY, VETTED)
SOURCES = st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.sampled_from([f"t{i}" for i in range(8)])),
                   max_size=12)


# -- the rule ------------------------------------------------------------------------------------


def test_agreement_levels():
    assert agreement(from_s2=False, from_s4=True, reviewed=True, vetted=False) == S4_ONLY
    assert agreement(from_s2=True, from_s4=False, reviewed=False, vetted=False) == S2_ONLY
    assert agreement(from_s2=True, from_s4=False, reviewed=True, vetted=False) == AGREED
    assert agreement(from_s2=True, from_s4=True, reviewed=True, vetted=False) == AGREED
    assert agreement(from_s2=True, from_s4=False, reviewed=True, vetted=True) == VETTED
    # a single-source, S4-only item stays low; one the stages agreed on is not
    assert is_low(confidence(S4_ONLY, [("s1", "t1")])) and is_low(confidence(S2_ONLY, [("s1", "t1")]))
    assert not is_low(confidence(AGREED, [("s1", "t1")])) and not is_low(None)


@given(evidence=st.lists(st.tuples(LEVELS, SOURCES), min_size=1, max_size=5), data=st.data())
def test_any_order_or_duplication_of_the_same_evidence_gives_the_same_confidence(evidence, data):
    again = data.draw(st.lists(st.sampled_from(evidence), max_size=4))
    shuffled = data.draw(st.permutations(evidence + again))

    def fold(items: list[tuple[int, list[tuple[str, str]]]]) -> float:
        """As S5 folds extractions into one memory: the best level so far and every source so far."""
        best, seen = S4_ONLY, []
        for level, sources in items:
            best, seen = max(best, level), seen + sources
        return confidence(best, seen)

    assert fold(shuffled) == fold(evidence)


@given(level=LEVELS, sources=SOURCES, more=SOURCES)
def test_promotion_is_bounded_and_monotone(level, sources, more):
    value = confidence(level, sources)
    assert BASE[level] <= value <= max(BASE[level], PROMOTION_CAP)
    assert confidence(level, sources + more) >= value  # more evidence never lowers it
    assert confidence(VETTED, sources) >= confidence(level, sources)  # nor does more agreement


def test_repeated_evidence_raises_in_steps_up_to_the_cap():
    turns = [("s1", f"t{i}") for i in range(10)]
    values = [confidence(S4_ONLY, turns[:n]) for n in range(1, 10)]
    assert values[:3] == [BASE[S4_ONLY], BASE[S4_ONLY] + PROMOTION_STEP, BASE[S4_ONLY] + 2 * PROMOTION_STEP]
    assert values[-1] == PROMOTION_CAP and max(values) == PROMOTION_CAP
    # another session counts a step more than another turn of the same session
    assert confidence(AGREED, [("s1", "t1"), ("s2", "t2")]) == pytest.approx(BASE[AGREED] + 2 * PROMOTION_STEP)


# -- the store (both engines) --------------------------------------------------------------------


def _finalize(result: Any) -> ExtractionReport:
    return ExtractionReport(status="ok", counts=dict(result.counts), outcomes=dict(result.outcomes))


def _write(store: Any, ns: str, session_id: str, *items: ItemPlan) -> list[str]:
    plan = ExtractionPlan(session_id=session_id, extraction_id=f"x_{uuid.uuid4().hex[:8]}", valid_at=T0,
                          items=list(items))
    return store.write_extraction(ns, plan, finalize=_finalize).memory_ids


def _seed(store: Any, ns: str) -> dict[str, list[str]]:
    turns = {}
    for sid in ("s1", "s2"):
        r = store.capture(ns, prepare_capture(sid, [{"role": "user", "content": f"{sid} turn {i}: Maya bakes bread"}
                                                    for i in range(3)], max_turns=100))
        turns[sid] = r.turn_ids
    return turns


def test_s5_stores_agreement_and_promotes_on_restatement(store):
    ns = f"ns_{uuid.uuid4().hex[:10]}"
    turns = _seed(store, ns)
    fact = "Maya bakes sourdough bread every weekend"
    (mid,) = _write(store, ns, "s1", ItemPlan("point", fact, sources=(SourcePlan(turns["s1"][0], None),),
                                              agreement=S4_ONLY))
    first = store.get_memory(ns, mid)
    assert first.confidence == BASE[S4_ONLY] and is_low(first.confidence)
    # The same evidence again (NOOP, no new source) changes nothing.
    assert _write(store, ns, "s1", ItemPlan("point", fact, sources=(SourcePlan(turns["s1"][0], None),),
                                            agreement=S4_ONLY)) == [mid]
    assert store.get_memory(ns, mid).confidence == BASE[S4_ONLY]
    # A restatement in another turn of the same session: a step; from another session: two more.
    _write(store, ns, "s1", ItemPlan("point", "maya bakes sourdough bread every weekend!",
                                     sources=(SourcePlan(turns["s1"][1], None),), agreement=S4_ONLY))
    assert store.get_memory(ns, mid).confidence == pytest.approx(BASE[S4_ONLY] + PROMOTION_STEP)
    _write(store, ns, "s2", ItemPlan("point", fact, sources=(SourcePlan(turns["s2"][0], None),), agreement=AGREED))
    # The best agreement counts (now AGREED), with 3 turns over 2 sessions.
    assert store.get_memory(ns, mid).confidence == pytest.approx(BASE[AGREED] + 3 * PROMOTION_STEP)
    for sid in ("s1", "s2"):
        for t in turns[sid]:
            _write(store, ns, sid, ItemPlan("point", fact, sources=(SourcePlan(t, None),), agreement=VETTED))
    assert store.get_memory(ns, mid).confidence == PROMOTION_CAP
    assert [m.confidence for m in store.memories(ns)] == [PROMOTION_CAP]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_order_of_extractions_does_not_change_confidence(store, order):
    ns = f"ns_{uuid.uuid4().hex[:10]}"
    turns = _seed(store, ns)
    writes = [("s1", turns["s1"][0], S4_ONLY), ("s1", turns["s1"][2], S2_ONLY), ("s2", turns["s2"][1], AGREED)]
    for i in (*order, order[0]):  # and one duplicated
        sid, turn, level = writes[i]
        _write(store, ns, sid, ItemPlan("point", "Maya bakes bread", sources=(SourcePlan(turn, None),),
                                        agreement=level))
    (m,) = store.memories(ns)
    assert m.confidence == confidence(AGREED, [("s1", "a"), ("s1", "b"), ("s2", "c")])


# -- migration 13 --------------------------------------------------------------------------------


@pytest.fixture(params=("sqlite", "postgres"))
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any):
    if request.param == "sqlite":
        yield str(tmp_path / "fresh.db")
        return
    from pgtemp import require_postgres, temp_database

    require_postgres()
    with temp_database("tortoise_confidence") as url:
        yield url


def test_migration_13_gives_stored_memories_a_confidence_from_their_sources(fresh_url):
    turns = [("t0", "s1", 0), ("t1", "s1", 1), ("t2", "s2", 0)]
    memories = [("m_one", ["t0"]), ("m_two_sessions", ["t0", "t2"]), ("m_none", []),
                ("m_many", ["t0", "t1", "t2"])]
    if fresh_url.startswith("postgresql://"):
        import psycopg

        from tortoise_sdk.store.postgres.migrations import POSTGRES_MIGRATIONS, migrate_postgres

        assert POSTGRES_MIGRATIONS[12].version == 13
        with psycopg.connect(fresh_url, autocommit=True) as conn:
            migrate_postgres(conn, POSTGRES_MIGRATIONS[:12])
            _seed_v12(lambda sql, args: conn.execute(sql.replace("?", "%s"), args), turns, memories)
    else:
        assert SQLITE_MIGRATIONS[12].version == 13
        conn = sqlite3.connect(fresh_url, isolation_level=None)
        migrate_sqlite(conn, SQLITE_MIGRATIONS[:12])
        _seed_v12(conn.execute, turns, memories)
        conn.close()
    store = open_store(fresh_url)
    try:
        assert store.schema_version() == SQLITE_MIGRATIONS[-1].version  # 13 and every later one
        got = {m.id: m.confidence for m in store.memories("ns")}
        assert got == {"m_one": BASE[AGREED], "m_none": BASE[AGREED],
                       "m_two_sessions": pytest.approx(BASE[AGREED] + 2 * PROMOTION_STEP),
                       "m_many": pytest.approx(BASE[AGREED] + 3 * PROMOTION_STEP)}
        # The migrated memory counts as agreed: a restatement promotes it by the same rule as a new one.
        plan = ExtractionPlan(session_id="s2", extraction_id="x_new", valid_at=T0, items=[
            ItemPlan("point", "fact m_one", sources=(SourcePlan("t2", None),), agreement=S4_ONLY)])
        assert store.write_extraction("ns", plan, finalize=_finalize).outcomes == {"NOOP": 1}
        assert store.get_memory("ns", "m_one").confidence == pytest.approx(BASE[AGREED] + 2 * PROMOTION_STEP)
    finally:
        store.close()


def _seed_v12(execute: Any, turns: list[tuple[str, str, int]], memories: list[tuple[str, list[str]]]) -> None:
    at = T0.isoformat()
    for sid in ("s1", "s2"):
        execute("INSERT INTO sessions VALUES ('ns', ?, NULL, ?, ?)", (sid, at, at))
    for tid, sid, idx in turns:
        execute("INSERT INTO turns (turn_id, namespace, session_id, idx, role, content, content_hash, created_at)"
                " VALUES (?, 'ns', ?, ?, 'user', 'x', 'h', ?)", (tid, sid, idx, at))
    for mid, sources in memories:
        execute("INSERT INTO memories (memory_id, namespace, session_id, kind, content, norm_content, status,"
                " search_keys, created_at) VALUES (?, 'ns', 's1', 'point', ?, ?, 'live', '[]', ?)",
                (mid, f"fact {mid}", fact_key(f"fact {mid}"), at))
        for tid in sources:
            execute("INSERT INTO provenance (namespace, memory_id, turn_id, quote) VALUES ('ns', ?, ?, NULL)",
                    (mid, tid))


# -- the block -----------------------------------------------------------------------------------


def _memory(i: int, when: str, conf: float | None, superseded: bool = False) -> Candidate:
    m = MemoryRecord(id=f"m_{i:08x}", kind="point", content="Maya bakes bread", when=when, session_id="s",
                     status="superseded" if superseded else "live", confidence=conf)
    return Candidate(key=m.id, kind="memory", text=m.content, memory=m, score=1.0, reasons=["memory matched"])


def test_a_low_confidence_memory_is_marked_unconfirmed_in_the_renderers_slot():
    reading = Reading(None, "ns", approx_tokens, None)  # type: ignore[arg-type]
    block = render(reading, [_memory(1, "2023", 0.3), _memory(2, "", 0.6), _memory(3, "", None),
                             _memory(4, "", 0.3, superseded=True)], 4, 400)
    lines = block.block.split("\n")[1:-1]
    assert lines[0].startswith('1. (unconfirmed memory, 2023) "Maya bakes bread"')
    assert lines[1].startswith('2. (memory) "') and lines[2].startswith('3. (memory) "')
    assert lines[3].startswith('4. SUPERSEDED (unconfirmed memory) "')
    assert [p.unconfirmed for p in block.pointers] == [True, False, False, True]
    # A stored ``when`` cannot forge the marker: it stays after the comma.
    forged = render(reading, [_memory(1, "unconfirmed memory", 0.6)], 1, 400)
    assert forged.block.split("\n")[1].startswith('1. (memory, unconfirmed memory) "')
    assert not forged.pointers[0].unconfirmed


def test_fused_ties_go_to_the_surer_memory():
    from tortoise_sdk.reflex.scoring import fuse

    low, sure = _memory(1, "", 0.3), _memory(2, "", 0.8)
    turn = Candidate(key="t_1", kind="turn", text="x", score=1.0)
    ranked = fuse([[low], [sure], [turn]])
    assert [c.key for c in ranked] == [sure.key, low.key, "t_1"]


def test_forgetting_a_session_takes_back_the_promotion_its_turns_gave(store):
    ns = f"ns_{uuid.uuid4().hex[:10]}"
    turns = _seed(store, ns)
    (mid,) = _write(store, ns, "s1", ItemPlan("point", "Maya bakes bread", sources=(SourcePlan(turns["s1"][0], None),)))
    _write(store, ns, "s2", ItemPlan("point", "Maya bakes bread", sources=(SourcePlan(turns["s2"][0], None),)))
    assert store.get_memory(ns, mid).confidence == pytest.approx(BASE[AGREED] + 2 * PROMOTION_STEP)
    store.forget_session(ns, "s2")
    assert store.get_memory(ns, mid).confidence == BASE[AGREED]
