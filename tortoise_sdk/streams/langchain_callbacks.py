"""A LangChain callback handler that reports agent-as-tool runs as ``SubagentFrame``s.

Needs the ``langchain`` extra (``pip install 'tortoise-sdk[langchain]'``).

A tool counts as a sub-agent when a chat model runs under it (a ``create_agent``
graph, or any Runnable that itself calls a model, seen in the callback tree: no
naming needed; ``detect_agents=False`` turns this off), or at once when its name is
in ``agent_tools`` (default: ``task`` as in deepagents, ``Task``, ``Agent``) or a
predicate says so. ``observing()`` attaches the handler to every run started
inside it (a LangChain configure hook), which is how ``MemoryMiddleware`` watches
each tool call of an agent. Its
frame identity is the session (``session_id=``, else ``metadata.session_id`` /
``metadata.thread_id`` of the run), the tool's ``run_id`` as the execution id,
and the ``tool_call_id`` LangChain passes to ``on_tool_start``; a tool invoked
without a tool call has no identity and the recorder will skip its frames.

Frames go to ``sink`` at start (``tool_status="running"``; for a detected agent, at
its first model call) and at end or error
(``success``/``error`` from the ``ToolMessage``, else ``completed``), with

- ``total_tokens``: summed from every model call under the tool's run (None if
  no call reported usage),
- ``tool_use_count``: tools the sub-agent itself called (nested calls count for
  the nearest agent only),
- ``duration_ms``: wall time from start to end,
- ``model``: the last model name seen under the run,
- ``parent_tool_call_id``: the enclosing agent tool's call, when nested.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.context import register_configure_hook

from tortoise_sdk.models import utc_now
from tortoise_sdk.streams.base import FrameSource, SubagentFrame, as_int, as_str

__all__ = ("DEFAULT_AGENT_TOOLS", "SubagentCallbackHandler")

logger = logging.getLogger(__name__)

#: Tool names treated as sub-agents by default.
DEFAULT_AGENT_TOOLS: frozenset[str] = frozenset({"task", "Task", "Agent"})

# The handler ``observing()`` attaches (inheritably) to every run LangChain configures meanwhile.
_OBSERVING: ContextVar[BaseCallbackHandler | None] = ContextVar("tortoise_subagent_observer", default=None)
register_configure_hook(_OBSERVING, True)


@dataclass
class _AgentRun:
    session_id: str | None
    tool_call_id: str | None
    name: str
    parent_tool_call_id: str | None
    subagent_type: str | None
    description: str | None
    started: float
    tokens: int | None = None
    tool_uses: int = 0
    model: str | None = None
    turn_external_id: str | None = None


def _usage_tokens(response: LLMResult) -> int | None:
    total: int | None = None
    for generations in response.generations:
        for generation in generations:
            usage = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
            tokens = as_int(usage.get("total_tokens"))
            if tokens is not None:
                total = (total or 0) + tokens
    if total is None:
        output = response.llm_output or {}
        usage = output.get("token_usage") or output.get("usage") or {}
        if isinstance(usage, dict):
            total = as_int(usage.get("total_tokens"))
    return total


class SubagentCallbackHandler(BaseCallbackHandler):
    """Reports tools that are agents as ``SubagentFrame``s to ``sink``.

    Usage::

        handler = SubagentCallbackHandler(recorder.record, session_id="s1")
        graph.invoke(inputs, config={"callbacks": [handler]})

    Parameters:
        sink: called with each frame; its exceptions are logged and counted, never raised.
        session_id: the session; else the run's ``metadata.session_id`` or ``thread_id``.
        agent_tools: tool names, or ``predicate(name, inputs) -> bool``, that are agents from their start.
        detect_agents: any other tool is an agent once a chat model runs under it.
        turn_external_id: the id of the message that made the (outermost) tool call, when known.
        source: ``live`` (default) or ``backfill``.
    """

    raise_error = False
    run_inline = True  # keeps callback order for async runs; the work here is tiny

    def __init__(
        self,
        sink: Callable[[SubagentFrame], Any],
        *,
        session_id: str | None = None,
        agent_tools: Collection[str] | Callable[[str, dict[str, Any]], bool] = DEFAULT_AGENT_TOOLS,
        detect_agents: bool = True,
        turn_external_id: str | None = None,
        source: FrameSource = "live",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.session_id = session_id
        self.detect_agents = detect_agents
        self.turn_external_id = turn_external_id
        self.source: FrameSource = source
        self.sink_errors = 0
        self._agent_tools = agent_tools
        self._clock = clock
        self._lock = threading.Lock()
        self._parents: dict[UUID, UUID | None] = {}
        self._agents: dict[UUID, _AgentRun] = {}
        # Tools running now that are not (yet) agents: one becomes an agent at its first model call.
        self._tools: dict[UUID, _AgentRun] = {}

    @contextmanager
    def observing(self) -> Iterator[SubagentCallbackHandler]:
        """Attach this handler to every LangChain run started inside the block (and their children)."""
        token = _OBSERVING.set(self)
        try:
            yield self
        finally:
            _OBSERVING.reset(token)

    # -- run tree --------------------------------------------------------------------

    def _is_agent(self, name: str, inputs: dict[str, Any]) -> bool:
        if callable(self._agent_tools):
            return bool(self._agent_tools(name, inputs))
        return name in self._agent_tools

    def _enter(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        with self._lock:
            self._parents[run_id] = parent_run_id

    def _leave(self, run_id: UUID) -> None:
        with self._lock:
            self._parents.pop(run_id, None)

    def _agent_ancestors(self, run_id: UUID | None) -> list[_AgentRun]:
        found, seen = [], set()
        while run_id is not None and run_id not in seen:
            seen.add(run_id)
            if run_id in self._agents:
                found.append(self._agents[run_id])
            run_id = self._parents.get(run_id)
        return found

    def _emit(self, frame: SubagentFrame) -> None:
        try:
            self.sink(frame)
        except Exception:  # a recorder failure must never break the agent run
            self.sink_errors += 1
            logger.warning("subagent frame sink failed", exc_info=True)

    def _frame(self, run_id: UUID, run: _AgentRun, **fields: Any) -> SubagentFrame:
        return SubagentFrame(
            session_id=run.session_id,
            tool_call_id=run.tool_call_id,
            agent_execution_id=str(run_id),
            parent_tool_call_id=run.parent_tool_call_id,
            subagent_type=run.subagent_type,
            description=run.description,
            model=run.model,
            turn_external_id=run.turn_external_id,
            source=self.source,
            observed_at=utc_now(),
            **fields,
        )

    # -- callbacks ---------------------------------------------------------------------

    def on_chain_start(
        self, serialized: dict[str, Any], inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._enter(run_id, parent_run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_retriever_start(
        self, serialized: dict[str, Any], query: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._enter(run_id, parent_run_id)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(serialized, run_id, parent_run_id, metadata)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(serialized, run_id, parent_run_id, metadata)

    def _model_start(
        self,
        serialized: dict[str, Any] | None,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        kwargs = (serialized or {}).get("kwargs") or {}
        model = (
            as_str((metadata or {}).get("ls_model_name"))
            or as_str(kwargs.get("model"))
            or as_str(kwargs.get("model_name"))
        )
        promoted: tuple[UUID, _AgentRun] | None = None
        with self._lock:
            self._parents[run_id] = parent_run_id
            if self.detect_agents:
                promoted = self._promote(parent_run_id)
            agents = self._agent_ancestors(parent_run_id)
            if agents and model:
                agents[0].model = model
        if promoted is not None:
            self._emit(self._frame(*promoted, tool_status="running"))

    def _promote(self, run_id: UUID | None) -> tuple[UUID, _AgentRun] | None:
        """The nearest tool above a model call becomes an agent (if it is not one yet); under ``_lock``."""
        seen: set[UUID] = set()
        while run_id is not None and run_id not in seen:
            seen.add(run_id)
            if run_id in self._agents:
                return None
            if run_id in self._tools:
                run = self._tools.pop(run_id)
                self._agents[run_id] = run
                return run_id, run
            run_id = self._parents.get(run_id)
        return None

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        tokens = _usage_tokens(response)
        with self._lock:
            if tokens is not None:
                for agent in self._agent_ancestors(self._parents.get(run_id, parent_run_id)):
                    agent.tokens = (agent.tokens or 0) + tokens
            self._parents.pop(run_id, None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "")
        args = inputs if isinstance(inputs, dict) else {}
        metadata = metadata or {}
        with self._lock:
            self._parents[run_id] = parent_run_id
            enclosing = self._agent_ancestors(parent_run_id)
            if enclosing:
                enclosing[0].tool_uses += 1
            named = self._is_agent(name, args)
            if not named and not self.detect_agents:
                return
            run = _AgentRun(
                session_id=self.session_id or as_str(metadata.get("session_id")) or as_str(metadata.get("thread_id")),
                tool_call_id=as_str(kwargs.get("tool_call_id")) or as_str(args.get("tool_call_id")),
                name=name,
                parent_tool_call_id=enclosing[0].tool_call_id if enclosing else None,
                subagent_type=as_str(args.get("subagent_type")) or name or None,
                description=as_str(args.get("description")),
                started=self._clock(),
                turn_external_id=None if enclosing else self.turn_external_id,
            )
            (self._agents if named else self._tools)[run_id] = run
        if named:
            self._emit(self._frame(run_id, run, tool_status="running"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        status = as_str(getattr(output, "status", None)) or "completed"
        self._finish(run_id, status)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._finish(run_id, "error")

    def _finish(self, run_id: UUID, status: str) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            self._tools.pop(run_id, None)
            run = self._agents.pop(run_id, None)
        if run is None:
            return
        self._emit(
            self._frame(
                run_id,
                run,
                tool_status=status,
                total_tokens=run.tokens,
                tool_use_count=run.tool_uses,
                duration_ms=int((self._clock() - run.started) * 1000),
            )
        )
