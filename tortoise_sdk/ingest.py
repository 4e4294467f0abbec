"""What ``Memory.ingest`` returns (receipts, frames recorded, the parse report), and what ``Memory.follow`` reads."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from .models import CaptureReceipt, Diagnostic, SubagentCounters
from .streams.base import ParseReport

__all__ = ("IngestReport", "TailSpan", "follow_state", "tail_span")


class IngestReport(BaseModel):
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
    errors: list[Diagnostic] = Field(default_factory=list, description="Sessions that could not be captured.")
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


@dataclass(frozen=True)
class TailSpan:
    """The bytes ``[start, end)`` of a followed file that one ``Memory.follow`` call reads."""

    start: int
    end: int
    restarted: bool
    skip_lines: int


def tail_span(data: bytes, saved: Mapping[str, Any], max_bytes: int | None = None) -> TailSpan:
    """What to read of ``data`` after the state ``follow_state`` saved: the complete lines added since.

    A file shorter than the saved offset, or whose bytes before it changed, is read from its
    start (``restarted``). ``end`` stops after the last newline (a line still being written
    waits), and within ``max_bytes`` of ``start`` when given (but always after one whole line).
    """
    start = saved.get("offset", 0)
    start = start if isinstance(start, int) and start >= 0 else 0
    restarted = start > len(data) or (start > 0 and saved.get("check") != _prefix_check(data, start))
    if restarted:
        start = 0
    end = data.rfind(b"\n", start) + 1 or start
    if max_bytes is not None and end - start > max_bytes:
        end = data.rfind(b"\n", start, start + max_bytes) + 1 or data.find(b"\n", start) + 1
    return TailSpan(start, end, restarted, data.count(b"\n", 0, start))


def follow_state(data: bytes, end: int, format: str) -> dict[str, Any]:
    """The state to save after reading ``data`` up to ``end``: the offset, a check of the bytes before it, the format."""
    return {"offset": end, "check": _prefix_check(data, end), "format": format}


def _prefix_check(data: bytes, offset: int) -> str:
    """A digest of the first and the last ``CHECK_BYTES`` bytes before ``offset``."""
    head, tail = data[: min(offset, CHECK_BYTES)], data[max(0, offset - CHECK_BYTES): offset]
    return hashlib.sha256(b"%d:" % offset + head + b"\x00" + tail).hexdigest()
