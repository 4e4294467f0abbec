"""LangChain v1 adapters: an agent middleware and a callback handler.

Needs the ``langchain`` extra (``pip install 'tortoise-sdk[langchain]'``).

``MemoryMiddleware`` (for ``create_agent``) adds the memory block to the system message
of every model call and captures the conversation's new messages: those the run starts with before
its first model call (a run that raises keeps them), the rest after the agent turn (a message that
calls tools as ``[tool_use name arg=…]``, like transcript ingestion).
It also records a sub-agent row for each tool call that runs an agent: a ``create_agent``
graph or any Runnable that calls a chat model, seen in the callback tree under the tool
call (``agent_tools=`` names tools that are agents whatever they do).
The block is never written into the agent state, so it is never captured back.
``MemoryCallbackHandler`` records user and model turns from any chat-model Runnable,
for code that does not use ``create_agent``.

Usage::

    from langchain.agents import create_agent
    from tortoise_sdk import Memory
    from tortoise_sdk.adapters.langchain import MemoryMiddleware

    agent = create_agent(model, tools, middleware=[MemoryMiddleware(Memory(namespace="alice"))])
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "chat-42"}})

Neither adapter ever lets a memory failure raise into the agent: it is logged and the
call goes on without memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..errors import install_hint

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, ToolCallRequest
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, LLMResult
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "tortoise_sdk.adapters.langchain needs LangChain v1: " + install_hint("langchain")
    ) from exc

from ..memory import storable
from ..models import MemoryBlock, starts_with_memory_block, without_memory_blocks
from ._common import (
    DEFAULT_SHOWN_TURNS,
    MemoryAdapter,
    before_model_extract,
    check_memory,
    storable_turns,
    tool_use_text,
)

if TYPE_CHECKING:
    from ..memory import ExtractMode, Memory

__all__ = ("MemoryCallbackHandler", "MemoryMiddleware")

log = logging.getLogger(__name__)

DEFAULT_SESSION = "langchain"

#: The session of the ``MemoryMiddleware`` agent whose tool call is running now: an agent the tool runs (a
#: sub-agent) with a ``MemoryMiddleware`` of its own keeps its turns in a session derived from it.
_CALLING_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("tortoise_calling_session",
                                                                              default=None)


class MemoryMiddleware(MemoryAdapter, AgentMiddleware):
    """Before each model call, the memory block joins the system message; new messages are captured before and after.

    Args:
        mem: the ``Memory`` to read and write.
        session_id: the conversation id; default the run's ``thread_id``, else ``"langchain"``. An agent run
            inside another agent's tool call (a sub-agent) defaults to a session derived from the calling
            agent's, ``<session>:agent-<task id>``: its messages are not the user's conversation, so they are
            kept apart and never evidence for extraction.
        budget, max_tokens: passed to ``Memory.context``.
        window_turns: how many recent messages form the reflex window.
        capture: capture the conversation's new messages before the agent turn's first model call and after it.
        extract: ``Memory.capture``'s ``extract`` for those captures (default ``"background"``).
        shown_turns: a pointer shown in one of the session's last ``shown_turns`` user messages is
            not shown again unless the user asks (kept in the store).
        record_subagents: record a sub-agent row for each tool call that runs an agent.
        agent_tools: tool names treated as agents from their start (an override; others are
            detected by the model calls they make).
    """

    def __init__(
        self,
        mem: Memory,
        session_id: str | None = None,
        *,
        budget: int = 3,
        max_tokens: int = 400,
        window_turns: int = 6,
        capture: bool = True,
        extract: ExtractMode = "background",
        shown_turns: int = DEFAULT_SHOWN_TURNS,
        record_subagents: bool = True,
        agent_tools: Collection[str] = (),
    ) -> None:
        super().__init__(mem, budget=budget, max_tokens=max_tokens, window_turns=window_turns, extract=extract,
                         shown_turns=shown_turns)
        self.session_id = session_id
        self.capture = capture
        self.record_subagents = record_subagents
        self.agent_tools = frozenset(agent_tools)
        # One block per user message: the tool-call round trips of one turn see the same block.
        self._cache: tuple[str, MemoryBlock] | None = None

    # -- before each model call ------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_block(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        # The same step as the sync hook, in a worker thread (as AsyncMemory does): the event loop is not blocked.
        return await handler(await asyncio.to_thread(self._with_block, request))

    def _with_block(self, request: ModelRequest) -> ModelRequest:
        try:
            block = self._block(request.messages)
            self.last_block = block
            if not block.block:
                return request
            return request.override(system_message=_join_system(request.system_message, block.block))
        except Exception as exc:
            self._block_skipped(exc)
            return request

    def _block(self, messages: Sequence[BaseMessage]) -> MemoryBlock:
        sent = [m for m in messages if not isinstance(m, SystemMessage)]
        window = self._window(sent)
        # The user message, however many tool round trips followed it (more than the window holds).
        last_user = next((m for m in reversed(sent) if isinstance(m, HumanMessage)), None)
        key = f"{id(last_user)}:{last_user.id}:{last_user.text}" if last_user is not None else ""
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        block = self._context(window, self._session(), (_turn(m) for m in sent))
        self._cache = (key, block)
        return block

    # -- each tool call: is it an agent? ----------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command]) -> ToolMessage | Command:
        with self._watching(request):
            return handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
                              ) -> ToolMessage | Command:
        with self._watching(request):
            return await handler(request)

    @contextmanager
    def _watching(self, request: ToolCallRequest) -> Iterator[None]:
        """Run the tool call with a sub-agent handler attached to every run under it (fail open)."""
        watcher = None
        calling = _CALLING_SESSION.set(self._session())
        if self.record_subagents:
            try:
                call_id = request.tool_call.get("id")
                messages = request.state.get("messages", []) if isinstance(request.state, dict) else []
                caller = next((m for m in reversed(messages) if isinstance(m, AIMessage)
                               and any(c.get("id") == call_id for c in m.tool_calls)), None)
                watcher = self.mem.subagent_handler(
                    self._session(), agent_tools=self.agent_tools,
                    turn_external_id=_turn_id(caller) if caller is not None else None,
                ).observing()
                watcher.__enter__()
            except Exception as exc:
                self._log().warning("tortoise: sub-agents of this tool call not recorded: %s", exc)
                watcher = None
        try:
            yield
        finally:
            _CALLING_SESSION.reset(calling)
            if watcher is not None:
                watcher.__exit__(None, None, None)

    # -- the agent turn: its messages stored before the first model call, its replies after ----------

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Store the messages the run starts with before any model call: a run that raises keeps them."""
        self._capture_state(state, before_model=True)
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.before_agent, state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._capture_state(state)
        return None

    def _capture_state(self, state: Any, *, before_model: bool = False) -> None:
        if self.capture:
            messages = state.get("messages", []) if isinstance(state, dict) else []
            turns = self._new_turns(messages)
            if _calling_task() is not None:  # a sub-agent's messages: a record of its run, never evidence
                turns = [{**t, "metadata": {**(t.get("metadata") or {}), "subagent": True}} if t else t for t in turns]
            self._capture(self._session, turns, before_model=before_model)

    def _new_turns(self, messages: Sequence[BaseMessage]) -> list[dict[str, Any] | None]:
        """The state's messages as turns, those already stored left out when no checkpointer keeps the thread.

        Ids are the turns' identity, so a checkpointed thread's newest messages are enough (its whole
        state would pass ``max_turns_per_capture`` and capture nothing more, ever). Without a checkpointer
        the host sends its history again each run, and LangGraph gives every message without an id a new
        random one: by those ids each run stored the whole history again. The messages are then laid
        over the session's stored turns by what was said (``_sent_again``): a host may keep only the user's
        and the assistant's text, without the tool calls and results. What it sent again, trimmed or not,
        is left out, and what follows it is new (a second "yes" too).
        """
        turns = [t for t in (_turn(m) for m in messages) if t is not None]
        if not _checkpointed():
            sent = [(t["role"], storable(t["content"])) for t in turns]  # as stored: a NUL is U+FFFD
            try:
                stored = self._stored_tail(sent)
            except Exception as exc:  # noqa: BLE001 - the capture goes on; it may store some turns again
                log.warning("tortoise: stored turns not read, the history may be stored again: %s", exc)
                stored = []
            turns = turns[_sent_again(sent, stored):]
        return turns[-self.mem.max_turns_per_capture:]

    def _stored_tail(self, sent: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """As many of the session's latest turns as ``_sent_again`` can lay ``sent`` over: ``sent``'s said messages
        are matched against as many said turns at the session's end, so a tail holding that many (or the whole
        session) gives what the whole session does. Read from the end, four times further while it holds fewer."""
        wanted = sum(1 for role, text in sent if _said(role, text))
        tail = max(2 * len(sent), 64)
        while True:
            stored = [(t.role, t.content) for t in self.mem.turns(self._session(), last=tail)]
            if len(stored) < tail or sum(1 for role, text in stored if _said(role, text)) >= wanted:
                return stored
            tail *= 4

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_agent, state, runtime)

    def _session(self) -> str:
        if self.session_id:
            return self.session_id
        task = _calling_task()
        if task is None:
            return _thread_id() or DEFAULT_SESSION
        return f"{_CALLING_SESSION.get() or _thread_id() or DEFAULT_SESSION}:agent-{task}"


