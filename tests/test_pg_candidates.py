"""The PostgreSQL reflex's turn candidates: a common word walked newest first finds exactly the rows
the GIN index finds (same turns, same scores, same order), and is walked only when it is common."""

from __future__ import annotations

import random

import pytest

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.store import open_store
from tortoise_sdk.store.postgres import fts

from pgtemp import require_postgres, temp_database

NEVER = 1e18  # no term is ever walked: the GIN path alone, as before the walk
ALWAYS = 0.0  # every one-lexeme term is walked


@pytest.fixture(scope="module")
def store():
    """Three namespaces; in "a", "paddling" is in most turns' content, in "b" in few, in "c" in most of the
    oldest sessions' and none after (a walk of the newest turns finds none); "otter" is rare; "Kayak"
    also speaks."""
    require_postgres()
    rng = random.Random(3)
    with temp_database("tortoise_candidates") as url:
        s = open_store(url)
        for ns in ("a", "b", "c"):
            for sess in range(12):
                turns = []
                for i in range(25):
                    words = rng.sample(["kayak", "kayaks", "heron", "river", "red", "boat", "lunch", "tea"],
                                       k=rng.randint(1, 4))
                    if rng.random() < {"a": 0.8, "b": 0.1, "c": 0.9 if sess < 5 else 0.0}[ns]:
                        words.append("paddling")
                    if rng.random() < 0.03:
                        words.append("otter")
                    turn = {"role": "user", "content": " ".join(words)}
                    if rng.random() < 0.1:
                        turn["name"] = "Kayak"
                    turns.append(turn)
                s.capture(ns, prepare_capture(f"s{sess}", turns, max_turns=100))
        yield s
        s.close()


QUERIES = [
    {"paddle": 1.0},
    {"kayak": 1.0},
    {"paddling": 2.0, "otter": 3.0},
    {"kayak": 1.0, "river": 1.0, "red boat": 0.5},  # a phrase is never walked
    {"otter": 1.0, "tea": 0.25, "zzzz": 9.0},
    {"Paddling": 1.5, "lunch": 1.5},  # ties, broken newest first
]


@pytest.mark.parametrize("weights", QUERIES)
@pytest.mark.parametrize("per_term", [1, 7, 40, 200])
def test_walked_and_indexed_matches_are_identical(store, monkeypatch, weights, per_term):
    monkeypatch.setattr(fts, "WALK_MIN", 1)
    got = {}
    for factor in (NEVER, ALWAYS, fts.WALK_FACTOR):
        monkeypatch.setattr(fts, "WALK_FACTOR", factor)
        got[factor] = {ns: [(h.turn_id, h.score, h.content, h.session_date, h.name)
                            for h in store.candidate_turns(ns, weights, k=12, per_term=per_term)]
                       for ns in ("a", "b", "c")}
    assert got[ALWAYS] == got[NEVER]
    assert got[fts.WALK_FACTOR] == got[NEVER]
    assert got[NEVER]["a"]  # the store holds what the queries look for


def _walks(store, ns, terms, per_term):
    """Which terms the candidate query walks newest first, in term order."""
    sql = fts.newest_turn_matches_sql().replace("SELECT x.ord, hit.id FROM", "SELECT x.ord, x.span IS NOT NULL FROM", 1)
    sql = sql.split("CROSS JOIN LATERAL (\n            WITH found")[0]
    with store.read() as c:
        return [w for _, w in c.execute(sql + " ORDER BY x.ord", (terms, ns, per_term)).fetchall()]


def test_only_a_word_in_a_large_share_of_the_turns_is_walked(store, monkeypatch):
    assert _walks(store, "a", ["paddling"], 40) == [False]  # fewer than WALK_MIN matches: the index reads them
    monkeypatch.setattr(fts, "WALK_MIN", 1)
    # In "a", "paddling" is in ~80 % of 300 turns' content: 240 ** 2 > 40 * 300. "otter" is rare,
    # "red boat" a phrase; in "b" "paddling" is in ~10 %.
    assert _walks(store, "a", ["paddling", "otter", "red boat"], 40) == [True, False, False]
    assert _walks(store, "b", ["paddling", "otter", "red boat"], 40) == [False, False, False]
    assert _walks(store, "a", ["paddling"], 1_000) == [False]  # the walk would read more than the index


