"""Grounding: every event, point and retraction must quote a turn of the session verbatim.

A quote is looked for in the turn the item cites, then in every other evidence
turn of the session (the item is re-anchored there, with a warning); failing
both, that item alone is rejected with a warning. Tool turns, sub-agent records,
injected memory blocks and the host's own text (metadata ``not_evidence``, e.g. a
compaction summary) are never evidence. A memory block (its marker in any case)
pasted anywhere in a turn, at its start too, is cut out before matching, and so is
the JSON the ``tortoise`` command prints (``readback``: ``memories``, ``search``,
``expand``, ``context`` with ``--json``, pasted or printed): the turn grounds on the
words outside them, and a turn with none grounds nothing.

The matching rule (:func:`quote_matches`):

- Case, typographic quotes and dashes, spacing and punctuation between words are
  ignored: the quote and the turn are compared as their words (letters, digits,
  and apostrophes inside a word), in order.
- ``...`` (or ``…``) in a quote is an elision: its parts must occur in order,
  each at most ``MAX_ELLIPSIS_GAP`` characters after the previous one, each
  starting and ending on word boundaries where it meets the elision, and each
  holding at least ``MIN_PART_WORDS`` words or ``MIN_PART_CHARS`` characters
  (single short words cannot be stitched into a sentence the turn never said).
- A quote must hold at least ``MIN_QUOTE_WORDS`` words or ``MIN_QUOTE_CHARS``
  characters ("I" or "he" ground nothing).
- Scripts written without spaces between words (Han, Hiragana, Katakana) are
  measured by characters: each is a word of its own, and ``MIN_QUOTE_UNSPACED``
  of them weigh ``MIN_QUOTE_WORDS`` words ("它叫小白" grounds, "一只猫" does not).
  Such a quote starts and ends on word boundaries, so of the cut guards below only
  the number's applies ("我有2" of "我有20只猫" is refused): "私は猫を飼ってい" of
  "…飼っていません" is verbatim text and is accepted, as an English quote that
  stops before a separate "not" is. Thai,
  also unspaced, is not measured so (its combining marks already split it into words).
- Its outer ends may fall inside a word of the turn (models cut quotes like
  ``"...a family road trip yest"``) when its complete words alone meet that
  floor; a shorter quote must start and end on word boundaries. A cut never
  splits a number (``"I have 2"`` in "I have 20 dogs"), never drops a negation
  at the end (``"I can"`` in "I can't", ``"cannot"``) nor a negating prefix at the
  start (``"happy with it"`` in "unhappy with it").

What the rule cannot see: a cut that leaves a different real word (``"eagle"``
cut from "beagle") is verbatim text and is accepted; grounding checks that the
words are the turn's, not what the memory makes of them.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import Diagnostic, SearchHit, Turn
from ..readback import without_read_back
from ..store.plan import SourcePlan
from ..text import QUOTE_MARKS as _QUOTE_MARKS
from ..text import norm_name, norm_quote, per_text
from .merge import Entity, Proposal, _Grounded

__all__ = ("Grounded", "evidence_turns", "ground", "is_evidence", "match_key", "quote_matches", "quote_parts",
           "verbatim")

_SUBAGENT_FLAGS = ("subagent", "is_subagent", "isSidechain", "is_sidechain", "sidechain")
MIN_QUOTE_WORDS = 3
MIN_QUOTE_CHARS = 12
#: ... or this many characters of a script written without spaces (Chinese, Japanese): they weigh
#: ``MIN_QUOTE_WORDS`` words ("它叫小白", "its name is Xiaobai"; "一只猫", "a cat", is under it).
MIN_QUOTE_UNSPACED = 4
MIN_PART_WORDS = 2
MIN_PART_CHARS = 6
MAX_ELLIPSIS_GAP = 200
#: Han (CJK ideographs, their extensions and compatibility forms, 々〆〇), Hiragana and Katakana (their letters and
#: the length mark, not the middle dot): written without spaces between words, so each character is a word of its own.
_UNSPACED = ("\u3005-\u3007\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
             "\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f")
_IS_UNSPACED = re.compile(f"[{_UNSPACED}]")
# A word: letters, digits, underscore, and apostrophes between them ("can't", "Maya's"); or one character of a
# script written without spaces ("东京" is two words).
_WORDS = re.compile(f"[{_UNSPACED}]|[^\\W{_UNSPACED}]+(?:'[^\\W{_UNSPACED}]+)*")
_ELISION = re.compile(r"\.{3,}")
#: A character with the combining marks that follow it (NFKC composes them: "e" + U+0301 is "é").
_CLUSTER = re.compile(r".[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]*", re.S)
#: What a memory block embedded in a turn is replaced by before matching: no word, and never in stored text
#: (a NUL is refused at capture), so a stored quote that spans it is cut there (" … ").
CUT = "\x00"
_NEGATING_PREFIXES = frozenset({"un", "in", "im", "il", "ir", "dis", "non", "anti", "mis"})
_NEGATING_SUFFIX = re.compile(r"n't|not")


def is_evidence(turn: SearchHit | Turn, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a turn may ground a memory: not a tool turn, sub-agent record, memory block alone or host text.

    A stream marks the host's own text (a compaction summary, a command's output) with
    metadata ``not_evidence``: the reason, e.g. ``"compact_summary"``.
    """
    if turn.role == "tool":
        return False
    if (outside := without_read_back(turn.content)) != turn.content and not match_key(outside):
        return False  # only memory read back: a turn with words besides it grounds on those (ground cuts it)
    if metadata:
        if metadata.get("tortoise") in ("memory_block", "subagent") or metadata.get("not_evidence"):
            return False
        if any(metadata.get(flag) for flag in _SUBAGENT_FLAGS):
            return False
    return True


