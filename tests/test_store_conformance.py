"""One store contract, two engines: every test runs against SQLite and PostgreSQL.

PostgreSQL tests use a throwaway database per module on ``$TORTOISE_TEST_PG_URL``
(default ``postgresql://postgres@127.0.0.1:5432/postgres``); unreachable, they skip
loudly, or fail under ``CI=true``. Each test acts in its own namespace.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgtemp import require_postgres, temp_database

from tortoise_sdk.capture import content_hash, prepare_capture
from tortoise_sdk.errors import CaptureConflict, IdempotencyConflict, InvalidInput, LeaseLost, NotFoundError
from tortoise_sdk.memory import Memory
from tortoise_sdk.models import ExtractionReport, Turn
from tortoise_sdk.demo import load_demo_sessions
from tortoise_sdk.search import ZERO_SCORE, fts5_query, query_terms
from tortoise_sdk.store import Store, open_store
from tortoise_sdk.store.sqlite.migrations import SQLITE_MIGRATIONS, migrate_sqlite
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, SourcePlan, Window
from tortoise_sdk.store.sqlite import SQLiteStore
from tortoise_sdk.store.sqlite.ranking import ensure_temp
from tortoise_sdk.streams import SubagentFrame
from tortoise_sdk.subagents import ROW_COLUMNS, SubagentRecorder, normalize_frame, replay

BACKENDS = ("sqlite", "postgres")
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def pg_url():
    require_postgres()
    with temp_database("tortoise_conformance") as url:
        yield url


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def ns():
    return f"ns_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=BACKENDS)
def fresh_url(request, tmp_path):
    """An empty database of each engine (PostgreSQL: a new one per test)."""
    if request.param == "sqlite":
        yield str(tmp_path / "fresh.db")
        return
    require_postgres()
    with temp_database("tortoise_fresh") as url:
        yield url


def req(session_id, turns, *, date=None, key=None):
    turns = [t if isinstance(t, dict) else {"role": "user", "content": t} for t in turns]
    return prepare_capture(session_id, turns, session_date=date, idempotency_key=key, max_turns=5000)


def contents(hits):
    return [h.content for h in hits]


# -- capture and append --------------------------------------------------------------------------


def test_capture_stores_turns_in_order_with_deterministic_ids(store: Store, ns):
    r = store.capture(ns, req("s1", ["hello", {"role": "assistant", "content": "hi there", "name": "Bot"}],
                              date="2023-05-08T13:56:00"))
    assert (r.turns_received, r.turns_stored, r.replayed, r.session_id) == (2, 2, False, "s1")
    turns = store.turns(ns, "s1")
    assert [(t.index, t.role, t.name, t.content) for t in turns] == [
        (0, "user", None, "hello"), (1, "assistant", "Bot", "hi there")]
    assert [t.turn_id for t in turns] == r.turn_ids
    assert all(t.session_date == "2023-05-08T13:56:00" for t in turns)
    assert store.get_turn(ns, r.turn_ids[1]).content == "hi there"
    [info] = store.sessions(ns)
    assert (info.session_id, info.turn_count, info.session_date) == ("s1", 2, "2023-05-08T13:56:00")


def test_a_capture_reads_the_stored_turns_it_needs_not_the_whole_session(store: Store, ns, monkeypatch):
    """Each capture read every stored turn's identity of its session, under the write lock: 20,000 turns into a
    chat an append took 47 ms and grew with every turn. It reads the turns the request can meet: the ids it
    names, the positions its id-less turns take (a whole-conversation capture), and the session's latest turns."""
    import importlib

    engine = importlib.import_module(type(store).__module__)
    seen: list[int] = []
    plan = engine.plan_append

    def counted(namespace, request, existing, *args):
        seen.append(len(existing))
        return plan(namespace, request, existing, *args)

    store.capture(ns, req("s1", [{"role": "user", "content": f"turn {i}", "id": f"m{i}"} for i in range(2000)]))
    monkeypatch.setattr(engine, "plan_append", counted)
    appended = req("s1", ["a new turn", "and its reply"])
    appended.append = True
    assert store.capture(ns, appended).turns_stored == 2
    known = req("s1", [{"role": "user", "content": "turn 7", "id": "m7"}, {"role": "user", "content": "x", "id": "n1"}])
    assert store.capture(ns, known).turns_stored == 1  # m7 is stored: skipped, never read as new
    with pytest.raises(CaptureConflict):
        store.capture(ns, req("s1", [{"role": "user", "content": "turn 9 changed", "id": "m9"}]))
    with pytest.raises(CaptureConflict):  # an id-less turn at a stored position is that turn
        store.capture(ns, req("s1", ["not turn 0"]))
    assert max(seen) <= 4
    retried = req("s1", ["x"])
    retried.append = True
    assert [w.code for w in store.capture(ns, retried).warnings] == ["repeated_tail"]
    assert [(t.index, t.content) for t in store.turns(ns, "s1", last=2)] == [(2002, "x"), (2003, "x")]


def test_recapture_appends_only_new_turns(store: Store, ns):
    store.capture(ns, req("s1", ["a", "b"]))
    r = store.capture(ns, req("s1", ["a", "b", "c", "d"]))
    assert (r.turns_received, r.turns_stored) == (4, 2)
    assert contents(store.turns(ns, "s1")) == ["a", "b", "c", "d"]
    again = store.capture(ns, req("s1", ["a", "b", "c", "d"]))
    assert (again.turns_stored, again.turn_ids) == (0, [])
    assert len(store.receipts(ns, "s1")) == 3


def test_caller_ids_are_the_identity_on_recapture(store: Store, ns):
    store.capture(ns, req("s1", [{"role": "user", "content": "x", "id": "m1"}]))
    r = store.capture(ns, req("s1", [{"role": "user", "content": "y", "id": "m2"},
                                     {"role": "user", "content": "x", "id": "m1"}]))
    assert r.turns_stored == 1
    assert [(t.external_id, t.index) for t in store.turns(ns, "s1")] == [("m1", 0), ("m2", 1)]


def test_turn_slices(store: Store, ns):
    store.capture(ns, req("s1", [f"turn {i}" for i in range(6)]))
    assert contents(store.turns(ns, "s1", start=2, stop=4)) == ["turn 2", "turn 3"]
    assert contents(store.turns(ns, "s1", start=4)) == ["turn 4", "turn 5"]
    # A long session's tail, in order (first_held_index reads it for each host turn).
    assert contents(store.turns(ns, "s1", last=2)) == ["turn 4", "turn 5"]
    assert contents(store.turns(ns, "s1", last=10)) == contents(store.turns(ns, "s1"))
    assert contents(store.turns(ns, "s1", stop=4, last=3)) == ["turn 1", "turn 2", "turn 3"]


def test_a_session_s_turns_by_id_and_metadata_by_position(store: Store, ns):
    """What a run of the OpenAI Agents session reads (the call ids it meets, the metadata of the turns it shows):
    each read costs what it names, not the whole session."""
    store.capture(ns, req("s1", [{"role": "user", "content": f"turn {i}", "id": f"m{i}", "metadata": {"i": i}}
                                 for i in range(6)]))
    store.capture(ns, req("s2", [{"role": "user", "content": "other", "id": "m1"}]))
    assert [(t.external_id, t.index) for t in store.turns(ns, "s1", external_ids=["m4", "m1", "nope", "m4"])] == [
        ("m1", 1), ("m4", 4)]
    assert store.turns(ns, "s1", external_ids=[]) == []
    ids = {t.index: t.turn_id for t in store.turns(ns, "s1")}
    assert store.turn_metadata(ns, "s1", start=2, stop=4) == {ids[2]: {"i": 2}, ids[3]: {"i": 3}}
    assert set(store.turn_metadata(ns, "s1", start=4)) == {ids[4], ids[5]}
    assert store.turn_metadata(ns, "s1", start=3, stop=3) == {}


def test_a_session_s_turns_of_one_role(store: Store, ns):
    """What the Claude Code prompt hook reads for a session's last compaction: its system turns, not every turn."""
    store.capture(ns, req("s1", [{"role": "user", "content": "a", "id": "m1"}, {"role": "system", "content": "b"},
                                 {"role": "assistant", "content": "c", "id": "m3"}, {"role": "system", "content": "d"}]))
    store.capture(ns, req("s2", [{"role": "system", "content": "other"}]))
    assert [(t.index, t.content) for t in store.turns(ns, "s1", role="system")] == [(1, "b"), (3, "d")]
    assert contents(store.turns(ns, "s1", role="system", last=1)) == ["d"]
    assert contents(store.turns(ns, "s1", role="assistant", last=5)) == ["c"]
    assert contents(store.turns(ns, "s1", role="system", start=2)) == ["d"]
    assert contents(store.turns(ns, "s1", role="assistant", external_ids=["m1", "m3"])) == ["c"]
    assert store.turns(ns, "s1", role="tool") == []


@pytest.mark.parametrize("second", [
    ["a", "B"],
    [{"role": "assistant", "content": "a"}],
])
def test_conflicting_turn_at_a_position_writes_nothing(store: Store, ns, second):
    store.capture(ns, req("s1", ["a", "b"]))
    with pytest.raises(CaptureConflict):
        store.capture(ns, req("s1", second))
    assert contents(store.turns(ns, "s1")) == ["a", "b"]
    assert len(store.receipts(ns)) == 1


def test_conflicting_turn_with_a_caller_id_writes_nothing(store: Store, ns):
    store.capture(ns, req("s1", [{"role": "user", "content": "x", "id": "m1"}]))
    with pytest.raises(CaptureConflict, match="m1"):
        store.capture(ns, req("s1", [{"role": "user", "content": "new", "id": "m9"},
                                     {"role": "user", "content": "changed", "id": "m1"}]))
    assert contents(store.turns(ns, "s1")) == ["x"]


def test_session_date_is_kept_and_a_different_one_warns(store: Store, ns):
    store.capture(ns, req("s1", ["a"], date="2023-05-08"))
    r = store.capture(ns, req("s1", ["a", "b"], date="2024-01-01"))
    assert r.session_date == "2023-05-08T00:00:00"
    assert [w.code for w in r.warnings] == ["session_date_kept"]
    undated = store.capture(ns, req("s2", ["a"]))
    assert undated.session_date is None
    dated = store.capture(ns, req("s2", ["a", "b"], date="2023-01-02"))
    assert (dated.session_date, dated.warnings) == ("2023-01-02T00:00:00", [])


def test_capture_many_is_all_or_nothing(store: Store, ns):
    store.capture(ns, req("s1", ["a"]))
    with pytest.raises(CaptureConflict):
        store.capture_many(ns, [req("s2", ["fresh"]), req("s1", ["changed"])])
    assert [s.session_id for s in store.sessions(ns)] == ["s1"]
    receipts = store.capture_many(ns, [req("s3", ["x"]), req("s2", ["y"]), req("s3", ["x", "z"])])
    assert [r.turns_stored for r in receipts] == [1, 1, 1]
    assert [s.session_id for s in store.sessions(ns)] == ["s1", "s3", "s2"]
    assert contents(store.turns(ns, "s3")) == ["x", "z"]


# -- idempotency ---------------------------------------------------------------------------------


def test_idempotency_key_replays_the_stored_receipt(store: Store, ns):
    first = store.capture(ns, req("s1", ["a", "b"], key="k1"))
    replay = store.capture(ns, req("s1", ["a", "b"], key="k1"))
    assert replay.replayed and not first.replayed
    assert (replay.receipt_id, replay.turn_ids, replay.turns_stored) == (first.receipt_id, first.turn_ids, 2)
    assert len(store.receipts(ns)) == 1
    assert len(store.turns(ns, "s1")) == 2


def test_a_replay_is_counted_once_in_the_ranking_statistics(store: Store, ns):
    """Reviewer: on PostgreSQL each replay of a keyed capture counted its turns again (3 turns for 1 stored, for
    good: forgetting subtracts once), so the namespace's statistics drifted from SQLite's."""
    store.capture(ns, req("s1", ["zebra crossing", "red light"], key="k1"))
    once = _statistics(store, ns)
    for _ in range(2):
        assert store.capture(ns, req("s1", ["zebra crossing", "red light"], key="k1")).replayed
        (replayed,) = store.capture_many(ns, [req("s1", ["zebra crossing", "red light"], key="k1")])
        assert replayed.replayed
    assert _statistics(store, ns) == once and once[0][0] == 2
    assert store.term_stats(ns, ["zebra"])[1]["zebra"][0] == 1


def test_vacuum_counts_the_ranking_statistics_again(store: Store, ns):
    """A PostgreSQL store whose statistics a replay inflated (before that was fixed) is repaired by ``vacuum``."""
    store.capture(ns, req("s1", ["zebra crossing", "red light"]))
    store.capture(ns + "_other", req("s1", ["zebra"]))
    right = _statistics(store, ns)
    if not isinstance(store, SQLiteStore):  # what three replays did there
        store.transaction(lambda c: (c.execute("UPDATE rank_namespaces SET n_turns = 3 * n_turns, n_tokens ="
                                               " 3 * n_tokens"), c.execute("UPDATE rank_terms SET n_turns ="
                                                                           " 3 * n_turns, n_content = 3 * n_content")))
        assert _statistics(store, ns) != right
    store.vacuum()
    assert _statistics(store, ns) == right and store.term_stats(ns + "_other", ["zebra"])[0] == 1


def test_idempotency_key_with_other_content_conflicts(store: Store, ns):
    store.capture(ns, req("s1", ["a"], key="k1"))
    with pytest.raises(IdempotencyConflict):
        store.capture(ns, req("s1", ["a", "b"], key="k1"))
    with pytest.raises(IdempotencyConflict, match="in session 's1'.*make one per exchange") as err:
        store.capture(ns, req("s2", ["a"], key="k1"))
    assert err.value.first_session == "s1"
    assert contents(store.turns(ns, "s1")) == ["a"]
    assert [s.session_id for s in store.sessions(ns)] == ["s1"]


def test_concurrent_writers_with_one_key_store_one_receipt(store: Store, ns):
    def send(_):
        return store.capture(ns, req("s1", ["a", "b", "c"], key="same"))

    with ThreadPoolExecutor(6) as pool:
        receipts = list(pool.map(send, range(12)))
    assert len({r.receipt_id for r in receipts}) == 1
    assert sum(not r.replayed for r in receipts) == 1
    assert len(store.receipts(ns)) == 1
    assert contents(store.turns(ns, "s1")) == ["a", "b", "c"]


def test_concurrent_appends_to_one_session_lose_and_duplicate_nothing(store: Store, ns):
    def send(i):
        # Each writer sends the conversation so far plus its own turn, identified by id.
        return store.capture(ns, req("s1", [{"role": "user", "content": f"turn {i}", "id": f"m{i}"}]))

    with ThreadPoolExecutor(8) as pool:
        receipts = list(pool.map(send, range(40)))
    assert sum(r.turns_stored for r in receipts) == 40
    turns = store.turns(ns, "s1")
    assert [t.index for t in turns] == list(range(40))
    assert sorted(t.external_id for t in turns) == sorted(f"m{i}" for i in range(40))


