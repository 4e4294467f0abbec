"""Where the nearest vectors are searched: sqlite-vec inside SQLite when the ``[vectors]`` extra is
installed, else exactly in memory; both exact, so both give the same neighbours, and stats say which."""

from __future__ import annotations

import sqlite3
import sys
import threading
from typing import Any

import numpy as np
import pytest
from stub_model import toy_embedding
from test_embeddings import PEANUTS, SNACKS, TURNS, Toy

from conftest import run_cli
from pgtemp import require_postgres, temp_database
from tortoise_sdk import Memory
from tortoise_sdk.errors import StoreError
from tortoise_sdk.reflex.semantic import Semantic
from tortoise_sdk.store.copy import copy_store
from tortoise_sdk.store.postgres.pgvector import PgVector
from tortoise_sdk.store.sqlite.store import SQLiteStore
from tortoise_sdk.store.sqlite.vec import SqliteVec

pytest.importorskip("sqlite_vec")


def _no_sqlite_vec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)  # import fails: as without the extra


def _random_store(tmp_path: Any, seed: int, n: int = 400, dim: int = 24) -> tuple[SQLiteStore, np.ndarray]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    mem = Memory(str(tmp_path / f"v{seed}.db"), namespace="ns")
    mem.capture("s1", [{"role": "user", "content": f"turn number {i}"} for i in range(n)])
    turns = [t.turn_id for t in mem.turns("s1")]
    mem.store.save_vectors("ns", "m", [("turn", t, matrix[i].tolist()) for i, t in enumerate(turns)])
    return mem.store, rng.standard_normal((10, dim)).astype(np.float32)  # type: ignore[return-value]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sqlite_vec_finds_the_neighbours_the_exact_search_finds(tmp_path, seed: int) -> None:
    store, queries = _random_store(tmp_path, seed)
    semantic = Semantic("m", lambda texts: [])
    vec = store._sqlite_vec()
    try:
        assert vec.available, vec.reason
        _assert_engine_is_exact(store, semantic, queries)
    finally:
        store.close()


def test_sqlite_vec_searches_one_namespace_and_model_and_dimension(tmp_path) -> None:
    store, queries = _random_store(tmp_path, 7, n=30)
    try:
        assert len(store.nearest_vectors("ns", "m", queries[0].tolist(), 100) or []) == 30
        assert store.nearest_vectors("ns", "other-model", queries[0].tolist(), 100) == []
        assert store.nearest_vectors("nobody", "m", queries[0].tolist(), 100) == []
        assert store.nearest_vectors("ns", "m", [1.0, 0.0], 100) == []  # another dimension: not comparable
    finally:
        store.close()


