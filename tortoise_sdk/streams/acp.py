"""Agent Client Protocol (JSON-RPC) ``session/update`` traffic into turns and sub-agent frames.

Turns: consecutive ``user_message_chunk`` / ``agent_message_chunk`` updates of
one session are joined into one message, ended by a change of speaker or
``messageId``, a tool call, the next ``session/prompt``, the prompt's
response, or the end of the stream; a sub-agent's chunks (``parentToolUseId``)
go to the session ``<session>:task-<parent tool call>``. ``session/prompt`` requests are user turns.
ACP chunks carry no message id unless the agent sends ``messageId``, so the
fallback turn id is ``<session>:L<first line>`` (stable for the same file).

Frames: ``tool_call`` / ``tool_call_update`` of a sub-agent tool, recognised as

- Claude Code (claude-code-acp): ``_meta.claudeCode.toolName`` is Task/Agent;
  ``_meta.claudeCode.toolResponse`` is the ``toolUseResult``;
  ``_meta.claudeCode.parentToolUseId`` nests it.
- OpenCode: ``title == "task"``; ``rawOutput.metadata`` {sessionId, model}.
- Cursor: ``rawInput._toolName == "task"``; ``rawOutput`` {durationMs, isBackground}.
- Auggie: title ``sub-agent-<type>: <description>``.

Once a tool call is known to be a sub-agent, every later update of it is one too.

Any other tool call becomes turns, summarized like Claude Code's: the call an
assistant turn ``[tool_use <title> arg=…]`` (id ``<session>:tool-<toolCallId>``),
its completed or failed output a tool turn ``[tool_result <title>] output…``
(id ``…:result``); the full rawInput/rawOutput/content stay in the metadata.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tortoise_sdk.models import Turn
from tortoise_sdk.streams.base import (
    AGENT_TOOL_NAMES,
    Event,
    StreamParser,
    as_bool,
    as_dict,
    as_int,
    as_str,
    shorten,
)
from tortoise_sdk.streams.claude_code import agent_result_fields, summarize_tool_use

__all__ = ("AcpParser", "acp_agent_fields", "is_acp_agent_call")

_AUGGIE_TITLE = re.compile(r"sub-agent-([^:\s]+)\s*:?\s*(.*)", re.S)
_MESSAGE_KINDS = {"user_message_chunk": "user", "agent_message_chunk": "assistant"}


def _model_name(value: Any) -> str | None:
    if isinstance(value, dict):
        model = as_str(value.get("modelID")) or as_str(value.get("id")) or as_str(value.get("model"))
        provider = as_str(value.get("providerID")) or as_str(value.get("provider"))
        return f"{provider}/{model}" if provider and model else model
    return as_str(value)


def is_acp_agent_call(update: dict[str, Any]) -> bool:
    """Whether a tool_call(_update) launches a sub-agent, by any known agent's convention."""
    claude = as_dict(as_dict(update.get("_meta")).get("claudeCode"))
    if as_str(claude.get("toolName")) in AGENT_TOOL_NAMES:
        return True
    if (as_str(as_dict(update.get("rawInput")).get("_toolName")) or "").lower() == "task":
        return True
    title = (as_str(update.get("title")) or "").strip()
    return title.lower() == "task" or title.startswith("sub-agent-")


def acp_agent_fields(update: dict[str, Any]) -> dict[str, Any]:
    """Frame fields of a sub-agent tool_call(_update); never the prompt or the output text."""
    claude = as_dict(as_dict(update.get("_meta")).get("claudeCode"))
    raw_in, raw_out = as_dict(update.get("rawInput")), as_dict(update.get("rawOutput"))
    out_meta = as_dict(raw_out.get("metadata"))
    found: dict[str, Any] = {
        "tool_status": as_str(update.get("status")),
        "parent_tool_call_id": as_str(claude.get("parentToolUseId")),
        "description": as_str(raw_in.get("description")),
        "subagent_type": as_str(raw_in.get("subagent_type")) or as_str(raw_in.get("subagentType")),
        "model": _model_name(raw_in.get("model")),
        "is_async": as_bool(raw_in.get("run_in_background")),
        # OpenCode
        "child_session_id": as_str(out_meta.get("sessionId")),
        # Cursor
        "duration_ms": as_int(raw_out.get("durationMs")),
        "agent_id": as_str(raw_out.get("agentId")),
    }
    if _model_name(out_meta.get("model")):
        found["model"] = _model_name(out_meta.get("model"))
    if as_bool(raw_out.get("isBackground")) is not None:
        found["is_async"] = raw_out["isBackground"]
    match = _AUGGIE_TITLE.match((as_str(update.get("title")) or "").strip())
    if match:
        found["subagent_type"] = found["subagent_type"] or match.group(1)
        found["description"] = found["description"] or as_str(match.group(2).strip())
    response = claude.get("toolResponse")
    if isinstance(response, dict):
        found.update(agent_result_fields(response))
    return {k: v for k, v in found.items() if v is not None}


