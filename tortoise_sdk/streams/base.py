"""Normalized stream events (turns and sub-agent frames), the parse report, and the parser base class."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal, Union

from pydantic import ConfigDict, Field

from tortoise_sdk.models import DeferredModel, Turn, utc_now

__all__ = (
    "AGENT_TOOL_NAMES",
    "Event",
    "FrameSource",
    "ParseReport",
    "ParsedStream",
    "SkippedLine",
    "StreamFormat",
    "StreamParser",
    "SubagentFrame",
    "TurnEvent",
)

FrameSource = Literal["live", "backfill"]
StreamFormat = Literal["turns", "claude-code", "stream-json", "acp"]

#: Tool names Claude Code (and its SDK/ACP bridge) uses to launch a sub-agent.
AGENT_TOOL_NAMES: frozenset[str] = frozenset({"Task", "Agent"})


class TurnEvent(DeferredModel):
    """One turn read from a stream, with where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turn: Turn = Field(description="The turn; turn.id is the source's message uuid, so re-ingesting is idempotent.")
    session_id: str = Field(description="Session the turn belongs to (a derived ':agent-…' key for sub-agent turns).")
    line: int | None = Field(default=None, description="1-based source line, when read from a file.")
    message_uuid: str | None = Field(default=None, description="The source's own message id, if it had one.")
    format: str = Field(description="claude-code, stream-json, acp or turns.")


class SubagentFrame(DeferredModel):
    """One observation of a sub-agent invocation: structure only, never prompt or result text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str | None = Field(description="Session of the parent agent; empty means the frame has no identity.")
    tool_call_id: str | None = Field(description="The launching tool call's id; empty means the frame has no identity.")
    agent_execution_id: str | None = Field(default=None, description="Execution id, None when the stream gives none.")
    parent_tool_call_id: str | None = Field(default=None, description="Enclosing sub-agent's tool call, when nested.")
    turn_external_id: str | None = Field(default=None, description="Message uuid of the turn that launched it.")
    subagent_type: str | None = Field(default=None, description="e.g. general-purpose, Explore, Plan.")
    description: str | None = Field(default=None, description="The short label the caller gave the task.")
    agent_id: str | None = Field(default=None, description="The sub-agent's own id (Claude Code agentId, task_id).")
    child_session_id: str | None = Field(default=None, description="The child's session id, if named.")
    model: str | None = Field(default=None, description="Model requested or resolved for the sub-agent.")
    agent_status: str | None = Field(default=None, description="The agent's status, e.g. async_launched, completed.")
    tool_status: str | None = Field(default=None, description="The tool call's status; the only input to terminality.")
    is_async: bool | None = Field(default=None, description="Launched in the background; None when not reported.")
    total_tokens: int | None = Field(default=None, description="Tokens used by the sub-agent; None when not reported.")
    tool_use_count: int | None = Field(default=None, description="Tool calls the sub-agent made; None: not reported.")
    duration_ms: int | None = Field(default=None, description="Wall time of the sub-agent; None when not reported.")
    source: FrameSource = Field(default="live", description="live (observed as it ran) or backfill (read afterwards).")
    observed_at: datetime = Field(default_factory=utc_now, description="When the source says this was observed.")
    line: int | None = Field(default=None, description="Diagnostic only: the source line; not stored.")

    def identity(self) -> tuple[str | None, str | None, str | None]:
        """The merge key as given: (session_id, agent_execution_id, tool_call_id)."""
        return (self.session_id, self.agent_execution_id, self.tool_call_id)


Event = Union[TurnEvent, SubagentFrame]


class SkippedLine(DeferredModel):
    """A line that produced no turn and no frame, and why."""

    line: int | None
    type: str
    reason: str


class ParseReport(DeferredModel):
    """What a parser read: every line counted by type, and every line it did not use."""

    format: str
    lines: int = Field(default=0, description="Non-blank lines read.")
    line_types: dict[str, int] = Field(default_factory=dict, description="Lines by type, e.g. progress:agent_progress.")
    malformed: int = Field(default=0, description="Lines that were not a JSON object.")
    skipped: list[SkippedLine] = Field(default_factory=list)
    turns: int = 0
    frames: int = 0

    def skip_reasons(self) -> dict[str, int]:
        """Skipped lines counted by reason."""
        return dict(Counter(s.reason for s in self.skipped))


class ParsedStream(DeferredModel):
    """The result of ``parse_stream``: turns by session, sub-agent frames, and the report."""

    format: str
    sessions: dict[str, list[Turn]] = Field(default_factory=dict)
    events: list[TurnEvent] = Field(default_factory=list, description="The same turns, with line and session.")
    frames: list[SubagentFrame] = Field(default_factory=list)
    report: ParseReport


class StreamParser:
    """Base of the line parsers: feed decoded JSON lines, get events back.

    Batch use (``parse_stream``) calls ``index`` on every line first so that ids
    seen anywhere in the file resolve regardless of line order; live use calls
    ``feed_line`` as lines arrive and ``finish`` at the end.
    """

    format: ClassVar[str] = "unknown"

    def __init__(
        self,
        *,
        source: FrameSource = "backfill",
        now: datetime | None = None,
        default_session_id: str | None = None,
    ) -> None:
        self.source: FrameSource = source
        self.default_session_id = default_session_id
        self.report = ParseReport(format=self.format)
        self._now = now
        self._line = 0
        self._part_line, self._part = -1, 0

    def now(self) -> datetime:
        """The fallback observation time (fixed when the parser was given one)."""
        return self._now or utc_now()

    def feed_line(self, text: str | bytes) -> list[Event]:
        """Decode and feed one raw line (live use); malformed lines are reported, never raised."""
        self._line += 1
        events: list[Event] = []
        for obj in decode_line(text, self._line, self.report):
            self.index(self._line, obj)
            events += self.feed(self._line, obj)
        return events

    def index(self, line: int, obj: dict[str, Any]) -> None:
        """Learn ids from a line without emitting anything (idempotent)."""

    def index_state(self) -> dict[str, Any] | None:
        """The ids ``index`` learned, as JSON a followed file's cursor keeps so that its earlier lines need not be
        read again; None when this parser cannot say (they are read again)."""
        return None

    def load_index_state(self, state: Mapping[str, Any]) -> None:
        """Learn the ids ``index_state`` gave (of lines before the ones about to be indexed)."""
        raise NotImplementedError

    def feed(self, line: int, obj: dict[str, Any]) -> list[Event]:
        """Count the line by type and return the events it yields."""
        # A second object on one line (decode_line) gets its own part: ids made from the line differ.
        self._part = self._part + 1 if line == self._part_line else 0
        self._part_line = line
        kind = self.line_type(obj)
        self.report.lines += 1
        self.report.line_types[kind] = self.report.line_types.get(kind, 0) + 1
        return self._feed(line, obj, kind)

    def line_ref(self, line: int) -> str:
        """``L<line>``, the fallback id part of what a line yields (``L<line>.<k>`` for its k-th joined object)."""
        return f"L{line}.{self._part}" if self._part and line == self._part_line else f"L{line}"

    def finish(self) -> list[Event]:
        """Flush anything buffered (e.g. ACP message chunks)."""
        return []

    def line_type(self, obj: dict[str, Any]) -> str:
        """A short type label for the report."""
        return str(obj.get("type") or "unknown")

    def _feed(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        raise NotImplementedError

    def _skip(self, line: int | None, kind: str, reason: str) -> None:
        self.report.skipped.append(SkippedLine(line=line, type=kind, reason=reason))

    def _observed(self, value: Any) -> datetime:
        return parse_time(value) or self.now()

    def _frame(self, line: int, timestamp: Any, **fields: Any) -> SubagentFrame:
        """A frame read from ``line``: this parser's source, observed at ``timestamp`` (else now)."""
        return SubagentFrame(source=self.source, observed_at=self._observed(timestamp), line=line, **fields)

    def _turn_event(self, turn: Turn, session_id: str, line: int, message_uuid: str | None) -> TurnEvent:
        """A turn read from ``line``, in this parser's format."""
        return TurnEvent(turn=turn, session_id=session_id, line=line, message_uuid=message_uuid, format=self.format)


