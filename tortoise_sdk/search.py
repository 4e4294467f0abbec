"""Turning any user string into a safe full-text query: tokens, stop-words, FTS5 syntax."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

__all__ = (
    "MAX_SEARCH_K",
    "POSTINGS_BUDGET",
    "STOP_WORDS",
    "content_terms",
    "fts5_query",
    "idf",
    "idf_bonus",
    "mentions",
    "query_terms",
    "split_by_postings",
    "tokenize",
)

#: The most hits one search returns.
MAX_SEARCH_K = 10_000

#: How many postings the BM25 ranking pass of a bounded search may score (both stores).
POSTINGS_BUDGET = 2_000

# Function words and question scaffolding: they match most turns and only dilute BM25.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down
    during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here
    here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
    let's me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves
    out over own same shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this those through to
    too under until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's will with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves s t d ll m re ve also just like did does get got really yes yeah
    oh ok okay hey hi
    """.split()
)

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, inner apostrophes kept)."""
    return [m.group(0).lower() for m in _TOKEN.finditer(text or "")]


def query_terms(text: str) -> list[str]:
    """Distinct content terms of a query, in order; stop-words are dropped unless nothing else is left."""
    tokens = _word_parts(text)
    content = [t for t in tokens if t not in STOP_WORDS]
    return list(dict.fromkeys(content or tokens))


def content_terms(text: str) -> tuple[list[str], str | None]:
    """What a search looks for: the distinct non-stop-words of ``text``, or none and why.

    A query of only stop-words (``the and of``) or of only syntax (``OR``, ``AND NOT``,
    a lone ``"``) has nothing to search for: every turn would match it, or none.
    """
    tokens = _word_parts(text)
    terms = list(dict.fromkeys(t for t in tokens if t not in STOP_WORDS))
    if terms:
        return terms, None
    if tokens:
        words = " ".join(dict.fromkeys(tokens))
        return [], (f"nothing to search for: every word of '{words}' is a stop-word, too common to tell turns "
                    "apart (OR, AND and NOT are words here, not operators); add a name, place or thing")
    return [], "nothing to search for: the query has no words, only punctuation or spaces"


def _word_parts(text: str) -> list[str]:
    return [p for t in tokenize(text) for p in t.split("'") if p]


def fts5_query(text: str, *, terms: list[str] | None = None) -> str | None:
    """An FTS5 MATCH expression that ORs the quoted terms, or None when there is nothing to search.

    Every term is a quoted string literal, so user text can never be read as FTS5 syntax
    (``AND``, ``*``, ``(``, ``"`` and ``NEAR`` are just words here).
    """
    terms = query_terms(text) if terms is None else terms
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# -- the bounded-search plan both stores follow (``Store.search_terms``) -------------------------


def split_by_postings(
    terms: Sequence[str], dfs: Mapping[str, int], budget: int = POSTINGS_BUDGET
) -> tuple[list[str], list[str]]:
    """``(lead, rest)``: terms taken rarest first (ties by text) until their postings reach ``budget``.

    The lead terms retrieve and rank a candidate pool by BM25; the rest (common, low-IDF)
    only add their IDF to the candidates that mention them. The rarest term always leads.
    """
    lead: list[str] = []
    postings = 0
    for term in sorted(terms, key=lambda t: (dfs[t], t)):
        if lead and postings + dfs[term] > budget:
            break
        lead.append(term)
        postings += dfs[term]
    return lead, [t for t in terms if t not in lead]


def idf(n_docs: int, df: int) -> float:
    """BM25's (FTS5's) inverse document frequency of a term found in ``df`` of ``n_docs`` rows."""
    return math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)


def mentions(words: set[str], term: str) -> bool:
    """Whether a tokenized text contains the term or an inflection of it (a cheap stand-in for the stemmer)."""
    if term in words:
        return True
    stem = term[: max(4, len(term) - 2)]
    return len(term) > 4 and any(w.startswith(stem) for w in words)


def idf_bonus(text: str, idfs: Mapping[str, float]) -> float:
    """The summed IDF of the common terms ``text`` mentions: their BM25 share at tf = 1 and average length."""
    words = set(tokenize(text))
    return sum(w for t, w in idfs.items() if mentions(words, t))
