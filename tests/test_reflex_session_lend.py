"""Session-level evidence as a score (tuning.SESSION_LEND): a turn that matches a word of the question inherits a
share of the best own score in its session, so of two turns that match alike, the one said in the session that
matched best goes first."""

from __future__ import annotations

from reflex_chat import ask, capture_chatter
from tortoise_sdk import Memory
from tortoise_sdk.reflex import tuning

STRONG = "Canoe, canoe, canoe! Best boat ever."
LENT = "We carried the canoe down to the water with Anna."
ALONE = "We carried the canoe down to the water with Lucy."


def _chat(mem: Memory) -> None:
    # ALONE's session sorts first, so that on equal scores it would lead: only the lend puts LENT before it.
    mem.capture("a-alone", [{"role": "user", "name": "Melanie", "content": ALONE},
                            {"role": "user", "name": "Caroline", "content": "Sounds like a calm day out."}],
                session_date="2023-05-01T10:00:00")
    mem.capture("b-lent", [{"role": "user", "name": "Melanie", "content": STRONG},
                           {"role": "user", "name": "Caroline", "content": "Ha, you really love that boat."},
                           {"role": "user", "name": "Melanie", "content": "I do, we spent the whole weekend by the lake."},
                           {"role": "user", "name": "Caroline", "content": "The weather looked lovely in your photos."},
                           {"role": "user", "name": "Melanie", "content": LENT}],
                session_date="2023-06-01T10:00:00")
    capture_chatter(mem, "Caroline")


def _order(mem: Memory) -> list[str]:
    return [p.synopsis for p in ask(mem, "What about the canoe?").pointers]


def test_a_turn_of_the_session_that_matched_best_goes_first_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="lend")
    _chat(mem)
    monkeypatch.setattr(tuning, "SESSION_LEND", 0.0)
    said = _order(mem)
    assert said[0] == STRONG and said.index(ALONE) < said.index(LENT)
    monkeypatch.setattr(tuning, "SESSION_LEND", 0.1)
    said = _order(mem)
    assert said[0] == STRONG and said.index(LENT) < said.index(ALONE)


def test_an_unrelated_question_stays_silent(store):
    mem = Memory(store=store, namespace="lend-quiet")
    _chat(mem)
    assert ask(mem, "Which planets did the probes photograph last decade?").pointers == []


def test_the_lend_is_off_as_shipped():
    # Measured with the turn two after a question by leave one conversation out (docs/figures/bench_reflex_recall-loo.md,
    # docs/benchmarks.md): conv-30 lost more than a question of 81, so it is not admitted.
    assert tuning.SESSION_LEND == 0.0
