"""The JSON routes of ``tortoise serve``: one per ``Memory`` method a host needs, under ``/v1/ns/{namespace}``.

Request bodies are pydantic models (the OpenAPI schema at ``/openapi.json`` is generated from
them and from the SDK's own models, which are the responses). Errors are one JSON object
``{"error": <class>, "message": <one line>, "field": <name or null>}``, never a traceback.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ...models import (
    CaptureReceipt,
    ExpandResult,
    ForgetReport,
    JobInfo,
    MemoryBlock,
    MemoryRecord,
    NamespaceStats,
    SearchHit,
    SearchResult,
    SessionInfo,
    SubagentContext,
    SubagentHealth,
    Tombstone,
    Turn,
)
from ...memory import NO_MODEL_REASON
from .auth import namespace_memory

__all__ = ("ERRORS", "MAX_BUDGET", "MAX_K", "MAX_MAX_TOKENS", "MAX_WINDOW", "NO_MODEL_ON_SERVER", "PREFIX", "READ_ONLY",
           "ErrorBody", "Health", "router")

#: The SDK's "no model" names ``Memory(model=...)``; a server's user sets it on the command line instead.
NO_MODEL_ON_SERVER = ("no model configured on this server: start it with `tortoise serve --model MODEL` "
                      "(e.g. --model openai/gpt-4o-mini) or set TORTOISE_MODEL")
#: The largest ``k`` a search takes over HTTP.
MAX_K = 100
#: The largest ``budget`` (pointers) and ``max_tokens`` of one ``context`` call (the reflex caps pointers at 8).
MAX_BUDGET = 8
MAX_MAX_TOKENS = 4000
#: Turns of the recent conversation ``context`` reads at most.
MAX_WINDOW = 200
#: Characters of a search query or a prompt.
MAX_QUERY_CHARS = 10_000

Mem = Annotated[Any, Depends(namespace_memory)]
Id = Annotated[str, Query(min_length=1, max_length=512)]
OptionalId = Annotated[str | None, Query(min_length=1, max_length=512)]


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer."""

    error: str = Field(description="The error's class, e.g. InvalidInput, NotFoundError, Unauthorized.")
    message: str = Field(description="One line saying what was wrong and what to do.")
    field: str | None = Field(default=None, description="The request field at fault, when one is.")


class Health(BaseModel):
    """The server is up (liveness only: each namespace's memory is opened on its first request, whose error says
    when the database does not answer)."""

    status: Literal["ok"] = "ok"
    version: str


class CaptureBody(BaseModel):
    """Turns of one conversation to store: send the conversation so far (turns already stored, by id or by place,
    are skipped and only the new ones stored); turns that differ from the stored ones are a 409 conflict."""

    model_config = ConfigDict(extra="forbid", strict=True)

    session_id: StrictStr = Field(description="The conversation these turns belong to.")
    turns: list[Turn] = Field(description="The turns, in order.")
    session_date: str | None = Field(default=None, description="When the conversation happened, ISO 8601.")
    idempotency_key: str | None = Field(default=None, description="Makes a retried request a replay.")
    extract: Literal["background"] | Literal[False] = Field(
        default="background", description="'background' queues extraction for `tortoise worker` (or POST "
                                          "/flush); false stores the turns only. A request never waits for a model.")


class SearchBody(BaseModel):
    """A full-text (BM25) search over the captured turns."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: StrictStr = Field(max_length=MAX_QUERY_CHARS, description="Words to look for.")
    k: int = Field(default=10, ge=1, le=MAX_K, description="At most this many turns.")
    session_id: str | None = Field(default=None, description="Only this session.")


class ContextBody(BaseModel):
    """What the reflex needs to choose the memory block before the model's next turn."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: StrictStr | None = Field(default=None, max_length=MAX_QUERY_CHARS,
                                    description="The user's latest message (appended to the window as a user turn).")
    window: list[Turn] = Field(default_factory=list, max_length=MAX_WINDOW,
                               description="The recent conversation, oldest first.")
    shown: list[str] = Field(default_factory=list, max_length=100,
                             description="Pointer ids already shown in this conversation: not repeated, unless the "
                                         "message asks for them (a question, 'remind me').")
    budget: int = Field(default=3, ge=1, le=MAX_BUDGET, description="At most this many pointers.")
    max_tokens: int = Field(default=400, ge=1, le=MAX_MAX_TOKENS, description="Token cap of the block.")
    session_id: str | None = Field(default=None,
                                   description="The current conversation: its turns the window holds are not "
                                               "surfaced again.")


