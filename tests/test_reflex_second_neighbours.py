"""The second neighbours (tuning.SECOND_NEIGHBOUR_SHARE): the turns two before and after a candidate join the
pool and inherit a share of its score, so the same speaker's answer across the other's question is found."""

from __future__ import annotations

from reflex_chat import ask, capture_chatter
from tortoise_sdk import Memory
from tortoise_sdk.reflex import tuning

MUSEUM = "Yesterday I took the kids to the museum."
DINOSAURS = "They were stoked for the dinosaur exhibit, the bones were so cool."


def _chat(mem: Memory) -> None:
    mem.capture("s1", [{"role": "user", "name": "Melanie", "content": MUSEUM},
                       {"role": "user", "name": "Caroline", "content": "Fun! What was their favourite part?"},
                       {"role": "user", "name": "Melanie", "content": DINOSAURS},
                       {"role": "user", "name": "Caroline", "content": "Sounds like a great day out."}],
                session_date="2023-05-01T10:00:00")
    capture_chatter(mem, "Caroline")


def test_the_answer_across_the_others_question_joins_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="near")
    _chat(mem)
    question = "What did Melanie's kids enjoy at the museum?"
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.0)
    said = [p.synopsis for p in ask(mem, question).pointers]
    assert said[0] == MUSEUM and DINOSAURS not in said  # no word of the question is in it, nor in its neighbours
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.6)
    said = [p.synopsis for p in ask(mem, question).pointers]
    assert said[0] == MUSEUM and DINOSAURS in said


def test_an_unrelated_question_stays_silent(store, monkeypatch):
    monkeypatch.setattr(tuning, "SECOND_NEIGHBOUR_SHARE", 0.6)
    mem = Memory(store=store, namespace="near-quiet")
    _chat(mem)
    assert ask(mem, "Which planets did the probes photograph last decade?").pointers == []


def test_the_method_is_off_as_shipped():
    # Measured by leave one conversation out (docs/figures/bench_reflex_recall-loo.md): over category instances
    # it gains on conv-26, conv-41, conv-42 and the mean (0.714 -> 0.726), but loses two questions of 81 on
    # conv-30, one more than the admission rule's noise (docs/benchmarks.md). ranker.json is trained without it.
    assert tuning.SECOND_NEIGHBOUR_SHARE == 0.0
