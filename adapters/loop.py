"""Memory for a hand-written chat loop over OpenAI-style message lists.

Usage::

    from tortoise_sdk import Memory
    from tortoise_sdk.adapters.loop import MemorySession

    session = MemorySession(Memory("memory.db", namespace="alice"), "chat-42")
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]
    reply = call_model(session.before_turn(messages))   # the memory block rides along as a system message
    session.after_turn(text, reply)                        # the exchange is captured
    session.close()                                        # at the end: extract what is still pending

In a tool loop, ``record_tool_call(message)`` captures the assistant message that calls tools,
and ``record_subagent(tool_call_id, execution_id=run_id, ...)`` records a tool call that ran an
agent (at its start, then with its status and usage when it ends) as a sub-agent row of the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

from ..models import CaptureReceipt, SubagentContext, starts_with_memory_block, tool_call, without_memory_blocks
from ._common import DEFAULT_SHOWN_TURNS, MemoryAdapter, check_session_id, tool_use_text

if TYPE_CHECKING:
    from ..memory import ExtractMode, Memory

__all__ = ("MemorySession", "MessageLike", "MessageObject")

Message = Mapping[str, Any]


@runtime_checkable
class MessageObject(Protocol):
    """A client library's message object: the OpenAI client's ``ChatCompletionMessage`` (read through its
    ``model_dump``), or any object with a ``content`` attribute (``role``, ``tool_calls``, ``name`` and ``id`` are
    read when it has them)."""

    @property
    def content(self) -> Any: ...


#: A message ``after_turn`` takes: its text, an OpenAI-style dict, or a client library's message object.
MessageLike = Union[str, Mapping[str, Any], MessageObject]


class MemorySession(MemoryAdapter):
    """One conversation's memory: a block before each model call, a capture after each exchange.

    Neither method ever raises because of memory: a failure is logged, ``before_turn``
    then returns the messages unchanged and ``after_turn`` returns None.

    Args:
        mem: the ``Memory`` to read and write.
        session_id: this conversation's id in the store.
        budget, max_tokens: passed to ``Memory.context``.
        window_turns: how many recent non-system messages form the reflex window.
        extract: what ``after_turn``'s capture does about extraction (``Memory.capture``'s
            ``extract``); ``"background"`` keeps model calls off the chat loop, extracted in
            batches (``Memory(extract_every=, idle_s=)``); ``close()`` flushes what is pending.
        shown_turns: a pointer shown in one of the session's last ``shown_turns`` host turns is
            not shown again unless the user asks (kept in the store, so a new process continues).
    """

    def __init__(
        self,
        mem: Memory,
        session_id: str,
        *,
        budget: int = 3,
        max_tokens: int = 400,
        window_turns: int = 6,
        extract: ExtractMode = "background",
        shown_turns: int = DEFAULT_SHOWN_TURNS,
    ) -> None:
        check_session_id(session_id)
        super().__init__(mem, budget=budget, max_tokens=max_tokens, window_turns=window_turns, extract=extract,
                         shown_turns=shown_turns)
        self.session_id = session_id
        self._callers: dict[str, str] = {}  # tool call id -> id of the message that made the call
        # The user message before_turn saw last, and its text once record_tool_call captured it ahead of the
        # tool calls it caused (after_turn then captures only the reply).
        self._asking: Message | None = None
        self._asked: str | None = None

    def before_turn(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """A copy of ``messages`` with the memory block as a system message after the leading system ones.

        Messages that are not mappings are logged and returned as given (``[]`` for None), without a block.
        """
        out: list[dict[str, Any]] | None = None
        try:
            out = [dict(m) for m in messages]
            sent = [m for m in out if m.get("role") != "system"]
            self._asking = _unanswered(sent)
            held = (_turn(m, str(m.get("role") or "user")) for m in sent)
            self.last_block = block = self._context(self._window(sent), self.session_id, held)
        except Exception as exc:  # context() itself fails open; this guards bad input too
            self._block_skipped(exc)
            if out is not None:
                return out
            return [] if messages is None else messages  # type: ignore[return-value]
        if not block.block:
            return out
        at = 0
        while at < len(out) and out[at].get("role") == "system":
            at += 1
        out.insert(at, {"role": "system", "content": block.block})
        return out

    def _sessions(self) -> set[str]:
        return {self.session_id}

    def after_turn(self, user_msg: MessageLike, assistant_msg: MessageLike) -> CaptureReceipt | None:
        """Capture one exchange (each message gets a fresh id); returns the receipt, or None on failure.

        An empty reply (a model call that failed) captures the user's message alone; the next ``after_turn``
        with the same text (the retry) then captures only its reply.
        """
        asked, self._asking, self._asked = self._asked, None, None
        for msg, role in ((user_msg, "user"), (assistant_msg, "assistant")):
            if _as_message(msg, role) is None:
                self._log().warning("tortoise: the %s message is not captured: %r (a %s) is not a message (pass a "
                                    "str, a dict or a client's message object)", role, msg, type(msg).__name__)
        exchange = [(assistant_msg, "assistant")]
        said = ((_turn(user_msg, "user") or {}).get("content") or "").strip()
        if asked is None or said != asked:  # not captured ahead of a tool call, nor by a failed call's after_turn
            exchange.insert(0, (user_msg, "user"))
        receipt = self._capture(self.session_id, (self._turn(msg, role) for msg, role in exchange))
        if said and _turn(assistant_msg, "assistant") is None and (receipt is not None or said == asked):
            # No reply: a failed call keeps the user's message, and its retry's after_turn captures only the reply.
            self._asked = said
        return receipt

    def record_tool_call(self, message: Message | MessageObject) -> str | None:
        """Capture an assistant message that calls tools; returns its turn's id (None on failure).

        ``message`` is OpenAI-style (``{"role": "assistant", "content": ..., "tool_calls": [{"id",
        "function": {"name", "arguments"}}]}``, or the OpenAI client's ``ChatCompletionMessage`` itself;
        ``{"id", "name", "args"}`` calls work too). It is kept
        as transcript ingestion keeps one: its text, then ``[tool_use name arg=…]`` per call, the
        calls whole in the turn's metadata. The first call of an exchange also captures, before it, the
        user message ``before_turn`` saw last (it asked for what the tools do), and ``after_turn``
        then captures only the reply, so the session's turns keep the conversation's order.
        """
        turn = self._turn(message, "assistant") if not isinstance(message, str) else None
        if turn is None:
            self._log().warning("tortoise: not a message: %r", type(message).__name__)
            return None
        turns = [turn]
        if self._asked is None and (asking := _turn(self._asking, "user") if self._asking else None):
            turns.insert(0, asking)  # the user's message goes first: it asked for what the tools do
        if self._capture(self.session_id, turns) is None:
            return None
        if len(turns) == 2:  # captured once per exchange, however many model calls the tool loop makes
            self._asked = turns[0]["content"].strip()
        return turn["id"]

    def record_subagent(
        self,
        tool_call_id: str,
        *,
        execution_id: str | None = None,
        status: str = "running",
        subagent_type: str | None = None,
        description: str | None = None,
        total_tokens: int | None = None,
        tool_use_count: int | None = None,
        duration_ms: int | None = None,
        model: str | None = None,
        agent_id: str | None = None,
    ) -> SubagentContext | None:
        """Record that tool call ``tool_call_id`` of this session ran an agent; returns the row, or None on failure.

        Call it when the agent starts (``status="running"``) and again when it ends (``"success"``,
        ``"error"`` ...) with what it used; the calls merge into one row under the sub-agent
        rules (a value not given never blanks a stored one; usage not reported stays None). The
        row points at the message ``record_tool_call`` captured for that call, when there was one.

        ``execution_id`` is your loop's id for the run that made the call (give the same one at
        start and end): two runs that reuse a tool call id then keep two rows, and a late frame
        of one never lands on the other's settled row. Without it the row is kept under
        ``'unknown'`` and counted in ``unknown_execution``.
        """
        frame = {"session_id": self.session_id, "tool_call_id": tool_call_id, "agent_execution_id": execution_id,
                 "turn_external_id": self._callers.get(tool_call_id), "tool_status": status,
                 "subagent_type": subagent_type, "description": description, "total_tokens": total_tokens,
                 "tool_use_count": tool_use_count, "duration_ms": duration_ms, "model": model, "agent_id": agent_id}
        try:
            return self.mem.record_subagent({k: v for k, v in frame.items() if v is not None})
        except Exception as exc:
            self._log().warning("tortoise: sub-agent of %s not recorded: %s", tool_call_id, exc)
            return None

    def _turn(self, msg: MessageLike, role: str) -> dict[str, Any] | None:
        turn = _turn(msg, role)
        for call in (turn or {}).get("metadata", {}).get("tool_uses", ()):
            if call.get("id"):
                self._callers[str(call["id"])] = turn["id"]  # type: ignore[index]
        return turn


def _unanswered(sent: Sequence[Message]) -> Message | None:
    """The last user message of ``sent`` when no reply follows it yet (only tool calls and results may)."""
    for m in reversed(sent):
        if m.get("role") == "user":
            return m
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            return None  # answered: the exchange ended
    return None


def _as_message(msg: Any, role: str) -> Mapping[str, Any] | None:
    """``msg`` as a mapping: a dict, a string (its text, said by ``role``), or a client library's message object
    (pydantic's ``model_dump``, e.g. the OpenAI client's ``ChatCompletionMessage``, or ``role``/``content``
    attributes); None for anything else."""
    if isinstance(msg, str):
        return {"role": role, "content": msg}
    if isinstance(msg, Mapping):
        return msg
    dump = getattr(msg, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:  # noqa: BLE001 - not a message after all
            dumped = None
        if isinstance(dumped, Mapping):
            return dumped
    if hasattr(msg, "content"):
        return {k: v for k in ("role", "content", "tool_calls", "name", "id") if (v := getattr(msg, k, None)) is not None}
    return None


def _turn(msg: MessageLike, role: str) -> dict[str, Any] | None:
    msg = _as_message(msg, role)  # type: ignore[assignment]
    if msg is None:
        return None
    content = msg.get("content")
    if content is None and isinstance(msg.get("refusal"), str):
        content = msg["refusal"]  # the OpenAI client's reply that declined: its text is the refusal
    if isinstance(content, list):
        content = " ".join(t for p in content if isinstance(p, Mapping) and isinstance(t := p.get("text"), str) and t)
    content = content if isinstance(content, str) else ""
    if starts_with_memory_block(content):  # an injected block: what was typed after it, if anything
        content = without_memory_blocks(content)
    calls = [tool_call(c) for c in msg.get("tool_calls") or () if isinstance(c, Mapping)]
    text = "\n".join(p for p in (content.strip(), *(tool_use_text(c["name"], c["input"]) for c in calls)) if p)
    if not text:
        return None  # nothing said
    turn = {"role": msg.get("role", role), "content": text if calls else content,
            "id": str(msg.get("id") or f"m-{uuid.uuid4().hex}")}
    if msg.get("name"):
        turn["name"] = msg["name"]
    if calls:
        turn["metadata"] = {"tool_uses": calls}
    return turn
