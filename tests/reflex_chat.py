"""Small helpers for the reflex's method tests: ask one question, and pad a store with unrelated chatter."""

from __future__ import annotations

from tortoise_sdk import Memory
from tortoise_sdk.models import MemoryBlock

__all__ = ("ask", "capture_chatter")


def ask(mem: Memory, text: str) -> MemoryBlock:
    """The block for a one-turn window of ``text``: five pointers, no time budget (tests must not race the clock)."""
    return mem.context([{"role": "user", "content": text}], budget=5, time_budget_ms=None)


def capture_chatter(mem: Memory, speaker: str, turns: int = 60) -> None:
    """A later session of ``turns`` unrelated turns by ``speaker``, so that word statistics are those of a
    store of some size (a store of a few turns prunes every word as common)."""
    mem.capture("pad", [{"role": "user", "name": speaker, "content": f"unrelated chatter number {i} about the weather"}
                        for i in range(turns)], session_date="2023-07-01T10:00:00")
