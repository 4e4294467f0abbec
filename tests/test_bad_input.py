"""Every bad input is a typed error naming its field, on both engines, and nothing is written.

One table: each row is a call, the error class it raises, the field it names, and the builtin
base (``TypeError`` for a wrong type, ``ValueError`` for a wrong value) it is also caught by.
"""

from __future__ import annotations

import itertools
import math
import random
from datetime import datetime, timezone

import pytest
from pgtemp import require_postgres, temp_database

from tortoise_sdk import ConfigError, InvalidInput, InvalidType, Memory, StoreClosed, TortoiseError
from tortoise_sdk.validate import MAX_ID_BYTES, MAX_JSON_DEPTH

OK = [{"role": "user", "content": "my kayak is red"}]
SESSIONS = [{"session_id": "s", "turns": OK}]


def turn(**fields):
    return [{"role": "user", "content": "my kayak is red", **fields}]


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def random_id(n_bytes: int, seed: int = 0) -> str:
    """An incompressible id of exactly ``n_bytes`` UTF-8 bytes (CJK, 3 bytes each, then ASCII)."""
    rng = random.Random(seed)
    cjk = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(n_bytes // 3))
    return cjk + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n_bytes - 3 * len(cjk)))


TOO_LONG = random_id(MAX_ID_BYTES + 1)
S = "\ud800"  # a lone surrogate