class MemoryCallbackHandler(BaseCallbackHandler):
    """Records each chat-model call's last user message and its reply as turns, from any Runnable.

    The user's message is stored when the call starts (a call that fails keeps it). Without an id, it is the
    same turn while no call has answered it (a retry or a fallback is a new run with it), a new one after.

    Args:
        mem: the ``Memory`` to write.
        session_id: the conversation id; default the run's ``metadata.thread_id``, else ``"langchain"``.
        extract: ``Memory.capture``'s ``extract`` (default ``"background"``).
    """

    raise_error = False

    def __init__(self, mem: Memory, session_id: str | None = None, *, extract: ExtractMode = "background") -> None:
        check_memory(mem, type(self).__name__)
        self.mem = mem
        self.session_id = session_id
        self.extract = extract
        self._pending: dict[UUID, tuple[str, BaseMessage | None]] = {}
        # Per session, the id-less user message a call started with and no call has answered yet (its text, its
        # turn id): a retry or a fallback is a new run with the same message, and stores nothing new.
        self._unanswered: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._replaced_told: set[tuple[str, str]] = set()  # (session, message id) whose NUL was logged once

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *,
                            run_id: UUID, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            # The user's message is the call's last one (system text aside); after it, a tool loop's later calls
            # send the replies and tool results of the same exchange, and its user message is recorded already.
            said = [m for m in (messages[0] if messages else ()) if not isinstance(m, SystemMessage)]
            last_user = said[-1] if said and isinstance(said[-1], HumanMessage) else None
            sid = self.session_id or str((metadata or {}).get("thread_id") or DEFAULT_SESSION)
            with self._lock:
                # Without an id the text is no identity here: a second "yes" in a session is a new turn, once the
                # first was answered; until then the same text is the same message tried again.
                if last_user is not None and not last_user.id:
                    text = str(last_user.content)
                    unanswered = self._unanswered.get(sid)
                    turn_id = unanswered[1] if unanswered and unanswered[0] == text else f"run-{run_id}-user"
                    self._unanswered[sid] = (text, turn_id)
                    last_user = last_user.model_copy(update={"id": turn_id})
                self._pending[run_id] = (sid, last_user)
        except Exception as exc:
            log.warning("tortoise: callback skipped: %s", exc)
            return
        # The user's message is stored before the model is called: a call that fails keeps it.
        if last_user is not None and (turn := _turn(last_user)) is not None:
            self._store(sid, [turn], extract=before_model_extract(self.extract))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            pending = self._pending.pop(run_id, None)
            sid, user = pending or ("", None)
            if user is not None and self._unanswered.get(sid, ("", ""))[1] == user.id:
                del self._unanswered[sid]  # answered: the same text again is a new message
        if pending is None:
            return
        try:
            gen = response.generations[0][0] if response.generations and response.generations[0] else None
            reply = gen.message if isinstance(gen, ChatGeneration) else None
            if reply is not None and not reply.id:
                reply = reply.model_copy(update={"id": f"run-{run_id}"})
            # The user's message again (stored at the call's start, so skipped unless that write failed).
            turns = [t for t in (_turn(user) if user is not None else None, _turn(reply) if reply else None) if t]
        except Exception as exc:
            log.warning("tortoise: capture skipped: %s", exc)
            return
        self._store(sid, turns, extract=self.extract)

    def _store(self, session_id: str, turns: list[dict[str, Any]], *, extract: ExtractMode) -> None:
        """``Memory.capture`` of ``turns``, a failure logged."""
        if not turns:
            return
        try:
            self.mem.capture(session_id, storable_turns(turns, session_id, log, self._replaced_told), extract=extract)
        except Exception as exc:
            log.warning("tortoise: capture skipped: %s", exc)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._pending.pop(run_id, None)


