"""Typed data shapes shared by every layer: turns, receipts, hits, memories, blocks, subagent rows."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, computed_field, model_serializer, model_validator

__all__ = (
    "CLAUDE_CODE_SHOWN_CURSOR",
    "HOST_SESSION",
    "MODEL_PAUSE_CURSOR",
    "OPENAI_AGENTS_CURSOR",
    "SHOWN_CURSOR",
    "CaptureReceipt",
    "Cursor",
    "DeferredModel",
    "Diagnostic",
    "EmbedReport",
    "ExpandResult",
    "ExtractionReport",
    "ExtractionState",
    "ForgetReport",
    "JobInfo",
    "JobStatus",
    "NamespaceStats",
    "LaunchingCall",
    "MEMORY_BLOCK_END",
    "MEMORY_BLOCK",
    "MEMORY_BLOCK_MARKER",
    "MemoryBlock",
    "MemoryRecord",
    "NamespaceInfo",
    "Pointer",
    "Role",
    "SearchHit",
    "SearchResult",
    "SessionInfo",
    "Source",
    "StageStats",
    "SubagentContext",
    "SubagentCounters",
    "SubagentHealth",
    "SubagentKey",
    "Tombstone",
    "Turn",
    "tool_call",
    "tool_use_text",
    "utc_now",
    "without_memory_blocks",
)

Role = Literal["user", "assistant", "system", "tool"]
#: A background job's state: ``failed`` is failed for good (its attempts are spent).
JobStatus = Literal["pending", "running", "done", "failed"]

#: The session of the memories a host adds by hand (``Memory.remember``, ``correct_memory``): no turn of it exists,
#: and capture refuses it.
HOST_SESSION = "tortoise:host"
#: Names of the cursors the SDK keeps in a namespace: per session, the pointers a block showed (the adapters', Claude
#: Code's) and the OpenAI Agents session's view (each prefix, then the session id); and the model pause.
SHOWN_CURSOR = "reflex:shown:"
CLAUDE_CODE_SHOWN_CURSOR = "claude-code:shown:"
OPENAI_AGENTS_CURSOR = "openai-agents:"
MODEL_PAUSE_CURSOR = "tortoise:model-pause"
#: First line of every memory block the SDK injects into a conversation. A block is an echo of memory,
#: never new evidence: extraction cuts every block out of a captured turn and grounds only on what is
#: left (a turn that is only a block, or whose metadata is ``{"tortoise": "memory_block"}``, grounds nothing).
MEMORY_BLOCK_MARKER = "[tortoise memory]"
MEMORY_BLOCK_END = "[/tortoise memory]"
#: A memory block in a text, from its marker to its end line (or the end of the text), in any case: a host
#: that upper-cases what it forwards still sends a block (the block's own text never holds a bracket).
MEMORY_BLOCK = re.compile(re.escape(MEMORY_BLOCK_MARKER) + r".*?(?:" + re.escape(MEMORY_BLOCK_END) + r"|\Z)",
                          re.DOTALL | re.IGNORECASE)


def without_memory_blocks(text: str) -> str:
    """``text`` with every memory block in it taken out: what a person typed after a block a host pasted
    into their message ("[tortoise memory] ... [/tortoise memory]\n\nwhat breed is my dog?")."""
    return MEMORY_BLOCK.sub(" ", text).strip()


def starts_with_memory_block(text: str) -> bool:
    """Whether ``text`` opens with a memory block (its marker in any case, after any blank space)."""
    return MEMORY_BLOCK.match(text.lstrip()) is not None


ROLES: tuple[str, ...] = ("user", "assistant", "system", "tool")


class DeferredModel(BaseModel):
    """The base of the SDK's shapes: each builds its validator on first use, so a process that uses few
    (``tortoise hook``, a fresh process per prompt) does not pay for them all at import."""

    model_config = ConfigDict(defer_build=True)


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def tool_use_text(name: Any, args: Any) -> str:
    """A tool call as a turn's text keeps it: ``[tool_use name arg=value …]``, each value cut to 80
    characters and the whole to 300 (transcript parsers and adapters write it the same way)."""
    parts = []
    for key, value in (args if isinstance(args, dict) else {}).items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        parts.append(f"{key}={_cut(' '.join(text.split()), 80)}")
    joined = _cut(" ".join(parts), 300)
    return f"[tool_use {name or '?'}{' ' + joined if joined else ''}]"


def tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-style tool call (``function.arguments`` is JSON text) or ``{id, name, args}`` as ``{id, name, input}``."""
    function = call.get("function") if isinstance(call.get("function"), Mapping) else call
    args: Any = function.get("arguments", function.get("args"))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass  # kept as the text it is
    return {"id": call.get("id"), "name": function.get("name"), "input": args}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


