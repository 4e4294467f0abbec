"""The specificity gate: a pointer only on evidence specific to the prompt, measured on the namespace itself.

"did you push?", "continue", "run the tests again" share a word or two with many earlier turns:
each match is real and none is informative. The gate weighs what a candidate matches of the
prompt by the namespace's own statistics (each word's inverse document frequency across its
turns, the weights the query step computed) and lets a candidate through only when

- it matches at least ``MIN_TERMS`` distinct informative words of the prompt (the last user
  turn, not the context taken from the turn before) carrying ``MIN_BITS`` of information between
  them, or
- the prompt asks for something said before (a wh-question, "did we", "last time", "remind
  me") and the candidate matches ``MIN_TERMS`` of its words, common or not, carrying
  ``ASK_MIN_BITS`` between them: a question's words are specific together, and "did you push?",
  "run the tests again", "continue" are requests about now, not questions about before; or
- it matches a code unit the prompt names (an identifier, a path, a flag: ``EnsureSetup``,
  ``.entire/logs``, ``test:ci``, something in backticks) that is itself rare (``MIN_UNIT_BITS``).

A word is not informative when more than ``GENERIC_SHARE`` of the namespace's turns hold it
("tests", "run", "check", "continue" in a coding namespace: computed, not listed), when it is a
number, a courtesy ("thanks", "great") or the stem of a contraction ("let's", "don't").

Matches inside text the host wrote into a turn (a ``<system-reminder>``, hook output) do not
count, and turns that are only such text never pass (``noise``). Among those that pass, a
file's or a search's dump (a Read, Grep or Glob result) goes after the turns that say things
(``DUMPS_LAST``). Each pointer's reason names the words that made it specific and how many
turns of the namespace hold each, and names apart a matched word too common to count. The constants were chosen on one project of
``benchmarks/bench_coding_memory.py`` and checked on another that took no part.
"""

from __future__ import annotations

import re

from . import noise
from .query import _COURTESY
from .shapes import Candidate, Reading, Term

__all__ = ("ASK_MIN_BITS", "DUMPS_LAST", "ENABLED", "GENERIC_FLOOR", "GENERIC_SHARE", "MIN_BITS", "MIN_TERMS",
           "MIN_UNIT_BITS", "specific", "unit_stems")

#: Off only for the benchmark's ablation (``--set gate.ENABLED=false``): every candidate passes.
ENABLED = True
#: A tool result that dumps a file or a search (Read, Grep, Glob) matches many words by chance: it goes last.
DUMPS_LAST = True
#: A word held by more than this share of the namespace's turns says nothing specific.
GENERIC_SHARE = 0.05
#: ... but in a small namespace a word in this many turns or fewer is informative.
GENERIC_FLOOR = 3
#: Distinct prompt words a candidate must match (with its neighbouring turn), unless it matches a code unit.
MIN_TERMS = 2
#: Information (sum of the matched words' IDF, natural log) those words must carry together.
MIN_BITS = 5.0
#: Information the matched words of a question about what was said before must carry together.
ASK_MIN_BITS = 4.5
#: Information a single code unit the prompt names must carry on its own.
MIN_UNIT_BITS = 3.5

# A token that is code rather than prose: snake_case, dotted or slashed paths, colons (test:ci),
# camelCase / PascalCase with an inner capital, long flags, or anything in backticks.
_ASKS_BEFORE = re.compile(
    r"\b(what|which|where|how|why|when|who)\b|\b(did|do|have|had) we\b|\blast time\b|\bearlier\b|\bprevious(ly)?\b|"
    r"\bremind\b|\bremember\b|\brecall\b", re.I)
_CONTRACTED = re.compile(r"\b(\w+)['\u2019](?:s|t|re|ll|ve|d|m)\b", re.I)
_UNIT = re.compile(r"`[^`\n]+`|(?<![\w/.-])(?:[\w.-]*[_/:.][\w./:-]*\w|[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*|"
                   r"--?[a-z][\w-]+)")


def unit_stems(r: Reading, query: str) -> set[str]:
    """The stems of the words inside the prompt's code units."""
    from ..search import query_terms

    words = [w for m in _UNIT.finditer(query) for w in query_terms(m.group(0).strip("`"))]
    if not words:
        return set()
    return {s for st in r.store.analyze(words) for s in st}


def specific(r: Reading, ranked: list[Candidate], query: str) -> list[Candidate]:
    """The candidates whose evidence is specific to the prompt, each with a reason saying why."""
    if not ENABLED:
        return ranked
    contracted = {m.group(1).lower() for m in _CONTRACTED.finditer(query)}
    own = {t.stem: t for t in r.terms if not (t.context or t.feedback or t.date or t.is_name)
           and t.surface not in _COURTESY and t.surface not in contracted and not t.surface.isdigit()}
    if not own or not ranked:
        return []
    units = unit_stems(r, query) & set(own)
    asks = bool(_ASKS_BEFORE.search(query))
    clean = noise.cleaned_matches(r, ranked[:16], set(own))
    kept = []
    for c in ranked[:16]:
        matched = clean.get(c.key)
        if matched is None:
            continue
        why = _why(r, [own[s] for s in matched], units, asks)
        if why is not None:
            c.reasons.append(why)
            kept.append(c)
    if DUMPS_LAST:
        kept.sort(key=noise.is_dump)  # stable: a file's or a search's dump after the turns that say things
    return kept


def _why(r: Reading, matched: list[Term], units: set[str], asks: bool) -> str | None:
    n = r.n_docs or 0
    bits = sum(t.weight for t in matched)
    unit = [t for t in matched if t.stem in units and t.weight >= MIN_UNIT_BITS]
    informative = [t for t in matched if t.df <= max(GENERIC_FLOOR, GENERIC_SHARE * n)]
    asked = asks and len(matched) >= MIN_TERMS and bits >= ASK_MIN_BITS
    if not unit and not asked and (len(informative) < MIN_TERMS or bits < MIN_BITS):
        return None

    def said(terms: list[Term]) -> str:
        return ", ".join(f"{t.surface!r} (in {t.df} of {n} turns)" for t in sorted(terms, key=lambda t: t.df))

    # Only what made the candidate pass is called specific: a rare code unit, the informative words, or (for a
    # question about before) its words together; a word too common to be informative is named apart.
    if unit:
        kind, made = "the code unit ", unit
    elif len(informative) >= MIN_TERMS and bits >= MIN_BITS:
        kind, made = "", informative
    else:
        kind, made = "the question's words ", matched
    rest = [t for t in matched if t not in made]
    common = ", too common to count" if rest and not any(t in informative for t in rest) else ""
    also = f"; also matched {said(rest)}{common}" if rest else ""
    return f"specific: {kind}{said(made)}{also}; {bits:.1f} nats together"
