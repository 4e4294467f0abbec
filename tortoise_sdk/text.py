"""Text normalisation shared by the store and the pipeline: identity keys and verbatim matching."""

from __future__ import annotations

import re
import unicodedata

__all__ = ("jaccard", "norm_content", "norm_name", "norm_quote", "token_set")

_QUOTES = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'", "\u00b4": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2013": "-", "\u2014": "-", "\u2212": "-", "\u00a0": " ", "\u2026": "...",
})
_SPACE = re.compile(r"\s+")
_NON_WORD = re.compile(r"[^\w\s]+", re.UNICODE)


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
