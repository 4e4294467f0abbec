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
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from .errors import InvalidType
from .memory import ExtractMode, Memory, TurnLike
from .models import (
    CaptureReceipt,
    ExpandResult,
    ExtractionReport,
    ForgetReport,
    JobInfo,
    JobStatus,
    MemoryBlock,
    MemoryRecord,
    NamespaceInfo,
    SearchHit,
    SearchResult,
    SessionInfo,
)

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
                      idempotency_key: str | None = None, extract: ExtractMode = None) -> CaptureReceipt:
        """``Memory.capture``."""
        return await self._run(self.sync.capture, session_id, turns, session_date=session_date,
                               idempotency_key=idempotency_key, extract=extract)

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

    async def context(self, window: Sequence[Any], prior_context: Any = None, budget: int = 3, max_tokens: int = 400,
                      session_id: str | None = None, **options: Any) -> MemoryBlock:
        """``Memory.context``: the memory block for the next model call; never raises."""
        return await self._run(self.sync.context, window, prior_context, budget, max_tokens, session_id, **options)

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

    async def turns(self, session_id: str) -> list[SearchHit]:
        """``Memory.turns``."""
        return await self._run(self.sync.turns, session_id)

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


#: Verbs that take no I/O of their own (``extraction_paused`` reads one small cursor) or hand back a synchronous
#: object: use them as they are.
SYNC_ONLY = frozenset({"check_capture", "check_sessions", "subagent_handler", "extraction_paused", "within"})
#: The remaining ``Memory`` verbs, awaited through the same worker thread with ``Memory``'s signature.
_FORWARDED = ("cursor", "embed_pending", "follow", "graph", "ingest", "record_subagent", "reset_breaker", "save_cursor",
              "stats", "subagent_counters", "subagent_health", "subagents", "tombstones", "turn_metadata", "vacuum", "vector_stats")


def _forward(name: str) -> Callable[..., Any]:
    verb = getattr(Memory, name)

    async def call(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await self._run(getattr(self.sync, name), *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``Memory.{name}``, awaited." + (f"\n\n{verb.__doc__}" if verb.__doc__ else "")
    return call


for _name in _FORWARDED:
    setattr(AsyncMemory, _name, _forward(_name))
def _sync(name: str) -> Any:
    if isinstance(Memory.__dict__[name], staticmethod):
        return Memory.__dict__[name]

    def call(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.sync, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``Memory.{name}`` (synchronous)."
    return call


for _name in SYNC_ONLY:
    setattr(AsyncMemory, _name, _sync(_name))


def _ignore_outcome(done: asyncio.Future[Any]) -> None:
    """Read a stopped worker's outcome, so that asyncio does not report it as never retrieved."""
    if not done.cancelled():
        done.exception()
