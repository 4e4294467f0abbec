"""The store side of extraction: the S5 write (ADD/NOOP/UPDATE/DELETE, atomicity), memory reads, jobs and fencing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tortoise_sdk import Memory
from tortoise_sdk.errors import LeaseLost, NotFoundError
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.search import fts5_query
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, SourcePlan
from tortoise_sdk.store.sqlite import SQLiteStore

NS = "alice"
DAY1 = datetime(2024, 3, 2, tzinfo=timezone.utc)
DAY2 = datetime(2024, 6, 14, tzinfo=timezone.utc)


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    db = str(tmp_path / "x.db")
    with Memory(db, namespace=NS) as mem:
        mem.capture("s1", [{"role": "user", "content": "I work at Northwind Labs and I'm vegan."}])
        mem.capture("s2", [{"role": "user", "content": "I'm at Helix Health now. I'm not vegan anymore."}])
    s = SQLiteStore(db)
    yield s
    s.close()


def turn_id(store: SQLiteStore, session: str) -> str:
    return store.turns(NS, session)[0].turn_id


def ok(result: object) -> ExtractionReport:
    return ExtractionReport(status="ok", outcomes=dict(result.outcomes), counts=dict(result.counts))


def write(store: SQLiteStore, session: str, items: list[ItemPlan], *, retractions=(), valid_at=DAY1,
          entities=(), fence=None):
    plan = ExtractionPlan(session_id=session, extraction_id=f"x-{session}-{len(items)}", valid_at=valid_at,
                          entities=list(entities), items=items, retractions=list(retractions))
    return store.write_extraction(NS, plan, finalize=ok, fence=fence)


def point(store: SQLiteStore, session: str, content: str, quote: str, **kw: object) -> ItemPlan:
    return ItemPlan(kind="point", content=content, about=("Maya",),
                    sources=(SourcePlan(turn_id(store, session), quote),), **kw)


def test_add_noop_update_delete(store: SQLiteStore) -> None:
    first = write(store, "s1", [
        point(store, "s1", "Maya works at Northwind Labs.", "I work at Northwind Labs", search_keys=("job",)),
        point(store, "s1", "Maya is vegan.", "I'm vegan"),
    ], entities=[EntityPlan("Maya", "person", "the user")])
    assert first.outcomes == {"ADD": 2} and first.counts == {"entity": 1, "point": 2}
    job, vegan = first.memory_ids
    again = write(store, "s1", [point(store, "s1", "maya works at  northwind labs", "I work at Northwind Labs")])
    assert again.outcomes == {"NOOP": 1} and again.memory_ids == [job]
    later = write(store, "s2", [point(store, "s2", "Maya works at Helix Health.", "I'm at Helix Health now",
                                      supersedes=job)],
                  retractions=[RetractionPlan("Maya is vegan", (SourcePlan(turn_id(store, "s2"), "not vegan"),))],
                  valid_at=DAY2)
    assert later.outcomes == {"UPDATE": 1, "DELETE": 1}
    helix = later.memory_ids[0]
    old = store.get_memory(NS, job)
    assert (old.status, old.invalid_at, old.superseded_by) == ("superseded", DAY2, helix)
    assert store.get_memory(NS, vegan).status == "deleted"
    assert [m.id for m in store.supersession_chain(NS, job)] == [job, helix]
    assert [m.id for m in store.memories(NS)] == [helix]
    assert {m.status for m in store.memories(NS, include_superseded=True)} == {"live", "superseded", "deleted"}
    # Entity resolution: "Maya" resolved to one node across writes.
    assert [e["name"] for e in store.find_entities(NS, ["maya", "MAYA "])] == ["Maya"]


def test_memory_reads(store: SQLiteStore) -> None:
    ids = write(store, "s1", [
        point(store, "s1", "Maya works at Northwind Labs.", "I work at Northwind Labs", search_keys=("employer",)),
        ItemPlan(kind="event", content="Northwind Labs hired a chef.", about=("Northwind Labs",),
                 sources=(SourcePlan(turn_id(store, "s1"), "Northwind Labs"),)),
    ]).memory_ids
    hits = store.search_memories(NS, fts5_query("employer"), k=5)
    assert [(m.id, s > 0) for m, s in hits] == [(ids[0], True)]
    assert [m.id for m, _ in store.search_memories(NS, fts5_query("maya"), k=5)] == [ids[0]]  # entity names indexed
    assert [m.id for m in store.memories_about(NS, ["northwind labs", "maya"], k=5)] == [ids[1], ids[0]]
    assert [m.id for m in store.memories_about(NS, ["northwind labs", "maya"], k=1)] == [ids[1]]
    about = store.memories_about(NS, ["Northwind  Labs"], k=5)
    assert [m.id for m in about] == [ids[1]]
    m = store.get_memory(NS, ids[0])
    assert (m.entities, [s.quote for s in m.sources], m.valid_at) == (["Maya"], ["I work at Northwind Labs"], DAY1)
    assert store.memories("other-namespace") == [] and store.search_memories("other", fts5_query("maya"), k=5) == []
    with pytest.raises(NotFoundError):
        store.get_memory("other-namespace", ids[0])


def test_s5_failure_writes_nothing(store: SQLiteStore) -> None:
    def explode(result: object) -> ExtractionReport:
        raise RuntimeError("boom after the items were written")

    plan = ExtractionPlan(session_id="s1", extraction_id="x1", valid_at=DAY1,
                          items=[point(store, "s1", "Maya is vegan.", "I'm vegan")])
    with pytest.raises(Exception, match="boom"):
        store.write_extraction(NS, plan, finalize=explode)
    assert store.memories(NS, include_superseded=True) == []
    assert store.find_entities(NS, ["Maya"]) == []
    assert len(store.turns(NS, "s1")) == 1


def test_two_workers_fencing(store: SQLiteStore) -> None:
    job = store.enqueue_job(NS, "s1")
    now = datetime.now(timezone.utc)
    a = store.lease_job(NS, lease_s=30, max_attempts=3, now=now)
    assert (a.job_id, a.revision, a.attempts, a.status) == (job.job_id, 1, 1, "running")
    assert store.lease_job(NS, lease_s=30, max_attempts=3, now=now) is None  # leased: nobody else gets it
    # Worker A stalls past its lease; worker B takes the job over.
    b = store.lease_job(NS, lease_s=30, max_attempts=3, now=now + timedelta(seconds=31))
    assert (b.revision, b.attempts) == (2, 2)
    item = [point(store, "s1", "Maya is vegan.", "I'm vegan")]
    with pytest.raises(LeaseLost, match="revision 2"):
        write(store, "s1", item, fence=Fence(a.job_id, a.revision))
    assert store.memories(NS) == []  # A's late result was refused whole
    with pytest.raises(LeaseLost):
        store.fail_job(Fence(a.job_id, a.revision), "late error", max_attempts=3)
    assert write(store, "s1", item, fence=Fence(b.job_id, b.revision)).outcomes == {"ADD": 1}
    done = store.get_job(job.job_id)
    assert (done.status, done.revision, done.lease_until) == ("done", 2, None)
    assert done.errors == ["attempt 1: lease expired (worker crashed or stalled); retried"]


def test_crashed_job_is_retried_then_failed_after_max_attempts(store: SQLiteStore) -> None:
    job = store.enqueue_job(NS, "s1")
    t = datetime.now(timezone.utc)
    for attempt in (1, 2):
        leased = store.lease_job(NS, lease_s=10, max_attempts=2, now=t)
        assert leased.attempts == attempt
        t += timedelta(seconds=11)  # the worker died holding the lease
    assert store.lease_job(NS, lease_s=10, max_attempts=2, now=t) is None
    failed = store.get_job(job.job_id)
    assert failed.status == "failed" and len(failed.errors) == 2
    assert failed.errors[-1].endswith("giving up after 2 attempts")


def test_failed_attempt_goes_back_to_pending(store: SQLiteStore) -> None:
    store.enqueue_job(NS, "s1")
    j = store.lease_job(NS, lease_s=10, max_attempts=2)
    again = store.fail_job(Fence(j.job_id, j.revision), "s2: server", max_attempts=2)
    assert (again.status, again.errors) == ("pending", ["attempt 1: s2: server"])
    j = store.lease_job(NS, lease_s=10, max_attempts=2)
    final = store.fail_job(Fence(j.job_id, j.revision), "s2: server", max_attempts=2)
    assert (final.status, final.attempts, len(final.errors)) == ("failed", 2, 2)


def test_graph_projection(store: SQLiteStore, tmp_path: Path) -> None:
    ids = write(store, "s1", [point(store, "s1", "Maya is vegan.", "I'm vegan")],
                entities=[EntityPlan("Maya", "person")]).memory_ids
    with Memory(str(tmp_path / "x.db"), namespace=NS) as mem:
        g = mem.graph()
    mid = f"memory:{ids[0]}"
    assert g.nodes[mid]["content"] == "Maya is vegan."
    kinds = sorted(d["kind"] for _, _, d in g.out_edges(mid, data=True))
    assert kinds == ["about", "source"]


def test_turn_fact_status_and_the_reflex_leaves_out_turns_whose_facts_were_replaced(store: SQLiteStore) -> None:
    first = write(store, "s1", [point(store, "s1", "Maya works at Northwind Labs.", "I work at Northwind Labs")])
    t1, t2 = turn_id(store, "s1"), turn_id(store, "s2")
    assert store.turn_fact_status(NS, [t1, t2]) == {t1: (1, 0, frozenset())}
    second = write(store, "s2", [point(store, "s2", "Maya works at Helix Health.", "I'm at Helix Health now",
                                       supersedes=first.memory_ids[0])], valid_at=DAY2)
    # t1's fact was superseded, and by which memory
    assert store.turn_fact_status(NS, [t1, t2]) == {t1: (0, 1, frozenset(second.memory_ids)), t2: (1, 0, frozenset())}
    mem = Memory(store=store, namespace=NS)
    plain = mem.context([{"role": "user", "content": "Did I work at Northwind Labs?"}], budget=5)
    assert t1 not in {p.id for p in plain.pointers}
    change = mem.context([{"role": "user", "content": "How did my job change since Northwind Labs?"}], budget=5)
    flagged = {p.id: p.superseded for p in change.pointers}
    assert flagged.get(t1) is True and "SUPERSEDED" in change.block
