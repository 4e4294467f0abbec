"""The S2/S4 union and the reply contract: property tests (hypothesis) and exact cases."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk.pipeline.merge import (Entity, Event, Point, Proposal, Retraction, coerce_proposal, identity,
                                         sources_of, union)

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
            bare = item.model_copy(update={"also": ()}) if hasattr(item, "also") else item
            if key in delta_keys:
                assert bare in delta  # S4 wins on collision
            else:
                assert bare in base
            # Provenance: the survivor cites every (quote, turn) of the items it stands for.
            assert sources_of(item) == set().union(*(sources_of(i) for i in [*base, *delta] if identity(i) == key))


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


# Facts restated in other words: each row is one fact, every variant must collapse to it.
FACTS = [
    ["Caroline moved to Paris.", "caroline MOVES to paris", "Caroline moved to  the Paris",
     "Caroline moving to Paris!"],
    ["Melanie has two kids", "Melanie has 2 kids.", "melanie has 2 kid", "Melanie has the two kids"],
    ["Mel loves painting", "Mel really loves painting", "mel loved paintings", "Mel loves the painting."],
    ["Caroline doesn't eat meat", "Caroline does not eat meat", "caroline does not eat meat."],
    ["Caroline is not vegan"],
    ["Caroline is vegan", "caroline is a vegan"],
    ["Caroline will move to Berlin"],
    ["Caroline moved from Berlin"],
]
variant = st.integers(0, len(FACTS) - 1).flatmap(
    lambda f: st.tuples(st.just(f), st.sampled_from(FACTS[f]), st.sampled_from(["quote a", "quote b", None]),
                        st.integers(0, 3)))


def _restated(draws: list[tuple[int, str, str | None, int]]) -> Proposal:
    return Proposal(points=tuple(Point(content=text, quote=q, turn=t) for _, text, q, t in draws))


@settings(max_examples=150, deadline=None)
@given(s2=st.lists(variant, max_size=8), s4=st.lists(variant, max_size=8), data=st.data())
def test_restated_facts_collapse_to_one_each_whatever_the_order_with_every_source(
        s2: list[Any], s4: list[Any], data: Any) -> None:
    merged = union(_restated(s2), _restated(s4))
    # One memory per fact (the wording never makes a second one), and only distinct facts stay apart.
    assert sorted(identity(p) for p in merged.points) == sorted({identity(Point(content=FACTS[f][0])) for f, *_ in
                                                                 s2 + s4})
    # Every source of every variant is kept on the one that stands for it.
    for p in merged.points:
        expected = {(q, t) for f, text, q, t in s2 + s4 if identity(Point(content=text)) == identity(p)}
        assert sources_of(p) == expected
    # Any order and duplication, and S2 and S4 swapped for the facts' set: the same set of facts and sources.
    again = union(shuffled_with_duplicates(_restated(s2), data), shuffled_with_duplicates(_restated(s4), data))
    assert again == merged
    swapped = union(_restated(s4), _restated(s2))
    assert {(identity(p), frozenset(sources_of(p))) for p in swapped.points} == \
        {(identity(p), frozenset(sources_of(p))) for p in merged.points}


def test_a_reply_cannot_set_the_provenance_it_absorbed() -> None:
    p, _ = coerce_proposal({"points": [{"content": "Maya has a dog", "quote": "my dog", "turn": 1,
                                        "also": [["invented", 9]]}]}, stage="s2")
    assert p.points[0].also == ()


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                     max_leaves=5)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_JSON, st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e400, 2.9, "1e400"])))
def test_a_turn_of_any_json_value_drops_at_most_its_own_item(turn: Any) -> None:
    """A reviewer's: ``"turn": Infinity`` (or 1e400) raised OverflowError out of the parser, and the whole session's
    extraction crashed; 2.9 was taken as turn 2."""
    proposal, _ = coerce_proposal({"points": [
        {"content": "Maya has a dog.", "turn": turn, "quote": "dog"},
        {"content": "Maya likes tea.", "turn": 1, "quote": "tea"}]}, stage="s2")
    assert "Maya likes tea." in [p.content for p in proposal.points]
    kept = {p.content: p.turn for p in proposal.points}
    if "Maya has a dog." in kept and kept["Maya has a dog."] is not None:
        assert isinstance(turn, (int, str)) or (isinstance(turn, float) and turn.is_integer())
