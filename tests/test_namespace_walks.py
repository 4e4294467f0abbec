"""A namespace quiet while another kept writing: its newest-first walks start at its own newest turn.

``context()`` and a bounded ``search()`` walk a word's matches newest first. Both engines keep one
index for every namespace, so a walk that started at the store's newest turn read past every newer
turn of the other namespaces before reaching the quiet one's (at ten namespaces of 100,000 turns,
1.3 s a block on PostgreSQL). Here a quiet namespace of 300 turns is followed by a busy one of 6,000,
all holding the same word: the quiet one's walk must cost about what the busy one's does, and find
the same turns it would alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tortoise_sdk.capture import prepare_capture

QUIET, BUSY = 300, 6_000


def _fill(store: Any) -> None:
    for ns, n in (("quiet", QUIET), ("busy", BUSY)):
        for s in range(n // 100):
            turns = [{"role": "user", "content": f"apple pie number {s}-{i} of {ns}"} for i in range(100)]
            store.capture_many(ns, [prepare_capture(f"s{s}", turns, session_date=None, idempotency_key=None,
                                                    max_turns=5000)])


def _newest(store: Any, ns: str, n: int) -> list[str]:
    return [f"apple pie number {(i // 100)}-{i % 100} of {ns}" for i in range(QUIET - 1, QUIET - 1 - n, -1)]


# -- SQLite: the walk reads no posting past the namespace's newest turn -----------------------------


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tortoise_sdk.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path_factory.mktemp("walks") / "walks.db", timeout_s=None)
    _fill(store)
    yield store
    store.close()


def _vm_steps(store: Any, fn: Any) -> int:
    """SQLite virtual-machine steps (in hundreds) that ``fn`` runs on this thread's read connection."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    with store.read() as c:  # the same connection serves this thread's next reads
        c.set_progress_handler(tick, 100)
    try:
        fn()
    finally:
        with store.read() as c:
            c.set_progress_handler(None, 0)
    return steps[0]


def test_sqlite_context_walk_of_a_quiet_namespace_costs_what_a_busy_ones_does(sqlite_store):
    hits = sqlite_store.candidate_turns("quiet", {"apple": 1.0}, k=5, per_term=50)
    assert [h.content for h in hits] == _newest(sqlite_store, "quiet", 5)
    quiet = _vm_steps(sqlite_store, lambda: sqlite_store.candidate_turns("quiet", {"apple": 1.0}, k=5, per_term=50))
    busy = _vm_steps(sqlite_store, lambda: sqlite_store.candidate_turns("busy", {"apple": 1.0}, k=5, per_term=50))
    # Reading past the busy namespace's 6,000 newer postings costs about 20x the busy one's own walk.
    assert quiet <= 2 * busy + 10, (quiet, busy)


def test_sqlite_bounded_search_of_a_quiet_namespace_costs_what_a_busy_ones_does(sqlite_store, monkeypatch):
    from tortoise_sdk.store.sqlite import ranking

    monkeypatch.setattr(ranking, "POSTINGS_BUDGET", 50)  # "apple" is over it in both: the newest-turns path
    hits = sqlite_store.search_terms("quiet", ["apple"], k=5)
    assert len(hits) == 5 and all(h.content.endswith("of quiet") for h in hits)
    quiet = _vm_steps(sqlite_store, lambda: sqlite_store.search_terms("quiet", ["apple"], k=5))
    busy = _vm_steps(sqlite_store, lambda: sqlite_store.search_terms("busy", ["apple"], k=5))
    assert quiet <= 2 * busy + 10, (quiet, busy)


# -- PostgreSQL: the walk's plan reads the namespace's own turns only --------------------------------


@pytest.fixture(scope="module", params=("VACUUM ANALYZE turns", "ANALYZE turns"),
                ids=("vacuumed", "newest-pages-not-yet-vacuumed"))
def pg_walk(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """The two namespaces in a database of their own, statistics taken, with the pages marked all-visible by
    a vacuum or (a live store's usual state) not yet: then the namespace index costs the planner a heap
    visit a row, and it had preferred the primary key backwards. Yields the store and its URL."""
    import psycopg

    from pgtemp import require_postgres, temp_database
    from tortoise_sdk.store.postgres import PostgresStore

    require_postgres()
    with temp_database("tortoise_namespace_walks") as url:
        store = PostgresStore(url)
        _fill(store)
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(request.param)
        yield store, url
        store.close()


def _turns_read(plan: dict) -> int:
    """Rows the plan's scans of ``turns`` read, kept or thrown away, over all their loops (EXPLAIN ANALYZE)."""
    own = 0
    if plan.get("Relation Name") == "turns":
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(_turns_read(p) for p in plan.get("Plans", []))


def test_postgres_context_walk_of_a_quiet_namespace_reads_none_of_the_busy_ones_turns(pg_walk, monkeypatch):
    import psycopg

    from tortoise_sdk.store.postgres import fts

    pg_store, pg_url = pg_walk
    monkeypatch.setattr(fts, "WALK_MIN", 10)  # "apple" is in every turn: walked newest first, not looked up
    sent: list[tuple[str, Any]] = []
    real = pg_store._rows

    def record(sql: str, params: Any = None) -> Any:
        sent.append((sql, params))
        return real(sql, params)

    monkeypatch.setattr(pg_store, "_rows", record)
    hits = pg_store.candidate_turns("quiet", {"apple": 1.0}, k=5, per_term=50)
    assert [h.content for h in hits] == _newest(pg_store, "quiet", 5)
    (sql, params), = sent
    with psycopg.connect(pg_url) as c:
        plan = c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    # The walk reads the quiet namespace's newest 50 ids and probes those 50 turns. Taking the primary key
    # backwards instead, it passed the busy namespace's 6,000 newer turns (filtered out, or merge-joined).
    assert _turns_read(plan[0]["Plan"]) <= 2 * 50 + 10