def evidence_turns(turns: Sequence[SearchHit], metadata: Mapping[str, Mapping[str, Any] | None]) -> list[SearchHit]:
    """The turns of a session that count as evidence, in order."""
    return [t for t in turns if is_evidence(t, metadata.get(t.turn_id))]


@dataclass(frozen=True)
class Grounded:
    """A grounded item with the turn its quote was found in."""

    item: _Grounded
    source: SourcePlan
    turn_index: int
    #: Sources of the restatements the item absorbed (grounded, distinct from ``source``).
    also: tuple[SourcePlan, ...] = ()


@dataclass
class GroundingResult:
    """Grounded items by kind, kept entities, and one warning per re-anchor or rejection."""

    events: list[Grounded]
    points: list[Grounded]
    retractions: list[Grounded]
    entities: list[Entity]
    warnings: list[Diagnostic]
    rejected: int


def ground(proposal: Proposal, turns: Sequence[SearchHit], context: Sequence[SearchHit] = ()) -> GroundingResult:
    """Check every quote against the evidence turns; keep entities that are used or named in the session.

    ``context`` turns (read by an earlier extraction, shown read-only) ground nothing: an item
    whose quote is only there is rejected, so a window's memories cite its own turns.
    """
    by_index = {t.index: t for t in turns}
    cleaned = {t.index: without_read_back(t.content, f" {CUT} ") for t in turns}
    keys = {index: match_key(text) for index, text in cleaned.items()}
    context_keys = {t.index: match_key(without_read_back(t.content)) for t in context}
    warnings: list[Diagnostic] = []
    rejected = 0
    out: dict[str, list[Grounded]] = {"events": [], "points": [], "retractions": []}
    for key in out:
        for item in getattr(proposal, key):
            found = _locate(item, keys)
            label = f"{key[:-1]} {item.content!r}"
            # The quotes of restatements it absorbed (union, VET merge) are sources too; one that grounds
            # stands in when the item's own quote does not.
            extra = [(i, item.also[n][0]) for n, i in enumerate(_locate_also(item, keys)) if i is not None]
            if found is None and extra:
                (found, quote), extra = extra[0], extra[1:]
                item = item.model_copy(update={"quote": quote, "turn": found})
            if found is None and context_keys and (earlier := _locate(item, context_keys)) is not None:
                rejected += 1
                warnings.append(Diagnostic(
                    stage="ground", code="context_turn",
                    message=f"{label} rejected: its quote {item.quote!r} is only in turn {earlier}, which an "
                            "earlier extraction read (shown as context); new items must cite new turns",
                    detail={"turn": item.turn, "quote": item.quote, "found": earlier},
                ))
                continue
            if found is None:
                rejected += 1
                # A turn cited outside the window (an earlier run read it) is said so: "not in turn 0" would be
                # untrue of a quote that is there.
                read = f"turns {min(by_index)}-{max(by_index)}" if by_index else "no turn"
                where = (f"turn {item.turn} nor in any other evidence turn of the session" if item.turn in by_index
                         else f"the turns this run read as new ({read}); it cites turn {item.turn}, outside them "
                              "(new items must cite new turns)")
                warnings.append(Diagnostic(
                    stage="ground", code="ungrounded_quote" if item.quote else "missing_quote",
                    message=(f"{label} rejected: its quote {item.quote!r} is not in {where}" if item.quote
                             else f"{label} rejected: it has no quote"),
                    detail={"turn": item.turn, "quote": item.quote},
                ))
                continue
            if found != item.turn:
                warnings.append(Diagnostic(
                    stage="ground", code="reanchored",
                    message=f"{label}: quote found in turn {found}, not the cited turn {item.turn}; re-anchored",
                    detail={"cited": item.turn, "found": found},
                ))
            # each source quotes its turn as the turn writes it, not as the model retyped it
            sources = dict.fromkeys(SourcePlan(by_index[i].turn_id, verbatim(q, cleaned[i]) if q else q)
                                    for i, q in [(found, item.quote), *extra])
            first, *rest = sources
            out[key].append(Grounded(item, first, found, tuple(rest)))
    used = {norm_name(n) for g in out["events"] + out["points"] for n in getattr(g.item, "about", ())}
    corpus = " ".join(norm_quote(text) for text in cleaned.values())
    entities = [e for e in proposal.entities if norm_name(e.name) in used or norm_quote(e.name) in corpus]
    return GroundingResult(out["events"], out["points"], out["retractions"], entities, warnings, rejected)


