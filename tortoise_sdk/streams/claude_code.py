"""Claude Code transcript JSONL (``~/.claude/projects/<project>/<session>.jsonl``) into turns and sub-agent frames.

What a transcript gives, per line ``type``:

- ``assistant``: one content block per line (text, thinking, tool_use); a
  ``tool_use`` named ``Task`` or ``Agent`` launches a sub-agent
  (``input.description/subagent_type/model/run_in_background``).
- ``user``: the user's text, or a ``tool_result``; the launching call's result
  carries a top-level ``toolUseResult`` {status, agentId, totalTokens,
  totalDurationMs, totalToolUseCount, ...} and ``sourceToolAssistantUUID``.
  A ``<task-notification>`` in user text reports a background agent's end.
- ``progress`` with ``data.type == "agent_progress"``: the running child's
  messages, linked by ``parentToolUseID`` and ``data.agentId``; each is a frame
  and a turn of ``<sessionId>:agent-<agentId>`` (id: the inner message's uuid,
  metadata ``subagent: True``, so never memory grounding).
- ``system`` (``compact_boundary``, ``local_command``...), ``file-history-snapshot``,
  ``summary`` (a title for a branch, ``leafUuid``), ``queue-operation``: bookkeeping,
  counted in the report.

User-role lines that Claude Code writes itself are kept as ``system`` turns with
metadata ``not_evidence`` (why), so they never ground a memory nor stand for what the
user said: the compaction summary (``isCompactSummary``, after a ``compact_boundary``),
``isVisibleInTranscriptOnly`` and ``isMeta`` lines (command caveats, skill text), a
``<task-notification>``, and local command output (``<local-command-stdout>``).

Turn ids are the line's ``uuid``. Thinking blocks are not turned into text.
Sidechain lines (a sub-agent's own file) go to the session ``<sessionId>:agent-<agentId>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from tortoise_sdk.models import Role, Turn, tool_use_text
from tortoise_sdk.streams.base import (
    AGENT_TOOL_NAMES,
    Event,
    StreamParser,
    SubagentFrame,
    as_bool,
    as_dict,
    as_int,
    as_str,
    shorten,
)

__all__ = (
    "LAUNCH_STATUSES",
    "ClaudeCodeParser",
    "agent_result_fields",
    "summarize_tool_result",
    "summarize_tool_use",
)

#: ``toolUseResult.status`` values of a launch that has not run yet: it reports no usage.
LAUNCH_STATUSES: frozenset[str] = frozenset({"async_launched", "remote_launched"})

_NOTIFICATION_RE = re.compile(r"<task-notification>(.*?)</task-notification>", re.S)
_USAGE_RE = re.compile(r"(total_tokens|tool_uses|duration_ms)\s*:\s*(-?\d+)")
_COMMAND_OUTPUT_RE = re.compile(r"\s*(?:<(local-command-(?:stdout|stderr|caveat))>.*?</\1>\s*)+", re.S)


class _ToolUse(NamedTuple):
    name: str
    turn_uuid: str | None
    parent: str | None


def agent_result_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """Frame fields from a Task/Agent tool result payload (``toolUseResult`` / ``toolResponse``).

    A launch (``async_launched``) reports no usage, so its metrics stay None even
    when the payload carries placeholder zeros.
    """
    status = as_str(payload.get("status"))
    launched = status in LAUNCH_STATUSES or payload.get("isAsync") is True
    fields: dict[str, Any] = {
        "agent_status": status,
        "agent_id": as_str(payload.get("agentId")) or as_str(payload.get("resumedAgentId")),
        "model": as_str(payload.get("resolvedModel")),
        "subagent_type": as_str(payload.get("agentType")),
        "is_async": True if launched else as_bool(payload.get("isAsync")),
    }
    if not launched:
        fields["total_tokens"] = as_int(payload.get("totalTokens"))
        fields["duration_ms"] = as_int(payload.get("totalDurationMs"))
        fields["tool_use_count"] = as_int(payload.get("totalToolUseCount"))
    return {k: v for k, v in fields.items() if v is not None}


def _looks_like_agent_result(payload: Any) -> bool:
    return isinstance(payload, dict) and "agentId" in payload and (
        "totalTokens" in payload or "status" in payload or "isAsync" in payload
    )


def summarize_tool_use(block: dict[str, Any]) -> str:
    """``[tool_use Read file_path=/x]``: the call with each argument cut short."""
    return tool_use_text(as_str(block.get("name")), as_dict(block.get("input")))


def tool_result_text(content: Any) -> str:
    """The readable text of a tool_result's content (string or blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, dict):
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif block.get("type"):
                parts.append(f"[{block['type']}]")
    return "\n".join(parts)


