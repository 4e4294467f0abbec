"""Agent transcripts and event streams into normalized turns and sub-agent frames.

``parse_stream(path_or_lines)`` reads a Claude Code transcript, Claude Agent SDK
stream-json, ACP traffic or plain turn JSONL; the per-format parsers also take
lines one at a time for live use. ``SubagentCallbackHandler`` (LangChain) is
importable from here when the ``langchain`` extra is installed.
"""

from __future__ import annotations

from typing import Any

from tortoise_sdk.streams.acp import AcpParser
from tortoise_sdk.streams.base import (
    AGENT_TOOL_NAMES,
    Event,
    FrameSource,
    ParsedStream,
    ParseReport,
    SkippedLine,
    StreamFormat,
    StreamParser,
    SubagentFrame,
    TurnEvent,
)
from tortoise_sdk.streams.claude_code import ClaudeCodeParser
from tortoise_sdk.streams.detect import PARSERS, TurnsParser, detect_format, parse_stream
from tortoise_sdk.streams.stream_json import StreamJsonParser

__all__ = (
    "AGENT_TOOL_NAMES",
    "PARSERS",
    "AcpParser",
    "ClaudeCodeParser",
    "Event",
    "FrameSource",
    "ParseReport",
    "ParsedStream",
    "SkippedLine",
    "StreamFormat",
    "StreamJsonParser",
    "StreamParser",
    "SubagentFrame",
    "TurnEvent",
    "TurnsParser",
    "detect_format",
    "parse_stream",
)


def __getattr__(name: str) -> Any:
    # langchain is an optional extra: import the handler only when asked for.
    if name == "SubagentCallbackHandler":
        from tortoise_sdk.streams.langchain_callbacks import SubagentCallbackHandler

        return SubagentCallbackHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