def _locate_also(item: _Grounded, keys: Mapping[int, str]) -> list[int | None]:
    """Where each absorbed (quote, turn) of ``item`` grounds, None where it does not."""
    return [_locate(item.model_copy(update={"quote": q, "turn": t, "also": ()}), keys) for q, t in item.also]


def _locate(item: _Grounded, keys: Mapping[int, str]) -> int | None:
    if not item.quote:
        return None
    parts = quote_parts(item.quote)
    if item.turn is not None and item.turn in keys and _match(keys[item.turn], parts):
        return item.turn
    for index in sorted(keys):
        if _match(keys[index], parts):
            return index
    return None


def quote_matches(quote: str, turn: str) -> bool:
    """Whether ``quote`` grounds in the text of ``turn`` under the rule of the module docstring."""
    return _match(match_key(turn), quote_parts(quote))


def match_key(text: str) -> str:
    """Text as matching sees it: :func:`norm_quote`, then only words (apostrophes inside a word kept), one space apart."""
    return " ".join(_WORDS.findall(norm_quote(text)))


def quote_parts(quote: str) -> list[str]:
    """A quote's elision parts as match keys, empty ones left out."""
    parts = (match_key(p) for p in _ELISION.split(norm_quote(quote)))
    return [p for p in parts if p]


def _match(text: str, parts: Sequence[str]) -> bool:
    return _spans(text, parts) is not None


def _spans(text: str, parts: Sequence[str]) -> list[tuple[int, int]] | None:
    """Where each part of the quote lies in ``text`` (a match key), None when the quote does not ground."""
    if not parts or not text:
        return None
    if len(parts) > 1 and any(len(p.split()) < MIN_PART_WORDS and len(p) < MIN_PART_CHARS for p in parts):
        return None
    return _place(text, parts, 0, 0, False, set())


def _place(text: str, parts: Sequence[str], k: int, at: int, start_cut: bool,
           failed: set[tuple[int, int, bool]]) -> list[tuple[int, int]] | None:
    """Where parts[k:] occur from ``at`` on (the first anywhere), trying every occurrence; None if nowhere.

    ``failed`` remembers placements already ruled out, so repeated parts cannot make the search exponential.
    """
    if (k, at, start_cut) in failed:
        return None
    part, last = parts[k], k == len(parts) - 1
    i = text.find(part, at)
    while i != -1 and (k == 0 or i - at <= MAX_ELLIPSIS_GAP):
        j = i + len(part)
        left, right = _inside_word(text, i), _inside_word(text, j)
        ok = (not left or (k == 0 and _start_cut_ok(text, i))) and (not right or (last and _end_cut_ok(text, j)))
        if ok:
            cut = start_cut or left
            if last:
                if _meets_floor(parts, cut, right):
                    return [(i, j)]
            elif (rest := _place(text, parts, k + 1, j, cut, failed)) is not None:
                return [(i, j), *rest]
        i = text.find(part, i + 1)
    failed.add((k, at, start_cut))
    return None


