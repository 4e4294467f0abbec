"""The reflex's candidates: turns by full text with their neighbours, memories by text, entity and one hop."""

from __future__ import annotations

from ..models import SearchHit
from . import tuning
from .query import entity_names, surface_of
from .shapes import Candidate, Reading, Term

__all__ = ("memory_candidates", "turn_pool")


def turn_pool(r: Reading, terms: list[Term]) -> tuple[list[Term], dict[tuple[str, int], SearchHit]]:
    """The content terms, and the turns they find with the neighbouring turns of each, by (session, index).

    Empty when no term is worth a full-text query or it finds nothing.
    """
    content_terms = [t for t in terms
                     if (t.df > 0 or not r.n_docs) and not (tuning.NAMES_AS_SPEAKERS and t.is_name)]
    if not content_terms:
        return content_terms, {}
    common = max(1, int(r.n_docs * tuning.MAX_DF_SHARE)) if r.n_docs else None
    picked = [t for t in content_terms if common is None or t.df <= common] or content_terms
    hits = r.store.candidate_turns(r.ns, {t.surface: t.weight for t in picked[: tuning.MAX_QUERY_TERMS]},
                                   k=tuning.CANDIDATES, per_term=tuning.PER_TERM)
    r.tick()
    if not hits:
        return content_terms, {}
    by_pos = {(h.session_id, h.index): h for h in hits}
    wanted = [(h.session_id, h.index + d) for h in hits for d in (-1, 1)]
    for h in r.store.turns_at(r.ns, [p for p in wanted if p not in by_pos and p[1] >= 0]):
        by_pos[(h.session_id, h.index)] = h
    r.tick()
    return content_terms, by_pos


def memory_candidates(r: Reading, terms: list[Term], query: str, wants_change: bool) -> list[list[Candidate]]:
    """Memories by content, search keys and entity names, then one hop through their entities."""
    store = r.store
    weights = {t.stem: t.weight for t in terms}
    total = sum(weights.values()) or 1.0
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
        hop = [m for m, _ in store.candidate_memories(r.ns, {e: 1.0 for e in hop_names}, k=tuning.CANDIDATES // 8,
                                                      per_term=tuning.PER_TERM // 4)]
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
