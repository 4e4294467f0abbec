"""Issue 26's API on both engines: ``append``, ``namespaces``, and memories a host adds and corrects.

Each test acts in its own namespace of a per-module database (PostgreSQL: a throwaway one on
``$TORTOISE_TEST_PG_URL``; unreachable, it skips loudly, or fails under ``CI=true``).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tortoise_sdk.errors import IdempotencyConflict, InvalidInput, NotFoundError
from tortoise_sdk.memory import HOST_SESSION, Memory
from tortoise_sdk.store import open_store

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory):
    return str(tmp_path_factory.mktemp("api") / "memory.db")


@pytest.fixture(params=BACKENDS)
def store(request):
    s = open_store(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    yield s
    s.close()


def fresh(store) -> Memory:
    """A Memory on ``store`` in a namespace of its own (the store is closed by its fixture, not here)."""
    return Memory(store=store, namespace=f"ns_{uuid.uuid4().hex[:12]}")


def said(mem: Memory, sid: str) -> list[tuple[str, str]]:
    return [(h.role, h.content) for h in mem.turns(sid)]


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


# -- append --------------------------------------------------------------------------------------


def test_append_puts_new_turns_after_the_last_stored_one(store):
    """The loop pattern: only the last exchange is sent each time. ``capture`` of history[-2:] raises
    CaptureConflict here on main (position 0 is already stored with other content)."""
    mem = fresh(store)
    mem.capture("chat", ex("Hi", "Hello!"))
    first = mem.append("chat", ex("My dog is Biscuit", "Nice name."))
    second = mem.append("chat", {"role": "user", "content": "Thanks"})  # one turn alone
    assert said(mem, "chat") == [("user", "Hi"), ("assistant", "Hello!"), ("user", "My dog is Biscuit"),
                                 ("assistant", "Nice name."), ("user", "Thanks")]
    assert (first.turns_stored, second.turns_stored) == (2, 1)
    assert [h.turn_id for h in mem.turns("chat")][2:] == [*first.turn_ids, *second.turn_ids]


def test_append_starts_a_session(store):
    mem = fresh(store)
    receipt = mem.append("new", ex("a", "b"), session_date="2024-05-01T10:00:00")
    assert receipt.turns_stored == 2 and receipt.session_date == "2024-05-01T10:00:00"
    assert [s.session_id for s in mem.sessions()] == ["new"]


def test_a_session_without_a_date_is_dated_by_its_turns_else_append_by_the_clock(store):
    mem = fresh(store)
    # The turns' first timestamp dates a capture or an append; a later one, or a later append, keeps it, silently.
    stamped = [{"role": "user", "content": "I live in Lisbon", "timestamp": "not a date"},
               {"role": "assistant", "content": "Nice", "timestamp": "2024-01-01T10:00:00Z"}]
    receipt = mem.capture("imported", stamped)
    assert receipt.session_date == "2024-01-01T10:00:00+00:00"
    later = mem.append("imported", [{"role": "user", "content": "More", "timestamp": "2024-02-01T10:00:00"}])
    assert later.session_date == "2024-01-01T10:00:00+00:00" and not later.warnings
    assert mem.capture("undated", ex("a", "b")).session_date is None  # an import of no known day stays undated
    # ... and stays so: a default dates only a new session (the clock would date "I live in Porto" today).
    assert mem.append("undated", ex("c", "d")).session_date is None
    stamped_later = [*ex("a", "b"), *ex("c", "d"), {"role": "user", "content": "e", "timestamp": "2024-09-09T00:00:00"}]
    assert mem.capture("undated", stamped_later).session_date is None
    # append is the chat-loop write: no date and no timestamps, its session is dated now ...
    first = mem.append("live", ex("a", "b"), idempotency_key="live:1")
    assert first.session_date is not None and first.session_date[:4] >= "2026"
    # ... and a retry a moment later is the same request: a replay, not a conflict over the clock.
    assert mem.append("live", ex("a", "b"), idempotency_key="live:1").replayed
    assert not mem.append("live", ex("c", "d")).warnings
    # A date the caller names still wins on a new session, and is warned about on a dated one.
    assert mem.append("named", ex("a", "b"), session_date="2024-05-01").session_date == "2024-05-01T00:00:00"
    assert [w.code for w in mem.append("live", ex("e", "f"), session_date="2020-01-01").warnings] == [
        "session_date_kept"]


def test_append_with_a_key_replays_and_refuses_other_turns(store):
    mem = fresh(store)
    first = mem.append("chat", ex("a", "b"), idempotency_key="chat:1")
    again = mem.append("chat", ex("a", "b"), idempotency_key="chat:1")
    assert again.replayed and again.receipt_id == first.receipt_id and again.turn_ids == first.turn_ids
    assert len(mem.turns("chat")) == 2
    with pytest.raises(IdempotencyConflict):
        mem.append("chat", ex("a", "c"), idempotency_key="chat:1")
    # A capture with the same key and turns is another request, not a replay of the append.
    with pytest.raises(IdempotencyConflict):
        mem.capture("chat", ex("a", "b"), idempotency_key="chat:1")


def test_append_skips_a_turn_whose_id_is_stored(store):
    mem = fresh(store)
    mem.append("chat", [{"role": "user", "content": "a", "id": "m1"}])
    receipt = mem.append("chat", [{"role": "user", "content": "a", "id": "m1"},
                                  {"role": "assistant", "content": "b", "id": "m2"}])
    assert receipt.turns_stored == 1 and said(mem, "chat") == [("user", "a"), ("assistant", "b")]


def test_append_refuses_what_capture_refuses(store):
    mem = fresh(store)
    with pytest.raises(InvalidInput) as err:
        mem.append("chat", [])
    assert err.value.field == "turns"
    with pytest.raises(InvalidInput):
        mem.append("chat", [{"role": "robot", "content": "x"}])
    assert mem.sessions() == []


# Exchanges drawn from a tiny alphabet so that repeats (the hard case) are common.
_exchanges = st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from("xy")), min_size=1, max_size=2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(_exchanges, st.booleans(), st.integers(0, 2)), min_size=1, max_size=6))
def test_append_rule_nothing_lost_nothing_invented(store, calls):
    """Each logical append, sent 1 + ``retries`` times. With a key the session holds each exactly once;
    without one every call is stored (a retry cannot be told from a repeat), and a call whose turns equal
    the stored tail says so in a ``repeated_tail`` warning."""
    mem = fresh(store)
    expected: list[tuple[str, str]] = []
    for n, (pairs, keyed, retries) in enumerate(calls):
        turns = [t for u, a in pairs for t in ex(u, a)]
        sent = [(t["role"], t["content"]) for t in turns]
        first = None
        for attempt in range(1 + retries):
            tail_before = expected[-len(sent):]
            receipt = mem.append("s", turns, idempotency_key=f"s:{n}" if keyed else None)
            if keyed and attempt:
                assert receipt.replayed and receipt.receipt_id == first.receipt_id
                continue
            first = receipt
            expected += sent
            assert receipt.turns_stored == len(sent) and not receipt.replayed
            warned = [w.code for w in receipt.warnings] == ["repeated_tail"]
            assert warned == (not keyed and tail_before == sent)
    assert said(mem, "s") == expected


# -- namespaces -----------------------------------------------------------------------------------


def test_namespaces_count_sessions_turns_and_live_memories(store):
    a, b = fresh(store), fresh(store)
    a.append("s1", ex("x", "y"))
    a.append("s2", {"role": "user", "content": "z"})
    first = b.remember("Maya has a dog")
    b.correct_memory(first.id, "Maya has two dogs")
    found = {n.name: n for n in a.namespaces()}
    assert (found[a.namespace].sessions, found[a.namespace].turns, found[a.namespace].memories) == (2, 3, 0)
    assert (found[b.namespace].sessions, found[b.namespace].turns, found[b.namespace].memories) == (0, 0, 1)
    assert f"ns_{uuid.uuid4().hex[:12]}" not in found
    names = [n.name for n in a.namespaces()]
    assert names == sorted(names, key=lambda s: s.encode())


# -- memories a host adds and corrects ------------------------------------------------------------


def test_remember_adds_a_memory_without_inventing_a_turn(store):
    mem = fresh(store)
    rec = mem.remember("Maya's dog is called Biscuit", about=["Maya", "Biscuit"])
    assert rec.status == "live" and rec.kind == "point" and rec.sources == []
    assert rec.session_id == HOST_SESSION and sorted(rec.entities) == ["Biscuit", "Maya"]
    assert mem.sessions() == [] and [m.id for m in mem.memories()] == [rec.id]
    assert mem.remember("maya's dog is called biscuit").id == rec.id  # the same fact: NOOP
    assert len(mem.memories(include_superseded=True)) == 1
    assert [m.id for m in mem.search_memories("what is the dog called")] == [rec.id]
    assert rec.id in (mem.context([{"role": "user", "content": "what is Biscuit?"}]).block or "")


def test_correct_memory_supersedes_with_history(store):
    mem = fresh(store)
    old = mem.remember("Maya works at Acme", about=["Maya"], kind="event", when="2023")
    new = mem.correct_memory(old.id, "Maya works at Helix Health")
    assert new.supersedes == old.id and new.kind == "event" and new.when == "2023" and new.entities == ["Maya"]
    assert mem.store.get_memory(mem.namespace, old.id).status == "superseded"
    history = mem.memory_history(old.id)
    assert [(m.content, m.status) for m in history] == [("Maya works at Acme", "superseded"),
                                                        ("Maya works at Helix Health", "live")]
    assert [m.id for m in mem.memory_history(new.id)] == [old.id, new.id]
    assert [m.id for m in mem.search_memories("Maya works")] == [new.id]
    assert {m.id for m in mem.search_memories("Maya works", include_superseded=True)} == {old.id, new.id}
    # Correcting an old version corrects the fact: the live head is superseded, the chain stays one line.
    third = mem.correct_memory(old.id, "Maya works at Helix Health as a nurse")
    assert [m.id for m in mem.memory_history(old.id)] == [old.id, new.id, third.id]


def test_correct_memory_fixes_case_and_punctuation(store):
    # A host's correction is taken as written: fixing a name's case or a number's punctuation is a new
    # version, not "the same fact" (it was a NOOP that returned the old text).
    mem = fresh(store)
    old = mem.remember("maya works at acme, since 2019", about=["Maya"])
    new = mem.correct_memory(old.id, "Maya works at ACME since 2019.")
    assert (new.content, new.supersedes) == ("Maya works at ACME since 2019.", old.id)
    assert [m.content for m in mem.memories()] == ["Maya works at ACME since 2019."]
    # the very same text again changes nothing
    assert mem.correct_memory(new.id, "Maya works at ACME since 2019.").id == new.id
    assert [m.id for m in mem.memory_history(old.id)] == [old.id, new.id]


def test_the_host_memories_session_cannot_be_captured(store):
    # captured turns under it would mix with what remember() added, and forgetting them would take those along
    mem = fresh(store)
    rec = mem.remember("Maya is allergic to penicillin")
    with pytest.raises(InvalidInput) as err:
        mem.capture(HOST_SESSION, [{"role": "user", "content": "I am a captured turn"}])
    assert err.value.field == "session_id" and "remember()" in str(err.value)
    assert [m.id for m in mem.memories()] == [rec.id] and mem.sessions() == []


def test_correct_memory_refusals(store):
    mem = fresh(store)
    with pytest.raises(NotFoundError):
        mem.correct_memory("m_nope", "x")
    with pytest.raises(NotFoundError):
        mem.memory_history("m_nope")
    rec = mem.remember("a fact")
    with pytest.raises(InvalidInput) as err:
        mem.correct_memory(rec.id, "   ")
    assert err.value.field == "text"
    mem.forget_memory(rec.id)
    with pytest.raises(NotFoundError):
        mem.correct_memory(rec.id, "another")


@pytest.mark.parametrize("kwargs, field", [
    ({"text": ""}, "text"), ({"text": 3}, "text"), ({"text": "a\x00b"}, "text"),
    ({"text": "ok", "kind": "fact"}, "kind"), ({"text": "ok", "about": "Maya"}, "about"),
])
def test_remember_refuses_bad_arguments(store, kwargs, field):
    mem = fresh(store)
    with pytest.raises(InvalidInput) as err:
        mem.remember(**kwargs)
    assert err.value.field == field
    assert mem.memories() == []


def test_search_memories_checks_its_arguments(store):
    mem = fresh(store)
    mem.remember("Biscuit is a dog")
    assert mem.search_memories("the and of") == []
    for bad in ({"query": 3}, {"query": "dog", "k": "3"}, {"query": "dog", "k": 10**6}):
        with pytest.raises(InvalidInput):
            mem.search_memories(**bad)


def test_concurrent_appends_to_one_session_lose_nothing(store):
    """Each append reads the session's end inside its own transaction, so writers racing on one session
    each get their own positions: every turn stored once, each exchange kept together."""
    from concurrent.futures import ThreadPoolExecutor

    mem = fresh(store)
    mem.append("s", ex("start", "ok"))

    def one(i: int):
        return mem.append("s", ex(f"question {i}", f"answer {i}"), idempotency_key=f"s:{i}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        receipts = list(pool.map(one, range(12)))
    turns = said(mem, "s")
    assert len(turns) == 2 + 24 and all(r.turns_stored == 2 for r in receipts)
    for i in range(12):
        at = turns.index(("user", f"question {i}"))
        assert turns[at + 1] == ("assistant", f"answer {i}")
    assert [h.index for h in mem.turns("s")] == list(range(26))


def test_turns_by_id_and_metadata_by_position_refuse_what_is_not_one(mem):
    from tortoise_sdk.errors import InvalidInput, InvalidType

    mem.capture("s", [{"role": "user", "content": "hi", "id": "m1"}, {"role": "user", "content": "yo", "id": "m2"}])
    assert [t.external_id for t in mem.turns("s", external_ids=("m2",))] == ["m2"]
    with pytest.raises(InvalidType):  # a single id would be read as its letters
        mem.turns("s", external_ids="m1")  # type: ignore[arg-type]
    with pytest.raises(InvalidType):
        mem.turns("s", external_ids=[1])  # type: ignore[list-item]
    assert len(mem.turn_metadata("s", start=1)) == 1 and mem.turn_metadata("s", stop=0) == {}
    with pytest.raises(InvalidInput):
        mem.turn_metadata("s", start=-1)


def test_turns_of_one_role_refuse_a_role_that_is_not_one(mem):
    from tortoise_sdk.errors import InvalidInput

    mem.capture("s", [{"role": "user", "content": "hi"}, {"role": "system", "content": "note"},
                      {"role": "user", "content": "yo"}])
    assert [t.content for t in mem.turns("s", role="user", last=1)] == ["yo"]
    assert [t.index for t in mem.turns("s", role="system")] == [1]
    with pytest.raises(InvalidInput):
        mem.turns("s", role="System")
