"""Capture semantics: validation before writing, append by identity, conflicts, idempotency, namespaces."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tortoise_sdk import CaptureConflict, IdempotencyConflict, Memory, TortoiseError, Turn
from tortoise_sdk.capture import TEXT_PART_TYPES
from tortoise_sdk.errors import ConfigError, InvalidInput, NotADatabase, NotFoundError


@pytest.fixture
def mem(tmp_path):
    with Memory(str(tmp_path / "m.db"), namespace="alice") as m:
        yield m


TURNS = [
    {"role": "user", "content": "I started at Acme as a nurse", "name": "Maya"},
    {"role": "assistant", "content": "Congratulations!"},
]


def _nothing_written(m: Memory) -> None:
    assert m.sessions() == []
    assert m.receipts() == []


@pytest.mark.parametrize(
    ("turns", "field"),
    [
        ([], "turns"),
        (None, "turns"),
        ("hello", "turns"),
        ([{"role": "bot", "content": "x"}], "turns[0].role"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": 42}], "turns[1].content"),
        ([{"role": "user"}], "turns[0].content"),
        ([{"role": "user", "content": "   "}, {"role": "assistant", "content": ""}], "turns"),
        ([{"role": "user", "content": "a", "id": "x"}, {"role": "user", "content": "b", "id": "x"}], "turns[1].id"),
        ([{"role": "user", "content": "nul \x00 byte"}], "turns[0].content"),
        ([{"role": "user", "content": "ok", "metadata": {"k": "a\x00"}}], "turns[0].metadata.k"),
        (["just a string"], "turns[0]"),
    ],
)
def test_invalid_capture_names_the_field_and_writes_nothing(mem, turns, field):
    with pytest.raises(InvalidInput) as info:
        mem.capture("s1", turns)
    assert info.value.field == field
    assert isinstance(info.value, TortoiseError) and isinstance(info.value, ValueError)
    _nothing_written(mem)
    with pytest.raises(InvalidInput) as checked:  # the same verdict with no store (before one is created)
        Memory.check_capture("s1", turns)
    assert checked.value.field == field


def test_bad_session_id_and_date_are_refused(mem):
    with pytest.raises(InvalidInput, match="session_id"):
        mem.capture("", TURNS)
    with pytest.raises(InvalidInput, match="session_date"):
        mem.capture("s1", TURNS, session_date="last tuesday")
    _nothing_written(mem)


def test_too_many_turns_is_refused(tmp_path):
    with Memory(str(tmp_path / "m.db"), max_turns_per_capture=3) as m:
        with pytest.raises(InvalidInput, match="exceeds the limit of 3"):
            m.capture("s1", [{"role": "user", "content": f"t{i}"} for i in range(4)])
        _nothing_written(m)
        assert m.capture("s1", [{"role": "user", "content": f"t{i}"} for i in range(3)]).turns_stored == 3


def test_check_sessions_and_check_capture_refuse_what_capture_would_with_no_store(tmp_path):
    before = sorted(tmp_path.rglob("*"))
    sessions = [{"session_id": "a", "turns": TURNS}, {"session_id": "b", "turns": [{"role": "user"}]}]
    with pytest.raises(InvalidInput, match=r"^sessions\[1\]: turns\[0\]\.content"):
        Memory.check_sessions(sessions)
    Memory.check_sessions(sessions[:1])
    with pytest.raises(InvalidInput, match="exceeds the limit of 1"):
        Memory.check_capture("s1", TURNS, max_turns_per_capture=1)
    Memory.check_capture("s1", TURNS, session_date="2024-03-02")
    assert sorted(tmp_path.rglob("*")) == before  # no store, no file


def test_receipt_fields_and_turn_model_input(mem):
    r = mem.capture("s1", [Turn(role="user", content="hello", id="m1"), TURNS[1]], session_date="2023-05-08T13:56:00")
    assert (r.session_id, r.turns_received, r.turns_stored, r.replayed, r.ok) == ("s1", 2, 2, False, True)
    assert r.session_date == "2023-05-08T13:56:00" and r.errors == [] and r.warnings == []
    assert len(r.turn_ids) == 2
    assert mem.receipts("s1") == [r]


def test_content_is_stored_whole(mem):
    big = "word " * 200_000 + "🐢 end"
    mem.capture("s1", [{"role": "user", "content": big, "metadata": {"k": [1, 2]}}])
    (t,) = mem.turns("s1")
    assert t.content == big


def test_recapture_appends_only_new_turns(mem):
    assert mem.capture("s1", TURNS).turns_stored == 2
    again = mem.capture("s1", TURNS + [{"role": "user", "content": "I also volunteer on weekends"}])
    assert (again.turns_received, again.turns_stored) == (3, 1)
    assert mem.capture("s1", TURNS).turns_stored == 0
    assert [t.index for t in mem.turns("s1")] == [0, 1, 2]


def test_changed_content_at_a_stored_position_is_a_conflict(mem):
    mem.capture("s1", TURNS)
    with pytest.raises(CaptureConflict, match="position 1"):
        mem.capture("s1", [TURNS[0], {"role": "assistant", "content": "Something else"}])
    assert [t.content for t in mem.turns("s1")] == [t["content"] for t in TURNS]


def test_identity_by_caller_id(mem):
    mem.capture("s1", [{"role": "user", "content": "a", "id": "m1"}, {"role": "user", "content": "b", "id": "m2"}])
    # only the new message, by id: appended; the known ids are skipped wherever they appear
    r = mem.capture("s1", [{"role": "user", "content": "c", "id": "m3"}, {"role": "user", "content": "a", "id": "m1"}])
    assert r.turns_stored == 1
    assert [(t.external_id, t.content) for t in mem.turns("s1")] == [("m1", "a"), ("m2", "b"), ("m3", "c")]
    with pytest.raises(CaptureConflict, match="'m2'"):
        mem.capture("s1", [{"role": "user", "content": "B!", "id": "m2"}])


def test_idempotency_key_replays_and_conflicts(mem):
    first = mem.capture("s1", TURNS, idempotency_key="k1")
    replay = mem.capture("s1", TURNS, idempotency_key="k1")
    assert replay.replayed and replay.receipt_id == first.receipt_id and replay.turns_stored == 2
    assert len(mem.receipts()) == 1
    with pytest.raises(IdempotencyConflict, match="k1"):
        mem.capture("s1", TURNS + [{"role": "user", "content": "more"}], idempotency_key="k1")
    assert len(mem.turns("s1")) == 2 and len(mem.receipts()) == 1


def test_namespaces_never_see_each_other(tmp_path):
    path = str(tmp_path / "shared.db")
    with Memory(path, namespace="alice") as a, Memory(path, namespace="bob") as b:
        ra = a.capture("s1", [{"role": "user", "content": "alice likes sailing", "id": "x"}], idempotency_key="k")
        b.capture("s1", [{"role": "user", "content": "bob likes chess", "id": "x"}], idempotency_key="k")
        assert [h.content for h in a.search("likes")] == ["alice likes sailing"]
        assert [h.content for h in b.search("likes")] == ["bob likes chess"]
        assert [t.content for t in b.turns("s1")] == ["bob likes chess"]
        assert len(a.receipts()) == len(b.receipts()) == 1 and len(a.sessions()) == 1
        with pytest.raises(NotFoundError):
            b.store.get_turn("bob", ra.turn_ids[0])
        assert a.search("chess") == [] and b.search("sailing") == []
        assert all(n.startswith(("session:", "turn:")) for n in a.graph().nodes)
        assert "bob likes chess" not in {d.get("content") for _, d in a.graph().nodes(data=True)}


def test_capture_many_is_one_transaction(mem):
    good = {"session_id": "a", "turns": TURNS}
    clash = {"session_id": "a", "turns": [{"role": "user", "content": "different first turn"}]}
    with pytest.raises(CaptureConflict):
        mem.capture_many([good, clash])
    _nothing_written(mem)
    with pytest.raises(InvalidInput, match=r"sessions\[1\]"):
        mem.capture_many([good, {"session_id": "b", "turns": []}])
    receipts = mem.capture_many([good, {"session_id": "b", "date": "2024-01-01", "turns": TURNS}])
    assert [r.turns_stored for r in receipts] == [2, 2]


def test_a_large_capture_many_commits_in_pieces_of_bounded_turns(mem, monkeypatch):
    """Each transaction of an import holds at most DEFAULT_IMPORT_PIECE_TURNS turns (whole sessions), so an
    import's size never runs into the store's per-call time bound; a conflict in a later piece leaves the
    earlier ones stored, and the same import again skips them."""
    import tortoise_sdk.memory as memory_module

    monkeypatch.setattr(memory_module, "DEFAULT_IMPORT_PIECE_TURNS", 5)
    calls: list[list[int]] = []
    capture_many = mem.store.capture_many
    monkeypatch.setattr(mem.store, "capture_many",
                        lambda ns, reqs: (calls.append([len(r.turns) for r in reqs]), capture_many(ns, reqs))[1])
    sessions = [{"session_id": f"s{i}", "turns": [{"role": "user", "content": f"turn {i}.{j}"} for j in range(n)]}
                for i, n in enumerate([2, 3, 1, 6, 2])]
    done: list[tuple[int, int]] = []
    receipts = mem.capture_many(sessions, progress=lambda a, b: done.append((a, b)))
    assert calls == [[2, 3], [1], [6], [2]]
    assert done == [(2, 5), (3, 5), (4, 5), (5, 5)]
    assert [r.turns_stored for r in receipts] == [2, 3, 1, 6, 2]
    fresh = [{"session_id": f"new{i}", "turns": s["turns"]} for i, s in enumerate(sessions[:4])]
    clash = {"session_id": "s0", "turns": [{"role": "user", "content": "a different turn"}]}
    with pytest.raises(CaptureConflict, match="4 session"):
        mem.capture_many([*fresh, clash])
    assert {s.session_id for s in mem.sessions()} >= {"new0", "new1", "new2", "new3"}
    again = mem.capture_many(fresh)
    assert [r.turns_stored for r in again] == [0, 0, 0, 0]


# -- properties -------------------------------------------------------------------------------

conversation = st.lists(
    st.tuples(st.sampled_from(["user", "assistant"]), st.text(min_size=1, max_size=20).filter(lambda s: s.strip() and "\x00" not in s)),
    min_size=1, max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv=conversation, cuts=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=6))
def test_any_order_of_prefix_captures_stores_the_longest_prefix_once(tmp_path_factory, conv, cuts):
    turns = [{"role": r, "content": c} for r, c in conv]
    with Memory(str(tmp_path_factory.mktemp("p") / "m.db")) as m:
        for cut in cuts:
            m.capture("s", turns[: min(cut, len(turns))])
        longest = min(max(cuts), len(turns))
        assert [(t.role, t.content) for t in m.turns("s")] == [(t["role"], t["content"]) for t in turns[:longest]]


@settings(max_examples=40, deadline=None)
@given(
    ids=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=12),
    batches=st.integers(min_value=1, max_value=4),
)
def test_id_identity_is_a_set_union_under_any_order_and_duplication(tmp_path_factory, ids, batches):
    with Memory(str(tmp_path_factory.mktemp("u") / "m.db")) as m:
        size = max(1, len(ids) // batches)
        for start in range(0, len(ids), size):
            chunk = list(dict.fromkeys(ids[start:start + size]))
            m.capture("s", [{"role": "user", "content": f"message {i}", "id": f"m{i}"} for i in chunk])
        stored = [t.external_id for t in m.turns("s")]
        assert sorted(stored) == sorted({f"m{i}" for i in ids})
        assert len(stored) == len(set(stored))


@pytest.mark.parametrize("namespace", ["", "  ", "\t\n", "a\x00b", None, 5])
def test_a_blank_namespace_is_refused_naming_the_field(tmp_path, namespace):
    with pytest.raises(ConfigError, match="^namespace must be a non-blank string") as raised:
        Memory(str(tmp_path / "m.db"), namespace=namespace)
    assert raised.value.field == "namespace" and not (tmp_path / "m.db").exists()


def test_create_false_opens_only_an_existing_database(tmp_path):
    where = tmp_path / "new" / "m.db"
    with pytest.raises(NotFoundError, match="no database at .* \\(nothing was created\\)"):
        Memory(str(where), create=False)
    assert not where.parent.exists()
    Memory(str(where)).close()
    with Memory(f"sqlite:///{where}", create=False) as mem:
        assert mem.sessions() == []


def test_a_sqlite_url_is_relative_after_three_slashes_and_absolute_after_four(tmp_path, monkeypatch):
    # As SQLAlchemy reads it (a reviewer expected sqlite:///tmp/x.db to be absolute: the docs now say which is which).
    monkeypatch.chdir(tmp_path)
    with Memory("sqlite:///rel.db") as mem:
        mem.capture("s", [{"role": "user", "content": "hi"}])
    with Memory(f"sqlite:///{tmp_path / 'abs.db'}") as mem:  # tmp_path starts with "/": four slashes
        mem.capture("s", [{"role": "user", "content": "hi"}])
    assert (tmp_path / "rel.db").exists() and (tmp_path / "abs.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["abs.db", "rel.db"]


def test_a_file_that_is_not_a_database_is_refused_and_left_untouched(tmp_path):
    notes = tmp_path / "dir" / "notes.db"
    notes.parent.mkdir()
    notes.write_text("my notes\n" * 200, encoding="utf-8")
    with pytest.raises(NotADatabase, match="notes.db is not a SQLite database"):
        Memory(str(notes))
    assert notes.read_text(encoding="utf-8") == "my notes\n" * 200
    assert [p.name for p in notes.parent.iterdir()] == ["notes.db"]  # no -wal or -shm beside it


# -- content as OpenAI-style parts ---------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\\"), max_size=40)
_TEXT_PART = st.builds(lambda kind, text: {"type": kind, "text": text}, st.sampled_from(TEXT_PART_TYPES), _TEXT)
_OTHER_PART = st.sampled_from(["image_url", "input_audio", "file", "refusal"]).flatmap(
    lambda kind: st.builds(lambda value: {"type": kind, kind: value},
                           st.one_of(_TEXT, st.dictionaries(st.sampled_from(["url", "data", "detail"]), _TEXT))))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.one_of(_TEXT_PART, _OTHER_PART), max_size=6))
def test_any_list_of_content_parts_round_trips(mem, parts):
    session = f"s{uuid.uuid4().hex}"
    receipt = mem.capture(session, [{"role": "user", "content": parts, "metadata": {"lang": "en"}},
                                    {"role": "assistant", "content": "noted"}])
    first = mem.turns(session)[0]
    texts = [p["text"] for p in parts if p["type"] in TEXT_PART_TYPES]
    others = [p for p in parts if p["type"] not in TEXT_PART_TYPES]
    assert first.content == "\n".join(texts)
    assert mem.turn_metadata(session)[first.turn_id] == {"lang": "en", **({"content_parts": others} if others else {})}
    notes = [w for w in receipt.warnings if w.code == "content_parts_kept"]
    assert len(notes) == (1 if others else 0)
    assert not notes or notes[0].detail == {"turns": {"0": [p["type"] for p in others]}}


@pytest.mark.parametrize(("content", "field"), [
    ([{"type": "text"}], "turns[0].content[0].text"),
    ([{"type": "output_text", "text": 5}], "turns[0].content[0].text"),
    ([{"text": "no type"}], "turns[0].content[0].type"),
    (["plain string"], "turns[0].content[0]"),
    ([{"type": "text", "text": "ok"}, None], "turns[0].content[1]"),
])
def test_a_bad_content_part_is_named(mem, content, field):
    with pytest.raises(InvalidInput, match=rf"^{re.escape(field)}: "):
        mem.capture("parts", [{"role": "user", "content": content}])
    assert mem.turns("parts") == []


def test_content_parts_key_of_the_callers_metadata_is_not_overwritten(mem):
    with pytest.raises(InvalidInput, match=r"turns\[0\]\.metadata\.content_parts"):
        mem.capture("parts", [{"role": "user", "metadata": {"content_parts": 1},
                               "content": [{"type": "text", "text": "hi"}, {"type": "file", "file": {"id": "f1"}}]}])


# -- OpenAI-style messages that call tools or answer one ----------------------------------------------

TOOL_LOOP = [
    {"role": "user", "content": "what is the weather in Lisbon?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18C and sunny"},
    {"role": "assistant", "content": "It is 18C and sunny in Lisbon."},
]


def test_an_openai_tool_loop_is_captured_as_transcripts_keep_tool_calls(mem):
    """Reviewer: ``tool_call_id`` was refused as "Extra inputs are not permitted" and ``content: None`` as "Input
    should be a valid string", though the README calls the history OpenAI-style."""
    receipt = mem.append("s", TOOL_LOOP)
    assert receipt.ok and receipt.turns_stored == 4
    turns = mem.turns("s")
    assert [t.content for t in turns] == ["what is the weather in Lisbon?", "[tool_use weather city=Lisbon]",
                                          "18C and sunny", "It is 18C and sunny in Lisbon."]
    meta = mem.store.turn_metadata(mem.namespace, "s")
    assert meta[turns[1].turn_id] == {"tool_uses": [{"id": "c1", "name": "weather", "input": {"city": "Lisbon"}}]}
    assert meta[turns[2].turn_id] == {"tool_call_id": "c1"}
    assert turns[1].turn_id in [h.turn_id for h in mem.search("weather Lisbon")]  # searchable as a transcript's


