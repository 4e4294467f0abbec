"""The reflex's scoring and gates: BM25 with neighbours, speakers and 'when', rank fusion, stale turns."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Mapping

from ..models import SearchHit
from ..search import TF_CAP
from . import tuning
from .query import WHEN
from .shapes import Candidate, Reading, Term, session_day

__all__ = ("distinct", "diversify", "fuse", "latest_first", "score_turns", "without_stale_turns")

_NOT_WORD = re.compile(r"[\W_]+")
_TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|last|next|this (morning|week|month|year|weekend)|recently|"
    r"(mon|tues|wednes|thurs|fri|satur|sun)day|weekend|january|february|march|april|may|june|july|august|"
    r"september|october|november|december|(19|20)\d\d|since|years?|months?|weeks?)\b", re.I)


def score_turns(r: Reading, terms: list[Term], content_terms: list[Term], query: str,
                by_pos: Mapping[tuple[str, int], SearchHit]) -> list[Candidate]:
    """The turns of the pool that pass the coverage and relative gates, best first."""
    if not by_pos:
        return []
    pool = list(by_pos.values())
    names = sorted({h.name for h in pool if h.name})
    analysed = r.store.analyze([h.content for h in pool] + names)
    name_stems = {name: set(toks) for name, toks in zip(names, analysed[len(pool):])}
    weights = {t.stem: t.weight for t in content_terms}
    speakers = {t.stem for t in terms if t.is_name}
    when_q = bool(WHEN.search(query))
    lengths = [len(toks) for toks in analysed[: len(pool)]]
    # The median, not the mean: one long paste in the pool must not lengthen the norm of every turn.
    avg = float(statistics.median(lengths)) if lengths else 1.0
    tfs = [Counter(toks) for toks in analysed[: len(pool)]]
    norms = [tuning.K1 * (1 - tuning.B + tuning.B * n / max(avg, 1.0)) for n in lengths]

    def bm25(w: Mapping[str, float]) -> list[float]:
        # A term counts at most TF_CAP times in a turn (as in the stores' ranking): a long paste
        # that repeats the query's words cannot buy back what length normalisation takes off it.
        return [sum(wt * min(tf[s], TF_CAP) * (tuning.K1 + 1) / (min(tf[s], TF_CAP) + nm)
                    for s, wt in w.items() if tf[s])
                for tf, nm in zip(tfs, norms)]

    scores = bm25(weights)
    own: dict[tuple[str, int], tuple[float, set[str]]] = {
        (h.session_id, h.index): (sc, {s for s in weights if tf[s]}) for h, tf, sc in zip(pool, tfs, scores)
    }
    # Terms the index has never seen count too: a query mostly about unknown things is unrelated.
    total = sum(t.weight for t in terms if not (tuning.NAMES_AS_SPEAKERS and t.is_name) and not t.context) or 1.0
    speaker_weight = sum(t.weight for t in terms if t.is_name)
    cands = []
    for key, h in by_pos.items():
        score, matched = own[key]
        best_nb, nb_matched = 0.0, set()
        for d, share in ((-1, tuning.NEIGHBOUR_SHARE), (1, tuning.NEXT_SHARE)):
            nb = own.get((h.session_id, h.index + d))
            if nb:
                nb_matched = nb_matched | nb[1]
                best_nb = max(best_nb, share * nb[0])
        ctx = score + best_nb
        mult = 1.0
        says_when = when_q and bool(_TIME_WORDS.search(h.content))
        if says_when:
            mult *= 1 + tuning.WHEN_BOOST
        spoken = bool(h.name and speakers & name_stems.get(h.name, set()))
        if spoken:
            mult *= 1 + tuning.SPEAKER_BOOST
        ctx *= mult
        covered = sum(weights[s] for s in matched | nb_matched) + (speaker_weight if spoken else 0.0)
        if ctx <= 0 or covered / (total + (speaker_weight if spoken else 0.0)) < tuning.MIN_COVERAGE:
            continue
        # Reasons are worded only for the few candidates that reach the block (see render.reasons).
        cands.append(Candidate(key=h.turn_id, kind="turn", text=h.content, hit=h, score=ctx, own=score,
                               matched=matched, mult=mult, nb_only=(nb_matched - matched) if best_nb else set(),
                               says_when=says_when, spoken=spoken))
    cands.sort(key=lambda c: (-c.score, c.hit.session_id if c.hit else "", c.hit.index if c.hit else 0))
    if cands and tuning.RELATIVE_GATE:
        floor = cands[0].score * tuning.RELATIVE_GATE
        cands = [c for c in cands if c.score >= floor]
    return diversify(cands, own) if tuning.DIVERSIFY else cands


def diversify(cands: list[Candidate], own: Mapping[tuple[str, int], tuple[float, set[str]]]) -> list[Candidate]:
    """Greedy order in which a turn keeps only the neighbour share of neighbours not chosen yet.

    Without it a strong turn drags both its neighbours into the top ranks on its own score,
    crowding out other evidence (most questions have it spread over sessions).
    """
    rest = cands[:24]
    nbs = []
    for c in rest:
        h = c.hit
        assert h is not None
        nbs.append([((h.session_id, h.index + d), share * own.get((h.session_id, h.index + d), (0.0, set()))[0])
                    for d, share in ((-1, tuning.NEIGHBOUR_SHARE), (1, tuning.NEXT_SHARE))])
    chosen: list[Candidate] = []
    taken: set[tuple[str, int]] = set()
    alive = list(range(len(rest)))
    while alive:
        best_i, best_s = alive[0], -1.0
        for i in alive:
            inherit = max((v for pos, v in nbs[i] if pos not in taken), default=0.0)
            s = (rest[i].own + inherit) * rest[i].mult
            if s > best_s:
                best_i, best_s = i, s
        alive.remove(best_i)
        c = rest[best_i]
        chosen.append(c)
        assert c.hit is not None
        taken.add((c.hit.session_id, c.hit.index))
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
    # On equal fused rank a memory (distilled, grounded) goes before a raw turn.
    return sorted(fused.values(), key=lambda c: (-c.score, c.kind != "memory"))


def without_stale_turns(r: Reading, ranked: list[Candidate], wants_change: bool) -> list[Candidate]:
    """Turns whose facts were all superseded or retracted follow their memories' rule:
    left out, unless the window asks about a change (then kept and flagged)."""
    ids = [c.hit.turn_id for c in ranked if c.kind == "turn" and c.hit is not None]
    status = r.store.turn_fact_status(r.ns, ids)
    kept = []
    for c in ranked:
        live, gone = status.get(c.key, (1, 0)) if c.kind == "turn" else (1, 0)
        if live == 0 and gone > 0:
            if not wants_change:
                continue
            c.stale = True
            c.reasons.append("its facts were later superseded (the question asks about a change)")
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
    """A present-tense question's order: each top turn is preceded by the later turns that follow it up,
    the latest first (at most ``RECENCY_PER_ANCHOR`` each); the earlier turn stays, after them."""
    out: list[Candidate] = []
    placed: set[str] = set()
    for c in ranked:
        later = sorted((f for f in follow.get(c.key, ()) if f.key not in placed),
                       key=lambda f: session_day(f.hit), reverse=True)
        for f in later[: tuning.RECENCY_PER_ANCHOR]:
            f.score = max(f.score, c.score)
            out.append(f)
            placed.add(f.key)
        if c.key not in placed:
            out.append(c)
            placed.add(c.key)
    return out