class Turn(DeferredModel):
    """One message of a conversation, as the caller gives it."""

    model_config = ConfigDict(extra="forbid")

    role: Role = Field(description="Who spoke: user, assistant, system or tool.")
    content: StrictStr = Field(description="The message text, stored whole.")
    name: StrictStr | None = Field(default=None, description="Speaker name, e.g. 'Caroline'.")
    id: StrictStr | None = Field(default=None, description="The caller's message id (its identity on re-capture).")
    timestamp: StrictStr | None = Field(default=None, description="When the turn was said (ISO 8601), if known.")
    metadata: dict[str, Any] | None = Field(default=None, description="Free-form caller data, kept verbatim.")


class Diagnostic(DeferredModel):
    """A problem that did not stop the call: where it happened and what it was."""

    stage: str = Field(description="capture, s1, s2, vet, s3, s4, ground, s5, reflex, subagents ...")
    code: str = Field(description="Stable short code, e.g. 'rate_limit', 'ungrounded_quote'.")
    message: str = Field(description="Human-readable explanation.")
    detail: dict[str, Any] | None = Field(default=None, description="Structured context.")


class StageStats(DeferredModel):
    """Cost and effort of one pipeline stage. Unreported figures stay None."""

    calls: int = 0
    retries: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = Field(default=None, description="None when litellm does not know the model's price.")
    wall_ms: float = Field(default=0.0, description="Elapsed wall time of the stage in ms (not the sum of its "
                                                  "call durations: S1's concurrent calls overlap).")
    errors: dict[str, int] = Field(default_factory=dict, description="Error census by class.")
    prompt_hash: str | None = Field(default=None, description="sha256 of the prompt template used.")


class ExtractionReport(DeferredModel):
    """What the extraction pipeline did for one session."""

    status: Literal["ok", "partial", "failed", "skipped", "queued"]
    reason: str | None = Field(default=None, description="Why it was skipped, queued or failed.")
    counts: dict[str, int] = Field(default_factory=dict, description="Items written by kind: entity, event, point.")
    outcomes: dict[str, int] = Field(default_factory=dict, description="Consolidation outcomes: ADD, NOOP, UPDATE, DELETE.")
    errors: list[Diagnostic] = Field(default_factory=list)
    warnings: list[Diagnostic] = Field(default_factory=list)
    stages: dict[str, StageStats] = Field(default_factory=dict)
    job_id: str | None = None
    window: tuple[int, int] | None = Field(default=None, description="First and last turn index the extraction "
                                           "read as new (turns before it were extracted already); None: none.")
    waiting: tuple[int, int] | None = Field(
        default=None, description="First and last turn index that wait for another run because their S1 chunk or "
                                  "S2 failed (or nothing was written): the watermark stopped before the first, and "
                                  "the next extraction reads them again; None: no turn waits.")


class CaptureReceipt(DeferredModel):
    """The durable record of one ``capture`` call."""

    receipt_id: str
    namespace: str
    session_id: str
    session_date: str | None = None
    turns_received: int
    turns_stored: int = Field(description="Turns newly written by this call (0 on a replay or a pure repeat).")
    turn_ids: list[str] = Field(default_factory=list, description="Ids of the turns this call wrote.")
    replayed: bool = False
    ok: bool = True
    idempotency_key: str | None = None
    errors: list[Diagnostic] = Field(default_factory=list)
    warnings: list[Diagnostic] = Field(default_factory=list)
    extraction: ExtractionReport | None = None
    created_at: datetime = Field(default_factory=utc_now)


class SearchHit(DeferredModel):
    """A stored turn that matched a search."""

    turn_id: str
    external_id: str | None = Field(description="The caller's message id, if one was given.")
    session_id: str
    session_date: str | None
    index: int = Field(description="Position of the turn in its session, from 0.")
    role: Role
    name: str | None
    content: str
    score: float = Field(description="Higher is better: BM25, 30% more for a turn spoken by a person the query "
                                     "names (search).")


