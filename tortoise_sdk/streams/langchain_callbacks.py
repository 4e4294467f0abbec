"""A LangChain callback handler that reports agent-as-tool runs as ``SubagentFrame``s.

Needs the ``langchain`` extra (``pip install 'tortoise-sdk[langchain]'``).

A tool counts as a sub-agent when its name is in ``agent_tools`` (default:
``task`` as in deepagents, ``Task``, ``Agent``) or a predicate says so. Its
frame identity is the session (``session_id=``, else ``metadata.session_id`` /
``metadata.thread_id`` of the run), the tool's ``run_id`` as the execution id,
and the ``tool_call_id`` LangChain passes to ``on_tool_start``; a tool invoked
without a tool call has no identity and the recorder will skip its frames.

Frames go to ``sink`` at start (``tool_status="running"``) and at end or error
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
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

from tortoise_sdk.models import utc_now
from tortoise_sdk.streams.base import FrameSource, SubagentFrame, as_int, as_str

__all__ = ("DEFAULT_AGENT_TOOLS", "SubagentCallbackHandler")

logger = logging.getLogger(__name__)

#: Tool names treated as sub-agents by default.
DEFAULT_AGENT_TOOLS: frozenset[str] = frozenset({"task", "Task", "Agent"})


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
        agent_tools: tool names, or ``predicate(name, inputs) -> bool``.
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
        source: FrameSource = "live",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.session_id = session_id
        self.source: FrameSource = source
        self.sink_errors = 0
        self._agent_tools = agent_tools
        self._clock = clock
        self._lock = threading.Lock()
        self._parents: dict[UUID, UUID | None] = {}
        self._agents: dict[UUID, _AgentRun] = {}

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
        with self._lock:
            self._parents[run_id] = parent_run_id
            agents = self._agent_ancestors(parent_run_id)
            if agents and model:
                agents[0].model = model

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
            if not self._is_agent(name, args):
                return
            run = _AgentRun(
                session_id=self.session_id or as_str(metadata.get("session_id")) or as_str(metadata.get("thread_id")),
                tool_call_id=as_str(kwargs.get("tool_call_id")) or as_str(args.get("tool_call_id")),
                name=name,
                parent_tool_call_id=enclosing[0].tool_call_id if enclosing else None,
                subagent_type=as_str(args.get("subagent_type")) or name or None,
                description=as_str(args.get("description")),
                started=self._clock(),
            )
            self._agents[run_id] = run
        self._emit(self._frame(run_id, run, tool_status="running"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        status = as_str(getattr(output, "status", None)) or "completed"
        self._finish(run_id, status)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._finish(run_id, "error")

    def _finish(self, run_id: UUID, status: str) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
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