@dataclass
class _Message:
    role: str
    session_id: str
    key: str
    line: int
    message_id: str | None
    ref: str  # L<line>, or L<line>.<k> for a line's k-th joined object: its fallback id
    texts: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


def _content_text(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    parts = []
    for block in blocks:
        block = as_dict(block)
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "resource_link" and as_str(block.get("uri")):
            parts.append(f"[@{block['uri']}]")
        elif isinstance(as_dict(block.get("resource")).get("text"), str):
            parts.append(block["resource"]["text"])
        elif block.get("type"):
            parts.append(f"[{block['type']}]")
    return "".join(parts)


def _tool_output_text(update: dict[str, Any]) -> str:
    """The readable output of a tool_call(_update): its content blocks, else its ``rawOutput``."""
    parts = []
    for item in update.get("content") if isinstance(update.get("content"), list) else []:
        item = as_dict(item)
        if item.get("type") == "content":
            parts.append(_content_text(item.get("content")))
        elif item.get("type") == "diff":
            parts.append(f"[diff {as_str(item.get('path')) or '?'}]")
        elif item.get("type"):
            parts.append(f"[{item['type']}]")
    text = "\n".join(p for p in parts if p)
    if text.strip():
        return text
    raw = update.get("rawOutput")
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict):
        for name in ("output", "stdout", "result", "text", "content"):
            if isinstance(raw.get(name), str):
                return raw[name]
    return json.dumps(raw, ensure_ascii=False, default=str) if raw not in (None, {}, []) else ""


