"""Facts that change: the words of one kind of fact (where one works, lives...), so that a
present-tense question reaches the latest statement of it whatever words that statement uses.

"Where am I working these days?" shares no word with "I just started a new job at Helix Health";
both are about where the speaker works. For a present-tense question naming such a fact, the
query gains that kind's other words (as context terms: they widen what is found, they do not
raise the coverage a turn needs), and a later turn that says something changed follows up an
earlier one about the same kind (``candidates.later_on_topic``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..search import STOP_WORDS, query_terms, tokenize
from . import tuning
from .query import CAPITALISED, NOW, term_weight
from .shapes import Candidate, Reading, Term

__all__ = ("SLOTS", "about_someone_else", "asker_first", "asks_about_self", "asks_now", "expand", "says_kind",
           "slot_words")

#: The kinds of fact that change over a life, each as the words that name it (in a question and in a statement).
SLOTS: dict[str, tuple[str, ...]] = {
    "work": ("work", "working", "job", "employer", "employed", "company", "workplace", "career", "hired",
             "profession", "occupation"),
    "home": ("live", "living", "home", "house", "apartment", "flat", "neighbourhood", "neighborhood", "moved",
             "relocated"),
    "partner": ("partner", "boyfriend", "girlfriend", "husband", "wife", "dating", "married", "engaged"),
    "study": ("study", "studying", "school", "university", "college", "degree", "course", "major"),
}
#: Words that name a kind in a question beside ``SLOTS`` ("What city am I based in?", "Am I single?", "Who is my
#: spouse?"), not sought in turns: a statement of where one lives rarely says "city" (and turns that do say it
#: are about cities), and its words are the question's own terms anyway.
_ALSO_NAMING: dict[str, tuple[str, ...]] = {
    "work": ("colleagues", "coworkers", "promoted", "unemployed"),
    "home": ("city", "town", "based"),
    "partner": ("single", "spouse", "fiance", "fiancee", "divorced"),
    "study": ("student", "enrolled", "semester"),
}
#: What says a kind of fact in a statement in more than one word ("Sam and I broke up. I'm seeing Alex now.",
#: "We're moving to Porto"): a later turn that says it speaks of that kind (``says_kind``), though none of
#: its words is one of ``SLOTS``. Never a question's: "I'm seeing an error" asks about no partner.
_SAID: dict[str, re.Pattern[str]] = {
    "work": re.compile(r"\b(?i:new (?:role|position)|laid off)\b|\b(?i:started|starting) (?i:at|with) [A-Z]"),
    "home": re.compile(r"\b(?:moving|relocating) (?:to|into|out of)\b", re.I),
    "partner": re.compile(r"\b(?i:(?:broke|broken|breaking|split|splitting) up|called it off|"
                          r"seeing (?:someone|somebody|anyone|a (?:guy|girl|man|woman)))\b|\b(?i:seeing) [A-Z][a-z]"),
    "study": re.compile(r"\b(?:dropped out|transferred to|graduat(?:ed|ing))\b", re.I),
}


#: Words of a kind that a coding prompt uses of things ("is the build working?", "the home directory", "a major
#: version", "of course", "based on", "a single file"): they name a kind of fact only in a question about someone
#: (``_about_someone``).
_ALSO_OF_THINGS = frozenset({"work", "working", "live", "living", "home", "house", "flat", "moved", "company",
                             "course", "major", "study", "school", "city", "town", "based", "relationship",
                             "single"})
#: "based on", "I based it on", "single quotes": a word of a kind in a phrase about something else (where one is
#: based is said "based in", "based out of", "where am I based?").
_OF_THINGS = re.compile(r"\bbased\b(?!\s+(?:in|out|near|around|at|now|these)\b|\s*(?:[?.!,]|$))|"
                        r"\bsingle[- ](?:quotes?|file|line|page|threaded|source)\b", re.I)
#: A person the question is about: a pronoun that is a subject or an object ("Is she working?", "Where do I work?";
#: not "my build", "its home directory": a possessive names a thing as often as a person's) ...
_PRONOUNS = frozenset("i i'm me we us you you're he him he's she she's they them they're".split())
#: ... or a name: a capitalised word after the first, not a stop-word ("Where does Maya work?"; not "Thanks. Where").
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")

#: A question in the present simple ("Where do I work?", "What's her job?", "Who is he dating?")...
_PRESENT = re.compile(r"\b(do|does|am|is|are|what's|whats|where's|who's|how's|hows|i'm|you're|she's|he's|they're)\b",
                      re.I)
#: ... that names no other time: a past ("Where did I work in January?", "the company I worked at", "my ex"),
#: a future ("Which school is Tom applying to next year?"), or a day ("When is my wife's birthday?" asks for one).
_OTHER_TIME = re.compile(
    r"\b(did|was|were|had|used to|ago|last|before|first|ever|then|previous|previously|former|formerly|old|earlier|"
    r"worked|lived|studied|graduated|quit|left|grew|dated|moved|ex|remember|next|will|going to|plan|plans|planning|"
    r"when|(?:19|20)\d\d)\b", re.I)


def asks_now(query: str) -> bool:
    """``query`` asks how a fact that changes stands now: it says so ("now", "these days": ``query.NOW``), or
    it asks in the present simple about a kind of fact (``SLOTS``) and names no other time ("Where do I
    work?" wants today's job as much as "Where do I work now?"; "Where did I work in January?" does not)."""
    if NOW.search(query):
        return True
    query = query.replace("\u2019", "'")  # a typographic apostrophe, as phones write "what\u2019s"
    return bool(_named_kinds(query)) and bool(_PRESENT.search(query)) and not _OTHER_TIME.search(query)


def _named_kinds(query: str) -> list[str]:
    """The kinds of fact (``SLOTS``) one of whose words ``query`` says; a word also used of things
    (``_ALSO_OF_THINGS``) counts only in a question about someone."""
    words = set(query_terms(_OF_THINGS.sub(" ", query)))
    if not _about_someone(query):
        words -= _ALSO_OF_THINGS
    if not words & _RESIDENCE:  # "what is Sam's favourite city?", "what city is the Eiffel Tower in?": no home
        words -= {"city", "town"}
    return [kind for kind, kind_words in SLOTS.items() if words & {*kind_words, *_ALSO_NAMING[kind]}]


#: With one of these, "city" or "town" in a question asks where someone lives ("what city am I based in?").
_RESIDENCE = frozenset({"live", "living", "lives", "based", "home", "moved", "reside", "stay", "staying"})


def _about_someone(query: str) -> bool:
    """``query`` names a person: a pronoun, or a capitalised word that does not start it and is no stop-word."""
    words = _WORD.findall(query.replace("\u2019", "'"))
    return any(w.lower() in _PRONOUNS for w in words) or any(
        w[0].isupper() and w[1:].islower() and w.lower() not in STOP_WORDS for w in words[1:])


def says_kind(text: str, kinds: Iterable[str]) -> set[str]:
    """The kinds among ``kinds`` that ``text`` states in a phrase of more than one word (``_SAID``)."""
    return {kind for kind in kinds if kind in _SAID and _SAID[kind].search(text)}


def slot_words(query: str) -> list[str]:
    """The words of each kind of fact ``query`` names (``SLOTS``): what ``expand`` adds."""
    return [w for kind in _named_kinds(query) for w in SLOTS[kind]]


def expand(r: Reading, terms: list[Term], query: str) -> tuple[list[Term], list[Term]]:
    """``terms`` without the words saying "now" when the query names a kind of fact, and the other
    words of each kind it names (``SLOT_WEIGHT`` of their weight, marked context, for
    ``candidates.widen_pool``); ``r.slots`` maps the stems of every word of those kinds (and of the query's own
    words in ``_ALSO_NAMING``) to the kind."""
    named = _named_kinds(query)
    if not named:
        return terms, []
    # "now", "these days": they say when, not what; a turn that says "now" is no evidence of the fact.
    tense = {w for m in NOW.finditer(query) for w in query_terms(m.group())}
    terms = [t for t in terms if t.surface not in tense]
    surfaces = slot_words(query)
    stems = r.store.analyze(surfaces)
    kind_of = {surface: kind for kind in named for surface in SLOTS[kind]}
    by_stem: dict[str, str] = {}
    for surface, st in zip(surfaces, stems):
        if len(st) == 1:
            r.slots[st[0]] = kind_of[surface]
            by_stem.setdefault(st[0], surface)
    # The question's own words that name a kind and are not sought ("city" in "What city am I based in?") are of it.
    naming = {w: kind for kind in named for w in _ALSO_NAMING[kind]}
    for t in terms:
        if t.surface in naming:
            r.slots.setdefault(t.stem, naming[t.surface])
    have = {t.stem for t in terms}
    new = [stem for stem in by_stem if stem not in have]
    n, stats = r.n_docs, {stem: r.known[stem] for stem in new if stem in r.known}  # weigh_terms read them
    missing = [stem for stem in new if stem not in r.known]
    if missing:
        n, read = r.store.term_stats(r.ns, missing)
        stats.update(read)
    sized = max(n, tuning.MIN_WEIGHTING_TURNS)
    # A word of the kind no turn says may still be a memory's ("Maya started a new job at Helix Health" for "where
    # do I work?", said "I just started at Helix Health"): kept, weighed as a word the index has never seen.
    extra = []
    for stem in new:
        df = stats.get(stem, (0, 0))[0]
        extra.append(Term(by_stem[stem], stem, tuning.SLOT_WEIGHT * term_weight(df, sized), df, context=True))
    return terms, sorted(extra, key=lambda t: -t.weight)


#: A question about the asker's own life ("Where do I live?", "my job").
_FIRST_PERSON = re.compile(r"\b(i|i'm|me|my|mine)\b", re.I)
#: Someone else as a turn's subject: a relative, a friend, a colleague ...
_OTHERS = frozenset("""
    sister brother mom mum mother dad father wife husband partner boyfriend girlfriend friend son daughter boss
    cousin aunt uncle grandma grandpa grandmother grandfather neighbour neighbor roommate flatmate colleague
    coworker parents kids children family
    """.split())
_CLAUSE = re.compile(r"[^.!?;]+")
#: The speaker among a sentence's words.
_SELF = frozenset("i i'm i've i'd me we we're we've us our".split())
#: A name as a sentence's subject, in its first words: a capitalised word then a verb that has a subject
#: ("Oh and Ruth has moved", "Sam can work remotely", "Priya just started at Globex").
_NAMED_SUBJECT = re.compile(
    r"^\W*(?i:(?:oh|and|so|also|btw|but|well|anyway|plus|update|news)\b[\s,:!-]*){0,3}"
    r"(?!I\b|I'|My\b|Our\b|We\b)[A-Z][a-z][\w-]*(?:\s+[A-Z][a-z][\w-]*)?"
    r"(?:'s)?\s+(?:has|had|is|was|got|gets|can|will|just|finally|started|starts|moved|moves|lives|lived|works|"
    r"worked|left|quit|joined|took|found|landed|switched)\b")
#: The speaker's own, in a sentence whose subject is a name or a thing.
_MINE = frozenset("my mine our ours myself".split())
#: A name the question ends by addressing ("Where do I work now, Claude?"): not whom it is about.
_VOCATIVE = re.compile(r",\s*[A-Z][\w'-]*\W*$")


def about_someone_else(text: str) -> bool:
    """The turn's first sentence is about someone else: it starts by naming a relative or friend ("My sister Priya
    lives in Toronto"), or a name as its subject ("Oh and Ruth has moved to Edinburgh", "Sam can work remotely"),
    and never the speaker ("My family and I moved", "After my dad retired I moved", "Our family moved", "Me and my
    sister moved", "Ruth and I moved")."""
    first = _CLAUSE.search(text)
    clause = first.group() if first else ""
    words = set(tokenize(clause))
    if _SELF & words:
        return False
    # A name's sentence that says "my" is the speaker's news ("Monday was my first day at Acme", "Python is my
    # main language"); a relative's names them by it ("My sister Priya lives in Toronto").
    return bool(_OTHERS & set(tokenize(clause)[:4])) or (not _MINE & words and bool(_NAMED_SUBJECT.search(clause)))


def asks_about_self(query: str) -> bool:
    """The question is about the asker ("Where do I live?"), not someone they name ("Where does my sister live?",
    "Where does Maya live?")."""
    names = [w for w in CAPITALISED.findall(_VOCATIVE.sub("", query))[1:] if w.lower() not in STOP_WORDS]
    return bool(_FIRST_PERSON.search(query)) and not _OTHERS & set(tokenize(query)) and not names


def asker_first(ranked: list[Candidate], query: str) -> list[Candidate]:
    """For a present-tense question about a fact of the asker's own life ("Where do I work?"), the turns the
    asker said about themself first: an assistant's turn ("Great that the migration worked.") or one about
    someone else ("My sister Priya lives in Toronto.") states no fact of the asker's; they follow, in order."""
    if not (asks_about_self(query) and _named_kinds(query)):
        return ranked
    kept = [c for c in ranked if not _not_the_askers(c)]
    return kept + [c for c in ranked if _not_the_askers(c)]


def _not_the_askers(c: Candidate) -> bool:
    return c.kind == "turn" and c.hit is not None and (c.hit.role == "assistant" or about_someone_else(c.text))
