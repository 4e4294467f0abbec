"""The reflex's candidates: turns by full text with their neighbours, memories by text, entity and one hop."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ..models import SearchHit
from ..search import STOP_WORDS, query_terms
from ..store.base import near_offsets
from . import tuning
from .query import CAPITALISED, entity_names, surface_of
from .slots import about_someone_else, asks_about_self, says_kind
from .shapes import Candidate, Reading, Term, session_day

# A turn that says things changed: what a later turn must say to outrank an earlier one.
_CHANGED = re.compile(
    r"\b(now|currently|these days|nowadays|anymore|any more|no longer|used to|left|quit|moved|switched|"
    r"started|joined|changed|change of plans?|stopped|instead|new|since|updated|restored|re-?enabled|reverted|"
    r"replaced|upgraded|bumped|from now on|going forward|"
    # ... and the words of a life's changes: a partner's, a home's, a job's, a school's
    r"(?:broke|broken|breaking|split|splitting) up|called it off|divorced|got (?:married|engaged)|relocated|"
    r"moving (?:to|into|out)|hired|promoted|resigned|laid off|graduated|dropped out|transferred|enrolled)\b", re.I)

#: A question that weighs alternatives: "Do I drink tea or coffee now?"
_ALTERNATIVES = re.compile(r"\b\w+ or \w+\b", re.I)
def _left(text: str, surfaces: list[str]) -> bool:
    """``text`` says it left what one of ``surfaces`` names ("I left Globex", "quit Globex", "moved from Lisbon")."""
    return any(re.search(rf"\b(?:left|quit|quitting|leaving|moved (?:away )?from|moved out of|no longer (?:at|with|in))"
                         rf"\s+(?:the\s+|my\s+|our\s+)?{re.escape(s)}\b", text, re.I) for s in surfaces)


__all__ = ("hop_pool", "hop_terms", "instance_pool", "later_on_topic", "memory_candidates", "searched_terms", "topic_terms", "turn_pool",
           "widen_pool")


def _said(hits: list[SearchHit]) -> list[SearchHit]:
    """The turns said in a conversation: never a system turn (instructions, or the host's own text such
    as a compaction summary, which retells the session in a model's words)."""
    return [h for h in hits if h.role != "system"]


def turn_pool(r: Reading, terms: list[Term], extra: list[Term] = ()
              ) -> tuple[list[Term], dict[tuple[str, int], SearchHit]]:
    """The content terms, and the turns they find with the neighbouring turns of each, by (session, index).

    With ``extra`` terms (the words of the kind of fact a present-tense question asks about), the
    pool also holds what ``widen_pool`` would add for them, read in the same store call. Empty
    when no term is worth a full-text query or it finds nothing.
    """
    content_terms = [t for t in terms
                     if (t.df > 0 or not r.n_docs) and not (tuning.NAMES_AS_SPEAKERS and t.is_name) and not t.date]
    searched = searched_terms(r, content_terms) if content_terms else []
    return content_terms, _with_neighbours(r, [searched, searched + list(extra)] if extra else [searched], {})


def searched_terms(r: Reading, content_terms: list[Term]) -> list[Term]:
    """The terms the full-text query searches: the strongest ``MAX_QUERY_TERMS`` of those not too common (in more
    than ``MAX_DF_SHARE`` of the turns; in a small store, past ``COMMON_DF_FLOOR`` turns, as the other reads)."""
    common = max(tuning.COMMON_DF_FLOOR, int(r.n_docs * tuning.MAX_DF_SHARE)) if r.n_docs else None
    picked = [t for t in content_terms if common is None or t.df <= common] or content_terms
    return picked[: tuning.MAX_QUERY_TERMS]


def widen_pool(r: Reading, content_terms: list[Term], extra: list[Term],
               pool: dict[tuple[str, int], SearchHit]) -> dict[tuple[str, int], SearchHit]:
    """The pool with the turns (and their neighbours) the full-text query finds with ``extra`` added."""
    return _with_neighbours(r, [searched_terms(r, content_terms) + extra], dict(pool))


def instance_pool(r: Reading, instances: list[Term],
                  pool: dict[tuple[str, int], SearchHit]) -> dict[tuple[str, int], SearchHit]:
    """The pool with the turns (and their neighbours) that name the instances (``instances.instance_terms``),
    read apart from the question's words, so that turns matching those do not crowd them out."""
    return _with_neighbours(r, [instances], dict(pool), k=tuning.INSTANCE_CANDIDATES, per_term=tuning.PER_TERM // 4)


def hop_terms(r: Reading, turns: list[Candidate], terms: list[Term]) -> list[Term]:
    """A second hop: the distinctive words (names first) of the first pass's top ``SECOND_HOP_DOCS`` turns that the
    question did not say, as extra terms at ``SECOND_HOP`` of the lesser of their IDF and the question's
    heaviest word (they widen the pool and add to the score, never count toward the coverage gate)."""
    top = [c for c in turns[: tuning.SECOND_HOP_DOCS] if c.kind == "turn" and c.score > 0]
    own = [t for t in terms if not t.context]
    if tuning.SECOND_HOP <= 0 or not top or not own:
        return []
    topic = topic_terms(r, [c.text for c in top], {t.stem for t in terms}, tuning.SECOND_HOP_TERMS)
    heaviest = max(t.weight for t in own)
    return [Term(surface, stem, tuning.SECOND_HOP * min(idf, heaviest), 0, context=True, feedback=True)
            for stem, (surface, idf) in topic.items()]


def hop_pool(r: Reading, extra: list[Term],
             pool: dict[tuple[str, int], SearchHit]) -> dict[tuple[str, int], SearchHit]:
    """The pool with the turns (and their neighbours) the second hop's words find, in a read of their own."""
    return _with_neighbours(r, [extra], dict(pool), k=tuning.SECOND_HOP_CANDIDATES, per_term=tuning.PER_TERM // 4)


def _with_neighbours(r: Reading, searched: list[list[Term]], by_pos: dict[tuple[str, int], SearchHit],
                     k: int | None = None, per_term: int | None = None) -> dict[tuple[str, int], SearchHit]:
    """``by_pos`` with each list's candidate turns and their neighbours added, list by list (with
    ``SECOND_NEIGHBOUR_SHARE`` on, the turn two after each too: ``_near_offsets``)."""
    searched = [s for s in searched if s]
    if not searched:
        return by_pos
    offsets = _near_offsets()
    each, near = r.store.candidate_turns_near_each(r.ns, [{t.surface: t.weight for t in s} for s in searched],
                                                   k=tuning.CANDIDATES if k is None else k,
                                                   per_term=tuning.PER_TERM if per_term is None else per_term,
                                                   known=set(by_pos), reach=offsets)
    r.tick()
    # Every weighting's candidates stand beside the neighbours read: a store reads no row twice.
    at = {(h.session_id, h.index): h for h in _said([*near, *(h for hits in each for h in hits)])}
    for hits in map(_said, each):
        for h in hits:
            by_pos.setdefault((h.session_id, h.index), h)
        wanted = [(h.session_id, h.index + d) for h in hits for d in offsets
                  if abs(d) == 1 or _across_a_question(h, d, at, by_pos)]
        for p in dict.fromkeys(p for p in wanted if p not in by_pos and p in at):
            by_pos[p] = at[p]
    return by_pos


def _near_offsets() -> tuple[int, ...]:
    """Where the turns read around each candidate are: next to it, and with ``SECOND_NEIGHBOUR_SHARE`` two
    after it (``SECOND_NEIGHBOUR_SIDE`` "after", as shipped: on LoCoMo's train conversations that kept the gain
    of both sides, reading half the rows) or two before and after."""
    if not tuning.SECOND_NEIGHBOUR_SHARE:
        return near_offsets(1)
    return (-1, 1, 2) if tuning.SECOND_NEIGHBOUR_SIDE == "after" else near_offsets(2)


def _across_a_question(h: SearchHit, d: int, at: Mapping[tuple[str, int], SearchHit],
                       by_pos: Mapping[tuple[str, int], SearchHit]) -> bool:
    """The turn ``d`` (two) away from ``h`` is wanted: always, or with ``SECOND_NEIGHBOUR_ASKS`` only when the
    turn between asks (the other speaker's question, and this speaker's answer to it)."""
    if not tuning.SECOND_NEIGHBOUR_ASKS:
        return True
    pos = (h.session_id, h.index + d // 2)
    between = by_pos.get(pos) or at.get(pos)
    return between is not None and "?" in between.content


def memory_candidates(r: Reading, terms: list[Term], query: str, wants_change: bool) -> list[list[Candidate]]:
    """Memories by content, search keys and entity names, then one hop through their entities."""
    store = r.store
    weights = {t.stem: t.weight for t in terms}
    # The other words of a kind the question names (slots.expand: "job", "employer" for "where do I work?") are ways
    # to say what it asks, not more of it: a memory that says one covers its share, and the rest are not owed.
    total = sum(t.weight for t in terms if not (t.context and t.stem in r.slots)) or 1.0
    names = entity_names(query, terms)
    search = {t.surface: t.weight for t in terms[: tuning.MAX_QUERY_TERMS]}
    for name in names:
        search.setdefault(name.lower(), max(weights.values(), default=1.0))
    try:
        found = store.candidate_memories(r.ns, search, k=tuning.CANDIDATES // 2, per_term=tuning.PER_TERM,
                                         include_superseded=wants_change)
    except NotImplementedError:  # a backend without extraction
        return []
    r.tick()
    if not found:
        return []
    seeds = {n.lower() for n in names}
    hop_names = list(dict.fromkeys(e for m, _ in found[:3] for e in m.entities if e.lower() not in seeds))[:4]
    hop = []
    if hop_names:
        # Entity names: in every memory about them, so walked newest first where the store can.
        hop = [m for m, _ in store.candidate_memories(r.ns, {e: 1.0 for e in hop_names}, k=tuning.CANDIDATES // 8,
                                                      per_term=tuning.PER_TERM // 4, newest_first=True)]
        r.tick()
    every = {m.id: m for m in [m for m, _ in found] + hop}
    analysed = dict(zip(every, store.analyze([" ".join([m.content, *m.search_keys, *m.entities])
                                             for m in every.values()])))
    text_list: list[Candidate] = []
    for m, _ in found:
        if m.status == "deleted" or (m.status == "superseded" and not wants_change):
            continue
        matched = set(analysed[m.id]) & set(weights)
        if sum(weights[s] for s in matched) / total < tuning.MIN_COVERAGE:
            continue
        reason = "memory matched " + ", ".join(repr(surface_of(terms, s)) for s in sorted(matched))
        if m.status == "superseded":
            reason += " (superseded: the question asks about a change)"
        text_list.append(Candidate(key=m.id, kind="memory", text=m.content, memory=m, matched=matched,
                                   reasons=[reason]))
    if not text_list:
        return []
    shown = {c.key for c in text_list}
    hop_list = [
        Candidate(key=m.id, kind="memory", text=m.content, memory=m, weight=tuning.HOP_WEIGHT,
                  reasons=["one hop from " + ", ".join(e for e in m.entities if e in hop_names)])
        for m in hop if m.status == "live" and m.id not in shown
    ]
    return [text_list, hop_list]


def topic_terms(r: Reading, texts: list[str], exclude: set[str], limit: int) -> dict[str, tuple[str, float]]:
    """``stem -> (surface, idf)`` of the texts' most distinctive words that other turns hold too.

    A word no other turn holds cannot lead anywhere, and a common one leads everywhere: kept
    are words in at least 2 turns and at most ``MAX_DF_SHARE`` of them (in a small store, at
    most ``COMMON_DF_FLOOR``), rarest first. Counting a word's turns costs a walk of its
    postings, so only ``TOPIC_WORDS`` words are counted: capitalised ones (names) first, then
    the longest.
    """
    capitalised = {w.lower() for t in texts for w in CAPITALISED.findall(t)}
    words = sorted({w for t in texts for w in query_terms(t) if w not in STOP_WORDS and not w.isdigit()},
                   key=lambda w: (w not in capitalised, -len(w), w))
    if not words:
        return {}
    surface: dict[str, str] = {}
    for w, st in zip(words, r.store.analyze(words)):
        if len(st) == 1 and st[0] not in exclude and st[0] not in surface and len(surface) < tuning.TOPIC_WORDS:
            surface[st[0]] = w
    n, stats = r.store.term_stats(r.ns, list(surface))
    r.tick()
    common = max(tuning.COMMON_DF_FLOOR, int(n * tuning.MAX_DF_SHARE))
    kept = sorted(((stem, stats[stem][0]) for stem in surface if stem in stats and 2 <= stats[stem][0] <= common),
                  key=lambda x: (x[1], x[0]))[:limit]
    return {stem: (surface[stem], math.log(1 + (n - df + 0.5) / (df + 0.5))) for stem, df in kept}


def later_on_topic(r: Reading, ranked: list[Candidate], terms: list[Term],
                   pool: Mapping[tuple[str, int], SearchHit], query: str = "") -> dict[str, list[Candidate]]:
    """For a present-tense question: turns of later sessions that follow up the top turns, by the turn they follow.

    A later turn follows up an earlier top turn when it says something changed (now, left, moved,
    started, no longer...) and shares with it all the query words it matched, or at least
    ``RECENCY_MIN_SHARED`` of those and the distinctive words of the turn and its neighbours
    ("I left Northwind Labs, I'm now at Helix Health" follows "Congratulations on the new job!",
    the reply to "my first week at Northwind Labs"). One shared word is enough when the later turn
    says it left what that word names ("I left Globex", "quit Globex", "moved from Lisbon"), or, for a
    question weighing alternatives ("tea or coffee?"), when it says one of the query words the top turn
    matched ("I have switched to coffee"). A turn about someone else ("My sister Priya lives in
    Toronto") neither is followed up nor follows one up for a question about the asker ("Where do I live?"). Later turns
    come from the ranking and from one more full-text read of those distinctive words. Undated turns
    are never compared.
    """
    mine = asks_about_self(query)
    anchors = [(c, c.hit) for c in ranked[: tuning.RECENCY_ANCHORS]
               if c.kind == "turn" and c.hit is not None and c.hit.session_date
               and not (mine and about_someone_else(c.text))]
    if not anchors:
        return {}
    texts = [" ".join(n.content for d in (-1, 0, 1) if (n := pool.get((h.session_id, h.index + d))) is not None)
             or c.text for c, h in anchors]
    topic = topic_terms(r, texts, {t.stem for t in terms}, tuning.RECENCY_TERMS)
    later = {c.key: c.hit for c in ranked[: tuning.CANDIDATES]
             if c.kind == "turn" and c.hit is not None and c.hit.session_date}
    if r.slots:
        # The pool's turns too when the question names a kind of fact: one read for that kind's words alone
        # ("I transferred to Edinburgh University" for "where do I study now?") matched too little to be ranked.
        for h in _said(list(pool.values())):
            if h.session_date:
                later.setdefault(h.turn_id, h)
    if topic:
        # The newest matches of each word are walked first, and later turns are what is sought.
        for h in _said(r.store.candidate_turns(r.ns, {sf: w for sf, w in topic.values()}, k=tuning.CANDIDATES,
                                              per_term=tuning.RECENCY_PER_TERM)):
            later.setdefault(h.turn_id, h)
        r.tick()
    # ... and, for a question about the asker, what someone else did since ("Ruth has moved") changes nothing.
    hits = [h for h in later.values() if _CHANGED.search(h.content) and not (mine and about_someone_else(h.content))]
    if not hits:
        return {}
    # Words of one kind of fact the question names (slots.expand) count as one word: "job" follows up "work", and
    # so does a phrase that says it ("Sam and I broke up" follows up "I'm dating Sam").
    kinds = set(r.slots.values())
    all_texts = texts + [h.content for h in hits]
    analysed = [{r.slots.get(w, w) for w in st} | says_kind(text, kinds)
                for st, text in zip(r.store.analyze(all_texts), all_texts)]
    topic = {r.slots.get(s, s): v for s, v in topic.items()}
    own = [(c, h, {r.slots.get(w, w) for w in c.matched} | (st & set(topic))) for (c, h), st in zip(anchors, analysed)]
    by_key = {c.key: c for c in ranked}
    alternatives = bool(_ALTERNATIVES.search(query))
    follow: dict[str, list[Candidate]] = {}
    made: dict[str, Candidate] = {}
    for h, st in zip(hits, analysed[len(anchors):]):
        words = set(st)
        for a, a_hit, a_words in own:
            shared = a_words & words
            if h.turn_id == a.key or session_day(h) <= session_day(a_hit):
                continue
            matched = {r.slots.get(w, w) for w in a.matched}
            if not (matched and matched <= words) and len(shared) < tuning.RECENCY_MIN_SHARED and not (
                    _left(h.content, [topic[w][0] for w in shared if w in topic])
                    or (alternatives and matched & words)):
                continue
            said = ", ".join(repr(topic[s][0] if s in topic else surface_of(terms, s)) for s in sorted(shared))
            c = by_key.get(h.turn_id) or made.get(h.turn_id) or Candidate(key=h.turn_id, kind="turn", text=h.content,
                                                                          hit=h)
            if c.key not in made:  # it may follow up several top turns: each is flagged, it says so once
                made[c.key] = c
                c.reasons.append(f"said later than the turn of {session_day(a_hit)[:10]} it follows up "
                                 f"(shares {said}) and says what changed; the question asks how things are now")
            follow.setdefault(a.key, []).append(c)
    return follow