# -- namespaces ----------------------------------------------------------------------------------


def test_no_read_crosses_namespaces(store: Store, ns):
    other = ns + "_other"
    a = store.capture(ns, req("s1", ["the zebra lives here"], key="k"))
    b = store.capture(other, req("s1", ["the zebra lives there", "and more"], key="k"))
    assert not b.replayed and a.turn_ids != b.turn_ids
    assert contents(store.search_terms(ns, ["zebra"], k=10)) == ["the zebra lives here"]
    assert contents(store.search_turns(other, fts5_query("zebra"), k=10)) == ["the zebra lives there"]
    assert [s.turn_count for s in store.sessions(ns)] == [1]
    assert contents(store.turns(ns, "s1")) == ["the zebra lives here"]
    with pytest.raises(NotFoundError):
        store.get_turn(ns, b.turn_ids[0])
    assert [r.receipt_id for r in store.receipts(ns)] == [a.receipt_id]
    assert store.sessions(ns + "_empty") == []


# -- cursors (named host state) ------------------------------------------------------------------


def test_a_cursor_is_saved_by_compare_and_set_and_stays_in_its_namespace(store: Store, ns):
    assert (store.get_cursor(ns, "c").revision, store.get_cursor(ns, "c").value) == (0, {})
    first = store.put_cursor(ns, "c", {"offset": 10, "path": "/tmp/é.jsonl"}, 0)
    assert first is not None and first.revision == 1
    got = store.get_cursor(ns, "c")
    assert (got.value, got.revision) == ({"offset": 10, "path": "/tmp/é.jsonl"}, 1)
    assert got.updated_at is not None and got.updated_at.tzinfo is not None
    assert store.put_cursor(ns, "c", {"offset": 99}, 0) is None  # it exists: "never saved" is stale
    assert store.put_cursor(ns, "c", {"offset": 99}, 5) is None  # not the stored revision
    assert store.put_cursor(ns, "c", {"offset": 20}, 1).revision == 2
    assert store.get_cursor(ns, "c").value == {"offset": 20}
    assert store.get_cursor(ns + "_other", "c").revision == 0
    with pytest.raises(InvalidInput):
        store.put_cursor(ns, "c", {"bad": float("nan")}, 2)


def test_concurrent_cursor_saves_from_one_revision_let_exactly_one_win(store: Store, ns):
    store.put_cursor(ns, "offset", {"offset": 0}, 0)

    def save(i):
        return store.put_cursor(ns, "offset", {"offset": i}, 1)

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(save, range(12)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0].revision == 2
    assert store.get_cursor(ns, "offset").value == winners[0].value


# -- search --------------------------------------------------------------------------------------

