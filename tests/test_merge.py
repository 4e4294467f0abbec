"""The S2/S4 union and the reply contract: property tests (hypothesis) and exact cases."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk.pipeline.merge import Entity, Event, Point, Proposal, Retraction, coerce_proposal, identity, union

WORDS = ["Maya", "works", "at", "Helix", "Health", "biscuit", "dog", "walks", "Rust", "learns"]

content = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join).flatmap(
    # Same identity, different surface: case, punctuation and spacing vary.
    lambda text: st.sampled_from([text, text.upper(), f"  {text}.", text.replace(" ", "  ")])
)
quote = st.one_of(st.none(), st.sampled_from(["I work at Helix", "he is a beagle", "Rust"]))
turn = st.one_of(st.none(), st.integers(0, 5))
names = st.lists(st.sampled_from(["Maya", "Biscuit", "Helix Health"]), max_size=2).map(tuple)

points = st.builds(Point, content=content, quote=quote, turn=turn, about=names,
                   search_keys=st.lists(st.sampled_from(["job", "pet"]), max_size=2).map(tuple))
events = st.builds(Event, content=content, quote=quote, turn=turn, about=names,
                   kind=st.sampled_from(["event", "job_change"]))
entities = st.builds(Entity, name=st.sampled_from(["Maya", "maya", "Biscuit", "Helix Health"]),
                     kind=st.sampled_from(["person", "Person", "pet", "organization"]),
                     note=st.one_of(st.none(), st.sampled_from(["the user", "a beagle"])))
retractions = st.builds(Retraction, content=content, quote=quote, turn=turn)
proposals = st.builds(Proposal, entities=st.lists(entities, max_size=5).map(tuple),
                      events=st.lists(events, max_size=5).map(tuple), points=st.lists(points, max_size=6).map(tuple),
                      retractions=st.lists(retractions, max_size=3).map(tuple))
KINDS = ("entities", "events", "points", "retractions")


def shuffled_with_duplicates(p: Proposal, data: Any) -> Proposal:
    """The same proposal, each list permuted and with some items repeated."""
    out = {}
    for kind in KINDS:
        items = list(getattr(p, kind))
        extra = data.draw(st.lists(st.sampled_from(items), max_size=3)) if items else []
        out[kind] = tuple(data.draw(st.permutations(items + extra)))
    return Proposal(**out)


def keyed(items: Any) -> dict[tuple[str, ...], Any]:
    return {identity(i): i for i in items}


@settings(max_examples=150, deadline=None)
@given(s2=proposals, s4=proposals, data=st.data())
def test_union_is_independent_of_order_and_duplication(s2: Proposal, s4: Proposal, data: Any) -> None:
    assert union(shuffled_with_duplicates(s2, data), shuffled_with_duplicates(s4, data)) == union(s2, s4)


@settings(max_examples=150, deadline=None)
@given(s2=proposals, s4=proposals)
def test_union_rules(s2: Proposal, s4: Proposal) -> None:
    merged = union(s2, s4)
    for kind in KINDS:
        result = keyed(getattr(merged, kind))
        base, delta = getattr(s2, kind), getattr(s4, kind)
        base_keys, delta_keys = {identity(i) for i in base}, {identity(i) for i in delta}
        # No S2 item is dropped, S4-only items are added, nothing else appears, one item per identity.
        assert set(result) == base_keys | delta_keys
        assert len(getattr(merged, kind)) == len(result)
        for key, item in result.items():
            if key in delta_keys:
                assert item in delta  # S4 wins on collision
            else:
                assert item in base


def test_s4_wins_on_collision_and_s2_is_kept() -> None:
    s2, _ = coerce_proposal({
        "entities": [{"name": "Maya", "kind": "person"}],
        "points": [
            {"content": "Maya works at Helix Health.", "quote": "I'm at Helix", "turn": 3},
            {"content": "Maya has a dog.", "quote": "my dog", "turn": 1},
        ],
    }, stage="s2")
    s4, _ = coerce_proposal({
        "entities": [{"name": "maya", "kind": "Person", "note": "the user"}],
        "points": [
            {"content": "maya works at helix health", "quote": "I'm now at Helix", "turn": 0, "supersedes": "P1"},
            {"content": "Maya wants to learn Rust.", "quote": "learn Rust", "turn": 4},
        ],
    }, stage="s4")
    merged = union(s2, s4)
    assert [(e.name, e.note) for e in merged.entities] == [("maya", "the user")]
    assert [(p.content, p.turn, p.supersedes) for p in merged.points] == [
        ("maya works at helix health", 0, "P1"), ("Maya has a dog.", 1, None), ("Maya wants to learn Rust.", 4, None)]


def test_coerce_drops_bad_items_alone() -> None:
    proposal, warnings = coerce_proposal({
        "entities": [{"name": "Maya", "kind": "person"}, {"kind": "person"}],
        "points": [{"content": "Maya has a dog.", "turn": "[4]", "about": "Maya", "quote": "dog"}, "junk",
                   {"content": "   "}],
        "events": None,
    }, stage="s2")
    assert [e.name for e in proposal.entities] == ["Maya"]
    assert [(p.turn, p.about) for p in proposal.points] == [(4, ("Maya",))]
    assert [w.message.split(":")[0] for w in warnings] == ["entities[1] dropped", "points[1] dropped",
                                                          "points[2] dropped"]


def test_an_empty_object_or_empty_lists_is_a_proposal_of_nothing() -> None:
    # S4's "nothing to add": {} is as normal as four empty lists, and neither warns.
    for reply in ({}, {"entities": [], "events": [], "points": [], "retractions": []}, {"points": []},
                  {"events": None, "points": []}):
        assert coerce_proposal(reply, stage="s4") == (Proposal(), [])


def test_coerce_refuses_a_reply_that_is_not_the_contract() -> None:
    import pytest

    with pytest.raises(ValueError, match="expected an object"):
        coerce_proposal({"items": []}, stage="s4")
    with pytest.raises(ValueError):
        coerce_proposal([], stage="s4")
