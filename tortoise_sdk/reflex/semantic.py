"""Meaning beside words: the query's embedding, its nearest stored vectors, and their candidates for the fusion.

Optional (``Memory(embedder=...)``). ``Semantic`` holds what outlives one call: the embedding
function (handed in by ``Memory``; the reflex calls no model itself), a cache of query vectors, and
the namespace's vectors in memory, reloaded when the store's ``vector_version`` changes. Search
is exact cosine similarity over every vector of the namespace under the embedder's model: in memory
while the vectors held there are current (numpy when installed, else plain Python), else by the
engine where it can (``Store.nearest_vectors``: sqlite-vec, pgvector) while they load in the
background. All are exact, so all give the same neighbours; linear in the number of vectors.

The query is embedded in a worker thread, started as soon as the reflex knows the query, and
waited for only as long as the reflex's time budget allows; a slow or failing embedder leaves the
block to the words alone, and each ``why`` says so (``WORDS_ONLY``). An answer that comes late still
fills the cache, so the same question asked again is embedded at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..errors import NotFoundError, TortoiseError
from ..models import MemoryBlock, SearchHit
from ..store.base import Store
from ..store.vectors import unpack
from .shapes import Candidate, Reading

__all__ = ("QUERY_CACHE_SIZE", "SEMANTIC_K", "SEMANTIC_WEIGHT", "WORDS_ONLY", "Semantic", "SemanticStep", "fuse_hits")

#: Neighbours taken from the vectors, turns and memories each.
SEMANTIC_K = 10
#: Weight of the semantic lists in the reflex's rank fusion (the lexical turn list has 1.0).
SEMANTIC_WEIGHT = 0.8
#: Query vectors kept per ``Semantic``.
QUERY_CACHE_SIZE = 512
#: Reciprocal-rank constant of ``fuse_hits`` (search).
RRF_K = 60
#: How each ``why`` starts its note when the block was built from words alone.
WORDS_ONLY = "words only"
#: The share of the time left that the reflex gives the query's embedding.
WAIT_SHARE = 0.5

Neighbour = tuple[str, str, float]  # kind, id, cosine

log = logging.getLogger("tortoise_sdk.reflex")


class Semantic:
    """The query side of embeddings for one ``Memory``: thread-safe; shared by its ``context`` and ``search`` calls.

    Args:
        model: the model name the vectors are stored under.
        embed: texts to vectors (``Embedder.embed``); may raise or hang, it runs in a worker thread.
        max_wait_s: the longest wait for a query's vector when no time budget bounds it.
    """

    def __init__(self, model: str, embed: Callable[[list[str]], list[list[float]]], *,
                 max_wait_s: float = 30.0) -> None:
        self.model = model
        self._embed = embed
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._pending: dict[str, Future[list[float]]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._index: dict[tuple[int, str], _Index] = {}
        self._loading: dict[tuple[int, str], threading.Thread] = {}
        #: Whether the vectors are loaded into memory behind the engine's search (False: the engine's search
        #: whenever there is one).
        self.keep_in_memory = True

    def ask(self, query: str) -> Future[list[float]]:
        """The query's vector: done at once from the cache, else being embedded in a worker thread."""
        with self._lock:
            cached = self._cache.get(query)
            if cached is not None:
                self._cache.move_to_end(query)
                done: Future[list[float]] = Future()
                done.set_result(cached)
                return done
            running = self._pending.get(query)
            if running is None:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tortoise-embed")
                running = self._pending[query] = self._pool.submit(self._embed_one, query)
            return running

    def vector(self, asked: Future[list[float]], wait_s: float | None) -> tuple[list[float] | None, str | None]:
        """The vector ``ask`` promised within ``wait_s`` seconds (None: ``max_wait_s``), or None and why not."""
        try:
            return asked.result(timeout=self.max_wait_s if wait_s is None else max(wait_s, 0.0)), None
        except FutureTimeout:
            return None, "the embedder did not answer within the time budget"
        except Exception as exc:  # the embedder's failure, whatever it is: words alone
            return None, f"the embedder failed ({type(exc).__name__}: {str(exc)[:200]})"

    def neighbours(self, store: Store, namespace: str, vector: Sequence[float], k: int,
                   kind: str | None = None) -> list[Neighbour]:
        """The ``k`` stored items closest to ``vector`` by cosine similarity, closest first.

        The vectors held in memory while they are current (the fastest); else the engine's search
        (sqlite-vec, pgvector), which reads nothing into memory, while a daemon thread loads them for
        the next call; else, or if the engine's search fails (logged), a load here and now. All exact.
        """
        key = (id(store), namespace)
        version = store.vector_version(namespace, self.model)
        with self._lock:
            index = self._index.get(key)
        if index is not None and index.version == version:
            return index.top(vector, k, kind)
        try:
            near = store.nearest_vectors(namespace, self.model, vector, k, kind)
        except TortoiseError as exc:
            log.warning("vector search in the store failed (%s): searching in memory", exc)
            near = None
        if near is None:
            return self._index_top(store, namespace, vector, k, kind, version)
        if self.keep_in_memory:
            self._load_later(store, namespace, key, version)
        return near

    def _index_top(self, store: Store, namespace: str, vector: Sequence[float], k: int,
                   kind: str | None, version: Any = None) -> list[Neighbour]:
        """The in-memory exact search: the namespace's vectors held in memory, reloaded when they changed."""
        key = (id(store), namespace)
        if version is None:
            version = store.vector_version(namespace, self.model)
        with self._lock:
            index = self._index.get(key)
        if index is None or index.version != version:
            index = _Index(version, store.load_vectors(namespace, self.model))
            with self._lock:
                self._index[key] = index
        return index.top(vector, k, kind)

    def _load_later(self, store: Store, namespace: str, key: tuple[int, str], version: Any) -> None:
        with self._lock:
            running = self._loading.get(key)
            if running is not None and running.is_alive():
                return

            def load() -> None:
                try:
                    index = _Index(version, store.load_vectors(namespace, self.model))
                except Exception as exc:  # noqa: BLE001 - a closed store, a timeout: the engine answers meanwhile
                    log.debug("loading the vectors in the background failed: %s", exc)
                    return
                with self._lock:
                    self._index[key] = index

            # A daemon thread: a short-lived process (a hook) exits without waiting for it.
            thread = self._loading[key] = threading.Thread(target=load, name="tortoise-vectors", daemon=True)
        thread.start()

    def loaded(self, timeout: float | None = None) -> None:
        """Wait for the background loads started so far (tests, benchmarks)."""
        with self._lock:
            threads = list(self._loading.values())
        for t in threads:
            t.join(timeout)

    def close(self) -> None:
        """Stop the worker threads (a running embedding is not waited for)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _embed_one(self, query: str) -> list[float]:
        try:
            vector = [float(x) for x in self._embed([query])[0]]
            with self._lock:
                self._cache[query] = vector
                while len(self._cache) > QUERY_CACHE_SIZE:
                    self._cache.popitem(last=False)
            return vector
        finally:
            with self._lock:
                self._pending.pop(query, None)


class _Index:
    """One namespace's vectors under one model, unit length, in memory."""

    def __init__(self, version: Any, rows: Sequence[tuple[str, str, bytes]]) -> None:
        self.version = version
        self.keys = [(kind, item_id) for kind, item_id, _ in rows]
        try:
            import numpy as np
        except ImportError:
            np = None
        self._np = np
        if np is not None:
            dims = {len(blob) for _, _, blob in rows}
            if len(dims) > 1:  # one model, one dimension: a mixture is not searchable as one matrix
                rows, self.keys = [], []
            dim = dims.pop() // 4 if len(dims) == 1 else 0
            matrix = np.frombuffer(b"".join(blob for _, _, blob in rows), dtype="<f4").reshape(len(rows), dim)
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            self.matrix: Any = matrix / np.where(norms == 0, 1, norms)
            self._kinds = np.array([kind for kind, _ in self.keys], dtype=object)
        else:
            self.matrix = [_unit(unpack(blob)) for _, _, blob in rows]

    def top(self, vector: Sequence[float], k: int, kind: str | None) -> list[Neighbour]:
        if not self.keys or k < 1:
            return []
        query = _unit(vector)
        np = self._np
        if np is not None:
            if self.matrix.shape[1] != len(query):
                return []
            scores = self.matrix @ np.asarray(query, dtype=np.float32)
            if kind is not None:
                scores = np.where(self._kinds == kind, scores, -np.inf)
            n = min(k, len(scores))
            cut = np.partition(scores, len(scores) - n)[len(scores) - n]
            chosen = np.flatnonzero(scores >= cut)  # ascending: the stable sort keeps ties in key order
            order = [int(i) for i in chosen[np.argsort(-scores[chosen], kind="stable")]]
            sims = [float(scores[i]) for i in order]
        else:
            if len(self.matrix[0]) != len(query):
                return []
            all_sims = [sum(a * b for a, b in zip(row, query)) for row in self.matrix]
            order = sorted(range(len(all_sims)), key=lambda i: -all_sims[i])
            sims = [all_sims[i] for i in order]
        out: list[Neighbour] = []
        for i, sim in zip(order, sims):
            item_kind, item_id = self.keys[i]
            if kind is None or item_kind == kind:
                out.append((item_kind, item_id, sim))
                if len(out) >= k:
                    break
        return out


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


