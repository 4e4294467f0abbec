"""The reflex's fast readings agree with the plain ones they replace: ``scoring.says_time`` with the regular
expression it was (kept here as the definition), ``ranker._dot`` with a generator's sum, to the bit."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk.reflex import ranker
from tortoise_sdk.reflex.scoring import says_time

# The definition: the regular expression score_turns used to try on every turn.
TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|last|next|this (morning|week|month|year|weekend)|recently|"
    r"(mon|tues|wednes|thurs|fri|satur|sun)day|weekend|january|february|march|april|may|june|july|august|"
    r"september|october|november|december|(19|20)\d\d|since|years?|months?|weeks?)\b", re.I)

PIECES = ["this", "morning", "this morning", "week", "Weeks", "weekend", "Monday", "monday's", "sundays", "MAY",
          "mayday", "1999", "2024", "20245", "1899", "x2020", "2020s", "since", "ago", "agony", "last", "lastly",
          "next", "Next-door", "year", "years", "yearly", "month", "months", "tues", "tuesday", "today", "it", "é",
          "tonight", "_today", "today_", "٢٠٢٤", "19٩٩", "Ｍonday", " ", "  ", "\n", ",", ".", "-", "'", "?", "!"]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12), st.lists(st.sampled_from([" ", "", "\t", "  "]), max_size=12))
def test_says_time_agrees_with_the_regular_expression(pieces, seps):
    text = "".join(p + (seps[i] if i < len(seps) else " ") for i, p in enumerate(pieces))
    assert says_time(text) == bool(TIME_WORDS.search(text)), text


@given(st.text(max_size=60))
def test_says_time_agrees_on_any_text(text):
    assert says_time(text) == bool(TIME_WORDS.search(text)), text


def test_says_time_reads_phrases_years_and_words():
    assert says_time("We met this morning.") and says_time("back in 1998") and says_time("Last week")
    assert not says_time("this mornings") and not says_time("in 1850") and not says_time("a weekly lastly")


floats = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


@given(st.lists(st.tuples(floats, floats), max_size=20))
def test_dot_adds_in_the_same_order(pairs):
    w, row = [a for a, _ in pairs], [b for _, b in pairs]
    got, want = ranker._dot(w, row), sum(a * b for a, b in zip(w, row))
    assert got == want or (math.isnan(got) and math.isnan(want))
