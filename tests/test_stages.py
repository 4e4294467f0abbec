"""Stage pieces that need no HTTP: S1 chunking, concurrency and compilation, the VET gate, prompt loading."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk.errors import ConfigError, ModelError
from tortoise_sdk.models import SearchHit
from tortoise_sdk.pipeline.merge import coerce_proposal
from tortoise_sdk.pipeline.prompts import PROMPT_NAMES, load_prompt
from tortoise_sdk.pipeline.s1_narrate import chunk_turns, compile_stories, narrate
from tortoise_sdk.pipeline.vet import vet

TURNS = [SearchHit(turn_id=f"t{i}", external_id=None, session_id="s", session_date=None, index=i, role="user",
                   name="Maya", content=f"turn {i}", score=0.0) for i in range(7)]


def test_chunks_and_seam_deduplication() -> None:
    assert [len(c) for c in chunk_turns(TURNS, 3)] == [3, 3, 1]
    story = compile_stories([
        "Maya started at Northwind Labs. She bikes to work every morning.",
        None,  # a failed chunk
        "She bikes to work every morning! Biscuit, her beagle, howls when she leaves.",
        "Tomás offered to walk Biscuit.",
    ])
    assert story == ("Maya started at Northwind Labs. She bikes to work every morning.\n\n"
                     "Biscuit, her beagle, howls when she leaves.\n\nTomás offered to walk Biscuit.")


class FakeClient:
    """Answers acomplete_json with a fixed parsed value, or raises."""

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error, self.prompts = value, error, []

    async def acomplete_json(self, stage: str, messages: list[dict], **kw: Any) -> Any:
        self.prompts.append(messages[0]["content"])
        if self.error:
            raise self.error
        return SimpleNamespace(parsed=SimpleNamespace(value=self.value))


CANDIDATES = coerce_proposal({"points": [
    {"content": "Maya works at Northwind Labs.", "about": ["Maya"], "quote": "Northwind", "turn": 0},
    {"content": "Maya is employed by Northwind.", "about": ["Northwind Labs"], "quote": "Northwind", "turn": 0,
     "search_keys": ["employer"]},
    {"content": "The weather was nice.", "quote": "nice", "turn": 1},
]}, stage="s2")[0]


def test_a_pasted_log_is_shown_to_the_model_by_its_head_and_tail() -> None:
    """A reviewer's: a 1 MB paste went whole into every prompt of the session, past the model's context, so every
    stage failed on every retry and the session was never extracted."""
    from tortoise_sdk.pipeline.common import PROMPT_TURN_HEAD, PROMPT_TURN_TAIL, format_transcript

    paste = "ERROR start " + "x " * 500_000 + "the last line says disk full"
    turns = [SearchHit(turn_id="t0", external_id=None, session_id="s", session_date=None, index=0, role="user", name=None,
                       content=paste, score=0.0),
             SearchHit(turn_id="t1", external_id=None, session_id="s", session_date=None, index=1, role="user", name=None,
                       content="my dog is Biscuit", score=0.0)]
    text = format_transcript(turns)
    assert len(text) < PROMPT_TURN_HEAD + PROMPT_TURN_TAIL + 200
    first, second = text.splitlines()
    assert first.startswith("[0] user: ERROR start x x") and first.endswith("the last line says disk full")
    assert "characters not shown" in first and second == "[1] user: my dog is Biscuit"


def test_a_memory_block_pasted_into_a_turn_is_not_shown_to_the_model() -> None:
    """Grounding refuses a quote from a pasted block; the model was still shown the block's words as the conversation
    (a reviewer's: "allergic to peanuts", only in the block, reached the S2 prompt)."""
    from tortoise_sdk.pipeline.common import format_transcript

    turn = SearchHit(turn_id="t0", external_id=None, session_id="s", session_date=None, index=0, role="user",
                     name=None, score=0.0, content="[TORTOISE MEMORY] 1. (memory) allergic to peanuts\n"
                                                   "[/tortoise memory]\n\nBig news: I got engaged to Sam!")
    assert format_transcript([turn]) == "[0] user: [memory block not shown] Big news: I got engaged to Sam!"


def test_vet_keeps_drops_and_merges() -> None:
    client = FakeClient({"decisions": [
        {"id": "c3", "action": "drop", "reason": "small talk"},
        {"id": "c2", "action": "merge", "into": "c1", "reason": "same fact"},
        {"id": "c9", "action": "drop"},  # unknown ids are ignored
    ]})
    kept, notes = asyncio.run(vet(client, load_prompt("vet"), CANDIDATES, TURNS))
    assert [(p.content, p.about, p.search_keys) for p in kept.points] == [
        ("Maya works at Northwind Labs.", ("Maya", "Northwind Labs"), ("employer",))]
    assert [(n.code, n.message) for n in notes] == [("drop", "c3 drop: small talk"), ("merge", "c2 merge: same fact")]
    assert "c1: " in client.prompts[0] and "[0] Maya: turn 0" in client.prompts[0]


@pytest.mark.parametrize("client", [FakeClient(error=ModelError("boom", error_class="server")),
                                    FakeClient({"verdict": "all good"})])
def test_vet_fails_open(client: FakeClient) -> None:
    kept, notes = asyncio.run(vet(client, load_prompt("vet"), CANDIDATES, TURNS))
    assert kept == CANDIDATES
    assert [n.stage for n in notes] == ["vet"] and "kept every candidate" in notes[0].message


def test_prompts_ship_hash_and_override(tmp_path: Path) -> None:
    for name in PROMPT_NAMES:
        p = load_prompt(name)
        assert p.origin == f"tortoise_sdk.prompts/{name}.md" and len(p.sha256) == 64
    assert load_prompt("s1_narrate").fields == {"session_date", "chunk_number", "chunk_count", "first_turn",
                                                "last_turn", "transcript", "context", "known", "coding"}
    assert load_prompt("s2_map").fields == {"session_date", "story", "transcript", "context", "known", "coding"}
    assert load_prompt("s4_review").fields == {"session_date", "story", "priors", "candidates", "transcript", "context"}
    (tmp_path / "s1_narrate.md").write_text("Tell {transcript} as of {session_date}; keep {\"json\": 1}", encoding="utf-8")
    custom = load_prompt("s1_narrate", tmp_path)
    assert custom.render(transcript="T", session_date="D", chunk_number=1) == 'Tell T as of D; keep {"json": 1}'
    assert load_prompt("s2_map", tmp_path).origin.startswith("tortoise_sdk.prompts")  # not overridden: shipped
    with pytest.raises(ConfigError, match="session_date"):
        custom.render(transcript="T")
    with pytest.raises(ConfigError, match="no prompt template 'nope'"):
        load_prompt("nope")


def test_vet_merge_cycle_keeps_one_survivor() -> None:
    client = FakeClient({"decisions": [
        {"id": "c1", "action": "merge", "into": "c2"},
        {"id": "c2", "action": "merge", "into": "c1"},
        {"id": "c3", "action": "drop"},
    ]})
    kept, notes = asyncio.run(vet(client, load_prompt("vet"), CANDIDATES, TURNS))
    assert [(p.content, p.about) for p in kept.points] == [("Maya is employed by Northwind.",
                                                            ("Northwind Labs", "Maya"))]
    assert [n.message for n in notes] == ["c1 merge:", "c3 drop:"]


def test_vet_ignores_a_merge_into_a_dropped_candidate() -> None:
    client = FakeClient({"decisions": [{"id": "c2", "action": "merge", "into": "c1"}, {"id": "c1", "action": "drop"}]})
    kept, notes = asyncio.run(vet(client, load_prompt("vet"), CANDIDATES, TURNS))
    assert [p.content for p in kept.points] == ["Maya is employed by Northwind.", "The weather was nice."]
    assert [n.message for n in notes] == ["c2 merge ignored: target c1 is dropped", "c1 drop:"]


_decisions = st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["keep", "drop", "merge"]), st.integers(1, 6)),
                      max_size=10)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), _decisions)
