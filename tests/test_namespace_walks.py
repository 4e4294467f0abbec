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


@pytest.fixture(scope="module", params=(False, True), ids=("no-statistics", "analyzed"))
def sqlite_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The two namespaces; as the store keeps them (it never runs ``ANALYZE``), or after a user ran it on
    the file, which gives SQLite's planner statistics to choose by."""
    import sqlite3

    from tortoise_sdk.store.sqlite import SQLiteStore

    path = tmp_path_factory.mktemp("walks") / "walks.db"
    store = SQLiteStore(path, timeout_s=None)
    _fill(store)
    if request.param:
        store.close()
        with sqlite3.connect(path) as c:
            c.execute("ANALYZE")
        store = SQLiteStore(path, timeout_s=None)
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


# -- PostgreSQL: each walk's plan reads the namespace's own rows only -------------------------------

MEMORY_SESSIONS = {"quiet": 3, "busy": 10}  # of 100 memories each, the busy namespace's written after


def _fill_memories(store: Any) -> None:
    from tortoise_sdk.models import ExtractionReport
    from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, ItemPlan

    for ns, sessions in MEMORY_SESSIONS.items():
        for s in range(sessions):
            items = [ItemPlan(kind="point", content=f"apple pie memory {s}-{i} of {ns}", about=("Apple",))
                     for i in range(100)]
            plan = ExtractionPlan(session_id=f"s{s}", extraction_id=f"x-{ns}-{s}", valid_at=None,
                                  entities=[EntityPlan(name="Apple", kind="thing")], items=items)
            store.write_extraction(ns, plan, finalize=lambda r: ExtractionReport(status="ok"))


@pytest.fixture(scope="module")
def pg_filled() -> Iterator[tuple[Any, str]]:
    """The two namespaces' turns and memories in a database of their own, autovacuum off. Yields the store
    and its URL."""
    import psycopg

    from pgtemp import require_postgres, temp_database
    from tortoise_sdk.store.postgres import PostgresStore

    require_postgres()
    with temp_database("tortoise_namespace_walks") as url:
        store = PostgresStore(url)
        with psycopg.connect(url, autocommit=True) as c:
            for table in ("turns", "memories"):
                c.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        _fill(store)
        _fill_memories(store)
        yield store, url
        store.close()


@pytest.fixture(scope="module", params=("ANALYZE", "VACUUM ANALYZE"), ids=("newest-pages-not-yet-vacuumed", "vacuumed"))
def pg_walk(request: pytest.FixtureRequest, pg_filled: tuple[Any, str]) -> tuple[Any, str]:
    """``pg_filled`` with statistics taken, its pages not yet marked all-visible (a live store's usual state
    between two vacuums: a namespace's index then costs the planner a heap visit a row, and it had
    preferred the primary key backwards), then vacuumed. pytest runs a module's tests a parameter at a
    time, in this order; the state is checked, not assumed."""
    import psycopg

    _, url = pg_filled
    with psycopg.connect(url, autocommit=True) as c:
        for table in ("turns", "memories"):
            c.execute(f"{request.param} {table}")
        visible = c.execute("SELECT SUM(relallvisible) FROM pg_class WHERE relname IN ('turns', 'memories')").fetchone()[0]
    assert (visible > 0) == request.param.startswith("VACUUM"), (request.param, visible)
    return pg_filled


def _rows_read(plan: dict, table: str) -> int:
    """Rows the plan's scans of ``table`` read, kept or thrown away, over all their loops (EXPLAIN ANALYZE)."""
    own = 0
    if plan.get("Relation Name") == table:
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(_rows_read(p, table) for p in plan.get("Plans", []))


def _read_by(url: str, call: Any, table: str) -> int:
    """Rows of ``table`` that the reads ``call()`` sends read, by their plans (each statement run again under
    ``EXPLAIN ANALYZE``)."""
    import psycopg

    sent: list[tuple[str, Any]] = []
    real = psycopg.Cursor.execute

    def record(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(query, str) and query.lstrip().upper().startswith(("SELECT", "WITH")):
            sent.append((query, params))
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = record  # type: ignore[method-assign]
    try:
        call()
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]
    assert sent
    read = 0
    with psycopg.connect(url) as c:
        for sql, params in sent:
            plan = c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0]
            plan = plan if isinstance(plan, list) else json.loads(plan)
            read += _rows_read(plan[0]["Plan"], table)
    return read