def test_the_engine_answers_while_the_vectors_load_in_the_background(tmp_path, monkeypatch) -> None:
    with Memory(str(tmp_path / "m.db"), embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
        semantic = mem._semantic_search()
        assert semantic is not None
        gate, loads, engine = threading.Event(), [], []
        load_vectors, nearest = mem.store.load_vectors, mem.store.nearest_vectors

        def slow_load(*a: Any) -> Any:
            gate.wait(10)
            loads.append(a)
            return load_vectors(*a)

        def counted(*a: Any, **k: Any) -> Any:
            engine.append(a)
            return nearest(*a, **k)

        monkeypatch.setattr(mem.store, "load_vectors", slow_load)
        monkeypatch.setattr(mem.store, "nearest_vectors", counted)
        assert PEANUTS in mem.context([{"role": "user", "content": SNACKS}]).block  # not waiting for the load
        assert len(engine) == 1 and not loads
        gate.set()
        semantic.loaded()
        assert len(loads) == 1
        assert mem.explain_search("snacks to avoid").hits[0].content == PEANUTS  # from memory now
        assert len(engine) == 1
        mem.capture("s2", [{"role": "user", "content": "a new turn about peanut butter"}])
        mem.embed_pending()  # the vectors changed: the engine again, and a new load
        assert PEANUTS in mem.context([{"role": "user", "content": SNACKS}]).block
        assert len(engine) == 2


def test_a_failing_engine_search_falls_back_to_the_exact_one(tmp_path, monkeypatch, caplog) -> None:
    with Memory(str(tmp_path / "m.db"), embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()

        def broken(*a: Any, **k: Any) -> Any:
            raise StoreError("sqlite-vec search failed: disk I/O error")

        monkeypatch.setattr(mem.store, "nearest_vectors", broken)
        block = mem.context([{"role": "user", "content": SNACKS}])
        assert block.degraded_reason is None and PEANUTS in block.block
        assert "searching in memory" in caplog.text


def test_without_the_extra_the_search_is_exact_in_memory(tmp_path, monkeypatch) -> None:
    _no_sqlite_vec(monkeypatch)
    with Memory(str(tmp_path / "m.db"), embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
        assert mem.store.nearest_vectors(mem.namespace, "toy-v1", toy_embedding(SNACKS), 3) is None
        assert PEANUTS in mem.context([{"role": "user", "content": SNACKS}]).block
        assert "pip install 'tortoise-sdk[vectors]'" in mem.vector_stats()["vector_search"]


def test_a_fused_block_before_any_vector_is_stored_is_built(tmp_path, monkeypatch) -> None:
    _no_sqlite_vec(monkeypatch)  # the in-memory search over no vectors at all
    with Memory(str(tmp_path / "m.db"), embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        block = mem.context([{"role": "user", "content": "what about the mountains near Grenoble?"}])
        assert block.degraded_reason is None and "Grenoble" in block.block


@pytest.mark.parametrize("extra", [True, False])
def test_stats_say_which_search_is_used(tmp_path, monkeypatch, capsys: pytest.CaptureFixture[str], extra: bool) -> None:
    if not extra:
        _no_sqlite_vec(monkeypatch)
    db = str(tmp_path / "m.db")
    with Memory(db, embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
    code, out, _ = run_cli(capsys, "stats", "--db", db, "--json")
    import json

    search = json.loads(out)["vector_search"]
    assert code == 0
    if extra:
        assert search.startswith("sqlite-vec ") and "exact cosine inside SQLite" in search
    else:
        assert search.startswith("exact cosine in memory (sqlite-vec not in use: the sqlite-vec package is not installed")


def test_apsw_carries_the_extension_where_sqlite3_cannot_load_it(tmp_path, monkeypatch) -> None:
    pytest.importorskip("apsw")
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        monkeypatch.delattr(sqlite3.Connection, "enable_load_extension", raising=False)
    vec = SqliteVec(str(tmp_path / "x.db"))
    if hasattr(sqlite3.Connection, "enable_load_extension"):  # a builtin type: its attribute cannot be hidden
        pytest.skip("this Python's sqlite3 loads extensions itself")
    assert vec.driver == "apsw"


@pytest.mark.skipif(not hasattr(sqlite3.Connection, "enable_load_extension"),
                    reason="this Python's sqlite3 was built without extension loading (apsw carries it instead)")
def test_sqlite3_carries_the_extension_where_it_can(tmp_path) -> None:
    assert SqliteVec(str(tmp_path / "x.db")).driver == "sqlite3"


def test_an_in_memory_database_is_searched_in_memory() -> None:
    vec = SqliteVec(":memory:")
    assert not vec.available and "in-memory database" in vec.describe()


# -- PostgreSQL: pgvector where the server has it ----------------------------------------------------

def _pg_offers_pgvector() -> bool:
    import psycopg
    from pgtemp import pg_base_url

    with psycopg.connect(pg_base_url(), autocommit=True) as c:
        return c.execute(PgVector.AVAILABLE_SQL).fetchone() is not None


@pytest.fixture
def pg_db() -> Any:
    require_postgres()
    with temp_database("tortoise_pgvector") as url:
        yield url


def _fill(url: str, seed: int, n: int = 300, dim: int = 24) -> tuple[Memory, np.ndarray]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    mem = Memory(url, namespace="ns")
    mem.capture("s1", [{"role": "user", "content": f"turn number {i}"} for i in range(n)])
    turns = [t.turn_id for t in mem.turns("s1")]
    mem.store.save_vectors("ns", "m", [("turn", t, matrix[i].tolist()) for i, t in enumerate(turns)])
    return mem, rng.standard_normal((8, dim)).astype(np.float32)


def test_pgvector_finds_the_neighbours_the_exact_search_finds(pg_db: str) -> None:
    if not _pg_offers_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (Debian: postgresql-NN-pgvector)")
    mem, queries = _fill(pg_db, 11)
    store = mem.store
    assert store.nearest_vectors("ns", "m", queries[0].tolist(), 5) is None  # not set up before an embedding run
    store._pg_vector().ensure()  # as each embedding run does: sets it up, fills the rows saved before
    semantic = Semantic("m", lambda texts: [])
    try:
        assert store._pg_vector().available, store._pg_vector().reason
        assert store.vector_search().startswith("pgvector ")
        _assert_engine_is_exact(store, semantic, queries)
        assert store.nearest_vectors("ns", "m", [1.0, 0.0], 5) == []  # another dimension: not comparable
        assert store.nearest_vectors("other", "m", queries[0].tolist(), 100) == []
        assert store.nearest_vectors("ns", "other-model", queries[0].tolist(), 5) == []
        mem.forget_session("s1")  # a vector goes with its row
        assert store.nearest_vectors("ns", "m", queries[0].tolist(), 5) == []
    finally:
        mem.close()


def test_pgvector_reads_each_stored_float_exactly(pg_db: str) -> None:
    if not _pg_offers_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (Debian: postgresql-NN-pgvector)")
    values = [0.0, -0.0, 1.0, -2.5, 3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45,
              -1.401298464324817e-45, 0.1, -123456.789, 1e-20]
    with Memory(pg_db, namespace="ns") as mem:
        mem.capture("s1", [{"role": "user", "content": "one turn"}])
        turn = mem.turns("s1")[0].turn_id
        mem.store._pg_vector().ensure()  # as an embedding run does
        mem.store.save_vectors("ns", "m", [("turn", turn, values)])
        with mem.store.read() as c:
            got = c.execute("SELECT embedding::text FROM vectors").fetchone()[0]
    got32 = np.array([float(x) for x in got.strip("[]").split(",")], dtype=np.float32)  # float4's shortest text
    assert got32.tobytes() == np.array(values, dtype=np.float32).tobytes()


def test_the_reflex_searches_inside_postgresql_and_migrate_store_keeps_it(tmp_path, pg_db: str, monkeypatch) -> None:
    if not _pg_offers_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (Debian: postgresql-NN-pgvector)")
    src = str(tmp_path / "m.db")
    with Memory(src, namespace="maya", embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
    copy_store(src, pg_db)
    with Memory(pg_db, namespace="maya", embedder=Toy()) as copied:
        assert copied.embed_pending().embedded == 0  # the run sets pgvector up: the copied rows get their column
        assert copied.vector_stats()["vector_search"].startswith("pgvector ")

        def no_load(*a: Any) -> Any:
            raise AssertionError("the vectors were loaded into memory")

        monkeypatch.setattr(copied.store, "load_vectors", no_load)
        assert PEANUTS in copied.context([{"role": "user", "content": SNACKS}]).block
        assert copied.explain_search("snacks to avoid").hits[0].content == PEANUTS


def test_without_pgvector_the_search_is_exact_in_memory(pg_db: str, monkeypatch, capsys) -> None:
    monkeypatch.setattr(PgVector, "AVAILABLE_SQL", "SELECT 1 WHERE false")  # a server without the extension
    with Memory(pg_db, namespace="maya", embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        mem.embed_pending()
        assert mem.store.nearest_vectors("maya", "toy-v1", toy_embedding(SNACKS), 3) is None
        assert PEANUTS in mem.context([{"role": "user", "content": SNACKS}]).block
        with mem.store.read() as c:
            assert c.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None
    code, out, _ = run_cli(capsys, "stats", "--db", pg_db, "--namespace", "maya", "--json")
    import json

    assert code == 0
    assert json.loads(out)["vector_search"].startswith("exact cosine in memory (pgvector not in use: pgvector is "
                                                       "not installed on this server")


def test_a_row_written_without_its_embedding_is_searched_exactly_until_filled(pg_db: str) -> None:
    if not _pg_offers_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (Debian: postgresql-NN-pgvector)")
    mem, queries = _fill(pg_db, 12, n=40)
    store = mem.store
    try:
        store._pg_vector().ensure()
        q = queries[0].tolist()
        before = store.nearest_vectors("ns", "m", q, 5)
        assert before is not None
        with store.read() as c:  # as an older tortoise-sdk would: new bytes, no embedding
            c.execute("UPDATE vectors SET vector = %s WHERE item_id = %s",
                      (np.asarray(q, dtype=np.float32).tobytes(), before[-1][1]))
            assert c.execute("SELECT embedding IS NULL FROM vectors WHERE item_id = %s", (before[-1][1],)).fetchone()[0]
        assert store.nearest_vectors("ns", "m", q, 5) is None  # the exact search in memory answers meanwhile
        assert Semantic("m", lambda t: []).neighbours(store, "ns", q, 1)[0][1] == before[-1][1]
        store._pg_vector().ensure()  # the next embedding run fills it
        again = store.nearest_vectors("ns", "m", q, 1)
        assert again is not None and again[0][1] == before[-1][1]
        store.save_vectors("ns", "m", [("turn", before[-1][1], q)])  # the same vector saved again keeps its column
        assert store.nearest_vectors("ns", "m", q, 1) == again
        q2 = queries[1].tolist()
        store.save_vectors("ns", "m", [("turn", before[-1][1], q2)])  # a new vector through save_vectors: its column too
        near = store.nearest_vectors("ns", "m", q2, 1)
        assert near is not None and near[0][1] == before[-1][1]
    finally:
        mem.close()


def test_a_refused_create_extension_keeps_the_search_in_memory_and_is_logged(pg_db: str, monkeypatch, caplog) -> None:
    if not _pg_offers_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (Debian: postgresql-NN-pgvector)")
    import psycopg

    def refused(self: PgVector) -> None:
        raise psycopg.errors.InsufficientPrivilege("permission denied to create extension \"vector\"")

    monkeypatch.setattr(PgVector, "_create", refused)
    with Memory(pg_db, namespace="maya", embedder=Toy()) as mem:
        mem.capture("s1", TURNS)
        assert mem.embed_pending().embedded == 4
        assert mem.store.nearest_vectors("maya", "toy-v1", toy_embedding(SNACKS), 3) is None
        assert "permission denied to create extension" in mem.vector_stats()["vector_search"]
        assert PEANUTS in mem.context([{"role": "user", "content": SNACKS}]).block
    assert "permission denied to create extension" in caplog.text


def _assert_engine_is_exact(store, semantic, queries) -> None:
    """The engine's nearest vectors are the exact in-memory search's, ids and scores, for several ``k`` and kinds."""
    for q in queries:
        for k, kind in ((1, None), (10, None), (25, "turn"), (5, "memory")):
            engine = store.nearest_vectors("ns", "m", q.tolist(), k, kind)
            assert engine is not None
            exact = semantic._index_top(store, "ns", q.tolist(), k, kind)
            assert [(kd, i) for kd, i, _ in engine] == [(kd, i) for kd, i, _ in exact]
            assert [c for _, _, c in engine] == pytest.approx([c for _, _, c in exact], abs=1e-5)
