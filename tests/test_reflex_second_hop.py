"""A second hop: what the first pass's top turns name that the question did not is read once more
(candidates.hop_terms, tuning.SECOND_HOP), so a turn that says the rest of the answer joins the block."""

from __future__ import annotations

from reflex_chat import ask, capture_chatter
from tortoise_sdk import Memory
from tortoise_sdk.reflex import tuning

MOVED = "Yeah, I've known these friends since I moved from my home country four years ago."
SWEDEN = "This necklace is a gift from my grandma in my home country, Sweden."


def _chat(mem: Memory) -> None:
    mem.capture("s1", [{"role": "user", "name": "Caroline", "content": MOVED},
                       {"role": "user", "name": "Melanie", "content": "Friends like that are rare."}],
                session_date="2023-05-01T10:00:00")
    mem.capture("s2", [{"role": "user", "name": "Melanie", "content": "What a pretty necklace!"},
                       {"role": "user", "name": "Caroline", "content": SWEDEN}],
                session_date="2023-06-01T10:00:00")
    capture_chatter(mem, "Melanie")


def test_the_top_turns_words_reach_the_rest_of_the_answer_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="hop")
    _chat(mem)
    question = "Where did Caroline move from?"
    monkeypatch.setattr(tuning, "SECOND_HOP", 0.0)
    said = [p.synopsis for p in ask(mem, question).pointers]
    assert said[0] == MOVED and SWEDEN not in said  # no word of the question is in it
    monkeypatch.setattr(tuning, "SECOND_HOP", 0.6)
    said = [p.synopsis for p in ask(mem, question).pointers]
    assert said[0] == MOVED and SWEDEN in said  # "home country", said in the top turn, finds it


def test_an_unrelated_question_stays_silent(store, monkeypatch):
    monkeypatch.setattr(tuning, "SECOND_HOP", 1.0)
    mem = Memory(store=store, namespace="hop-quiet")
    _chat(mem)
    # The hop's words widen the pool and add to the score, never to the coverage gate: the question's
    # own words decide whether anything is said.
    assert ask(mem, "Which planets did the probes photograph last decade?").pointers == []


def test_the_method_is_off_as_shipped():
    # Measured by leave one conversation out (docs/figures/bench_reflex_recall-loo.md): over category
    # instances it loses conv-41 by more than two questions, and its extra postings count and full-text
    # read on every question put context()'s p95 at 100,000 items well past main's (docs/benchmarks.md).
    # The category instances ship on.
    assert tuning.SECOND_HOP == 0.0 and tuning.INSTANCE_WEIGHT > 0
