"""OpenAI Agents SDK: a ``Session`` kept in tortoise, the memory block before each model call, sub-agent rows.

Needs the ``openai-agents`` extra (``pip install 'tortoise-sdk[openai-agents]'``).

Usage::

    from agents import Agent, Runner
    from tortoise_sdk import Memory
    from tortoise_sdk.adapters.openai_agents import MemorySession

    session = MemorySession(Memory("memory.db", namespace="alice"), "chat-42")
    result = await Runner.run(agent, "Where did I say Biscuit's vet is?", session=session,
                              run_config=session.run_config(), hooks=session.hooks)

- ``MemorySession`` implements the SDK's ``Session`` protocol: each item the SDK adds is
  captured as a turn (its text searchable, the item itself kept verbatim in the turn's
  metadata), and ``get_items`` gives the items back. Memory is append-only: ``pop_item`` and
  ``clear_session`` change what the session returns (the view is a cursor in the store, so
  it survives restarts) while the turns stay in long-term memory.
- ``session.input_filter`` (set by ``session.run_config()`` as ``call_model_input_filter``)
  appends the memory block to the instructions of every model call; the block never enters
  the session's items, so it is never captured back.
- ``session.hooks`` (``RunHooks``) records each agent used as a tool (``Agent.as_tool``) as
  one sub-agent row: launched at the tool call, settled when it returns (``failed`` when the
  sub-agent raised and the SDK answered the call with its failure text). Its execution id is
  the id of the call's span in the run's trace; with tracing disabled the SDK gives the call no
  identity, so the row is kept under ``'unknown'`` and counted in ``unknown_execution``.

Nothing here lets a memory failure reach the run: it is logged and the run goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import install_hint

try:
    from agents import RunConfig, RunHooks, default_tool_error_function
    from agents.run import CallModelData, ModelInputData
    from agents.tool import FunctionTool, ToolOriginType, get_function_tool_origin
    from agents.tracing import get_current_span
    from agents.tracing.spans import NoOpSpan
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "tortoise_sdk.adapters.openai_agents needs the OpenAI Agents SDK: " + install_hint("openai-agents")
    ) from exc

from ..errors import AdapterError, NotFoundError
from ..models import OPENAI_AGENTS_CURSOR, MemoryBlock, SearchHit, starts_with_memory_block, utc_now
from ..memory import storable
from ._common import MemoryAdapter, check_session_id

if TYPE_CHECKING:
    from ..memory import ExtractMode, Memory

__all__ = ("MemoryRunHooks", "MemorySession")

log = logging.getLogger(__name__)

#: The key of a turn's metadata that holds the SDK item it was captured from.
ITEM_KEY = "openai_agents_item"


class MemorySession(MemoryAdapter):
    """One conversation of the OpenAI Agents SDK, kept in tortoise (the SDK's ``Session`` protocol).

    Args:
        mem: the ``Memory`` to read and write.
        session_id: the conversation's id in the store.
        budget, max_tokens: passed to ``Memory.context`` for the block before each model call.
        window_turns: how many recent messages form the reflex window.
        extract: ``Memory.capture``'s ``extract`` for the captured items (default ``"background"``).
    """

    session_settings = None

    def __init__(
        self,
        mem: Memory,
        session_id: str,
        *,
        budget: int = 3,
        max_tokens: int = 400,
        window_turns: int = 6,
        extract: ExtractMode = "background",
    ) -> None:
        super().__init__(mem, budget=budget, max_tokens=max_tokens, window_turns=window_turns, extract=extract)
        check_session_id(session_id)
        self.session_id = session_id
        self.hooks = MemoryRunHooks(mem, session_id)
        # One block per user message (see ``_block``), dropped when a user message is added: a new run.
        self._cache: tuple[tuple[int, str], MemoryBlock] | None = None

    # -- the Session protocol ----------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The session's items, oldest first (the latest ``limit`` when given); none when the store fails."""
        if limit is not None and limit <= 0:
            return []
        try:
            items = [item for _, item in await asyncio.to_thread(self._visible, limit)]
        except Exception as exc:  # noqa: BLE001 - the run goes on without its history
            log.warning("tortoise: session items not read: %s", exc)
            return []
        return items if limit is None else items[-limit:]

    async def add_items(self, items: list[Any]) -> None:
        """Capture the items as turns (one transaction); an item just popped and added back is restored."""
        await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> dict[str, Any] | None:
        """Take the latest item out of the session's view and return it (its turn stays in memory)."""
        try:
            return await asyncio.to_thread(self._pop)
        except Exception as exc:  # noqa: BLE001 - nothing popped: the SDK treats None as an empty session
            log.warning("tortoise: session item not popped: %s", exc)
            return None

    async def clear_session(self) -> None:
        """Start the session's view afresh (its turns stay in memory, searchable)."""
        try:
            await asyncio.to_thread(self._clear)
        except Exception as exc:  # noqa: BLE001
            log.warning("tortoise: session not cleared: %s", exc)

    # -- the memory block before each model call --------------------------------------------------

    async def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: the model input with the memory block after the instructions."""
        model_data = data.model_data
        try:
            block = await asyncio.to_thread(self._block, model_data.input)
        except Exception as exc:  # context() fails open itself; this guards odd input
            self._block_skipped(exc)
            return model_data
        if not block.block:
            return model_data
        instructions = f"{model_data.instructions}\n\n{block.block}" if model_data.instructions else block.block
        return ModelInputData(input=model_data.input, instructions=instructions)

    def run_config(self, config: RunConfig | None = None) -> RunConfig:
        """``config`` (default a new ``RunConfig``) with ``input_filter`` as its ``call_model_input_filter``.

        Raises:
            AdapterError: ``config`` already has a filter (the message says how to chain the two).
        """
        config = config or RunConfig()
        if config.call_model_input_filter is not None:
            raise AdapterError("the RunConfig already has a call_model_input_filter; call it from your own filter "
                             "after awaiting session.input_filter(data)")
        return dataclasses.replace(config, call_model_input_filter=self.input_filter)

    # -- internals (run in a worker thread: the store calls block) ---------------------------------

    def _block(self, items: Sequence[Any]) -> MemoryBlock:
        messages = [(at, m) for at, m in enumerate(_message(i) for i in items) if m is not None]
        window = self._window(m for _, m in messages)
        # One block per user message: the tool-call round trips of one run see the same block. The SDK copies the
        # items for each call, and a question asked again is a new run (its block may differ): the key is where
        # the user message is and what it says, and adding a user message (a run's input) drops the cache.
        key = next(((at, m["content"]) for at, m in reversed(messages) if m["role"] == "user"), (-1, ""))
        if self._cache is not None and self._cache[0] == key:
            self.last_block = self._cache[1]
            return self._cache[1]
        held = (_turn(i) for i in (_plain(i) for i in items if isinstance(i, Mapping) or hasattr(i, "model_dump")))
        self.last_block = block = self._context(window, self.session_id, held)
        self._cache = (key, block)
        return block

    def _view(self) -> Any:
        return self.mem.cursor(f"{OPENAI_AGENTS_CURSOR}{self.session_id}")

    def _visible(self, limit: int | None = None) -> list[tuple[str, dict[str, Any]]]:
        """(turn id, item) of the turns the session's view shows; with ``limit``, at least its latest ``limit`` of
        them (all when fewer), read from the session's tail: a run with ``SessionSettings(limit=...)`` costs what
        its items do, not what the session does."""
        view = self._view().value
        start, hidden = int(view.get("start") or 0), set(view.get("hidden") or ())
        if limit is None:
            return self._shown(self.mem.turns(self.session_id)[start:], hidden)
        tail = limit + len(hidden) + _TAIL_SLACK
        while True:
            turns = self.mem.turns(self.session_id, last=tail)
            complete = len(turns) < tail or (bool(turns) and turns[0].index <= start)
            shown = self._shown([t for t in turns if t.index >= start], hidden)
            if complete or len(shown) >= limit:
                return shown
            tail *= 4  # turns the view does not show (hidden, or never an item): read further back

    def _shown(self, turns: list[SearchHit], hidden: set[str]) -> list[tuple[str, dict[str, Any]]]:
        """(turn id, item) of ``turns`` (a run of a session's turns, in order) but those in ``hidden``."""
        metadata = (self.mem.turn_metadata(self.session_id, start=turns[0].index, stop=turns[-1].index + 1)
                    if turns else {})
        shown = []
        for hit in turns:
            if hit.turn_id in hidden:
                continue
            item = (metadata.get(hit.turn_id) or {}).get(ITEM_KEY)
            if item is None and hit.role in ("user", "assistant", "system"):
                item = {"role": hit.role, "content": hit.content}  # a turn captured by other means
            if item is not None:
                shown.append((hit.turn_id, item))
        return shown

    def _add(self, items: list[Any]) -> None:
        plain = []
        for i in items:  # an item that is not one is named and left out; the rest of the batch is captured
            try:
                plain.append(_plain(i))
            except (TypeError, ValueError) as exc:
                log.warning("tortoise: session item not captured: %s", exc)
        items = plain
        if any(i.get("role") == "user" and i.get("type", "message") == "message" for i in items):
            self._cache = None  # a new run's input: its model calls get a block of their own
        try:
            items = self._restore(items)
        except Exception as exc:  # noqa: BLE001 - the run goes on; the items are logged as lost
            log.warning("tortoise: session items not restored: %s", exc)
        turns = [_turn(i) for i in items]
        try:
            turns = self._runs_own_call_ids(turns)
        except Exception as exc:  # noqa: BLE001 - captured under the call ids alone
            log.warning("tortoise: call ids of this run not told apart from earlier runs': %s", exc)
        self._capture(self.session_id, turns)

    def _runs_own_call_ids(self, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``turns`` with each function call and output whose call id an earlier run used given this run's id
        (``_run_call_id``); the latest user message before a turn starts its run."""
        ids = [t["id"] for t in turns if t["id"].startswith(_CALL_PREFIXES)]
        if not ids:
            return turns  # no store read
        run, after = _latest_run(self.mem, self.session_id)
        at = {t.external_id: t.index for t in self.mem.turns(self.session_id, external_ids=ids)}
        for offset, turn in enumerate(turns):
            if turn["role"] == "user":
                run = after + offset
            elif turn["id"].startswith(_CALL_PREFIXES):
                turn["id"] = _run_call_id(turn["id"], at, run)
        return turns

    def _restore(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Un-hide popped turns whose items come back (the SDK re-adds what it popped on a retry)."""
        for _ in range(3):
            view = self._view()
            hidden = list(view.value.get("hidden") or [])
            if not hidden:
                return items
            rest = list(items)
            while rest and hidden and (self._metadata(hidden[-1]) or {}).get(ITEM_KEY) == storable(rest[0]):
                hidden.pop()
                rest.pop(0)
            if len(rest) == len(items):
                return items
            if self.mem.save_cursor(view.name, {**view.value, "hidden": hidden}, revision=view.revision):
                return rest
        raise RuntimeError("the session view kept changing under this process")

    def _metadata(self, turn_id: str) -> dict[str, Any] | None:
        """The metadata turn ``turn_id`` of the session was captured with; None when it is not stored."""
        try:
            at = self.mem.store.get_turn(self.mem.namespace, turn_id).index
        except NotFoundError:
            return None
        return self.mem.turn_metadata(self.session_id, start=at, stop=at + 1).get(turn_id)

    def _pop(self) -> dict[str, Any] | None:
        for _ in range(3):
            view = self._view()
            visible = self._visible(1)
            if not visible:
                return None
            turn_id, item = visible[-1]
            hidden = [*(view.value.get("hidden") or []), turn_id]
            if self.mem.save_cursor(view.name, {**view.value, "hidden": hidden}, revision=view.revision):
                return item
        raise RuntimeError("the session view kept changing under this process")

    def _clear(self) -> None:
        for _ in range(3):
            view = self._view()
            latest = self.mem.turns(self.session_id, last=1)
            count = latest[-1].index + 1 if latest else 0
            if self.mem.save_cursor(view.name, {"start": count, "hidden": []}, revision=view.revision):
                return
        raise RuntimeError("the session view kept changing under this process")


class MemoryRunHooks(RunHooks[Any]):
    """Records each agent used as a tool (``Agent.as_tool``) as one sub-agent row of ``session_id``.

    A launch frame at the tool call, a settled frame (with its duration) when it returns: ``completed``, or
    ``failed`` when the sub-agent raised (see ``_tool_failed`` for what the SDK lets the hooks tell);
    both carry the tool call's id and its span id in the run's trace (the execution id, as a
    LangChain tool run's id is), so they merge into one row, and two runs that reuse a call id
    keep two. Structure only: neither the tool's input nor its output is recorded.
    """

    def __init__(self, mem: Memory, session_id: str) -> None:
        self.mem = mem
        self.session_id = session_id
        self._started: dict[str, float] = {}

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        frame = self._frame(context, tool)
        if frame is not None:
            self._started[frame["tool_call_id"]] = time.monotonic()
            await asyncio.to_thread(self._record, frame)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        frame = self._frame(context, tool)
        if frame is not None:
            started = self._started.pop(frame["tool_call_id"], None)
            elapsed = None if started is None else round((time.monotonic() - started) * 1000)
            status = "failed" if _tool_failed(context, tool, result) else "completed"
            await asyncio.to_thread(self._record, {**frame, "tool_status": status, "agent_status": status,
                                                   "duration_ms": elapsed or None})

    def _frame(self, context: Any, tool: Any) -> dict[str, Any] | None:
        if not isinstance(tool, FunctionTool):
            return None
        origin = get_function_tool_origin(tool)
        call_id = getattr(context, "tool_call_id", None)
        if origin is None or origin.type != ToolOriginType.AGENT_AS_TOOL or not call_id:
            return None
        return {"session_id": self.session_id, "tool_call_id": call_id, "agent_execution_id": _run_id(),
                "turn_external_id": _call_turn_id(call_id), "subagent_type": origin.agent_name,
                "description": origin.agent_tool_name or tool.name, "source": "live", "observed_at": utc_now()}

    def _record(self, frame: dict[str, Any]) -> None:
        try:
            # The function call's turn is captured after the tool ran; its id is this run's (as _add gives it).
            call = frame["turn_external_id"]
            run, _ = _latest_run(self.mem, self.session_id)
            stored = self.mem.turns(self.session_id, external_ids=[call])
            frame["turn_external_id"] = _run_call_id(call, {t.external_id: t.index for t in stored}, run)
            self.mem.record_subagent(frame)
        except Exception as exc:  # noqa: BLE001 - record_subagent fails open; this guards a malformed frame
            log.warning("tortoise: sub-agent frame not recorded: %s", exc)


def _tool_failed(context: Any, tool: FunctionTool, result: object) -> bool:
    """Whether the sub-agent raised: the SDK then ends the tool call with its failure function's text.

    The SDK's hooks have no error callback. With tracing on, the call's span carries the error; with it
    off, a failure is known only when the tool kept the SDK's default failure function, whose fixed
    sentence is then the result (a custom one's text is not recognisable, and the row says completed).
    """
    span = get_current_span()
    if span is not None and not isinstance(span, NoOpSpan) and getattr(span, "error", None):
        return True
    try:
        from agents.tool import resolve_function_tool_failure_error_function

        handler = resolve_function_tool_failure_error_function(tool, context)
    except Exception:  # noqa: BLE001 - an SDK without it: the span was the only sign
        return False
    return handler is default_tool_error_function and result == default_tool_error_function(context, Exception())


# -- items <-> turns ----------------------------------------------------------------------------------


def _plain(item: Any) -> dict[str, Any]:
    """An input item as a JSON-able dict (the SDK passes dicts; pydantic items are dumped)."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(exclude_unset=True, mode="json")
    if not isinstance(item, Mapping):
        raise TypeError(f"not a session item: {type(item).__name__}")
    return json.loads(json.dumps(item, default=str))


def _run_id() -> str | None:
    """The span id of the tool call being run (the SDK's function span, current in the tool hooks); None when
    tracing is disabled (a no-op span has no id). Unlike the trace id, it differs between two runs in one trace."""
    span = get_current_span()
    if span is None or isinstance(span, NoOpSpan):
        return None
    return getattr(span, "span_id", None) or None


def _call_turn_id(call_id: str) -> str:
    """The turn id of the function call ``call_id`` (its sub-agent row names it as the launching turn), unless an
    earlier run used the call id (``_run_call_id``)."""
    return f"fc-{call_id}"


_CALL_PREFIXES = ("fc-", "fco-")

#: How many of a session's latest turns a bounded read starts with (beyond what it needs); it reads four times as
#: many while they do not settle it.
_TAIL_SLACK = 16
_TAIL_FIRST = 64


def _latest_run(mem: Memory, session_id: str) -> tuple[int, int]:
    """(the position of the session's latest user message, -1 without one; the position its next turn takes), read
    from the session's tail: the latest user message starts the run, and is a run's length back, not the session's."""
    tail = _TAIL_FIRST
    while True:
        stored = mem.turns(session_id, last=tail)
        after = stored[-1].index + 1 if stored else 0
        run = max((t.index for t in stored if t.role == "user"), default=-1)
        if run >= 0 or len(stored) < tail:
            return run, after
        tail *= 4


def _run_call_id(turn_id: str, stored: Mapping[str | None, int], run: int) -> str:
    """``turn_id`` (``fc-<call id>``, ``fco-<call id>``) of a run whose user message is turn ``run``: as it is, or
    ``<turn id>@<run>`` when an earlier run stored it (``stored``: turn index by id). A provider that numbers its
    calls from ``call_0`` in each run reuses them: the second run's call and output were taken for the first's."""
    return f"{turn_id}@{run}" if stored.get(turn_id, run) < run else turn_id


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, Mapping)).strip()
    return ""


def _message(item: Any) -> dict[str, str] | None:
    """A user or assistant message item as ``{"role", "content"}`` for the reflex window; None for anything else."""
    if not isinstance(item, Mapping) or item.get("role") not in ("user", "assistant"):
        return None
    if item.get("type", "message") != "message":
        return None
    text = _text(item.get("content"))
    return {"role": str(item["role"]), "content": text} if text.strip() else None


def _turn(item: dict[str, Any]) -> dict[str, Any] | None:
    """The turn an item is captured as: its text (or a summary) as content, the item whole in the metadata."""
    kind = item.get("type") or ("message" if "role" in item else "item")
    metadata: dict[str, Any] = {ITEM_KEY: item}
    if kind == "message":
        role = {"developer": "system"}.get(str(item.get("role")), str(item.get("role") or "user"))
        if role not in ("user", "assistant", "system"):
            role = "user"
        content = _text(item.get("content"))
        if starts_with_memory_block(content):
            metadata["tortoise"] = "memory_block"  # an echo of memory, never evidence
        turn_id = f"m-{uuid.uuid4().hex}"
    elif kind == "function_call":
        role, content = "assistant", f"[tool_use {item.get('name')} {item.get('arguments') or ''}]".strip()
        turn_id = _call_turn_id(str(item.get("call_id"))) if item.get("call_id") else f"m-{uuid.uuid4().hex}"
    elif kind == "function_call_output":
        output = item.get("output")
        role, content = "tool", output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        turn_id = f"fco-{item['call_id']}" if item.get("call_id") else f"m-{uuid.uuid4().hex}"
    else:
        summary = _text(item.get("summary")) or _text(item.get("content"))
        role, content = "assistant", f"[{kind}] {summary}".strip()
        turn_id = f"m-{uuid.uuid4().hex}"
    return {"role": role, "content": content or f"[{kind}]", "id": turn_id, "metadata": metadata}
