"""Grounding: verbatim quotes in the cited turn, re-anchoring, rejection of that item alone, non-evidence turns,
and the matching rule (cuts mid-word, elisions, near-misses) as exact cases and hypothesis properties."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tortoise_sdk import Memory
from tortoise_sdk.models import MEMORY_BLOCK_MARKER, SearchHit
from tortoise_sdk.pipeline.grounding import evidence_turns, ground, is_evidence, quote_matches, verbatim
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
    # the stored quote is the turn's own words, as the turn writes them (a model quotes loosely)
    assert [g.source.quote for g in result.points] == [
        "I\u2019m now at  Helix Health,\nleading", "Biscuit is happier … home for lunch"]
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


def test_a_quote_cited_outside_the_window_is_said_to_be_outside_it() -> None:
    """Reviewer: in a run reading turns 50-119, a quote taken verbatim from turn 0 was rejected as "not in turn 0",
    where it is: the turn is outside the turns the run read as new."""
    window = [hit(50 + i, t.content, t.role, t.name) for i, t in enumerate(TURNS)]
    result = ground(proposal([{"content": "Maya adopted Biscuit.", "quote": "adopted him in 2019", "turn": 0}]), window)
    (warning,) = result.warnings
    assert warning.code == "ungrounded_quote" and result.rejected == 1
    assert "not in the turns this run read as new (turns 50-52); it cites turn 0, outside them" in warning.message
    inside = ground(proposal([{"content": "Maya adopted Biscuit.", "quote": "adopted him in 2019", "turn": 51}]), window)
    assert "is not in turn 51 nor in any other evidence turn of the session" in inside.warnings[0].message


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


def test_a_turn_the_claude_code_stream_flags_is_sidechain_is_a_sub_agent_record() -> None:
    """Reviewer: the SDK's own Claude Code stream writes ``is_sidechain``; a turn flagged only so grounded memories."""
    turns = [hit(0, "I drive a red Tesla."), hit(1, "Sub-agent: the user owns a blue Volvo XC90", role="assistant")]
    meta = {"t1": {"is_sidechain": True}}
    assert [is_evidence(t, meta.get(t.turn_id)) for t in turns] == [True, False]
    assert is_evidence(turns[1], {"is_sidechain": None})  # the stream writes None for a main-chain turn


def test_host_text_marked_not_evidence_grounds_nothing() -> None:
    """A compaction summary retells the session in a model's words: a quote found only there is rejected."""
    turns = [hit(0, "I moved to Lisbon."),
             hit(1, "Summary: the user moved to Lisbon and adopted a beagle.", role="system", name=None)]
    meta = {"t1": {"not_evidence": "compact_summary"}}
    assert [is_evidence(t, meta.get(t.turn_id)) for t in turns] == [True, False]
    result = ground(proposal([{"content": "Maya adopted a beagle.", "quote": "adopted a beagle", "turn": 1}]),
                    evidence_turns(turns, meta))
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


# -- the matching rule: exact cases ---------------------------------------------------------------------

TRIP = "Hey Mel! We went on a family road trip yesterday, and I can't believe how far we drove. I'm unhappy " \
       "with the car though: it has 120000 miles. I adopted a beagle named Biscuit from the shelter."


def test_verbatim_quotes_cut_mid_word_are_grounded() -> None:
    for quote in ("...a family road trip yest", "amily road trip yesterday", "\u201cOn a FAMILY road trip\u201d",
                  "went on a family road trip yesterday and I can't", "adopted a beagle named Bisc...",
                  "I adopted a beagle ... from the shelter", "Mel!  We went\non a family road trip\u2026"):
        assert quote_matches(quote, TRIP), quote


def test_near_misses_are_not_grounded() -> None:
    for quote in (
        "I adopted a poodle named Biscuit",  # one content word changed
        "I adopted a ... poodle named Biscuit",  # the elision beside the changed word
        "I adopted a ... eagle named Biscuit",  # a fragment of the old word beside an elision
        "I adopted a bea ... named Biscuit",
        "we went on a family road trip yesterday, and I can",  # cut before n't: the negation dropped
        "happy with the car though",  # cut after "un": the negation dropped
        "car though: it has 1200",  # a number split
        "0000 miles. I adopted a beagle",
        "I ... adopted a ... beagle",  # single short words stitched together
        "he",  # too short, only inside "shelter"
        "mily road tr",  # cut, and its complete words are under the floor
        "We went on a family cruise yesterday",
    ):
        assert not quote_matches(quote, TRIP), quote


# -- the matching rule: properties (hypothesis) -----------------------------------------------------------

# Words without i, n, o or digits: no negating prefix, contraction or number, so the guards never apply here.
WORD = st.text(alphabet="abcdefghjklmpqrstuvwxyz", min_size=2, max_size=9)
SENTENCE = st.lists(WORD, min_size=6, max_size=30)