class FlushBody(BaseModel):
    """Which session's jobs to run now (flush) or queue again (retry-failed)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    session_id: str | None = Field(default=None, description="Only this session's; all when absent.")


#: Where the namespace is in every route's path: it may hold '/' (sent as %2F, which arrives decoded), so it
#: takes the whole path up to the route's fixed suffix; no suffix ends another's, so none is ambiguous.
PREFIX = "/v1/ns/{namespace:path}"
#: The answers every route may give besides its own (bad input is 400, never FastAPI's 422).
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Bad input: a missing, malformed or out-of-range field or parameter"},
    401: {"model": ErrorBody, "description": "No or unknown token"},
    403: {"model": ErrorBody, "description": "The token is bound to another namespace"},
    404: {"model": ErrorBody, "description": "No such record"},
    413: {"model": ErrorBody, "description": "Body too large"},
    503: {"model": ErrorBody, "description": "The store did not answer (in time)"}}
#: A route that writes: the store may be open read-only.
READ_ONLY = {409: {"model": ErrorBody, "description": "The store is read-only"}}

router = APIRouter(prefix=PREFIX, responses=ERRORS)


@router.post("/capture", response_model=CaptureReceipt, summary="Store turns (and append to a session)",
             responses={409: {"model": ErrorBody, "description": "A turn differs from the stored turn of that id or "
                                                                 "place, the idempotency key was used for a different "
                                                                 "capture, or the store is read-only"}})
def capture(body: CaptureBody, mem: Mem) -> CaptureReceipt:
    """``Memory.capture``: the turns durably, verbatim, in one transaction; extraction is queued."""
    receipt = mem.capture(body.session_id, body.turns, session_date=body.session_date,
                          idempotency_key=body.idempotency_key, extract=body.extract)
    report = receipt.extraction
    if report is not None and report.reason == NO_MODEL_REASON:  # in the server's terms, not the library's
        receipt = receipt.model_copy(update={"extraction": report.model_copy(update={"reason": NO_MODEL_ON_SERVER})})
    return receipt


@router.post("/search", response_model=SearchResult, summary="Full-text search over turns")
def search(body: SearchBody, mem: Mem) -> SearchResult:
    """``Memory.explain_search``: the matching turns, best first, with the terms searched for."""
    return mem.explain_search(body.query, k=body.k, session_id=body.session_id)


@router.post("/context", response_model=MemoryBlock, summary="The memory block for the next turn")
def context(body: ContextBody, mem: Mem) -> MemoryBlock:
    """``Memory.context``: at most ``budget`` pointers within ``max_tokens``, each with its ``why``; never an error."""
    window = [*body.window, *([Turn(role="user", content=body.query)] if body.query is not None else [])]
    prior = " ".join(f"ref:{p}" for p in body.shown) or None
    return mem.context(window, prior, budget=body.budget, max_tokens=body.max_tokens, session_id=body.session_id)


@router.get("/expand", response_model=ExpandResult, summary="The turn or memory behind a pointer")
def expand(pointer_id: Id, mem: Mem) -> ExpandResult:
    """``Memory.expand``: content, sources, supersession chain and the surrounding turns."""
    return mem.expand(pointer_id)


@router.get("/memories", response_model=list[MemoryRecord], summary="Extracted memories")
def memories(mem: Mem, session_id: OptionalId = None, include_superseded: bool = False) -> list[MemoryRecord]:
    """``Memory.memories``: events and points with their entities and source quotes, oldest first."""
    return mem.memories(session_id, include_superseded)


@router.get("/sessions", response_model=list[SessionInfo], summary="Captured sessions")
def sessions(mem: Mem) -> list[SessionInfo]:
    """``Memory.sessions``."""
    return mem.sessions()


@router.get("/turns", response_model=list[SearchHit], summary="One session's turns, in order")
def turns(session_id: Id, mem: Mem) -> list[SearchHit]:
    """``Memory.turns``."""
    return mem.turns(session_id)


@router.delete("/sessions", response_model=ForgetReport, summary="Forget a session", responses=READ_ONLY)
def forget_session(session_id: Id, mem: Mem) -> ForgetReport:
    """``Memory.forget_session``: its turns and everything derived from them; leaves a tombstone."""
    return mem.forget_session(session_id)


@router.delete("/memories", response_model=ForgetReport, summary="Forget a memory", responses=READ_ONLY)
def forget_memory(memory_id: Id, mem: Mem) -> ForgetReport:
    """``Memory.forget_memory``: the memory, its sources and links; its supersession chain is re-linked."""
    return mem.forget_memory(memory_id)


@router.get("/tombstones", response_model=list[Tombstone], summary="What forgetting left")
def tombstones(mem: Mem, session_id: OptionalId = None, memory_id: OptionalId = None) -> list[Tombstone]:
    """``Memory.tombstones``: counts and times, no content and no ids."""
    return mem.tombstones(session_id=session_id, memory_id=memory_id)


@router.get("/subagents", response_model=list[SubagentContext], summary="Recorded sub-agent invocations")
def subagents(mem: Mem, session_id: OptionalId = None, turn_id: OptionalId = None) -> list[SubagentContext]:
    """``Memory.subagents``."""
    return mem.subagents(session_id, turn_id)


@router.get("/subagents/health", response_model=SubagentHealth, summary="Were all sub-agent launches recorded?")
def subagent_health(mem: Mem, since: datetime | None = None, session_id: OptionalId = None) -> SubagentHealth:
    """``Memory.subagent_health``: the shortfall fails the check; excess is reported."""
    return mem.subagent_health(since, session_id)


@router.get("/stats", response_model=NamespaceStats, summary="Counts of the namespace")
def stats(mem: Mem) -> NamespaceStats:
    """Sessions, turns, live memories, entities, sub-agent rows, the recorder's counters and jobs by status."""
    return mem.stats()


