"""Counting a block's tokens without a tokenizer: ``approx_tokens``, the reflex's default counter."""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ("TokenCounter", "approx_tokens")

TokenCounter = Callable[[str], int]

# Each pattern's matches are the tokens of one kind of run, so counting is findall in C, not a loop
# in Python (the block is counted several times per pointer while it is fitted to its budget):
# a run of ASCII letters splits into chunks of up to 4 from its start, digits into chunks of 3.
_LETTERS = re.compile(r"[A-Za-z]{1,4}")
_DIGITS = re.compile(r"[0-9]{1,3}")
_SPACES = re.compile(r"[^\S\n]{2,}")  # a run of two or more spaces (not newlines): one token
_SYMBOLS = re.compile(r"[!-/:-@\[-`{-~]")  # printable ASCII other than letters and digits
_WIDE = re.compile(r"[^\x00-\x7f\s]")  # non-ASCII, not whitespace


def approx_tokens(text: str) -> int:
    """The default token counter: a deterministic estimate from runs of characters.

    ASCII letters count one token per 4 (rounded up), digits one per 3, every other ASCII
    symbol and each newline one, a non-ASCII character one per UTF-8 byte (a digit one), runs
    of spaces one, single spaces nothing (a lone surrogate, which JSON can carry, three). On LoCoMo's
    blocks the real cl100k/o200k counts stay under it; base64, JWTs and other character soup can
    exceed it about twofold (``benchmarks/bench_tokens.py`` prints both), so pass a real counter when
    exactness matters.
    """
    n = (len(_LETTERS.findall(text)) + len(_DIGITS.findall(text)) + text.count("\n")
         + len(_SPACES.findall(text)) + len(_SYMBOLS.findall(text)))
    if not text.isascii():
        n += sum(1 if c.isdigit() else len(c.encode("utf-8", "surrogatepass")) for c in _WIDE.findall(text))
    return n