def test_postgres_context_walk_of_a_quiet_namespace_reads_none_of_the_busy_ones_turns(pg_walk, monkeypatch):
    from tortoise_sdk.store.postgres import fts

    pg_store, pg_url = pg_walk
    monkeypatch.setattr(fts, "WALK_MIN", 10)  # "apple" is in every turn: walked newest first, not looked up
    hits = pg_store.candidate_turns("quiet", {"apple": 1.0}, k=5, per_term=50)
    assert [h.content for h in hits] == _newest(pg_store, "quiet", 5)
    # The walk reads the quiet namespace's newest 50 turns (and the 5 it returns). Taking the primary key
    # backwards instead, it passed the busy namespace's 6,000 newer turns (filtered out, or merge-joined).
    assert _read_by(pg_url, lambda: pg_store.candidate_turns("quiet", {"apple": 1.0}, k=5, per_term=50), "turns") <= 2 * 50 + 10


def test_postgres_bounded_search_of_a_quiet_namespace_reads_none_of_the_busy_ones_turns(pg_walk, monkeypatch):
    from tortoise_sdk.store.postgres import fts
    from tortoise_sdk.store.postgres import store as pg

    pg_store, pg_url = pg_walk
    monkeypatch.setattr(fts, "WALK_MIN", 10)
    monkeypatch.setattr(pg, "POSTINGS_BUDGET", 50)  # "apple" is over it: its newest matches are walked
    hits = pg_store.search_terms("quiet", ["apple"], k=5)
    assert len(hits) == 5 and all(h.content.endswith("of quiet") for h in hits)
    # Its own 300 turns at most, twice (walked, then scored); before, the busy namespace's 6,000 newer ones too.
    assert _read_by(pg_url, lambda: pg_store.search_terms("quiet", ["apple"], k=5), "turns") <= 2 * QUIET


@pytest.mark.parametrize("newest_first", [True, False])
def test_postgres_memory_walk_of_a_quiet_namespace_reads_none_of_the_busy_ones_memories(pg_walk, monkeypatch,
                                                                                         newest_first):
    from tortoise_sdk.store.postgres import fts

    pg_store, pg_url = pg_walk
    monkeypatch.setattr(fts, "WALK_MIN", 10)

    def walk() -> list[Any]:
        return pg_store.candidate_memories("quiet", {"apple": 1.0}, k=5, per_term=50, newest_first=newest_first)

    assert [m.content for m, _ in walk()] == [f"apple pie memory 2-{i} of quiet" for i in range(99, 94, -1)]
    # Walked: the newest 50 (before, not yet vacuumed, the busy namespace's 1,000 newer memories too). Through
    # the GIN index: every match of the word in the namespace (its 300), none of the busy one's.
    own = MEMORY_SESSIONS["quiet"] * 100
    assert _read_by(pg_url, walk, "memories") <= (2 * 50 if newest_first else own) + 10


@pytest.mark.parametrize("session", [None, "s1"])
def test_postgres_latest_memories_of_a_quiet_namespace_read_none_of_the_busy_ones(pg_walk, session):
    pg_store, pg_url = pg_walk
    got = pg_store.memories("quiet", session, latest=3)
    last = MEMORY_SESSIONS["quiet"] - 1 if session is None else 1
    assert [m.content for m in got] == [f"apple pie memory {last}-{i} of quiet" for i in (97, 98, 99)]
    # The extraction window's known memories (a session's) and the CLI's "is it empty?" (the namespace's).
    # Walking the primary key backwards, both passed the busy namespace's 1,000 newer memories.
    assert _read_by(pg_url, lambda: pg_store.memories("quiet", session, latest=3), "memories") <= 100 + 10