@router.get("/jobs", response_model=list[JobInfo], summary="Background extraction jobs")
def jobs(mem: Mem, status: Annotated[str | None, Query(max_length=16, description="pending, running, done or "
                                                       "failed")] = None,
         session_id: OptionalId = None) -> list[JobInfo]:
    """``Memory.jobs``: oldest first, each with its attempts, ``last_error`` and the ``turns`` that wait for it."""
    return mem.jobs(status=status, session_id=session_id)


@router.post("/jobs/retry-failed", response_model=list[JobInfo], summary="Queue the failed jobs again",
             responses=READ_ONLY)
def retry_failed(mem: Mem, body: FlushBody | None = None) -> list[JobInfo]:
    """``Memory.retry_failed_jobs``: attempts start over; ``tortoise worker`` (or POST /flush) runs them.

    Returns the jobs now pending for those sessions; the request never waits for a model.
    """
    return mem.retry_failed_jobs(body.session_id if body else None)


@router.post("/flush", response_model=list[JobInfo], summary="Run pending extractions now", responses={
    **READ_ONLY, 502: {"model": ErrorBody, "description": "The model failed or did not answer"}})
def flush(mem: Mem, body: FlushBody | None = None) -> list[JobInfo]:
    """``Memory.flush``: needs a model (``tortoise serve --model``); the request waits for the model calls."""
    return mem.flush(body.session_id if body else None)
