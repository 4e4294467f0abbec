"""``Memory``: the one object a host application talks to."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from .capture import CaptureRequest, prepare_capture
from .config import (
    DEFAULT_BREAKER_S,
    DEFAULT_CHUNK_TURNS,
    DEFAULT_CONCURRENCY,
    DEFAULT_EXTRACT_EVERY,
    DEFAULT_IDLE_S,
    DEFAULT_IMPORT_PIECE_TURNS,
    DEFAULT_JOB_RETRY_S,
    DEFAULT_MAX_TURNS_PER_CAPTURE,
    DEFAULT_NAMESPACE,
    DEFAULT_REQUEST_TIMEOUT_S,
    default_db_path,
    env_api_key,
    env_embedder,
    env_model,
)
from .errors import CaptureConflict, ConfigError, InvalidInput, InvalidType
from .models import (
    HOST_SESSION,
    MODEL_PAUSE_CURSOR,
    ROLES,
    CaptureReceipt,
    Cursor,
    Diagnostic,
    ExpandResult,
    EmbedReport,
    ExtractionReport,
    ForgetReport,
    JobInfo,
    JobStatus,
    MemoryBlock,
    MemoryRecord,
    NamespaceInfo,
    NamespaceStats,
    SearchHit,
    SearchResult,
    SessionInfo,
    SubagentContext,
    SubagentCounters,
    SubagentHealth,
    Tombstone,
    Turn,
)
from . import reflex
from .reflex.semantic import fuse_hits
from .search import MAX_SEARCH_K, content_terms, rank_hits
from .store import Store, open_store, sqlite_path
from .store.deadline import DEFAULT_STORE_TIMEOUT_S, within
from .store.forget import HASHED_FOLLOW
from .validate import (
    MAX_POLL_S,
    MAX_REVISION,
    check_callable,
    check_count,
    check_db,
    check_id,
    check_ids,
    check_json,
    check_lines,
    check_number,
    check_session_id,
    storable,
)
from .vocabulary import Vocabulary
from .vocabulary import vocabulary as host_vocabulary

if TYPE_CHECKING:
    from pathlib import Path

    import networkx

    from .ingest import IngestReport
    from .llm import LLMConfig
    from .llm.breaker import CircuitBreaker
    from .llm.embedder import EmbedFunction, Embedder
    from .reflex.semantic import Semantic
    from .store.copy import CopyReport
    from .streams.base import ParsedStream, SubagentFrame
    from .subagents import SubagentRecorder

# ``storable``: what the adapters (Memory clients) store of a message that capture would refuse.
__all__ = ("HOST_SESSION", "MAX_POLL_S", "NO_MODEL_REASON", "NO_NEW_TURNS_REASON", "Memory", "migrate_store", "state_dir",
           "storable")

_log = logging.getLogger("tortoise_sdk")

TurnLike = Turn | Mapping[str, Any]
ExtractMode = Literal["inline", "background"] | bool | None

NO_MODEL_REASON = "no model configured (set TORTOISE_MODEL or Memory(model=...))"
NO_NEW_TURNS_REASON = ("no new turns; run mem.extract(session_id, full=True) or `tortoise extract SESSION --full` "
                       "to re-extract")


class Memory:
    """Long-term memory for one namespace of a store.

    Usage::

        mem = Memory("memory.db", namespace="alice")
        mem.capture("sess-1", [{"role": "user", "content": "I started at Acme today"}],
                    session_date="2023-05-08T13:56:00")
        hits = mem.search("where does she work")

    Args:
        db: a SQLite path or URL (``sqlite:///relative.db``, ``sqlite:////absolute.db``), or a
            ``postgresql://...`` URL; default ``$TORTOISE_DB``, else ``~/.tortoise/memory.db``.
        namespace: every read and write is confined to it.
        max_turns_per_capture: the largest ``capture`` accepted in one call.
        model: the litellm model that extracts memories (e.g. ``openai/gpt-4o-mini``);
            default ``$TORTOISE_MODEL``; with none, capture stores turns only.
        api_base: the model endpoint, when not the provider's default.
        api_key: the model key, when not the provider's default; defaults to ``$TORTOISE_API_KEY``,
            else litellm reads the provider's variable.
        prompts_dir: a directory whose ``<stage>.md`` files replace the shipped prompts.
        chunk_turns: S1 chunk size, in turns.
        concurrency: how many S1 chunks run at once.
        vet: run the optional VET gate between S2 and S4.
        model_settings: more ``LLMConfig`` fields (``max_attempts``, ``max_tokens`` ...).
        create: make the SQLite file (and its directory) when missing; with False a missing file
            raises ``NotFoundError`` and nothing is created (for read-only callers).
        store_timeout_s: the bound, in seconds, on each store call (a capture's transaction, a
            read): past it the call raises ``StoreTimeout``, whatever the database is doing
            (locked, overloaded, frozen, unreachable). Default 30 s; it also applies to a
            ``store`` passed in. ``context()`` keeps to its own, shorter ``time_budget_ms``.
        extract_every: background extraction batching. Captures with ``extract="background"`` fold
            into one pending job per session, due once ``extract_every`` new evidence turns wait (or
            after ``idle_s``); ``flush()`` runs it now.
        idle_s: a session's pending background job is also due after this many seconds without a
            capture.
        breaker_s: after a fatal model failure (auth, billing, model_not_found, unreachable, timeout) no
            model is called for this many seconds, unless the model settings change; captures
            store their turns and their receipts say why extraction was skipped. 0 disables it.
        job_retry_s: a failed background job (or a partial one that left turns waiting) is due
            again this long after its first failed attempt, twice as long after the second, and
            so on (at most 10 minutes); after 3 attempts it is failed for good (``jobs``,
            ``flush(retry_failed=True)``).
        request_timeout_s: the deadline of one model request, in seconds (default 60). A request
            that times out is retried once; a second timeout fails the call for good, stops the
            extraction run and opens the breaker, so a hanging provider costs a run about two
            timeouts.
        embedder: turn on retrieval by meaning beside words: a litellm embedding model
            (``openai/text-embedding-3-small``; ``openai/<name>`` with ``embed_api_base`` for a local
            OpenAI-compatible server such as Ollama, TEI or vLLM) or a callable ``list[str] ->
            list[list[float]]``. Vectors are computed by ``embed_pending`` (run by ``flush``,
            ``tortoise worker`` and ``tortoise embed --backfill``), never by ``capture``.
            Default ``$TORTOISE_EMBEDDER`` (``$TORTOISE_EMBED_API_BASE``, ``$TORTOISE_EMBED_API_KEY``); with
            none, words alone.
        embed_api_base: the embedder's endpoint, when not the provider's default.
        embed_api_key: the embedder's key, when not the provider's default.
        categories: the host's own memory categories (e.g. ``["health", "work"]``): S2 and S4 are asked
            to give each memory one of them, and ``memories(category=...)`` filters on it. A category
            outside the list is not stored (a warning says so).
        extraction_instructions: what to keep and what to ignore, in the host's words; given to S1, S2
            and S4. Both enter the prompts' hashes, so changing them re-reads sessions in full.

    Raises:
        ConfigError: a bad argument, named by its ``field``.
        NotADatabase: ``db`` is a file that is not a SQLite database, or is damaged
            (``ForeignDatabase``: another application's); the file is left as it was.
        SchemaTooNew: ``db`` was written by a newer tortoise-sdk; nothing was written to it.
        ReadOnlyStore: ``db`` cannot be written and is not at this version's schema. (One at the
            current schema opens read-only: reads work, each write raises ``ReadOnlyStore``.)
    """

    def __init__(
        self,
        db: str | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        max_turns_per_capture: int = DEFAULT_MAX_TURNS_PER_CAPTURE,
        store: Store | None = None,
        model: str | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        prompts_dir: str | None = None,
        chunk_turns: int = DEFAULT_CHUNK_TURNS,
        concurrency: int = DEFAULT_CONCURRENCY,
        vet: bool = False,
        model_settings: Mapping[str, Any] | None = None,
        create: bool = True,
        extract_every: int = DEFAULT_EXTRACT_EVERY,
        idle_s: float = DEFAULT_IDLE_S,
        breaker_s: float = DEFAULT_BREAKER_S,
        job_retry_s: float = DEFAULT_JOB_RETRY_S,
        store_timeout_s: float | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        embedder: str | EmbedFunction | None = None,
        embed_api_base: str | None = None,
        embed_api_key: str | None = None,
        categories: Iterable[str] | None = None,
        extraction_instructions: str | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not namespace.strip() or "\x00" in namespace:
            raise ConfigError("namespace must be a non-blank string without NUL characters, "
                              "e.g. Memory(namespace='alice')", field="namespace")
        try:
            check_id(namespace, "namespace")
        except InvalidInput as exc:
            raise ConfigError(str(exc), field="namespace") from None
        db = check_db(db)
        for field, count in (("max_turns_per_capture", max_turns_per_capture), ("chunk_turns", chunk_turns),
                             ("concurrency", concurrency), ("extract_every", extract_every)):
            check_count(count, field, error=ConfigError)
        for field, seconds in (("idle_s", idle_s), ("breaker_s", breaker_s), ("job_retry_s", job_retry_s)):
            check_number(seconds, field, error=ConfigError)
        for field, value, example in (("model", model, "'openai/gpt-4o-mini'"),
                                      ("api_base", api_base, "'http://localhost:11434/v1'"),
                                      ("api_key", api_key, "os.environ['OPENAI_API_KEY']")):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                shown = f"a blank {type(value).__name__}" if isinstance(value, str) else type(value).__name__
                raise ConfigError(f"{field} must be a non-blank string, e.g. {field}={example}, or None; got {shown}",
                                  field=field)
        self.namespace = namespace
        self.max_turns_per_capture = max_turns_per_capture
        self.extract_every = extract_every
        self.idle_s = float(idle_s)
        self.model = model or env_model()
        self.breaker_s = float(breaker_s)
        self.job_retry_s = float(job_retry_s)
        self._breaker: CircuitBreaker | None = None
        self.api_base = api_base
        self._api_key = api_key or env_api_key()
        self._model_settings = dict(model_settings or {})
        self.prompts_dir = prompts_dir
        self.chunk_turns = chunk_turns
        self.concurrency = concurrency
        self.vet = vet
        self.vocabulary: Vocabulary | None = host_vocabulary(categories, extraction_instructions)
        check_number(store_timeout_s, "store_timeout_s", above=True, optional=True, error=ConfigError)
        bound = DEFAULT_STORE_TIMEOUT_S if store_timeout_s is None else float(store_timeout_s)
        self.request_timeout_s = _request_timeout(request_timeout_s, self._model_settings)
        self._model_settings["timeout_s"] = self.request_timeout_s
        self._embedder: Embedder | None = None
        self._semantic: Semantic | None = None
        env_embed = env_embedder()
        if embedder is None and env_embed[0]:
            embedder, embed_api_base = env_embed[0], embed_api_base or env_embed[1]
        embed_api_key = embed_api_key or env_embed[2]
        if embedder is None and embed_api_base:
            raise ConfigError("embed_api_base configures an embedder: pass embedder= too, e.g. "
                              "Memory(embedder='openai/nomic-embed-text', embed_api_base='http://localhost:11434/v1')",
                              field="embedder")
        if callable(embedder) and embed_api_base:
            raise ConfigError("embed_api_base is for a litellm embedding model, not a callable embedder",
                              field="embed_api_base")
        if embedder is not None:
            from .llm.embedder import Embedder

            self._embedder = Embedder(embedder, api_base=embed_api_base, api_key=embed_api_key,
                                      breaker_s=self.breaker_s)
        if store is None:
            store = open_store(db or default_db_path(), create=create, timeout_s=bound)
        elif store_timeout_s is not None:
            store.timeout_s = bound
        self.store: Store = store

    # -- lifecycle ---------------------------------------------------------------------------

    def within(self, seconds: float | None) -> AbstractContextManager[None]:
        """Store calls made inside the block end within ``seconds`` of entering it, or raise ``StoreTimeout``; a
        bound that ends sooner (an outer block, ``store_timeout_s``) still holds. None: no bound beyond those. The
        bound holds in this context: this thread, or this task and the threads ``asyncio.to_thread`` runs for it
        (``AsyncMemory``'s calls), not threads started otherwise. For a host with its own latency budget::

            with mem.within(2.0):
                mem.capture(session_id, turns)
        """
        return within(seconds)

    def close(self) -> None:
        """Close the store's connections."""
        if self._semantic is not None:
            self._semantic.close()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory({self.store.url!r}, namespace={self.namespace!r})"

    # -- capture -----------------------------------------------------------------------------

    def capture(
        self,
        session_id: str,
        turns: Iterable[TurnLike],
        *,
        session_date: str | datetime | None = None,
        idempotency_key: str | None = None,
        extract: ExtractMode = None,
        live: bool = False,
    ) -> CaptureReceipt:
        """Store a session's turns durably, in one transaction, before any model is called.

        Capturing the same session again appends only turns not stored yet. Then,
        with a model configured, the session is extracted into memories
        (``extract=None`` or ``"inline"``), queued as a durable job
        (``"background"``; run it with ``process_pending()`` or ``tortoise worker``)
        or not at all (``False``). The receipt's ``extraction`` says which and how it
        went; an extraction failure never raises and never loses the turns. A new session is dated
        ``session_date``, else its turns' first ISO 8601 ``timestamp``, else left undated (an import
        may be of any day; ``append`` dates by the clock); a session dated already keeps its date.
        ``live=True`` says the conversation is being had now (an agent storing its own conversation, as
        the MCP server's ``memory_capture`` does): a new session with neither is then dated now, as
        ``append`` dates it, not left undated. The clock's date is no part of the request an
        ``idempotency_key`` fingerprints, so a retry is still a replay.

        Raises:
            InvalidInput: a bad field, named by ``field`` (``InvalidType``, also a ``TypeError``, for
                a wrong type); nothing was written. Limits: ``tortoise_sdk.validate``.
            CaptureConflict: a turn differs from the stored turn with the same identity.
            IdempotencyConflict: ``idempotency_key`` was used with different content.
        """
        request = prepare_capture(
            session_id, turns, session_date=session_date, idempotency_key=idempotency_key,
            max_turns=self.max_turns_per_capture,
        )
        if live and request.session_date is None:  # said now: dated as append dates (a dated session keeps its date)
            from .models import utc_now

            request.session_date = utc_now().isoformat()
        request.extraction = self._report_before_writing(extract)
        receipt = self.store.capture(self.namespace, request)
        return self._after_capture(receipt, extract, request)

    def capture_many(
        self,
        sessions: Sequence[Mapping[str, Any]],
        *,
        extract: ExtractMode = None,
        chunk_size: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[CaptureReceipt]:
        """Import sessions ``{"session_id", "date"?, "turns", "idempotency_key"?}``.

        Every session is validated before anything is written. By default all are written in
        one transaction, up to ``DEFAULT_IMPORT_PIECE_TURNS`` turns; a larger import commits in
        pieces of at most that many turns (whole sessions), so its size never runs into the
        store's time bound. With ``chunk_size``, each chunk of that many sessions is its own
        transaction. ``progress(done, total)`` is called after each transaction. A conflict in a
        later piece leaves the earlier ones stored; running the same import again skips them.
        Extraction then runs per session as in ``capture``.

        Raises:
            InvalidInput: a bad session, named ``sessions[i]``; nothing was written.
            CaptureConflict, IdempotencyConflict: as in ``capture``.
        """
        check_count(chunk_size, "chunk_size", optional=True)
        check_callable(progress, "progress")
        requests = _prepare_sessions(sessions, self.max_turns_per_capture)
        skipped = self._report_before_writing(extract)
        for request in requests:
            request.extraction = skipped
        receipts: list[CaptureReceipt] = []
        for piece in _pieces(requests, chunk_size):
            try:
                receipts.extend(self.store.capture_many(self.namespace, piece))
            except CaptureConflict as exc:
                if not receipts:
                    raise
                raise CaptureConflict(f"{exc} ({len(receipts)} session(s) before it were stored; "
                                      "running the same import again skips them)") from None
            if progress is not None:
                progress(len(receipts), len(requests))
        return [self._after_capture(r, extract, q) for r, q in zip(receipts, requests)]

    @staticmethod
    def check_capture(
        session_id: str,
        turns: Iterable[TurnLike],
        *,
        session_date: str | datetime | None = None,
        idempotency_key: str | None = None,
        max_turns_per_capture: int = DEFAULT_MAX_TURNS_PER_CAPTURE,
    ) -> None:
        """Validate a ``capture`` with no store, e.g. before a database is created for it.

        Raises:
            InvalidInput: what ``capture`` would raise for the same input.
        """
        prepare_capture(session_id, turns, session_date=session_date, idempotency_key=idempotency_key,
                        max_turns=max_turns_per_capture)

    @staticmethod
    def check_sessions(sessions: Sequence[Mapping[str, Any]], *,
                       max_turns_per_capture: int = DEFAULT_MAX_TURNS_PER_CAPTURE) -> None:
        """Validate a ``capture_many`` with no store.

        Raises:
            InvalidInput: what ``capture_many`` would raise for the same sessions, naming ``sessions[i]``.
        """
        _prepare_sessions(sessions, max_turns_per_capture)

    # -- reads -------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, session_id: str | None = None) -> list[SearchHit]:
        """BM25 search over captured turns, best first; any string is safe.

        Turns spoken by a person the query names rank higher; hits that matched only terms too
        common to count are left out when better ones exist (``search.rank_hits``). A query
        with no content word (empty, only stop-words such as ``the and of``, only
        ``OR``/``NOT``/punctuation) returns nothing; ``explain_search`` says why. A turn is indexed
        by its first ``search.INDEX_CHARS`` (8,192) characters: a word only past them does not find it.

        Raises:
            InvalidInput: ``query`` is not a string, or ``k`` not an integer from 0 (nothing) to ``MAX_SEARCH_K``.
        """
        return self.explain_search(query, k, session_id).hits

    def explain_search(self, query: str, k: int = 10, session_id: str | None = None) -> SearchResult:
        """``search`` with what it looked for: the terms used, the hits, and why nothing was searched for.

        Raises:
            InvalidInput: as for ``search``.
        """
        if not isinstance(query, str):
            raise InvalidType(f"must be a string, got {type(query).__name__}", field="query")
        check_count(k, "k", low=0, high=MAX_SEARCH_K)  # 0 asks for nothing, as in search_memories
        check_session_id(session_id, optional=True)
        terms, reason = content_terms(query)
        if not terms or k < 1:
            return SearchResult(query=query, terms=terms, reason=reason)
        hits = rank_hits(self.store.search_terms(self.namespace, terms, k=k, session_id=session_id), terms)
        semantic = self._semantic_search()
        if semantic is None:
            return SearchResult(query=query, terms=terms, hits=hits)
        vector, why_not = semantic.vector(semantic.ask(query), None)
        if vector is None:
            return SearchResult(query=query, terms=terms, hits=hits, semantic=f"words only: {why_not}")
        near = [h for h in self._turns(item_id for _, item_id, _ in
                                       semantic.neighbours(self.store, self.namespace, vector, k * 4, kind="turn"))
                if session_id is None or h.session_id == session_id][:k]
        return SearchResult(query=query, terms=terms, hits=fuse_hits(hits, near, k), semantic="fused")

    def _semantic_search(self) -> Semantic | None:
        """The query side of the embedder (``reflex.semantic``), made on first use; None without an embedder."""
        if self._embedder is None:
            return None
        if self._semantic is None:
            from .reflex.semantic import Semantic

            self._semantic = Semantic(self._embedder.model, self._embedder.embed)
        return self._semantic

    def _turns(self, turn_ids: Iterable[str]) -> list[SearchHit]:
        """The turns of these ids that are still stored, in order."""
        from .errors import NotFoundError

        found = []
        for turn_id in turn_ids:
            try:
                found.append(self.store.get_turn(self.namespace, turn_id))
            except NotFoundError:
                continue
        return found

    @property
    def embedder_model(self) -> str | None:
        """The model name vectors are stored under (a callable's ``model_name`` or qualified name); None without one."""
        return None if self._embedder is None else self._embedder.model

    def embed_pending(self, limit: int | None = None) -> EmbedReport:
        """Give a vector to the turns and memories that have none under the embedder's model; never raises for the model.

        New turns and memories wait for it, and so does everything after the model changed
        (their vectors of the old model are replaced). An embedder failure stops the run and is
        reported in ``error``; the rest waits for the next run.

        Raises:
            ConfigError: no embedder is configured.
        """
        if self._embedder is None:
            raise ConfigError("no embedder configured: pass Memory(embedder='openai/text-embedding-3-small') "
                              "or a callable", field="embedder")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"limit must be a positive integer or None, got {limit!r}", field="limit")
        from .pipeline.embed import embed_pending

        return embed_pending(self.store, self.namespace, self._embedder, limit=limit)

    def vector_stats(self) -> dict[str, Any]:
        """The namespace's vectors by model, the embedder's model, and how they are searched."""
        return {"embedder": self.embedder_model, "vectors": self.store.vector_counts(self.namespace),
                "vector_search": self.store.vector_search()}

    def stats(self) -> NamespaceStats:
        """How much this namespace holds: sessions, turns, live memories, entities, sub-agent rows, jobs by status
        (statuses by name).

        Counted by the database in this namespace alone (``Store.namespace_counts``): no row is loaded and no
        other namespace counted, so it stays quick on a store of many turns.
        """
        n = self.store.namespace_counts(self.namespace)
        return NamespaceStats(namespace=self.namespace, sessions=n.sessions, turns=n.turns, memories=n.memories,
                              entities=n.entities, subagents=n.subagents, subagent_counters=self.subagent_counters(),
                              jobs=n.jobs)

    def sessions(self) -> list[SessionInfo]:
        """Captured sessions in this namespace, oldest first."""
        return self.store.sessions(self.namespace)

    def turns(self, session_id: str, *, last: int | None = None,
              external_ids: Sequence[str] | None = None, role: str | None = None) -> list[SearchHit]:
        """A session's stored turns, in order; with ``last``, only its latest ``last`` turns (a long session's
        tail, read at the cost of those turns alone); with ``external_ids``, only the turns captured under those
        message ids (read through their index: the cost is theirs, not the session's); with ``role``, only the
        turns of that role (``last`` then counts those: ``role="system", last=1`` is the session's last system turn).

        Raises:
            InvalidInput: ``last`` is not a whole number of at least 1 (``InvalidType`` for a wrong type), or
                ``role`` is not one of user, assistant, system, tool.
            InvalidType: ``external_ids`` is a single string or holds something that is not a string id.
        """
        check_count(last, "last", high=MAX_REVISION, optional=True)
        if external_ids is not None:
            if isinstance(external_ids, str) or not isinstance(external_ids, Iterable):
                raise InvalidType(f"expected a list of string ids, got {type(external_ids).__name__}",
                                  field="external_ids")
            external_ids = [check_id(i, "external_ids") for i in external_ids]
        if role is not None and role not in ROLES:
            raise InvalidInput(f"unknown role {role!r}; use one of {', '.join(ROLES)}", field="role")
        return self.store.turns(self.namespace, check_session_id(session_id), last=last, external_ids=external_ids,
                                role=role)

    def turn_metadata(self, session_id: str, *, start: int = 0,
                      stop: int | None = None) -> dict[str, dict[str, Any] | None]:
        """The metadata each turn of a session was captured with (verbatim), by turn id; with ``start`` and
        ``stop``, only the turns at those positions (``stop`` excluded; ``SearchHit.index`` is a turn's position).

        Raises:
            InvalidInput: ``start`` or ``stop`` is not a whole number of at least 0 (``InvalidType`` for a wrong type).
        """
        check_count(start, "start", low=0, high=MAX_REVISION)
        check_count(stop, "stop", low=0, high=MAX_REVISION, optional=True)
        return self.store.turn_metadata(self.namespace, check_session_id(session_id), start=start, stop=stop)

    def receipts(self, session_id: str | None = None) -> list[CaptureReceipt]:
        """Capture receipts (with their extraction reports), oldest first."""
        return self.store.receipts(self.namespace, check_session_id(session_id, optional=True))

    # -- sub-agent contexts and stream ingestion ------------------------------------------------
    # Sub-agent rows live in their own table: never a session, never memory grounding, never
    # part of the memory block.

    def subagents(self, session_id: str | None = None, turn_id: str | None = None) -> list[SubagentContext]:
        """Recorded sub-agent invocations, ordered by observed_at, tool_call_id, agent_execution_id, session_id."""
        return self.store.subagents(self.namespace, session_id=check_session_id(session_id, optional=True),
                                    turn_id=check_id(turn_id, "turn_id", optional=True))

    def subagent_counters(self) -> SubagentCounters:
        """The persistent sub-agent recorder counters of this namespace."""
        return self.store.subagent_counters(self.namespace)

    def subagent_health(self, since: datetime | str | None = None, session_id: str | None = None) -> SubagentHealth:
        """Were all sub-agent launches recorded? Answered from the database alone.

        ``shortfall``: launching tool calls in the captured turns (a Claude Code ``Task``/``Agent``
        tool_use) with no sub-agent row, each with its turn and tool call id; only a shortfall
        makes ``ok`` False. Rows with no launching call are reported, never alarmed: ``excess``
        when their session holds launching calls (the same kind of stream), ``no_launch_expected``
        when it holds none (ACP streams and the LangChain, OpenAI Agents and loop adapters
        capture no launching call). The lists are never netted: one missing row and one stray
        row are two findings, not zero. ``since`` (a datetime or ISO 8601 text) keeps the
        launches and rows observed from then on and matches one against the other, so a window
        with launches but no rows is a shortfall; ``last_observed_at`` is the latest row in it
        (None when there is none). ``session_id`` keeps that session and its derived
        ``:agent-``/``:task-`` sessions. Before recording started, no row does not mean no
        sub-agent: launches are only known from the turns that were captured.

        Raises:
            InvalidInput: ``since`` is not a time.
        """
        from .streams.base import AGENT_TOOL_NAMES, parse_time

        check_session_id(session_id, optional=True)
        at = since if isinstance(since, datetime) or since is None else parse_time(since)
        if since is not None and at is None:
            raise InvalidInput(f"{since!r} is not a time; give ISO 8601, e.g. 2026-02-01T00:00:00Z", field="since")
        return self.store.subagent_health(self.namespace, tool_names=AGENT_TOOL_NAMES, since=at,
                                          session_id=session_id)

    def record_subagent(self, frame: SubagentFrame | Mapping[str, Any]) -> SubagentContext | None:
        """Merge one sub-agent frame into its row; failures log a warning and count ``failed``, never raise.

        ``frame`` is a ``SubagentFrame`` or a mapping of its fields (what an adapter observed,
        e.g. ``{"session_id", "tool_call_id", "subagent_type", "tool_status"}``). Returns the row
        as stored, or None when the frame had no identity or the write failed.

        Raises:
            InvalidInput: ``frame`` is a mapping that is not a sub-agent frame (a caller's bug).
        """
        if isinstance(frame, Mapping):
            from pydantic import ValidationError

            from .streams.base import SubagentFrame

            try:
                frame = SubagentFrame.model_validate(frame)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise InvalidInput(first["msg"], field=".".join(str(p) for p in first["loc"]) or "frame") from None
        check_ids({field: getattr(frame, field) for field in _FRAME_IDS})  # what subagents() reads back by
        return self._subagent_recorder().record(frame)

    def subagent_handler(self, session_id: str | None = None, **options: Any) -> Any:
        """A LangChain callback handler that records agent-as-tool runs here (needs the ``langchain`` extra).

        Example::

            agent.invoke(inputs, config={"callbacks": [mem.subagent_handler("s1")]})
        """
        from .streams.langchain_callbacks import SubagentCallbackHandler

        return SubagentCallbackHandler(self.record_subagent, session_id=session_id, **options)

    def ingest(
        self,
        path_or_lines: str | os.PathLike[str] | Iterable[str | bytes],
        format: str = "auto",
        source: Literal["live", "backfill"] = "backfill",
        *,
        session_id: str | None = None,
        extract: ExtractMode = None,
    ) -> IngestReport:
        """Capture the turns of a transcript or event stream, then record its sub-agent frames.

        Reads a Claude Code transcript, Claude Agent SDK stream-json, ACP traffic or turn
        JSONL (``format="auto"`` detects which). Each session's turns are captured like
        ``capture`` (message ids are turn ids, so ingesting the same file again stores
        nothing and a grown file appends only its new turns; an edited message under a stored
        id is a ``CaptureConflict`` in ``errors``; a session with id-less turns is captured in
        one call whatever ``max_turns_per_capture``); then every sub-agent frame is
        recorded, after the turns so that frames resolve their launching turn.

        Args:
            path_or_lines: a file path, or the lines of one.
            format: ``auto``, ``turns``, ``claude-code``, ``stream-json`` or ``acp``.
            source: ``backfill`` (a file read afterwards) or ``live``; kept on new sub-agent rows.
            session_id: the session for lines that name none (turn JSONL, some ACP traffic).
            extract: as for ``capture``, per captured session.

        Raises:
            ConfigError: unknown ``format``.
            StreamParseError: the input cannot be read or holds no JSON object.
        """
        from .streams import parse_stream

        check_session_id(session_id, optional=True)
        if isinstance(path_or_lines, (str, os.PathLike)):
            _refuse_open_database(path_or_lines)
        parsed = parse_stream(check_lines(path_or_lines, "path_or_lines"), format, source=source,
                              session_id=session_id)
        return self._ingest_parsed(parsed, source, extract)

    def follow(
        self,
        path: str | os.PathLike[str],
        format: str = "auto",
        source: Literal["live", "backfill"] = "live",
        *,
        session_id: str | None = None,
        extract: ExtractMode = None,
        max_bytes: int | None = None,
        only_session: str | None = None,
    ) -> IngestReport:
        """Ingest what a growing transcript gained since the last ``follow`` of the same file.

        The byte offset reached is kept in the store (a cursor named ``follow:<absolute path>``, or
        ``follow:sha256:<hash of the path>`` when the path is too long, or not UTF-8, for an id),
        so separate processes (one per Claude Code hook call) continue where the last one
        stopped. Only complete lines are read: a line still being written waits for the next
        call (a last line with no newline is read once it is a whole JSON object, and read again
        by the next call). Earlier lines still teach the parser their ids (kept with the offset, so they are
        not read again; an older cursor without them has them read once more), so the new lines yield
        exactly what ``ingest`` of the whole file yields for them; a turn with no id of its own (plain turn
        JSONL) read after the file's first line takes its line's (``L12``), since its position in the lines
        read is not its place in the session (``ingest.with_line_ids``; read from the start, its position is,
        as for ``ingest``). A file that shrank or whose read
        part changed (rewritten) is read again from its start (``report.restarted``); turns
        already stored are skipped, so nothing is captured twice. With ``max_bytes``, at most
        that many bytes of new lines are read (always at least one line); the rest waits for the
        next call, so a caller with a time limit still makes progress through a long file.
        The file is read in pieces, never whole: its earlier lines one at a time, the new ones
        within ``max_bytes``; a line longer than ``ingest.MAX_LINE_BYTES`` is passed over (in
        ``report.parse.skipped``). With ``only_session``, lines of any other session (and its
        sub-agents) are not captured: each such session is an ``other_session`` entry of
        ``report.errors``. Other arguments as for ``ingest``.

        Raises:
            ConfigError: unknown ``format``.
            StreamParseError: the file cannot be read, or is not a regular file (a device, a FIFO).
        """
        from pathlib import Path

        from .ingest import (MAX_LINE_BYTES, FollowedFile, IngestReport, follow_state, known_ids, tail_span,
                             with_line_ids)
        from .streams.base import ParseReport, SkippedLine
        from .streams.detect import learn_ids, parse_followed

        check_ids({"session_id": session_id, "only_session": only_session})
        check_count(max_bytes, "max_bytes", optional=True)
        where = Path(path).expanduser().resolve()
        _refuse_open_database(where)
        name, hashed = f"follow:{where}", HASHED_FOLLOW + hashlib.sha256(os.fsencode(where)).hexdigest()
        try:
            check_id(name, "name")
        except InvalidInput:  # a path too long (or not UTF-8) to be an id: its hash is one
            name = hashed
        with FollowedFile(where) as f:
            cursor = self.cursor(name)
            if cursor.revision == 0 and name != hashed:  # forget_session took the path out of its name
                cursor = self.cursor(hashed) if self.cursor(hashed).revision else cursor
            span = tail_span(f, cursor.value, max_bytes)
            fmt = str(cursor.value.get("format") or format) if format == "auto" and not span.restarted else format
            report = IngestReport(format=fmt, source=source, parse=ParseReport(format=fmt))
            # The ids the lines before the offset taught the parser, kept with it: they are not read again.
            known = known_ids(cursor.value, fmt, span.start)
            if span.skip:
                report.parse.skipped.append(SkippedLine(line=span.skip_lines + 1, type="unknown",
                                                        reason=f"line longer than {MAX_LINE_BYTES} bytes"))
                self.save_cursor(cursor.name, follow_state(f, span, fmt, 1, known), revision=cursor.revision)
            elif span.end > span.start:
                new = f.read(span.start, span.end - span.start)
                ended = new.split(b"\n")  # after a last newline, an empty piece; else a last line read whole
                ended = ended[:-1] if ended[-1] == b"" else ended
                parsed, ids = parse_followed(ended if known is not None else itertools.chain(f.lines(span.start), ended),
                                             fmt, source=source, session_id=session_id, skip_lines=span.skip_lines,
                                             known=known)
                if span.resume is not None and ids is not None:  # its last line is read again: not learnt yet
                    ids = None if known is None else learn_ids(parsed.format, known, ended[:-1], span.skip_lines + 1)
                if span.skip_lines:  # read from the middle: an id-less turn's place is its line, not its position
                    parsed = with_line_ids(parsed)
                others = _other_sessions(parsed, only_session)
                report = self._ingest_parsed(parsed, source, extract)
                report.errors.extend(others)
                self.save_cursor(cursor.name, follow_state(f, span, parsed.format, new.count(b"\n"), ids),
                                 revision=cursor.revision)
        report.start_offset, report.end_offset = span.start, max(span.next_start, span.start)
        report.restarted = span.restarted
        return report

    def _ingest_parsed(self, parsed: ParsedStream, source: str, extract: ExtractMode) -> IngestReport:
        """Capture each parsed session's turns, then record the frames (after the turns, so they resolve)."""
        from .capture import content_hash
        from .ingest import IngestReport
        from .subagents import SubagentRecorder

        report = IngestReport(format=parsed.format, source=source, sessions=len(parsed.sessions),
                              frames=len(parsed.frames), parse=parsed.report)
        for sid, turns in parsed.sessions.items():
            report.turns_received += len(turns)
            turns = [_storable(t, sid, report) for t in turns]
            # Only the stored turns these ids name are read (a followed session may hold thousands); a session
            # with an id-less turn is captured whatever is stored.
            ids = [t.id for t in turns if t.id is not None]
            stored = {h.external_id: content_hash(Turn(role=h.role, name=h.name, content=h.content))
                      for h in self.store.turns(self.namespace, sid, external_ids=ids)
                      if h.external_id is not None} if len(ids) == len(turns) else {}
            # An edited message under a known id is not "unchanged": capture it, so it conflicts.
            if all(t.id is not None and stored.get(t.id) == content_hash(t) for t in turns):
                report.sessions_unchanged += 1
                continue
            # An id-less turn's identity is its position, so such a session is captured in one call
            # (ingest is a file import; max_turns_per_capture guards API callers).
            size = len(turns) if any(t.id is None for t in turns) else self.max_turns_per_capture
            for start in range(0, len(turns), size):
                if not self._ingest_chunk(sid, turns[start:start + size], size, extract, report):
                    break
        report.counters = SubagentRecorder(self.store, self.namespace).record_all(parsed.frames)
        report.frames_recorded = report.counters.persisted
        return report

    def _ingest_chunk(self, sid: str, chunk: list[Turn], size: int, extract: ExtractMode, report: Any) -> bool:
        """Capture one chunk of a parsed session; False when the session's later chunks must not follow.

        A turn no store can hold (``InvalidInput`` naming it) is left out alone, with an error on the report: the
        turns around it are captured (a ``follow`` moves past them, so they would be lost for good).
        """
        from .errors import CaptureConflict

        chunk = list(chunk)
        while chunk:
            try:
                # A new session is dated by its first turn's timestamp (prepare_capture): a default, so a
                # later chunk or call, whose first timestamp is later, keeps it without a warning.
                request = prepare_capture(sid, chunk, max_turns=size)
                request.extraction = self._report_before_writing(extract)
                receipt = self._after_capture(self.store.capture(self.namespace, request), extract, request)
            except (InvalidInput, CaptureConflict) as exc:
                report.errors.append(Diagnostic(stage="capture", code=type(exc).__name__, message=str(exc),
                                                detail={"session_id": sid}))
                if type(exc) is CaptureConflict or exc.turn is None:
                    return False
                del chunk[exc.turn]
                continue
            report.receipts.append(receipt)
            report.turns_stored += receipt.turns_stored
            return True
        return True

    # -- forgetting --------------------------------------------------------------------------

    def forget_session(self, session_id: str) -> ForgetReport:
        """Forget a session: its turns and every row derived from them, in one transaction.

        Removed: the session and its derived sessions (``<session>:agent-…``, ``<session>:task-…``),
        their turns with their search index entries, capture receipts, extraction runs and jobs,
        sub-agent rows, host cursors named after them, and any other row a table keeps per session.
        A memory whose every source turn is gone is removed (its supersession chain re-linked); a
        memory with sources elsewhere keeps them and loses only the edges to the removed turns.
        Entities left with no memory are removed. A tombstone records what was removed, when and
        by which call, without content (``tombstones``). Forgetting it again removes nothing and
        reports zeros. What stays on disk until a ``vacuum`` is listed in the README ("Forgetting").

        Raises:
            InvalidInput: ``session_id`` is not a non-empty string.
        """
        _require_id(session_id, "session_id")
        report = self.store.forget_session(self.namespace, session_id)
        if report.sessions:
            _forget_in_hook_log(self.store.url, report.sessions)
        return report

    def forget_memory(self, memory_id: str) -> ForgetReport:
        """Forget one memory: its sources, entity links and index entry; entities left with nothing go too.

        Its supersession chain is re-linked, never left dangling: the versions before and after it
        point at each other, and if it was the newest version, the one before it takes its place
        (and its status). Forgetting it again reports zeros; an unknown id reports zeros.

        Raises:
            InvalidInput: ``memory_id`` is not a non-empty string.
        """
        _require_id(memory_id, "memory_id")
        return self.store.forget_memory(self.namespace, memory_id)

    def tombstones(self, *, session_id: str | None = None, memory_id: str | None = None) -> list[Tombstone]:
        """The audit rows forgetting left in this namespace, oldest first; or those of one session or memory.

        A tombstone holds a hash of the forgotten id, never the id: look one up by passing the id.
        """
        check_ids({"session_id": session_id, "memory_id": memory_id})
        if session_id is not None and memory_id is not None:
            raise InvalidInput("pass session_id or memory_id, not both", field="memory_id")
        subject, subject_id = ("session", session_id) if session_id is not None else ("memory", memory_id)
        return self.store.tombstones(self.namespace, subject if subject_id is not None else None, subject_id)

    def vacuum(self) -> None:
        """Physically drop what forgetting left in the database files (the whole database, every namespace).

        SQLite: merges the full-text indexes, rewrites the file without free pages and empties the
        WAL. PostgreSQL: ``VACUUM (FULL, ANALYZE)`` of every table, which locks each while it is
        rewritten. Backups and copies are not touched.
        """
        self.store.vacuum()

    # -- host state ----------------------------------------------------------------------------

    def cursor(self, name: str) -> Cursor:
        """Named state a host integration keeps in this namespace between processes.

        Revision 0 with an empty value when it was never saved. Used for a transcript's read
        offset (``follow``) and a session's view (the OpenAI Agents SDK session).
        """
        return self.store.get_cursor(self.namespace, check_id(name, "name"))

    def save_cursor(self, name: str, value: Mapping[str, Any], *, revision: int) -> Cursor | None:
        """Save a cursor if it is still at ``revision`` (from ``cursor(name)``); None when another save came first.

        Raises:
            InvalidInput: ``value`` is not a JSON object.
        """
        check_id(name, "name")
        if not isinstance(value, Mapping):
            raise InvalidType(f"must be a JSON object (a dict), got {type(value).__name__}", field="value")
        check_json(dict(value), "value")
        if isinstance(revision, bool) or not isinstance(revision, int) or not 0 <= revision <= MAX_REVISION:
            raise InvalidInput(f"must be the revision read with cursor(name), got {revision!r}", field="revision")
        return self.store.put_cursor(self.namespace, name, value, revision)

    def _subagent_recorder(self) -> SubagentRecorder:
        recorder = getattr(self, "_recorder", None)
        if recorder is None:
            from .subagents import SubagentRecorder

            recorder = self._recorder = SubagentRecorder(self.store, self.namespace)
        return recorder

    # -- extraction --------------------------------------------------------------------------

    def extract(self, session_id: str, *, full: bool = False) -> ExtractionReport:
        """Extract a stored session's turns captured since its last extraction, now.

        The report is stored on the session's latest receipt. With ``full=True`` every turn of
        the session is read again (what is already stored then comes back as NOOP or UPDATE);
        so is it, once, after the prompts changed.

        Raises:
            NotFoundError: no such session (checked first).
            ConfigError: no model is configured.
        """
        receipts = self.store.receipts(self.namespace, check_session_id(session_id))
        if not receipts:
            from .errors import NotFoundError

            raise NotFoundError(f"no such session {session_id!r} in namespace {self.namespace!r}; "
                                "list them with mem.sessions() or `tortoise sessions`")
        if not self.model:
            raise ConfigError(NO_MODEL_REASON, field="model")
        return self._extract(session_id, receipts[-1], full=full)

    def entities(self) -> list[dict[str, Any]]:
        """The people, places, organisations ... extraction resolved, oldest first:
        ``{id, name, kind, note, aliases}``, each alias ``{name, how, evidence}``.

        A name resolves by normalised spelling; a person's first name, nickname ("Bob" for Robert)
        or clipped name ("Mel" for Melanie) to the one known person it can be; a role ("my wife")
        to the person a memory or note named in it; ``how`` and ``evidence`` say which and why
        (see docs/extraction.md). Correct it with ``merge_entities`` and ``split_entity``."""
        return self.store.entities(self.namespace)

    def merge_entities(self, keep: str, other: str) -> dict[str, Any]:
        """Make ``other`` the same entity as ``keep`` (each an id, a name or an alias); returns ``keep``.

        ``other``'s memories and names move to ``keep``; its name stays an alias (``how="merge"``) and
        the merge is kept in ``entity_events`` with what moved, so ``split_entity`` can undo it.

        Raises:
            NotFoundError: no such entity. InvalidInput: both name one entity already.
        """
        from .models import utc_now
        from .validate import check_text

        check_text(keep, "keep")
        check_text(other, "other")
        return self.store.merge_entities(self.namespace, keep, other, now=utc_now())

    def split_entity(self, entity: str, name: str) -> dict[str, Any]:
        """Take ``name`` back out of ``entity`` as an entity of its own ("Mel" is not Melanie); returns it.

        The memories that named ``entity`` by ``name``, and those a merge of an entity called ``name``
        brought, move to the new entity; ``name`` never resolves to ``entity`` again. Recorded in
        ``entity_events``.

        Raises:
            NotFoundError: no such entity. InvalidInput: ``name`` is the entity's own name or not one of its names.
        """
        from .models import utc_now
        from .validate import check_text

        check_text(entity, "entity")
        check_text(name, "name")
        return self.store.split_entity(self.namespace, entity, name, now=utc_now())

    def entity_events(self, entity_id: str | None = None) -> list[dict[str, Any]]:
        """The merges and splits of this namespace's entities (or of one entity: an id, a name or an alias),
        oldest first: ``{kind, entity_id, other_id, detail, reason, created_at}``; ``detail`` says what moved.

        Raises:
            NotFoundError: no entity has that name (an id of an entity merged away still finds its events).
        """
        return self.store.entity_events(self.namespace, check_id(entity_id, "entity_id", optional=True))

    def memories(self, session_id: str | None = None, include_superseded: bool = False, *,
                 category: str | None = None) -> list[MemoryRecord]:
        """Extracted memories (events and points) with entities and sources, oldest first; ``category``:
        only those the extraction filed under it (one of ``Memory(categories=...)``, case ignored).

        Raises:
            InvalidInput: ``category`` is not one of this memory's categories.
        """
        if category is not None:
            category = self._host_category(category)
        return self.store.memories(self.namespace, check_session_id(session_id, optional=True),
                                   include_superseded, category=category)

    def _host_category(self, category: str) -> str:
        """``category`` in the host's spelling. Raises InvalidInput when it is not one of ``Memory(categories=...)``."""
        known = self.vocabulary.category(category) if self.vocabulary and self.vocabulary.categories else None
        if known is None:
            listed = ", ".join(self.vocabulary.categories) if self.vocabulary else ""
            raise InvalidInput(f"{category!r} is not one of this memory's categories "
                               f"({listed or 'none: give Memory(categories=[...])'})", field="category")
        return known

    def process_pending(self, max_jobs: int | None = None, *, session_id: str | None = None,
                        due_only: bool = True) -> list[JobInfo]:
        """Run the queued background extractions of this namespace that are due; returns each job's state after its run.

        ``session_id`` limits it to one session; ``due_only=False`` also runs jobs still
        waiting for their batch to fill (that is ``flush``).

        Raises:
            ConfigError: no model is configured.
        """
        if not self.model:
            raise ConfigError(NO_MODEL_REASON, field="model")
        from .pipeline.jobs import process_pending

        def run(job: JobInfo, fence: Any) -> ExtractionReport:
            receipt = next((r for r in self.store.receipts(self.namespace, job.session_id)
                            if r.receipt_id == job.receipt_id), None)
            return self._extract(job.session_id, receipt, fence=fence)

        ran = process_pending(self.store, self.namespace, run, max_jobs=max_jobs, session_id=session_id,
                              due_only=due_only, retry_backoff_s=self.job_retry_s,
                              paused=lambda: self._breaker_trip() is not None)
        return self._with_turns(ran)

    def flush(self, session_id: str | None = None, *, retry_failed: bool = False) -> list[JobInfo]:
        """Extract now what background captures left pending (of one session, or of all), without waiting for the batch.

        Adapters call it when a conversation closes. A job another worker is running is left to it, and so is
        one of the same session (a session's jobs run one at a time: it runs when that one ends).
        ``retry_failed`` first queues the jobs that failed for good again (attempts start over).
        Returns each job's state after its run.

        With an embedder, the turns and memories waiting for a vector get one too (``embed_pending``).

        Raises:
            ConfigError: neither a model nor an embedder is configured.
        """
        if retry_failed:
            if not self.model:
                raise ConfigError(NO_MODEL_REASON, field="model")
            self.retry_failed_jobs(session_id)
        jobs = self.process_pending(session_id=session_id, due_only=False) if self.model or not self._embedder else []
        self._embed_in_background()
        return jobs

    def retry_failed_jobs(self, session_id: str | None = None) -> list[JobInfo]:
        """Queue the jobs that failed for good (of one session, or all) again, due now, attempts reset; runs none.

        A worker (``tortoise worker``) or ``flush`` runs them. Returns the jobs now pending for
        those sessions, oldest first (a session that had a pending job keeps that one).
        """
        queued = self.store.retry_failed_jobs(self.namespace, check_session_id(session_id, optional=True))
        return self._with_turns(queued)

    def jobs(self, status: JobStatus | None = None, session_id: str | None = None) -> list[JobInfo]:
        """Background extraction jobs of this namespace, oldest first: of one ``status`` and session when given.

        Each says its attempts, errors (``last_error``) and, unless done, the ``turns`` that wait
        for it. A ``failed`` job failed for good (3 attempts); ``flush(retry_failed=True)`` queues it again.
        """
        if status is not None and status not in ("pending", "running", "done", "failed"):
            raise ConfigError(f"status={status!r}: use 'pending', 'running', 'done' or 'failed'", field="status")
        session_id = check_session_id(session_id, optional=True)
        rows = self.store.jobs(self.namespace, status=status)
        return self._with_turns([j for j in rows if session_id is None or j.session_id == session_id])

    def _with_turns(self, jobs: list[JobInfo]) -> list[JobInfo]:
        """The jobs with ``turns``: for one not done, the session's turns after its watermark (what waits)."""
        if all(j.status == "done" for j in jobs):
            return jobs
        counts = {s.session_id: s.turn_count for s in self.store.sessions(self.namespace)}
        waiting: dict[str, tuple[int, int] | None] = {}
        out = []
        for job in jobs:
            if job.status != "done" and job.session_id not in waiting:
                state = self.store.extraction_state(self.namespace, job.session_id)
                first, last = (-1 if state is None else state.watermark) + 1, counts.get(job.session_id, 0) - 1
                waiting[job.session_id] = (first, last) if first <= last else None
            out.append(job if job.status == "done" else job.model_copy(update={"turns": waiting[job.session_id]}))
        return out

    def run_worker(self, *, poll_s: float = 2.0, once: bool = False, max_jobs: int | None = None,
                   on_job: Callable[[JobInfo], None] | None = None, stop: Any = None) -> int:
        """Run due background extractions until stopped (``tortoise worker``); returns how many jobs ran.

        Polls every ``poll_s`` seconds when idle. A store outage is logged and waited out
        with backoff; with ``once``, one pass runs and an outage raises. ``on_job`` sees each
        job's state after its run; setting the ``threading.Event`` ``stop`` ends the loop.

        Raises:
            ConfigError: no model is configured.
            InvalidInput: ``poll_s`` is not a number above 0 and at most a day (0 would poll in a busy loop).
        """
        check_number(poll_s, "poll_s", above=True)
        if poll_s > MAX_POLL_S:
            raise InvalidInput(f"must be at most {MAX_POLL_S:,g} seconds (a day), got {poll_s}", field="poll_s")
        if not self.model and self._embedder is None:
            raise ConfigError(NO_MODEL_REASON, field="model")
        from .pipeline.jobs import run_worker

        told: set[datetime] = set()

        def process(limit: int | None) -> list[JobInfo]:
            # A long-running worker says once per trip why it leases nothing, at the first pass the breaker
            # holds (after the failed job was reported); with ``once`` the caller reports it.
            trip = None if once else self._breaker_trip()
            if trip is not None and trip.opened_at not in told:
                told.add(trip.opened_at)
                _log.warning("worker: no job is leased until %s: %s", trip.closes_at.isoformat(timespec="seconds"),
                             trip.reason())
            jobs = self.process_pending(max_jobs=limit) if self.model else []
            self._embed_in_background()
            return jobs

        return run_worker(process, poll_s=poll_s, once=once, max_jobs=max_jobs, on_job=on_job, stop=stop)

    def _embed_in_background(self) -> None:
        """``embed_pending`` for a worker or a flush: its failure is logged, the vectors wait for the next run."""
        if self._embedder is None:
            return
        report = self.embed_pending()
        if report.error is not None:
            _log.warning("embeddings: %d stored, the rest waits: %s", report.embedded, report.error)

    def extraction_paused(self, *, cause: bool = True) -> str | None:
        """Why no model is called now (the circuit breaker is open after a fatal failure), or None.

        Captures still store their turns; queued jobs wait (their attempts are kept). ``cause=False``
        leaves out the failure's own message (for a caller that has just shown it).
        """
        trip = self._breaker_trip()
        return trip.reason(cause=cause) if trip is not None else None

    def _breaker_trip(self) -> Any:
        """The breaker's open trip for this configuration (``llm.breaker.Trip``), or None."""
        if not self.model:
            return None
        try:
            return self._circuit().check(self._llm_config())
        except ConfigError:
            return None

    def _circuit(self) -> Any:
        """This memory's circuit breaker (``llm.breaker.CircuitBreaker``), its trips kept in the namespace's store, so
        a new process (each ``tortoise flush``) honours a pause an earlier one opened."""
        if self._breaker is None:
            from .llm.breaker import CircuitBreaker

            self._breaker = CircuitBreaker(self.breaker_s, shared=_StoredPause(self))
        return self._breaker

    def reset_breaker(self) -> None:
        """Call the model again at once, after a fatal failure opened the breaker (e.g. once the key is fixed)."""
        if self.model:
            self._circuit().reset()

    def _llm_config(self) -> LLMConfig:
        from .llm import LLMConfig

        return LLMConfig.resolve(self.model, api_base=self.api_base, api_key=self._api_key, **self._model_settings)

    def _report_before_writing(self, extract: ExtractMode) -> ExtractionReport | None:
        """The ``skipped`` report when no extraction will run (stored with the receipt), else None."""
        if extract not in (None, True, False, "inline", "background"):
            raise ConfigError(f"extract={extract!r}: use None, 'inline', 'background' or False", field="extract")
        if extract is False:
            return ExtractionReport(status="skipped", reason="extraction disabled for this capture (extract=False)")
        return None if self.model else ExtractionReport(status="skipped", reason=NO_MODEL_REASON)

    def _after_capture(self, receipt: CaptureReceipt, extract: ExtractMode, request: Any = None) -> CaptureReceipt:
        if extract is False or not self.model:
            return receipt
        if receipt.replayed:
            return self._after_replay(receipt, extract)
        if receipt.turns_stored == 0 and not self._turns_wait(receipt.session_id):
            return self._store_report(receipt, ExtractionReport(
                status="skipped", reason=NO_NEW_TURNS_REASON))
        if extract == "background":
            # One pending job per session: this capture folds into it, and it is due once enough
            # evidence waits or the session goes idle (a chat loop is extracted in batches).
            # A capture that adds nothing folds in the turns that already wait past the watermark.
            waiting = (_evidence_count(request, receipt.turns_stored) if receipt.turns_stored
                       else self._waiting_evidence(receipt.session_id))
            job = self.store.enqueue_job(self.namespace, receipt.session_id, receipt.receipt_id,
                                         waiting_turns=waiting, waiting_in_all=not receipt.turns_stored,
                                         due_after_turns=self.extract_every, idle_s=self.idle_s)
            return self._store_report(receipt, self._queued(job))
        report = self._extract(receipt.session_id, receipt)
        return receipt.model_copy(update={"extraction": report})

    def _queued(self, job: JobInfo) -> ExtractionReport:
        """The report of a capture whose extraction is the background ``job``."""
        due = "now" if job.due_at is None else f"at {job.due_at.isoformat(timespec='seconds')}"
        return ExtractionReport(
            status="queued", job_id=job.job_id,
            reason=f"due {due} ({job.waiting_turns} of {self.extract_every} evidence turns waiting, or "
                   f"{self.idle_s:g} s without a capture); run by `tortoise worker` or mem.process_pending(), "
                   "now by mem.flush() or `tortoise flush`")

    def _after_replay(self, receipt: CaptureReceipt, extract: ExtractMode) -> CaptureReceipt:
        """A retried background capture queues the job its first call may not have (the process died between
        the capture's commit and the queueing): when turns wait past the watermark and no job of the session is
        open. A retried inline one extracts nothing again: its first call may still be extracting (a client
        that timed out), so the waiting turns are left to the session's next capture or ``extract``."""
        sid = receipt.session_id
        if extract != "background" or not self._turns_wait(sid):
            return receipt
        if any(j.session_id == sid for status in ("pending", "running")
               for j in self.store.jobs(self.namespace, status=status)):
            return receipt
        job = self.store.enqueue_job(self.namespace, sid, receipt.receipt_id,
                                     waiting_turns=self._waiting_evidence(sid), waiting_in_all=True,
                                     due_after_turns=self.extract_every, idle_s=self.idle_s)
        return self._store_report(receipt, self._queued(job))

    def _turns_wait(self, session_id: str) -> bool:
        """Whether stored turns of the session wait for extraction (past its watermark: an earlier run failed, or
        the turns were captured with no model): a capture that adds nothing then extracts them."""
        return bool(self._waiting_turns(session_id, limit=1)[1])

    def _waiting_turns(self, session_id: str, limit: int | None = None) -> tuple[int, list[SearchHit]]:
        """Where the session's watermark ends, and its stored turns past it (at most ``limit``)."""
        state = self.store.extraction_state(self.namespace, session_id)
        start = 0 if state is None else state.watermark + 1
        return start, self.store.turns(self.namespace, session_id, start=start,
                                       stop=None if limit is None else start + limit)

    def _waiting_evidence(self, session_id: str) -> int:
        """How many of the turns past the session's watermark are evidence (what a batch counts)."""
        from .pipeline.grounding import evidence_turns

        start, turns = self._waiting_turns(session_id)
        return len(evidence_turns(turns, self.store.turn_metadata(self.namespace, session_id, start=start)))

    def _extract(self, session_id: str, receipt: CaptureReceipt | None, fence: Any = None,
                 full: bool = False) -> ExtractionReport:
        from .pipeline.runner import PipelineOptions, extract_session

        try:
            from .llm import FATAL_CLASSES

            config = self._llm_config()
            trip = self._circuit().check(config)
            if trip is not None:
                # A job is failed rather than skipped, so its lease ends and it is retried later.
                report = ExtractionReport(
                    status="failed" if fence is not None else "skipped", reason=trip.reason(),
                    job_id=getattr(fence, "job_id", None),
                    errors=[Diagnostic(stage="pipeline", code=trip.error_class, message=trip.reason(),
                                       detail={"breaker": "open", "closes_at": trip.closes_at.isoformat()})])
                if receipt is not None:
                    self._store_report(receipt, report)
                return report
            options = PipelineOptions(chunk_turns=self.chunk_turns, concurrency=self.concurrency, vet=self.vet,
                                      prompts_dir=self.prompts_dir, full=full, vocabulary=self.vocabulary)
            report = extract_session(self.store, self.namespace, session_id, llm_config=config, options=options,
                                     receipt=receipt, fence=fence)
            fatal = next((d for d in report.errors if d.code in FATAL_CLASSES), None)
            if fatal is not None:
                self._circuit().trip(config, fatal.code, fatal.message)
            return report
        except Exception as exc:
            from .errors import LeaseLost

            if isinstance(exc, LeaseLost):
                raise
            # The turns are committed; an extraction crash is reported, never raised.
            report = ExtractionReport(status="failed", reason=f"extraction crashed: {type(exc).__name__}: {exc}",
                                      errors=[Diagnostic(stage="pipeline", code=type(exc).__name__,
                                                         message=str(exc))])
            if receipt is not None:
                self._store_report(receipt, report)
            return report

    def _store_report(self, receipt: CaptureReceipt, report: ExtractionReport) -> CaptureReceipt:
        updated = receipt.model_copy(update={"extraction": report})
        try:
            self.store.save_receipt(self.namespace, updated)
        except Exception as exc:  # noqa: BLE001 - the capture itself is committed; the report is still returned
            _log.warning("could not store the extraction report on receipt %s: %s", receipt.receipt_id, exc)
            report.warnings.append(Diagnostic(stage="capture", code="report_not_stored",
                                              message=f"the extraction report was not stored: {exc}"))
        return updated

    def context(
        self,
        window: Sequence[Any] | None,
        prior_context: Any = None,
        budget: int = 3,
        max_tokens: int = 400,
        session_id: str | None = None,
        *,
        token_counter: Callable[[str], int] | None = None,
        time_budget_ms: float | None = 50.0,
        held_from: int | None = None,
        specific_only: bool = False,
        categories: Sequence[str] | None = None,
        held_sessions: Mapping[str, int] | None = None,
    ) -> MemoryBlock:
        """The memory block to show the model before its next turn; never raises.

        Deterministic and read-only (no model call). ``window`` is the recent conversation
        (``Turn``s, OpenAI-style dicts, LangChain messages, ``(role, text)`` pairs or strings; anything
        else gives an empty block whose ``degraded_reason`` names it; a window with no text, such as
        ``None``, ``[]`` or only a tool call's ``{"role": "assistant", "content": None}``, asks
        nothing: an empty block with no reason); ``prior_context`` is
        what the host already showed (earlier blocks or text), which is not repeated unless
        the user asks. At most ``budget`` pointers (cap 8) and ``max_tokens`` tokens, counted
        with ``token_counter`` (default ``reflex.approx_tokens``). A failure or a run past
        ``time_budget_ms`` gives an empty block with ``degraded_reason`` set. ``session_id`` is
        the conversation the window belongs to: a stored turn of it whose message id the window
        carries is not surfaced again (turns with the window's text never are, whatever the session).

        A host that holds the whole session (a coding agent) passes ``held_from``: the index of
        ``session_id``'s first turn still in its context (0, or its last compaction summary's);
        those turns are never shown; ``held_sessions`` names other sessions it holds, each with the index of its
        first turn held (a resumed Claude Code session holds the session it continues), never shown either.
        ``specific_only`` lets a pointer through only on evidence
        specific to the prompt in this namespace (``reflex.gate``): generic prompts stay silent.
        ``categories`` (some of ``Memory(categories=...)``, case ignored) shows only memories filed
        under them, no turns; an unknown one gives an empty block whose ``degraded_reason`` says so.

        Example::

            block = mem.context([{"role": "user", "content": "what was my dog called?"}])
            messages = [{"role": "system", "content": block.block}, *messages] if block.block else messages
        """
        chosen = None
        if categories is not None and not isinstance(categories, str):
            chosen = [self.vocabulary.category(x) if self.vocabulary and isinstance(x, str) else None
                      for x in categories]
            unknown = [x for x, c in zip(categories, chosen) if c is None]
            if unknown:
                listed = ", ".join(self.vocabulary.categories) if self.vocabulary else ""
                reason = (f"invalid_input: categories: {unknown[0]!r} is not one of this memory's categories "
                          f"({listed or 'none: give Memory(categories=[...])'})")
                logging.getLogger("tortoise_sdk.reflex").warning("reflex: %s, returning an empty block", reason)
                return MemoryBlock(degraded_reason=reason)
        return reflex.context(self.store, self.namespace, window, prior_context, budget=budget,
                              max_tokens=max_tokens, session_id=session_id, token_counter=token_counter,
                              time_budget_ms=time_budget_ms, held_from=held_from, specific_only=specific_only,
                              semantic=self._semantic_search(), held_sessions=held_sessions,
                              categories=categories if chosen is None else chosen)  # type: ignore[arg-type]

    def expand(self, pointer_id: str) -> ExpandResult:
        """The full turn or memory behind a pointer: content, status, supersession chain, sources, surrounding turns.

        Raises:
            InvalidInput: ``pointer_id`` is blank.
            NotFoundError: no such turn or memory in this namespace.
        """
        return reflex.expand(self.store, self.namespace, check_id(pointer_id, "pointer_id"))

    def graph(self) -> networkx.MultiDiGraph:
        """This namespace as a networkx MultiDiGraph: sessions, turns and (once extracted) memories."""
        from .graph import build_graph

        return build_graph(self.store, self.namespace)

    # -- appending, namespaces, memories a host adds and corrects ---------------------------------
    # (issue 26) A contiguous block: the loop pattern's write, and mem0-style add/update/history.

    def append(
        self,
        session_id: str,
        turns: TurnLike | Iterable[TurnLike],
        *,
        idempotency_key: str | None = None,
        session_date: str | datetime | None = None,
        extract: ExtractMode = None,
    ) -> CaptureReceipt:
        """Store new turns after the session's last stored turn (the chat-loop write); no turn ids needed.

        ``turns`` is one turn or a list of them, e.g. the last exchange. Extraction runs as in
        ``capture``. A new session is dated ``session_date``, else its turns' first ``timestamp``,
        else now (these turns were just said); a session dated already keeps its date. A retried append with the same ``idempotency_key`` stores nothing and
        returns the first call's receipt (``replayed``); the same key with other turns raises
        ``IdempotencyConflict``. Without a key every call appends: the store cannot tell a
        retry from a user saying the same thing again, and a dropped turn would be lost for good,
        so a repeat of the session's last turns is stored and its receipt carries a
        ``repeated_tail`` warning. Pass a key when calls can be retried: one made once per exchange
        (``uuid.uuid4().hex``) and reused only by that exchange's retries. Keys are unique in the
        namespace; one derived from a counter that restarts (``len(history)`` after a restart or a
        trimmed history) names another exchange the second time: it replays and stores nothing, or raises
        ``IdempotencyConflict``.
        A turn with an ``id`` already stored is skipped as in ``capture``.

        Example::

            exchange_key = uuid.uuid4().hex  # once per exchange, before the first try
            history += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
            mem.append("chat-1", history[-2:], idempotency_key=exchange_key)

        Raises:
            InvalidInput, CaptureConflict, IdempotencyConflict: as in ``capture``.
        """
        if isinstance(turns, (Mapping, Turn)):
            turns = [turns]
        request = prepare_capture(session_id, turns, session_date=session_date,  # type: ignore[arg-type]
                                  idempotency_key=idempotency_key, max_turns=self.max_turns_per_capture)
        request.append = True
        if request.session_date is None:  # the chat-loop write: its turns were said now (a dated session keeps its date)
            from .models import utc_now

            request.session_date = utc_now().isoformat()
        request.extraction = self._report_before_writing(extract)
        receipt = self.store.capture(self.namespace, request)
        return self._after_capture(receipt, extract, request)

    def namespaces(self) -> list[NamespaceInfo]:
        """Every namespace of the store that holds data, with its session, turn and live memory counts.

        The one read that crosses namespaces: it names them and counts, never shows content.
        """
        return self.store.namespaces()

    def search_memories(self, query: str, k: int = 10, *, include_superseded: bool = False) -> list[MemoryRecord]:
        """Memories (extracted or added by ``remember``) matching ``query``, best first (BM25 over content,
        search keys and entity names); live only unless ``include_superseded``.

        Raises:
            InvalidInput: as for ``search``.
        """
        from .search import fts5_query

        self.explain_search(query, 0)  # the same argument checks as search
        check_count(k, "k", low=0, high=MAX_SEARCH_K)
        terms, _ = content_terms(query)
        match = fts5_query("", terms=terms) if terms else None
        if match is None or k < 1:
            return []
        return [rec for rec, _ in self.store.search_memories(self.namespace, match, k=k,
                                                             include_superseded=include_superseded)]

    def remember(self, text: str, *, kind: Literal["event", "point"] = "point",
                 about: Sequence[str] | Mapping[str, str] = (), when: str | None = None,
                 category: str | None = None) -> MemoryRecord:
        """Add a memory by hand (what the host knows, not what a model extracted); returns it as stored.

        No turn is invented for it: its ``sources`` is empty and its ``session_id`` is
        ``HOST_SESSION``; the write is recorded as an extraction run of that session whose report
        says the host added it. ``about`` names the entities it is about: a list of names, or a
        mapping of name to kind (``{"Maya": "person", "Helix Health": "organization"}``); a name
        given without a kind is a person when it is capitalised and starts with a given name the
        ``nicknames`` table knows ("Melanie Hart"), so "Mel" or "my wife" can later resolve to it,
        and ``other`` otherwise. ``category`` files it under
        one of ``Memory(categories=...)`` (case ignored), as extraction does. Remembering the same text
        again (same normalised content as a live memory) returns that memory (NOOP).

        Raises:
            InvalidInput: ``text`` is blank or not storable, ``kind`` unknown, ``about`` not a list of names
                (or a mapping to a known entity kind), ``category`` not one of this memory's categories.
        """
        chosen = None if category is None else self._host_category(category)
        item = _host_item(text, kind, about, when, category=chosen)
        return self._host_write(item, "added by the host (Memory.remember)")

    def correct_memory(self, memory_id: str, text: str, *,
                       about: Sequence[str] | Mapping[str, str] | None = None) -> MemoryRecord:
        """Replace a memory's content, keeping the old version in its history; returns the new version.

        The current version of the fact ``memory_id`` belongs to is marked superseded (kept, with
        ``superseded_by``) and the new one, added by the host like ``remember``, ``supersedes`` it,
        with the same kind and ``when``. Its entities are those of the new text: the known entities
        it names (by name, alias, first name or role; the old version's entities it no longer names
        are dropped), or ``about`` when given (a name not known yet becomes an entity). The old
        version keeps its own. ``memory_history`` lists the versions. A correction whose text is
        already a live memory is that memory: nothing is superseded (a change of case or punctuation
        to this memory's own text is a correction).

        Raises:
            NotFoundError: no such memory in this namespace.
            InvalidInput: the memory was retracted (nothing live to correct: ``remember`` adds it
                anew), or ``text`` is blank or not storable.
        """
        old = self.store.get_memory(self.namespace, check_id(memory_id, "memory_id"))
        if old.status == "deleted":
            raise InvalidInput(f"memory {memory_id!r} was retracted, so no version of it is live to correct; "
                               "add the fact anew with mem.remember(text)", field="memory_id")
        if about is None and isinstance(text, str):
            from .names import entities_named

            about = entities_named(text, self.store.entities(self.namespace))
        item = replace(_host_item(text, old.kind, () if about is None else about, old.when, supersedes=old.id,
                                  category=old.category), exact=True)
        return self._host_write(item, f"corrected by the host (Memory.correct_memory of {old.id})")

    def memory_history(self, memory_id: str) -> list[MemoryRecord]:
        """Every version of the fact ``memory_id`` belongs to, oldest first (each ``supersedes`` the one before).

        Raises:
            NotFoundError: no such memory in this namespace.
        """
        return self.store.supersession_chain(self.namespace, check_id(memory_id, "memory_id"))

    def _host_write(self, item: Any, reason: str) -> MemoryRecord:
        """Write one host item through the S5 write (consolidation, supersession, index) in one transaction."""
        import uuid

        from .store.plan import ExtractionPlan

        plan = ExtractionPlan(session_id=HOST_SESSION, extraction_id=f"x_host_{uuid.uuid4().hex}", valid_at=None,
                              items=[item])

        def finalize(result: Any) -> ExtractionReport:
            return ExtractionReport(status="ok", reason=reason, counts=dict(result.counts),
                                    outcomes=dict(result.outcomes), warnings=list(result.warnings))

        result = self.store.write_extraction(self.namespace, plan, finalize=finalize)
        return self.store.get_memory(self.namespace, result.memory_ids[0])


def _pieces(requests: list[CaptureRequest], chunk_size: int | None) -> list[list[CaptureRequest]]:
    """The transactions of an import: ``chunk_size`` sessions each, else whole sessions up to
    ``DEFAULT_IMPORT_PIECE_TURNS`` turns each (a larger session alone)."""
    if chunk_size:
        return [requests[i:i + chunk_size] for i in range(0, len(requests), chunk_size)]
    pieces: list[list[CaptureRequest]] = []
    turns = 0
    for request in requests:
        if not pieces or (pieces[-1] and turns + len(request.turns) > DEFAULT_IMPORT_PIECE_TURNS):
            pieces.append([])
            turns = 0
        pieces[-1].append(request)
        turns += len(request.turns)
    return pieces


def _prepare_sessions(sessions: Sequence[Mapping[str, Any]], max_turns: int) -> list[CaptureRequest]:
    """Each session of a ``capture_many``, validated; the first bad one raises, named ``sessions[i]``."""
    if sessions is None or isinstance(sessions, (str, bytes, Mapping)) or not isinstance(sessions, Iterable):
        raise InvalidType(f"must be a list of session objects, got {type(sessions).__name__}", field="sessions")
    requests = []
    for i, s in enumerate(sessions):
        if not isinstance(s, Mapping):
            raise InvalidType(f"expected a session object, got {type(s).__name__}", field=f"sessions[{i}]")
        try:
            requests.append(prepare_capture(
                s.get("session_id"), s.get("turns"), session_date=s.get("date", s.get("session_date")),
                idempotency_key=s.get("idempotency_key"), max_turns=max_turns,
            ))
        except InvalidInput as exc:
            raise type(exc)(str(exc), field=f"sessions[{i}]") from None
    return requests


def _request_timeout(value: object, settings: Mapping[str, Any]) -> float:
    """``request_timeout_s``, or ``model_settings["timeout_s"]`` when only that is given: seconds above 0."""
    given = settings.get("timeout_s", value)
    if "timeout_s" in settings and value != DEFAULT_REQUEST_TIMEOUT_S and given != value:
        raise ConfigError(f"request_timeout_s={value!r} and model_settings['timeout_s']={given!r} disagree: "
                          "pass request_timeout_s only", field="request_timeout_s")
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not 0 < given < float("inf"):
        raise ConfigError(f"request_timeout_s must be a number of seconds above 0, got {given!r}, "
                          "e.g. Memory(request_timeout_s=20)", field="request_timeout_s")
    return float(given)


def _evidence_count(request: Any, stored: int) -> int:
    """How many of a capture's new turns are evidence (what a batch counts); at most ``stored``."""
    if request is None:
        return stored
    from .pipeline.grounding import is_evidence

    return min(stored, sum(1 for t in request.turns if is_evidence(t, t.metadata)))


#: The ids of a sub-agent frame, each kept and looked up like any id (``validate.MAX_ID_BYTES``).
_FRAME_IDS = ("session_id", "tool_call_id", "agent_execution_id", "parent_tool_call_id", "turn_external_id",
              "agent_id", "child_session_id")


def _other_sessions(parsed: ParsedStream, only: str | None) -> list[Diagnostic]:
    """Take out of ``parsed`` every session but ``only`` and its sub-agents' (``only:…``); one diagnostic each."""
    if only is None:
        return []
    ours = lambda sid: sid == only or (sid or "").startswith(f"{only}:")  # noqa: E731
    others = sorted({sid for sid in parsed.sessions if not ours(sid)}
                    | {f.session_id for f in parsed.frames if f.session_id and not ours(f.session_id)})
    for sid in others:
        parsed.sessions.pop(sid, None)
    parsed.frames = [f for f in parsed.frames if not f.session_id or ours(f.session_id)]
    parsed.events = [e for e in parsed.events if ours(e.session_id)]
    return [Diagnostic(stage="capture", code="other_session", detail={"session_id": sid},
                       message=f"lines of session {sid!r} not captured: this transcript was followed for {only!r}")
            for sid in others]


def _require_id(value: Any, field: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("must be a non-empty string", field=field)
    check_id(value, field)  # no stored id is longer: a 10 MB one is refused before the database reads it


def _host_item(text: Any, kind: Any, about: Any, when: Any, supersedes: str | None = None,
               category: str | None = None) -> Any:
    """A ``remember``/``correct_memory`` argument set as the S5 item it writes, checked first."""
    from .store.plan import ENTITY_KINDS, ItemPlan
    from .validate import check_text

    if not isinstance(text, str):
        raise InvalidType(f"must be a string, got {type(text).__name__}", field="text")
    if not text.strip():
        raise InvalidInput("is blank; say what to remember", field="text")
    check_text(text, "text")
    if kind not in ("event", "point"):
        raise InvalidInput(f"unknown kind {kind!r}; use 'point' (a fact) or 'event' (something that happened)",
                           field="kind")
    kinds: dict[str, str] = {}
    if isinstance(about, Mapping):
        for name, entity_kind in about.items():
            if not isinstance(entity_kind, str) or entity_kind.strip().lower() not in ENTITY_KINDS:
                raise InvalidInput(f"unknown entity kind {entity_kind!r} for {name!r}; use one of "
                                   f"{', '.join(ENTITY_KINDS)}", field="about")
            kinds[name] = entity_kind.strip().lower()
        about = list(about)
    if isinstance(about, str) or not all(isinstance(a, str) for a in about):
        raise InvalidType("must be a list of entity names, e.g. about=['Maya'], or a mapping of name to kind, "
                          "e.g. about={'Maya': 'person'}", field="about")
    for i, name in enumerate(about):
        check_text(name, f"about[{i}]")
    if when is not None:
        check_text(when, "when")
    return ItemPlan(kind=kind, content=text.strip(), about=tuple(about), when=when, supersedes=supersedes,
                    category=category, about_kinds=tuple(kinds.items()))


def migrate_store(src: str, dst: str, *, progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy the SQLite memory at ``src`` (every namespace, ids kept) into the empty PostgreSQL database at ``dst``.

    A function beside ``Memory`` rather than a method: it works below namespaces, on
    two stores at once. See :func:`tortoise_sdk.store.copy.copy_store` for the arguments.
    """
    from .store.copy import copy_store

    return copy_store(src, dst, progress=progress)


#: The file of warnings ``tortoise hook`` keeps in ``state_dir`` (with its one rotated copy, ``.1``).
HOOK_LOG = "hooks.log"


def _storable(turn: Turn, session_id: str, report: Any) -> Turn:
    """A transcript's turn as a store can hold it: a NUL or a lone surrogate in its text (a pasted binary) becomes
    U+FFFD, said on the report, so the turn and those around it are kept (capture refuses such text outright)."""
    fixed = {k: storable(v) for k in ("content", "name", "metadata") if (v := getattr(turn, k)) is not None}
    changed = {k: v for k, v in fixed.items() if v != getattr(turn, k)}
    if not changed:
        return turn
    report.warnings.append(Diagnostic(stage="capture", code="replaced_characters", message=(
        f"{session_id}: turn {turn.id or '(no id)'} held a NUL or an unpaired surrogate (in its "
        f"{' and '.join(changed)}), stored as U+FFFD"), detail={"session_id": session_id}))
    return turn.model_copy(update=changed)


class _StoredPause:
    """``llm.breaker.Shared`` over a cursor of a memory's namespace: the model pause other processes honour."""

    NAME = MODEL_PAUSE_CURSOR

    def __init__(self, mem: Memory) -> None:
        self._mem = mem

    def load(self) -> dict[str, Any]:
        return self._mem.cursor(self.NAME).value

    def save(self, value: dict[str, Any]) -> None:
        value = storable(value)  # a provider's message may hold what no store keeps
        cursor = self._mem.cursor(self.NAME)
        if cursor.value != value:
            self._mem.save_cursor(self.NAME, value, revision=cursor.revision)


def _forget_in_hook_log(url: str, sessions: list[str]) -> None:
    """Drop from the hook log beside the database every line of a forgotten session (``session=<id>`` or
    naming it quoted), so forgetting leaves no trace of its ids there; a log that cannot be rewritten is
    left as it is (forgetting in the database has happened)."""
    import re

    if url in ("", ":memory:") or url.startswith("file:"):
        return
    ids = "|".join(re.escape(s) for s in sorted(sessions, key=len, reverse=True))
    mentions = re.compile(rf"session=(?:{ids}) |'(?:{ids})'")
    # A record starts with its time (logging's asctime); the lines after it until the next one (a traceback,
    # a message's own line breaks) are its own and go with it.
    starts = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
    for path in (state_dir(url) / HOOK_LOG, state_dir(url) / f"{HOOK_LOG}.1"):
        try:
            lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
            records: list[list[str]] = []
            for line in lines:
                if starts.match(line) or not records:
                    records.append([])
                records[-1].append(line)
            kept = [line for record in records if not mentions.search("".join(record)) for line in record]
            if len(kept) < len(lines):
                part = path.with_name(path.name + ".forget")
                part.write_text("".join(kept), encoding="utf-8", errors="surrogateescape")
                os.replace(part, path)
        except OSError:
            continue


def state_dir(db: str | None = None) -> Path:
    """Where files kept beside a memory go (the hook log).

    A SQLite database's own directory; ``~/.tortoise`` for PostgreSQL. ``db`` as for
    ``Memory`` (default ``$TORTOISE_DB``, else ``~/.tortoise/memory.db``).
    """
    from pathlib import Path

    url = db or default_db_path()
    if url.startswith(("postgresql://", "postgres://")):
        return Path.home() / ".tortoise"
    return Path(sqlite_path(url)).expanduser().absolute().parent


def _refuse_open_database(path: str | os.PathLike[str]) -> None:
    """Refuse to read, as a transcript, a database file this process has open: closing the read would drop
    the process's SQLite locks on it, and another process could then delete its WAL under live writers."""
    from .errors import StreamParseError
    from .store.sqlite.opening import held_database

    db = held_database(path)
    if db is not None:
        raise StreamParseError(f"{path} is the SQLite database {db} (or a file beside it) that this process has "
                               "open, not a transcript; nothing was read: pass the transcript's path",
                               source=os.fspath(path))
