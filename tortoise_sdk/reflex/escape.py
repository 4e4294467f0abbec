"""Stored text made inert for the memory block: ``escape`` (every field) and ``pointer_tokens`` (what reads as one).

The block's structure is the frame lines, one line per pointer, a ``(tag)``, a ``"quoted"``
synopsis and a ``ref:<id>`` token. ``escape`` is the one function every stored field goes
through on its way into the block (content, speaker names, dates, a memory's ``when``,
labels), so that none of them can take part in that structure:

- **one line**: NFKC first (full-width and mathematical forms become ASCII), then every
  control, format, separator, private-use, surrogate or unassigned code point is a space;
- **no brackets but balanced parentheses**: every bracket-like code point is a parenthesis:
  Unicode's opening and closing punctuation (categories Ps/Pe), ``< >`` and the symbols
  named like brackets (``⎡ ⎦``, ``⊏ ⊐``, ``⌜ ⌟``, ``˂ ˃``, ``≺ ≻`` ..., see ``_BRACKET_WORDS``)
  and the letters Unicode's confusables list draws like brackets (``ᐸ ᐳ ᚲ`` ...);
  then a parenthesis without its partner in the same field is dropped, so a name or a date
  cannot close the ``(date, who)`` tag around it;
- **no double quotes**: every quotation mark, prime or ditto (Pi/Pf and their look-alikes)
  is an apostrophe, so a synopsis cannot close the quotes around it;
- **no blank that is not a space**: the fillers that draw nothing (Hangul fillers, the blank
  Braille pattern, ``_BLANKS``) are spaces too;
- **no pointer**: a ``ref`` followed by a colon, in any look-alike spelling (``rеf:`` with a
  Cyrillic е, ``ref꞉``, ``xref:``, ``ʀᴇꜰ∶``, ``reƒ:``, ``ɍef:``, ``ref፡``, ``ref\u3164:``), loses
  its colon. Look-alikes are found on a *skeleton* (UTS #39's idea, for the four characters that
  matter): NFKC, invisible characters and blank fillers dropped, combining marks dropped, lower
  case, a Latin letter with a stroke, hook or tail read as its letter (by its Unicode name), a
  punctuation named like a colon read as one, and ``_SKELETON``, the confusables of ``r e f :``
  that none of these rules catch (taken from Unicode's confusables.txt; ``tests/test_escape.py``
  checks the skeleton against the ``confusable-homoglyphs`` package's copy of it).

Only the renderer writes ``ref:``; ``pointer_tokens`` finds everything in a text that reads as
one, which is how the tests check that a block holds exactly its real pointers.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

__all__ = ("escape", "pointer_tokens", "skeleton")

#: Words of the Unicode names of symbols drawn like brackets (and, the last five, like double quotes).
_BRACKET_WORDS = re.compile(
    r"\b(?:(BRACKET|PARENTHESIS|BRACE|CHEVRON|CORNER|ARROWHEAD|LESS-THAN|GREATER-THAN|SQUARE IMAGE OF"
    r"|SQUARE ORIGINAL OF|SUBSET OF|SUPERSET OF|PRECEDES|SUCCEEDS)"
    r"|(QUOTATION|PRIME|DITTO|GERSHAYIM|DOUBLE ACUTE))\b"
)
_CLOSING_WORDS = re.compile(r"\b(?:RIGHT|CLOSING|GREATER-THAN|SUPERSET|SUCCEEDS|ORIGINAL)\b")

#: Letters and symbols Unicode's confusables list draws like ``< > {`` that neither their
#: category nor their name gives away.
_BRACKET_LETTERS = {"ᐸ": "(", "ᚲ": "(", "\U0001d236": "(", "ᐳ": ")", "\U0001d237": ")", "\U00016f3f": ")"}

#: The confusables of ``r e f R E F :`` (UTS #39 confusables.txt) that NFKC leaves as they are,
#: with the Latin small capitals, mapped to what they look like (lower case).
_SKELETON = {
    **dict.fromkeys("гᴦⲅꭇꭈꮁƦᎡᏒᖇꓣ\U000104b4\U00016f35\U0001d216ʀғ", "r"),
    **dict.fromkeys("еҽ℮ꬲΕЕᎬ⋿ⴹꓰ\U00010286\U000118a6\U000118aeᴇҿ", "e"),
    **dict.fromkeys("քẝꞙꬵϜᖴꓝꞘ\U00010287\U000102a5\U00010525\U000118a2\U000118c2\U0001d213ꜰ", "f"),
    **dict.fromkeys("ː˸։ःઃ᛬᠃᠉⁚∶ꓽ꞉܃܄׃", ":"),
}
#: Printable code points that draw nothing: escaping makes them spaces, the skeleton drops them.
_BLANKS = frozenset("\u115f\u1160\u3164\uffa0\u2800\U0001d159")
#: Unicode names of Latin letters drawn as their base letter plus a stroke, hook, tail or small capital.
_LATIN_LETTER = re.compile(r"^LATIN (?:SMALL |CAPITAL )?LETTER (?:SMALL CAPITAL )?([A-Z])(?: WITH .+)?$")
#: Unicode names of punctuation drawn like a colon (two dots one above the other).
_COLON_NAME = re.compile(r"(?<![A-Z])COLON(?! SIGN| EQUAL)|TWO DOT PUNCTUATION|PUNCTUATION TWO DOTS|WORDSPACE"
                         r"|BRAILLE PATTERN DOTS-(?:12|13|23|17|27|37|45|46|56|48|58|68)$")
_MARK = "\x01"  # a combining mark's place in the skeleton
_POINTER = re.compile(f"r{_MARK}*e{_MARK}*f[{_MARK} ]*:")
_SPACES = re.compile(r" {2,}")


def escape(text: str, limit: int | None = None) -> str:
    """``text`` as one line of inert data (see the module docstring); at most ``limit`` characters.

    A longer text is cut, ending in ``…``; only its first ``4 * limit`` characters are read,
    so a pasted megabyte costs what a paragraph does.
    """
    out = _escape_once(text, limit)
    # What was taken out can leave a combining mark beside a new letter ("A⎛̀": the bracket goes, and "A" with
    # its grave accent is "À" once normalised): such a text is escaped again, composed, so escaping twice
    # changes nothing (it never grows: NFC only composes, and a cut's "…" stays one character). Other texts,
    # nearly all, are normalised already and pay only the quick check.
    for _ in range(4):
        if unicodedata.is_normalized("NFC", out):
            break
        out = _escape_once(out, None, "NFC")
    return out


def _escape_once(text: str, limit: int | None, form: str = "NFKC") -> str:
    cut = limit is not None and len(text) > 4 * limit + 16
    if cut:
        text = text[: 4 * limit + 16]
    flat = _SPACES.sub(" ", unicodedata.normalize(form, text).translate(_NEUTRAL)).strip()
    if limit is not None and (cut or len(flat) > limit):
        flat = flat[: max(limit - 1, 0)].rstrip() + "…"
    # Last, what could make a pointer out of its neighbours: an unpaired parenthesis between ``ref``
    # and a colon is dropped before the colon check, and a colon taken away may bring the next one
    # up to a ``ref`` (``refref::``), so the check runs until it finds nothing.
    flat = _balanced(flat)
    while spans := _pointer_spans(flat):
        colons = {end - 1 for _, end in spans}
        flat = "".join(" " if i in colons else ch for i, ch in enumerate(flat))
    return _SPACES.sub(" ", flat).strip()


def skeleton(text: str) -> str:
    """What ``text`` looks like, for the pointer check: NFKC, then one character per character, the
    confusables of ``r e f :`` folded, accents and marks dropped (a mark is ``\\x01``), lower case."""
    return unicodedata.normalize("NFKC", text).translate(_SKELETON_TABLE)


def pointer_tokens(text: str) -> list[str]:
    """Every place in ``text`` that reads as a pointer (``ref:`` in any look-alike spelling), as written."""
    flat = unicodedata.normalize("NFKC", text).translate(_SPACE_TABLE)
    return [flat[a:b] for a, b in _pointer_spans(flat)]


def _neutral(ch: str) -> str:
    if ch in "()":
        return ch
    if ch == " " or not ch.isprintable() or ch in _BLANKS:
        return " "
    if ch in _BRACKET_LETTERS:
        return _BRACKET_LETTERS[ch]
    category = unicodedata.category(ch)
    if category == "Ps":
        return "("
    if category == "Pe":
        return ")"
    if category in ("Pi", "Pf") or ch in "\"`":
        return "'"
    if category[0] in "SP" or category in ("Lm", "Mn"):
        name = unicodedata.name(ch, "")
        found = _BRACKET_WORDS.search(name)
        if found is not None:
            if found.group(2):
                return "'"
            if category == "Mn":
                return ""
            return ")" if _CLOSING_WORDS.search(name) else "("
    return ch


def _skeleton_of(ch: str) -> str:
    if ch in _SKELETON:
        return _SKELETON[ch]
    category = unicodedata.category(ch)
    if category in ("Mn", "Me"):
        return _MARK
    if category[0] in "LPS":
        name = unicodedata.name(ch, "")
        latin = _LATIN_LETTER.match(name)
        if latin is not None:
            return latin.group(1).lower()
        if category[0] != "L" and _COLON_NAME.search(name):
            return ":"
    base = unicodedata.normalize("NFD", ch)[0]
    return (_MARK if unicodedata.category(base) in ("Mn", "Me") else base.lower()[0])


class _Table(dict):  # type: ignore[type-arg]
    """A ``str.translate`` table that works out each code point once, when first met."""

    def __init__(self, rule: Callable[[str], str]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, cp: int) -> str:
        out = self[cp] = self._rule(chr(cp))
        return out


_NEUTRAL = _Table(_neutral)
_SKELETON_TABLE = _Table(_skeleton_of)
_SPACE_TABLE = _Table(lambda ch: "" if ch in _BLANKS or unicodedata.category(ch) == "Cf"
                       else ch if ch.isprintable() else " ")


def _pointer_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each ``ref:`` look-alike in an NFKC text whose spaces are all " " (end: past the colon)."""
    skeleton = text.translate(_SKELETON_TABLE)
    if ":" not in skeleton:
        return []
    return [m.span() for m in _POINTER.finditer(skeleton)]


def _balanced(text: str) -> str:
    """Drop every parenthesis that has no partner in ``text``."""
    if "(" not in text and ")" not in text:
        return text
    chars = list(text)
    open_at: list[int] = []
    for i, ch in enumerate(chars):
        if ch == "(":
            open_at.append(i)
        elif ch == ")":
            if open_at:
                open_at.pop()
            else:
                chars[i] = ""
    for i in open_at:
        chars[i] = ""
    return "".join(chars)