HOSTILE = [
    '"', '""', "'", "AND", "OR", "NOT", "NEAR(a b)", "*", "a*", "^x", "col:val", "(((", ")",
    "-- ; DROP TABLE turns", "\\", "%", "_", "' OR 1=1 --", "{}[]", "zebra OR", '"zebra" AND "lion"',
    "café", "日本語のテキスト", "😀 emoji", "a" * 500, "x\x00y", "plainto_tsquery('english', 'x')", "&|!<->:*",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_any_query_string_is_safe(store: Store, ns, query):
    store.capture(ns, req("s1", ["the zebra and the lion", "NEAR the cafe, 1=1"]))
    hits = Memory(store=store, namespace=ns).search(query, k=5)
    assert all(h.session_id == "s1" for h in hits)


def test_search_ranks_best_first_and_breaks_ties_by_session_then_position(store: Store, ns):
    store.capture(ns, req("b", ["apples and pears", "nothing here", "apples and pears"]))
    store.capture(ns, req("a", ["apples and pears", "apples apples apples"]))
    store.capture(ns, req("c", ["a long turn that mentions apples once among many many other words here"]))
    hits = store.search_terms(ns, ["apples"], k=10)
    top, tail = hits[0], hits[-1]
    assert (top.session_id, top.index) == ("a", 1)
    assert [(h.session_id, h.index) for h in hits[1:4]] == [("a", 0), ("b", 0), ("b", 2)]
    assert hits[1].score == hits[2].score == hits[3].score
    assert top.score > hits[1].score > tail.score > 0
    assert (tail.session_id, tail.index) == ("c", 0)
    assert [(h.session_id, h.index) for h in store.search_terms(ns, ["apples"], k=2)] == [("a", 1), ("a", 0)]
    assert [h.index for h in store.search_terms(ns, ["apples"], k=10, session_id="b")] == [0, 2]


def test_search_stems_and_folds_case_and_diacritics(store: Store, ns):
    store.capture(ns, req("s1", ["She was WORKING at the Café du Monde", "unrelated text"]))
    mem = Memory(store=store, namespace=ns)
    for query in ("works", "cafe", "CAFÉ", "monde"):
        assert contents(mem.search(query)) == ["She was WORKING at the Café du Monde"], query


def test_content_outranks_a_speaker_name_match(store: Store, ns):
    store.capture(ns, req("s1", [{"role": "user", "name": "Maya", "content": "hello there friend"},
                                 {"role": "user", "name": "Bob", "content": "maya said hello there"}]))
    hits = store.search_terms(ns, ["maya"], k=5)
    assert [h.name for h in hits] == ["Bob", "Maya"]


def test_search_turns_accepts_fts5_query_expressions(store: Store, ns):
    store.capture(ns, req("s1", ['she said "quote" loudly', "other"]))
    match = fts5_query('"quote" OR nothing')
    assert contents(store.search_turns(ns, match, k=5)) == ['she said "quote" loudly']
    assert store.search_terms(ns, query_terms("the of and"), k=5) == []


@pytest.mark.parametrize("query", ["the and of", "OR", "AND NOT", '"', "  ", "NOT (the) OR \"of\""])
def test_a_query_of_only_stop_words_or_operators_finds_nothing_and_says_why(store_url, ns, query):
    with Memory(store_url, namespace=ns) as mem:
        mem.capture("s1", [{"role": "user", "content": c}
                           for c in ("the end of it or not", "and the rest of the story", "OR AND NOT")])
        assert mem.search(query) == []
        result = mem.explain_search(query)
        assert (result.hits, result.terms) == ([], [])
        assert result.reason.startswith("nothing to search for: ")
        found = mem.explain_search("the story, or not")  # one content word is enough
        assert (found.terms, [h.content for h in found.hits], found.reason) == (
            ["story"], ["and the rest of the story"], None)


def test_a_named_speakers_own_turn_outranks_a_reply_and_zero_score_hits_are_left_out(store_url, ns):
    with Memory(store_url, namespace=ns) as mem:
        for s in load_demo_sessions():
            mem.capture(s["session_id"], s["turns"], session_date=s["date"])
        hits = mem.search("where does Maya work now?", k=5)
        assert [(h.name or h.role, h.session_id, h.index) for h in hits] == [
            ("Maya", "demo-2", 0), ("assistant", "demo-1", 1)]  # "Congratulations on the new job!" second
        assert all(h.score > ZERO_SCORE for h in hits)
        # "maya" alone is in more than half the turns (BM25 gives it ~0): her turns are still listed.
        only = mem.search("maya", k=20)
        assert len(only) == 7 and {h.name for h in only} == {"Maya"}


# -- receipts ------------------------------------------------------------------------------------


def test_receipts_round_trip_and_save_receipt_overwrites(store: Store, ns):
    r1 = store.capture(ns, req("s1", ["a"]))
    r2 = store.capture(ns, req("s2", ["b"], key="k2"))
    assert [r.receipt_id for r in store.receipts(ns)] == [r1.receipt_id, r2.receipt_id]
    assert store.receipts(ns, "s2") == [r2]
    updated = r2.model_copy(update={"extraction": ExtractionReport(status="queued", reason="later")})
    store.save_receipt(ns, updated)
    assert store.receipts(ns, "s2")[0].extraction.reason == "later"
    with pytest.raises(NotFoundError):
        store.save_receipt(ns + "_other", updated)


# -- migrations ----------------------------------------------------------------------------------


def test_migrating_twice_changes_nothing(fresh_url):
    store = open_store(fresh_url)
    latest = store.schema_version()
    assert latest >= 2
    assert store.migrate() == []
    store.close()
    again = open_store(fresh_url)
    assert (again.schema_version(), again.migrate()) == (latest, [])
    again.close()


def test_both_engines_are_at_the_same_schema_version(fresh_url):
    from tortoise_sdk.store.postgres.migrations import POSTGRES_MIGRATIONS

    assert [m.version for m in POSTGRES_MIGRATIONS] == [m.version for m in SQLITE_MIGRATIONS]
    with _closing(open_store(fresh_url)) as store:
        assert store.schema_version() == SQLITE_MIGRATIONS[-1].version


def test_an_older_database_is_upgraded_and_keeps_its_data(fresh_url):
    h = content_hash(Turn(role="user", content="an old turn about gardening"))
    if fresh_url.startswith("postgresql://"):
        import psycopg

        from tortoise_sdk.store.postgres.migrations import POSTGRES_MIGRATIONS, migrate_postgres

        with psycopg.connect(fresh_url, autocommit=True) as conn:
            assert migrate_postgres(conn, POSTGRES_MIGRATIONS[:1]) == [1]
            conn.execute("INSERT INTO sessions VALUES ('ns', 's1', NULL, %s, %s)", (T0, T0))
            conn.execute("INSERT INTO turns (turn_id, namespace, session_id, idx, role, content, content_hash,"
                         " created_at) VALUES ('t_old', 'ns', 's1', 0, 'user', 'an old turn about gardening',"
                         " %s, %s)", (h, T0))
    else:
        conn = sqlite3.connect(fresh_url, isolation_level=None)
        assert migrate_sqlite(conn, SQLITE_MIGRATIONS[:1]) == [1]
        conn.execute("INSERT INTO sessions VALUES ('ns', 's1', NULL, '2024-01-01T00:00:00+00:00',"
                     " '2024-01-01T00:00:00+00:00')")
        conn.execute("INSERT INTO turns (turn_id, namespace, session_id, idx, role, content, content_hash,"
                     " created_at) VALUES ('t_old', 'ns', 's1', 0, 'user', 'an old turn about gardening', ?,"
                     " '2024-01-01T00:00:00+00:00')", (h,))
        conn.execute("INSERT INTO turns_fts (rowid, content, name) SELECT rowid, content, name FROM turns")
        conn.close()
    with _closing(open_store(fresh_url)) as store:
        assert store.schema_version() == SQLITE_MIGRATIONS[-1].version
        assert [h.turn_id for h in store.search_terms("ns", ["gardening"], k=5)] == ["t_old"]
        r = store.capture("ns", req("s1", [{"role": "user", "content": "an old turn about gardening"}, "new"]))
        assert r.turns_stored == 1
        assert store.memories("ns") == []


def test_migration_7_folds_duplicate_pending_jobs_and_backfills_watermarks(fresh_url):
    rows = [("j_a", "pending", T0), ("j_b", "pending", T0 + timedelta(seconds=1)), ("j_c", "done", T0)]
    turns = [("t0", 0, T0), ("t1", 1, T0 + timedelta(seconds=1)), ("t2", 2, T0 + timedelta(seconds=9))]
    extracted_at = T0 + timedelta(seconds=5)  # after t0 and t1, before t2
    if fresh_url.startswith("postgresql://"):
        import psycopg

        from tortoise_sdk.store.postgres.migrations import POSTGRES_MIGRATIONS, migrate_postgres

        with psycopg.connect(fresh_url, autocommit=True) as conn:
            migrate_postgres(conn, POSTGRES_MIGRATIONS[:6])
            conn.execute("INSERT INTO sessions VALUES ('ns', 's1', NULL, %s, %s)", (T0, T0))
            for tid, idx, at in turns:
                conn.execute("INSERT INTO turns (turn_id, namespace, session_id, idx, role, content, content_hash,"
                             " created_at) VALUES (%s, 'ns', 's1', %s, 'user', 'x', 'h', %s)", (tid, idx, at))
            for jid, status, at in rows:
                conn.execute("INSERT INTO jobs (job_id, namespace, session_id, status, errors, created_at, updated_at)"
                             " VALUES (%s, 'ns', 's1', %s, '[\"old\"]', %s, %s)", (jid, status, at, at))
            conn.execute("INSERT INTO extractions (extraction_id, namespace, session_id, status, report, created_at)"
                         " VALUES ('x1', 'ns', 's1', 'ok', '{}', %s)", (extracted_at,))
    else:
        conn = sqlite3.connect(fresh_url, isolation_level=None)
        migrate_sqlite(conn, SQLITE_MIGRATIONS[:6])
        conn.execute("INSERT INTO sessions VALUES ('ns', 's1', NULL, ?, ?)", (T0.isoformat(), T0.isoformat()))
        for tid, idx, at in turns:
            conn.execute("INSERT INTO turns (turn_id, namespace, session_id, idx, role, content, content_hash,"
                         " created_at) VALUES (?, 'ns', 's1', ?, 'user', 'x', 'h', ?)", (tid, idx, at.isoformat()))
        for jid, status, at in rows:
            conn.execute("INSERT INTO jobs (job_id, namespace, session_id, status, errors, created_at, updated_at)"
                         " VALUES (?, 'ns', 's1', ?, '[\"old\"]', ?, ?)", (jid, status, at.isoformat(), at.isoformat()))
        conn.execute("INSERT INTO extractions (extraction_id, namespace, session_id, status, report, created_at)"
                     " VALUES ('x1', 'ns', 's1', 'ok', '{}', ?)", (extracted_at.isoformat(),))
        conn.close()
    with _closing(open_store(fresh_url)) as store:
        jobs = {j.job_id: j for j in store.jobs("ns")}
        assert (jobs["j_a"].status, jobs["j_a"].errors, jobs["j_a"].due_at) == ("pending", ["old"], None)
        assert (jobs["j_b"].status, jobs["j_b"].errors) == (
            "done", ["old", "coalesced into the oldest pending job of the session (migration 7)"])
        assert jobs["j_c"].status == "done"
        state = store.extraction_state("ns", "s1")
        assert (state.watermark, state.prompts_sha, state.extraction_id) == (1, None, "x1")
        assert store.enqueue_job("ns", "s1").job_id == "j_a"


class _closing:
    def __init__(self, store):
        self.store = store

    def __enter__(self):
        return self.store

    def __exit__(self, *exc):
        self.store.close()


# -- memories, supersession, retraction ------------------------------------------------------------


def _finalize(result):
    return ExtractionReport(status="ok", counts=dict(result.counts), outcomes=dict(result.outcomes))


def _plan(session_id, items=(), entities=(), retractions=(), receipt=None, valid_at=T0):
    return ExtractionPlan(session_id=session_id, extraction_id=f"x_{uuid.uuid4().hex[:8]}", valid_at=valid_at,
                          entities=list(entities), items=list(items), retractions=list(retractions),
                          receipt=receipt)


@pytest.fixture
def seeded(store: Store, ns):
    r = store.capture(ns, req("s1", [{"role": "user", "name": "Maya", "content": "I started at Acme as a designer"},
                                     {"role": "user", "name": "Maya", "content": "I adopted a cat named Miso"}]))
    return store, ns, r


def test_memories_are_written_with_entities_sources_and_receipt(seeded):
    store, ns, r = seeded
    t0, t1 = r.turn_ids
    result = store.write_extraction(ns, _plan("s1", receipt=r, entities=[EntityPlan("Maya", "person", "the user")],
                                              items=[
        ItemPlan("point", "Maya works at Acme as a designer", about=("Maya", "Acme"), search_keys=("job", "employer"),
                 sources=(SourcePlan(t0, "started at Acme"),)),
        ItemPlan("event", "Maya adopted a cat named Miso", about=("Maya",), when="2023-05",
                 sources=(SourcePlan(t1, "adopted a cat"),)),
    ]), finalize=_finalize)
    assert result.outcomes == {"ADD": 2}
    assert result.counts == {"point": 1, "event": 1, "entity": 2}
    mems = store.memories(ns)
    assert [(m.kind, m.content, m.status) for m in mems] == [
        ("point", "Maya works at Acme as a designer", "live"), ("event", "Maya adopted a cat named Miso", "live")]
    assert mems[0].id == result.memory_ids[0]
    assert sorted(mems[0].entities) == ["Acme", "Maya"]
    assert mems[0].search_keys == ["job", "employer"]
    assert [(s.turn_id, s.quote, s.session_id) for s in mems[0].sources] == [(t0, "started at Acme", "s1")]
    assert (mems[1].when, mems[1].valid_at) == ("2023-05", T0)
    assert store.get_memory(ns, mems[1].id) == mems[1]
    assert sorted(e["name"] for e in store.find_entities(ns, ["maya", "ACME", "nobody"])) == ["Acme", "Maya"]
    assert store.find_entities(ns, ["maya"])[0]["note"] == "the user"
    assert store.receipts(ns)[0].extraction.outcomes == {"ADD": 2}
    assert [m.id for m in store.memories_about(ns, ["Maya"], k=5)][0] in {m.id for m in mems}
    assert [m.content for m in store.memories_about(ns, ["acme"], k=5)] == ["Maya works at Acme as a designer"]
    found = store.search_memories(ns, fts5_query("employer"), k=5)
    assert [(m.content, s > 0) for m, s in found] == [("Maya works at Acme as a designer", True)]
    found = store.search_memories(ns, fts5_query("miso"), k=5)
    assert [m.kind for m, _ in found] == ["event"]
    with pytest.raises(NotFoundError):
        store.get_memory(ns + "_other", mems[0].id)
    assert store.memories(ns + "_other") == []
    assert store.search_memories(ns + "_other", fts5_query("miso"), k=5) == []
    assert set(store.turn_metadata(ns, "s1")) == {t0, t1}


def test_same_fact_again_is_a_noop_and_supersession_keeps_history(seeded):
    store, ns, r = seeded
    t0 = r.turn_ids[0]
    first = store.write_extraction(ns, _plan("s1", items=[ItemPlan("point", "Maya works at Acme", about=("Maya",),
                                                                   sources=(SourcePlan(t0, None),))]),
                                   finalize=_finalize)
    old_id = first.memory_ids[0]
    noop = store.write_extraction(ns, _plan("s1", items=[ItemPlan("point", "maya works at ACME!")]),
                                  finalize=_finalize)
    assert (noop.outcomes, noop.memory_ids) == ({"NOOP": 1}, [old_id])
    later = T0 + timedelta(days=30)
    update = store.write_extraction(ns, _plan("s1", valid_at=later, items=[
        ItemPlan("point", "Maya works at Globex", about=("Maya",), supersedes=old_id)]), finalize=_finalize)
    new_id = update.memory_ids[0]
    assert update.outcomes == {"UPDATE": 1}
    assert [m.id for m in store.memories(ns)] == [new_id]
    everything = store.memories(ns, include_superseded=True)
    assert [(m.id, m.status) for m in everything] == [(old_id, "superseded"), (new_id, "live")]
    old = store.get_memory(ns, old_id)
    assert (old.superseded_by, old.invalid_at) == (new_id, later)
    assert store.get_memory(ns, new_id).supersedes == old_id
    assert [m.id for m in store.supersession_chain(ns, old_id)] == [old_id, new_id]
    # the turn's fact is no longer live, and it says which memory replaced it (the reflex flags the turn by it)
    assert store.turn_fact_status(ns, [t0, r.turn_ids[1]]) == {t0: (0, 1, frozenset({new_id}))}
    assert [m.id for m in store.supersession_chain(ns, new_id)] == [old_id, new_id]
    assert store.search_memories(ns, fts5_query("acme"), k=5) == []
    assert [m.id for m, _ in store.search_memories(ns, fts5_query("acme"), k=5, include_superseded=True)] == [old_id]
    # Superseding the old id again resolves to the live head of the chain.
    again = store.write_extraction(ns, _plan("s1", valid_at=later + timedelta(days=30), items=[
        ItemPlan("point", "Maya works at Initech", supersedes=old_id)]), finalize=_finalize)
    assert again.outcomes == {"UPDATE": 1}
    assert [m.status for m in store.supersession_chain(ns, old_id)] == ["superseded", "superseded", "live"]
    unknown = store.write_extraction(ns, _plan("s1", items=[ItemPlan("point", "Maya likes tea", supersedes="m_nope")]),
                                     finalize=_finalize)
    assert unknown.outcomes == {"ADD": 1}
    assert [w.code for w in unknown.warnings] == ["supersedes_unknown"]


def test_an_older_session_extracted_late_never_retires_a_newer_fact(seeded):
    # Backfilled history: the June fact was written first, then a March session names it as the memory it
    # updates (S3 showed it as a prior) and retracts another June fact. The June facts stay live; March's
    # is kept as history, valid until June. Before, March retired June with invalid_at before valid_at.
    store, ns, r = seeded
    march, june = T0 + timedelta(days=60), T0 + timedelta(days=165)
    first = store.write_extraction(ns, _plan("s1", valid_at=june, items=[
        ItemPlan("point", "Maya works at Globex", about=("Maya",), sources=(SourcePlan(r.turn_ids[0], None),)),
        ItemPlan("point", "Maya has a dog")]), finalize=_finalize)
    globex, dog = first.memory_ids
    late = store.write_extraction(ns, _plan("s1", valid_at=march, items=[
        ItemPlan("point", "Maya works at Acme", about=("Maya",), supersedes=globex)],
        retractions=[RetractionPlan("Maya has a dog", target=dog)]), finalize=_finalize)
    assert late.outcomes == {"ADD": 1}
    assert [w.code for w in late.warnings] == ["older_than_live", "older_than_live"]
    acme = store.get_memory(ns, late.memory_ids[0])
    assert (acme.status, acme.superseded_by, acme.valid_at, acme.invalid_at) == ("superseded", globex, march, june)
    assert [(m.id, m.invalid_at) for m in store.memories(ns)] == [(globex, None), (dog, None)]
    assert [m.id for m in store.supersession_chain(ns, acme.id)] == [acme.id, globex]
    # a version between two others takes its place in the one history, by date; forgetting keeps it one line
    jan, feb, mar = T0, T0 + timedelta(days=31), T0 + timedelta(days=60)
    oslo = store.write_extraction(ns, _plan("s1", valid_at=jan, items=[ItemPlan("point", "Maya lives in Oslo")]),
                                  finalize=_finalize).memory_ids[0]
    rome = store.write_extraction(ns, _plan("s1", valid_at=mar, items=[
        ItemPlan("point", "Maya lives in Rome", supersedes=oslo)]), finalize=_finalize).memory_ids[0]
    paris = store.write_extraction(ns, _plan("s1", valid_at=feb, items=[
        ItemPlan("point", "Maya lives in Paris", supersedes=oslo)]), finalize=_finalize).memory_ids[0]
    chain = store.supersession_chain(ns, rome)
    assert [m.id for m in chain] == [oslo, paris, rome] == [m.id for m in store.supersession_chain(ns, paris)]
    assert [(m.valid_at, m.invalid_at) for m in chain] == [(jan, feb), (feb, mar), (mar, None)]
    store.forget_memory(ns, paris)
    assert [m.id for m in store.supersession_chain(ns, rome)] == [oslo, rome]
    store.forget_memory(ns, rome)
    assert [(m.id, m.status, m.invalid_at) for m in store.supersession_chain(ns, oslo)] == [(oslo, "live", None)]
    # an undated write is news as of now: it supersedes as before
    now = store.write_extraction(ns, _plan("s1", valid_at=None, items=[
        ItemPlan("point", "Maya works at Initech", supersedes=globex)]), finalize=_finalize)
    assert now.outcomes == {"UPDATE": 1} and store.get_memory(ns, globex).status == "superseded"


def test_retraction_deletes_by_id_or_by_matching_content(seeded):
    store, ns, r = seeded
    res = store.write_extraction(ns, _plan("s1", items=[ItemPlan("point", "Maya has a cat named Miso"),
                                                        ItemPlan("point", "Maya lives in Lisbon")]),
                                 finalize=_finalize)
    cat, city = res.memory_ids
    by_text = store.write_extraction(ns, _plan("s1", retractions=[
        RetractionPlan("maya has a cat called Miso", sources=(SourcePlan(r.turn_ids[1], "no cat"),))]),
        finalize=_finalize)
    assert (by_text.outcomes, by_text.memory_ids) == ({"DELETE": 1}, [cat])
    assert store.get_memory(ns, cat).status == "deleted"
    by_id = store.write_extraction(ns, _plan("s1", retractions=[RetractionPlan("whatever", target=city)]),
                                   finalize=_finalize)
    assert by_id.memory_ids == [city]
    miss = store.write_extraction(ns, _plan("s1", retractions=[RetractionPlan("Maya owns a yacht")]),
                                  finalize=_finalize)
    assert (miss.outcomes, [w.code for w in miss.warnings]) == ({}, ["retraction_unmatched"])
    assert store.memories(ns) == []


# -- jobs ----------------------------------------------------------------------------------------


def _lease(store, ns, now=None, lease_s=30.0, max_attempts=3):
    return store.lease_job(ns, lease_s=lease_s, max_attempts=max_attempts, now=now)


def test_jobs_lease_in_order_and_finish(store: Store, ns):
    j1 = store.enqueue_job(ns, "s1", "r1")
    j2 = store.enqueue_job(ns, "s2")
    assert (j1.status, j1.attempts, j1.revision, j1.receipt_id) == ("pending", 0, 0, "r1")
    a = _lease(store, ns)
    b = _lease(store, ns)
    assert (a.job_id, b.job_id) == (j1.job_id, j2.job_id)
    assert (a.status, a.attempts, a.revision) == ("running", 1, 1)
    assert a.lease_until is not None
    assert _lease(store, ns) is None
    assert store.lease_job(ns + "_other", lease_s=30, max_attempts=3) is None
    store.finish_job(Fence(a.job_id, a.revision))
    assert store.get_job(a.job_id).status == "done"
    assert [j.job_id for j in store.jobs(ns)] == [j1.job_id, j2.job_id]
    assert [j.job_id for j in store.jobs(ns, status="running")] == [j2.job_id]
    with pytest.raises(NotFoundError):
        store.get_job("j_missing")


def test_an_expired_lease_is_taken_over_and_the_late_worker_is_fenced_off(seeded):
    store, ns, r = seeded
    job = store.enqueue_job(ns, "s1", r.receipt_id)
    slow = _lease(store, ns, lease_s=5)
    assert _lease(store, ns) is None  # still leased
    later = datetime.now(timezone.utc) + timedelta(seconds=60)
    fast = _lease(store, ns, now=later, lease_s=5)
    assert (fast.job_id, fast.revision, fast.attempts) == (job.job_id, 2, 2)
    assert "lease expired" in fast.errors[0]
    plan = _plan("s1", items=[ItemPlan("point", "Maya works at Acme")])
    with pytest.raises(LeaseLost):
        store.write_extraction(ns, plan, finalize=_finalize, fence=Fence(job.job_id, slow.revision))
    with pytest.raises(LeaseLost):
        store.finish_job(Fence(job.job_id, slow.revision))
    with pytest.raises(LeaseLost):
        store.fail_job(Fence(job.job_id, slow.revision), "late", max_attempts=3)
    assert store.memories(ns) == []
    if hasattr(store, "fenced_writes"):
        assert store.fenced_writes == 3
    store.write_extraction(ns, plan, finalize=_finalize, fence=Fence(job.job_id, fast.revision))
    done = store.get_job(job.job_id)
    assert (done.status, done.revision, done.lease_until) == ("done", 2, None)
    assert [m.content for m in store.memories(ns)] == ["Maya works at Acme"]


def test_a_job_failing_n_times_stops_with_its_errors_kept(store: Store, ns):
    job = store.enqueue_job(ns, "s1")
    for attempt in (1, 2, 3):
        lease = _lease(store, ns, max_attempts=3)
        assert (lease.job_id, lease.attempts) == (job.job_id, attempt)
        after = store.fail_job(Fence(job.job_id, lease.revision), f"boom {attempt}", max_attempts=3)
        assert after.status == ("failed" if attempt == 3 else "pending")
    assert _lease(store, ns, max_attempts=3) is None
    final = store.get_job(job.job_id)
    assert (final.status, final.attempts) == ("failed", 3)
    assert final.errors == ["attempt 1: boom 1", "attempt 2: boom 2", "attempt 3: boom 3"]


def test_a_failed_attempt_is_due_again_after_its_backoff(store: Store, ns):
    job = store.enqueue_job(ns, "s1")
    lease = _lease(store, ns)
    after = store.fail_job(Fence(job.job_id, lease.revision), "s1: server", max_attempts=3, retry_in_s=120)
    assert after.status == "pending"
    assert (after.due_at - after.updated_at).total_seconds() == pytest.approx(120, abs=1)
    assert _lease(store, ns) is None  # not back to back
    # A capture folding in, even one that fills the batch, does not cut the backoff short.
    assert store.enqueue_job(ns, "s1", waiting_turns=50, due_after_turns=20).due_at == after.due_at
    assert _lease(store, ns) is None
    assert _lease(store, ns, now=after.due_at + timedelta(seconds=1)).attempts == 2
    # A pass leaves out the jobs it ran already (a flush takes jobs that are not due).
    other = store.enqueue_job(ns, "s2")
    assert store.lease_job(ns, lease_s=30, max_attempts=3, due_only=False, exclude={other.job_id}) is None
    assert store.lease_job(ns, lease_s=30, max_attempts=3, due_only=False, exclude=()).job_id == other.job_id


def test_a_failed_job_whose_session_has_a_new_pending_job_hands_the_retry_over(store: Store, ns):
    # One pending job a session: a capture during the run queued another, which retries these turns too.
    job = store.enqueue_job(ns, "s1")
    lease = _lease(store, ns)
    newer = store.enqueue_job(ns, "s1", waiting_turns=1)
    assert newer.job_id != job.job_id and newer.due_at is None
    settled = store.fail_job(Fence(job.job_id, lease.revision), "s1: server", max_attempts=3, retry_in_s=60)
    assert settled.status == "done"
    assert settled.errors == ["attempt 1: s1: server", f"retried as pending job {newer.job_id} of the same session"]
    waiting = store.get_job(newer.job_id)
    assert waiting.status == "pending"
    assert (waiting.due_at - settled.updated_at).total_seconds() == pytest.approx(60, abs=1)
    # It carries the failure: the error shows on the job that waits, and the attempts go on counting.
    assert (waiting.attempts, waiting.errors) == (1, ["attempt 1: s1: server"])


def test_a_retry_handed_to_a_job_waiting_for_idle_is_due_at_the_retry_and_captures_do_not_push_it_back(
        store: Store, ns):
    # The capture during the run queued a job due only after idle_s (300 s): the retry is due in 60 s.
    job = store.enqueue_job(ns, "s1")
    lease = _lease(store, ns, max_attempts=2)
    newer = store.enqueue_job(ns, "s1", waiting_turns=1, due_after_turns=20, idle_s=300)
    assert (newer.due_at - newer.updated_at).total_seconds() == pytest.approx(300, abs=1)
    settled = store.fail_job(Fence(job.job_id, lease.revision), "s1: server", max_attempts=2, retry_in_s=60)
    waiting = store.get_job(newer.job_id)
    assert (waiting.due_at - settled.updated_at).total_seconds() == pytest.approx(60, abs=1)
    assert store.enqueue_job(ns, "s1", waiting_turns=1, due_after_turns=20, idle_s=300).due_at == waiting.due_at
    # The handed-over retry is the session's second attempt: failing it too fails the job for good.
    retry = _lease(store, ns, now=waiting.due_at + timedelta(seconds=1), max_attempts=2)
    assert (retry.job_id, retry.attempts) == (newer.job_id, 2)
    final = store.fail_job(Fence(retry.job_id, retry.revision), "s1: server again", max_attempts=2, retry_in_s=60)
    assert (final.status, final.errors) == ("failed", ["attempt 1: s1: server", "attempt 2: s1: server again"])


def test_a_retry_handed_to_a_job_that_another_worker_failed_adds_up_both(store: Store, ns):
    # Two workers ran two jobs of the session at once (A stalled past its lease, then B took the job a capture
    # queued meanwhile; a pass that already ran A leaves it out); both failed.
    a = store.enqueue_job(ns, "s1")
    a_lease = _lease(store, ns)
    b = store.enqueue_job(ns, "s1", waiting_turns=1)
    assert _lease(store, ns) is None  # not while A's lease holds
    later = datetime.now(timezone.utc) + timedelta(seconds=120)
    b_lease = store.lease_job(ns, lease_s=30, max_attempts=3, now=later, exclude={a.job_id})
    assert b_lease.job_id == b.job_id
    store.fail_job(Fence(b.job_id, b_lease.revision), "B: provider 500", max_attempts=3)
    store.fail_job(Fence(a.job_id, a_lease.revision), "A: provider 500", max_attempts=3)
    waiting = store.get_job(b.job_id)
    assert (waiting.status, waiting.attempts) == ("pending", 2)
    assert waiting.errors == ["attempt 1: A: provider 500", "attempt 1: B: provider 500"]
    # A third failure is the session's last: the job fails for good, it does not start over.
    c_lease = _lease(store, ns, max_attempts=3)
    store.fail_job(Fence(b.job_id, c_lease.revision), "B again", max_attempts=3)
    assert store.get_job(b.job_id).status == "failed"


def test_a_run_that_reads_every_waiting_turn_settles_the_sessions_failed_jobs(store: Store, ns):
    store.capture(ns, req("s1", ["I work at Acme", "noted"]))
    failed = store.enqueue_job(ns, "s1")
    lease = _lease(store, ns, max_attempts=1)
    assert store.fail_job(Fence(failed.job_id, lease.revision), "s1: server", max_attempts=1).status == "failed"
    later = store.enqueue_job(ns, "s1")
    lease = _lease(store, ns)
    plan = ExtractionPlan(session_id="s1", extraction_id="x-later", valid_at=None,
                          items=[ItemPlan("point", "Maya works at Acme")])
    plan.window = Window(start=0, end=1, base=-1)
    store.write_extraction(ns, plan, finalize=lambda r: ExtractionReport(status="ok"),
                           fence=Fence(later.job_id, lease.revision))
    settled = store.get_job(failed.job_id)
    assert settled.status == "done"
    assert settled.errors[-1] == f"its turns were extracted by job {later.job_id}"
    assert store.jobs(ns, status="failed") == []


def test_a_job_whose_last_lease_expired_is_failed_not_retried(store: Store, ns):
    job = store.enqueue_job(ns, "s1")
    _lease(store, ns, max_attempts=1, lease_s=1)
    later = datetime.now(timezone.utc) + timedelta(seconds=60)
    assert _lease(store, ns, now=later, max_attempts=1) is None
    final = store.get_job(job.job_id)
    assert (final.status, final.attempts, len(final.errors)) == ("failed", 1, 1)
    assert "giving up after 1 attempts" in final.errors[0]


def test_concurrent_workers_lease_each_job_exactly_once(store: Store, ns):
    ids = {store.enqueue_job(ns, f"s{i}").job_id for i in range(30)}
    taken: list[str] = []
    lock = threading.Lock()

    def worker(_):
        while (job := _lease(store, ns)) is not None:
            store.finish_job(Fence(job.job_id, job.revision))
            with lock:
                taken.append(job.job_id)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(4)))
    assert sorted(taken) == sorted(ids)
    assert {j.status for j in store.jobs(ns)} == {"done"}


