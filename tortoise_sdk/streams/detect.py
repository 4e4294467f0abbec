"""Format detection and the single entry point ``parse_stream``; also the plain ``turns`` JSONL format."""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from tortoise_sdk.capture import flatten_content
from tortoise_sdk.errors import ConfigError, InvalidInput, StreamParseError
from tortoise_sdk.models import Turn
from tortoise_sdk.streams.acp import AcpParser
from tortoise_sdk.streams.base import (
    Event,
    FrameSource,
    ParsedStream,
    ParseReport,
    StreamFormat,
    StreamParser,
    SubagentFrame,
    TurnEvent,
    as_str,
    decode_line,
    frame_key,
)
from tortoise_sdk.streams.claude_code import ClaudeCodeParser
from tortoise_sdk.streams.stream_json import StreamJsonParser

__all__ = ("PARSERS", "TurnsParser", "detect_format", "learn_ids", "parse_followed", "parse_stream")

_DETECT_LINES = 50
_CLAUDE_CODE_TYPES = frozenset({"file-history-snapshot", "summary", "progress", "queue-operation"})
_CLAUDE_CODE_KEYS = ("sessionId", "parentUuid", "isSidechain", "userType")
_STREAM_JSON_KEYS = ("session_id", "parent_tool_use_id")
_TURN_FIELDS = frozenset(Turn.model_fields)
_PRIORITY = ("turns", "stream-json", "claude-code", "acp")  # ties go to the later, more specific format


class TurnsParser(StreamParser):
    """Plain JSONL of turns: ``{"role", "content", "name"?, "id"?, "timestamp"?, "metadata"?, "session_id"?}``."""

    format = "turns"

    def line_type(self, obj: dict[str, Any]) -> str:
        return str(obj.get("role") or "unknown")

    def _feed(self, line: int, obj: dict[str, Any], kind: str) -> list[Event]:
        data = dict(obj)
        session = as_str(data.pop("session_id", None)) or as_str(data.pop("sessionId", None))
        session = session or self.default_session_id or "default"
        extra = {k: data.pop(k) for k in list(data) if k not in _TURN_FIELDS}
        if extra and isinstance(data.get("metadata"), dict):
            data["metadata"] = {**data["metadata"], **extra}
        elif extra and data.get("metadata") is None:
            data["metadata"] = extra
        try:
            turn = Turn.model_validate(flatten_content(data)[0])
        except InvalidInput as exc:
            self._skip(line, kind, f"invalid turn: {exc}")
            return []
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            self._skip(line, kind, f"invalid turn: {where}: {first['msg']}")
            return []
        return [TurnEvent(turn=turn, session_id=session, line=line, message_uuid=turn.id, format=self.format)]


#: Parser class for each format name.
PARSERS: dict[str, type[StreamParser]] = {
    "turns": TurnsParser,
    "claude-code": ClaudeCodeParser,
    "stream-json": StreamJsonParser,
    "acp": AcpParser,
}


def _guess(obj: dict[str, Any]) -> str | None:
    if "jsonrpc" in obj or ("/" in str(obj.get("method") or "")):
        return "acp"
    if isinstance(obj.get("message"), dict) and "jsonrpc" in obj["message"]:
        return "acp"
    kind = as_str(obj.get("type"))
    if kind in _CLAUDE_CODE_TYPES or any(k in obj for k in _CLAUDE_CODE_KEYS):
        return "claude-code"
    if "role" in obj and "content" in obj:
        return "turns"
    if any(k in obj for k in _STREAM_JSON_KEYS) or kind in ("result", "stream_event"):
        return "stream-json"
    return None


def detect_format(first_lines: Iterable[str | bytes | dict[str, Any]]) -> StreamFormat:
    """Guess the format from the first lines (raw or decoded) by majority vote.

    Raises:
        StreamParseError: no line looks like any known format.
    """
    votes: Counter[str] = Counter()
    seen = False
    scratch = ParseReport(format="auto")
    for n, item in enumerate(first_lines, start=1):
        for obj in [item] if isinstance(item, dict) else decode_line(item, n, scratch):
            seen = True
            if guess := _guess(obj):
                votes[guess] += 1
        if sum(votes.values()) >= _DETECT_LINES:
            break
    if not votes:
        if not seen and not scratch.malformed:
            return "turns"
        raise StreamParseError(
            "no line looks like a known format; pass format= one of " + ", ".join(get_args(StreamFormat)),
            source="auto",
        )
    best = max(votes.items(), key=lambda kv: (kv[1], _PRIORITY.index(kv[0])))[0]
    return best  # type: ignore[return-value]


