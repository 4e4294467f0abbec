"""The exchange structure of a conversation: a turn that asks, and the reply that answers it."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..models import SearchHit
from . import tuning
from .noise import is_filler
from .shapes import Candidate, Reading

__all__ = ("asks", "filled", "with_replies")

Pos = tuple[str, int]
_HOPS = 2  # the reply, and the reply to it when the reply asks back: no longer chain
_SENTENCES = re.compile(r"(?<=[.!?])\s+")


def _last_sentence(text: str) -> str:
    return _SENTENCES.split(text.rstrip())[-1]


def asks(text: str) -> bool:
    """The turn hands the floor over with a question: its last sentence asks."""
    return text.rstrip().endswith("?")


def _pos(h: SearchHit, d: int = 0) -> Pos:
    return h.session_id, h.index + d


def _read_missing(r: Reading, pool: Mapping[Pos, SearchHit], positions: list[Pos]) -> dict[Pos, SearchHit]:
    """The pool's turns by position, with those of ``positions`` it lacks read in one call (never a system turn)."""
    hits: dict[Pos, SearchHit] = dict(pool)
    missing = list(dict.fromkeys(p for p in positions if p not in hits and p[1] >= 0))
    if missing:
        hits.update((_pos(h), h) for h in r.store.turns_at(r.ns, missing) if h.role != "system")
        r.tick()
    return hits


def with_replies(r: Reading, turns: list[Candidate], pool: Mapping[Pos, SearchHit], places: int) -> list[Candidate]:
    """The turn ranking with the reply to each asking turn of the top half of the block (``places // 2``)
    right after it (``EXCHANGE_REPLIES``): a block that points at a question without its answer spends
    a place on the asking, not on what was said ("Got any fave styles?" without "Contemporary, it
    speaks to me"). The top half only: lower down, a reply would push out a turn that matched better.

    Only a question about what the query asks brings its reply: its last sentence names one of
    the query's words. A reply that asks back ("What's yours?") brings its own reply, within those
    places too; no chain goes further (``_HOPS``). An assistant's filler ("OK.") is no reply: it states
    nothing (``noise.is_filler``). The reply is the session's next turn, by another speaker, from the pool (the
    neighbours of what the full-text query found) or one read of the few positions it lacks.
    Only turns the ranking already holds are followed, so an empty ranking (an unrelated
    question) stays empty.
    """
    if not tuning.EXCHANGE_REPLIES or not turns or places < 1:
        return turns
    top = [c for c in turns[: places // 2] if c.hit is not None and asks(c.text)]
    if top:
        words = {t.stem for t in r.terms if not t.is_name}
        said = r.store.analyze([_last_sentence(c.text) for c in top])
        top = [c for c, st in zip(top, said) if words & set(st)]
    if not top:
        return turns
    # The reply, and the reply to it (when the reply asks back): both positions in one read.
    hits = _read_missing(r, pool, [_pos(c.hit, d) for c in top if c.hit is not None for d in (1, 2)])
    by_pos = {_pos(c.hit): c for c in turns if c.hit is not None}
    starts = {c.key for c in top}
    out: list[Candidate] = []
    placed: set[str] = set()
    for c in turns:
        if c.key in placed:
            continue
        out.append(c)
        placed.add(c.key)
        asker = c if c.key in starts else None
        for _ in range(_HOPS):
            if asker is None or asker.hit is None or len(out) >= places or not asks(asker.text):
                break
            h = hits.get(_pos(asker.hit, 1))
            if h is None or (h.name or h.role) == (asker.hit.name or asker.hit.role) or is_filler(h):
                break
            reply = by_pos.get(_pos(h)) or Candidate(key=h.turn_id, kind="turn", text=h.content, hit=h)
            asker = reply
            if reply.key in placed:  # pointed at already (it ranks above its question): its reply may not be
                continue
            reply.score = max(reply.score, c.score)
            reply.reasons.append("replies to a question about what is asked")
            out.append(reply)
            placed.add(reply.key)
    return out


def filled(r: Reading, turns: list[Candidate], pool: Mapping[Pos, SearchHit], places: int) -> list[Candidate]:
    """A ranking shorter than the block's places, filled with the turns next to its turns (``EXCHANGE_FILL``):
    for each turn, best-ranked first, the one after it then the one before (the positions the pool
    lacks in one read). The gates left only these turns, so their exchange is the likeliest place of
    the rest of the answer. An empty ranking (an unrelated question) stays empty."""
    if not tuning.EXCHANGE_FILL or not turns or len(turns) >= places:
        return turns
    keys = {c.key for c in turns}
    wanted = [_pos(c.hit, d) for c in turns if c.hit is not None for d in (1, -1)]
    hits = _read_missing(r, pool, wanted)
    out = list(turns)
    for p in wanted:
        h = hits.get(p)
        if len(out) >= places:
            break
        if h is None or h.turn_id in keys or is_filler(h):
            continue
        keys.add(h.turn_id)
        out.append(Candidate(key=h.turn_id, kind="turn", text=h.content, hit=h, score=out[-1].score,
                             reasons=["next to a turn that matched"]))
    return out