def test_vet_never_loses_a_candidate_it_did_not_drop(n: int, raw: list[tuple[int, str, int]]) -> None:
    proposal = coerce_proposal({"points": [
        {"content": f"fact {i}", "about": [f"E{i}"], "quote": "turn", "turn": 0} for i in range(1, n + 1)]},
        stage="s2")[0]
    decisions = [{"id": f"c{i}", "action": a, "into": f"c{j}"} for i, a, j in raw]
    kept, _ = asyncio.run(vet(FakeClient({"decisions": decisions}), load_prompt("vet"), proposal, TURNS))
    dropped = {d["id"] for d in decisions if d["action"] == "drop"}
    holders = {f"c{i}": [p.content for p in kept.points if f"E{i}" in p.about] for i in range(1, n + 1)}
    for h, where in holders.items():
        assert len(where) == (0 if h in dropped else 1), (h, where)
    assert len({p.content for p in kept.points}) == len(kept.points)


_ANY = st.none() | st.booleans() | st.integers() | st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=2) \
    | st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"id": _ANY | st.sampled_from(["c1", "c2"]), "action": _ANY | st.sampled_from(
    ["drop", "merge"]), "into": _ANY | st.sampled_from(["c1", "c2", "c3"])}), max_size=4))
def test_vet_fails_open_on_any_decision_shape(decisions: list[dict[str, Any]]) -> None:
    """A reviewer's: an id or a merge target that was a list or an object raised TypeError (unhashable) outside the
    gate's guard, and the whole session's extraction crashed."""
    kept, _ = asyncio.run(vet(FakeClient({"decisions": decisions}), load_prompt("vet"), CANDIDATES, TURNS))
    dropped = {d["id"] for d in decisions if isinstance(d["id"], str) and d["action"] == "drop"}
    assert len(kept.points) >= len(CANDIDATES.points) - len(dropped & {"c1", "c2", "c3"}) - 2