def verbatim(quote: str, text: str) -> str:
    """The words of ``text`` that ``quote`` grounds in, as the turn writes them (its case, punctuation and
    quotes; elided parts, and parts a :data:`CUT` mark separates, joined by " … "); ``quote`` itself when it
    does not ground there.

    A model quotes loosely ("i'm NOW at Helix Health"); the stored source quotes the turn.
    """
    origin, words, starts, key = _traced(text)
    spans = _spans(key, quote_parts(quote))
    if spans is None or key != match_key(text):
        return quote  # characters NFKC composes across clusters: the per-cluster view differs, keep the quote

    def where(at: int) -> tuple[int, int]:
        """The stretch of ``text`` the key's character ``at`` came from."""
        n = bisect.bisect_right(starts, at) - 1
        return origin[words[n].start() + min(at - starts[n], len(words[n][0]) - 1)]

    pieces = (text[where(i)[0]: where(j - 1)[1]] for i, j in spans)
    return " … ".join(p.strip() for piece in pieces for p in piece.split(CUT) if p.strip())


@functools.partial(per_text, maxsize=256)
def _traced(text: str) -> tuple[list[tuple[int, int]], list[re.Match[str]], list[int], str]:
    """The turn as matching sees it, a character (with the combining marks after it) at a time, each output
    character remembering the stretch of ``text`` it came from: ``(origin, words, word starts in key, key)``.
    Remembered per turn: a session's items often quote the same turn."""
    normal: list[str] = []
    origin: list[tuple[int, int]] = []
    for m in _CLUSTER.finditer(text):
        for n in unicodedata.normalize("NFKC", m[0]).translate(_QUOTE_MARKS).casefold():
            normal.append(n)
            origin.append(m.span())
    words = list(_WORDS.finditer("".join(normal)))
    starts = list(itertools.accumulate((len(w[0]) + 1 for w in words[:-1]), initial=0))
    return origin, words, starts, " ".join(w[0] for w in words)


def _meets_floor(parts: Sequence[str], start_cut: bool, end_cut: bool) -> bool:
    """The quote's complete words (a fragment at a cut end not counted) hold enough words or characters.

    ``MIN_QUOTE_UNSPACED`` characters of an unspaced script weigh ``MIN_QUOTE_WORDS`` words; other words count
    whole, and only they count towards ``MIN_QUOTE_CHARS``.
    """
    words = " ".join(parts).split()
    words = words[1 if start_cut else 0: len(words) - (1 if end_cut else 0)]
    spaced = [w for w in words if not _IS_UNSPACED.fullmatch(w)]
    weight = len(spaced) * MIN_QUOTE_UNSPACED + (len(words) - len(spaced)) * MIN_QUOTE_WORDS
    return weight >= MIN_QUOTE_WORDS * MIN_QUOTE_UNSPACED or len(" ".join(spaced)) >= MIN_QUOTE_CHARS


def _is_word(char: str) -> bool:
    return char.isalnum() or char in "_'"


def _inside_word(text: str, at: int) -> bool:
    return 0 < at < len(text) and _is_word(text[at - 1]) and _is_word(text[at])


def _start_cut_ok(text: str, at: int) -> bool:
    """A quote starting inside a word may not split a number nor drop a negating prefix."""
    if text[at - 1].isdigit() and text[at].isdigit():
        return False
    begin = at
    while begin > 0 and _is_word(text[begin - 1]):
        begin -= 1
    return text[begin:at] not in _NEGATING_PREFIXES


def _end_cut_ok(text: str, at: int) -> bool:
    """A quote ending inside a word may not split a number nor drop a negation ("do" of "don't", "can" of "cannot")."""
    if text[at - 1].isdigit() and text[at].isdigit():
        return False
    begin, end = at, at
    while begin > 0 and _is_word(text[begin - 1]):
        begin -= 1
    while end < len(text) and _is_word(text[end]):
        end += 1
    dropped = text[at:end]
    return _NEGATING_SUFFIX.fullmatch(dropped) is None and not (dropped == "'t" and text[begin:at] == "can")
