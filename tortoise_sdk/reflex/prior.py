"""What the host already shows is not shown again: the window's own turns and the prior-mention rule."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..models import MemoryBlock
from ..search import indexed_text, query_terms
from ..text import per_text
from .query import SPACE, as_list, message, text_of
from .shapes import Candidate, Message

__all__ = ("drop_prior", "not_in_window")

def not_in_window(ranked: list[Candidate], msgs: list[Message], session_id: str | None) -> list[Candidate]:
    """Drop candidates the window already holds: the same text, or the same message id in this session."""
    shown = {_norm(m.text) for m in msgs}
    ids = {m.id for m in msgs if m.id}
    keep = []
    for c in ranked:
        if _norm(c.text) in shown:
            continue
        if c.hit is not None and c.hit.external_id in ids and (session_id is None or c.hit.session_id == session_id):
            continue
        keep.append(c)
    return keep


def drop_prior(ranked: list[Candidate], prior: Any) -> list[Candidate]:
    """The prior-mention rule: drop what the host already showed (cited by id, or mostly the same words)."""
    items = as_list(prior)
    if not items:
        return ranked
    cited: set[str] = set()
    texts: list[str] = []
    for p in items:
        if isinstance(p, MemoryBlock):
            cited.update(q.id for q in p.pointers)
            texts.append(indexed_text(p.block))
        elif isinstance(p, str):
            texts.append(indexed_text(p))
        elif isinstance(p, Mapping) and "block" in p and "content" not in p:  # a MemoryBlock as JSON
            texts.append(indexed_text(text_of(p["block"])))
        else:
            # message() drops a memory block (it is not the host's words), but here a previous block is
            # exactly what counts: read its content whether it came as an OpenAI dict or a message object.
            m = message(p)
            content = m.text if m is not None else text_of(p.get("content") if isinstance(p, Mapping)
                                                           else getattr(p, "content", ""))
            texts.append(indexed_text(content))
    joined = "\n".join(texts)
    cited.update(re.findall(r"\bref:(\S+)", joined))
    prior_tokens = set(query_terms(joined))
    keep = []
    for c in ranked:
        if c.key in cited or (c.hit is not None and c.hit.turn_id in cited):
            continue
        own = set(query_terms(c.text))
        if own and prior_tokens and len(own & prior_tokens) / len(own) >= 0.8:
            continue
        keep.append(c)
    return keep


@per_text
def _norm(text: str) -> str:
    """Text compared for sameness: its indexed part (what a stored turn's hit carries), spaces folded."""
    return SPACE.sub(" ", indexed_text(text)).strip().lower()