def test_a_tool_call_with_content_parts_keeps_their_text_first(mem):
    mem.capture("s", [{"role": "assistant", "content": [{"type": "text", "text": "Let me look."}],
                       "tool_calls": [{"id": "c1", "function": {"name": "read", "arguments": '{"path": "a.py"}'}}]}])
    assert [t.content for t in mem.turns("s")] == ["Let me look.\n[tool_use read path=a.py]"]


@pytest.mark.parametrize(("turn", "field", "said"), [
    ({"role": "assistant", "content": None}, "turns[0].content", "is None: give the message's text"),
    ({"role": "assistant", "content": "", "tool_calls": {"id": "c1"}}, "turns[0].tool_calls", "must be a list"),
    ({"role": "assistant", "content": "", "function_call": "search"}, "turns[0].function_call", "must be a dict"),
    ({"role": "tool", "content": "42", "tool_call_id": 7}, "turns[0].tool_call_id", "must be the id of the call"),
    ({"role": "tool", "content": "42", "tool_call_id": "c1", "metadata": {"tool_call_id": "x"}},
     "turns[0].metadata.tool_call_id", "is where the message's tool fields go"),
])
def test_a_malformed_tool_field_is_refused_naming_it(mem, turn, field, said):
    with pytest.raises(InvalidInput) as raised:
        mem.capture("s", [turn])
    assert raised.value.field == field and said in str(raised.value)
    _nothing_written(mem)


