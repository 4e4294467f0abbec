"""The reflex's scoring and gates: BM25 with neighbours, speakers and 'when', rank fusion, stale turns."""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import date

from ..confidence import AGREED, BASE
from ..models import SearchHit
from ..search import TF_CAP, tokenize
from ..store.base import TurnFacts
from ..text import per_text
from . import ranker, tuning
from .noise import WH_WORDS, is_echo, is_filler, unanswered
from .query import CAPITALISED, WHEN, named_days, speaking
from .shapes import Candidate, Reading, Term, session_day

__all__ = ("distinct", "diversify", "fuse", "latest_first", "memories_first", "score_turns", "without_stale_turns")

_NOT_WORD = re.compile(r"[\W_]+")
# Words that name a time: a turn that says one of them, a year (19xx, 20xx) or "this morning" says when.
_TIME_WORD_SET = frozenset(
    "yesterday today tonight tomorrow ago last next recently weekend since year years month months week weeks "
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july "
    "august september october november december".split())
_WORD_RUN = re.compile(r"\w+")
_THIS_MORNING = re.compile(r"\bthis morning\b")
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_ABOUT_SAYING = re.compile(r"\b(mention(ed|s|ing)?|say(s|ing)?|said|tell(s|ing)?|told|talk(ed|s|ing)?|"
                           r"discuss(ed|es|ing)?|ask(ed|s|ing)?|br(ing|ings|inging|ought) up)\b", re.I)
#: A question that asks for something (what, which, who...) rather than yes or no, and offers no choice ("or").
_WH = re.compile(rf"^(?!.*\bor\b).*\b({'|'.join(sorted(WH_WORDS))})\b", re.I | re.S)


#: A quoted title ("Little Women", "Charlotte's Web"): 2 to 60 characters between double quotes, the opening
#: one at the start of the text or after a space or bracket, the closing one before a space, punctuation or the end.
_QUOTED = re.compile(r"(?:^|(?<=[\s(\[]))[\"\u201c]([^\"\u201c\u201d\n]{2,60})[\"\u201d](?=[\s.,;:!?)\]]|$)")
#: What may stand between a sentence's end and its first word: spaces, quotes, brackets, a bullet's star.
_BETWEEN = frozenset(" \t\"'\u201c\u2018\u201d\u2019()[]*\ufe0f")
#: A capital after one of these (or a symbol, an emoji, a digit: "1) Milk") starts a sentence or an item.
_SENTENCE_ENDS = frozenset(".!?:;-\n\u2022\u2013\u2014\u2026")
#: Words written with a capital wherever they stand: not the names of things.
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "omg", "lol"})
_POSSESSIVE = re.compile(r"['\u2019]s$")


def _word(raw: str) -> str:
    """A capitalised word as compared: case-folded, without quotes, dashes or a possessive ("Nate's": "nate")."""
    return _POSSESSIVE.sub("", raw.strip("'-\u2019").casefold())


def _starts_sentence(text: str, at: int) -> bool:
    """Whether the word at ``at`` starts a sentence or an item: what comes before it, past spaces, quotes and
    brackets (at most 8 characters back), is the text's start, a sentence's end, a digit or a symbol."""
    i, lo = at - 1, max(0, at - 8)
    while i >= lo and text[i] in _BETWEEN:
        i -= 1
    if i < lo:
        return True
    c = text[i]
    return c in _SENTENCE_ENDS or c.isdigit() or unicodedata.category(c).startswith("S")


@per_text
def proper_words(text: str) -> frozenset[str]:
    """The specific things ``text`` names, case-folded: its quoted titles and the words it capitalises inside a
    sentence ("a Valorant tournament", "we played Catan"; a title's words count too, a word in capitals in a
    text in capitals does not). A question that asks "what games..." wants those turns beside one that only
    says "games" back. Only the few characters before a word are looked at, so a long paste costs one pass."""
    out = {m.group(1).strip(" .,;:!?").casefold() for m in _QUOTED.finditer(text)}
    shouting = sum(c.isupper() for c in text) > sum(c.islower() for c in text)
    for m in CAPITALISED.finditer(text):
        raw, word = m.group(0), _word(m.group(0))
        if not word or word in _NOT_NAMES or (shouting and raw.isupper()) or _starts_sentence(text, m.start()):
            continue
        out.add(word)
    return frozenset(out - {""})


