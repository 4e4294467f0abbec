"""Memories first in a coding agent's next session (issue 23), end to end through litellm's real HTTP path.

One real Claude Code session excerpt (``tests/data/entireio_cli_goreleaser_fix.jsonl``: a GoReleaser
release fails on a config field, the agent finds the cause and removes the line) is ingested with a
model configured; S1 and S2 get the coding section of their prompts (``prompts/coding.md``), the
extracted memories cite the turns they come from, and the next session's block for the same failure
shows the memory in place of the verbatim turns it cites. Replayed from
``cassettes/test_coding_memory/``, recorded from the stub script beside it (scripted as a capable model
would answer those prompts, written by hand: see its ``about``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ModelEndpoint
from pipeline_scenarios import memory, whole_cassette_played  # noqa: F401 - autouse: every recorded exchange is played

pytestmark = pytest.mark.vcr

EXCERPT = Path(__file__).parent / "data" / "entireio_cli_goreleaser_fix.jsonl"
SESSION = "c93f3533-0f6b-4a61-99bd-7b788208ad61"
GUIDE = "This is a coding session"


def _prompts(vcr: Any, model_endpoint: ModelEndpoint) -> dict[str, str]:
    """Each stage's prompt as sent: from the stub while recording, from the cassette on replay."""
    if model_endpoint.stub is not None:
        return {r.stage: r.prompt for r in model_endpoint.stub.requests}
    return {r.headers["X-Tortoise-Stage"]: json.loads(r.body)["messages"][0]["content"] for r in vcr.requests}


def test_a_coding_session_is_remembered_and_its_memory_outranks_the_turns_it_cites(
        tmp_path: Path, vcr: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint) as mem:
        report = mem.ingest(EXCERPT, "claude-code", extract="inline")
        assert not report.errors
        prompts = _prompts(vcr, model_endpoint)
        assert sorted(prompts) == ["s1", "s2", "s4"]
        assert GUIDE in prompts["s1"] and GUIDE in prompts["s2"]  # tool turns: the coding section is on
        memories = {m.content: m for m in mem.memories()}
        fix = next(m for c, m in memories.items() if "field retry not found" in c)
        cited = {s.turn_id for s in fix.sources}
        turns = {t.turn_id: t for t in mem.turns(SESSION)}
        assert [turns[t].index for t in cited] == [14]

        # The next session asks about the same failure, as a coding host asks (its own turns held, specific only).
        question = 'goreleaser fails with "field retry not found", what was the fix?'
        block = mem.context([{"role": "user", "content": question}], session_id="next-session", held_from=0,
                            specific_only=True, time_budget_ms=None)
        ids = [p.id for p in block.pointers]
        assert ids and ids[0] == fix.id, block.block
        assert not cited & set(ids)  # the turn the memory stands for is not shown beside it


def test_a_chat_gets_the_prompts_it_always_had() -> None:
    from tortoise_sdk.models import SearchHit
    from tortoise_sdk.pipeline.prompts import coding_section, load_prompt

    def hit(role: str, content: str) -> SearchHit:
        return SearchHit(turn_id="t", external_id=None, session_id="s", session_date=None, index=0, role=role,
                         name=None, content=content, score=0.0)

    guide = load_prompt("coding")
    assert coding_section(guide, [hit("user", "I adopted a beagle"), hit("assistant", "Lovely!")]) == ""
    assert coding_section(guide, [hit("assistant", "Let me look.\n[tool_use Read file_path=a.py]")]).startswith(GUIDE)
    assert coding_section(guide, [hit("tool", "[tool_result Bash] ok")]).endswith("\n\n")
