"""The second neighbours (tuning.SECOND_NEIGHBOUR_SHARE): the turn two after a candidate joins the pool and
inherits a share of its score when the turn between asks, so the same speaker's answer across the other's
question is found."""

from __future__ import annotations

from reflex_chat import ask, capture_chatter
from tortoise_sdk import Memory
from tortoise_sdk.reflex import tuning

MUSEUM = "Yesterday I took the kids to the museum."
DINOSAURS = "They were stoked for the dinosaur exhibit, the bones were so cool."
QUESTION = "What did Melanie's kids enjoy at the museum?"


def _chat(mem: Memory, between: str = "Fun! What was their favourite part?", first: str = MUSEUM,
          second: str = DINOSAURS) -> None:
    mem.capture("s1", [{"role": "user", "name": "Melanie", "content": first},
                       {"role": "user", "name": "Caroline", "content": between},
                       {"role": "user", "name": "Melanie", "content": second},
                       {"role": "user", "name": "Caroline", "content": "Sounds like a great day out."}],
                session_date="2023-05-01T10:00:00")
    capture_chatter(mem, "Caroline")


def test_the_answer_across_the_others_question_joins_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="near")
    _chat(mem)
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.0)
    said = [p.synopsis for p in ask(mem, QUESTION).pointers]
    assert said[0] == MUSEUM and DINOSAURS not in said  # no word of the question is in it, nor in its neighbours
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.6)
    said = [p.synopsis for p in ask(mem, QUESTION).pointers]
    assert said[0] == MUSEUM and DINOSAURS in said


def test_only_across_a_question_unless_told_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="near-statement")
    _chat(mem, between="Fun, I went to the cinema that day.")
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.6)
    said = [p.synopsis for p in ask(mem, QUESTION).pointers]
    assert said[0] == MUSEUM and DINOSAURS not in said  # the turn between states, it does not ask
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_ASKS", False)
    assert DINOSAURS in [p.synopsis for p in ask(mem, QUESTION).pointers]


def test_only_the_turn_two_after_unless_told_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="near-before")
    # The turn the question matches comes last: the answer is two before it.
    _chat(mem, first=DINOSAURS, between="Wow, which place was that?", second=MUSEUM)
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.6)
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_ASKS", False)
    said = [p.synopsis for p in ask(mem, QUESTION).pointers]
    assert said[0] == MUSEUM and DINOSAURS not in said
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SIDE", "both")
    assert DINOSAURS in [p.synopsis for p in ask(mem, QUESTION).pointers]


def test_an_unrelated_question_stays_silent(store, monkeypatch):
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.6)
    mem = Memory(store=store, namespace="near-quiet")
    _chat(mem)
    assert ask(mem, "Which planets did the probes photograph last decade?").pointers == []


def test_the_shipped_values():
    # Measured by leave one conversation out (docs/figures/bench_reflex_recall-loo.md, docs/benchmarks.md): over
    # category instances and the ranker's weights for a question that gathers, the turn two after a question
    # (its share chosen on the three) loses on no fold; 0.3 is what the whole choice makes on all four
    # (bench_reflex_recall.py --ship, docs/figures/bench_reflex_recall-ship.md). The turns two before and after
    # lost two questions of 81 on conv-30, and so did the turn two after with the session's lend.
    assert (tuning.SECOND_NEIGHBOUR_SHARE, tuning.SECOND_NEIGHBOUR_SIDE, tuning.SECOND_NEIGHBOUR_ASKS) == (0.3, "after", True)
    assert tuning.SESSION_LEND == 0.0