def test_the_store_never_jit_compiles_its_statements(store, monkeypatch):
    """At ten million turns the candidate statements' estimated cost passed ``jit_above_cost`` and the
    server spent 40-57 ms compiling each, most of a context() block; the store's sessions turn JIT off.
    Here every statement is made worth compiling (``jit_above_cost = 0``) to show none is."""
    import psycopg

    with store.read() as c, c.transaction():
        c.execute("SET LOCAL jit = on")  # pg_jit_available() is false while the session's jit is off
        if not c.execute("SELECT pg_jit_available()").fetchone()[0]:
            pytest.skip("this PostgreSQL server has no JIT (built without LLVM)")
    sent = []
    real = psycopg.Cursor.execute

    def record(self, query, params=None, **kw):
        if isinstance(query, str) and query.lstrip().upper().startswith(("SELECT", "WITH")) and "hit.id" in query:
            sent.append((query, params))
        return real(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", record)
    assert store.candidate_turns("a", {"paddling": 2.0, "otter": 3.0}, k=12, per_term=40)
    monkeypatch.setattr(psycopg.Cursor, "execute", real)
    assert sent
    with store.read() as c, c.transaction():
        c.execute("SET LOCAL jit_above_cost = 0")
        for query, params in sent:
            plan = c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()[0][0]
            assert "JIT" not in plan, plan["JIT"]


def test_the_first_block_reads_on_connections_already_open_and_warm():
    """A block reads on two connections at once; prepare_reflex (called by context() outside the block's
    budget) opens both and warms them once per store, so a new process's first block pays for neither."""
    from tortoise_sdk import Memory

    require_postgres()
    with temp_database("tortoise_warm") as url:
        with Memory(url, namespace="n") as writer:
            writer.capture("s", [{"role": "user", "content": "I work at Helix Health"}])
        mem = Memory(url, namespace="n")  # a new process's store: its pool holds one connection
        store = mem.store
        store._pool.wait()
        assert store._pool.get_stats()["pool_size"] == 1
        sizes = []
        real = store.prepare_reflex
        store.prepare_reflex = lambda: (real(), sizes.append(store._pool.get_stats()["pool_size"]))[0]  # type: ignore[method-assign]
        block = mem.context(["where do I work now?"], time_budget_ms=None)
        assert block.pointers
        assert sizes[0] >= 2  # both readers open before the block began
        assert store._reflex_warm
        opened = store._pool.get_stats()["connections_num"]
        mem.context(["where do I work these days?"], time_budget_ms=None)
        assert store._pool.get_stats()["connections_num"] == opened and len(sizes) == 2  # called each time, warms once
        mem.close()


@pytest.mark.parametrize("term", ["kayak", "Kayak", "kayaks", "red boat", "boat red", "paddling otter", "the heron",
                                  "e-mail", "o'brien", "naïve café", "tea", "zzzz"])
def test_the_content_query_matches_what_the_content_filter_matches(store, term):
    """``content_query`` (each lexeme at weight A) finds exactly the turns whose content alone matches: a
    speaker's name ("Kayak", weight B) is no match, a phrase must hold within the content."""
    q = f"phraseto_tsquery('{fts.FTS_CONFIG}'::regconfig, %(term)s)"
    with store.read() as c:
        filtered, weighted = c.execute(
            f"SELECT array_agg(id ORDER BY id) FILTER (WHERE ts_filter(fts, '{{a}}') @@ {q}),"
            f" array_agg(id ORDER BY id) FILTER (WHERE fts @@ {fts.content_query(q)}) FROM turns",
            {"term": term}).fetchone()
    assert weighted == filtered