def summarize_tool_result(block: dict[str, Any], name: str | None) -> str:
    """``[tool_result Read] first 300 characters``, marked ``error`` when it failed."""
    label = name or as_str(block.get("tool_use_id")) or "?"
    head = f"[tool_result {label}{' error' if block.get('is_error') is True else ''}]"
    text = shorten(tool_result_text(block.get("content")), 300)
    return f"{head} {text}" if text else head


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in _blocks(content) if b.get("type") == "text" and isinstance(b.get("text"), str)]


def _harness_text(obj: dict[str, Any], text: str) -> str | None:
    """Why a user-role line is Claude Code's own text rather than the user's; None when it is the user's."""
    if obj.get("isCompactSummary") is True:
        return "compact_summary"
    if obj.get("isVisibleInTranscriptOnly") is True:
        return "transcript_only"
    if obj.get("isMeta") is True:
        return "meta"
    if "<task-notification>" in text:
        return "task_notification"
    if _COMMAND_OUTPUT_RE.fullmatch(text):
        return "command_output"
    return None


def _tag(body: str, name: str) -> str | None:
    match = re.search(rf"<{name}>(.*?)</{name}>", body, re.S)
    return match.group(1).strip() or None if match else None


class ClaudeCodeParser(StreamParser):
    """Parses Claude Code transcript lines; see the module docstring for what it reads."""

    format = "claude-code"
    SESSION_KEY = "sessionId"
    RESULT_KEY = "toolUseResult"
    SKIP_REASONS: ClassVar[dict[str, str]] = {
        "file-history-snapshot": "file snapshot, not a message",
        "summary": "session summary, not a message",
        "queue-operation": "input queue bookkeeping",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tools: dict[str, _ToolUse] = {}
        self._tool_of_agent: dict[str, str] = {}
        self._agent_of_tool: dict[str, str] = {}

    # -- index: ids seen anywhere in the file --------------------------------------

    def index(self, line: int, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind in ("user", "assistant"):
            self._index_message(obj, self._parent_of(obj))
        elif kind == "progress":
            data = as_dict(obj.get("data"))
            parent = as_str(obj.get("parentToolUseID"))
            if data.get("type") == "agent_progress" and parent:
                self._link(as_str(data.get("agentId")), parent)
                self._index_message(as_dict(data.get("message")), parent)

    def _index_message(self, obj: dict[str, Any], parent: str | None) -> None:
        msg = as_dict(obj.get("message"))
        for block in _blocks(msg.get("content")):
            tool_id = as_str(block.get("id"))
            if block.get("type") == "tool_use" and tool_id and tool_id not in self._tools:
                self._tools[tool_id] = _ToolUse(str(block.get("name") or ""), as_str(obj.get("uuid")), parent)
        payload = obj.get(self.RESULT_KEY)
        if _looks_like_agent_result(payload):
            results = [b for b in _blocks(msg.get("content")) if b.get("type") == "tool_result"]
            if len(results) == 1:
                self._link(as_str(payload.get("agentId")), as_str(results[0].get("tool_use_id")))

    def index_state(self) -> dict[str, Any] | None:
        return {"tools": {k: list(v) for k, v in self._tools.items()}, "tool_of_agent": dict(self._tool_of_agent),
                "agent_of_tool": dict(self._agent_of_tool)}

    def load_index_state(self, state: Mapping[str, Any]) -> None:
        for k, v in as_dict(state.get("tools")).items():
            if isinstance(v, list) and len(v) == 3:
                self._tools.setdefault(k, _ToolUse(str(v[0]), as_str(v[1]), as_str(v[2])))
        for k, v in as_dict(state.get("tool_of_agent")).items():
            self._tool_of_agent.setdefault(k, str(v))
        for k, v in as_dict(state.get("agent_of_tool")).items():
            self._agent_of_tool.setdefault(k, str(v))

    def _link(self, agent_id: str | None, tool_id: str | None) -> None:
        if agent_id and tool_id:
            self._tool_of_agent.setdefault(agent_id, tool_id)
            self._agent_of_tool.setdefault(tool_id, agent_id)

    # -- per-source accessors (stream-json overrides them) -------------------------

    def line_type(self, obj: dict[str, Any]) -> str:
        kind = str(obj.get("type") or "unknown")
        if kind == "progress":
            return f"progress:{as_dict(obj.get('data')).get('type') or 'unknown'}"
        if kind == "system":
            return f"system:{obj.get('subtype') or 'unknown'}"
        return kind

    def _session(self, obj: dict[str, Any]) -> str | None:
        return as_str(obj.get(self.SESSION_KEY)) or self.default_session_id

    def _parent_of(self, obj: dict[str, Any]) -> str | None:
        if obj.get("isSidechain") is True:
            return self._tool_of_agent.get(as_str(obj.get("agentId")) or "")
        return None

    def _turn_session(self, session_id: str, obj: dict[str, Any], parent: str | None) -> str:
        if obj.get("isSidechain") is True:
            agent = as_str(obj.get("agentId"))
            return f"{session_id}:agent-{agent}" if agent else f"{session_id}:sidechain"
        return session_id

    # -- feed --------------------------------------------------------------------

    def _feed(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        msg_type = obj.get("type")
        if msg_type in ("user", "assistant"):
            return self._message_events(line, obj, kind)
        if msg_type == "progress":
            return self._progress_events(line, obj, kind)
        if msg_type == "queue-operation" and isinstance(obj.get("content"), str):
            session = self._session(obj)
            frames: list[Event] = []
            if session:
                frames.extend(self._notification_frames(line, obj, session, obj["content"]))
            if frames:
                return frames
        return self._skip_line(line, obj, kind)

    def _skip_line(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        """Report a line that yields nothing: a system line by subtype, others by ``SKIP_REASONS``."""
        if obj.get("type") == "system":
            self._skip(line, kind, f"system line ({obj.get('subtype') or 'no subtype'})")
        else:
            self._skip(line, kind, self.SKIP_REASONS.get(str(obj.get("type")), "unknown line type"))
        return []

    def _message_events(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        session = self._session(obj)
        if not session:
            self._skip(line, kind, "message without a session id")
            return []
        parent = self._parent_of(obj)
        events: list[Event] = list(self._frames_from_message(line, obj, session, parent))
        key = self._turn_session(session, obj, parent)
        turn, reason = self._turn(line, obj, key)
        if turn is not None:
            events.append(self._turn_event(turn, key, line, as_str(obj.get("uuid"))))
        elif not events:
            self._skip(line, kind, reason)
        return events

    def _progress_events(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        data = as_dict(obj.get("data"))
        if data.get("type") != "agent_progress":
            self._skip(line, kind, f"progress ({data.get('type') or 'unknown'}) carries no turn or frame")
            return []
        session, tool_id = self._session(obj), as_str(obj.get("parentToolUseID"))
        if not session or not tool_id:
            self._skip(line, kind, "agent progress without a session or parentToolUseID")
            return []
        inner = as_dict(data.get("message"))
        inner_msg = as_dict(inner.get("message"))
        frames: list[Event] = [
            self._tool_frame(
                line,
                obj,
                session,
                tool_id,
                agent_id=as_str(data.get("agentId")),
                model=as_str(inner_msg.get("model")) if inner_msg.get("role") == "assistant" else None,
            )
        ]
        # A sub-agent launching its own sub-agent shows up inside its progress messages.
        if inner:
            frames.extend(self._frames_from_message(line, {**inner, "timestamp": obj.get("timestamp")}, session,
                                                    tool_id))
            frames.extend(self._progress_turn(line, obj, inner, session, tool_id, as_str(data.get("agentId"))))
        return frames

    def _progress_turn(
        self, line: int, obj: dict[str, Any], inner: dict[str, Any], session: str, tool_id: str, agent_id: str | None
    ) -> list[Event]:
        """The child's own message as a turn of ``<session>:agent-<agentId>`` (id: the inner message's uuid)."""
        agent = agent_id or self._agent_of_tool.get(tool_id)
        key = f"{session}:agent-{agent}" if agent else f"{session}:task-{tool_id}"
        message = {**inner, "timestamp": inner.get("timestamp") or obj.get("timestamp")}
        turn, _ = self._turn(line, message, key)
        if turn is None:
            return []
        metadata = {**(turn.metadata or {}), "type": "progress", "message_type": inner.get("type"),
                    "subagent": True, "agent_id": agent, "parent_tool_use_id": tool_id,
                    "progress_uuid": as_str(obj.get("uuid"))}
        turn = turn.model_copy(update={"metadata": {k: v for k, v in metadata.items() if v is not None}})
        return [self._turn_event(turn, key, line, as_str(inner.get("uuid")))]

    # -- frames --------------------------------------------------------------------

    def _frames_from_message(
        self, line: int, obj: dict[str, Any], session: str, parent: str | None
    ) -> list[SubagentFrame]:
        msg = as_dict(obj.get("message"))
        content = msg.get("content")
        blocks = _blocks(content)
        results = [b for b in blocks if b.get("type") == "tool_result"]
        frames = []
        for block in blocks:
            if block.get("type") == "tool_use" and as_str(block.get("name")) in AGENT_TOOL_NAMES:
                frames.append(self._launch_frame(line, obj, session, parent, block))
            elif block.get("type") == "tool_result":
                payload = obj.get(self.RESULT_KEY) if len(results) == 1 else None
                frame = self._result_frame(line, obj, session, parent, block, payload)
                if frame is not None:
                    frames.append(frame)
        if msg.get("role") != "assistant":
            for text in _texts(content):
                frames.extend(self._notification_frames(line, obj, session, text))
        return frames

    def _launch_frame(
        self, line: int, obj: dict[str, Any], session: str, parent: str | None, block: dict[str, Any]
    ) -> SubagentFrame:
        args = as_dict(block.get("input"))
        return self._frame(
            line,
            obj.get("timestamp"),
            session_id=session,
            tool_call_id=as_str(block.get("id")),
            parent_tool_call_id=parent,
            turn_external_id=as_str(obj.get("uuid")),
            subagent_type=as_str(args.get("subagent_type")),
            description=as_str(args.get("description")),
            agent_id=as_str(args.get("resume")),
            model=as_str(args.get("model")),
            is_async=as_bool(args.get("run_in_background")),
        )

    def _result_frame(
        self,
        line: int,
        obj: dict[str, Any],
        session: str,
        parent: str | None,
        block: dict[str, Any],
        payload: Any,
    ) -> SubagentFrame | None:
        tool_id = as_str(block.get("tool_use_id"))
        tool = self._tools.get(tool_id or "")
        if not ((tool is not None and tool.name in AGENT_TOOL_NAMES) or _looks_like_agent_result(payload)):
            return None
        fields = agent_result_fields(payload) if isinstance(payload, dict) else {}
        return self._frame(
            line,
            obj.get("timestamp"),
            session_id=session,
            tool_call_id=tool_id,
            parent_tool_call_id=parent,
            turn_external_id=as_str(obj.get("sourceToolAssistantUUID")) or (tool.turn_uuid if tool else None),
            tool_status="error" if block.get("is_error") is True else "completed",
            **fields,
        )

    def _notification_frames(self, line: int, obj: dict[str, Any], session: str, text: str) -> list[SubagentFrame]:
        frames = []
        for body in _NOTIFICATION_RE.findall(text):
            task_id, usage = _tag(body, "task-id"), _tag(body, "usage")
            tool_id = _tag(body, "tool-use-id") or self._tool_of_agent.get(task_id or "")
            tool = self._tools.get(tool_id or "")
            known_agent = (task_id in self._tool_of_agent) or (tool is not None and tool.name in AGENT_TOOL_NAMES)
            # A background shell also notifies; only an agent reports token usage.
            if not known_agent and not (tool is None and usage and "total_tokens" in usage):
                continue
            metrics = {k: int(v) for k, v in _USAGE_RE.findall(usage or "")}
            frames.append(
                self._tool_frame(
                    line,
                    obj,
                    session,
                    tool_id,
                    agent_id=task_id,
                    agent_status=_tag(body, "status"),
                    is_async=True,
                    total_tokens=metrics.get("total_tokens"),
                    tool_use_count=metrics.get("tool_uses"),
                    duration_ms=metrics.get("duration_ms"),
                )
            )
        return frames

    def _tool_frame(
        self, line: int, obj: dict[str, Any], session: str | None, tool_id: str | None, **fields: Any
    ) -> SubagentFrame:
        """A frame of the sub-agent that ``tool_id`` launched, linked to that call's parent and turn once seen."""
        tool = self._tools.get(tool_id or "")
        return self._frame(
            line,
            obj.get("timestamp"),
            session_id=session,
            tool_call_id=tool_id,
            parent_tool_call_id=tool.parent if tool else None,
            turn_external_id=tool.turn_uuid if tool else None,
            **fields,
        )

    # -- turns ----------------------------------------------------------------------

    def _turn(self, line: int, obj: dict[str, Any], session_key: str) -> tuple[Turn | None, str]:
        msg = as_dict(obj.get("message"))
        content = msg.get("content")
        parts: list[str] = []
        tool_uses: list[dict[str, Any]] = []
        tool_results: list[dict[str, Any]] = []
        thinking = False
        if isinstance(content, str):
            if content.strip():
                parts.append(content)
        elif isinstance(content, list):
            for block in _blocks(content):
                kind = str(block.get("type") or "")
                if kind == "text":
                    if isinstance(block.get("text"), str) and block["text"].strip():
                        parts.append(block["text"])
                elif kind in ("thinking", "redacted_thinking"):
                    thinking = True
                elif kind.endswith("tool_use"):
                    tool_uses.append(block)
                    parts.append(summarize_tool_use(block))
                elif kind.endswith("tool_result"):
                    tool_results.append(block)
                    tool = self._tools.get(as_str(block.get("tool_use_id")) or "")
                    parts.append(summarize_tool_result(block, tool.name if tool else None))
                else:
                    parts.append(f"[{kind or 'block'}]")
        else:
            return None, "message without content"
        if not parts:
            return None, "thinking only (not stored as text)" if thinking else "empty message"

        role: Role
        text = "\n".join(parts)
        harness = None
        if (msg.get("role") or obj.get("type")) == "assistant":
            role = "assistant"
        elif tool_results:
            role = "tool"
        elif (harness := _harness_text(obj, text)) is not None:
            role = "system"
        else:
            role = "user"
        names = [self._tools[t].name for b in tool_results if (t := as_str(b.get("tool_use_id"))) in self._tools]
        metadata = {
            "format": self.format,
            "line": line,
            "type": obj.get("type"),
            "parent_uuid": obj.get("parentUuid"),
            "message_id": msg.get("id"),
            "model": msg.get("model"),
            "usage": msg.get("usage"),
            "is_meta": obj.get("isMeta"),
            "is_compact_summary": obj.get("isCompactSummary"),
            # the host's own text in a user-role line: never memory grounding (pipeline.grounding)
            "not_evidence": harness,
            "is_sidechain": obj.get("isSidechain") or None,
            # a sub-agent's own messages (a derived session): never memory grounding (pipeline.grounding)
            "subagent": True if session_key != self._session(obj) else None,
            "agent_id": obj.get("agentId"),
            "parent_tool_use_id": self._parent_of(obj),
            "thinking_omitted": thinking or None,
            "tool_uses": [{"id": b.get("id"), "name": b.get("name"), "input": b.get("input")} for b in tool_uses]
            or None,
            "tool_results": [
                {"tool_use_id": b.get("tool_use_id"), "is_error": b.get("is_error"), "content": b.get("content")}
                for b in tool_results
            ]
            or None,
            "tool_use_result": obj.get(self.RESULT_KEY),
        }
        return (
            Turn(
                role=role,
                content=text,
                name=",".join(names) or None,
                id=as_str(obj.get("uuid")) or f"{session_key}:{self.line_ref(line)}",
                timestamp=as_str(obj.get("timestamp")),
                metadata={k: v for k, v in metadata.items() if v is not None},
            ),
            "",
        )