# -- the reflex's call sites ----------------------------------------------------------------------

class SemanticStep:
    """The semantic side of one reflex call: the query's vector on its way, and why the block had to do without."""

    def __init__(self, semantic: Semantic | None, query: str) -> None:
        self.semantic = semantic
        self.asked = None if semantic is None else semantic.ask(query)
        self.words_only: str | None = None

    def lists(self, r: Reading) -> list[list[Candidate]]:
        """The turns and the live memories closest in meaning to the query, as lists for ``fuse``.

        Waits for the query's vector at most ``WAIT_SHARE`` of the time left; without it, no list,
        and ``words_only`` says why.
        """
        if self.semantic is None or self.asked is None:
            return []
        wait = None if r.deadline is None else (r.deadline - time.perf_counter()) * WAIT_SHARE
        vector, self.words_only = self.semantic.vector(self.asked, wait)
        if vector is None:
            return []
        near = self.semantic.neighbours(r.store, r.ns, vector, SEMANTIC_K * 2)
        r.tick()
        turns: list[Candidate] = []
        memories: list[Candidate] = []
        for kind, item_id, sim in near:
            reason = f"close in meaning (cosine {sim:.2f})"
            try:
                if kind == "turn" and len(turns) < SEMANTIC_K:
                    hit = r.store.get_turn(r.ns, item_id)
                    turns.append(Candidate(key=hit.turn_id, kind="turn", text=hit.content, hit=hit,
                                           reasons=[reason], weight=SEMANTIC_WEIGHT))
                elif kind == "memory" and len(memories) < SEMANTIC_K:
                    m = r.store.get_memory(r.ns, item_id)
                    if m.status == "live":
                        memories.append(Candidate(key=m.id, kind="memory", text=m.content, memory=m,
                                                  reasons=[reason], weight=SEMANTIC_WEIGHT))
            except NotFoundError:  # forgotten since its vector was read
                continue
        r.tick()
        return [lst for lst in (turns, memories) if lst]

    def note(self, block: MemoryBlock) -> MemoryBlock:
        """The block, each ``why`` noting that it was built from words alone when the embedder did not answer."""
        if self.words_only:
            block.why = [f"{w}; {WORDS_ONLY}: {self.words_only}" for w in block.why]
        return block


# -- search ---------------------------------------------------------------------------------------

def fuse_hits(lexical: list[SearchHit], semantic: list[SearchHit], k: int) -> list[SearchHit]:
    """One ranking of search hits by reciprocal rank (``RRF_K``); each hit's score becomes its fused score."""
    scores: dict[str, float] = {}
    hits: dict[str, SearchHit] = {}
    for ranked in (lexical, semantic):
        for rank, h in enumerate(ranked):
            hits.setdefault(h.turn_id, h)
            scores[h.turn_id] = scores.get(h.turn_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    order = sorted(hits, key=lambda t: -scores[t])
    return [hits[t].model_copy(update={"score": round(scores[t], 6)}) for t in order[:k]]