def _read_lines(path_or_lines: str | os.PathLike[str] | Iterable[str | bytes]) -> tuple[Iterable[str | bytes], str]:
    if isinstance(path_or_lines, (str, os.PathLike)):
        path = Path(path_or_lines)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StreamParseError(f"cannot read {path}: {exc.strerror or exc}", source=str(path)) from exc
        return data.splitlines(), str(path)
    return (line for item in path_or_lines for line in (item.splitlines() or [item])), "lines"


def parse_stream(
    path_or_lines: str | os.PathLike[str] | Iterable[str | bytes],
    format: str = "auto",
    *,
    source: FrameSource = "backfill",
    session_id: str | None = None,
    now: datetime | None = None,
    skip_lines: int = 0,
) -> ParsedStream:
    """Parse a transcript file (a path) or its lines into turns by session, sub-agent frames and a report.

    Malformed lines are counted and reported, never raised. Repeated message ids
    keep their first turn; identical frames are kept once. With ``skip_lines``, the
    first lines (already read by an earlier call) only teach the parser their ids, so
    what the later lines yield is exactly what a parse of the whole input yields for them.

    Args:
        path_or_lines: a path (``str`` is always a path), or an iterable of lines.
        format: ``auto``, ``turns``, ``claude-code``, ``stream-json`` or ``acp``.
        source: ``backfill`` for files read afterwards, ``live`` for streams read as they run.
        session_id: the session for lines that name none (``turns`` and ACP without ``sessionId``).
        now: observation time for lines without a timestamp (default: the current time).
        skip_lines: how many leading lines yield nothing and are left out of the report.

    Raises:
        ConfigError: unknown ``format``.
        StreamParseError: the file cannot be read, or no line in it is a JSON object.
    """
    return parse_followed(path_or_lines, format, source=source, session_id=session_id, now=now,
                          skip_lines=skip_lines)[0]


def parse_followed(
    path_or_lines: str | os.PathLike[str] | Iterable[str | bytes],
    format: str = "auto",
    *,
    source: FrameSource = "backfill",
    session_id: str | None = None,
    now: datetime | None = None,
    skip_lines: int = 0,
    known: Mapping[str, Any] | None = None,
) -> tuple[ParsedStream, dict[str, Any] | None]:
    """``parse_stream``, and the ids its parser learned of every line (``StreamParser.index_state``, None when it
    cannot say). With ``known`` (such ids of the first ``skip_lines`` lines) and a ``format``, those lines are not in
    the input, which starts at line ``skip_lines + 1``: a followed file's earlier lines are not read again."""
    if format != "auto" and format not in PARSERS:
        raise ConfigError(f"unknown stream format {format!r}; use auto or one of {', '.join(PARSERS)}")
    raw, where = _read_lines(path_or_lines)
    scratch = ParseReport(format=format)
    earlier = ParseReport(format=format)  # what the skipped lines would report: not this call's
    make = lambda fmt: PARSERS[fmt](source=source, now=now, default_session_id=session_id)  # noqa: E731
    # The skipped lines are read one at a time and only indexed (a followed file's earlier part can
    # be large); only the first few wait, when the format is still to be detected.
    parser: StreamParser | None = make(format) if format != "auto" and skip_lines else None
    if parser is not None and known is not None:
        parser.load_index_state(known)
    waiting: list[tuple[int, dict[str, Any]]] = []
    lines = iter(raw)
    for n, text in enumerate(itertools.islice(lines, 0 if parser is not None and known is not None else skip_lines),
                             start=1):
        for obj in decode_line(text, n, earlier):
            if parser is not None:
                parser.index(n, obj)
            else:
                waiting.append((n, obj))
        if parser is None and len(waiting) >= _DETECT_LINES * 4:
            parser = make(detect_format(o for _, o in waiting))
            for m, o in waiting:
                parser.index(m, o)
            waiting = []
    rest = list(lines)
    objs = [(n, obj) for n, text in enumerate(rest, start=skip_lines + 1) for obj in decode_line(text, n, scratch)]
    if not objs and scratch.malformed and not skip_lines:
        objs = _whole_document(rest, scratch)
        if not objs:
            raise StreamParseError("no line is a JSON object; is this a transcript?", source=where)
    if parser is None:
        first = [o for _, o in [*waiting, *objs][: _DETECT_LINES * 4]]
        parser = make(detect_format(first) if format == "auto" else format)
    fmt = parser.format
    report = parser.report
    report.lines, report.malformed = scratch.lines, scratch.malformed
    report.line_types.update(scratch.line_types)
    report.skipped.extend(scratch.skipped)
    for n, obj in [*waiting, *objs]:
        parser.index(n, obj)
    events: list[Event] = []
    for n, obj in objs:
        events.extend(parser.feed(n, obj))
    events.extend(parser.finish())
    return _assemble(fmt, events, parser), parser.index_state()