def test_a_session_has_one_pending_job_that_captures_fold_into(store: Store, ns):
    a = store.enqueue_job(ns, "s1", "r1", waiting_turns=2, due_after_turns=20, idle_s=300)
    b = store.enqueue_job(ns, "s1", "r2", waiting_turns=3, due_after_turns=20, idle_s=300)
    other = store.enqueue_job(ns, "s2", "r3")
    assert a.job_id == b.job_id != other.job_id
    assert (b.status, b.waiting_turns, b.receipt_id) == ("pending", 5, "r2")  # the latest receipt gets the report
    assert store.enqueue_job(ns, "s1").receipt_id == "r2"
    # Once leased, the job is running: a new capture queues the next job of the session.
    running = store.lease_job(ns, lease_s=30, max_attempts=3, session_id="s1", due_only=False)
    assert running.job_id == a.job_id
    c = store.enqueue_job(ns, "s1", "r4", waiting_turns=1)
    assert c.job_id != a.job_id and (c.status, c.waiting_turns) == ("pending", 1)
    assert [j.session_id for j in store.jobs(ns, status="pending")] == ["s2", "s1"]


def test_a_session_s_jobs_run_one_at_a_time(store: Store, ns):
    """Reviewer: a capture during a run queued a job that a second worker took at once, so two workers
    extracted the same session together (overlapping windows: the model paid twice for the same turns)."""
    first = store.enqueue_job(ns, "s1")
    running = _lease(store, ns)
    queued = store.enqueue_job(ns, "s1", waiting_turns=1)
    other = store.enqueue_job(ns, "s2")
    assert queued.due_at is None and queued.job_id != first.job_id
    elsewhere = _lease(store, ns)
    assert elsewhere.job_id == other.job_id  # another session's job is not held up
    assert _lease(store, ns) is None  # s1's new job waits for the one running
    assert store.lease_job(ns, lease_s=30, max_attempts=3, due_only=False, session_id="s1") is None  # a flush too
    store.finish_job(Fence(running.job_id, running.revision))
    store.finish_job(Fence(elsewhere.job_id, elsewhere.revision))
    assert _lease(store, ns).job_id == queued.job_id
    # A lease that lapsed holds nothing up: the stalled job is taken over first, then its session waits again.
    later = datetime.now(timezone.utc) + timedelta(seconds=120)
    store.enqueue_job(ns, "s1", waiting_turns=1)
    taken = _lease(store, ns, now=later)
    assert (taken.job_id, taken.attempts) == (queued.job_id, 2)
    assert _lease(store, ns, now=later) is None


def test_two_workers_taking_over_a_lapsed_session_at_once_run_one_job_of_it(store_url, ns):
    """The verification pass (PostgreSQL): a worker taking over a lapsed job skips its locked row, so the second
    saw the lapsed lease and took the session's pending job too: two runs of one session, 30 times in 30."""
    import time

    stores = [open_store(store_url) for _ in range(2)]
    try:
        for trial in range(8):
            sid = f"s{trial}"
            stores[0].enqueue_job(ns, sid)
            stores[0].lease_job(ns, lease_s=0.2, max_attempts=9, session_id=sid)
            stores[0].enqueue_job(ns, sid, waiting_turns=1)
            time.sleep(0.3)  # the first job's lease lapses
            gate = threading.Barrier(2)

            def take(i: int, sid: str = sid, gate: threading.Barrier = gate):
                gate.wait()
                return stores[i].lease_job(ns, lease_s=30, max_attempts=9, session_id=sid)

            with ThreadPoolExecutor(2) as pool:
                taken = [j for j in pool.map(take, range(2)) if j is not None]
            assert len(taken) == 1, (trial, taken)
    finally:
        for s in stores:
            s.close()


def test_a_job_is_due_when_its_batch_fills_or_the_session_goes_idle(store: Store, ns):
    now = datetime.now(timezone.utc)
    job = store.enqueue_job(ns, "s1", waiting_turns=4, due_after_turns=10, idle_s=60)
    assert job.due_at is not None and now + timedelta(seconds=55) < job.due_at < now + timedelta(seconds=120)
    assert _lease(store, ns) is None  # 4 of 10 turns, not idle yet
    # A later capture pushes the idle time back; the batch is still not full.
    pushed = store.enqueue_job(ns, "s1", waiting_turns=5, due_after_turns=10, idle_s=600)
    assert pushed.due_at > job.due_at and _lease(store, ns, now=job.due_at + timedelta(seconds=1)) is None
    # Idle long enough: due.
    idle = _lease(store, ns, now=pushed.due_at + timedelta(seconds=1))
    assert idle.job_id == job.job_id
    store.finish_job(Fence(idle.job_id, idle.revision))
    # The batch fills: due now, and a later capture does not push it back.
    full = store.enqueue_job(ns, "s1", waiting_turns=10, due_after_turns=10, idle_s=600)
    assert full.due_at is None
    assert store.enqueue_job(ns, "s1", waiting_turns=1, due_after_turns=10, idle_s=600).due_at is None
    assert _lease(store, ns).job_id == full.job_id
    # A flush takes a job that is not due, of the session asked for only.
    waiting = store.enqueue_job(ns, "s2", waiting_turns=1, due_after_turns=10, idle_s=600)
    store.enqueue_job(ns, "s3", waiting_turns=1, due_after_turns=10, idle_s=600)
    assert _lease(store, ns) is None
    flushed = store.lease_job(ns, lease_s=30, max_attempts=3, session_id="s2", due_only=False)
    assert flushed.job_id == waiting.job_id
    assert store.lease_job(ns, lease_s=30, max_attempts=3, session_id="s2", due_only=False) is None


def test_a_heartbeat_renews_the_lease_and_stops_at_a_takeover(store: Store, ns):
    store.enqueue_job(ns, "s1")
    held = _lease(store, ns, lease_s=5)
    renewed = store.renew_lease(Fence(held.job_id, held.revision), lease_s=300)
    assert renewed.revision == held.revision and renewed.lease_until > held.lease_until + timedelta(seconds=200)
    # Renewed: not taken over when the first lease would have ended.
    assert _lease(store, ns, now=held.lease_until + timedelta(seconds=1)) is None
    taken = _lease(store, ns, now=renewed.lease_until + timedelta(seconds=1))
    assert taken.revision == held.revision + 1
    before = getattr(store, "fenced_writes", 0)
    with pytest.raises(LeaseLost):
        store.renew_lease(Fence(held.job_id, held.revision), lease_s=300)
    assert getattr(store, "fenced_writes", 0) == before  # a refused heartbeat is not a late write
    store.finish_job(Fence(taken.job_id, taken.revision))
    with pytest.raises(LeaseLost):
        store.renew_lease(Fence(taken.job_id, taken.revision), lease_s=300)


def test_the_watermark_moves_in_the_s5_transaction(seeded):
    store, ns, r = seeded
    assert store.extraction_state(ns, "s1") is None
    window = Window(start=0, end=1, base=-1, prompts_sha="sha-a")
    plan = _plan("s1", items=[ItemPlan("point", "Maya works at Acme", sources=(SourcePlan(r.turn_ids[0], None),))])
    plan.window = window
    store.write_extraction(ns, plan, finalize=_finalize)
    state = store.extraction_state(ns, "s1")
    assert (state.watermark, state.window_start, state.prompts_sha, state.extraction_id) == (
        1, 0, "sha-a", plan.extraction_id)
    assert store.extraction_state(ns + "_other", "s1") is None
    # A run that read the same window meanwhile writes nothing: the window was committed first.
    late = _plan("s1", items=[ItemPlan("point", "Maya is a designer at Acme")])
    late.window = window
    result = store.write_extraction(ns, late, finalize=_finalize)
    assert result.already_covered and result.outcomes == {}
    assert [m.content for m in store.memories(ns)] == ["Maya works at Acme"]
    assert store.extraction_state(ns, "s1").extraction_id == plan.extraction_id
    # A failed S5 moves nothing.
    failing = _plan("s1", items=[ItemPlan("point", "Maya has a cat")])
    failing.window = Window(start=2, end=3, base=1)

    def boom(result):
        raise RuntimeError("S5 crashed before commit")

    with pytest.raises(Exception, match="S5 crashed"):
        store.write_extraction(ns, failing, finalize=boom)
    assert store.extraction_state(ns, "s1").watermark == 1
    # A full re-extraction sets the watermark where it read to.
    again = _plan("s1")
    again.window = Window(start=0, end=1, base=-1, prompts_sha="sha-b", full=True)
    assert not store.write_extraction(ns, again, finalize=_finalize).already_covered
    assert (store.extraction_state(ns, "s1").watermark, store.extraction_state(ns, "s1").prompts_sha) == (1, "sha-b")


# -- engine-specific edges -------------------------------------------------------------------------


def test_postgres_refuses_nul_characters_before_writing(pg_url, ns):
    store = open_store(pg_url)
    try:
        with pytest.raises(InvalidInput, match=r"turns\[1\]\.content"):
            store.capture(ns, req("s1", ["fine", "bad\x00byte"]))
        assert store.sessions(ns) == []
    finally:
        store.close()


def test_postgres_url_password_is_redacted():
    from tortoise_sdk.store.postgres import redact_url

    assert redact_url("postgresql://u:secret@h:5433/db?sslmode=require") == "postgresql://u:***@h:5433/db?sslmode=require"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    # Reviewer: a password given as libpq's query parameter was printed in errors and written into the hook's block.
    assert redact_url("postgresql://u@h/db?password=hunter2&sslmode=require") == \
        "postgresql://u@h/db?password=***&sslmode=require"
    assert "hunter2" not in redact_url("postgresql://u:a@h/db?sslpassword=hunter2&PASSWORD=hunter2")



