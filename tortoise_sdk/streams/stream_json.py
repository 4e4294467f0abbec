"""Claude Agent SDK / ``claude -p --output-format stream-json`` messages into turns and sub-agent frames.

The messages are those of a Claude Code transcript with snake_case envelopes:
``session_id``, ``parent_tool_use_id`` (set on a sub-agent's own messages) and
``tool_use_result``. A sub-agent's own messages become turns of the session
``<session_id>:task-<parent_tool_use_id>``. Sub-agent lifecycle also comes as ``system`` messages:
``task_started`` (task_id, tool_use_id, description, task_type),
``task_progress`` and ``task_notification`` (usage {total_tokens, tool_uses,
duration_ms}, status), and ``task_updated`` (a ``patch``). Background shells
produce the same task messages; only tasks of an agent tool become frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tortoise_sdk.streams.base import (
    AGENT_TOOL_NAMES,
    Event,
    as_dict,
    as_int,
    as_str,
)
from tortoise_sdk.streams.claude_code import ClaudeCodeParser

__all__ = ("TASK_SUBTYPES", "StreamJsonParser")

#: ``system`` subtypes that describe a background task.
TASK_SUBTYPES: frozenset[str] = frozenset({"task_started", "task_progress", "task_notification", "task_updated"})

class StreamJsonParser(ClaudeCodeParser):
    """Parses Claude Agent SDK stream-json lines."""

    format = "stream-json"
    SESSION_KEY = "session_id"
    RESULT_KEY = "tool_use_result"
    SKIP_REASONS = {
        "result": "run result summary",
        "stream_event": "partial stream event (the whole message follows)",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tool_of_task: dict[str, str] = {}
        self._task_type: dict[str, str] = {}

    def index(self, line: int, obj: dict[str, Any]) -> None:
        super().index(line, obj)
        if obj.get("type") == "system" and as_str(obj.get("subtype")) in TASK_SUBTYPES:
            task_id, tool_id = as_str(obj.get("task_id")), as_str(obj.get("tool_use_id"))
            if task_id and tool_id:
                self._tool_of_task.setdefault(task_id, tool_id)
            if task_id and as_str(obj.get("task_type")):
                self._task_type.setdefault(task_id, obj["task_type"])

    def index_state(self) -> dict[str, Any] | None:
        return {**(super().index_state() or {}), "tool_of_task": dict(self._tool_of_task),
                "task_type": dict(self._task_type)}

    def load_index_state(self, state: Mapping[str, Any]) -> None:
        super().load_index_state(state)
        for k, v in as_dict(state.get("tool_of_task")).items():
            self._tool_of_task.setdefault(k, str(v))
        for k, v in as_dict(state.get("task_type")).items():
            self._task_type.setdefault(k, str(v))

    def _parent_of(self, obj: dict[str, Any]) -> str | None:
        return as_str(obj.get("parent_tool_use_id"))

    def _turn_session(self, session_id: str, obj: dict[str, Any], parent: str | None) -> str:
        # Known from the line itself, so live and batch parsing agree.
        return f"{session_id}:task-{parent}" if parent else session_id

    def _feed(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        msg_type = obj.get("type")
        if msg_type in ("user", "assistant"):
            return self._message_events(line, obj, kind)
        if msg_type == "system" and as_str(obj.get("subtype")) in TASK_SUBTYPES:
            return self._task_events(line, obj, kind)
        return self._skip_line(line, obj, kind)

    def _task_events(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        subtype = obj["subtype"]
        task_id = as_str(obj.get("task_id"))
        tool_id = (
            as_str(obj.get("tool_use_id"))
            or self._tool_of_task.get(task_id or "")
            or self._tool_of_agent.get(task_id or "")
        )
        tool = self._tools.get(tool_id or "")
        task_type = as_str(obj.get("task_type")) or self._task_type.get(task_id or "")
        patch = as_dict(obj.get("patch"))
        usage = as_dict(obj.get("usage")) or as_dict(patch.get("usage"))
        if tool is not None:
            is_agent = tool.name in AGENT_TOOL_NAMES
        else:
            is_agent = "agent" in (task_type or "").lower() or "total_tokens" in usage
        if not is_agent:
            self._skip(line, kind, "task of a non-agent tool")
            return []
        status = as_str(obj.get("status")) if subtype == "task_notification" else as_str(patch.get("status"))
        session = self._session(obj)
        return [
            self._tool_frame(
                line,
                obj,
                session,
                tool_id,
                agent_id=self._agent_of_tool.get(tool_id or "") or task_id,
                # task_progress descriptions narrate progress; only task_started carries the label.
                description=as_str(obj.get("description")) if subtype == "task_started" else None,
                agent_status=status,
                total_tokens=as_int(usage.get("total_tokens")),
                tool_use_count=as_int(usage.get("tool_uses")),
                duration_ms=as_int(usage.get("duration_ms")),
            )
        ]
