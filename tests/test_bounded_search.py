"""SQLite's bounded search: when even the rarest query term has more postings than the budget.

Only that term's newest ``POSTINGS_BUDGET`` turns are candidates; each keeps its plain-BM25
score, and below the budget the search is plain BM25, as before.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.search import BM25_B, BM25_K1, NAME_WEIGHT, TF_CAP, index_idf
from tortoise_sdk.store.sqlite import SQLiteStore

BUDGET = 10


def _turns() -> list[dict]:
    # The best "common" turn (short, three times, and in the speaker's name) is the oldest, so a
    # search that reads every posting returns it first and one bounded to the newest does not.
    turns = [{"role": "user", "content": "common common common", "name": "Common"}]
    for i in range(1, 40):
        words = " ".join(["common"] * (1 + i % 3) + ["filler"] * (i % 5) + [f"word{i}"])
        turns.append({"role": "user" if i % 2 else "assistant", "content": words + (" zebra" if i % 7 == 0 else "")})
    turns += [{"role": "user", "content": f"filler only {i}"} for i in range(10)]
    return turns


def _filled(s):
    """``s`` with the test's turns in two sessions of ``ns``, and 30 turns of one common word in ``other``."""
    turns = _turns()
    s.capture("ns", prepare_capture("s1", turns[:25], session_date=None, idempotency_key=None, max_turns=5000))
    s.capture("ns", prepare_capture("s2", turns[25:], session_date=None, idempotency_key=None, max_turns=5000))
    s.capture("other", prepare_capture("o1", [{"role": "user", "content": "common"}] * 30, session_date=None,
                                       idempotency_key=None, max_turns=5000))
    return s


@pytest.fixture
def store(tmp_path):
    s = _filled(SQLiteStore(tmp_path / "bounded.db"))
    yield s
    s.close()


def _hits(store, terms, k=100):
    return [(h.turn_id, h.score) for h in store.search_terms("ns", terms, k=k)]


def _newest_with(store, word, n):
    """The turn ids of the ``n`` newest turns of "ns" whose indexed text holds ``word`` (capture order)."""
    everything = store.search_terms("ns", [word], k=1000)
    order = {("s1", i): i for i in range(25)} | {("s2", i): 25 + i for i in range(25)}
    return {h.turn_id for h in sorted(everything, key=lambda h: -order[(h.session_id, h.index)])[:n]}


def test_while_the_rarest_term_fits_the_budget_results_are_unchanged(store, monkeypatch):
    plain = _hits(store, ["zebra", "common"])
    assert plain == _hits(store, ["common", "zebra"]) and len(plain) == 40  # every "common" turn: plain BM25
    for budget in (BUDGET, 5):  # "zebra" has 5 postings: it fits both, "common" (40) joins neither
        monkeypatch.setattr("tortoise_sdk.store.sqlite.ranking.POSTINGS_BUDGET", budget)
        new = _hits(store, ["zebra", "common"])
        monkeypatch.setattr(SQLiteStore, "_newest_candidates", lambda *a: False)  # the path before it existed
        assert new == _hits(store, ["zebra", "common"])
        monkeypatch.undo()


def test_over_the_budget_only_the_newest_postings_are_scored_each_at_its_plain_score(store, monkeypatch):
    plain = dict(_hits(store, ["common"], k=1000))
    best_plain = max(plain, key=plain.get)
    candidates = _newest_with(store, "common", BUDGET)
    assert best_plain not in candidates  # the fixture's point: the oldest turn wins a full read
    monkeypatch.setattr("tortoise_sdk.store.sqlite.ranking.POSTINGS_BUDGET", BUDGET)
    bounded = _hits(store, ["common"], k=5)
    assert len(bounded) == 5
    assert {t for t, _ in bounded} <= candidates
    assert all(score == pytest.approx(plain[t], rel=1e-12) for t, score in bounded)
    # The best five of the candidates, in plain-BM25 order.
    assert [s for _, s in bounded] == sorted((plain[t] for t in candidates), reverse=True)[:5]


def test_over_the_budget_every_common_term_still_finds_candidates(store, monkeypatch):
    postings = {w: len(_newest_with(store, w, 1000)) for w in ("common", "filler")}
    lead = min(postings, key=lambda w: (postings[w], w))
    assert postings[lead] > BUDGET
    candidates = _newest_with(store, lead, BUDGET)
    monkeypatch.setattr("tortoise_sdk.store.sqlite.ranking.POSTINGS_BUDGET", BUDGET)
    hits = store.search_terms("ns", ["common", "filler"], k=5)
    assert len(hits) == 5 and {h.turn_id for h in hits} <= candidates
    # Another namespace's turns are never candidates.
    assert all(h.session_id in ("s1", "s2") for h in hits)