def test_a_postgres_url_without_a_host_is_shown_as_written():
    """libpq's local-socket URL ``postgresql:///db`` came back from redact_url as ``postgresql:/db``: the Claude Code
    block told the agent to run ``tortoise --db postgresql:/db?host=... expand ID``, which ``Memory`` refuses."""
    from tortoise_sdk.adapters.claude_code import expand_hint
    from tortoise_sdk.memory import Memory
    from tortoise_sdk.store.postgres import redact_url

    for url in ("postgresql:///tortoise", "postgresql:///tortoise?host=/var/run/postgresql&user=app",
                "postgres:///tortoise", "postgresql://"):
        assert redact_url(url) == url
    assert redact_url("postgresql:///db?host=/tmp&password=hunter2") == "postgresql:///db?host=%2Ftmp&password=***"
    mem = Memory.__new__(Memory)
    mem.namespace, mem.store = "alpha", type("S", (), {"url": redact_url("postgresql:///db?host=/var/run/postgresql")})()
    assert "--db 'postgresql:///db?host=/var/run/postgresql'" in expand_hint(mem)


# -- reflex reads ----------------------------------------------------------------------------------


def test_analyze_gives_the_index_stems(store: Store):
    assert store.analyze(["Working at the CAFÉS", ""]) == [["work", "at", "the", "cafe"], []]


def test_analyze_of_a_long_text_is_the_same_every_time(store: Store):
    """SQLite keeps a long text's stems whole between calls: the same stems, of the indexed head only,
    and a caller changing the list it got changes nothing for the next one."""
    from tortoise_sdk.search import INDEX_CHARS

    paste = "Working at the CAFÉS today " * 2_000
    first = store.analyze([paste, "short cafés"])
    assert first[0] == store.analyze([paste[:INDEX_CHARS]])[0] and first[0][:4] == ["work", "at", "the", "cafe"]
    first[0].clear()
    again = store.analyze(["short cafés", paste])
    assert again[1] == store.analyze([paste[:INDEX_CHARS]])[0] != [] and again[0] == ["short", "cafe"]


def test_analyze_of_a_repeated_text_is_the_same_every_time(store: Store):
    """Stems are cached per text (PostgreSQL) or per word (SQLite): the same text twice in a call, or
    again in a later call, gets the same stems, and changing a returned list changes no later answer."""
    first = store.analyze(["the cafés of Lyon", "", "the cafés of Lyon"])
    assert first == [["the", "cafe", "of", "lyon"], [], ["the", "cafe", "of", "lyon"]]
    first[0].append("x")
    first[2].clear()
    assert store.analyze(["the cafés of Lyon", "cafés"]) == [["the", "cafe", "of", "lyon"], ["cafe"]]


def test_term_stats_count_content_and_speaker_name_separately(store: Store, ns):
    word = f"quokka{uuid.uuid4().hex[:6]}"
    store.capture(ns, req("s1", [f"a {word} here", {"role": "user", "name": word, "content": f"{word} again"},
                                 "nothing"]))
    [[stem]] = store.analyze([word])
    n, stats = store.term_stats(ns, [stem, "zzzunseen"])
    assert n == 3
    assert stats == {stem: (2, 1)}


def test_turns_at_returns_only_existing_positions_of_the_namespace(store: Store, ns):
    store.capture(ns, req("s1", ["a", "b", "c"]))
    store.capture(ns + "_other", req("s1", ["x", "y", "z"]))
    hits = store.turns_at(ns, [("s1", 2), ("s1", 0), ("s1", 9), ("s2", 0), ("s1", 2)])
    assert sorted((h.index, h.content) for h in hits) == [(0, "a"), (2, "c")]


def test_without_psycopg_open_store_names_the_extra(monkeypatch):
    import sys

    from tortoise_sdk.errors import ConfigError

    monkeypatch.setitem(sys.modules, "psycopg", None)
    for name in ("tortoise_sdk.store.postgres", "tortoise_sdk.store.postgres.extraction"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ConfigError, match=r"pip install 'tortoise-sdk\[postgres\]'"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_both_engines_rank_alike_with_bm25_scores_within_five_percent(tmp_path, ns):
    from tortoise_sdk.demo import load_demo_sessions

    # BM25 statistics span the whole database, so both engines start empty.
    require_postgres()
    with temp_database("tortoise_rank") as url:
        _rank_alike(open_store(str(tmp_path / "rank.db")), open_store(url), ns, load_demo_sessions())


def _rank_alike(lite: Store, pg: Store, ns: str, sessions) -> None:
    try:
        for store in (lite, pg):
            for s in sessions:
                store.capture(ns, req(s["session_id"], s["turns"], date=s["date"]))
        for query in ("dog beagle howls", "bike commute to the BART station", "Tomás walks Biscuit", "data platform"):
            a = lite.search_terms(ns, query_terms(query), k=5)
            b = pg.search_terms(ns, query_terms(query), k=5)
            assert [(h.session_id, h.index) for h in a] == [(h.session_id, h.index) for h in b], query
            assert all(abs(x.score - y.score) <= 0.05 * max(x.score, 1e-3) for x, y in zip(a, b)), query
    finally:
        lite.close()
        pg.close()


def test_both_engines_rank_memories_alike_with_bm25_scores_within_five_percent(tmp_path, ns):
    require_postgres()
    with temp_database("tortoise_rank_mem") as url:
        lite, pg = open_store(str(tmp_path / "rank.db")), open_store(url)
        try:
            for store in (lite, pg):
                r = store.capture(ns, req("s1", ["my dog Biscuit howls at the BART station", "I bike to work"]))
                store.capture(ns + "_other", req("s1", ["dog dog dog"]))
                plan = _plan("s1", entities=[EntityPlan("Biscuit", "pet", "a beagle")], items=[
                    ItemPlan("point", text, about=about, search_keys=keys, sources=(SourcePlan(r.turn_ids[0], None),))
                    for text, about, keys in [
                        ("Biscuit is a beagle who howls at sirens", ("Biscuit",), ("dog", "beagle")),
                        ("The user bikes to the BART station every morning", (), ("commute", "bike")),
                        ("The user's dog Biscuit howls at the BART station", ("Biscuit",), ("dog",)),
                        ("The user works on the data platform team", (), ("job",)),
                        ("The user walks the dog after work", (), ("dog", "walk")),
                        ("The user drinks tea", (), ()),
                    ]])
                store.write_extraction(ns, plan, finalize=_finalize)
                store.write_extraction(ns + "_other", _plan("s1", items=[
                    ItemPlan("point", f"dog {i} howls at the station", sources=(SourcePlan(r.turn_ids[0], None),))
                    for i in range(40)]), finalize=_finalize)
            for query in ("dog beagle howls", "bike commute to the BART station", "Biscuit walks", "data platform"):
                a = lite.search_memories(ns, fts5_query(query), k=5)
                b = pg.search_memories(ns, fts5_query(query), k=5)
                assert a and [m.content for m, _ in a] == [m.content for m, _ in b], query
                assert all(abs(x - y) <= 0.05 * max(x, 1e-3) for (_, x), (_, y) in zip(a, b)), (query, a, b)
        finally:
            lite.close()
            pg.close()


# -- sub-agent merge rules: the one-statement upsert equals the pure merge -------------------------

_texts = st.sampled_from([None, "", "  ", "a", "b"])
_statuses = st.sampled_from([None, "", "running", "async_launched", "completed", " Completed ", "ERROR", "stopped"])
_metrics = st.one_of(st.sampled_from([None, 0, -1]), st.integers(1, 10_000))
_frames = st.builds(
    SubagentFrame,
    session_id=st.sampled_from(["s1", "s2", "", None]), tool_call_id=st.sampled_from(["t1", "t2"]),
    agent_execution_id=st.sampled_from(["e1", None, ""]), parent_tool_call_id=_texts, subagent_type=_texts,
    description=_texts, agent_id=_texts, child_session_id=_texts, model=_texts, agent_status=_statuses,
    tool_status=_statuses, is_async=st.sampled_from([None, True, False]), total_tokens=_metrics,
    tool_use_count=_metrics, duration_ms=_metrics, source=st.sampled_from(["live", "backfill"]),
    observed_at=st.sampled_from([T0, T0 + timedelta(seconds=1)]),
    turn_external_id=st.sampled_from([None, "", " ", "m1", "m2"]),
)


def _turn_refs(store: Store, ns: str) -> dict[tuple[str, str, str], str | None]:
    """The stored raw turn reference (``turn_ref``) of each sub-agent row of ``ns``."""
    mark = "?" if isinstance(store, SQLiteStore) else "%s"
    with store.read() as c:
        rows = c.execute("SELECT session_id, agent_execution_id, tool_call_id, turn_ref FROM subagent_contexts"
                         f" WHERE namespace = {mark}", (ns,)).fetchall()
    return {(r[0], r[1], r[2]): r[3] for r in rows}


def _record(store: Store, ns: str, frames, nows) -> None:
    """What the recorder does with each frame: one upsert (with its counters), or just the counters."""
    for f, now in zip(frames, nows):
        normalized, counts = normalize_frame(f)
        if normalized is None:
            store.bump_subagent_counters(ns, counts)
        else:
            store.upsert_subagent(ns, normalized, now, increments=counts)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(_frames, min_size=1, max_size=8))
def test_subagent_upserts_equal_the_pure_merge(store: Store, frames):
    ns = f"sub_{uuid.uuid4().hex[:12]}"
    nows = [T0 + timedelta(minutes=i + 1) for i in range(len(frames))]
    _record(store, ns, frames, nows)
    expected, counters = replay(frames, nows)
    stored = {(c.session_id, c.agent_execution_id, c.tool_call_id): c for c in store.subagents(ns)}
    refs = _turn_refs(store, ns)
    assert set(stored) == set(expected)
    for key, row in expected.items():
        got = stored[key]
        # the pure rule's turn_id is the raw reference: the store keeps it as turn_ref
        assert {col: refs[key] if col == "turn_id" else getattr(got, col) for col in ROW_COLUMNS} == \
            {col: row[col] for col in ROW_COLUMNS}
        assert got.turn_id is None  # no turn of the namespace to resolve to
    assert store.subagent_counters(ns) == counters


def test_subagent_turn_id_resolves_to_the_stored_turn_and_is_filled_forward(store: Store, ns):
    norm = normalize_frame
    r = store.capture(ns, req("s1", [{"role": "user", "content": "go", "id": "msg-1"}]))
    first = store.upsert_subagent(ns, norm(SubagentFrame(session_id="s1", tool_call_id="t1"))[0], T0)
    assert first.turn_id is None
    later = norm(SubagentFrame(session_id="s1", tool_call_id="t1", turn_external_id="msg-1"))[0]
    assert store.upsert_subagent(ns, later, T0 + timedelta(seconds=1)).turn_id == r.turn_ids[0]
    unknown = norm(SubagentFrame(session_id="s1", tool_call_id="t1", turn_external_id="msg-404"))[0]
    assert store.upsert_subagent(ns, unknown, T0 + timedelta(seconds=2)).turn_id == r.turn_ids[0]
    assert [c.tool_call_id for c in store.subagents(ns, turn_id=r.turn_ids[0])] == ["t1"]
    assert store.subagents(ns + "_other") == []


def test_a_frame_recorded_before_its_turn_is_resolved_when_the_turn_is_captured(store: Store, ns):
    norm = normalize_frame
    frames = {"t1": "msg-1", "t2": "in-task", "t3": "in-agent", "t4": "elsewhere", "t5": "msg-1"}
    for call, ref in frames.items():
        row = store.upsert_subagent(ns, norm(SubagentFrame(session_id="s1", tool_call_id=call, turn_external_id=ref,
                                                           observed_at=T0))[0], T0)
        assert (row.turn_id, row.tool_call_id) == (None, call)
    store.upsert_subagent(ns, norm(SubagentFrame(session_id="s1:agent-a", tool_call_id="t6",
                                                 turn_external_id="deep", observed_at=T0))[0], T0)
    launch = store.capture(ns, req("s1", [{"role": "user", "content": "go", "id": "msg-1"}])).turn_ids[0]
    task = store.capture(ns, req("s1:task-x", [{"role": "user", "content": "t", "id": "in-task"}])).turn_ids[0]
    # only the derived prefixes count: ':agent-' and ':task-', not any ':'
    store.capture(ns, req("s1:other", [{"role": "user", "content": "o", "id": "elsewhere"}]))
    store.capture(ns, req("s10:agent-b", [{"role": "user", "content": "o", "id": "in-agent"}]))
    store.capture(ns + "_other", req("s1:agent-a", [{"role": "user", "content": "o", "id": "in-agent"}]))
    deep = store.capture(ns, req("s1:agent-a:task-y", [{"role": "user", "content": "d", "id": "deep"}])).turn_ids[0]
    assert {c.tool_call_id: c.turn_id for c in store.subagents(ns)} == {
        "t1": launch, "t2": task, "t3": None, "t4": None, "t5": launch, "t6": deep}
    assert [c.tool_call_id for c in store.subagents(ns, turn_id=launch)] == ["t1", "t5"]
    agent = store.capture(ns, req("s1:agent-a", [{"role": "user", "content": "a", "id": "in-agent"}])).turn_ids[0]
    later = store.upsert_subagent(ns, norm(SubagentFrame(session_id="s1", tool_call_id="t3", description="d",
                                                         observed_at=T0))[0], T0 + timedelta(seconds=1))
    assert (later.turn_id, later.description) == (agent, "d")
    assert _turn_refs(store, ns)[("s1", "unknown", "t3")] == "in-agent"
    # the same message id in two derived sessions: the first by session id (byte order)
    store.capture(ns, req("s1:task-a", [{"role": "user", "content": "1", "id": "dup"}]))
    first = store.capture(ns, req("s1:agent-z", [{"role": "user", "content": "2", "id": "dup"}])).turn_ids[0]
    dup = store.upsert_subagent(ns, norm(SubagentFrame(session_id="s1", tool_call_id="t7", turn_external_id="dup",
                                                       observed_at=T0))[0], T0)
    assert dup.turn_id == first


def test_subagent_reads_break_ties_by_session_id_in_byte_order(store: Store, ns):
    for session in ("a", "B", "a:agent-x"):
        store.upsert_subagent(ns, normalize_frame(SubagentFrame(session_id=session, tool_call_id="t",
                                                                observed_at=T0))[0], T0)
    assert [c.session_id for c in store.subagents(ns)] == ["B", "a", "a:agent-x"]


def test_an_oversized_metric_is_anomalous_and_the_rest_of_the_frame_is_stored(store: Store, ns):
    frame = SubagentFrame(session_id="s1", tool_call_id="t1", total_tokens=2**63, tool_use_count=2**63 - 1,
                          duration_ms=10**30, description="kept", tool_status="completed", observed_at=T0)
    _record(store, ns, [frame], [T0])
    (row,) = store.subagents(ns)
    assert (row.total_tokens, row.tool_use_count, row.duration_ms) == (None, 2**63 - 1, None)
    assert (row.description, row.tool_status, row.settled_at) == ("kept", "completed", T0)
    counters = store.subagent_counters(ns)
    assert (counters.attempted, counters.persisted, counters.anomalous_value, counters.failed) == (1, 1, 2, 0)


