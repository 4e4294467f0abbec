"""``AsyncMemory``: ``Memory`` for asyncio code, with the same semantics.

Each method runs the ``Memory`` method of the same name in a worker thread
(``asyncio.to_thread``), so the event loop is never blocked by the database or a model call, and
there is one implementation of every rule: a receipt, a conflict or a block is exactly what the
synchronous call gives. The stores are thread-safe (SQLite serialises its writers; PostgreSQL uses
a connection pool), so calls may run concurrently. The database drivers are synchronous; an
engine with a native async driver would replace the threads, not the semantics.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .config import DEFAULT_MAX_TURNS_PER_CAPTURE
from .errors import InvalidType
from .memory import ExtractMode, Memory, TurnLike
from .models import (
    CaptureReceipt,
    Cursor,
    EmbedReport,
    ExpandResult,
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
)

if TYPE_CHECKING:
    import networkx

    from .ingest import IngestReport
    from .streams.base import SubagentFrame

__all__ = ("AsyncMemory",)

T = TypeVar("T")


class AsyncMemory:
    """Long-term memory for one namespace, for asyncio code: every ``Memory`` verb, awaited.

    Usage::

        async with AsyncMemory("memory.db", namespace="alice") as mem:
            block = await mem.context(history[-6:], session_id="chat-1")
            exchange_key = uuid.uuid4().hex  # once per exchange; a retry of this append reuses it
            await mem.append("chat-1", history[-2:], idempotency_key=exchange_key)

    Args:
        db: as for ``Memory``; or a ``Memory`` to wrap (it is closed with this object).
        **options: ``Memory``'s keyword arguments (``namespace``, ``model`` ...).

    ``sync`` is the wrapped ``Memory``. ``check_capture``, ``check_sessions``, ``subagent_handler``,
    ``extraction_paused`` and ``within`` stay synchronous (no I/O of their own, or a synchronous object back;
    ``with amem.within(2.0): await amem.capture(...)`` bounds the awaited call, whose thread inherits the task's
    context).
    """

    def __init__(self, db: str | Memory | None = None, **options: Any) -> None:
        if isinstance(db, Memory):
            if options:
                raise InvalidType(f"AsyncMemory(mem, {', '.join(sorted(options))}=...): a Memory comes with its "
                                  "options; pass either a Memory or Memory's arguments, not both",
                                  field=sorted(options)[0])
            self.sync = db
        else:
            self.sync = Memory(db, **options)

    @property
    def namespace(self) -> str:
        return self.sync.namespace

    @property
    def model(self) -> str | None:
        """The extraction model (``Memory.model``), None without one."""
        return self.sync.model

    @property
    def embedder_model(self) -> str | None:
        """``Memory.embedder_model``."""
        return self.sync.embedder_model

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the store's connections."""
        await self._run(self.sync.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- writes ------------------------------------------------------------------------------

    async def capture(self, session_id: str, turns: Iterable[TurnLike], *, session_date: str | datetime | None = None,
                      idempotency_key: str | None = None, extract: ExtractMode = None,
                      live: bool = False) -> CaptureReceipt:
        """``Memory.capture``."""
        return await self._run(self.sync.capture, session_id, turns, session_date=session_date,
                               idempotency_key=idempotency_key, extract=extract, live=live)

    async def append(self, session_id: str, turns: TurnLike | Iterable[TurnLike], *,
                     idempotency_key: str | None = None, session_date: str | datetime | None = None,
                     extract: ExtractMode = None) -> CaptureReceipt:
        """``Memory.append``: the new turns after the session's last stored one."""
        return await self._run(self.sync.append, session_id, turns, idempotency_key=idempotency_key,
                               session_date=session_date, extract=extract)

    async def capture_many(self, sessions: Sequence[Mapping[str, Any]], *, extract: ExtractMode = None,
                           chunk_size: int | None = None,
                           progress: Callable[[int, int], None] | None = None) -> list[CaptureReceipt]:
        """``Memory.capture_many``; ``progress`` is called from the thread the batch runs in."""
        return await self._run(self.sync.capture_many, sessions, extract=extract, chunk_size=chunk_size,
                               progress=progress)

    async def remember(self, text: str, *, kind: Literal["event", "point"] = "point",
                       about: Sequence[str] | Mapping[str, str] = (),
                       when: str | None = None, category: str | None = None) -> MemoryRecord:
        """``Memory.remember``: add a memory by hand."""
        return await self._run(self.sync.remember, text, kind=kind, about=about, when=when, category=category)

    async def correct_memory(self, memory_id: str, text: str, *,
                             about: Sequence[str] | Mapping[str, str] | None = None) -> MemoryRecord:
        """``Memory.correct_memory``: supersede a memory, keeping its history."""
        return await self._run(self.sync.correct_memory, memory_id, text, about=about)

    async def forget_session(self, session_id: str) -> ForgetReport:
        """``Memory.forget_session``."""
        return await self._run(self.sync.forget_session, session_id)

    async def forget_memory(self, memory_id: str) -> ForgetReport:
        """``Memory.forget_memory``."""
        return await self._run(self.sync.forget_memory, memory_id)

    # -- extraction --------------------------------------------------------------------------

    async def extract(self, session_id: str, *, full: bool = False) -> ExtractionReport:
        """``Memory.extract``."""
        return await self._run(self.sync.extract, session_id, full=full)

    async def flush(self, session_id: str | None = None, *, retry_failed: bool = False) -> list[JobInfo]:
        """``Memory.flush``."""
        return await self._run(self.sync.flush, session_id, retry_failed=retry_failed)

    async def retry_failed_jobs(self, session_id: str | None = None) -> list[JobInfo]:
        """``Memory.retry_failed_jobs``: failed jobs queued again (not run)."""
        return await self._run(self.sync.retry_failed_jobs, session_id)

    async def jobs(self, status: JobStatus | None = None, session_id: str | None = None) -> list[JobInfo]:
        """``Memory.jobs``: background extraction jobs, with their attempts and errors."""
        return await self._run(self.sync.jobs, status, session_id)

    async def process_pending(self, max_jobs: int | None = None, *, session_id: str | None = None,
                              due_only: bool = True) -> list[JobInfo]:
        """``Memory.process_pending``."""
        return await self._run(self.sync.process_pending, max_jobs, session_id=session_id, due_only=due_only)

    # -- reads -------------------------------------------------------------------------------

    async def context(self, window: Sequence[Any] | None, prior_context: Any = None, budget: int = 3,
                      max_tokens: int = 400, session_id: str | None = None, *,
                      token_counter: Callable[[str], int] | None = None, time_budget_ms: float | None = 50.0,
                      held_from: int | None = None, specific_only: bool = False,
                      categories: Sequence[str] | None = None,
                      held_sessions: Mapping[str, int] | None = None) -> MemoryBlock:
        """``Memory.context``: the memory block for the next model call; never raises."""
        return await self._run(self.sync.context, window, prior_context, budget, max_tokens, session_id,
                               token_counter=token_counter, time_budget_ms=time_budget_ms, held_from=held_from,
                               specific_only=specific_only, categories=categories, held_sessions=held_sessions)

    async def search(self, query: str, k: int = 10, session_id: str | None = None) -> list[SearchHit]:
        """``Memory.search``."""
        return await self._run(self.sync.search, query, k, session_id)

    async def explain_search(self, query: str, k: int = 10, session_id: str | None = None) -> SearchResult:
        """``Memory.explain_search``."""
        return await self._run(self.sync.explain_search, query, k, session_id)

    async def search_memories(self, query: str, k: int = 10, *, include_superseded: bool = False) -> list[MemoryRecord]:
        """``Memory.search_memories``."""
        return await self._run(self.sync.search_memories, query, k, include_superseded=include_superseded)

    async def entities(self) -> list[dict[str, Any]]:
        """``Memory.entities``."""
        return await self._run(self.sync.entities)

    async def merge_entities(self, keep: str, other: str) -> dict[str, Any]:
        """``Memory.merge_entities``."""
        return await self._run(self.sync.merge_entities, keep, other)

    async def split_entity(self, entity: str, name: str) -> dict[str, Any]:
        """``Memory.split_entity``."""
        return await self._run(self.sync.split_entity, entity, name)

    async def entity_events(self, entity_id: str | None = None) -> list[dict[str, Any]]:
        """``Memory.entity_events``."""
        return await self._run(self.sync.entity_events, entity_id)

    async def memories(self, session_id: str | None = None, include_superseded: bool = False, *,
                       category: str | None = None) -> list[MemoryRecord]:
        """``Memory.memories``."""
        return await self._run(self.sync.memories, session_id, include_superseded, category=category)

    async def memory_history(self, memory_id: str) -> list[MemoryRecord]:
        """``Memory.memory_history``."""
        return await self._run(self.sync.memory_history, memory_id)

    async def expand(self, pointer_id: str) -> ExpandResult:
        """``Memory.expand``."""
        return await self._run(self.sync.expand, pointer_id)

    async def sessions(self) -> list[SessionInfo]:
        """``Memory.sessions``."""
        return await self._run(self.sync.sessions)

    async def turns(self, session_id: str, *, last: int | None = None,
                    external_ids: Sequence[str] | None = None, role: str | None = None) -> list[SearchHit]:
        """``Memory.turns``."""
        return await self._run(self.sync.turns, session_id, last=last, external_ids=external_ids, role=role)

    async def receipts(self, session_id: str | None = None) -> list[CaptureReceipt]:
        """``Memory.receipts``."""
        return await self._run(self.sync.receipts, session_id)

    async def run_worker(self, *, poll_s: float = 2.0, once: bool = False, max_jobs: int | None = None,
                         on_job: Callable[[JobInfo], None] | None = None, stop: Any = None) -> int:
        """``Memory.run_worker``, awaited. Cancelling the awaiting task stops the worker: the loop ends after
        the job it runs (its thread finishes in the background), and then the task is cancelled at once."""
        stop = stop if stop is not None else threading.Event()
        work = asyncio.ensure_future(self._run(self.sync.run_worker, poll_s=poll_s, once=once, max_jobs=max_jobs,
                                               on_job=on_job, stop=stop))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            stop.set()
            work.add_done_callback(_ignore_outcome)  # a store closed meanwhile ends it with StoreClosed
            raise

    async def namespaces(self) -> list[NamespaceInfo]:
        """``Memory.namespaces``."""
        return await self._run(self.sync.namespaces)

    async def stats(self) -> NamespaceStats:
        """``Memory.stats``."""
        return await self._run(self.sync.stats)

    async def turn_metadata(self, session_id: str, *, start: int = 0,
                            stop: int | None = None) -> dict[str, dict[str, Any] | None]:
        """``Memory.turn_metadata``."""
        return await self._run(self.sync.turn_metadata, session_id, start=start, stop=stop)

    async def graph(self) -> networkx.MultiDiGraph:
        """``Memory.graph``."""
        return await self._run(self.sync.graph)

    async def tombstones(self, *, session_id: str | None = None, memory_id: str | None = None) -> list[Tombstone]:
        """``Memory.tombstones``."""
        return await self._run(self.sync.tombstones, session_id=session_id, memory_id=memory_id)

    async def vacuum(self) -> None:
        """``Memory.vacuum``."""
        await self._run(self.sync.vacuum)

    async def cursor(self, name: str) -> Cursor:
        """``Memory.cursor``."""
        return await self._run(self.sync.cursor, name)

    async def save_cursor(self, name: str, value: Mapping[str, Any], *, revision: int) -> Cursor | None:
        """``Memory.save_cursor``."""
        return await self._run(self.sync.save_cursor, name, value, revision=revision)

    async def reset_breaker(self) -> None:
        """``Memory.reset_breaker``."""
        await self._run(self.sync.reset_breaker)

    # -- embeddings, transcripts, sub-agents --------------------------------------------------

    async def embed_pending(self, limit: int | None = None) -> EmbedReport:
        """``Memory.embed_pending``."""
        return await self._run(self.sync.embed_pending, limit)

    async def vector_stats(self) -> dict[str, Any]:
        """``Memory.vector_stats``."""
        return await self._run(self.sync.vector_stats)

    async def ingest(self, path_or_lines: str | os.PathLike[str] | Iterable[str | bytes], format: str = "auto",
                     source: Literal["live", "backfill"] = "backfill", *, session_id: str | None = None,
                     extract: ExtractMode = None) -> IngestReport:
        """``Memory.ingest``."""
        return await self._run(self.sync.ingest, path_or_lines, format, source, session_id=session_id,
                               extract=extract)

    async def follow(self, path: str | os.PathLike[str], format: str = "auto",
                     source: Literal["live", "backfill"] = "live", *, session_id: str | None = None,
                     extract: ExtractMode = None, max_bytes: int | None = None,
                     only_session: str | None = None) -> IngestReport:
        """``Memory.follow``."""
        return await self._run(self.sync.follow, path, format, source, session_id=session_id, extract=extract,
                               max_bytes=max_bytes, only_session=only_session)

    async def record_subagent(self, frame: SubagentFrame | Mapping[str, Any]) -> SubagentContext | None:
        """``Memory.record_subagent``."""
        return await self._run(self.sync.record_subagent, frame)

    async def subagents(self, session_id: str | None = None, turn_id: str | None = None) -> list[SubagentContext]:
        """``Memory.subagents``."""
        return await self._run(self.sync.subagents, session_id, turn_id)

    async def subagent_counters(self) -> SubagentCounters:
        """``Memory.subagent_counters``."""
        return await self._run(self.sync.subagent_counters)

    async def subagent_health(self, since: datetime | str | None = None,
                              session_id: str | None = None) -> SubagentHealth:
        """``Memory.subagent_health``."""
        return await self._run(self.sync.subagent_health, since, session_id)

    # -- synchronous: no I/O of their own, or a synchronous object back (SYNC_ONLY) ---------------

    @staticmethod
    def check_capture(session_id: str, turns: Iterable[TurnLike], *, session_date: str | datetime | None = None,
                      idempotency_key: str | None = None,
                      max_turns_per_capture: int = DEFAULT_MAX_TURNS_PER_CAPTURE) -> None:
        """``Memory.check_capture`` (synchronous)."""
        Memory.check_capture(session_id, turns, session_date=session_date, idempotency_key=idempotency_key,
                             max_turns_per_capture=max_turns_per_capture)

    @staticmethod
    def check_sessions(sessions: Sequence[Mapping[str, Any]], *,
                       max_turns_per_capture: int = DEFAULT_MAX_TURNS_PER_CAPTURE) -> None:
        """``Memory.check_sessions`` (synchronous)."""
        Memory.check_sessions(sessions, max_turns_per_capture=max_turns_per_capture)

    def subagent_handler(self, session_id: str | None = None, **options: Any) -> Any:
        """``Memory.subagent_handler`` (synchronous: a LangChain callback handler)."""
        return self.sync.subagent_handler(session_id, **options)

    def extraction_paused(self, *, cause: bool = True) -> str | None:
        """``Memory.extraction_paused`` (synchronous: one small cursor read)."""
        return self.sync.extraction_paused(cause=cause)

    def within(self, seconds: float | None) -> AbstractContextManager[None]:
        """``Memory.within`` (synchronous): ``with amem.within(2.0): await amem.capture(...)``."""
        return self.sync.within(seconds)


#: Verbs that take no I/O of their own (``extraction_paused`` reads one small cursor) or hand back a synchronous
#: object: use them as they are.
SYNC_ONLY = frozenset({"check_capture", "check_sessions", "subagent_handler", "extraction_paused", "within"})


def _ignore_outcome(done: asyncio.Future[Any]) -> None:
    """Read a stopped worker's outcome, so that asyncio does not report it as never retrieved."""
    if not done.cancelled():
        done.exception()