_names = st.text("abcdefgh_", min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(said=st.one_of(st.none(), st.text("abc xyz", max_size=12)),
       calls=st.lists(st.tuples(_names, st.dictionaries(_names, st.text("abc 12", max_size=6), max_size=3)),
                      min_size=1, max_size=4),
       legacy=st.booleans())
def test_folded_tool_calls_keep_the_text_then_every_call_in_order(said, calls, legacy):
    from tortoise_sdk.capture import fold_tool_fields
    from tortoise_sdk.models import tool_use_text
    import json

    msg = {"role": "assistant", "content": said,
           "tool_calls": [{"id": f"c{i}", "function": {"name": n, "arguments": json.dumps(a)}}
                          for i, (n, a) in enumerate(calls[:-1] if legacy else calls)]}
    if legacy:
        msg["function_call"] = {"name": calls[-1][0], "arguments": json.dumps(calls[-1][1])}
    out = fold_tool_fields(msg)
    lines = [tool_use_text(n, a) for n, a in calls]
    head = (said or "").strip()
    assert out["content"] == "\n".join([head, *lines] if head else lines)
    assert [(c["name"], c["input"]) for c in out["metadata"]["tool_uses"]] == calls
    assert not set(out) & {"tool_calls", "function_call", "tool_call_id"}
    assert fold_tool_fields(out) is out  # folding is done once: a folded turn has nothing left to fold