def _raw_subagent_rows(store: Store, ns: str) -> list[tuple]:
    """Every stored column of every sub-agent row of ``ns``, as the engine returns it."""
    mark = "?" if isinstance(store, SQLiteStore) else "%s"
    with store.read() as c:
        return [tuple(r) for r in c.execute(f"SELECT * FROM subagent_contexts WHERE namespace = {mark} ORDER BY id",
                                            (ns,)).fetchall()]


def _recorder(store: Store, ns: str) -> SubagentRecorder:
    ticks = iter(T0 + timedelta(hours=1, seconds=i) for i in range(1000))
    return SubagentRecorder(store, ns, clock=lambda: next(ticks))


def test_a_backfill_after_live_leaves_the_live_row_byte_identical(store: Store, ns):
    """AC-22: the audit's case, and a call recorded live and backfilled under 'unknown' is two rows."""
    store.capture(ns, req("s1", [{"role": "assistant", "content": "[tool_use Task]", "id": "msg-1"}]))
    rec = _recorder(store, ns)
    rec.record(SubagentFrame(session_id="s1", tool_call_id="t1", turn_external_id="msg-1", model="claude-haiku",
                             tool_status="running", source="live", observed_at=T0))
    before = _raw_subagent_rows(store, ns)
    backfill = [SubagentFrame(session_id="s1", tool_call_id="t1", model="inherit", subagent_type="Plan",
                              source="backfill", observed_at=T0 - timedelta(days=20)),
                SubagentFrame(session_id="s1", tool_call_id="t1", tool_status="completed", total_tokens=5,
                              source="backfill", observed_at=T0 - timedelta(days=19))]
    rec.record_all(backfill)
    rec.record(backfill[1])
    assert _raw_subagent_rows(store, ns) == before
    (row,) = store.subagents(ns)
    assert (row.model, row.settled_at, row.source) == ("claude-haiku", None, "live")
    rec.record(SubagentFrame(session_id="s1", tool_call_id="t2", agent_execution_id="exec-7", source="live",
                             observed_at=T0))
    rec.record_all([SubagentFrame(session_id="s1", tool_call_id="t2", source="backfill", observed_at=T0)])
    assert sorted((r.agent_execution_id, r.source) for r in store.subagents(ns) if r.tool_call_id == "t2") == [
        ("exec-7", "live"), ("unknown", "backfill")]
    counters = store.subagent_counters(ns)
    assert (counters.unknown_execution, counters.backfill_unknown_execution) == (1, 4)  # AC-31: per source


def test_a_replayed_backfill_is_a_no_op_and_settled_at_is_the_terminal_frame_time(store: Store, ns):
    """AC-11 and AC-22: settled when the terminal frame was observed; ingesting the same frames again changes nothing."""
    frames = [SubagentFrame(session_id="s1", tool_call_id="t1", subagent_type="Plan", model="haiku",
                            source="backfill", observed_at=T0),
              SubagentFrame(session_id="s1", tool_call_id="t1", tool_status="completed", agent_status="completed",
                            model="claude-haiku-4-5", total_tokens=70, source="backfill",
                            observed_at=T0 + timedelta(seconds=5)),
              SubagentFrame(session_id="s1", tool_call_id="t1", tool_status="error", agent_status="done",
                            source="backfill", observed_at=T0 + timedelta(seconds=9))]
    rec = _recorder(store, ns)
    rec.record_all(frames[:1])  # the transcript as it was when first ingested
    (first,) = store.subagents(ns)
    assert first.settled_at is None
    rec.record_all(frames)  # grown: completes the backfilled row
    (row,) = store.subagents(ns)
    assert (row.settled_at, row.tool_status, row.agent_status, row.model) == (
        T0 + timedelta(seconds=5), "completed", "done", "claude-haiku-4-5")
    before = _raw_subagent_rows(store, ns)
    rec.record_all(frames)
    assert _raw_subagent_rows(store, ns) == before
    assert store.subagent_counters(ns).persisted == 1 + 3 + 3


def test_counters_count_every_frame_attempted_and_persisted(store: Store, ns):
    """AC-26: every frame is attempted once and ends persisted, skipped or failed; upserted stays as an alias."""
    rec = _recorder(store, ns)
    rec.record_all([SubagentFrame(session_id="s1", tool_call_id="t1", agent_execution_id="e1", observed_at=T0),
                    SubagentFrame(session_id="s1", tool_call_id=" ", observed_at=T0),
                    SubagentFrame(session_id="s1", tool_call_id="t2", source="backfill", observed_at=T0),
                    SubagentFrame(session_id="s1", tool_call_id="t2", source="backfill", tool_status="completed",
                                  observed_at=T0)])
    counters = store.subagent_counters(ns)
    assert (counters.attempted, counters.persisted, counters.skipped_no_identity, counters.failed) == (4, 3, 1, 0)
    assert rec.counts == counters
    doc = counters.model_dump(mode="json")
    assert (doc["attempted"], doc["persisted"], doc["upserted"]) == (4, 3, 3)  # the old name, kept for scripts


def test_counters_written_before_the_rename_read_as_persisted(store: Store, ns):
    """AC-26: a namespace whose counters say ``upserted`` (the old name) reads it as persisted, and attempted too."""
    mark = "?" if isinstance(store, SQLiteStore) else "%s"
    store.transaction(lambda c: c.execute(
        f"INSERT INTO subagent_counters (namespace, name, value) VALUES ({mark}, 'upserted', 5),"
        f" ({mark}, 'skipped_no_identity', 1)", (ns, ns)))
    _recorder(store, ns).record(SubagentFrame(session_id="s1", tool_call_id="t1", agent_execution_id="e1",
                                              observed_at=T0))
    counters = store.subagent_counters(ns)
    assert (counters.attempted, counters.persisted, counters.skipped_no_identity) == (7, 6, 1)


def test_live_over_backfill_relabels_and_a_grown_backfill_completes_its_row(store: Store, ns):
    """AC-1/AC-22 as kept (README, deviations): a live frame on a backfilled row merges and makes it live, after
    which no backfill changes it; a backfill over a backfilled row merges what it adds."""
    rec = _recorder(store, ns)
    rec.record_all([SubagentFrame(session_id="s1", tool_call_id="t1", model="haiku", source="backfill",
                                  observed_at=T0)])
    rec.record_all([SubagentFrame(session_id="s1", tool_call_id="t1", source="backfill", observed_at=T0),
                    SubagentFrame(session_id="s1", tool_call_id="t1", source="backfill", total_tokens=9,
                                  observed_at=T0 + timedelta(seconds=1))])
    (row,) = store.subagents(ns)
    assert (row.source, row.model, row.total_tokens) == ("backfill", "haiku", 9)
    rec.record(SubagentFrame(session_id="s1", tool_call_id="t1", tool_status="completed", source="live",
                             observed_at=T0 + timedelta(seconds=2)))
    (row,) = store.subagents(ns)
    assert (row.source, row.model, row.total_tokens, row.tool_status) == ("live", "haiku", 9, "completed")
    before = _raw_subagent_rows(store, ns)
    rec.record_all([SubagentFrame(session_id="s1", tool_call_id="t1", source="backfill", total_tokens=11,
                                  observed_at=T0 + timedelta(seconds=3))])
    assert _raw_subagent_rows(store, ns) == before


_KILLED_WORKER = """
import sys, time
from pathlib import Path
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import ExtractionPlan, Fence, ItemPlan

url, ns, flag = sys.argv[1:4]
store = open_store(url)
job = store.lease_job(ns, lease_s=30, max_attempts=3)

def finalize(result):
    Path(flag).write_text(job.job_id)  # inside the S5 transaction, rows written but not committed
    time.sleep(60)
    return ExtractionReport(status="ok")

plan = ExtractionPlan(session_id="s1", extraction_id="x-killed", valid_at=None,
                      items=[ItemPlan("point", "Maya works at Acme")])
store.write_extraction(ns, plan, finalize=finalize, fence=Fence(job.job_id, job.revision))
"""


def test_a_worker_killed_mid_write_commits_nothing_and_its_job_is_retried(store_url, tmp_path, ns):
    import signal
    import subprocess
    import sys
    import time

    store = open_store(store_url)
    try:
        store.capture(ns, req("s1", ["I work at Acme"]))
        job = store.enqueue_job(ns, "s1")
        flag = tmp_path / "inside"
        proc = subprocess.Popen([sys.executable, "-c", _KILLED_WORKER, store_url, ns, str(flag)])
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the worker did not reach its write"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _lease(store, ns) is None  # its lease still runs
        later = datetime.now(timezone.utc) + timedelta(seconds=120)
        # On PostgreSQL the dead client's backend holds the job's row lock until it notices the closed
        # socket (at once on a quiet machine, later under load), at the latest when the store's bound
        # (30 s, idle_in_transaction_session_timeout) ends its transaction; lease skips locked rows
        # meanwhile. A time limit of its own, not what the start of the worker left of the first one.
        deadline = time.monotonic() + 30 + 60
        while (again := _lease(store, ns, now=later)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (again.job_id, again.revision, again.attempts) == (job.job_id, 2, 2)
        assert store.memories(ns) == []
        store.write_extraction(ns, _plan("s1", items=[ItemPlan("point", "Maya works at Acme")]), finalize=_finalize,
                               fence=Fence(job.job_id, again.revision))
        assert [m.content for m in store.memories(ns)] == ["Maya works at Acme"]
        assert store.get_job(job.job_id).status == "done"
    finally:
        store.close()


def test_candidate_turns_sum_term_weights_over_content_newest_first(store: Store, ns):
    store.capture(ns, req("s1", ["apple pie", "apple tart", "banana", {"role": "user", "name": "Apple", "content": "hi"},
                                 "apple and banana"]))
    store.capture(ns + "_other", req("s1", ["apple banana apple"]))
    hits = store.candidate_turns(ns, {"apple": 1.0, "banana": 2.0}, k=10)
    assert [(h.content, h.score) for h in hits] == [
        ("apple and banana", 3.0), ("banana", 2.0), ("apple tart", 1.0), ("apple pie", 1.0)]
    newest = store.candidate_turns(ns, {"apple": 1.0, "banana": 2.0}, k=10, per_term=1)
    assert [(h.content, h.score) for h in newest] == [("apple and banana", 3.0)]
    assert store.candidate_turns(ns, {"": 1.0, "zzz": 1.0}, k=10) == []


def test_candidate_memories_match_content_keys_and_entity_phrases(seeded):
    store, ns, _ = seeded
    store.write_extraction(ns, _plan("s1", items=[
        ItemPlan("point", "Maya likes apple pie", about=("Maya",), search_keys=("dessert",)),
        ItemPlan("point", "Maya bakes banana bread", about=("Maya", "Northwind Labs")),
        ItemPlan("point", "Tom works at Labs Northwind Inc"),
    ]), finalize=_finalize)
    found = store.candidate_memories(ns, {"dessert": 1.0, "banana": 2.0}, k=5)
    assert [(m.content, s) for m, s in found] == [("Maya bakes banana bread", 2.0), ("Maya likes apple pie", 1.0)]
    phrase = store.candidate_memories(ns, {"Northwind Labs": 1.0}, k=5)
    assert [m.content for m, _ in phrase] == ["Maya bakes banana bread"]
    assert store.candidate_memories(ns + "_other", {"banana": 1.0}, k=5) == []


def test_candidate_memories_carry_the_entities_and_sources_get_memory_reads(seeded):
    store, ns, r = seeded
    t0, t1 = r.turn_ids
    store.write_extraction(ns, _plan("s1", receipt=r, items=[
        ItemPlan("point", "Maya works at Acme as a designer", about=("Maya", "Acme"), search_keys=("job",),
                 sources=(SourcePlan(t1, "adopted"), SourcePlan(t0, "started at Acme"))),
        ItemPlan("point", "Maya likes Acme coffee"),
    ]), finalize=_finalize)
    found = store.candidate_memories(ns, {"acme": 1.0}, k=5)
    assert len(found) == 2
    for m, _ in found:
        assert m == store.get_memory(ns, m.id)
    designer = next(m for m, _ in found if m.sources)
    assert [s.turn_id for s in designer.sources] == [t0, t1] and sorted(designer.entities) == ["Acme", "Maya"]


def test_candidate_turns_near_are_the_candidates_and_their_neighbours(store: Store, ns):
    store.capture(ns, req("s1", ["tea one", "plain two", "plain three", "tea four", "plain five", "plain six"]))
    store.capture(ns, req("s2", ["plain", "tea"]))
    weights = {"tea": 1.0}
    hits, near = store.candidate_turns_near(ns, weights, k=10, known={("s1", 2)})
    assert hits == store.candidate_turns(ns, weights, k=10)
    got = {(h.session_id, h.index): h.content for h in near}
    # Every neighbour not known is there; a store may return more (known ones, the candidates).
    assert {("s1", 1): "plain two", ("s1", 4): "plain five", ("s2", 0): "plain"}.items() <= got.items()
    assert ("s1", 5) not in got and ("s2", 2) not in got
    assert store.candidate_turns_near(ns, {"zzz": 1.0}, k=10) == ([], [])


def test_candidate_turns_near_reach_two_brings_the_turns_two_away(store: Store, ns):
    """With ``reach=2`` (the reflex's SECOND_NEIGHBOUR_SHARE) the turns two before and after each candidate come
    back too, in the same call, and none further; the session's edges bound them."""
    store.capture(ns, req("s1", ["plain zero", "plain one", "tea two", "plain three", "plain four", "plain five"]))
    store.capture(ns, req("s2", ["tea", "plain", "plain again", "plain end"]))
    weights = {"tea": 1.0}
    hits, near = store.candidate_turns_near(ns, weights, k=10, reach=2)
    assert hits == store.candidate_turns(ns, weights, k=10)
    got = {(h.session_id, h.index): h.content for h in near}
    assert {("s1", 0): "plain zero", ("s1", 1): "plain one", ("s1", 3): "plain three", ("s1", 4): "plain four",
            ("s2", 1): "plain", ("s2", 2): "plain again"}.items() <= got.items()
    assert ("s1", 5) not in got and ("s2", 3) not in got
    _, one = store.candidate_turns_near(ns, weights, k=10)
    assert {(h.session_id, h.index) for h in one} >= {("s1", 1), ("s1", 3), ("s2", 1)}
    assert not {(h.session_id, h.index) for h in one} & {("s1", 0), ("s1", 4), ("s2", 2)}


def test_candidate_turns_near_reads_the_offsets_it_is_given(store: Store, ns):
    """With offsets for ``reach`` (the reflex's SECOND_NEIGHBOUR_SIDE "after": ``(-1, 1, 2)``) the turns next to
    each candidate and two after it come back, and not the turn two before; the session's edges bound them."""
    store.capture(ns, req("s1", ["plain zero", "plain one", "tea two", "plain three", "plain four", "plain five"]))
    store.capture(ns, req("s2", ["plain", "tea", "plain again"]))
    weights = {"tea": 1.0}
    hits, near = store.candidate_turns_near(ns, weights, k=10, reach=(-1, 1, 2))
    assert hits == store.candidate_turns(ns, weights, k=10)
    got = {(h.session_id, h.index): h.content for h in near}
    assert {("s1", 1): "plain one", ("s1", 3): "plain three", ("s1", 4): "plain four", ("s2", 0): "plain",
            ("s2", 2): "plain again"}.items() <= got.items()
    assert not {("s1", 0), ("s1", 5), ("s2", 3)} & set(got)


def test_candidate_turns_near_each_ranks_every_weighting_as_candidate_turns_does(store: Store, ns):
    """The reflex reads a question's words and the same words with more in one call: each weighting
    ranks as it would alone (a word in both is found once), and every candidate's neighbours come back."""
    store.capture(ns, req("s1", ["tea one", "coffee two", "tea and coffee", "plain", "milk tea", "coffee"]))
    store.capture(ns, req("s2", ["plain", "milk", "tea", "coffee milk", "plain end"]))
    weightings = [{"tea": 1.0}, {"tea": 1.0, "coffee": 0.5, "milk": 0.25}, {"milk": 2.0, "tea": 0.25}, {"zzz": 1.0}]
    each, near = store.candidate_turns_near_each(ns, weightings, k=3)
    assert each == [store.candidate_turns(ns, w, k=3) for w in weightings]
    assert [len(hits) for hits in each] == [3, 3, 3, 0]
    around = {(h.session_id, h.index): h.content for h in near}
    turns = {(h.session_id, h.index): h.content for sid in ("s1", "s2") for h in store.turns(ns, sid)}
    wanted = {(h.session_id, h.index + d) for hits in each for h in hits for d in (-1, 1)} & set(turns)
    chosen = {(h.session_id, h.index) for hits in each for h in hits}
    assert {p: turns[p] for p in wanted - chosen}.items() <= around.items()
    assert store.candidate_turns_near_each(ns, [{"zzz": 1.0}], k=3) == ([[]], [])


def test_sqlite_walks_a_word_several_weightings_hold_once(tmp_path):
    from tortoise_sdk.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "walks.db")
    store.capture("a", req("s1", ["tea one", "coffee two", "tea and coffee", "milk tea"]))
    walks: list[str] = []
    with store.read() as c:  # this thread's read connection serves the call below
        c.set_trace_callback(lambda sql: walks.append(sql) if "MATCH" in sql else None)
    try:
        each = store.candidate_turns_each("a", [{"tea": 1.0}, {"tea": 1.0, "coffee": 0.5}, {"coffee": 2.0}], k=3)
    finally:
        with store.read() as c:
            c.set_trace_callback(None)
    assert len(walks) == 2  # tea, coffee
    assert each == [store.candidate_turns("a", w, k=3)
                    for w in ({"tea": 1.0}, {"tea": 1.0, "coffee": 0.5}, {"coffee": 2.0})]
    store.close()