# -- helpers shared by the parsers ------------------------------------------------


def decode_line(text: str | bytes, line: int, report: ParseReport) -> list[dict[str, Any]]:
    """The JSON objects of one JSONL line (several when a writer joined them without a newline, as Claude
    Code once wrote a reply and a ``summary`` on one line); a line that is not that is counted and reported."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            _malformed(report, line, "invalid utf-8")
            return []
    if not text.strip():
        return []
    try:
        objs = [json.loads(text)]
    except (ValueError, RecursionError):
        joined = _joined_objects(text)
        if joined is None:
            _malformed(report, line, "invalid json")
            return []
        objs = joined
    if not isinstance(objs[0], dict):
        _malformed(report, line, f"json {type(objs[0]).__name__}, not an object")
        return []
    return objs


_SPACE = re.compile(r"\s*")


def _joined_objects(text: str) -> list[dict[str, Any]] | None:
    """Two or more JSON objects written one after the other on a line, or None when ``text`` is not that."""
    decoder, out, pos = json.JSONDecoder(), [], 0
    try:
        while (pos := _SPACE.match(text, pos).end()) < len(text):  # type: ignore[union-attr]
            obj, pos = decoder.raw_decode(text, pos)
            if not isinstance(obj, dict):
                return None
            out.append(obj)
    except (ValueError, RecursionError):
        return None
    return out if len(out) > 1 else None


def _malformed(report: ParseReport, line: int, reason: str) -> None:
    report.lines += 1
    report.malformed += 1
    report.line_types["malformed"] = report.line_types.get("malformed", 0) + 1
    report.skipped.append(SkippedLine(line=line, type="malformed", reason=reason))


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 string (or epoch ms) as an aware UTC datetime; None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        try:
            return datetime.fromtimestamp(value / 1000, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        return None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def as_int(value: Any) -> int | None:
    """A JSON number (or digit string) as int; None for anything else. Negative values pass through."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def as_str(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value.strip() else None


def as_bool(value: Any) -> bool | None:
    """A JSON boolean, or None."""
    return value if isinstance(value, bool) else None


def as_dict(value: Any) -> dict[str, Any]:
    """The value if it is a dict, else an empty dict."""
    return value if isinstance(value, dict) else {}


def shorten(text: str, limit: int) -> str:
    """Collapse whitespace and cut to ``limit`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def frame_key(frame: SubagentFrame) -> tuple[Any, ...]:
    """Content of a frame without its line and time, to drop exact repeats."""
    data = frame.model_dump(exclude={"line", "observed_at"})
    return tuple(sorted(data.items()))