@per_text
def says_time(text: str) -> bool:
    """Whether ``text`` names a time, read by its words. (A regular expression of the same words as
    alternatives, tried at every word boundary, cost about 12 us a turn: a tenth of a block's Python
    time at 100,000 items. ``tests/test_reflex_time_words.py`` holds it and checks both agree.)"""
    folded = text.casefold()
    words = _WORD_RUN.findall(folded)
    if not _TIME_WORD_SET.isdisjoint(words):
        return True
    return _YEAR.search(text) is not None or ("morning" in folded and _THIS_MORNING.search(folded) is not None)


def score_turns(r: Reading, terms: list[Term], content_terms: list[Term], query: str,
                by_pos: Mapping[tuple[str, int], SearchHit]) -> list[Candidate]:
    """The turns of the pool that pass the coverage and relative gates, best first."""
    if not by_pos:
        return []
    pool = list(by_pos.values())
    names = sorted({h.name for h in pool if h.name})
    fresh = [h for h in pool if h.turn_id not in r.tokens]
    got = r.store.analyze([h.content for h in fresh] + names)
    r.tokens.update((h.turn_id, (Counter(toks), len(toks))) for h, toks in zip(fresh, got))
    name_stems = {name: set(toks) for name, toks in zip(names, got[len(fresh):])}
    # The speakers' names and the question's own words are not things a turn names for it.
    not_named = ({_word(w) for n in names for w in n.split()} | {_word(w) for w in CAPITALISED.findall(query)}
                 if tuning.RANKER_NAMED else set())
    weights = {t.stem: t.weight for t in content_terms}
    named = [t for t in terms if t.is_name]
    speakers = {t.stem for t in (speaking(query, named) if tuning.SUBJECT_SPEAKER else named)}
    nicknamed = _nicknames(query, content_terms, name_stems) if tuning.NICKNAMES else {}
    for stem, speaker_stems in nicknamed.items():
        weights.pop(stem, None)
        speakers |= speaker_stems
    when_q = bool(WHEN.search(query))
    lengths = [r.tokens[h.turn_id][1] for h in pool]
    # The median, not the mean: one long paste in the pool must not lengthen the norm of every turn.
    avg = float(statistics.median(lengths)) if lengths else 1.0
    tfs = [r.tokens[h.turn_id][0] for h in pool]
    norms = [tuning.K1 * (1 - tuning.B + tuning.B * n / max(avg, 1.0)) for n in lengths]

    def bm25(w: Mapping[str, float]) -> list[float]:
        # A term counts at most TF_CAP times in a turn (as in the stores' ranking): a long paste
        # that repeats the query's words cannot buy back what length normalisation takes off it.
        return [sum(wt * min(tf[s], TF_CAP) * (tuning.K1 + 1) / (min(tf[s], TF_CAP) + nm)
                    for s, wt in w.items() if s in tf)  # ``in``: a Counter's missing key costs a Python call
                for tf, nm in zip(tfs, norms)]

    scores = bm25(weights)
    # A turn that only says a wh-question's words back ("Cats!" for "What are my cats called?") is no evidence,
    # nor lends any to its neighbours. Not for a question answered yes or no ("Do I like sushi?": "I don't like
    # sushi.", "Is Biscuit a beagle?": "Beagle!") or one about the saying itself ("When did Gina mention Shia
    # Labeouf?": "It's Shia Labeouf!").
    asked = frozenset(tokenize(query)) if _WH.search(query) and not _ABOUT_SAYING.search(query) else frozenset()
    # Nor does an assistant's filler ("OK.", "How can I help you today?"): it matched "help" or "today" by chance.
    silent = {pos for pos, h in by_pos.items() if is_echo(h, asked) or is_filler(h)}
    own: dict[tuple[str, int], tuple[float, set[str]]] = {
        pos: (0.0, set()) if pos in silent else (sc, {s for s in weights if s in tf})
        for pos, tf, sc in zip(by_pos, tfs, scores)
    }
    # Terms the index has never seen count too: a query mostly about unknown things is unrelated.
    counted = [t for t in terms if not (tuning.NAMES_AS_SPEAKERS and t.is_name) and not t.context
               and not t.date and t.stem not in nicknamed]
    # The question's own words of one kind of fact (slots.expand: "city" and "based" in "What city am I based in
    # now?") are two ways to ask one thing: they count once, as the heaviest of them.
    of_kind_asked: dict[str, float] = {}
    for t in counted:
        if t.stem in r.slots:
            of_kind_asked[r.slots[t.stem]] = max(of_kind_asked.get(r.slots[t.stem], 0.0), t.weight)
    total = (sum(t.weight for t in counted if t.stem not in r.slots) + sum(of_kind_asked.values())) or 1.0
    speaker_weight = sum(t.weight for t in terms if t.is_name or t.stem in nicknamed)
    # A date the question names is matched by when a turn was said (DATE_BOOST), not by its words.
    date_weight = sum(t.weight for t in terms if t.date and not t.context)
    fed = {t.stem for t in content_terms if t.feedback}
    # An instance of a category the question names covers that category's words (instances.py), at
    # INSTANCE_WEIGHT of their weight, once however many instances a turn names: never more than the words.
    of_kind = {t.stem: t.instance_of for t in content_terms if t.instance_of}
    fed |= set(of_kind)
    query_weight = {t.stem: t.weight for t in terms}

    def cover(stems: set[str]) -> float:
        said = stems - fed
        kinds = {of_kind[s] for s in stems & of_kind.keys()}
        return (sum(weights[s] for s in said)
                + sum(tuning.INSTANCE_WEIGHT * sum(query_weight.get(c, 0.0) for c in kind if c not in said)
                      for kind in kinds))
    session_share: dict[str, float] = {}
    if tuning.SESSION_BOOST:
        # A session whose turns between them match several of the query's terms is about what it asks.
        said: dict[str, set[str]] = defaultdict(set)
        for (sid, _), (_, matched) in own.items():
            said[sid] |= matched - fed
        session_share = {sid: min(1.0, sum(weights[s] for s in st) / total) for sid, st in said.items()}
    days = named_days(query) if tuning.DATE_BOOST else []
    asks = (frozenset(pos for pos, h in by_pos.items() if "?" in h.content)
            if tuning.ANSWER_SHARE or (tuning.SECOND_NEIGHBOUR_SHARE and tuning.SECOND_NEIGHBOUR_ASKS) else frozenset())
    # Session-level evidence (SESSION_LEND): a turn that matches a word of the question inherits a share of
    # the best own score in its session, its own included.
    lend: dict[str, float] = {}
    if tuning.SESSION_LEND:
        for (sid, _), (sc, _) in own.items():
            lend[sid] = max(lend.get(sid, 0.0), sc)
    heaviest = max(weights.values(), default=0.0) or 1.0
    cands = []
    raw: dict[str, dict[str, float]] = {}  # the learnt ranker's inputs (ranker.features), by turn
    for key, h in by_pos.items():
        if key in silent:  # "OK." after a question that matched would inherit its score
            continue
        if unanswered(h, by_pos.get((h.session_id, h.index + 1))):  # asked before and not answered then
            continue
        score, matched = own[key]
        best_nb, nb_matched, nb_from = 0.0, set(), None
        for d, share in _shares(key, asks):
            nb = own.get((h.session_id, h.index + d))
            if nb:
                nb_matched = nb_matched | nb[1]
                if share * nb[0] > best_nb:
                    best_nb, nb_from = share * nb[0], (h.session_id, h.index + d)
        ctx = score + best_nb
        if lend and score > 0:
            ctx += tuning.SESSION_LEND * lend[h.session_id]
        prev = own.get((h.session_id, h.index - 1))
        answers = bool(tuning.ANSWER_SHARE and prev and prev[0] and (h.session_id, h.index - 1) in asks)
        mult = 1.0
        says_when = when_q and says_time(h.content)
        if says_when:
            mult *= 1 + tuning.WHEN_BOOST
        spoken = bool(h.name and speakers & name_stems.get(h.name, set()))
        if spoken:
            mult *= 1 + tuning.SPEAKER_BOOST
        if session_share:
            mult *= 1 + tuning.SESSION_BOOST * session_share.get(h.session_id, 0.0)
        on_day = bool(days and _on_named_day(h.session_date, days))
        if on_day:
            mult *= 1 + tuning.DATE_BOOST
        ctx *= mult
        bonus = (speaker_weight if spoken else 0.0) + (date_weight if on_day else 0.0)
        covered = cover(matched | nb_matched) + bonus
        if ctx <= 0 or covered / (total + bonus) < tuning.MIN_COVERAGE:
            continue
        # Reasons are worded only for the few candidates that reach the block (see render.reasons).
        raw[h.turn_id] = {
            "own": score, "neighbour": best_nb, "score": ctx, "coverage": cover(matched) / total,
            "coverage_nb": covered / (total + bonus), "spoken": float(spoken), "on_day": float(on_day),
            "says_when": float(says_when), "session": session_share.get(h.session_id, 0.0), "answers": float(answers),
            "asks": float(h.content.rstrip().endswith("?")), "length": r.tokens[h.turn_id][1],
            "key_term": max((weights[s] for s in matched), default=0.0) / heaviest,
            "time_words": float(says_when or says_time(h.content)),
            "named": len(proper_words(h.content) - not_named) if tuning.RANKER_NAMED else 0,
            "pos": key, "from": nb_from, "mult": mult}
        cands.append(Candidate(key=h.turn_id, kind="turn", text=h.content, hit=h, score=ctx, own=score,
                               matched=matched, mult=mult, nb_only=(nb_matched - matched) if best_nb else set(),
                               lent_by=nb_from, answers=answers,
                               says_when=says_when, spoken=spoken))
    cands.sort(key=lambda c: (-c.score, c.hit.session_id if c.hit else "", c.hit.index if c.hit else 0))
    if cands and tuning.RELATIVE_GATE:
        floor = cands[0].score * tuning.RELATIVE_GATE
        cands = [c for c in cands if c.score >= floor]
    return ranker.rerank(cands, [raw[c.key] for c in cands],
                         lambda cs: diversify(cs, own, asks) if tuning.DIVERSIFY or tuning.SESSION_SPREAD else cs,
                         spread=ranker.listing(query), gathers=ranker.gathers(query))