def learn_ids(format: str, known: Mapping[str, Any], lines: Iterable[bytes], first: int) -> dict[str, Any] | None:
    """``known`` (a parser's ``index_state``) with what ``lines``, numbered from ``first``, teach a ``format`` parser."""
    parser = PARSERS[format]()
    parser.load_index_state(known)
    scratch = ParseReport(format=format)
    for n, text in enumerate(lines, start=first):
        for obj in decode_line(text, n, scratch):
            parser.index(n, obj)
    return parser.index_state()


def _whole_document(raw: list[str | bytes], scratch: ParseReport) -> list[tuple[int, dict[str, Any]]]:
    """A file that is one JSON document: a list of lines, or ``{"session_id", "turns": [...]}``."""
    try:
        doc = json.loads(b"\n".join(r if isinstance(r, bytes) else r.encode() for r in raw))
    except (ValueError, RecursionError):
        return []
    if isinstance(doc, dict) and isinstance(doc.get("turns"), list):
        session = doc.get("session_id")
        doc = [{**t, "session_id": session} if session and isinstance(t, dict) else t for t in doc["turns"]]
    if not isinstance(doc, list) or not all(isinstance(x, dict) for x in doc):
        return []
    scratch.lines = scratch.malformed = 0
    scratch.line_types.clear()
    scratch.skipped.clear()
    return list(enumerate(doc, start=1))


def _assemble(fmt: str, events: list[Event], parser: StreamParser) -> ParsedStream:
    report = parser.report
    kept: dict[tuple[str, str | None], TurnEvent] = {}
    turn_events: list[TurnEvent] = []
    frames: list[SubagentFrame] = []
    seen_frames: set[tuple[Any, ...]] = set()
    repeated: list[SubagentFrame] = []
    for event in events:
        if isinstance(event, SubagentFrame):
            key = frame_key(event)
            if key in seen_frames:
                repeated.append(event)
            else:
                seen_frames.add(key)
                frames.append(event)
            continue
        ident = (event.session_id, event.turn.id)
        first = kept.get(ident) if event.turn.id is not None else None
        if first is not None:
            same = (first.turn.role, first.turn.content) == (event.turn.role, event.turn.content)
            reason = "duplicate message id" if same else "conflicting duplicate message id"
            parser._skip(event.line, event.turn.role, reason)
            continue
        kept[ident] = event
        turn_events.append(event)
    used = {e.line for e in turn_events} | {f.line for f in frames}
    for frame in repeated:
        if frame.line not in used:
            used.add(frame.line)
            parser._skip(frame.line, "frame", "repeats an earlier frame")
    sessions: dict[str, list[Turn]] = {}
    for event in turn_events:
        sessions.setdefault(event.session_id, []).append(event.turn)
    report.turns, report.frames = len(turn_events), len(frames)
    return ParsedStream(format=fmt, sessions=sessions, events=turn_events, frames=frames, report=report)