class GaugedClient:
    """Answers acomplete after a pause, counting how many calls are in flight at once."""

    def __init__(self, pause: float = 0.02) -> None:
        self.pause, self.in_flight, self.peak, self.calls = pause, 0, 0, 0

    async def acomplete(self, stage: str, messages: list[dict], **kw: Any) -> Any:
        self.in_flight += 1
        self.calls += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.pause)
        finally:
            self.in_flight -= 1
        return SimpleNamespace(text=f"Story of chunk {kw['chunk']}.")


@pytest.mark.parametrize(("size", "concurrency"), [(1, 3), (1, 7), (1, 10), (3, 8), (2, 2), (1, 1)])
def test_s1_runs_min_of_chunks_and_concurrency_calls_at_once(size: int, concurrency: int) -> None:
    client = GaugedClient()
    result = asyncio.run(narrate(client, load_prompt("s1_narrate"), TURNS, session_date=None, size=size,
                                 concurrency=concurrency))
    chunks = len(chunk_turns(TURNS, size))
    assert (client.calls, client.peak) == (chunks, min(chunks, concurrency))
    assert result.stories == [f"Story of chunk {n}." for n in range(chunks)] and result.errors == []


@pytest.mark.parametrize("capped", [True, False])
def test_a_reply_cut_mid_json_says_whether_a_retry_was_made(capped: bool) -> None:
    """Reviewer: a reply that ended mid-JSON with finish_reason "stop" was said to be cut "even after a retry with a
    larger cap", though no retry is made for it (the model said it had finished)."""
    from tortoise_sdk.jsonparse import parse_json
    from tortoise_sdk.llm.client import LLMResult
    from tortoise_sdk.pipeline.s2_map import ask_for_proposal

    text = '{"points": [{"content": "Maya has a beagle.", "quote": "a beagle", "turn": 0}, {"content": "Maya'

    class Client:
        stats: dict[str, Any] = {}

        async def acomplete_json(self, stage: str, messages: Any, expect: str) -> LLMResult:
            return LLMResult(text=text, finish_reason="length" if capped else "stop", partial=capped, attempts=1,
                             stage=stage, parsed=parse_json(text, expect="object"))

    outcome = asyncio.run(ask_for_proposal(Client(), "s2", "prompt"))
    assert outcome.partial and outcome.proposal is not None and len(outcome.proposal.points) == 1
    (warning,) = [w for w in outcome.warnings if w.code == "truncation"]
    assert ("even after a retry" in warning.message) is capped
    assert ("the model said it had finished" in warning.message) is not capped
