"""The bounded-search plan both stores share: lead/rest split, inflection matching, the IDF bonus."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tortoise_sdk.search import _TOKEN, POSTINGS_BUDGET, idf, idf_bonus, mentions, split_by_postings, tokenize


def test_terms_lead_rarest_first_until_the_postings_budget_is_spent():
    dfs = {"common": 1500, "rare": 3, "mid": 600, "also": 3}
    assert split_by_postings(["common", "rare", "mid", "also"], dfs) == (["also", "rare", "mid"], ["common"])
    assert split_by_postings(["a", "b"], {"a": 10, "b": 10}, budget=15) == (["a"], ["b"])
    # The rarest term always leads, even past the budget.
    assert split_by_postings(["huge"], {"huge": POSTINGS_BUDGET * 5}) == (["huge"], [])


def test_idf_is_fts5s():
    assert idf(100, 10) == math.log((100 - 10 + 0.5) / (10 + 0.5) + 1.0)
    assert round(idf(1000, 999), 6) == 0.0015  # a term in every row still counts a little


def test_mentions_accepts_inflections_of_longer_terms_only():
    words = {"hiking", "trails", "cat"}
    assert mentions(words, "trails") and mentions(words, "trail")  # "trai..." covers "trails"
    assert not mentions(words, "cats")  # terms of four letters or fewer must match exactly
    assert not mentions(words, "hikes")  # "hike..." is not a prefix of "hiking"
    assert not mentions(words, "running")


def test_idf_bonus_sums_the_common_terms_a_text_mentions():
    assert idf_bonus("We hiked two trails today", {"trail": 0.5, "hiked": 0.25, "lake": 4.0}) == 0.75
    assert idf_bonus("", {"trail": 0.5}) == 0


# The definitions the fast paths of ``tokenize`` and ``idf_bonus`` must equal, term for term and bit for bit.
_WORDS = st.sampled_from(["trail", "trails", "hiked", "Hiking", "don't", "ÉCOLE", "école", "İstanbul", "ΟΔΟΣ", "ǅemal",
                          "straße", "training", "hikers", "x_y", "rock'n'roll", "42nd", "\n", "a\nb", "", "cat", "cats"])
_TEXTS = st.lists(st.one_of(_WORDS, st.text(max_size=12)), max_size=12).map(" ".join)


def _tokenize_by_definition(text: str) -> list[str]:
    return [m.group(0).lower() for m in _TOKEN.finditer(text or "")]


@settings(max_examples=400, deadline=None)
@given(text=_TEXTS)
def test_tokenize_equals_its_definition_on_any_text(text):
    assert tokenize(text) == _tokenize_by_definition(text)


@settings(max_examples=400, deadline=None)
@example(text="Training today", idfs={"trails": 1.0})  # "trai..." starts a token that holds no "trail"
@example(text="İstanbul", idfs={"i̇stanbul": 1.0, "stanbul": 2.0})
@given(text=_TEXTS, idfs=st.dictionaries(st.one_of(_WORDS, st.text(max_size=8)), st.floats(0.001, 10.0), max_size=5))
def test_idf_bonus_equals_its_definition_on_any_text_and_terms(text, idfs):
    words = set(_tokenize_by_definition(text))
    assert idf_bonus(text, idfs) == sum(w for t, w in idfs.items() if mentions(words, t))
