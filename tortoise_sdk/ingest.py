"""What ``Memory.ingest`` returns: the receipts of the captured sessions, the frames recorded, the parse report."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .models import CaptureReceipt, Diagnostic, SubagentCounters
from .streams.base import ParseReport

__all__ = ("IngestReport",)


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