def key(words: list[str]) -> str:
    return " ".join(words)


@st.composite
def span_of(draw: st.DrawFn, min_words: int = 5) -> tuple[list[str], int, int]:
    words = draw(SENTENCE)
    n = draw(st.integers(min_words, len(words)))
    a = draw(st.integers(0, len(words) - n))
    return words, a, a + n


def dress(draw: st.DrawFn, quote: str) -> str:
    """Case, curly quotes, trailing punctuation and spacing as a model may write them."""
    quote = draw(st.sampled_from([str, str.upper, str.title, str.swapcase]))(quote)
    quote = re.sub(" ", lambda _: draw(st.sampled_from([" ", "  ", "\n", " \t"])), quote)
    opening, closing = draw(st.sampled_from([("", ""), ("\u201c", "\u201d"), ('"', '".'), ("'", "!'")]))
    return opening + quote + closing


@given(st.data(), span_of())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_a_span_cut_mid_word_at_either_end_is_grounded(data: st.DataObject, span: tuple[list[str], int, int]) -> None:
    words, a, b = span
    quote = list(words[a:b])
    if data.draw(st.booleans(), "cut start"):
        quote[0] = quote[0][data.draw(st.integers(1, len(quote[0]) - 1)):]
    if data.draw(st.booleans(), "cut end"):
        quote[-1] = quote[-1][:data.draw(st.integers(1, len(quote[-1]) - 1))]
    prefix = data.draw(st.sampled_from(["", "...", "\u2026"]))
    assert quote_matches(dress(data.draw, prefix + key(quote)), key(words))


@given(st.data(), span_of(6))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_an_elision_of_interior_words_is_grounded(data: st.DataObject, span: tuple[list[str], int, int]) -> None:
    words, a, b = span
    start = data.draw(st.integers(a + 2, b - 3))
    stop = data.draw(st.integers(start + 1, b - 2))
    mark = data.draw(st.sampled_from([" ... ", "... ", " \u2026 ", " [...] "]))
    quote = key(words[a:start]) + mark + key(words[stop:b])
    assert quote_matches(dress(data.draw, quote), key(words))


@given(st.data(), span_of(4), WORD)
@settings(max_examples=250, suppress_health_check=[HealthCheck.too_slow])
def test_one_word_substituted_is_rejected_however_it_is_elided_or_cut(
        data: st.DataObject, span: tuple[list[str], int, int], new: str) -> None:
    words, a, b = span
    i = data.draw(st.integers(a, b - 1), "substituted word")
    old = words[i]
    assume(new != old and not old.startswith(new) and not old.endswith(new))
    swapped = [*words[a:i], new, *words[i + 1:b]]
    j = i - a
    # The new word stays whole in every variant; only what surrounds it is elided or cut.
    variants = [key(swapped)]
    if j >= 2:
        variants.append(key(swapped[:j]) + " ... " + key(swapped[j:]))
    if j <= len(swapped) - 3:
        variants.append(key(swapped[:j + 1]) + " ... " + key(swapped[j + 1:]))
    if j >= 3:
        variants.append(key(swapped[:1]) + " " + key(swapped[2:]))  # a word dropped elsewhere, no marker
        variants.append(key(swapped[:2]) + " ... " + key(swapped[3:]))
    if len(swapped) - 1 > j and len(swapped[-1]) > 1:
        variants.append(key(swapped[:-1]) + " " + swapped[-1][:-1])  # cut at the far end
    for quote in variants:
        # Unless the sentence happens to say it elsewhere: parts in order, boundaries ignored.
        parts = [p for p in quote.split(" ... ")]
        assume(not re.search(".*?".join(map(re.escape, parts)), key(words)))
        assert not quote_matches(dress(data.draw, quote), key(words)), quote


@given(st.data(), span_of(4))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_a_fragment_of_a_word_beside_an_elision_is_rejected(data: st.DataObject, span: tuple[list[str], int, int]) -> None:
    # "I adopted a ... eagle named Biscuit" must not ground in "I adopted a beagle named Biscuit".
    words, a, b = span
    i = data.draw(st.integers(a + 1, b - 2))
    assume(len(words[i]) >= 3)
    k = data.draw(st.integers(1, len(words[i]) - 1))
    tail = key([words[i][k:], *words[i + 1:b]])
    head = key([*words[a:i], words[i][:k]])
    before, after = key(words[a:i]), key(words[i + 1:b])
    assume(f" {tail} " not in f" {key(words)} " and f" {head} " not in f" {key(words)} ")
    assert not quote_matches(f"{before} ... {tail}", key(words))
    assert not quote_matches(f"{head} ... {after}", key(words))


