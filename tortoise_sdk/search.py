"""Turning any user string into a safe full-text query: tokens, stop-words, FTS5 syntax."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from .errors import InvalidInput
from .models import SearchHit

__all__ = (
    "BM25_B",
    "BM25_K1",
    "INDEX_CHARS",
    "MAX_SEARCH_K",
    "NAME_INDEX_CHARS",
    "NAME_WEIGHT",
    "POSTINGS_BUDGET",
    "SPEAKER_BOOST",
    "STOP_WORDS",
    "TF_CAP",
    "ZERO_SCORE",
    "content_terms",
    "fts5_query",
    "idf",
    "idf_bonus",
    "index_idf",
    "indexed_text",
    "mentions",
    "query_terms",
    "rank_hits",
    "saturation",
    "split_by_postings",
    "terms_from_fts5",
    "tokenize",
)

#: The most hits one search returns.
MAX_SEARCH_K = 10_000

#: A turn spoken by a person the query names scores this much more (the reflex uses the same share).
SPEAKER_BOOST = 0.30
#: Scores at most this are terms too common to count (BM25's IDF is floored near zero past half the turns).
ZERO_SCORE = 1e-4

#: How many postings the BM25 ranking pass of a bounded search may score (both stores).
POSTINGS_BUDGET = 2_000

#: What ranking reads of a turn: its first ``INDEX_CHARS`` characters (and ``NAME_INDEX_CHARS`` of the
#: speaker's name). The whole turn is stored, returned and exported; only the index and every ranking
#: statistic see this bounded text, so a pasted multi-megabyte log costs what an 8 KiB turn costs.
INDEX_CHARS = 8_192
NAME_INDEX_CHARS = 256

#: BM25 as both stores compute it (FTS5's constants): saturation ``k1``, length normalisation ``b``,
#: the speaker name's weight beside the content's 1.0, and the most a term's repetition in one
#: turn counts. The cap keeps a long paste that repeats a word from buying back with repetition
#: what length normalisation takes off it.
BM25_K1 = 1.2
BM25_B = 0.75
NAME_WEIGHT = 0.5
TF_CAP = 3.0

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
    text = text or ""
    if text.isascii():  # lower-casing ASCII moves no token boundary, so it can come first (one C call)
        return _TOKEN.findall(text.lower())
    return [m.group(0).lower() for m in _TOKEN.finditer(text)]


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


def rank_hits(hits: Sequence[SearchHit], terms: Sequence[str]) -> list[SearchHit]:
    """BM25 ``hits`` in their final order: a named speaker's turns boosted, hits that matched nothing that counts dropped.

    A query naming a speaker ("where does Maya work now?") is about what that person said; the
    name alone scores nothing in BM25 when the person speaks half the turns. Their turns score
    ``SPEAKER_BOOST`` more (ties keep BM25 order). A hit at ``ZERO_SCORE`` or below matched
    only terms too common to count; it is listed only when no hit scores more. Only the hits
    given are reordered (reading more from the store to rerank would cost latency).
    """
    wanted = set(terms)
    speakers = {h.name for h in hits if h.name and wanted & set(tokenize(h.name))}
    ranked = [h.model_copy(update={"score": h.score * (1 + SPEAKER_BOOST)}) if h.name in speakers else h for h in hits]
    ranked.sort(key=lambda h: -h.score)  # stable: equal scores keep the store's order
    if ranked and ranked[0].score > ZERO_SCORE:
        ranked = [h for h in ranked if h.score > ZERO_SCORE]
    return ranked


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


def indexed_text(text: str | None, limit: int = INDEX_CHARS) -> str:
    """The part of a turn's text that is indexed and ranked: its first ``limit`` characters."""
    return (text or "")[:limit]


def index_idf(n_docs: int, df: int) -> float:
    """FTS5's BM25 inverse document frequency of a term in ``df`` of ``n_docs`` turns (at least 1e-6)."""
    return max(math.log((n_docs - df + 0.5) / (df + 0.5)), 1e-6)


def saturation(f: float, length: int, avgdl: float) -> float:
    """BM25's term-frequency part for weighted frequency ``f`` (capped at ``TF_CAP``) in a turn of ``length`` tokens."""
    f = min(f, TF_CAP)
    return f * (BM25_K1 + 1.0) / (f + BM25_K1 * (1.0 - BM25_B + BM25_B * length / avgdl))


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
    text = text or ""
    if text.isascii():
        # A token of ASCII text, and so the start of one, is a substring of the lower-cased text:
        # when no term's (or its stem's) is, nothing is mentioned and the text need not be split.
        lowered = text.lower()
        if not any(t[: max(4, len(t) - 2)] in lowered for t in idfs):
            return 0
        tokens = _TOKEN.findall(lowered)
    else:
        tokens = tokenize(text)
    # ``mentions`` as substring tests on the tokens joined by newlines, which no token holds:
    # "\nterm\n" is a whole token, "\nstem" the start of one (a search scores ~50 texts this way).
    joined = "\n" + "\n".join(tokens) + "\n"

    def mentioned(term: str) -> bool:
        if not term or "\n" in term:
            return mentions(set(tokens), term)
        return f"\n{term}\n" in joined or (len(term) > 4 and "\n" + term[: max(4, len(term) - 2)] in joined)

    return sum(w for t, w in idfs.items() if mentioned(t))


_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_OR = re.compile(r"\s+OR\s+")


def terms_from_fts5(match: str) -> list[str]:
    """The terms of an expression made by ``fts5_query``: ``"acme" OR "job"`` -> ``['acme', 'job']``.

    Only that shape is accepted; no store reads any other full-text syntax.

    Raises:
        InvalidInput: ``match`` is not a quoted-OR expression.
    """
    terms: list[str] = []
    pos = 0
    text = match.strip()
    while True:
        m = _QUOTED.match(text, pos)
        if m is None:
            break
        terms.append(m.group(1).replace('""', '"'))
        pos = m.end()
        if pos == len(text):
            return terms
        sep = _OR.match(text, pos)
        if sep is None:
            break
        pos = sep.end()
    raise InvalidInput(
        "the store accepts only expressions made by tortoise_sdk.search.fts5_query "
        '(quoted terms joined by OR); pass plain terms to Store.search_terms instead',
        field="match",
    )
