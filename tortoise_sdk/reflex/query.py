"""The reflex's query: the window read as messages, the question taken from it, its terms weighted."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, timedelta
from typing import Any

from ..errors import InvalidType
from ..models import starts_with_memory_block
from ..search import STOP_WORDS, query_terms
from . import tuning
from .shapes import Message, Reading, Term

__all__ = (
    "CAPITALISED",
    "CHANGE",
    "NOW",
    "QUESTION_CHARS",
    "SPACE",
    "WHEN",
    "as_list",
    "date_words",
    "entity_names",
    "message",
    "named_days",
    "query_text",
    "question_part",
    "speaking",
    "surface_of",
    "text_of",
    "weigh_terms",
)

# Question scaffolding: words that say what kind of answer is wanted, not what it is about.
_SCAFFOLD = frozenset("kind kinds type types sort sorts thing things something describe mention mentioned".split())
#: Words that only keep the conversation going: never a term, though a message holding them may ask something
#: ("haha thanks, that's funny" searches for "funny" alone; "thanks" matched every turn thanking anyone).
_SOCIAL = frozenset("thanks thank thx ty cheers bye goodbye cya lol haha hahaha lmao please np gotcha".split())
#: ... and words of courtesy that may also be content ("last night", "a good school"): a message of these alone
#: asks nothing, so it gets no block.
_COURTESY = _SOCIAL | frozenset(
    """hello hiya howdy yo later morning evening afternoon night good great nice cool awesome perfect fine sure
    sounds wow alright right see welcome ok okay appreciate appreciated excellent brilliant amazing lovely wonderful
    super neat""".split()
)
#: ... and, in a message that asks nothing, these too ("thanks so much", "thanks a lot"; "how much was it?" asks).
_THANKS_A_LOT = frozenset("much lot lots".split())
#: An acknowledgement or a sign-off whose words are content elsewhere ("that works", "looks good", "nice one",
#: "see you tomorrow"): a message of these and courtesy alone asks nothing either.
_ACKNOWLEDGED = re.compile(r"\b(?:(?:see|talk to|talk|speak|catch)\s+(?:you|ya|u)?\s*(?:tomorrow|soon|later|then)|"
                           r"(?:that|it|this)(?:'s| is)?\s+(?:works|worked|working)|looks?\s+(?:good|great|fine|perfect)|"
                           r"nice one)\b", re.I)
_ASK = re.compile(r"\?|\b(remind|recall|remember|tell me|what|when|where|who|which|why|how)\b", re.I)
CHANGE = re.compile(
    r"\b(chang\w*|used to|before|previous(ly)?|earlier|anymore|no longer|still|switch\w*|moved|former(ly)?|"
    r"update[ds]?|instead)\b", re.I)
# Present tense: the question asks how things stand now, so later evidence outranks what it replaced.
NOW = re.compile(
    r"\b(these days|nowadays|right now|now|currently|current|still|at the moment|anymore|any more|at present|"
    r"presently|no longer)\b", re.I)
WHEN = re.compile(r"\b(when|what (year|month|day|date|time)|how long ago)\b", re.I)
_MONTHS = ("january february march april may june july august september october november december").split()
_MONTH = "|".join(_MONTHS)
_DATE = re.compile(rf"\b(?:(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?)?({_MONTH})\b(?:\s+(\d{{1,2}})(?:st|nd|rd|th)?\b)?"
                   rf"(?:,?\s+((?:19|20)\d\d)\b)?", re.I)
# A month named alone ("in June") is a date only capitalised and after one of these; otherwise it is
# more often a verb ("may", "march": "I want to march") or a name ("What did June say?").
_BEFORE_MONTH = re.compile(r"\b(in|during|since|until|till|through|throughout|by|before|after|early|late|mid|"
                           r"last|this|next|of|from|to|between|around|about)\s+$", re.I)
#: Days after a named month that still count as it: "last week" said early next month is about it.
MONTH_SPILL_DAYS = 7
CAPITALISED = re.compile(r"\b[A-Z][\w'-]+")
# A name after one of these is whom something is said to or about, not who says it.
_OBJECT_BEFORE = re.compile(r"\b(to|with|about|from|for|at|by|of|on|than|like|toward|towards|between)\s+$", re.I)
_SAYS_AFTER = re.compile(r"\baccording to\s+$", re.I)
_TOGETHER = re.compile(r"\b(both|together|each other|one another|and|or|nor|&)\b", re.I)
QUESTION_CHARS = 2_048
SPACE = re.compile(r"\s+")


def term_weight(df: int, sized: int) -> float:
    """A word's IDF among ``sized`` turns (the namespace's, at least ``MIN_WEIGHTING_TURNS``); a word no turn holds
    weighs as in a namespace of at most ``UNSEEN_WEIGHTING_TURNS``."""
    size = sized if df else min(sized, tuning.UNSEEN_WEIGHTING_TURNS)
    return math.log(1 + (size - df + 0.5) / (df + 0.5))


def one_item(value: Any) -> bool:
    """``value`` is one message or block (a string, a dict, a Turn, a MemoryBlock), not a list of them."""
    return isinstance(value, (str, Mapping)) or hasattr(value, "content") or hasattr(value, "block")


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if one_item(value) else list(value)


#: LangChain's roles in a (role, text) pair, as the window's roles.
_PAIR_ROLES = {"human": "user", "ai": "assistant"}


def window_messages(window: Any) -> list[Message]:
    """The window's messages with text (``message``), memory blocks left out.

    Raises:
        InvalidInput: the window, or an item of it, is not a message (``InvalidType`` for a wrong type),
            named ``window`` or ``window[2]``.
    """
    if isinstance(window, (bytes, bytearray)) or not (
            window is None or isinstance(window, (str, Mapping, Iterable)) or hasattr(window, "content")):
        raise InvalidType("must be a list of messages: strings, {'role', 'content'} dicts, Turns, LangChain "
                          f"messages or (role, text) pairs; got {type(window).__name__}", field="window")
    out = []
    for i, x in enumerate(as_list(window)):
        if x is None:
            continue
        content = x.get("content", "") if isinstance(x, Mapping) else ""
        pair = isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(v, str) for v in x)
        shaped = isinstance(x, (str, Mapping)) or pair or hasattr(x, "content") or hasattr(x, "block")
        if not shaped or not isinstance(content, (str, list, tuple, type(None))):
            said = f" whose content is {type(content).__name__}" if isinstance(x, Mapping) else (
                f" of {len(x)} items, not (role, text)" if isinstance(x, (tuple, list)) else "")
            raise InvalidType(f"must be a message with text, got {type(x).__name__}{said}", field=f"window[{i}]")
        if (m := message(x)) is not None and m.text.strip():
            out.append(m)
    return out


def message(x: Any) -> Message | None:
    """A window item (Turn, OpenAI dict, LangChain message, a (role, text) pair, str) as role + text; memory
    blocks are dropped."""
    if isinstance(x, str):
        role, content, ident, meta = "user", x, None, None
    elif isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(v, str) for v in x):  # LangChain's ("human", text)
        role, content, ident, meta = _PAIR_ROLES.get(x[0], x[0]), x[1], None, None
    elif isinstance(x, Mapping):
        role, content, ident, meta = x.get("role", "user"), x.get("content", ""), x.get("id"), x.get("metadata")
    else:
        role = getattr(x, "role", None) or {"human": "user", "ai": "assistant"}.get(getattr(x, "type", ""),
                                                                                 getattr(x, "type", "user"))
        content, ident = getattr(x, "content", ""), getattr(x, "id", None)
        meta = getattr(x, "metadata", None) or getattr(x, "additional_kwargs", None)
    text = text_of(content)
    if starts_with_memory_block(text) or (isinstance(meta, Mapping) and meta.get("tortoise") == "memory_block"):
        return None
    return Message(str(role), text, str(ident) if ident is not None else None)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, Mapping) and isinstance(p.get("text"), str):
                parts.append(p["text"])
        return " ".join(parts)
    return ""


def query_text(msgs: list[Message]) -> tuple[str, str, bool]:
    """The last user turn, the one before it when the last is short (else ""), and whether it asks."""
    users = [m for m in msgs if m.role == "user"] or [m for m in msgs if m.role != "system"][-1:]
    if not users:
        return "", "", False
    last = question_part(users[-1].text)
    asks = bool(_ASK.search(last))
    # An acknowledgement ("that works", "looks good") is one only in a message that asks nothing: "is it working?"
    said = last if asks else _ACKNOWLEDGED.sub(" ", last)
    content = [t for t in query_terms(said) if t not in STOP_WORDS and t not in _COURTESY
               and (asks or t not in _THANKS_A_LOT)]
    if not content:
        return "", "", False
    earlier = question_part(users[-2].text) if len(content) < 3 and len(users) > 1 else ""
    return last, earlier, asks


def question_part(text: str) -> str:
    """What the reflex reads of a message: all of it, or of a long one (a paste) its start and its end,
    where a question about the paste is, so its cost does not grow with the paste."""
    if len(text) <= 2 * QUESTION_CHARS:
        return text
    return text[:QUESTION_CHARS] + "\n" + text[-QUESTION_CHARS:]


def weigh_terms(r: Reading, query: str, earlier: str = "", also: Sequence[str] = ()) -> list[Term]:
    """Weighted query terms; those only in the earlier user turn are context, at a fraction of their weight.

    The counts of ``also``'s one-lexeme words (those a later step adds, ``slots.expand``) are read in the
    same round trip, into ``r.known``."""
    own = [t for t in query_terms(query) if t not in STOP_WORDS and t not in _SCAFFOLD and t not in _SOCIAL]
    more = [t for t in query_terms(earlier)
            if t not in STOP_WORDS and t not in _SCAFFOLD and t not in _SOCIAL and t not in own]
    surfaces = own + more
    if not surfaces:
        return []
    dated = date_words(query) if tuning.DATE_BOOST else frozenset()
    stems = r.store.analyze(surfaces + list(also))
    seen: dict[str, tuple[str, bool]] = {}
    for i, (surface, st) in enumerate(zip(surfaces, stems)):
        if st and st[0] not in seen:
            seen[st[0]] = (surface, i >= len(own))
    extra = [st[0] for st in stems[len(surfaces):] if len(st) == 1 and st[0] not in seen]
    asked = list(dict.fromkeys([*seen, *extra]))
    n, stats = r.store.term_stats(r.ns, asked)
    r.known.update({stem: stats.get(stem, (0, 0)) for stem in asked})
    r.n_docs = n
    sized = max(n, tuning.MIN_WEIGHTING_TURNS)
    terms = []
    for stem, (surface, context) in seen.items():
        df_content, df_name = stats.get(stem, (0, 0))
        weight = term_weight(df_content, sized) if n else 1.0
        terms.append(Term(surface, stem, weight * (tuning.CONTEXT_WEIGHT if context else 1.0), df_content,
                          is_name=df_name > 0, context=context, date=surface in dated))
    terms.sort(key=lambda t: (t.context, -t.weight))
    return terms[: tuning.MAX_TERMS]


def named_days(query: str) -> list[tuple[int | None, date, date]]:
    """The dates a question names ("in June", "on October 13, 2023", "1 February, 2023") as
    ``(year or None, first day, last day)`` windows: a day +-1, a month and its first days after."""
    return [window for _, window in _named_dates(query)]


def date_words(query: str) -> frozenset[str]:
    """The words of the dates a question names ("may", "23", "2023" of "on May 23, 2023"): the
    session's date matches them, not a turn's text. A word the question also says outside its
    dates ("the 23 paintings on May 23, 2023") stays a word to match."""
    spans = [span for span, _ in _named_dates(query)]
    said = [query[a:b] for a, b in spans]
    rest = " ".join(query[a:b] for a, b in zip([0, *(e for _, e in spans)], [*(s for s, _ in spans), len(query)]))
    return frozenset(w for text in said for w in query_terms(text)) - set(query_terms(rest))


def _named_dates(query: str) -> list[tuple[tuple[int, int], tuple[int | None, date, date]]]:
    out: list[tuple[tuple[int, int], tuple[int | None, date, date]]] = []
    for m in _DATE.finditer(query):
        day_s, month_s, day2_s, year_s = m.groups()
        month = _MONTHS.index(month_s.lower()) + 1
        year = int(year_s) if year_s else None
        day = int(day_s or day2_s or 0)
        if not (day or year) and not (month_s[0].isupper() and _BEFORE_MONTH.search(query[: m.start()])):
            continue  # a month alone is a date only capitalised, after a preposition (_BEFORE_MONTH)
        base = year or 2000  # a leap year, so 29 February parses; the year is compared apart
        try:
            if day:
                first = date(base, month, day) - timedelta(days=1)
                last = first + timedelta(days=2)
            else:
                first = date(base, month, 1)
                last = (first + timedelta(days=32)).replace(day=1) + timedelta(days=MONTH_SPILL_DAYS - 1)
        except ValueError:
            continue
        out.append((m.span(), (year, first, last)))
    return out


def entity_names(query: str, terms: list[Term]) -> list[str]:
    words = [w.strip("'-") for w in CAPITALISED.findall(query)]
    names = [w for w in words if w.lower() not in STOP_WORDS and w.lower() not in _COURTESY]
    names += [t.surface.capitalize() for t in terms if t.is_name]
    return list(dict.fromkeys(n for n in names if n))[:8]


def speaking(query: str, names: list[Term]) -> list[Term]:
    """Of the speakers a question names, those it asks as speakers.

    With two or more named, the subject speaks: "What did Jon tell Gina about Gina's store?" asks
    what Jon said; a name after a preposition or with a possessive ("to Gina", "Gina's") is whom it
    is said to or about. Names joined ("Jon and Gina", "both") all speak, and "according to Gina"
    names the speaker. When no name reads as the subject, all of them stay.
    """
    if len(names) < 2:
        return names
    found = []
    for t in names:
        m = re.search(rf"\b{re.escape(t.surface)}\b", query, re.I)
        if m is not None:
            found.append((m.start(), m.end(), t))
    found.sort(key=lambda f: f[0])
    if len(found) < 2:
        return names
    between = query[found[0][1]:found[-1][0]]
    if _TOGETHER.search(between) or re.search(r"\bboth\b", query, re.I):
        return names
    for start, _, t in found:
        if _SAYS_AFTER.search(query[:start]):
            return [t]
    for start, end, t in found:
        if not _OBJECT_BEFORE.search(query[:start]) and not re.match(r"['\u2019]s?\b", query[end:]):
            return [t]
    return names


def surface_of(terms: list[Term], stem: str) -> str:
    return next((t.surface for t in terms if t.stem == stem), stem)