# (id, call, error, field, builtin)
ROWS = [
    # capture: the shape of the call
    ("turns is an int", lambda m: m.capture("s", 5), InvalidType, "turns", TypeError),
    ("turns is None", lambda m: m.capture("s", None), InvalidType, "turns", TypeError),
    ("turns is a string", lambda m: m.capture("s", "hello"), InvalidType, "turns", TypeError),
    ("a turn is an int", lambda m: m.capture("s", [5]), InvalidType, "turns[0]", TypeError),
    ("content is an int", lambda m: m.capture("s", [{"role": "user", "content": 42}]), InvalidType,
     "turns[0].content", TypeError),
    ("session id is an int", lambda m: m.capture(7, OK), InvalidType, "session_id", TypeError),
    ("session date is an int", lambda m: m.capture("s", OK, session_date=5), InvalidType, "session_date", TypeError),
    ("capture_many(None)", lambda m: m.capture_many(None), InvalidType, "sessions", TypeError),
    ("capture_many([5])", lambda m: m.capture_many([5]), InvalidType, "sessions[0]", TypeError),
    ("capture_many bad turn", lambda m: m.capture_many([{"session_id": "s", "turns": 5}]), InvalidType,
     "sessions[0]", TypeError),
    # capture: metadata that is not plain JSON
    ("metadata set", lambda m: m.capture("s", turn(metadata={"k": {1, 2}})), InvalidType, "turns[0].metadata.k",
     TypeError),
    ("metadata bytes", lambda m: m.capture("s", turn(metadata={"k": b"x"})), InvalidType, "turns[0].metadata.k",
     TypeError),
    ("metadata datetime", lambda m: m.capture("s", turn(metadata={"when": datetime.now(timezone.utc)})),
     InvalidType, "turns[0].metadata.when", TypeError),
    ("metadata object", lambda m: m.capture("s", turn(metadata={"k": object()})), InvalidType,
     "turns[0].metadata.k", TypeError),
    ("metadata set deep inside", lambda m: m.capture("s", turn(metadata={"a": [1, {"b": {1}}]})), InvalidType,
     "turns[0].metadata.a[1].b", TypeError),
    ("metadata int key inside", lambda m: m.capture("s", turn(metadata={"a": {1: "x"}})), InvalidType,
     "turns[0].metadata.a", TypeError),
    ("metadata NaN", lambda m: m.capture("s", turn(metadata={"k": float("nan")})), InvalidInput,
     "turns[0].metadata.k", ValueError),
    ("metadata 5000 deep", lambda m: m.capture("s", turn(metadata=nested(5000))), InvalidInput,
     "turns[0].metadata", ValueError),
    ("metadata NUL", lambda m: m.capture("s", turn(metadata={"k": ["a\x00"]})), InvalidInput,
     "turns[0].metadata.k[0]", ValueError),
    ("metadata NUL key", lambda m: m.capture("s", turn(metadata={"k\x00": 1})), InvalidInput,
     "turns[0].metadata.k\x00", ValueError),
    # search
    ("k='5'", lambda m: m.search("kayak", k="5"), InvalidType, "k", TypeError),
    ("k=None", lambda m: m.search("kayak", k=None), InvalidType, "k", TypeError),
    ("k=1.5", lambda m: m.search("kayak", k=1.5), InvalidType, "k", TypeError),
    ("k=True", lambda m: m.search("kayak", k=True), InvalidType, "k", TypeError),
    ("k=2**63", lambda m: m.search("kayak", k=2**63), InvalidInput, "k", ValueError),
    ("query is an int", lambda m: m.search(5), InvalidType, "query", TypeError),
    # lone surrogates in any id or read argument
    ("surrogate session id", lambda m: m.capture(S, OK), InvalidInput, "session_id", ValueError),
    ("surrogate turn id", lambda m: m.capture("s", turn(id=S)), InvalidInput, "turns[0].id", ValueError),
    ("surrogate content", lambda m: m.capture("s", [{"role": "user", "content": "a" + S}]), InvalidInput,
     "turns[0].content", ValueError),
    ("surrogate name", lambda m: m.capture("s", turn(name=S)), InvalidInput, "turns[0].name", ValueError),
    ("surrogate idempotency key", lambda m: m.capture("s", OK, idempotency_key=S), InvalidInput, "idempotency_key",
     ValueError),
    ("surrogate metadata", lambda m: m.capture("s", turn(metadata={"k": S})), InvalidInput, "turns[0].metadata.k",
     ValueError),
    ("surrogate search session", lambda m: m.search("kayak", session_id=S), InvalidInput, "session_id", ValueError),
    ("surrogate turns()", lambda m: m.turns(S), InvalidInput, "session_id", ValueError),
    ("surrogate turn_metadata()", lambda m: m.turn_metadata(S), InvalidInput, "session_id", ValueError),
    ("surrogate receipts()", lambda m: m.receipts(S), InvalidInput, "session_id", ValueError),
    ("surrogate memories()", lambda m: m.memories(S), InvalidInput, "session_id", ValueError),
    ("surrogate subagents()", lambda m: m.subagents(session_id=S), InvalidInput, "session_id", ValueError),
    # capture refuses a blank session id, so a read naming one asks for what cannot exist: said, not []
    ("blank search session", lambda m: m.search("kayak", session_id=""), InvalidInput, "session_id", ValueError),
    ("blank turns()", lambda m: m.turns(" "), InvalidInput, "session_id", ValueError),
    ("blank memories()", lambda m: m.memories(""), InvalidInput, "session_id", ValueError),
    ("blank capture session", lambda m: m.capture(" ", OK), InvalidInput, "session_id", ValueError),
    ("surrogate subagents turn", lambda m: m.subagents(turn_id=S), InvalidInput, "turn_id", ValueError),
    ("surrogate expand()", lambda m: m.expand(S), InvalidInput, "pointer_id", ValueError),
    ("surrogate extract()", lambda m: m.extract(S), InvalidInput, "session_id", ValueError),
    ("surrogate cursor()", lambda m: m.cursor(S), InvalidInput, "name", ValueError),
    ("NUL turns()", lambda m: m.turns("a\x00b"), InvalidInput, "session_id", ValueError),
    ("NUL expand()", lambda m: m.expand("t_\x00"), InvalidInput, "pointer_id", ValueError),
    ("int expand()", lambda m: m.expand(5), InvalidType, "pointer_id", TypeError),
    # ids longer than both engines can index
    ("long session id", lambda m: m.capture(TOO_LONG, OK), InvalidInput, "session_id", ValueError),
    ("long turn id", lambda m: m.capture("s", turn(id=TOO_LONG)), InvalidInput, "turns[0].id", ValueError),
    ("long idempotency key", lambda m: m.capture("s", OK, idempotency_key=TOO_LONG), InvalidInput,
     "idempotency_key", ValueError),
    ("long cursor name", lambda m: m.save_cursor(TOO_LONG, {"a": 1}, revision=0), InvalidInput, "name", ValueError),
    ("long read id", lambda m: m.turns(TOO_LONG), InvalidInput, "session_id", ValueError),
    # cursors
    ("cursor value list", lambda m: m.save_cursor("c", [1], revision=0), InvalidType, "value", TypeError),
    ("cursor value datetime", lambda m: m.save_cursor("c", {"at": datetime.now()}, revision=0), InvalidType,
     "value.at", TypeError),
    ("cursor value deep", lambda m: m.save_cursor("c", nested(MAX_JSON_DEPTH + 1), revision=0), InvalidInput,
     "value", ValueError),
    # issue 24: what the attack run found raising untyped errors, storing wrong, or writing before refusing
    ("cursor revision 2**63", lambda m: m.save_cursor("c", {"a": 1}, revision=2**63), InvalidInput, "revision",
     ValueError),
    ("ingest([5, None])", lambda m: m.ingest([5, None]), InvalidType, "path_or_lines[0]", TypeError),
    ("ingest(None)", lambda m: m.ingest(None), InvalidType, "path_or_lines", TypeError),
    ("follow(max_bytes='x')", lambda m: m.follow("no-such-file.jsonl", max_bytes="x"), InvalidType, "max_bytes",
     TypeError),
    ("capture_many(chunk_size='5')", lambda m: m.capture_many(SESSIONS, chunk_size="5"), InvalidType, "chunk_size",
     TypeError),
    ("capture_many(chunk_size=-1)", lambda m: m.capture_many(SESSIONS, chunk_size=-1), InvalidInput, "chunk_size",
     ValueError),
    ("capture_many(progress=5)", lambda m: m.capture_many(SESSIONS, progress=5), InvalidType, "progress", TypeError),
    ("subagent_health(session_id=0)", lambda m: m.subagent_health(session_id=0), InvalidType, "session_id",
     TypeError),
    ("surrogate tombstones()", lambda m: m.tombstones(session_id=S), InvalidInput, "session_id", ValueError),
    ("bytes name", lambda m: m.capture("s", turn(name=b"Bob")), InvalidType, "turns[0].name", TypeError),
    ("bytes turn id", lambda m: m.capture("s", turn(id=b"m1")), InvalidType, "turns[0].id", TypeError),
    ("bytes timestamp", lambda m: m.capture("s", turn(timestamp=b"2024-01-01")), InvalidType, "turns[0].timestamp",
     TypeError),
    ("long sub-agent session id", lambda m: m.record_subagent({"session_id": TOO_LONG, "tool_call_id": "t1"}),
     InvalidInput, "session_id", ValueError),
    ("long sub-agent tool call id", lambda m: m.record_subagent({"session_id": "s", "tool_call_id": TOO_LONG}),
     InvalidInput, "tool_call_id", ValueError),
    ("endless turns", lambda m: m.capture("s", itertools.repeat(OK[0])), InvalidInput, "turns", ValueError),
    ("forget a 10 MB id", lambda m: m.forget_session("x" * 10_000_000), InvalidInput, "session_id", ValueError),
]