def test_sqlite_analyze_gives_a_text_the_same_stems_from_its_cache(tmp_path):
    from tortoise_sdk.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "stems.db")
    texts = ["Running to the markets", "x " * 1_500 + "running", "Running to the markets"]
    first = store.analyze(texts)
    assert first[0] == first[2] == ["run", "to", "the", "market"] and first[1][-1] == "run"
    first[0].append("mutated")  # a caller's list is its own
    assert store.analyze(texts) == [["run", "to", "the", "market"], first[1], ["run", "to", "the", "market"]]
    store.close()


def test_the_reflex_points_at_the_same_turns_on_both_engines(tmp_path):
    from tortoise_sdk.demo import load_demo_sessions

    require_postgres()
    with temp_database("tortoise_reflex") as url:
        mems = [Memory(str(tmp_path / "reflex.db"), namespace="r"), Memory(url, namespace="r")]
        try:
            for mem in mems:
                for s in load_demo_sessions():
                    mem.capture(s["session_id"], s["turns"], session_date=s["date"])
            for query in ("what was my dog called?", "where does Maya work now?", "how does Maya commute",
                          "who walks Biscuit on Tuesdays?"):
                lite, pg = (m.context([{"role": "user", "content": query}], time_budget_ms=None) for m in mems)
                assert lite.pointers and [p.id for p in lite.pointers] == [p.id for p in pg.pointers], query
                assert all(abs(a.score - b.score) <= 0.02 * a.score for a, b in zip(lite.pointers, pg.pointers))
        finally:
            for mem in mems:
                mem.close()


def test_bounded_search_over_a_common_term_ranks_alike_on_both_engines(tmp_path):
    from tortoise_sdk.search import POSTINGS_BUDGET

    require_postgres()
    turns = [f"common filler line {i}" for i in range(POSTINGS_BUDGET + 100)]
    turns[7] = "a zebra and a common word"
    turns[900] = "zebra alone here"
    turns[1500] = "the zebra zebra herd, common"
    with temp_database("tortoise_bounded") as url:
        stores = [open_store(str(tmp_path / "bounded.db")), open_store(url)]
        try:
            for store in stores:
                store.capture("ns", req("s1", turns))
            lite, pg = (s.search_terms("ns", ["zebra", "common"], k=3) for s in stores)
            assert [h.index for h in lite] == [h.index for h in pg] == [1500, 900, 7]
            assert all(abs(a.score - b.score) <= 0.05 * a.score for a, b in zip(lite, pg))
        finally:
            for store in stores:
                store.close()


# -- tenancy: ranking statistics belong to the namespace ------------------------------------------


def _b_observes(store: Store, ns: str):
    """Everything namespace ``ns`` can learn about "kayak trip": search hits and scores, the block, term counts."""
    mem = Memory(store=store, namespace=ns)
    hits = [(h.turn_id, h.score) for h in mem.search("kayak trip", k=10)]
    block = mem.context([{"role": "user", "content": "what happened with the kayak trip?"}], time_budget_ms=None)
    stems = [s for st in store.analyze(["kayak trip lake"]) for s in st]
    return hits, block.block, [(p.id, p.score) for p in block.pointers], store.term_stats(ns, stems)


def test_another_namespace_never_moves_this_ones_results_or_scores(store: Store, ns):
    store.capture(ns, req("b1", ["we planned a kayak trip to the lake", "the trip got cancelled by rain",
                                 "my kayak is red", "lunch was pasta with friends"]))
    before = _b_observes(store, ns)
    assert before[0] and before[1] and before[3][0] == 4
    # Tenant A: 3,000 turns about kayak trips (in one batch and in single captures).
    store.capture_many(ns + "_a", [req(f"a{s}", [f"kayak trip {s}-{i}: paddled the kayak on the trip"
                                                 for i in range(100)]) for s in range(29)])
    for i in range(100):
        store.capture(ns + "_a", req("a-last", [f"kayak trip note {j}" for j in range(i + 1)]))
    assert store.term_stats(ns + "_a", [s for st in store.analyze(["kayak"]) for s in st])[0] == 3_000
    assert _b_observes(store, ns) == before


def _b_memory_ranking(store: Store, ns: str):
    """What namespace ``ns`` learns about "kayak trip" from its memories: ranked ids and scores (live, then with
    superseded ones), and the retraction candidates of a "kayak trip" retraction."""
    ranked = [[(m.id, s) for m, s in store.search_memories(ns, fts5_query("kayak trip"), k=10, include_superseded=sup)]
              for sup in (False, True)]
    with store.read() as c:
        candidates = [tuple(r) for r in store._retraction_candidates(c, ns, "kayak trip")]
    return ranked, candidates


def test_another_namespace_never_moves_this_ones_memory_ranking(store: Store, ns):
    r = store.capture(ns, req("b1", ["we planned a kayak trip to the lake", "my kayak is red"]))
    t0, t1 = r.turn_ids
    first = store.write_extraction(ns, _plan("b1", entities=[EntityPlan("Maya", "person", "the user")], items=[
        ItemPlan("point", "Maya planned a kayak trip to the lake", about=("Maya",), search_keys=("kayak", "trip"),
                 sources=(SourcePlan(t0, "kayak trip"),)),
        ItemPlan("event", "The trip got cancelled by rain", about=("Maya",), sources=(SourcePlan(t0, None),)),
        ItemPlan("point", "Maya owns a red kayak", about=("Maya", "Kayak"), sources=(SourcePlan(t1, None),)),
        *(ItemPlan("point", f"Maya likes {food}", sources=(SourcePlan(t1, None),))
          for food in ("pasta", "miso soup", "tea", "figs", "rye bread", "plums")),
    ]), finalize=_finalize)
    store.write_extraction(ns, _plan("b1", items=[ItemPlan("point", "Maya owns a blue kayak for the trip",
                                                          supersedes=first.memory_ids[2])]), finalize=_finalize)
    before = _b_memory_ranking(store, ns)
    assert len(before[0][0]) == 3 and len(before[0][1]) == 4 and before[1]
    assert all(s > 0.5 for _, s in before[0][1])  # not FTS5's 1e-6 floor: kayaks are rare in B
    # Tenant A: 300 memories about kayak trips, their entity named Kayak Trip too.
    a = store.capture(ns + "_a", req("a1", ["kayak trip"]))
    for part in range(3):
        store.write_extraction(ns + "_a", _plan("a1", entities=[EntityPlan("Kayak Trip", "event", None)], items=[
            ItemPlan("point", f"kayak trip {part}-{i}: paddled the kayak on the trip", about=("Kayak Trip",),
                     search_keys=("kayak trip",), sources=(SourcePlan(a.turn_ids[0], None),))
            for i in range(100)]), finalize=_finalize)
    assert len(store.search_memories(ns + "_a", fts5_query("kayak trip"), k=500)) == 300
    assert _b_memory_ranking(store, ns) == before


def test_a_store_of_one_turn_answers_about_it(store: Store, ns):
    store.capture(ns, req("s1", ["my kayak is red"]))
    block = Memory(store=store, namespace=ns).context([{"role": "user", "content": "what colour is my kayak?"}],
                                                      time_budget_ms=None)
    assert "my kayak is red" in block.block


def _delete_turns(store: Store, ns: str, turn_ids: list[str]) -> None:
    """Delete turns as a forgetting feature must: their statistics first, in the same transaction."""
    mark = "?" if isinstance(store, SQLiteStore) else "%s"

    def write(c):
        store.unindex_turns(c, ns, turn_ids)
        for tid in turn_ids:
            c.execute(f"DELETE FROM turns WHERE namespace = {mark} AND turn_id = {mark}", (ns, tid))

    store.transaction(write)


def test_ranking_statistics_are_exact_after_captures_and_deletes(store: Store, ns):
    texts = {"s1": ["Kayaks and canoes", {"role": "user", "name": "Kay Ak", "content": "kayak kayak!"}, "pasta"],
             "s2": ["a canoe trip", "x" * 20_000 + " kayak", "Café kayaking"]}
    receipts = [store.capture(ns, req(s, ts)) for s, ts in texts.items()]
    store.capture(ns + "_other", req("s1", ["kayak canoe pasta"] * 5))

    def expected(sessions):
        turns = [t if isinstance(t, dict) else {"content": t} for s in sessions for t in texts[s]]
        content = [set(store.analyze([t["content"]])[0]) for t in turns]
        names = [set(store.analyze([t.get("name") or ""])[0]) for t in turns]
        vocab = set().union(*content, *names)
        return len(turns), {w: (sum(w in c for c in content), sum(w in n for n in names)) for w in vocab}

    vocab = sorted(expected(["s1", "s2"])[1])
    assert store.term_stats(ns, vocab) == expected(["s1", "s2"])
    _delete_turns(store, ns, receipts[0].turn_ids)
    assert store.term_stats(ns, vocab) == expected(["s2"])
    assert store.term_stats(ns + "_other", vocab)[0] == 5


def _statistics(store: Store, ns: str):
    """A namespace's ranking statistics as stored: totals, per-term counts, and each turn's indexed length."""
    with store.read() as c:
        if isinstance(store, SQLiteStore):
            row = c.execute("SELECT ns_id, n_turns, n_tokens FROM rank_namespaces WHERE namespace = ?",
                            (ns,)).fetchone()
            terms = c.execute("SELECT term, n_turns, n_content, n_name FROM rank_terms WHERE ns_id = ? ORDER BY term",
                              (row[0],)).fetchall()
            lengths = c.execute("SELECT t.session_id, t.idx, r.n_tokens FROM turns t JOIN rank_turns r"
                                " ON r.rowid = t.rowid WHERE t.namespace = ? ORDER BY 1, 2", (ns,)).fetchall()
            # What the index itself holds for those turns: one instance per token (what FTS5's bm25() counts).
            ensure_temp(c)
            held = dict(c.execute("SELECT doc, COUNT(*) FROM temp.tortoise_turns_inst GROUP BY doc").fetchall())
            rowids = c.execute("SELECT session_id, idx, rowid FROM turns WHERE namespace = ? ORDER BY 1, 2",
                               (ns,)).fetchall()
            assert [tuple(r)[2] for r in lengths] == [held.get(r[2], 0) for r in rowids]
            totals = tuple(row)[1:]
        else:
            totals = c.execute("SELECT n_turns, n_tokens FROM rank_namespaces WHERE namespace = %s", (ns,)).fetchone()
            terms = c.execute("SELECT term, n_turns, n_content, n_name FROM rank_terms WHERE namespace = %s"
                              " ORDER BY term COLLATE \"C\"", (ns,)).fetchall()
            lengths = c.execute("SELECT session_id, idx, fts_len FROM turns WHERE namespace = %s"
                                " ORDER BY session_id COLLATE \"C\", idx", (ns,)).fetchall()
    return tuple(totals), [tuple(r) for r in terms], [tuple(r) for r in lengths]


def test_ranking_statistics_stay_exact_for_turns_of_128_tokens_and_more(store: Store, ns):
    """A turn's length in tokens past 127 (a longer docsize record on SQLite) is counted in and out exactly."""
    words = [f"w{i}" for i in range(400)]
    texts = [" ".join(words[:n]) for n in (1, 127, 128, 129, 300, 400)]
    turns = [{"role": "user", "name": " ".join(words[:k]), "content": t} for k, t in zip((0, 2, 127, 60, 1, 3), texts)]
    turns[0].pop("name")
    receipt = store.capture(ns, req("s1", turns))
    totals, _, lengths = _statistics(store, ns)
    assert totals[0] == 6
    assert totals[1] == sum(r[2] for r in lengths) > 128 * 4
    assert 400 + 3 in [r[2] for r in lengths]
    _delete_turns(store, ns, receipt.turn_ids[2:4])
    totals, terms, lengths = _statistics(store, ns)
    assert totals == (4, sum(r[2] for r in lengths))
    assert dict((t[0], t[1:]) for t in terms)[store.analyze(["w127"])[0][0]] == (2, 2, 0)


_words = st.sampled_from(["kayak", "kayaks", "trip", "lake", "Café", "été", "🛶", "a", "the", "x" * 40, "río"])
_turn = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant"]),
    "content": st.lists(_words, min_size=1, max_size=12).map(" ".join),
}, optional={"name": st.lists(_words, min_size=1, max_size=2).map(" ".join)})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=st.lists(st.lists(_turn, min_size=1, max_size=6), min_size=1, max_size=8),
       cuts=st.lists(st.integers(0, 8), max_size=4))
