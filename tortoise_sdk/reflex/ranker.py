"""A learnt order for the reflex's turn candidates: a linear model over the features scoring computes.

The weights ship as data (``ranker.json`` beside this module), trained by
``benchmarks/train_reflex_ranker.py`` on LoCoMo (pairwise logistic loss, deterministic, so a rerun
writes the same file). Scoring a candidate is one dot product: it costs microseconds a block.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from functools import cache
from importlib import resources

from . import tuning
from .shapes import Candidate

__all__ = ("FEATURES", "RECORD", "features", "gathers", "listing", "rerank", "weights")

#: The features, in the order of the weights. Scores are shares of the query's best, so they read
#: alike whatever a query's terms weigh.
FEATURES = (
    "own",            # the turn's own BM25, as a share of the pool's best
    "neighbour",      # what it inherits of its neighbours (NEIGHBOUR_SHARE, NEXT_SHARE, ANSWER_SHARE), same scale
    "score",          # the hand-set score (BM25 with neighbours, times the boosts), as a share of the best
    "rank",           # 1 / (1 + its rank by that score)
    "coverage",       # share of the query's weight the turn's own words match
    "coverage_nb",    # ... with its neighbours' words, the speaker and the date
    "spoken",         # spoken by a person the question names
    "on_day",         # said on a day the question names
    "says_when",      # a 'when' question, and the turn says when
    "session",        # share of the query's weight its session's turns cover between them
    "answers",        # the turn before it asks a question that matched
    "asks",           # the turn itself asks
    "length",         # log of its length in index tokens
    "direct",         # its own words match (not only a neighbour's)
    "key_term",       # the weight of its heaviest own matched word, as a share of the query's heaviest
    "time_words",     # it says when (a date, a weekday, 'last week'), whatever the question
    "named",          # log of 1 + the specific things it names (capitalised inside a sentence, quoted), not the speakers
    # A question that gathers (``gathers``: several things, or what two people have in common) wants turns from
    # different days, each matching part of it: the first three again for such a question only, so it
    # weighs a turn's own match, its neighbours' and its score its own way (0 for any other question).
    "gathers_own",
    "gathers_neighbour",
    "gathers_score",
    "gathers_named",  # ... and the things it names, its own way: "What video games does Nate play?" wants "Valorant"
)

_GATHERS = re.compile(r"\b(both|how many|in common)\b", re.I)
_LISTING = re.compile(r"^\W*(what|which)\s+(\w+\s+){0,3}?\w+s\s+(has|have|does|do|did)\b|"
                      r"\b(what|which) (kinds?|types?|sorts?) of\b", re.I)

#: When a list, ``rerank`` appends ``(keys, rows)`` of each scoring pass (the training script reads them).
RECORD: list[tuple[list[str], list[list[float]]]] | None = None


@cache
def weights() -> tuple[float, ...] | None:
    """The shipped weights in ``FEATURES`` order, or None when the file names other features."""
    data = json.loads(resources.files(__package__).joinpath("ranker.json").read_text("utf-8"))
    w = data.get("weights", {})
    if set(w) != set(FEATURES):
        return None
    return tuple(float(w[f]) for f in FEATURES)


def features(raw: Sequence[Mapping[str, Any]], gathers: bool = False) -> list[list[float]]:
    """Each candidate's feature row from its raw values (``own``, ``neighbour``, ``score``, ``coverage``...);
    ``gathers`` says the question gathers (the ``gathers_*`` features read 0 otherwise)."""
    if not raw:
        return []
    best_own = max(max(x["own"] for x in raw), 1e-9)
    best = max(max(x["score"] for x in raw), 1e-9)
    rank = {v: r for r, v in enumerate(sorted({x["score"] for x in raw}, reverse=True))}  # equal scores rank alike
    g = float(gathers and tuning.RANKER_GATHERS)
    rows = []
    for x in raw:
        own, nb, score = x["own"] / best_own, x["neighbour"] / best_own, x["score"] / best
        named = math.log1p(x["named"])
        rows.append([own, nb, score, 1 / (1 + rank[x["score"]]), x["coverage"], x["coverage_nb"], x["spoken"],
                     x["on_day"], x["says_when"], x["session"], x["answers"], x["asks"], math.log1p(x["length"]),
                     float(x["own"] > 0), x["key_term"], x["time_words"], named, g * own, g * nb, g * score, g * named])
    return rows


def listing(query: str) -> bool:
    """The question asks for several things of a kind ("What writing classes has Maria taken?")."""
    return bool(_LISTING.search(query))


def gathers(query: str) -> bool:
    """The question gathers: it lists (``listing``), counts ("how many times...") or asks what two people
    have in common ("What do Jon and Gina both like?"), so its answer is spread over several turns.
    ("share" is not a sign: most questions use it as a verb, "when did Joanna share her book?")"""
    return listing(query) or bool(_GATHERS.search(query))


def rerank(cands: list[Candidate], raw: Sequence[Mapping[str, Any]],
           then: Callable[[list[Candidate]], list[Candidate]], spread: bool = False,
           gathers: bool = False) -> list[Candidate]:
    """``cands`` (best first by the hand-set score) in the learnt order when ``tuning.RANKER`` is on and
    the weights load; otherwise ``then(cands)``, the hand-set order's next step. With ``spread`` (a
    listing question) a turn loses ``LIST_SPREAD`` of its weight per turn of its session placed before
    it: the things a listing question asks for were said on different days. With ``gathers`` (the
    question gathers, see ``gathers()``) the ``gathers_*`` features count; otherwise they read 0."""
    w = weights() if tuning.RANKER or RECORD is not None else None
    rows = features(raw, gathers) if w is not None or RECORD is not None else []
    if RECORD is not None:
        RECORD.append(([(c.hit.external_id if c.hit else None) or c.key for c in cands], rows))
    if not tuning.RANKER or w is None or not cands:
        return then(cands)
    learnt = [_dot(w, row) for row in rows]
    order = sorted(range(len(cands)), key=lambda i: (-learnt[i], i))
    if tuning.DIVERSIFY or (spread and tuning.LIST_SPREAD):
        order = _greedy(order, learnt, _alone(w, rows, raw, order[:_PLACED]), raw, cands, spread)
    out = [cands[i] for i in order]
    # Later steps compare scores: they keep the new order on the old scale, and equal learnt scores
    # stay equal (copies of one text rank alike, and ``distinct`` keeps the latest).
    top = cands[0].score
    dense = {v: rank for rank, v in enumerate(sorted(set(learnt), reverse=True))}
    for i in order:
        cands[i].score = top / (1 + dense[learnt[i]])
    return out


#: How many of the learnt order's first candidates ``_greedy`` places one at a time.
_PLACED = 24


def _dot(w: Sequence[float], row: Sequence[float]) -> float:
    """``sum(a * b for a, b in zip(w, row))``, added in the same order (so the same to the bit), faster."""
    return sum(map(operator.mul, w, row))


def _alone(w: Sequence[float], rows: list[list[float]], raw: Sequence[Mapping[str, Any]],
           which: Sequence[int]) -> dict[int, float]:
    """The learnt score of each candidate in ``which`` (those ``_greedy`` places) without what its best
    neighbour gives it (that neighbour placed already)."""
    i_nb, i_score, i_cov, i_cov_nb, i_g_nb, i_g_score = (FEATURES.index(f) for f in (
        "neighbour", "score", "coverage", "coverage_nb", "gathers_neighbour", "gathers_score"))
    out = {}
    for i in which:
        row, x = rows[i], raw[i]
        alone = list(row)
        alone[i_nb] = alone[i_g_nb] = 0.0
        alone[i_score] = row[i_score] * x["own"] * x["mult"] / x["score"] if x["score"] else 0.0
        alone[i_g_score] = alone[i_score] if row[i_g_score] else 0.0
        alone[i_cov_nb] = row[i_cov]
        out[i] = _dot(w, alone)
    return out


def _greedy(order: list[int], learnt: list[float], alone: Mapping[int, float], raw: Sequence[Mapping[str, Any]],
            cands: list[Candidate], spread: bool) -> list[int]:
    """The first ``_PLACED`` placed one at a time: a turn whose best neighbour is placed already counts without it
    (``DIVERSIFY``, as ``scoring.diversify`` does), and for a listing question a turn's weight (``exp`` of
    its learnt score) loses ``LIST_SPREAD`` per turn of its session placed before it."""
    head, tail = order[:_PLACED], order[_PLACED:]
    taken: set[Any] = set()
    per_session: dict[str, int] = {}
    out: list[int] = []
    while head:
        def value(i: int) -> float:
            v = alone[i] if tuning.DIVERSIFY and raw[i]["from"] in taken else learnt[i]
            if spread and tuning.LIST_SPREAD:
                v += per_session.get(_session(cands[i]), 0) * math.log(max(1 - tuning.LIST_SPREAD, 1e-9))
            return v
        best = max(head, key=lambda i: (value(i), -i))
        head.remove(best)
        out.append(best)
        taken.add(raw[best]["pos"])
        per_session[_session(cands[best])] = per_session.get(_session(cands[best]), 0) + 1
    return out + tail


def _session(c: Candidate) -> str:
    return c.hit.session_id if c.hit is not None else c.key