class SearchResult(DeferredModel):
    """A search with what it looked for: the terms, the hits, and why there are none when the query is the cause."""

    query: str
    terms: list[str] = Field(description="The words searched for: the query's words without stop-words.")
    hits: list[SearchHit] = Field(default_factory=list, description="Best first.")
    reason: str | None = Field(default=None, description="Why nothing was searched for (a query of only "
                                                         "stop-words or punctuation); None when it was.")
    semantic: str | None = Field(default=None, description="With an embedder: 'fused' (words and meaning, by "
                                 "reciprocal rank) or 'words only: <why>'; None without one.")


class SessionInfo(DeferredModel):
    """A captured session."""

    session_id: str
    session_date: str | None
    turn_count: int
    created_at: datetime
    updated_at: datetime


class NamespaceInfo(DeferredModel):
    """A namespace of a store and how much it holds."""

    name: str
    sessions: int = Field(description="Captured sessions.")
    turns: int = Field(description="Stored turns.")
    memories: int = Field(description="Live memories (superseded and retracted versions not counted).")


class Source(DeferredModel):
    """A turn a memory was drawn from, with the verbatim quote."""

    turn_id: str
    external_id: str | None = None
    session_id: str
    quote: str | None = None


class MemoryRecord(DeferredModel):
    """An extracted memory: an event or a point, grounded in source turns."""

    id: str
    kind: Literal["event", "point"]
    content: str
    status: Literal["live", "superseded", "deleted"] = "live"
    when: str | None = None
    session_id: str
    entities: list[str] = Field(default_factory=list)
    search_keys: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    valid_at: datetime | None = None
    invalid_at: datetime | None = Field(default=None, description="Set when superseded or retracted.")
    superseded_by: str | None = None
    supersedes: str | None = Field(default=None, description="The memory this one replaced (UPDATE).")
    created_at: datetime = Field(default_factory=utc_now)
    category: str | None = Field(default=None, description="The host's category (Memory(categories=...)).")
    confidence: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="How sure extraction is of it, 0..1: the stages that agreed on it, raised by each further "
                    "turn and session stating it, capped at 0.9 (see docs/extraction.md). None: not recorded.")


class Pointer(DeferredModel):
    """One item of a memory block."""

    id: str
    kind: Literal["memory", "turn"]
    label: str
    synopsis: str
    score: float
    external_id: str | None = None
    session_id: str | None = None
    session_date: str | None = None
    superseded: bool = Field(default=False, description=(
        "Not how things stand now: a superseded memory, a turn whose facts were all superseded, or, for a "
        "present-tense question, a turn a later turn follows up saying what changed, or one whose fact (or "
        "the fact of the turn it replies to) a memory ranked with it replaced. Shown as 'SUPERSEDED'."))
    unconfirmed: bool = Field(default=False, description="A memory of low confidence (shown as 'unconfirmed memory').")


class MemoryBlock(DeferredModel):
    """What the reflex hands the host before a turn: possibly empty, never raising."""

    block: str = ""
    pointers: list[Pointer] = Field(default_factory=list)
    why: list[str] = Field(default_factory=list, description="One reason per pointer.")
    tokens: int = 0
    degraded_reason: str | None = None
    elapsed_ms: float = 0.0


class ExpandResult(DeferredModel):
    """The full record behind a pointer."""

    id: str
    kind: Literal["memory", "turn"]
    content: str
    status: str | None = None
    session_id: str | None = None
    session_date: str | None = None
    supersession: list[MemoryRecord] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    surrounding: list[SearchHit] = Field(default_factory=list)


class SubagentContext(DeferredModel):
    """One sub-agent invocation, as recorded from the event stream (structure, no content)."""

    id: str = Field(description="'a_' and 20 hex digits: a hash of the namespace, session, execution and tool "
                    "call ids, so the same invocation keeps its id and it tells nothing of other namespaces.")
    namespace: str
    session_id: str
    turn_id: str | None = None
    turn_ref: str | None = Field(default=None, description="The launching message id as the stream gave it; "
                                 "turn_id is filled from it once that turn is captured.")
    agent_execution_id: str = "unknown"
    tool_call_id: str
    parent_tool_call_id: str | None = None
    subagent_type: str | None = None
    description: str | None = None
    agent_id: str | None = None
    child_session_id: str | None = None
    model: str | None = None
    agent_status: str | None = None
    tool_status: str | None = None
    is_async: bool = False
    total_tokens: int | None = None
    tool_use_count: int | None = None
    duration_ms: int | None = None
    source: Literal["live", "backfill"] = "live"
    observed_at: datetime
    settled_at: datetime | None = None
    updated_at: datetime