def test_ranking_statistics_after_any_split_of_a_batch_equal_those_of_one_batch(store: Store, sessions, cuts):
    """One capture_many, or the same requests in pieces (a session may come back with more turns): the same
    statistics, and on SQLite each turn's length is what the index holds for it."""
    one, split = f"one_{uuid.uuid4().hex[:10]}", f"split_{uuid.uuid4().hex[:10]}"
    # Session i again with all its turns after a first capture of its first half: an append.
    halves = [req(f"s{i}", ts[: (len(ts) + 1) // 2]) for i, ts in enumerate(sessions)]
    wholes = [req(f"s{i}", ts) for i, ts in enumerate(sessions)]
    store.capture_many(one, halves + wholes)
    batch = halves + wholes
    bounds = sorted({0, len(batch), *(min(c, len(batch)) for c in cuts)})
    for a, b in zip(bounds, bounds[1:]):
        store.capture_many(split, batch[a:b])
    assert _statistics(store, split) == _statistics(store, one)


# -- size: a bounded part of a long turn is what ranking reads --------------------------------------


def _log_paste(megabytes: float) -> str:
    """A pasted log that repeats the words a real question uses."""
    line = "2024-05-01 ERROR dog walker called: Biscuit the dog was called twice, park walk timeout"
    return "\n".join([line] * int(megabytes * 1_000_000 / (len(line) + 1)))


def test_a_multi_megabyte_paste_is_kept_whole_and_crowds_out_nothing(store: Store, ns):
    from tortoise_sdk.search import INDEX_CHARS

    store.capture(ns, req("s1", ["my dog is called Biscuit", "we walk Biscuit in the park every morning",
                                 "lunch was pasta", "the weather was grey"]))
    mem = Memory(store=store, namespace=ns)
    ask = [{"role": "user", "content": "what is my dog called?"}]
    search_before = [(h.turn_id, h.score) for h in mem.search("what is my dog called?", k=3)]
    block_before = mem.context(ask, time_budget_ms=None)
    assert block_before.pointers
    pastes = {mb: _log_paste(mb) for mb in (1.7, 5)}
    receipts = [store.capture(ns, req(f"paste-{mb}", [text, "that was the log"])) for mb, text in pastes.items()]
    for receipt, text in zip(receipts, pastes.values()):
        assert store.get_turn(ns, receipt.turn_ids[0]).content == text
        assert mem.expand(receipt.turn_ids[0]).content == text
        assert [t.content for t in mem.turns(receipt.session_id)] == [text, "that was the log"]
    hits = mem.search("what is my dog called?", k=3)
    assert hits[0].turn_id == search_before[0][0] and hits[0].content == "my dog is called Biscuit"
    seen: list[int] = []
    analyze = store.analyze
    store.analyze = lambda texts: (seen.extend(len(t) for t in texts), analyze(texts))[1]  # type: ignore[method-assign]
    try:
        block = mem.context(ask, time_budget_ms=None)
    finally:
        del store.analyze
    assert [p.id for p in block.pointers] == [p.id for p in block_before.pointers]
    assert max(seen) <= INDEX_CHARS  # the reflex never reads more of a turn than is indexed


def test_the_reflex_reads_exactly_the_indexed_head_of_a_long_turn(store: Store, ns):
    """candidate_turns and turns_at give a long turn's first INDEX_CHARS characters, whichever way the
    engine reads them (SQLite: a blob handle for turns with many indexed tokens, substr() otherwise),
    multi-byte characters across the cut included."""
    from tortoise_sdk.search import INDEX_CHARS

    wordy = "kayak été 🛶 " * 200_000  # many tokens, 2- and 4-byte characters around the cut
    symbols = "kayak " + "→ " * 2_000_000  # few tokens, just as long
    store.capture(ns, req("s1", [wordy, symbols, "a short kayak turn"]))
    hits = {h.index: h.content for h in store.candidate_turns(ns, {"kayak": 1.0}, k=10)}
    near = {h.index: h.content for h in store.turns_at(ns, [("s1", 0), ("s1", 1), ("s1", 2)])}
    expected = {0: wordy[:INDEX_CHARS], 1: symbols[:INDEX_CHARS], 2: "a short kayak turn"}
    assert hits == near == expected


# -- arguments the driver cannot encode -----------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda s, ns: s.turns(ns, "\ud800"),
    lambda s, ns: s.receipts(ns, "\ud800"),
    lambda s, ns: s.get_turn(ns, "t_\ud800"),
    lambda s, ns: s.get_cursor(ns, "\ud800"),
    lambda s, ns: s.put_cursor(ns, "\ud800", {}, 0),
    lambda s, ns: s.sessions("\ud800"),
], ids=["turns", "receipts", "get_turn", "get_cursor", "put_cursor", "sessions"])
def test_a_lone_surrogate_reaching_the_store_is_invalid_input(store, ns, call):
    """Below ``Memory``'s checks, each engine still refuses it as input, never a UnicodeEncodeError."""
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        call(store, ns)


RESTATED = [["Maya works at Acme.", "maya WORKS at the Acme", "Maya really works at Acme!"],
            ["Maya has two cats", "Maya has 2 cats.", "maya has two cat"],
            ["Maya doesn't drink coffee", "Maya does not drink coffee"],
            ["Maya adopted Miso", "Maya adopts Miso."]]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(draws=st.lists(st.tuples(st.integers(0, len(RESTATED) - 1), st.integers(0, 2), st.integers(0, 1),
                                st.integers(0, 2)), min_size=1, max_size=8))
def test_restated_facts_are_one_memory_each_with_every_source_in_any_order(store: Store, draws):
    """Facts restated in other words, in any order, duplicated, over several extractions: one memory per fact
    (NOOP, never a second ADD) whose sources are the union of every restatement's."""
    ns = f"ns_{uuid.uuid4().hex[:12]}"
    r = store.capture(ns, req("s1", ["I work at Acme", "Acme, yes", "I have two cats", "two of them",
                                     "no coffee for me", "never coffee", "I adopted Miso", "Miso is mine"]))
    plans: list[list[ItemPlan]] = [[], [], []]
    expected: dict[int, set] = {}
    for fact, wording, turn, run in draws:
        text = RESTATED[fact][wording % len(RESTATED[fact])]
        source = r.turn_ids[2 * fact + turn]  # a source is a turn: two restatements from one turn are one source
        plans[run].append(ItemPlan("point", text, sources=(SourcePlan(source, None),)))
        expected.setdefault(fact, set()).add(source)
    for items in plans:
        if items:
            store.write_extraction(ns, _plan("s1", items=items), finalize=_finalize)
    mems = store.memories(ns)
    assert len(mems) == len(expected)
    assert sorted(sorted(s.turn_id for s in m.sources) for m in mems) == sorted(sorted(v) for v in expected.values())


def test_a_memory_keeps_its_category_and_memories_filter_on_it(seeded):
    store, ns, r = seeded
    t0, t1 = r.turn_ids
    store.write_extraction(ns, _plan("s1", items=[
        ItemPlan("point", "Maya works at Acme", sources=(SourcePlan(t0, None),), category="work"),
        ItemPlan("event", "Maya adopted a cat named Miso", sources=(SourcePlan(t1, None),), category="pets"),
        ItemPlan("point", "Maya likes tea", sources=(SourcePlan(t1, None),)),
    ]), finalize=_finalize)
    assert [(m.content, m.category) for m in store.memories(ns)] == [
        ("Maya works at Acme", "work"), ("Maya adopted a cat named Miso", "pets"), ("Maya likes tea", None)]
    assert [m.content for m in store.memories(ns, category="pets")] == ["Maya adopted a cat named Miso"]
    assert store.memories(ns, category="health") == []
    assert store.get_memory(ns, store.memories(ns)[0].id).category == "work"


def test_a_first_name_alone_resolves_to_the_one_known_person_it_begins(store: Store, ns):
    """"Mel" after "Melanie Hart" is stored is her (one entity, the graph links her); with two people it
    could be, or a name that is not a first name of anyone, it stays its own entity."""
    r = store.capture(ns, req("s1", ["Melanie Hart is my wife", "Mel loves painting", "Caroline Ray and Caro"]))
    t0, t1, t2 = r.turn_ids
    store.write_extraction(ns, _plan("s1", entities=[EntityPlan("Melanie Hart", "person")], items=[
        ItemPlan("point", "Melanie Hart is the user's wife", about=("Melanie Hart",), sources=(SourcePlan(t0, None),))]),
        finalize=_finalize)
    store.write_extraction(ns, _plan("s1", entities=[EntityPlan("Melanie", "person")], items=[
        ItemPlan("point", "Melanie loves painting", about=("Melanie",), sources=(SourcePlan(t1, None),))]),
        finalize=_finalize)
    assert [e["name"] for e in store.find_entities(ns, ["Melanie", "Melanie Hart"])] == ["Melanie Hart"]
    assert [m.content for m in store.memories_about(ns, ["melanie hart"], k=5)] == [
        "Melanie loves painting", "Melanie Hart is the user's wife"]
    # Two people named Melanie: "Melanie" alone is neither.
    store.write_extraction(ns, _plan("s1", entities=[EntityPlan("Melanie Stone", "person"),
                                                     EntityPlan("Melanie", "person")]), finalize=_finalize)
    assert sorted(e["name"] for e in store.find_entities(ns, ["Melanie", "Melanie Stone", "Melanie Hart"])) == [
        "Melanie", "Melanie Hart", "Melanie Stone"]
    # A place is never taken for a person; a word that is no one's first name stays its own.
    store.write_extraction(ns, _plan("s1", entities=[EntityPlan("Caroline Ray", "person"), EntityPlan("Ray", "person"),
                                                     EntityPlan("Caroline", "place")]), finalize=_finalize)
    assert sorted(e["name"] for e in store.find_entities(ns, ["Ray", "Caroline"])) == ["Caroline", "Ray"]


def test_entities_lists_the_namespace_s_resolved_entities(store: Store, ns):
    store.capture(ns, req("s1", ["Melanie Hart is my wife"]))
    store.write_extraction(ns, _plan("s1", entities=[EntityPlan("Melanie Hart", "person", "the wife"),
                                                     EntityPlan("Mel", "person"), EntityPlan("melanie", "person"),
                                                     EntityPlan("Paris", "place")]), finalize=_finalize)
    # "melanie" is Melanie Hart (a first name), "Mel" too (a clipped name), and her note names her role.
    assert sorted((e["name"], e["kind"], e["note"]) for e in store.entities(ns)) == [
        ("Melanie Hart", "person", "the wife"), ("Paris", "place", None)]
    hart = next(e for e in store.entities(ns) if e["name"] == "Melanie Hart")
    assert sorted((a["name"], a["how"]) for a in hart["aliases"]) == [
        ("Mel", "clipped name"), ("melanie", "first name"), ("user's wife", "role")]
    assert next(a for a in hart["aliases"] if a["how"] == "role")["evidence"] == "note: the wife"
    assert store.entities(ns + "_other") == []
    assert Memory(store=store, namespace=ns).entities() == store.entities(ns)


def test_a_batch_dates_a_new_session_by_its_turns_as_a_single_capture_does(store_url, ns):
    """A reviewer's: on PostgreSQL a batch created each session undated first, then kept that date."""
    from tortoise_sdk import Memory

    turns = [{"role": "user", "content": "x", "timestamp": "2024-05-01T10:00:00Z"}]
    with Memory(store_url, namespace=ns) as m:
        m.capture_many([{"session_id": "many", "turns": turns}, {"session_id": "dated", "session_date": "2024-06-02",
                                                                 "turns": turns}])
        m.capture("one", turns)
        dates = {s.session_id: (s.session_date or "")[:10] for s in m.sessions()}
    assert dates == {"many": "2024-05-01", "dated": "2024-06-02", "one": "2024-05-01"}


_PLAN_IDS = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d"]))
_PLAN_TURN = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                    "content": st.sampled_from(["x", "y", "z"]), "id": _PLAN_IDS})
_PLAN_OP = st.one_of(
    st.tuples(st.just("capture"), st.booleans(), st.lists(_PLAN_TURN, min_size=0, max_size=6)),
    st.tuples(st.just("forget"), st.lists(st.integers(0, 30), max_size=3)),
    # Stored turns sent again (a whole conversation resent, a retried append), the last one maybe edited.
    st.tuples(st.just("resend"), st.booleans(), st.integers(0, 12), st.integers(1, 6), st.booleans(), st.booleans(),
              st.booleans()),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_PLAN_OP, min_size=1, max_size=12))
def test_a_capture_plans_over_the_turns_it_reads_what_it_planned_over_the_whole_session(store: Store, ops):
    """Reading only the stored turns a request can meet (its ids, its id-less positions, the latest turns) plans
    what ``plan_append`` over the whole stored session plans: the same rows, the same CaptureConflict, the same
    repeated_tail warning, for any history of captures, appends and deleted turns (gaps in idx)."""
    from tortoise_sdk.store.capture_plan import plan_append, repeated_tail

    ns, mark = f"ns_{uuid.uuid4().hex[:12]}", "?" if isinstance(store, SQLiteStore) else "%s"

    def stored(whole=False):
        with store.read() as c:
            rows = sorted(tuple(r) for r in c.execute(
                "SELECT idx, external_id, content_hash, role, content FROM turns"
                f" WHERE namespace = {mark} AND session_id = {mark}", (ns, "s")).fetchall())
        return rows if whole else [r[:3] for r in rows]

    for op in ops:
        full = stored()
        if op[0] == "forget":
            gone = {full[i % len(full)][0] for i in op[1]} if full else set()
            with store.read() as c:
                tids = [r[0] for r in c.execute(f"SELECT turn_id, idx FROM turns WHERE namespace = {mark}"
                                                f" AND session_id = {mark}", (ns, "s")).fetchall() if r[1] in gone]
            _delete_turns(store, ns, tids)
            continue
        if op[0] == "resend":
            _, append, start, n, from_end, keep_ids, edit = op
            whole = stored(whole=True)
            part = whole[-n:] if from_end else whole[start:start + n]
            turns = [{"role": r[3], "content": r[4], "id": r[1] if keep_ids else None} for r in part]
            if edit and turns:
                turns[-1]["content"] = "edited"
        else:
            _, append, turns = op
        try:
            request = req("s", [{k: v for k, v in t.items() if v is not None} for t in turns])
        except Exception:
            continue  # a request the SDK refuses never reaches the plan
        request.append = append
        try:
            rows, want = plan_append(ns, request, full, "r", "now"), None
        except CaptureConflict as exc:
            rows, want = None, (str(exc), exc.field)
        tail = [w.code for w in repeated_tail(request, full)]
        if want is not None:
            with pytest.raises(CaptureConflict) as got:
                store.capture(ns, request)
            assert (str(got.value), got.value.field) == want
            assert stored() == full
            continue
        receipt = store.capture(ns, request)
        assert receipt.turn_ids == [r[0] for r in rows]
        assert [w.code for w in receipt.warnings if w.code == "repeated_tail"] == tail
        assert stored() == sorted(full + [(r[3], r[7], r[10]) for r in rows])
