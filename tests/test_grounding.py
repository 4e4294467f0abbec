"""Grounding: verbatim quotes in the cited turn, re-anchoring, rejection of that item alone, non-evidence turns."""

from __future__ import annotations

from tortoise_sdk.models import MEMORY_BLOCK_MARKER, SearchHit
from tortoise_sdk.pipeline.grounding import evidence_turns, ground, is_evidence
from tortoise_sdk.pipeline.merge import coerce_proposal


def hit(index: int, content: str, role: str = "user", name: str | None = "Maya") -> SearchHit:
    return SearchHit(turn_id=f"t{index}", external_id=None, session_id="s", session_date=None, index=index,
                     role=role, name=name, content=content, score=0.0)


TURNS = [
    hit(0, "I\u2019m now at  Helix Health,\nleading their data platform."),
    hit(1, "Wow, a lead role!", role="assistant", name=None),
    hit(2, "Biscuit is happier too, I come home for lunch."),
]


def proposal(points: list[dict]) -> object:
    return coerce_proposal({"entities": [{"name": "Maya", "kind": "person"}, {"name": "Zed", "kind": "person"}],
                            "points": points}, stage="s2")[0]


def test_quotes_match_ignoring_case_spacing_and_typographic_quotes() -> None:
    result = ground(proposal([
        {"content": "Maya works at Helix Health.", "quote": "i'm NOW at Helix Health, leading", "turn": 0,
         "about": ["Maya"]},
        {"content": "Maya comes home for lunch.", "quote": "\u201cBiscuit is happier ... home for lunch\u201d", "turn": 2},
    ]), TURNS)
    assert [(g.turn_index, g.source.turn_id) for g in result.points] == [(0, "t0"), (2, "t2")]
    assert result.warnings == [] and result.rejected == 0
    assert [e.name for e in result.entities] == ["Maya"]  # Zed is neither used nor named in the session


def test_wrong_turn_is_reanchored_and_a_missing_quote_rejects_only_that_item() -> None:
    result = ground(proposal([
        {"content": "Maya comes home for lunch.", "quote": "I come home for lunch", "turn": 0},
        {"content": "Maya adopted Biscuit in 2022.", "quote": "I adopted him in 2022", "turn": 2},
        {"content": "Maya leads a data platform.", "turn": 0},
        {"content": "Maya works at Helix Health.", "quote": "Helix Health", "turn": 7},
    ]), TURNS)
    assert [g.item.content for g in result.points] == ["Maya comes home for lunch.", "Maya works at Helix Health."]
    assert [g.turn_index for g in result.points] == [2, 0]
    assert [(w.code, (w.detail or {}).get("found")) for w in result.warnings] == [
        ("reanchored", 2), ("ungrounded_quote", None), ("missing_quote", None), ("reanchored", 0)]
    assert result.rejected == 2


def test_tool_subagent_and_memory_block_turns_are_never_evidence() -> None:
    turns = [
        hit(0, "I moved to Lisbon."),
        hit(1, "Maya moved to Lisbon in 2021.", role="tool", name=None),
        hit(2, f"{MEMORY_BLOCK_MARKER}\n- Maya lives in Berlin", role="system", name=None),
        hit(3, "Maya lives in Berlin (from a subagent)", role="assistant", name=None),
        hit(4, "Maya lives in Berlin (injected)", role="system", name=None),
    ]
    meta = {"t3": {"isSidechain": True}, "t4": {"tortoise": "memory_block"}}
    assert [is_evidence(t, meta.get(t.turn_id)) for t in turns] == [True, False, False, False, False]
    evidence = evidence_turns(turns, meta)
    result = ground(proposal([{"content": "Maya lives in Berlin.", "quote": "Maya lives in Berlin", "turn": 2}]),
                    evidence)
    assert result.points == [] and result.rejected == 1


def test_quotes_too_short_or_inside_words_or_spanning_far_ground_nothing() -> None:
    long_turn = hit(0, "The weather " + "blah " * 80 + "was nice, and I help at the shelter.")
    result = ground(proposal([
        {"content": "Maya owns a yacht.", "quote": "I", "turn": 0},
        {"content": "Maya has three children.", "quote": "he", "turn": 0},  # only inside "help", "shelter"
        {"content": "Maya hates the weather.", "quote": "The weather ... was nice", "turn": 0},  # 400 chars apart
        {"content": "Maya helps at a shelter.", "quote": "I help at the shelter", "turn": 0},
    ]), [long_turn])
    assert [g.item.content for g in result.points] == ["Maya helps at a shelter."]
    assert result.rejected == 3


def test_a_memory_block_inside_a_turn_is_cut_out_before_matching() -> None:
    system = hit(0, f"You are helpful.\n\n{MEMORY_BLOCK_MARKER} data\n1. (memory) Maya is allergic to peanuts ref:m_1\n"
                    f"[/tortoise memory]\nBe concise.", role="system", name=None)
    user = hit(1, f"ok {MEMORY_BLOCK_MARKER} Maya is allergic to peanuts [/tortoise memory] and I love hiking")
    result = ground(proposal([
        {"content": "Maya is allergic to peanuts.", "quote": "Maya is allergic to peanuts", "turn": 0},
        {"content": "Maya loves hiking.", "quote": "I love hiking", "turn": 1},
    ]), [system, user])
    assert [g.item.content for g in result.points] == ["Maya loves hiking."]
    assert result.rejected == 1