@pytest.fixture(scope="module")
def pg_store():
    from pgtemp import require_postgres, temp_database

    from tortoise_sdk.store import open_store

    require_postgres()
    with temp_database("tortoise_bounded") as url:
        s = _filled(open_store(url))
        yield s
        s.close()


@pytest.mark.parametrize("walk", [False, True])
def test_postgres_over_the_budget_scores_the_newest_postings_as_sqlite_does(pg_store, monkeypatch, walk):
    """The same candidates as on SQLite (the rarest term's newest turns, content or speaker name),
    each at its plain score; found by the GIN index or by the newest-first walk alike."""
    from tortoise_sdk.store.postgres import fts
    from tortoise_sdk.store.postgres import store as pg

    store = pg_store
    plain = dict(_hits(store, ["common"], k=1000))
    candidates = _newest_with(store, "common", BUDGET)
    assert max(plain, key=plain.get) not in candidates
    monkeypatch.setattr(pg, "POSTINGS_BUDGET", BUDGET)
    if walk:
        monkeypatch.setattr(fts, "WALK_MIN", 1)
        monkeypatch.setattr(fts, "WALK_FACTOR", 0.0)
    bounded = _hits(store, ["common"], k=5)
    assert len(bounded) == 5 and {t for t, _ in bounded} <= candidates
    assert all(score == pytest.approx(plain[t], rel=1e-9) for t, score in bounded)
    assert [s for _, s in bounded] == sorted((plain[t] for t in candidates), reverse=True)[:5]
    hits = store.search_terms("ns", ["common", "filler"], k=5)
    assert len(hits) == 5 and all(h.session_id in ("s1", "s2") for h in hits)


# -- below the budget: plain BM25, bit for bit ---------------------------------------------------

_WORDS = ["kayak", "lake", "trip", "canoe", "river", "pasta", "garden", "maya", "jon"]
_TURN = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant"]),
    "content": st.lists(st.sampled_from(_WORDS), min_size=1, max_size=9).map(" ".join),
}, optional={"name": st.sampled_from(["Maya", "Jon", "Lake Kayak"])})


def _plain_bm25(store: SQLiteStore, turns: list[dict], stems: list[str], k: int) -> list[tuple[int, float]]:
    """BM25 as ``search_terms`` documents it, in Python from the turns themselves: ``(position, score)``,
    best first, ties by position (one session). Terms are summed in sorted order, as the store does."""
    content = [store.analyze([t["content"]])[0] for t in turns]
    names = [store.analyze([t.get("name") or ""])[0] for t in turns]
    lengths = [len(c) + len(n) for c, n in zip(content, names)]
    avgdl = max(sum(lengths) / len(turns), 1.0)
    scores: dict[int, float] = {}
    for term in sorted(stems):
        df = sum(term in c or term in n for c, n in zip(content, names))
        if not df:
            continue
        w = index_idf(len(turns), df)
        for i, (c, n) in enumerate(zip(content, names)):
            f = min(c.count(term) + NAME_WEIGHT * n.count(term), TF_CAP)
            if f:
                s = w * (f * (BM25_K1 + 1.0) / (f + BM25_K1 * ((1.0 - BM25_B) + BM25_B * lengths[i] / avgdl)))
                scores[i] = scores.get(i, 0.0) + s
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(_TURN, min_size=1, max_size=40), other=st.lists(_TURN, max_size=10),
       query=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6, unique=True), k=st.integers(1, 15))
def test_search_terms_is_plain_bm25_summed_term_by_term_whatever_another_namespace_holds(
        tmp_path_factory, turns, other, query, k):
    # Several terms per turn: any other order of adding a turn's term scores could change a last bit.
    s = SQLiteStore(tmp_path_factory.mktemp("plain") / "plain.db")
    try:
        s.capture("ns", prepare_capture("s", turns, session_date=None, idempotency_key=None, max_turns=5000))
        if other:
            s.capture("other", prepare_capture("o", other, session_date=None, idempotency_key=None, max_turns=5000))
        got = [(h.index, h.score) for h in s.search_terms("ns", query, k=k)]
        assert got == _plain_bm25(s, turns, [st_ for w in query for st_ in s.analyze([w])[0]], k)
    finally:
        s.close()
