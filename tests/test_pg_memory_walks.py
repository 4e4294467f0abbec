"""The PostgreSQL memory candidates walked newest first (``candidate_memories(newest_first=True)``, a hop's
entity names) find exactly the memories the GIN index finds: same memories, same scores, same order,
whatever the statuses, the namespaces around them, and whether the walk's window holds enough matches."""

from __future__ import annotations

import random

import pytest

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, ItemPlan
from tortoise_sdk.store.postgres import fts

from pgtemp import require_postgres, temp_database

WORDS = ["kayak", "heron", "river", "red", "boat", "lunch", "tea"]


@pytest.fixture(scope="module")
def store():
    """Three namespaces of turns and memories. In "a" "Paddling" (an entity) is in most memories, in "b" in
    few, in "c" only in the oldest sessions' (a walk of the newest finds none); "otter" is rare. Some
    memories are superseded or deleted, and the namespaces' writes interleave, so each one's memories
    are spread among the others' ids."""
    require_postgres()
    rng = random.Random(5)
    with temp_database("tortoise_memory_walks") as url:
        s = open_store(url)
        for sess in range(10):
            for ns in ("a", "b", "c"):
                share = {"a": 0.8, "b": 0.1, "c": 0.9 if sess < 4 else 0.0}[ns]
                turns, items = [], []
                for i in range(12):
                    words = rng.sample(WORDS, k=rng.randint(1, 3))
                    about: tuple[str, ...] = ()
                    if rng.random() < share:
                        words.append("paddling")
                        about = ("Paddling",)
                    if rng.random() < 0.05:
                        words.append("otter")
                    turns.append({"role": "user", "content": " ".join(words)})
                    items.append(ItemPlan(kind="point", content=f"{' '.join(words)} ({ns} {sess} {i})", about=about))
                s.capture(ns, prepare_capture(f"s{sess}", turns, max_turns=100))
                plan = ExtractionPlan(session_id=f"s{sess}", extraction_id=f"x-{ns}-{sess}", valid_at=None,
                                      entities=[EntityPlan(name="Paddling", kind="activity")], items=items)
                s.write_extraction(ns, plan, finalize=lambda r: ExtractionReport(status="ok"))
        import psycopg

        with psycopg.connect(url, autocommit=True) as c:  # a tenth superseded, a tenth deleted
            c.execute("UPDATE memories SET status = CASE WHEN id % 10 = 3 THEN 'superseded' ELSE 'deleted' END"
                      " WHERE id % 10 IN (3, 7)")
        yield s
        s.close()


def _found(store, ns, weights, per_term, include_superseded, newest_first):
    return [(m.id, m.status, score) for m, score in
            store.candidate_memories(ns, weights, k=15, per_term=per_term, include_superseded=include_superseded,
                                     newest_first=newest_first)]


@pytest.mark.parametrize("weights", [{"paddling": 1.0}, {"Paddling": 1.0, "otter": 2.0},
                                     {"paddling": 1.0, "kayak": 1.0, "red boat": 0.5}, {"zzzz": 1.0, "tea": 0.5}])
@pytest.mark.parametrize("per_term", [1, 4, 30, 500])
@pytest.mark.parametrize("span", [0.05, 1.0, fts.WALK_SPAN])
def test_walked_and_indexed_memories_are_identical(store, monkeypatch, weights, per_term, span):
    monkeypatch.setattr(fts, "WALK_MIN", 1)
    monkeypatch.setattr(fts, "WALK_FACTOR", 0.0)  # every one-lexeme term is walked
    monkeypatch.setattr(fts, "WALK_SPAN", span)  # a window short of per_term matches, or long enough
    for ns in ("a", "b", "c"):
        for superseded in (False, True):
            indexed = _found(store, ns, weights, per_term, superseded, newest_first=False)
            assert _found(store, ns, weights, per_term, superseded, newest_first=True) == indexed
    assert _found(store, "a", {"paddling": 1.0}, 30, False, newest_first=False)  # the store holds what is sought


def _walks(store, ns, terms, per_term):
    """Which terms the walking statement walks (its span is not NULL), in term order."""
    sql = fts.newest_memory_matches_sql(walk=True).replace("SELECT x.ord, hit.id FROM", "SELECT x.ord, x.span IS NOT NULL FROM", 1)
    sql = sql.split("CROSS JOIN LATERAL (\n            WITH found")[0]
    with store.read() as c:
        return [w for _, w in c.execute(sql + " ORDER BY x.ord", (terms, ns, ["live"], per_term)).fetchall()]


def test_only_a_word_common_among_the_turns_is_walked(store, monkeypatch):
    assert _walks(store, "a", ["paddling"], 10) == [False]  # fewer than WALK_MIN matches: the index reads them
    monkeypatch.setattr(fts, "WALK_MIN", 1)
    # In "a", "paddling" is in ~80 % of 120 turns: 96 ** 2 > 0.25 * 10 * 120; "otter" is rare, "red boat" a phrase.
    assert _walks(store, "a", ["paddling", "otter", "red boat"], 10) == [True, False, False]
    assert _walks(store, "b", ["paddling"], 10) == [False]
