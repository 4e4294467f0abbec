"""Pseudo-relevance feedback: terms of the top-ranked turns added to the query, weighted and bounded (RM3-style)."""

from __future__ import annotations

import math
from collections import Counter

from ..search import STOP_WORDS, query_terms
from . import tuning
from .shapes import Candidate, Reading, Term

__all__ = ("feedback_terms",)


def feedback_terms(r: Reading, ranked: list[Candidate], terms: list[Term]) -> list[Term]:
    """Up to ``PRF_TERMS`` words the top ``PRF_DOCS`` turns share, as extra query terms.

    A word's mass is its relevance-model probability (its share of each top turn's words,
    weighted by that turn's share of the top scores) times its IDF; words no other turn holds,
    words in more than ``MAX_DF_SHARE`` of the turns, speakers' names and the query's own terms
    are left out. The heaviest word gets ``PRF_WEIGHT`` of the query's strongest term's weight,
    the others in proportion. Such terms widen the pool and add to the score, but never count
    toward the coverage gate: a turn must still match the question itself.
    """
    top = [c for c in ranked[: tuning.PRF_DOCS] if c.kind == "turn" and c.score > 0]
    own = [t for t in terms if not t.context]
    if tuning.PRF_TERMS <= 0 or not top or not own:
        return []
    words = [[w for w in query_terms(c.text) if w not in STOP_WORDS and not w.isdigit() and len(w) > 2] for c in top]
    vocab = sorted({w for ws in words for w in ws})
    if not vocab:
        return []
    stem_of = {w: st[0] for w, st in zip(vocab, r.store.analyze(vocab)) if len(st) == 1}
    exclude = {t.stem for t in terms}
    total = sum(c.score for c in top)
    mass: Counter[str] = Counter()
    surface: dict[str, str] = {}
    for c, ws in zip(top, words):
        stems = [stem_of[w] for w in ws if w in stem_of and stem_of[w] not in exclude]
        for w in ws:
            if w in stem_of:
                surface.setdefault(stem_of[w], w)
        for st, n in Counter(stems).items():
            mass[st] += (c.score / total) * n / max(len(ws), 1)
    if not mass:
        return []
    # Counting a word's turns walks its postings: only the likeliest few are counted.
    likely = [st for st, _ in mass.most_common(4 * tuning.PRF_TERMS)]
    n, stats = r.store.term_stats(r.ns, likely)
    r.tick()
    common = max(tuning.COMMON_DF_FLOOR, int(n * tuning.MAX_DF_SHARE))
    scored = []
    for st in likely:
        df, df_name = stats.get(st, (0, 0))
        if 2 <= df <= common and not df_name:
            scored.append((mass[st] * math.log(1 + (n - df + 0.5) / (df + 0.5)), st, df))
    scored.sort(key=lambda x: (-x[0], x[1]))
    chosen = scored[: tuning.PRF_TERMS]
    if not chosen:
        return []
    top_weight = max(t.weight for t in own) * tuning.PRF_WEIGHT
    return [Term(surface[st], st, top_weight * m / chosen[0][0], df, context=True, feedback=True)
            for m, st, df in chosen]
