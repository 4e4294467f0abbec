"""The normalized sub-agent frame, shared by the merge rules (``subagents``) and the stores that apply them.

It lives apart from ``subagents`` (whose recorder writes through a store) so the stores can
name it without importing the module that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ("LAST_REPORTED", "TERMINAL_STATUSES", "Key", "NormalizedFrame", "is_terminal")

TERMINAL_STATUSES: frozenset[str] = frozenset({"complete", "completed", "success", "error", "failed", "cancelled"})

Key = tuple[str, str, str]

#: Columns where the last reported (non-empty) value wins and an unreported one never blanks.
LAST_REPORTED: tuple[str, ...] = (
    "parent_tool_call_id", "subagent_type", "description", "agent_id", "child_session_id", "model",
    "agent_status", "total_tokens", "tool_use_count", "duration_ms",
)


def is_terminal(status: str | None) -> bool:
    """Whether a tool status settles the row: lowercased and stripped, in ``TERMINAL_STATUSES``."""
    return status is not None and status.strip().lower() in TERMINAL_STATUSES


@dataclass(frozen=True)
class NormalizedFrame:
    """A frame after normalization: column values as the row stores them."""

    session_id: str
    agent_execution_id: str
    tool_call_id: str
    turn_id: str | None
    parent_tool_call_id: str | None
    subagent_type: str | None
    description: str | None
    agent_id: str | None
    child_session_id: str | None
    model: str | None
    agent_status: str | None
    tool_status: str | None
    is_async: bool | None
    total_tokens: int | None
    tool_use_count: int | None
    duration_ms: int | None
    source: str
    observed_at: datetime
    #: When the first terminal frame was observed: this frame's ``observed_at`` if its tool status
    #: is terminal (``normalize_frame`` sets it), the first terminal one's for a folded backfill.
    settled_at: datetime | None = None

    @property
    def key(self) -> Key:
        """The row key: (session_id, agent_execution_id, tool_call_id)."""
        return (self.session_id, self.agent_execution_id, self.tool_call_id)

    @property
    def terminal(self) -> bool:
        """Whether this frame's tool status settles the row."""
        return is_terminal(self.tool_status)
