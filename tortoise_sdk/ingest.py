"""What ``Memory.ingest`` returns (receipts, frames recorded, the parse report), and what ``Memory.follow`` reads."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .errors import StreamParseError
from .models import CaptureReceipt, DeferredModel, Diagnostic, SubagentCounters
from .streams.base import ParsedStream, ParseReport, TurnEvent

__all__ = ("FollowedFile", "IngestReport", "TailSpan", "follow_state", "known_ids", "tail_span", "with_line_ids")


class IngestReport(DeferredModel):
    """The outcome of ingesting one transcript or stream: turns captured, sub-agent frames recorded."""

    format: str = Field(description="The format read: claude-code, stream-json, acp or turns.")
    source: str = Field(description="live or backfill, as given to the frames.")
    receipts: list[CaptureReceipt] = Field(default_factory=list, description="One capture receipt per session chunk.")
    sessions: int = Field(default=0, description="Sessions found in the input.")
    sessions_unchanged: int = Field(default=0, description="Sessions whose turns were all stored already.")
    turns_received: int = 0
    turns_stored: int = Field(default=0, description="Turns newly stored (0 when the same file is ingested again).")
    frames: int = Field(default=0, description="Sub-agent frames parsed.")
    frames_recorded: int = Field(default=0, description="Frames merged into subagent rows.")
    counters: SubagentCounters = Field(default_factory=SubagentCounters,
                                       description="What these frames added to the persistent counters.")
    errors: list[Diagnostic] = Field(default_factory=list, description="Sessions, or turns, that could not be "
                                                                        "captured (a turn is left out alone).")
    warnings: list[Diagnostic] = Field(default_factory=list, description="Turns stored changed: a NUL or an "
                                                                          "unpaired surrogate as U+FFFD.")
    parse: ParseReport = Field(description="Lines read by type, and every line not used, with its reason.")
    start_offset: int | None = Field(default=None, description="Memory.follow: the byte offset read from.")
    end_offset: int | None = Field(default=None, description="Memory.follow: the offset after the last complete "
                                                             "line read (where the next call starts).")
    restarted: bool = Field(default=False, description="Memory.follow: the file shrank or was rewritten, so it was "
                                                       "read again from its start.")

    @property
    def ok(self) -> bool:
        """Every session was captured (frame failures are in ``counters.failed``)."""
        return not self.errors


#: Bytes of a followed file hashed at its start and before the offset reached: a rewrite changes them.
CHECK_BYTES = 4096
#: Bytes ``Memory.follow`` reads at once: the lines before the offset are read in pieces this size.
READ_PIECE = 1 << 20
#: The longest line ``Memory.follow`` reads; a longer one is passed over (reported), so no file costs
#: more memory than this, beside ``max_bytes``.
MAX_LINE_BYTES = 32 << 20


@dataclass(frozen=True)
class TailSpan:
    """The bytes ``[start, end)`` of a followed file that one ``Memory.follow`` call reads."""

    start: int
    end: int
    restarted: bool
    skip_lines: int
    skip: bool = False  # the one line in [start, end) is longer than MAX_LINE_BYTES: passed over, not read
    #: Where the next read starts: ``end``, or the start of a last line read without its newline (it is read again
    #: then, whole: its ids teach the parser, and what it yielded is stored already).
    resume: int | None = None

    @property
    def next_start(self) -> int:
        """The offset to keep for the next read."""
        return self.end if self.resume is None else self.resume


class FollowedFile:
    """A regular file opened for ``Memory.follow``: read by offset, in pieces, never whole.

    Raises:
        StreamParseError: the path cannot be opened, or is not a regular file (a device, a FIFO,
            a directory), which has no offset to keep and may never end.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        where = str(path)
        try:
            # O_NONBLOCK: opening a FIFO with no writer must not wait for one.
            self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        except OSError as exc:
            raise StreamParseError(f"cannot read {where}: {exc.strerror or exc}", source=where) from exc
        info = os.fstat(self._fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(self._fd)
            raise StreamParseError(f"{where} is not a regular file; follow reads transcript files only",
                                   source=where)
        self.size = info.st_size
        self.where = where
        self._file = os.fdopen(self._fd, "rb", buffering=0)

    def read(self, offset: int, size: int) -> bytes:
        """At most ``size`` bytes from ``offset`` (fewer at the end of the file)."""
        parts, got = [], 0
        while got < size:
            part = self._pread(min(size - got, READ_PIECE), offset + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def find_newline(self, start: int, stop: int) -> int:
        """The offset just past the first newline in ``[start, stop)``, or -1; read in pieces."""
        at = start
        while at < stop:
            piece = self._pread(min(READ_PIECE, stop - at), at)
            if not piece:
                break
            found = piece.find(b"\n")
            if found >= 0:
                return at + found + 1
            at += len(piece)
        return -1

    def rfind_newline(self, start: int, stop: int) -> int:
        """The offset just past the last newline in ``[start, stop)``, or -1; read backwards in pieces."""
        at = stop
        while at > start:
            low = max(start, at - READ_PIECE)
            found = self.read(low, at - low).rfind(b"\n")
            if found >= 0:
                return low + found + 1
            at = low
        return -1

    def lines(self, stop: int) -> Iterator[bytes]:
        """The lines of ``[0, stop)`` (which ends after a newline), one at a time; a line longer than
        ``MAX_LINE_BYTES`` is given as ``b""`` so the numbering holds."""
        carry, dropping = b"", False
        for piece in _pieces(self, stop):
            *complete, last = piece.split(b"\n")
            for part in complete:
                yield b"" if dropping else carry + part
                carry, dropping = b"", False
            if not dropping:
                carry += last
                if len(carry) > MAX_LINE_BYTES:
                    carry, dropping = b"", True

    def _pread(self, size: int, offset: int) -> bytes:
        self._file.seek(offset)  # not os.pread: Windows has none
        return self._file.read(size) or b""

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> FollowedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tail_span(f: FollowedFile, saved: Mapping[str, Any], max_bytes: int | None = None) -> TailSpan:
    """What to read of ``f`` after the state ``follow_state`` saved: the complete lines added since.

    A file shorter than the saved offset, or whose bytes before it changed, is read from its
    start (``restarted``). ``end`` stops after the last newline (a line still being written
    waits; a last line with no newline that is a whole JSON object is read, and ``resume`` says
    to read it again next time: a writer that never ends its last line would otherwise keep it
    from every read), and within ``max_bytes`` of ``start`` when given (but always after one whole
    line, unless that line is longer than ``MAX_LINE_BYTES``: then ``skip`` is set and it is passed
    over).
    """
    start = saved.get("offset", 0)
    start = start if isinstance(start, int) and start >= 0 else 0
    restarted = start > f.size or (start > 0 and saved.get("check") != _prefix_check(f, start))
    if restarted:
        start = 0
    window = f.size - start if max_bytes is None else min(f.size - start, max_bytes)
    end = f.rfind_newline(start, start + window)
    end = start if end < 0 else end
    resume = None
    if window == f.size - start and _whole_object(f, end):  # the file's last line, ended but for its newline
        end, resume = f.size, end
    skip = False
    if end == start and window < f.size - start:  # one line longer than max_bytes: read it whole, if it is not huge
        past = f.find_newline(start + window, f.size)
        if past > 0:
            end, skip = past, past - start > MAX_LINE_BYTES
    lines = saved.get("lines")
    if restarted or not isinstance(lines, int) or lines < 0:
        lines = sum(piece.count(b"\n") for piece in _pieces(f, start))
    return TailSpan(start, end, restarted, lines, skip, resume)


def _whole_object(f: FollowedFile, start: int) -> bool:
    """The bytes from ``start`` to the end of ``f`` (a last line with no newline) are one JSON object."""
    if not 0 < f.size - start <= MAX_LINE_BYTES:
        return False
    try:
        return isinstance(json.loads(f.read(start, f.size - start)), dict)
    except (ValueError, RecursionError):
        return False


def follow_state(f: FollowedFile, span: TailSpan, format: str, lines_read: int,
                 ids: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The state to save after reading ``f`` up to ``span.next_start``: the offset, a check of the bytes before it,
    the number of lines before it, the format, and the ids its parser learned of those lines (when it can say)."""
    state = {"offset": span.next_start, "check": _prefix_check(f, span.next_start), "format": format,
             "lines": span.skip_lines + lines_read}
    return state if ids is None else {**state, "ids": {"offset": span.next_start, **ids}}


def known_ids(saved: Mapping[str, Any], format: str, offset: int) -> dict[str, Any] | None:
    """What the lines before ``offset`` taught a ``format`` parser, as ``follow_state`` saved it; None when it was not
    saved for that format and offset (an older cursor, another format): those lines are then read again."""
    if offset == 0:
        return {}
    ids = saved.get("ids")
    if saved.get("format") != format or not isinstance(ids, Mapping) or ids.get("offset") != offset:
        return None
    return {k: v for k, v in ids.items() if k != "offset"}


def _pieces(f: FollowedFile, stop: int) -> Iterator[bytes]:
    at = 0
    while at < stop:
        piece = f.read(at, min(READ_PIECE, stop - at))
        if not piece:
            return
        at += len(piece)
        yield piece


def _prefix_check(f: FollowedFile, offset: int) -> str:
    """A digest of the first and the last ``CHECK_BYTES`` bytes before ``offset``."""
    head, tail = f.read(0, min(offset, CHECK_BYTES)), f.read(max(0, offset - CHECK_BYTES), min(offset, CHECK_BYTES))
    return hashlib.sha256(b"%d:" % offset + head + b"\x00" + tail).hexdigest()


def with_line_ids(parsed: ParsedStream) -> ParsedStream:
    """A followed file's id-less turns (plain turn JSONL) with their line as their id: ``L<line>``, ``L<line>.<k>``
    for the k-th turn of one line.

    A follow that reads only the lines after its cursor cannot place such a turn by its position in what it
    read (a second read would take "three" for the stored turn 0 and conflict, or, said again, skip it as
    stored). Its line is its identity in the file, so the same lines read again after a crash store nothing
    twice. A read from the file's start keeps positions, as ``ingest`` does, so a file captured whole first
    and followed after is not stored again.
    """
    if all(e.turn.id is not None or e.line is None for e in parsed.events):
        return parsed
    seen: Counter[int] = Counter()
    events: list[TurnEvent] = []
    for e in parsed.events:
        if e.turn.id is None and e.line is not None:
            k, seen[e.line] = seen[e.line], seen[e.line] + 1
            e = e.model_copy(update={"turn": e.turn.model_copy(update={"id": f"L{e.line}" + (f".{k}" if k else "")})})
        events.append(e)
    sessions: dict[str, list] = {}
    for e in events:
        sessions.setdefault(e.session_id, []).append(e.turn)
    return parsed.model_copy(update={"events": events, "sessions": sessions})
