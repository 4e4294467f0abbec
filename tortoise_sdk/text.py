"""Text normalisation shared by the store and the pipeline: identity keys and verbatim matching."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from typing import TypeVar

__all__ = ("QUOTE_MARKS", "fact_key", "jaccard", "norm_content", "norm_name", "norm_quote", "per_text", "token_set")

_T = TypeVar("_T")

#: Typographic quotes, dashes, no-break space and the ellipsis character as plain ASCII.
QUOTE_MARKS = _QUOTES = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'", "\u00b4": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2013": "-", "\u2014": "-", "\u2212": "-", "\u00a0": " ", "\u2026": "...",
})
_SPACE = re.compile(r"\s+")
_NON_WORD = re.compile(r"[^\w\s]+", re.UNICODE)


def per_text(fn: Callable[[str], _T], *, maxsize: int = 4096, longest: int = 2000) -> Callable[[str], _T]:
    """``fn``, a pure function of one text, remembered for the ``maxsize`` texts of at most ``longest``
    characters used last (a longer text, a paste, is computed each time and never held). The reflex
    reads the same turns block after block, up to three times a block."""
    held = functools.lru_cache(maxsize=maxsize)(fn)

    @functools.wraps(fn)
    def call(text: str) -> _T:
        return held(text) if len(text) <= longest else fn(text)

    return call


def norm_quote(text: str) -> str:
    """Case-folded text with typographic quotes and dashes made plain and whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text or "").translate(_QUOTES).casefold()
    return _SPACE.sub(" ", text).strip()


def norm_content(text: str) -> str:
    """The identity key of an event or point: case, quotes, punctuation and spacing ignored."""
    return _SPACE.sub(" ", _NON_WORD.sub(" ", norm_quote(text).replace("'", ""))).strip()


def norm_name(name: str) -> str:
    """The identity of an entity name: ``"  Dr. Maya  O'Neil"`` and ``"dr maya oneil"`` are one."""
    return norm_content(name)


def token_set(text: str) -> frozenset[str]:
    """The distinct word tokens of normalised text."""
    return frozenset(norm_content(text).split())


def jaccard(a: str, b: str) -> float:
    """Token-set overlap of two texts, from 0 (disjoint) to 1 (same words)."""
    x, y = token_set(a), token_set(b)
    if not x and not y:
        return 1.0
    return len(x & y) / len(x | y)


# The dedupe key of a fact (``fact_key``): deterministic, no model, no database analyzer (both engines
# must agree, and the store's analyzers differ: porter on SQLite, the 'simple' config on PostgreSQL).
#: Words that carry no fact: articles and fillers. Negations, modals, tense auxiliaries (is/was/will)
#: and prepositions are kept: "moved to"/"moved from", "is"/"was", "will move"/"moved" differ.
FACT_STOP_WORDS = frozenset({"a", "an", "the", "that", "really", "very", "just", "also", "actually", "quite",
                             "so", "too", "currently"})
_CONTRACTIONS = {"dont": "do not", "doesnt": "does not", "didnt": "did not", "isnt": "is not",
                 "wasnt": "was not", "arent": "are not", "werent": "were not", "cant": "can not",
                 "cannot": "can not", "wont": "will not", "havent": "have not", "hasnt": "has not",
                 "hadnt": "had not", "wouldnt": "would not", "shouldnt": "should not", "couldnt": "could not"}
_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
_VOWELS = frozenset("aeiouy")


def _stem(word: str) -> str:
    """A light suffix rule (plural, -ed, -ing, final e, doubled consonant): "moves", "moved", "moving" -> "mov"."""
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in _VOWELS and word[-1] not in "lsz":
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def _numbers(words: list[str]) -> list[str]:
    """Number words as digits; a tens word followed by a unit word is one number ("twenty two" -> "22")."""
    out: list[str] = []
    tens_last = False
    for w in words:
        if tens_last and w in _UNITS and 0 < _UNITS[w] < 10:
            out[-1] = str(int(out[-1]) + _UNITS[w])
            tens_last = False
            continue
        tens_last = w in _TENS
        out.append(str(_UNITS[w]) if w in _UNITS else str(_TENS[w]) if w in _TENS else w)
    return out


def fact_key(text: str) -> str:
    """The dedupe key of an event or point: two statements with one key are one fact, reworded.

    :func:`norm_content` (case, quotes, punctuation, spacing), then contractions expanded
    ("doesn't" -> "does not"), number words as digits ("twenty-two" -> "22"), the words of
    :data:`FACT_STOP_WORDS` dropped and each word stemmed by a light suffix rule. Word order is
    kept (who did what to whom).
    """
    words = " ".join(_CONTRACTIONS.get(w, w) for w in norm_content(text).split()).split()
    return " ".join(_stem(w) for w in _numbers(words) if w not in FACT_STOP_WORDS)