@pytest.fixture(scope="module")
def pg_url():
    require_postgres()
    with temp_database("tortoise_bad_input") as url:
        yield url


@pytest.fixture(params=("sqlite", "postgres"))
def mem(request, tmp_path):
    url = str(tmp_path / "m.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with Memory(url, namespace=f"bad_{random.getrandbits(40):x}") as m:
        yield m


def _written(m: Memory):
    return m.sessions(), m.receipts(), m.cursor("c"), m.subagents()


@pytest.mark.parametrize(("call", "error", "field", "builtin"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_bad_input_is_a_typed_error_naming_its_field(mem, call, error, field, builtin):
    before = _written(mem)
    with pytest.raises(error) as raised:
        call(mem)
    assert type(raised.value) is error  # the most specific class, not merely a subclass of it
    assert raised.value.field == field
    assert isinstance(raised.value, (TortoiseError, builtin))
    assert str(raised.value).startswith(f"{field}: ")
    assert _written(mem) == before


CONSTRUCTOR = [(field, value) for field in ("max_turns_per_capture", "chunk_turns", "concurrency", "extract_every")
               for value in ("5", None, math.nan, 2.5, True, 0)] + [
    (field, value) for field in ("idle_s", "breaker_s", "job_retry_s", "store_timeout_s")
    for value in ("5", math.nan, math.inf, -1, True)] + [("db", 5), ("db", b"m.db")] + [
    # a model that is not a name was accepted and failed only at the first capture ("extraction crashed")
    ("model", 5), ("model", "   "), ("model", ["openai/gpt-4o-mini"]), ("api_base", 5), ("api_key", 5),
    # "" was let through: model="" then fell back to $TORTOISE_MODEL without a word
    ("model", ""), ("api_base", ""), ("api_key", ""),
    # "" wrote to ~/.tortoise/memory.db without a word, "   " made a file named by three spaces
    ("db", ""), ("db", "   ")]


@pytest.mark.parametrize(("field", "value"), CONSTRUCTOR, ids=[f"{f}={v!r}" for f, v in CONSTRUCTOR])
def test_a_bad_constructor_argument_is_a_config_error_naming_it(tmp_path, field, value):
    """Strings, None and nan were compared (``'<' not supported``) or accepted (nan lifted the limit)."""
    args = {"db": str(tmp_path / "m.db"), field: value}
    with pytest.raises(ConfigError) as raised:
        Memory(**args)
    assert raised.value.field == field and str(raised.value).startswith(f"{field} ")
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("args", [{"time_budget_ms": "50"}, {"time_budget_ms": math.nan}, {"session_id": 5},
                                  {"session_id": S}, {"budget": "3"}, {"max_tokens": None}])
def test_context_never_raises_on_bad_arguments_it_degrades(mem, args):
    block = mem.context([{"role": "user", "content": "my kayak?"}], **args)
    assert block.block == "" and block.degraded_reason is not None


def _raises(text: str) -> int:
    raise RuntimeError("no tokenizer")


@pytest.mark.parametrize(("args", "said"), [
    ({"prior_context": 123}, "invalid_input: prior_context: must be what the host already showed"),
    ({"prior_context": b"shown"}, "invalid_input: prior_context: "),
    ({"prior_context": ["shown", 123]}, "invalid_input: prior_context[1]: must be an earlier MemoryBlock"),
    ({"token_counter": 5}, "invalid_input: token_counter: must be a callable"),
    ({"token_counter": lambda text: "3"}, "invalid_input: token_counter: must return a non-negative int"),
    ({"token_counter": lambda text: -1}, "invalid_input: token_counter: must return a non-negative int"),
    ({"token_counter": _raises}, "invalid_input: token_counter: raised RuntimeError"),
], ids=["prior-int", "prior-bytes", "prior-item", "counter-int", "counter-str", "counter-negative", "counter-raises"])
def test_context_names_a_bad_prior_context_or_token_counter_as_invalid_input(mem, args, said, caplog):
    """These were found only deep in the reflex: ``internal_error: TypeError`` and a traceback in the log."""
    with caplog.at_level("WARNING", logger="tortoise_sdk.reflex"):
        block = mem.context([{"role": "user", "content": "my kayak?"}], **args)
    assert block.block == "" and block.degraded_reason.startswith(said)
    assert caplog.records and all(r.exc_info is None for r in caplog.records)


def test_context_takes_a_prior_context_in_every_shape_the_docstring_names(mem):
    window = [{"role": "user", "content": "what colour is my kayak?"}]
    assert mem.context(window).degraded_reason is None
    for prior in (None, [], "shown before", ["shown before", None], iter(["shown before"]),
                  {"role": "assistant", "content": "shown before"}, mem.context(window)):
        assert mem.context(window, prior_context=prior).degraded_reason is None, prior


@pytest.mark.parametrize(("window", "said"), [
    (5, "invalid_input: window: must be a list of messages"), (b"my kayak?", "invalid_input: window: "),
    ([3], "invalid_input: window[0]: must be a message with text, got int"),
    (["my kayak?", {"role": "user", "content": 5}], "invalid_input: window[1]: must be a message with text, got dict "
                                                     "whose content is int"),
    ([("user", "my kayak?", "x")], "invalid_input: window[0]: must be a message with text, got tuple of 3 items"),
    ([("user", 5)], "invalid_input: window[0]: "), ([object()], "invalid_input: window[0]: ")])
def test_a_window_that_is_no_conversation_is_invalid_input_not_an_internal_error(mem, window, said):
    block = mem.context(window)
    assert block.block == "" and block.degraded_reason.startswith(said), block.degraded_reason


def test_a_window_of_role_text_pairs_or_with_a_content_free_tool_call_is_read(tmp_path):
    with Memory(str(tmp_path / "m.db")) as m:
        m.capture("s", [{"role": "user", "content": "My kayak is a red Perception Pescador"}])
        for window in ([("user", "what colour is my kayak?")],  # LangChain's tuples, its roles, and 2-item lists
                       [("human", "what colour is my kayak?"), ("ai", "Let me check.")],
                       [["user", "what colour is my kayak?"]],
                       [None, {"role": "assistant", "content": None, "tool_calls": []}, "what colour is my kayak?"]):
            block = m.context(window)
            assert block.degraded_reason is None and len(block.pointers) == 1, window


@pytest.mark.parametrize("value", [0, -1, "0"])
def test_a_time_budget_of_zero_says_none_is_no_limit(mem, value):
    """The command line's --time-budget-ms 0 is "no limit"; in Python that is None, and the reason says so."""
    block = mem.context([{"role": "user", "content": "my kayak?"}], time_budget_ms=value)
    assert block.block == "" and "time_budget_ms=None for no limit" in block.degraded_reason


def test_a_max_tokens_too_small_for_any_pointer_says_so(tmp_path):
    """The frame alone takes about 60 tokens: below what one pointer needs the block was empty with no reason,
    and the command line said "nothing relevant" of a namespace that held the answer."""
    with Memory(str(tmp_path / "m.db")) as m:
        m.capture("s", [{"role": "user", "content": "My dog Biscuit is a beagle"}])
        ask = [{"role": "user", "content": "what breed is my dog Biscuit?"}]
        assert m.context(ask).pointers
        for small in (10, 60, 80):
            block = m.context(ask, max_tokens=small)
            assert block.block == "" and block.degraded_reason is not None, small
            assert block.degraded_reason.startswith(f"invalid_input: max_tokens: {small} ")
            assert "400" in block.degraded_reason
        assert m.context([{"role": "user", "content": "a kayak on the lake?"}], max_tokens=10).degraded_reason is None
        assert m.context(ask, max_tokens=0).degraded_reason is None  # 0 asks for nothing


@pytest.mark.parametrize("namespace", [S, TOO_LONG, "a\x00"])
def test_a_namespace_no_engine_can_store_is_refused(tmp_path, namespace):
    with pytest.raises(ConfigError) as raised:
        Memory(str(tmp_path / "m.db"), namespace=namespace)
    assert raised.value.field == "namespace" and not (tmp_path / "m.db").exists()


def test_the_six_characters_backslash_u0000_are_text_not_a_nul(mem):
    metadata = {"k": "\\u0000", "\\u0000": ["\\\\u0000"]}
    receipt = mem.capture("s", turn(metadata=metadata))
    assert mem.turn_metadata("s") == {receipt.turn_ids[0]: metadata}


def test_ids_of_the_documented_maximum_length_are_stored_on_both_engines(mem):
    """The worst case: three incompressible ids at the maximum in one index row (namespace, session, turn id)."""
    longest = [random_id(MAX_ID_BYTES, seed) for seed in range(4)]
    m = Memory(store=mem.store, namespace=longest[0])
    receipt = m.capture(longest[1], turn(id=longest[2]), idempotency_key=longest[3])
    assert m.capture(longest[1], turn(id=longest[2]), idempotency_key=longest[3]).replayed
    assert [h.external_id for h in m.turns(longest[1])] == [longest[2]]
    assert m.receipts(longest[1])[0].receipt_id == receipt.receipt_id
    assert m.save_cursor(longest[2], {"offset": 1}, revision=0) is not None
    assert m.cursor(longest[2]).value == {"offset": 1}


def test_follow_keeps_a_long_path_under_a_hashed_cursor_name(tmp_path):
    deep = tmp_path.joinpath(*["d" * 60] * 10)
    deep.mkdir(parents=True)
    transcript = deep / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "my kayak is red", "id": "m1"}\n', encoding="utf-8")
    assert len(str(transcript).encode()) > MAX_ID_BYTES
    with Memory(str(tmp_path / "m.db")) as m:
        assert m.follow(str(transcript)).turns_stored == 1
        assert m.follow(str(transcript)).turns_stored == 0  # the offset was kept
        assert len(m.search("kayak")) == 1


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_call_after_close_says_the_store_is_closed_and_what_to_do(request, tmp_path, engine):
    url = str(tmp_path / "closed.db") if engine == "sqlite" else request.getfixturevalue("pg_url")
    m = Memory(url, namespace="closed")
    m.capture("s", OK)
    m.close()
    for call in (lambda: m.capture("s2", OK), lambda: m.search("kayak"), lambda: m.sessions(), lambda: m.turns("s")):
        with pytest.raises(StoreClosed, match="open a new Memory"):
            call()
    assert m.context("kayak").degraded_reason == "store_error"  # the host turn goes on


def test_an_unknown_extract_mode_is_a_config_error_naming_extract(mem):
    before = _written(mem)
    with pytest.raises(ConfigError, match="'inline', 'background' or False") as raised:
        mem.capture("s", OK, extract="bogus")
    assert raised.value.field == "extract" and _written(mem) == before
