"""What one extraction reads (pipeline.window): the turns after the watermark, the previous window's last turns
as read-only context (each turn is context at most once), the session's newest memories, and a full re-read
when asked or when the prompts changed. No model: the store's state is written as S5 would write it."""

from __future__ import annotations

from typing import Any

import pytest

from tortoise_sdk import Memory
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.pipeline.prompts import load_prompt
from tortoise_sdk.pipeline.window import CONTEXT_TURNS, KNOWN_MEMORIES, prompts_sha, read_window
from tortoise_sdk.store.plan import ExtractionPlan, ItemPlan, Window

PROMPTS = {name: load_prompt(name) for name in ("s1_narrate", "s2_map", "s4_review")}


@pytest.fixture
def mem(tmp_path: Any):
    with Memory(str(tmp_path / "m.db"), namespace="t") as m:
        yield m


def commit(mem: Memory, start: int, end: int, base: int, *, items: int = 0, sha: str | None = None) -> None:
    """What S5 commits for a window: its memories and the watermark, in one transaction."""
    plan = ExtractionPlan(session_id="s", extraction_id=f"x{start}", valid_at=None,
                          items=[ItemPlan("point", f"fact {start}.{i}") for i in range(items)],
                          window=Window(start=start, end=end, base=base, prompts_sha=sha or prompts_sha(PROMPTS)))
    mem.store.write_extraction("t", plan, finalize=lambda r: ExtractionReport(status="ok"))


def capture(mem: Memory, turns: list[Any]) -> None:
    at = len(mem.turns("s"))
    mem.capture("s", [{"id": f"m{at + i}", **(t if isinstance(t, dict) else {"role": "user", "content": t})}
                      for i, t in enumerate(turns)], extract=False)


def test_a_window_reads_new_turns_and_the_previous_windows_tail_as_context(mem: Memory) -> None:
    capture(mem, [f"turn {i}" for i in range(10)])
    first = read_window(mem.store, "t", "s", PROMPTS, full=False)
    assert (first.window.start, first.window.end, first.window.base, first.context, first.known) == (0, 9, -1, [], [])
    commit(mem, 0, 9, -1, items=2)
    capture(mem, ["turn 10", {"role": "tool", "content": "[tool_result] noise"}, "turn 12"])
    second = read_window(mem.store, "t", "s", PROMPTS, full=False)
    assert (second.window.start, second.window.end) == (10, 12)
    assert [t.index for t in second.context] == [6, 7, 8, 9][-CONTEXT_TURNS:]
    assert [t.index for t in second.evidence] == [10, 12]  # a tool turn is read, never evidence
    assert [m.content for m in second.known] == ["fact 0.0", "fact 0.1"]
    # A short window next: its context comes from the window before only, so turn 9 is never context twice.
    commit(mem, 10, 12, 9)
    capture(mem, ["turn 13"])
    third = read_window(mem.store, "t", "s", PROMPTS, full=False)
    assert [t.index for t in third.context] == [10, 12]
    commit(mem, 13, 13, 12)
    assert read_window(mem.store, "t", "s", PROMPTS, full=False).turns == []


def test_known_memories_are_the_sessions_newest(mem: Memory) -> None:
    capture(mem, ["a", "b"])
    commit(mem, 0, 1, -1, items=KNOWN_MEMORIES + 3)
    capture(mem, ["c"])
    known = read_window(mem.store, "t", "s", PROMPTS, full=False).known
    assert [m.content for m in known] == [f"fact 0.{i}" for i in range(3, KNOWN_MEMORIES + 3)]


def test_full_or_changed_prompts_read_the_whole_session_again(mem: Memory, tmp_path: Any) -> None:
    capture(mem, ["a", "b", "c"])
    commit(mem, 0, 2, -1, items=1)
    capture(mem, ["d"])
    assert read_window(mem.store, "t", "s", PROMPTS, full=False).window.start == 3
    full = read_window(mem.store, "t", "s", PROMPTS, full=True)
    assert (full.window.start, full.window.end, full.window.full, full.context) == (0, 3, True, [])
    assert [m.content for m in full.known] == ["fact 0.0"]  # what it gave before is shown as known
    (tmp_path / "s2_map.md").write_text(PROMPTS["s2_map"].text + "\nBe brief.", encoding="utf-8")
    edited = {**PROMPTS, "s2_map": load_prompt("s2_map", tmp_path)}
    changed = read_window(mem.store, "t", "s", edited, full=False)
    assert (changed.window.start, changed.window.full) == (0, True)
    # A watermark of unknown prompts (set by the migration) forces nothing.
    commit(mem, 3, 3, 2, sha="")
    mem.store.write_extraction("t", ExtractionPlan(session_id="s", extraction_id="y", valid_at=None,
                                                   window=Window(start=3, end=3, base=3, full=True)),
                               finalize=lambda r: ExtractionReport(status="ok"))
    assert mem.store.extraction_state("t", "s").prompts_sha is None
    capture(mem, ["e"])
    assert read_window(mem.store, "t", "s", edited, full=False).window.start == 4