# -- helpers -----------------------------------------------------------------------------------


def _join_system(system: SystemMessage | None, block: str) -> SystemMessage:
    """The agent's system message with the block appended (one system message: every provider accepts it)."""
    if system is None:
        return SystemMessage(content=block)
    if isinstance(system.content, str):
        content: Any = f"{system.content}\n\n{block}" if system.content else block
    else:  # content blocks (e.g. with cache-control marks): add ours as one more text block
        content = [*system.content, {"type": "text", "text": block}]
    return system.model_copy(update={"content": content})


def _turn(m: BaseMessage | None) -> dict[str, Any] | None:
    """A LangChain message as a turn; None for system messages, empty messages and memory-block echoes.

    A message that calls tools is kept like transcript ingestion keeps one: its text, then
    ``[tool_use name arg=…]`` per call, the calls whole in the metadata. A part that is not text
    (an image) is kept as its kind: ``[image]``.
    """
    if m is None or isinstance(m, SystemMessage):
        return None
    role = _role(m)
    calls = list(getattr(m, "tool_calls", None) or [])
    # What is not text (an image the user sent) is kept as its kind, so that the turn is not lost.
    attached = " ".join(f"[{part['type'].removesuffix('_url')}]" for part in (m.content if isinstance(m.content, list) else ())
                        if isinstance(part, dict) and part.get("type") not in _NOT_ATTACHED)
    said = m.text.strip()
    if starts_with_memory_block(said):  # an injected block: what was typed after it, if anything
        said = without_memory_blocks(said)
    text = "\n".join(p for p in (said, attached, *(tool_use_text(c.get("name"), c.get("args")) for c in calls)) if p)
    if role is None or not text:
        return None
    turn: dict[str, Any] = {"role": role, "content": text, "id": _turn_id(m)}
    if getattr(m, "name", None):
        turn["name"] = m.name
    if calls:
        turn["metadata"] = {"tool_uses": [{"id": c.get("id"), "name": c.get("name"), "input": c.get("args")}
                                          for c in calls]}
    return turn