@given(SENTENCE, SENTENCE, st.data())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_a_quote_of_another_turn_is_rejected(turn: list[str], other: list[str], data: st.DataObject) -> None:
    n = data.draw(st.integers(3, len(other)))
    a = data.draw(st.integers(0, len(other) - n))
    quote = key(other[a:a + n])
    assume(quote not in key(turn))
    assert not quote_matches(dress(data.draw, quote), key(turn))


def test_a_context_turn_grounds_nothing_and_an_item_citing_one_is_re_anchored_to_a_new_turn() -> None:
    context = [hit(0, "My neighbour Tomás walks Biscuit on Tuesdays and Thursdays.")]
    new = [hit(1, "Tomás can only do Thursdays now, so I walk Biscuit on Tuesdays.")]
    result = ground(proposal([
        # Only in the context turn (read by an earlier extraction): rejected, whatever it cites.
        {"content": "Tomás walks Biscuit on Tuesdays and Thursdays.", "quote": "walks Biscuit on Tuesdays and Thursdays",
         "turn": 0},
        # Cites the context turn, but the quote is in the new turn: re-anchored there.
        {"content": "Tomás walks Biscuit only on Thursdays.", "quote": "Tomás can only do Thursdays now", "turn": 0},
    ]), new, context)
    assert [(g.item.content, g.turn_index) for g in result.points] == [("Tomás walks Biscuit only on Thursdays.", 1)]
    assert [(w.code, (w.detail or {}).get("found")) for w in result.warnings] == [("context_turn", 0),
                                                                                  ("reanchored", 1)]
    assert result.rejected == 1 and "new items must cite new turns" in result.warnings[0].message


def test_s5_leaves_out_an_item_grounded_outside_the_window() -> None:
    from tortoise_sdk.pipeline.s5_write import build_plan
    from tortoise_sdk.store.plan import Window

    grounded = ground(proposal([
        {"content": "Maya works at Helix Health.", "quote": "now at Helix Health", "turn": 0},
        {"content": "Maya comes home for lunch.", "quote": "I come home for lunch", "turn": 2},
    ]), TURNS)
    plan, warnings = build_plan("s", grounded, {}, extraction_id="x", valid_at=None, receipt=None,
                                window=Window(start=1, end=2, base=0))
    assert [i.content for i in plan.items] == ["Maya comes home for lunch."]
    assert [(w.code, w.detail) for w in warnings] == [("outside_window", {"turn": 0})]
    assert plan.window == Window(start=1, end=2, base=0)


def test_a_fact_restated_by_s4_keeps_the_s2_quote_as_a_source_too() -> None:
    """S2 and S4 state one fact in other words from two turns: the union keeps one item, grounding keeps both
    turns as its sources; an absorbed quote that grounds stands in for one that does not."""
    from tortoise_sdk.pipeline.merge import union
    from tortoise_sdk.pipeline.s5_write import build_plan

    turns = [hit(0, "I have two cats now"), hit(1, "yes, 2 cats at home")]
    s2, _ = coerce_proposal({"points": [{"content": "Maya has two cats.", "quote": "I have two cats", "turn": 0}]},
                            stage="s2")
    s4, _ = coerce_proposal({"points": [{"content": "maya has 2 cats", "quote": "2 cats at home", "turn": 1}]},
                            stage="s4")
    grounded = ground(union(s2, s4), turns)
    plan, _ = build_plan("s", grounded, {}, extraction_id="x", valid_at=None, receipt=None)
    assert [(i.content, [(s.turn_id, s.quote) for s in i.sources]) for i in plan.items] == [
        ("maya has 2 cats", [("t1", "2 cats at home"), ("t0", "I have two cats")])]
    bad, _ = coerce_proposal({"points": [{"content": "maya has 2 cats", "quote": "never said", "turn": 1}]},
                             stage="s4")
    grounded = ground(union(s2, bad), turns)
    assert grounded.rejected == 0
    assert [(g.item.quote, g.source.turn_id, g.also) for g in grounded.points] == [("I have two cats", "t0", ())]


def test_a_stored_quote_is_cut_where_a_memory_block_was_and_keeps_combining_marks() -> None:
    pasted = f"I love {MEMORY_BLOCK_MARKER}\n1. (memory) Rex is a dog ref:m_1\n[/tortoise memory] my dog Rex so much"
    turns = [hit(0, pasted), hit(1, "We ate at the cafe\u0301 near the river.")]
    result = ground(proposal([
        {"content": "Maya loves her dog Rex.", "quote": "I love my dog Rex so much", "turn": 0},
        {"content": "Maya ate at a cafe by the river.", "quote": "we ate at the café near the river", "turn": 1},
    ]), turns)
    quotes = [g.source.quote for g in result.points]
    assert quotes == ["I love … my dog Rex so much", "We ate at the cafe\u0301 near the river"]
    assert all(part in t.content for q, t in zip(quotes, turns) for part in q.split(" … "))


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("abcAB \u2019'\u201c\u201d,.-\n\u00e9\ufb01\u2026\u0301"), min_size=1, max_size=60),
       st.integers(0, 60), st.integers(1, 60))