class SubagentCounters(DeferredModel):
    """Persistent counters of the subagent recorder.

    Every frame handed to the recorder counts once in ``attempted`` and once in exactly one of
    ``persisted``, ``skipped_no_identity`` or ``failed``.
    """

    attempted: int = Field(default=0, description="Frames handed to the recorder. Namespaces written before it "
                           "was counted get persisted + skipped_no_identity + failed, which is the same sum.")
    persisted: int = Field(default=0, description="Frames merged into a row (formerly upserted).")
    skipped_no_identity: int = Field(default=0, description="Frames without a session or tool call id: not stored.")
    unknown_execution: int = Field(default=0, description="Live frames without an execution id (stored under "
                                   "'unknown'): a live path that should carry one; should stay flat.")
    backfill_unknown_execution: int = Field(default=0, description="Backfill frames without an execution id "
                                            "(no transcript carries one): expected, counted apart.")
    anomalous_value: int = Field(default=0, description="Metrics that were negative or too large: stored as NULL.")
    failed: int = Field(default=0, description="Frames whose write failed (logged; the capture went on).")

    @model_validator(mode="before")
    @classmethod
    def _legacy_upserted(cls, data: Any) -> Any:
        """``upserted`` (the old name) sets ``persisted`` when that is not given; a dump holds both, equal."""
        if isinstance(data, Mapping) and "upserted" in data:
            data = dict(data)
            legacy = data.pop("upserted")
            data.setdefault("persisted", legacy)
        return data

    @model_serializer(mode="wrap")
    def _dump_legacy_upserted(self, handler: Any) -> dict[str, Any]:
        return {**handler(self), "upserted": self.persisted}  # the deprecated name, for scripts that read it

    @property
    def upserted(self) -> int:
        """Deprecated alias of ``persisted`` (also in the JSON); read ``persisted``."""
        warnings.warn("SubagentCounters.upserted is deprecated; read persisted", DeprecationWarning, stacklevel=2)
        return self.persisted


class NamespaceStats(DeferredModel):
    """Counts of one namespace (``Memory.stats``, ``tortoise stats``, ``GET /stats``)."""

    namespace: str
    sessions: int = Field(description="Captured sessions.")
    turns: int = Field(description="Stored turns.")
    memories: int = Field(description="Live memories, those a host remembered too.")
    entities: int
    subagents: int = Field(description="Recorded sub-agent invocations.")
    subagent_counters: SubagentCounters
    jobs: dict[str, int] = Field(description="Background extraction jobs by status.")


class LaunchingCall(DeferredModel):
    """A tool call in the captured turns that launched a sub-agent (e.g. a ``Task``/``Agent`` tool_use)."""

    session_id: str = Field(description="The session of the turn that holds the call.")
    turn_id: str = Field(description="The launching turn.")
    tool_call_id: str = Field(description="The call's id: a sub-agent row's tool_call_id.")
    tool_name: str = Field(description="The tool called, e.g. Task.")
    observed_at: datetime | None = Field(default=None, description="The turn's own timestamp, else when it was "
                                         "captured; None when neither is known.")


class SubagentKey(DeferredModel):
    """A sub-agent row's key, with where it came from."""

    session_id: str
    agent_execution_id: str
    tool_call_id: str
    source: Literal["live", "backfill"]
    observed_at: datetime