def _shares(pos: tuple[str, int], asks: frozenset[tuple[str, int]]) -> tuple[tuple[int, float], ...]:
    """What a turn inherits of its previous and next turns' scores: more of a previous turn that asks
    (``ANSWER_SHARE``), since a reply is where a question's answer is said; and with
    ``SECOND_NEIGHBOUR_SHARE``, of the turn two before (in a two-party exchange the same speaker's, across
    the other's question: "I took the kids to the museum" / "What did they like?" / "They were stoked for
    the dinosaur exhibit!"), only when the turn between asks (``SECOND_NEIGHBOUR_ASKS``), and of the turn
    two after too when ``SECOND_NEIGHBOUR_SIDE`` is "both"."""
    prev = tuning.NEIGHBOUR_SHARE
    if tuning.ANSWER_SHARE and (pos[0], pos[1] - 1) in asks:
        prev *= 1 + tuning.ANSWER_SHARE
    near = ((-1, prev), (1, tuning.NEXT_SHARE))
    if not tuning.SECOND_NEIGHBOUR_SHARE:
        return near
    far = (-2,) if tuning.SECOND_NEIGHBOUR_SIDE == "after" else (-2, 2)
    if tuning.SECOND_NEIGHBOUR_ASKS:
        far = tuple(d for d in far if (pos[0], pos[1] + d // 2) in asks)
    return near + tuple((d, tuning.SECOND_NEIGHBOUR_SHARE) for d in far)


def _nicknames(query: str, content_terms: list[Term],
               name_stems: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Capitalised query words that are the start of one speaker's name ("Mel" for Melanie), as
    ``stem -> that name's stems``: a speaker signal, not a word to match (others call her Mel)."""
    capitalised = {w.lower() for w in CAPITALISED.findall(query)}
    out: dict[str, set[str]] = {}
    for t in content_terms:
        if t.is_name or t.feedback or t.surface not in capitalised or len(t.surface) < 3:
            continue
        whose = [stems for name, stems in name_stems.items()
                 if name.lower().startswith(t.surface) and name.lower() != t.surface]
        if len(whose) == 1:
            out[t.stem] = whose[0]
    return out


def _on_named_day(session_date: str | None, days: list[tuple[int | None, date, date]]) -> bool:
    """The session was held inside one of the windows the question names (``query.named_days``)."""
    try:
        held = date.fromisoformat((session_date or "")[:10])
    except ValueError:
        return False
    for year, first, last in days:
        if year is not None:
            if first <= held <= last:
                return True
            continue
        for y in (first.year, last.year):  # a window named without a year, in the session's year
            try:
                if first <= held.replace(year=y) <= last:
                    return True
            except ValueError:  # 29 February in a year without it
                continue
    return False


def diversify(cands: list[Candidate], own: Mapping[tuple[str, int], tuple[float, set[str]]],
              asks: frozenset[tuple[str, int]] = frozenset()) -> list[Candidate]:
    """Greedy order in which a turn keeps only the neighbour share of neighbours not chosen yet
    (``DIVERSIFY``) and loses ``SESSION_SPREAD`` of its score per turn of its session chosen.

    Without it a strong turn drags both its neighbours into the top ranks on its own score,
    crowding out other evidence (most questions have it spread over sessions).
    """
    rest = cands[:24]
    nbs = []
    for c in rest:
        h = c.hit
        assert h is not None
        nbs.append([((h.session_id, h.index + d), share * own.get((h.session_id, h.index + d), (0.0, set()))[0])
                    for d, share in _shares((h.session_id, h.index), asks)])
    chosen: list[Candidate] = []
    taken: set[tuple[str, int]] = set()
    per_session: Counter[str] = Counter()
    alive = list(range(len(rest)))
    while alive:
        best_i, best_s = alive[0], -1.0
        for i in alive:
            inherit = max((v for pos, v in nbs[i] if not (tuning.DIVERSIFY and pos in taken)), default=0.0)
            s = (rest[i].own + inherit) * rest[i].mult
            if tuning.SESSION_SPREAD:
                s *= (1 - tuning.SESSION_SPREAD) ** per_session[rest[i].hit.session_id]  # type: ignore[union-attr]
            if s > best_s:
                best_i, best_s = i, s
        alive.remove(best_i)
        c = rest[best_i]
        chosen.append(c)
        assert c.hit is not None
        taken.add((c.hit.session_id, c.hit.index))
        per_session[c.hit.session_id] += 1
    return chosen + cands[24:]


def fuse(lists: list[list[Candidate]]) -> list[Candidate]:
    """One ranking from the turn list and the memory lists, by weighted reciprocal rank."""
    if len(lists) == 1:
        return lists[0]
    fused: dict[str, Candidate] = {}
    for ranked in lists:
        for rank, c in enumerate(ranked[: tuning.FUSE_DEPTH]):
            kept = fused.get(c.key)
            if kept is None:
                kept = fused[c.key] = c
                c.score = 0.0
            else:
                kept.reasons.extend(r for r in c.reasons if r not in kept.reasons)
            kept.score += c.weight / (tuning.RRF_K + rank + 1)
    # On equal fused rank a memory (distilled, grounded) goes before a raw turn, a surer memory first.
    return sorted(fused.values(), key=lambda c: (-c.score, c.kind != "memory", -_confidence(c)))


def _confidence(c: Candidate) -> float:
    """A memory's confidence (unknown counts as agreed, once stated); 0 for a turn. Only breaks ties."""
    if c.memory is None:
        return 0.0
    return BASE[AGREED] if c.memory.confidence is None else c.memory.confidence


def memories_first(ranked: list[Candidate]) -> list[Candidate]:
    """An extracted memory outranks the verbatim turns it cites (issue 23): it takes the place of the best
    of them when that one ranked higher, and they are left out (the memory says it, grounded in them)."""
    cited: dict[str, int] = {}  # turn id -> the position of the first memory that cites it
    for at, c in enumerate(ranked):
        if c.kind == "memory" and c.memory is not None and c.memory.status == "live":
            for s in c.memory.sources:
                cited.setdefault(s.turn_id, at)
    if not cited:
        return ranked
    place: dict[int, int] = {}  # memory position -> the position of its best-ranked cited turn
    for at, c in enumerate(ranked):
        if c.kind == "turn" and c.hit is not None and c.hit.turn_id in cited:
            place.setdefault(cited[c.hit.turn_id], at)
    order = sorted(range(len(ranked)), key=lambda i: min(i, place.get(i, i)) + (0.5 if i in place else 0.0))
    return [ranked[i] for i in order if not (ranked[i].kind == "turn" and ranked[i].hit is not None
                                            and ranked[i].hit.turn_id in cited)]


_NO_FACTS = TurnFacts(1, 0)  # a turn that grounds no memory


def without_stale_turns(r: Reading, ranked: list[Candidate], wants_change: bool,
                        replied_to: Mapping[str, str] | None = None) -> list[Candidate]:
    """Turns whose facts were all superseded or retracted follow their memories' rule:
    left out, unless the window asks about a change (then kept and flagged).

    ``replied_to`` (a present-tense question: each turn's id -> the id of the turn before it) also
    flags a turn when a memory ranked with it superseded a fact of its own or of the turn it replies
    to: "Congratulations on the new job!" after "my first week at Northwind Labs", once "Maya works
    at Helix Health" replaced "Maya works at Northwind Labs", is not how things stand now.
    """
    ids = [c.hit.turn_id for c in ranked if c.kind == "turn" and c.hit is not None]
    status = r.store.turn_fact_status(r.ns, ids + list((replied_to or {}).values()))
    shown = {c.key for c in ranked if c.kind == "memory"}
    # A turn that matched nothing itself and inherits its score from one left out here only carried that turn's
    # match: out with it ("About three years now" after "I work at Northwind", once "Maya started at Helix Health").
    gone = set() if wants_change else {
        (c.hit.session_id, c.hit.index) for c in ranked if c.kind == "turn" and c.hit is not None
        and status.get(c.key, _NO_FACTS).live == 0 and status.get(c.key, _NO_FACTS).gone > 0}
    kept = []
    for c in ranked:
        facts = status.get(c.key, _NO_FACTS) if c.kind == "turn" else _NO_FACTS
        if gone and not c.own and c.lent_by in gone:
            continue
        if facts.live == 0 and facts.gone > 0:
            if not wants_change:
                continue
            c.stale = True
            c.reasons.append("its facts were later superseded (the question asks about a change)")
        elif replied_to is not None and c.kind == "turn" and not c.stale:
            earlier = status.get(replied_to.get(c.key, ""), _NO_FACTS)
            if (facts.superseded_by | earlier.superseded_by) & shown:
                c.stale = True
                c.reasons.append("superseded for this question: a memory ranked with it replaced what it "
                                 + ("says" if facts.superseded_by & shown else "replies to"))
        kept.append(c)
    return kept


def distinct(ranked: list[Candidate]) -> list[Candidate]:
    """One slot per text: a copy of a text already ranked (the same file captured in several sessions) is dropped.

    Texts are compared case-folded, punctuation and spacing ignored. The best-placed copy is kept;
    among copies ranked equal (identical sessions score alike), the one of the latest session.
    """
    kept: dict[str, int] = {}
    out: list[Candidate] = []
    for c in ranked:
        norm = _NOT_WORD.sub(" ", c.text.casefold()).strip()
        i = kept.get(norm)
        if i is None:
            kept[norm] = len(out)
            out.append(c)
        elif c.score == out[i].score and session_day(c.hit) > session_day(out[i].hit):
            out[i] = c
    return out


def latest_first(ranked: list[Candidate], follow: Mapping[str, list[Candidate]]) -> list[Candidate]:
    """A present-tense question's order: the later turns that follow up the top turns go before all
    of them, the latest first (at most ``RECENCY_PER_ANCHOR`` for each top turn); the earlier turns
    stay, after them, flagged as superseded (``Candidate.stale``): a later turn says what changed.
    Before any top turn, not just the one followed: which of the top turns an answer's reply or its
    question ranks first must not decide whether what changed is seen."""
    ups: list[Candidate] = []
    seen: set[str] = set()
    best = ranked[0].score if ranked else 0.0
    for c in ranked:
        if c.key in follow and not c.stale:
            c.stale = True
            c.reasons.append(f"superseded for this question: a later turn ({session_day(follow[c.key][0].hit)[:10]}) "
                             "follows it up and says what changed")
        later = sorted((f for f in follow.get(c.key, ()) if f.key not in seen),
                       key=lambda f: session_day(f.hit), reverse=True)
        for f in later[: tuning.RECENCY_PER_ANCHOR]:
            ups.append(f)
            seen.add(f.key)
    ups.sort(key=lambda f: session_day(f.hit), reverse=True)
    for f in ups:
        f.score = max(f.score, best)
    return ups + [c for c in ranked if c.key not in seen]