def test_a_grounded_quote_is_stored_as_the_turn_writes_it(text: str, start: int, size: int) -> None:
    """Any stretch of a turn, retyped in other case and spacing, is stored as the stretches the turn holds
    (an ellipsis in it elides: the parts are joined by " … ")."""
    quote = " ".join(text[start:start + size].upper().split())
    stored = verbatim(quote, text)
    if quote_matches(quote, text):
        assert all(part in text for part in stored.split(" … "))
        assert quote_matches(stored, text) or "…" in stored or "..." in stored
    else:
        assert stored == quote


# -- memory blocks a host pasted into a turn ---------------------------------------------------------------

BLOCK = f"{MEMORY_BLOCK_MARKER} Retrieved from this user's earlier conversations.\n1. The user has a dog.\n" \
        "[/tortoise memory]"


def test_a_turn_starting_with_a_memory_block_is_evidence_for_what_follows_the_block() -> None:
    """Reviewer: a user turn that began with the host's pasted block ("[tortoise memory] ... [/tortoise memory]
    \\n\\nBig news: I just got engaged to Sam last night!") was dropped whole: the user's own words after the block
    ground nothing and the item quoting them was rejected."""
    turns = [hit(0, BLOCK + "\n\nBig news: I just got engaged to Sam last night!"),
             hit(1, f"  {BLOCK}", role="system", name=None),  # only a block: never evidence
             hit(2, f"{BLOCK} \n ?! ")]  # a block and no word: nothing to ground either
    assert [is_evidence(t, None) for t in turns] == [True, False, False]
    result = ground(proposal([
        {"content": "Maya got engaged to Sam.", "quote": "I just got engaged to Sam last night", "turn": 0},
        {"content": "Maya has a dog.", "quote": "The user has a dog", "turn": 0},  # the block's own words
    ]), evidence_turns(turns, {}))
    assert [(g.item.content, g.source.quote) for g in result.points] == [
        ("Maya got engaged to Sam.", "I just got engaged to Sam last night")]
    assert result.rejected == 1


def test_a_memory_block_is_recognised_whatever_the_case_of_its_marker() -> None:
    """A host that upper-cases what it forwards must not turn the block into the user's words."""
    upper = BLOCK.upper()
    turns = [hit(0, upper, role="system", name=None), hit(1, f"{upper} and I love hiking"),
             hit(2, "I love " + BLOCK.title() + " my dog Rex so much")]
    assert [is_evidence(t, None) for t in turns] == [False, True, True]
    result = ground(proposal([
        {"content": "Maya has a dog.", "quote": "the user has a dog", "turn": 1},
        {"content": "Maya loves hiking.", "quote": "I love hiking", "turn": 1},
        {"content": "Maya loves Rex.", "quote": "I love my dog Rex so much", "turn": 2},
    ]), turns)
    assert [g.source.quote for g in result.points] == ["I love hiking", "I love … my dog Rex so much"]
    assert result.rejected == 1


@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
def test_what_a_user_typed_after_a_pasted_memory_block_reaches_the_prompts_and_is_remembered(
        tmp_path: Path, stub_model: Any) -> None:
    point = {"content": "The user got engaged to Sam.", "quote": "I just got engaged to Sam", "turn": 0}
    stub = stub_model({"routes": [{"stage": "s1", "replies": [{"content": "The user got engaged."}], "cycle": True},
                                  {"stage": "s2", "replies": [{"content": json.dumps({"points": [point]})}]},
                                  {"stage": "s4", "replies": [{"content": "{}"}]}]})
    with Memory(str(tmp_path / "m.db"), namespace="t", model="openai/stub-model", api_base=stub.base_url,
                api_key="sk-x", model_settings={"max_attempts": 1}) as mem:
        receipt = mem.capture("s", [{"role": "user", "content": BLOCK + "\n\nBig news: I just got engaged to Sam!"},
                                    {"role": "assistant", "content": "Congratulations!"}])
        assert receipt.extraction is not None and receipt.extraction.warnings == []
        assert [m.content for m in mem.memories()] == ["The user got engaged to Sam."]
    prompts = {r.stage: r.prompt for r in stub.requests if r.stage in ("s1", "s2")}
    assert set(prompts) == {"s1", "s2"} and all("engaged to Sam" in p for p in prompts.values())