_ROLES: dict[type, str] = {HumanMessage: "user", AIMessage: "assistant", ToolMessage: "tool"}
#: Content parts that are no attachment: text, tool calls (kept from ``tool_calls``), and a model's reasoning
#: (extended thinking, reasoning summaries: its working, not what it said).
_NOT_ATTACHED = frozenset({None, "text", "tool_use", "tool_call", "tool_call_chunk", "invalid_tool_call", "thinking",
                           "redacted_thinking", "reasoning", "server_tool_call", "server_tool_call_chunk",
                           "server_tool_result"})


def _role(m: BaseMessage) -> str | None:
    """The turn role of a message, a streamed chunk too (``AIMessageChunk`` is an ``AIMessage``)."""
    return next((role for kind, role in _ROLES.items() if isinstance(m, kind)), None) or {
        "human": "user", "ai": "assistant", "tool": "tool"}.get(m.type)


def _turn_id(m: BaseMessage) -> str:
    """The turn's identity on re-capture: the message id; without one, the same text is the same turn."""
    if m.id:
        return str(m.id)
    role = _role(m) or m.type
    calls = ",".join(str(c.get("id")) for c in getattr(m, "tool_calls", None) or [])
    return f"{role}-{hashlib.sha256((m.text + calls).encode()).hexdigest()[:20]}"



def _sent_again(sent: Sequence[tuple[str, str]], stored: Sequence[tuple[str, str]]) -> int:
    """How many of ``sent``'s first messages the host sent again: up to the longest run of them whose said text
    (``_said``) the ``stored`` turns' said text ends with, then the tool messages after it as they were stored."""
    said = [(i, view) for i, (role, text) in enumerate(sent) if (view := _said(role, text))]
    kept = [(i, view) for i, (role, text) in enumerate(stored) if (view := _said(role, text))]
    for k in range(min(len(said), len(kept)), 0, -1):
        if [v for _, v in said[:k]] == [v for _, v in kept[-k:]]:
            at, then = said[k - 1][0] + 1, kept[-1][0] + 1
            while at < len(sent) and then < len(stored) and sent[at] == stored[then]:
                at, then = at + 1, then + 1
            return at
    return 0


def _said(role: str, text: str) -> tuple[str, str] | None:
    """A turn as a host that keeps only the conversation's text sends it again: a user's or an assistant's text, the
    assistant's without its ``[tool_use …]`` lines; None for a tool result and a message that only calls tools."""
    if role not in ("user", "assistant"):
        return None
    lines = text.split("\n")
    while role == "assistant" and lines and _TOOL_USE_LINE.fullmatch(lines[-1]):
        lines.pop()
    said = "\n".join(lines).strip()
    return (role, said) if said else None


_TOOL_USE_LINE = re.compile(r"\[tool_use .*\]")


def _checkpointed() -> bool:
    """Whether the graph run keeps its state in a checkpointer (else: unknown, taken as kept)."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable", {})
    except Exception:  # outside a graph run
        return True
    return "__pregel_checkpointer" not in configurable or configurable["__pregel_checkpointer"] is not None


def _calling_task() -> str | None:
    """The id of the tool-node task this graph run is nested in (a sub-agent run by a tool), else None.

    LangGraph names a nested run's checkpoint namespace by the tasks it runs under, outermost first
    (``tools:<task id>|model:<task id>``); ``create_agent`` runs tool calls in its ``tools`` node.
    """
    try:
        from langgraph.config import get_config

        parents = str(get_config().get("configurable", {}).get("checkpoint_ns") or "").split("|")[:-1]
    except Exception:  # outside a graph run
        return None
    tasks = [part.partition(":")[2] for part in parents if part.partition(":")[0] == "tools"]
    return tasks[-1] if tasks and tasks[-1] else None


def _thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        value = get_config().get("configurable", {}).get("thread_id")
    except Exception:  # outside a graph run
        return None
    return str(value) if value else None
