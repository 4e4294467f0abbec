"""Meaning beside words (issue 30): ``Memory(embedder=...)``, its vectors, and their fusion into search and the reflex.

The embedder is a callable here (``toy_embedding``: words of one concept share an axis, a stand-in
for meaning, not a model) except in the cassette tests, which go through litellm's real HTTP
path to the stub's ``/v1/embeddings``. Both engines wherever a vector is stored or read.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pgtemp import require_postgres, temp_database
from stub_model import toy_embedding
from test_store_conformance import _finalize, _plan, pg_url, store_url  # noqa: F401

from conftest import STUB_API_BASE, STUB_API_KEY, FAST_RETRY, ModelEndpoint, run_cli
from tortoise_sdk import Memory
from tortoise_sdk.errors import ConfigError
from tortoise_sdk.llm.embedder import Embedder
from tortoise_sdk.pipeline.embed import embed_pending
from tortoise_sdk.store.copy import copy_store
from tortoise_sdk.store.plan import EntityPlan, ItemPlan, SourcePlan

PEANUTS = "I'm allergic to peanuts, so I keep an epipen in my bag"
TURNS = [
    {"role": "user", "content": PEANUTS},
    {"role": "assistant", "content": "Noted, I will keep that in mind when we talk about food."},
    {"role": "user", "content": "We went hiking in the mountains near Grenoble yesterday"},
    {"role": "assistant", "content": "That sounds like a lovely trip."},
]
SNACKS = "and what snacks should I avoid?"


class Toy:
    """A callable embedder that counts its calls; ``model_name`` names its vectors."""

    def __init__(self, model_name: str = "toy-v1") -> None:
        self.model_name = model_name
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [toy_embedding(t) for t in texts]


def down(texts: list[str]) -> list[list[float]]:
    raise ConnectionError("the embedding server is down")


@pytest.fixture
def memory(store_url: str) -> Any:
    with Memory(store_url, namespace=f"emb_{threading.get_ident()}_{id(store_url)}", embedder=Toy()) as mem:
        for sid in [s.session_id for s in mem.sessions()]:
            mem.forget_session(sid)
        mem.capture("s1", TURNS)
        yield mem


def _vectors(mem: Memory) -> dict[str, int]:
    return mem.store.vector_counts(mem.namespace)


# -- configuration ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [42, "", "   ", ["openai/x"]])
def test_a_bad_embedder_is_a_config_error_naming_it(tmp_path, bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        Memory(str(tmp_path / "m.db"), embedder=bad)  # type: ignore[arg-type]
    assert caught.value.field == "embedder" and "callable" in str(caught.value)


def test_an_endpoint_without_an_embedder_and_embedding_without_one_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="pass embedder="):
        Memory(str(tmp_path / "m.db"), embed_api_base="http://127.0.0.1:11434/v1")
    with pytest.raises(ConfigError, match="not a callable"):
        Memory(str(tmp_path / "m.db"), embedder=Toy(), embed_api_base="http://127.0.0.1:11434/v1")
    with Memory(str(tmp_path / "m.db")) as mem, pytest.raises(ConfigError) as caught:
        mem.embed_pending()
    assert caught.value.field == "embedder"


def test_the_environment_turns_it_on(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORTOISE_EMBEDDER", "openai/text-embedding-3-small")
    with Memory(str(tmp_path / "m.db")) as mem:
        assert mem.embedder_model == "openai/text-embedding-3-small"


# -- vectors in the store ---------------------------------------------------------------------------

def test_capture_never_embeds_the_background_step_does(memory: Memory) -> None:
    toy = memory._embedder._function  # type: ignore[union-attr]
    assert toy.calls == [] and _vectors(memory) == {}
    report = memory.embed_pending()
    assert (report.model, report.embedded, report.dim, report.more, report.error) == ("toy-v1", 4, 32, False, None)
    assert report.usage is None  # a callable reports no tokens: unknown, not 0
    assert _vectors(memory) == {"toy-v1": 4}
    assert memory.embed_pending().embedded == 0  # nothing waits any more


def test_a_limit_leaves_the_rest_waiting(memory: Memory) -> None:
    first = memory.embed_pending(limit=3)
    assert (first.embedded, first.more) == (3, True)
    assert memory.embed_pending().embedded == 1


def test_memories_get_vectors_and_forgetting_removes_them(memory: Memory) -> None:
    store, ns = memory.store, memory.namespace
    r = memory.receipts("s1")[0]
    written = store.write_extraction(ns, _plan("s1", receipt=r, entities=[EntityPlan("Maya", "person")], items=[
        ItemPlan("point", "Maya is allergic to peanuts", about=("Maya",),
                 sources=(SourcePlan(r.turn_ids[0], "allergic to peanuts"),)),
    ]), finalize=_finalize)
    assert memory.embed_pending().embedded == 5
    kinds = {kind for kind, _, _ in store.load_vectors(ns, "toy-v1")}
    assert kinds == {"turn", "memory"}
    memory.forget_memory(written.memory_ids[0])
    assert _vectors(memory) == {"toy-v1": 4}
    memory.forget_session("s1")
    assert _vectors(memory) == {}


def test_a_changed_model_re_embeds_everything(memory: Memory) -> None:
    memory.embed_pending()
    v2 = Memory(store=memory.store, namespace=memory.namespace, embedder=Toy("toy-v2"))  # shares the store: not closed here
    assert v2.embed_pending().embedded == 4
    assert _vectors(v2) == {"toy-v2": 4}  # the old model's vectors were replaced, not kept beside


def test_namespaces_keep_their_vectors_apart(memory: Memory) -> None:
    memory.embed_pending()
    other = Memory(store=memory.store, namespace=memory.namespace + "_other", embedder=Toy())  # shares the store: not closed here
    other.capture("o1", [{"role": "user", "content": "My dog is called Biscuit"}])
    assert other.embed_pending().embedded == 1
    assert _vectors(other) == {"toy-v1": 1}
    hits = other.search("what do peanut snacks cost")
    assert all(h.session_id == "o1" for h in hits)
    other.forget_session("o1")
    assert _vectors(memory) == {"toy-v1": 4}


def test_an_item_forgotten_while_it_was_embedded_gets_no_vector(memory: Memory) -> None:
    store, ns = memory.store, memory.namespace
    pending = store.pending_embeddings(ns, "toy-v1", 10)
    memory.forget_session("s1")
    assert store.save_vectors(ns, "toy-v1", [(k, i, toy_embedding(t)) for k, i, t in pending]) == 0
    assert _vectors(memory) == {}


def test_an_embedder_failure_is_reported_not_raised(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), embedder=down) as mem:
        mem.capture("s1", TURNS)
        report = mem.embed_pending()
    assert (report.embedded, report.more) == (0, True) and "down" in (report.error or "")


def test_flush_embeds_without_a_model(memory: Memory) -> None:
    assert memory.flush() == []
    assert _vectors(memory) == {"toy-v1": 4}


# -- fusion -----------------------------------------------------------------------------------------

def test_the_reflex_finds_by_meaning_what_words_miss(memory: Memory) -> None:
    window = [{"role": "user", "content": SNACKS}]
    words_only = Memory(store=memory.store, namespace=memory.namespace)  # shares the store: not closed here
    assert PEANUTS not in words_only.context(window).block
    memory.embed_pending()
    block = memory.context(window)
    assert PEANUTS in block.block
    assert any("close in meaning" in w for w in block.why)
    assert not any("words only" in w for w in block.why)


def test_search_fuses_meaning_with_words(memory: Memory) -> None:
    memory.embed_pending()
    result = memory.explain_search("snacks to avoid")
    assert result.semantic == "fused"
    assert result.hits[0].content == PEANUTS
    words_only = Memory(store=memory.store, namespace=memory.namespace)  # shares the store: not closed here
    plain = words_only.explain_search("snacks to avoid")
    assert plain.semantic is None and PEANUTS not in [h.content for h in plain.hits]


def test_an_embedder_down_leaves_words_alone_and_why_says_so(memory: Memory) -> None:
    memory.embed_pending()
    broken = Memory(store=memory.store, namespace=memory.namespace, embedder=down)  # shares the store: not closed here
    # same model name as the stored vectors is not needed: the query is never embedded
    block = broken.context([{"role": "user", "content": "what about the mountains near Grenoble?"}])
    assert block.degraded_reason is None and "Grenoble" in block.block
    assert block.why and all("words only: the embedder failed" in w for w in block.why)
    result = broken.explain_search("mountains near Grenoble")
    assert result.hits and result.semantic.startswith("words only: the embedder failed")


def test_a_hanging_embedder_does_not_hold_the_block_past_its_budget(memory: Memory) -> None:
    release = threading.Event()

    def hanging(texts: list[str]) -> list[list[float]]:
        release.wait(30)
        return [toy_embedding(t) for t in texts]

    hanging.model_name = "toy-v1"  # type: ignore[attr-defined]
    memory.embed_pending()
    try:
        slow = Memory(store=memory.store, namespace=memory.namespace, embedder=hanging)  # shares the store: not closed here
        block = slow.context([{"role": "user", "content": "what about the mountains near Grenoble?"}],
                             time_budget_ms=3000)
        assert block.degraded_reason is None and "Grenoble" in block.block
        assert all("words only: the embedder did not answer within the time budget" in w for w in block.why)
    finally:
        release.set()


def test_a_query_vector_is_cached(memory: Memory) -> None:
    memory.embed_pending()
    toy = memory._embedder._function  # type: ignore[union-attr]
    before = len(toy.calls)
    memory.context([{"role": "user", "content": SNACKS}])
    memory.context([{"role": "user", "content": SNACKS}])
    memory.search(SNACKS)
    assert len(toy.calls) == before + 1


# -- around the store -------------------------------------------------------------------------------

def test_migrate_store_copies_the_vectors(tmp_path) -> None:
    src = str(tmp_path / "m.db")
    with Memory(src, namespace="maya", embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
        expected = mem.store.load_vectors("maya", "toy-v1")
    require_postgres()
    with temp_database("tortoise_vectors_copy") as url:
        report = copy_store(src, url)
        assert report.rows["vectors"] == 4
        with Memory(url, namespace="maya", embedder=Toy()) as copied:
            assert copied.store.load_vectors("maya", "toy-v1") == expected
            assert copied.embed_pending().embedded == 0
            assert PEANUTS in copied.context([{"role": "user", "content": SNACKS}]).block


def test_stats_say_how_vectors_are_searched(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    with Memory(db, embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
    code, out, _ = run_cli(capsys, "stats", "--db", db)
    assert code == 0 and "vectors: 4 by toy-v1" in out and "exact cosine" in out


# -- through litellm's HTTP path ----------------------------------------------------------------------

@pytest.mark.vcr
@pytest.mark.stub_only
def test_embeddings_through_litellm(vcr: Any, model_endpoint: ModelEndpoint, tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), embedder=model_endpoint.model, embed_api_base=model_endpoint.api_base,
                embed_api_key=model_endpoint.api_key) as mem:
        mem.capture("s1", TURNS)
        report = mem.embed_pending()
        assert (report.embedded, report.dim, report.error) == (4, 32, None)
        assert report.usage is not None and report.usage.calls == 1 and report.usage.prompt_tokens
        assert report.usage.completion_tokens is None  # embeddings have none: not reported, not 0
        assert PEANUTS in mem.context([{"role": "user", "content": SNACKS}]).block
        assert mem.search(SNACKS)[0].content == PEANUTS  # the cached query vector: no second request
    sent = [r for r in vcr.requests]
    assert len(sent) == 2 and all(r.uri.endswith("/embeddings") for r in sent)
    assert all(r.headers.get("X-Tortoise-Stage") == "embed" for r in sent)


@pytest.mark.vcr
@pytest.mark.stub_only
def test_an_embedding_503_is_retried_and_counted(vcr: Any, model_endpoint: ModelEndpoint, tmp_path) -> None:
    embedder = Embedder(model_endpoint.model, api_base=model_endpoint.api_base, api_key=model_endpoint.api_key,
                        **FAST_RETRY)
    with Memory(str(tmp_path / "m.db"), namespace="maya") as mem:
        mem.capture("s1", TURNS)
        report = embed_pending(mem.store, "maya", embedder)
    assert (report.embedded, report.error) == (4, None)
    assert report.usage is not None and (report.usage.calls, report.usage.retries) == (1, 1)
    assert report.usage.errors == {"server": 1}


# -- the rules, by property -------------------------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tortoise_sdk.models import SearchHit  # noqa: E402
from tortoise_sdk.reflex.semantic import fuse_hits  # noqa: E402
from tortoise_sdk.store.vectors import pack, unpack  # noqa: E402


def _hit(turn_id: str) -> SearchHit:
    return SearchHit(turn_id=turn_id, external_id=None, session_id="s", session_date=None, index=0, role="user",
                     name=None, content=turn_id, score=1.0)


ids = st.lists(st.sampled_from([f"t{i}" for i in range(12)]), unique=True, max_size=10)


@given(ids, ids, st.integers(min_value=1, max_value=25))
def test_fused_hits_are_the_union_once_each_best_first(lexical: list[str], semantic: list[str], k: int) -> None:
    fused = fuse_hits([_hit(t) for t in lexical], [_hit(t) for t in semantic], k)
    got = [h.turn_id for h in fused]
    assert len(got) == len(set(got)) == min(k, len(set(lexical) | set(semantic)))
    assert set(got) <= set(lexical) | set(semantic)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    rank = {t: i for i, t in enumerate(got)}
    for t in set(lexical) & set(semantic):
        worst = max(lexical.index(t), semantic.index(t))
        for u in (set(lexical) ^ set(semantic)) & rank.keys():
            if (lexical.index(u) if u in lexical else semantic.index(u)) >= worst and t in rank:
                assert rank[t] < rank[u]  # found by both lists, it goes before one found by one, no better placed


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=64))
def test_a_stored_vector_reads_back_exactly(vector: list[float]) -> None:
    assert unpack(pack(vector)) == vector


# -- a run reads each row once ------------------------------------------------------------------------

def test_a_run_in_batches_goes_on_from_its_last_item_and_embeds_everything(memory: Memory) -> None:
    """Each batch starts after the last item of the one before (a batch that read from the start again
    passed every row already embedded: a run over n rows cost n²/batch row reads)."""
    store, ns = memory.store, memory.namespace
    memory.remember("Biscuit is a greyhound who eats salmon kibble.")
    seen: list[tuple[str, str] | None] = []
    real = store.pending_embeddings

    def spy(namespace: str, model: str, limit: int, *, after: Any = None) -> Any:
        seen.append(after)
        return real(namespace, model, limit, after=after)

    store.pending_embeddings = spy  # type: ignore[method-assign]
    report = embed_pending(store, ns, memory._embedder, batch_size=2)
    total = len([t for t in memory.turns("s1") if t.content.strip()]) + 1
    assert (report.embedded, report.more) == (total, False)
    assert _vectors(memory) == {"toy-v1": total}
    batches = [a for a in seen[:-1]]  # the last call is the check for more, from the start
    assert batches[0] is None and all(a is not None for a in batches[1:]) and seen[-1] is None
    assert len(set(map(str, batches))) == len(batches)


def test_after_a_row_forgotten_meanwhile_the_read_starts_its_kind_over(memory: Memory) -> None:
    store, ns = memory.store, memory.namespace
    first = store.pending_embeddings(ns, "toy-v1", 2)
    assert [k for k, _, _ in first] == ["turn", "turn"]
    rest = store.pending_embeddings(ns, "toy-v1", 100, after=first[-1][:2])
    assert {i for _, i, _ in rest}.isdisjoint({i for _, i, _ in first})
    assert len(first) + len(rest) == len(store.pending_embeddings(ns, "toy-v1", 100))
    memory.forget_session("s1")
    memory.capture("s2", TURNS)
    again = store.pending_embeddings(ns, "toy-v1", 100, after=first[-1][:2])
    assert len(again) == len(store.pending_embeddings(ns, "toy-v1", 100)) > 0


def test_cli_embed_missing_key_names_the_embedders_key_not_the_models(tmp_path, monkeypatch, capsys) -> None:
    # `tortoise embed` takes no --api-key and never reads TORTOISE_API_KEY: the advice must name what it reads.
    for name in ("OPENAI_API_KEY", "TORTOISE_API_KEY", "TORTOISE_EMBED_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    db = str(tmp_path / "m.db")
    with Memory(db) as mem:
        mem.capture("s1", TURNS)
    code, out, err = run_cli(capsys, "--db", db, "embed", "--embedder", "openai/text-embedding-3-small",
                             "--embed-api-base", "http://127.0.0.1:9/v1")
    assert code == 3 and "(auth)" in err
    assert "TORTOISE_EMBED_API_KEY" in err and "embed_api_key=" in err
    assert "--api-key" not in err and "TORTOISE_API_KEY" not in err.replace("TORTOISE_EMBED_API_KEY", "")


def test_cli_embed_without_an_embedder_names_the_option_and_variable(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("TORTOISE_EMBEDDER", raising=False)
    db = str(tmp_path / "m.db")
    with Memory(db) as mem:
        mem.capture("s1", TURNS)
    code, _, err = run_cli(capsys, "--db", db, "embed")
    assert code == 2 and "--embedder" in err and "TORTOISE_EMBEDDER" in err
    assert "Memory(" not in err  # the Python spelling means nothing on the command line


class Encoder:
    """A model object whose bound ``encode`` is the embedder, as ``Memory(embedder=model.encode)`` passes it."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def encode(self, texts: list[str]) -> list[list[float]]:
        return [toy_embedding(t) for t in texts]


def test_a_bound_method_is_named_by_its_objects_model_name(tmp_path) -> None:
    # Every model's `.encode` has the same module and qualified name: without the object's model_name,
    # changing models kept the old vectors under one name, and nothing was embedded again.
    assert Embedder(Encoder("mini-v1").encode).model == "mini-v1"
    db = str(tmp_path / "m.db")
    with Memory(db, embedder=Encoder("mini-v1").encode) as mem:
        mem.capture("s1", TURNS)
        assert mem.embed_pending().embedded == 4
    with Memory(db, embedder=Encoder("mpnet-v2").encode) as mem:
        assert mem.embed_pending().embedded == 4
        assert _vectors(mem) == {"mpnet-v2": 4}