class SubagentHealth(DeferredModel):
    """Expected versus observed sub-agent launches: two directed anti-joins, never netted against each other.

    Only a shortfall fails the check (``ok``): a row nobody expected is reported, never alarmed. No
    row does not mean no sub-agent before recording started (or in a session never captured).
    """

    shortfall: list[LaunchingCall] = Field(default_factory=list, description="Launching calls in the captured "
                                           "turns with no sub-agent row (in the window): launches that were "
                                           "not recorded.")
    excess: list[SubagentKey] = Field(default_factory=list, description="Rows with no launching call, in "
                                      "sessions whose turns do hold launching calls: reported, never alarmed.")
    no_launch_expected: list[SubagentKey] = Field(
        default_factory=list, description="Rows of sessions whose captured turns hold no launching call at all "
        "(ACP streams, the LangChain, OpenAI Agents and loop adapters capture none): nothing to compare them with.")
    expected: int = Field(default=0, description="Launching calls in scope and window.")
    observed: int = Field(default=0, description="Sub-agent rows in scope and window.")
    last_observed_at: datetime | None = Field(default=None, description="The latest row's observed_at in scope "
                                              "and window; None when there is no such row.")
    since: datetime | None = Field(default=None, description="Only launches and rows observed from then on.")
    session_id: str | None = Field(default=None, description="Only this session and its derived sessions.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """No launch went unrecorded (excess is reported, never a failure)."""
        return not self.shortfall


class EmbedReport(DeferredModel):
    """What one ``Memory.embed_pending`` run did."""

    model: str = Field(description="The embedding model the vectors are stored under.")
    embedded: int = Field(default=0, description="Turns and memories given a vector in this run.")
    more: bool = Field(default=False, description="Items still wait for a vector (a limit or a failure stopped it).")
    dim: int | None = Field(default=None, description="The vectors' dimension; None when none was made.")
    error: str | None = Field(default=None, description="Why the run stopped early: the embedder's failure.")
    usage: StageStats | None = Field(default=None, description="The model calls' tokens, cost and errors "
                                                               "(None for a callable embedder).")


class ForgetReport(DeferredModel):
    """What a ``forget_session``/``forget_memory`` call removed: all zeros when there was nothing (left) to forget."""

    namespace: str
    subject: Literal["session", "memory"]
    sessions: list[str] = Field(default_factory=list, description="The sessions forgotten: the one named and "
                                "its derived sessions (<session>:agent-..., <session>:task-...).")
    removed: dict[str, int] = Field(default_factory=dict, description="Rows deleted, by table.")
    updated: dict[str, int] = Field(default_factory=dict, description="Rows kept but changed, by table: memories "
                                    "that lost sources or were re-linked in their supersession chain, sub-agent "
                                    "rows whose launching turn or child session was forgotten.")
    tombstone_id: str | None = Field(default=None, description="The audit row left, None when nothing was removed.")
    forgotten_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        """Rows deleted over all tables."""
        return sum(self.removed.values())


class Tombstone(DeferredModel):
    """The audit row a forgetting leaves: what was removed (counts), when, by which call; no content, no id."""

    id: str = Field(description="'f_' and 20 hex digits: a hash of the namespace, the subject hash and how many "
                    "tombstones the subject had before; it tells nothing of other namespaces.")
    namespace: str
    subject: Literal["session", "memory"]
    subject_hash: str = Field(description="sha256 of namespace, subject and the forgotten id: "
                              "Memory.tombstones(session_id=...) finds it, the row does not hold the id.")
    call: str = Field(description="The call that forgot it, e.g. Memory.forget_session.")
    removed: dict[str, int] = Field(description="Rows deleted, by table.")
    forgotten_at: datetime


class JobInfo(DeferredModel):
    """A durable background extraction job."""

    job_id: str
    namespace: str
    session_id: str
    status: JobStatus
    attempts: int = 0
    revision: int = 0
    lease_until: datetime | None = None
    errors: list[str] = Field(default_factory=list)
    receipt_id: str | None = Field(default=None, description="The capture receipt the job reports into.")
    due_at: datetime | None = Field(default=None, description="When a pending job becomes runnable; None: now.")
    waiting_turns: int = Field(default=0, description="Evidence turns captured into the session while it waited.")
    turns: tuple[int, int] | None = Field(
        default=None, description="First and last turn index a job that is not done covers: the session's turns "
                                  "after its watermark, which wait for it; None: a done job, or none wait.")
    created_at: datetime
    updated_at: datetime

    @computed_field  # type: ignore[prop-decorator]
    @property
    def last_error(self) -> str | None:
        """The latest attempt's error, or None when no attempt failed."""
        return self.errors[-1] if self.errors else None


class ExtractionState(DeferredModel):
    """How far a session is extracted: the window of the last committed extraction."""

    session_id: str
    watermark: int = Field(description="Index of the last turn a committed extraction covered.")
    window_start: int = Field(description="Index of the first new turn of that extraction.")
    prompts_sha: str | None = Field(default=None, description="Hash of the prompts it ran with; None: unknown.")
    extraction_id: str | None = None
    updated_at: datetime


class Cursor(DeferredModel):
    """Named state a host integration keeps in the store between processes (a transcript's read offset ...)."""

    name: str = Field(description="The cursor's name, unique in its namespace, e.g. 'claude-code:<path>'.")
    value: dict[str, Any] = Field(default_factory=dict, description="The state, a JSON object.")
    revision: int = Field(default=0, description="Counts the saves; a save naming an older revision is refused. "
                                                 "0: never saved.")
    updated_at: datetime | None = Field(default=None, description="When it was last saved; None: never saved.")