class AcpParser(StreamParser):
    """Parses ACP JSON-RPC lines (either direction; non-``session/*`` traffic is reported and skipped)."""

    format = "acp"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._agent_calls: set[tuple[str, str]] = set()
        self._tool_titles: dict[tuple[str, str], str] = {}
        self._tool_turn_ids: set[str] = set()
        self._prompt_sessions: dict[str, str] = {}
        self._open: dict[str, _Message] = {}

    @staticmethod
    def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
        inner = obj.get("message")
        if "jsonrpc" not in obj and isinstance(inner, dict) and "jsonrpc" in inner:
            return inner
        return obj

    def line_type(self, obj: dict[str, Any]) -> str:
        obj = self._unwrap(obj)
        method = as_str(obj.get("method"))
        if method == "session/update":
            update = as_dict(as_dict(obj.get("params")).get("update"))
            return f"session/update:{update.get('sessionUpdate') or 'unknown'}"
        if method:
            return method
        return "response" if "id" in obj else "unknown"

    def index(self, line: int, obj: dict[str, Any]) -> None:
        obj = self._unwrap(obj)
        params = as_dict(obj.get("params"))
        session = as_str(params.get("sessionId")) or self.default_session_id
        if not session:
            return
        if obj.get("method") == "session/prompt" and obj.get("id") is not None:
            self._prompt_sessions.setdefault(str(obj["id"]), session)
        update = as_dict(params.get("update"))
        call_id = as_str(update.get("toolCallId"))
        if obj.get("method") == "session/update" and call_id and is_acp_agent_call(update):
            self._agent_calls.add((session, call_id))

    def finish(self) -> list[Event]:
        events: list[Event] = []
        for key in list(self._open):
            events.extend(self._close(key))
        return events

    def _feed(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        obj = self._unwrap(obj)
        method = as_str(obj.get("method"))
        params = as_dict(obj.get("params"))
        if method == "session/update":
            return self._update(line, params, kind)
        if method == "session/prompt":
            return self._prompt(line, obj, params, kind)
        if method is None and "id" in obj and ("result" in obj or "error" in obj):
            session = self._prompt_sessions.get(str(obj["id"]))
            self._skip(line, kind, "prompt response (ends the turn)" if session else "response")
            return self._close_session(session) if session else []
        self._skip(line, kind, f"{method or 'message'} carries no turn or frame")
        return []

    @staticmethod
    def _child_key(session: str, parent: str | None) -> str:
        return f"{session}:task-{parent}" if parent else session

    def _update(self, line: int, params: dict[str, Any], kind: str) -> list[Event]:
        session = as_str(params.get("sessionId")) or self.default_session_id
        update = as_dict(params.get("update"))
        name = as_str(update.get("sessionUpdate"))
        if not session:
            self._skip(line, kind, "update without a sessionId")
            return []
        claude = as_dict(as_dict(update.get("_meta")).get("claudeCode"))
        key = self._child_key(session, as_str(claude.get("parentToolUseId")))
        if name in _MESSAGE_KINDS:
            role = _MESSAGE_KINDS[name]
            message_id = as_str(update.get("messageId")) or as_str(as_dict(update.get("_meta")).get("messageId"))
            events: list[Event] = []
            current = self._open.get(key)
            new_id = bool(message_id and current and current.message_id and message_id != current.message_id)
            if current and (current.role != role or new_id):
                events = self._close(key)
            if key not in self._open:
                self._open[key] = _Message(role, session, key, line, message_id, self.line_ref(line))
            self._open[key].texts.append(_content_text(update.get("content")))
            self._open[key].lines.append(line)
            return events
        if name == "agent_thought_chunk":
            self._skip(line, kind, "thought chunk (not stored as text)")
            return []
        if name in ("tool_call", "tool_call_update"):
            events = self._close(key)
            call_id = as_str(update.get("toolCallId"))
            if call_id and ((session, call_id) in self._agent_calls or is_acp_agent_call(update)):
                self._agent_calls.add((session, call_id))
                timestamp = as_dict(update.get("_meta")).get("timestamp")
                events.append(self._frame(line, timestamp, session_id=session, tool_call_id=call_id,
                                          **acp_agent_fields(update)))
            else:
                events.extend(self._tool_turns(line, session, key, call_id, name, update, kind))
            return events
        self._skip(line, kind, f"session update ({name or 'unknown'}) carries no turn or frame")
        return []

    def _tool_turns(
        self, line: int, session: str, key: str, call_id: str | None, name: str, update: dict[str, Any], kind: str
    ) -> list[Event]:
        """A non-agent tool's call and its final output as turns, summarized like Claude Code's tool_use/tool_result.

        The call is an assistant turn ``<key>:tool-<id>``, the output a tool turn ``<key>:tool-<id>:result``
        (status completed or failed); later repeats and intermediate updates are reported and skipped.
        """
        claude = as_dict(as_dict(update.get("_meta")).get("claudeCode"))
        title = as_str(claude.get("toolName")) or as_str(update.get("title"))
        ref = (session, call_id or self.line_ref(line))
        if title and (name == "tool_call" or ref not in self._tool_titles):
            self._tool_titles[ref] = title
        label = self._tool_titles.get(ref) or as_str(update.get("kind")) or "?"
        base = f"{key}:tool-{call_id}" if call_id else f"{key}:{self.line_ref(line)}"
        metadata: dict[str, Any] = {
            "format": self.format, "line": line, "tool_call_id": call_id, "title": as_str(update.get("title")),
            "kind": as_str(update.get("kind")), "status": as_str(update.get("status")),
            "raw_input": update.get("rawInput"), "raw_output": update.get("rawOutput"),
            "content": update.get("content"),
            # a sub-agent's own tool calls: never memory grounding (pipeline.grounding)
            "subagent": True if key != session else None,
        }
        metadata = {k: v for k, v in metadata.items() if v is not None}
        events: list[Event] = []
        if name == "tool_call" and base not in self._tool_turn_ids:
            self._tool_turn_ids.add(base)
            call = summarize_tool_use({"name": label, "input": update.get("rawInput")})
            events.append(self._turn_event(Turn(role="assistant", content=call, id=base, metadata=metadata),
                                           key, line, None))
        status = as_str(update.get("status"))
        output = _tool_output_text(update)
        result_id = f"{base}:result"
        if status in ("completed", "failed") and result_id not in self._tool_turn_ids:
            self._tool_turn_ids.add(result_id)
            head = f"[tool_result {label}{' error' if status == 'failed' else ''}]"
            text = shorten(output, 300)
            events.append(self._turn_event(
                Turn(role="tool", content=f"{head} {text}" if text else head, name=label, id=result_id,
                     metadata=metadata),
                key, line, None))
        if not events:
            final = status in ("completed", "failed")
            self._skip(line, kind, "tool call result seen already" if final
                       else "tool call update without a final result" if name == "tool_call_update"
                       else "tool call seen already")
        return events

    def _prompt(self, line: int, obj: dict[str, Any], params: dict[str, Any], kind: str) -> list[Event]:
        session = as_str(params.get("sessionId")) or self.default_session_id
        if not session:
            self._skip(line, kind, "prompt without a sessionId")
            return []
        events = self._close_session(session)
        text = _content_text(params.get("prompt"))
        if not text.strip():
            self._skip(line, kind, "empty prompt")
            return events
        turn = Turn(
            role="user",
            content=text,
            id=as_str(params.get("messageId")) or f"{session}:{self.line_ref(line)}",
            metadata={"format": self.format, "line": line, "request_id": obj.get("id")},
        )
        events.append(self._turn_event(turn, session, line, as_str(params.get("messageId"))))
        return events

    def _close_session(self, session: str) -> list[Event]:
        events: list[Event] = []
        for key in [k for k, m in self._open.items() if m.session_id == session]:
            events.extend(self._close(key))
        return events

    def _close(self, key: str) -> list[Event]:
        message = self._open.pop(key, None)
        if message is None:
            return []
        text = "".join(message.texts)
        if not text.strip():
            self._skip(message.line, "message chunks", "empty message")
            return []
        turn = Turn(
            role="user" if message.role == "user" else "assistant",
            content=text,
            id=message.message_id or f"{key}:{message.ref}",
            metadata={"format": self.format, "line": message.line, "chunk_lines": message.lines,
                      # a sub-agent's own messages: never memory grounding (pipeline.grounding)
                      **({"subagent": True} if key != message.session_id else {})},
        )
        return [self._turn_event(turn, key, message.line, message.message_id)]
