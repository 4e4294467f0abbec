"""Grounding: every event, point and retraction must quote a turn of the session verbatim.

A quote is looked for in the turn the item cites, then in every other evidence
turn of the session (the item is re-anchored there, with a warning); failing
both, that item alone is rejected with a warning. Matching ignores case,
typographic quotes and spacing, and respects word boundaries; ``...`` in a quote
skips at most ``MAX_ELLIPSIS_GAP`` characters between parts. A quote must hold at
least ``MIN_QUOTE_WORDS`` words or ``MIN_QUOTE_CHARS`` characters ("I" or "he"
ground nothing). Tool turns, sub-agent records and injected memory blocks are never
evidence, and a memory block embedded anywhere in a turn is cut out before matching.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import MEMORY_BLOCK_END, MEMORY_BLOCK_MARKER, Diagnostic, SearchHit
from ..store.plan import SourcePlan
from ..text import norm_name, norm_quote
from .merge import Entity, Proposal, _Grounded

__all__ = ("Grounded", "evidence_turns", "ground", "is_evidence")

_SUBAGENT_FLAGS = ("subagent", "is_subagent", "isSidechain", "sidechain")
MIN_QUOTE_WORDS = 3
MIN_QUOTE_CHARS = 12
MAX_ELLIPSIS_GAP = 200
_BLOCK = re.compile(re.escape(MEMORY_BLOCK_MARKER) + r".*?(?:" + re.escape(MEMORY_BLOCK_END) + r"|\Z)", re.DOTALL)


def is_evidence(turn: SearchHit, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a turn may ground a memory: not a tool turn, sub-agent record or memory block."""
    if turn.role == "tool":
        return False
    if turn.content.lstrip().startswith(MEMORY_BLOCK_MARKER):
        return False
    if metadata:
        if metadata.get("tortoise") in ("memory_block", "subagent"):
            return False
        if any(metadata.get(flag) for flag in _SUBAGENT_FLAGS):
            return False
    return True


def evidence_turns(turns: Sequence[SearchHit], metadata: Mapping[str, Mapping[str, Any] | None]) -> list[SearchHit]:
    """The turns of a session that count as evidence, in order."""
    return [t for t in turns if is_evidence(t, metadata.get(t.turn_id))]


@dataclass(frozen=True)
class Grounded:
    """A grounded item with the turn its quote was found in."""

    item: _Grounded
    source: SourcePlan
    turn_index: int


@dataclass
class GroundingResult:
    """Grounded items by kind, kept entities, and one warning per re-anchor or rejection."""

    events: list[Grounded]
    points: list[Grounded]
    retractions: list[Grounded]
    entities: list[Entity]
    warnings: list[Diagnostic]
    rejected: int


def ground(proposal: Proposal, turns: Sequence[SearchHit]) -> GroundingResult:
    """Check every quote against the evidence turns; keep entities that are used or named in the session."""
    by_index = {t.index: t for t in turns}
    normed = {t.index: norm_quote(_BLOCK.sub(" ", t.content)) for t in turns}
    warnings: list[Diagnostic] = []
    rejected = 0
    out: dict[str, list[Grounded]] = {"events": [], "points": [], "retractions": []}
    for key in out:
        for item in getattr(proposal, key):
            found = _locate(item, normed)
            label = f"{key[:-1]} {item.content!r}"
            if found is None:
                rejected += 1
                warnings.append(Diagnostic(
                    stage="ground", code="ungrounded_quote" if item.quote else "missing_quote",
                    message=(f"{label} rejected: its quote {item.quote!r} is not in turn {item.turn} nor in any "
                             "other evidence turn of the session" if item.quote
                             else f"{label} rejected: it has no quote"),
                    detail={"turn": item.turn, "quote": item.quote},
                ))
                continue
            if found != item.turn:
                warnings.append(Diagnostic(
                    stage="ground", code="reanchored",
                    message=f"{label}: quote found in turn {found}, not the cited turn {item.turn}; re-anchored",
                    detail={"cited": item.turn, "found": found},
                ))
            turn = by_index[found]
            out[key].append(Grounded(item, SourcePlan(turn.turn_id, item.quote), found))
    used = {norm_name(n) for g in out["events"] + out["points"] for n in getattr(g.item, "about", ())}
    corpus = " ".join(normed.values())
    entities = [e for e in proposal.entities if norm_name(e.name) in used or norm_quote(e.name) in corpus]
    return GroundingResult(out["events"], out["points"], out["retractions"], entities, warnings, rejected)


def _locate(item: _Grounded, normed: Mapping[int, str]) -> int | None:
    if not item.quote:
        return None
    parts = [p.strip(" \"'") for p in norm_quote(item.quote).split("...")]
    parts = [p for p in parts if p]
    joined = " ".join(parts)
    if len(joined.split()) < MIN_QUOTE_WORDS and len(joined) < MIN_QUOTE_CHARS:
        return None
    if item.turn is not None and item.turn in normed and _contains(normed[item.turn], parts):
        return item.turn
    for index in sorted(normed):
        if _contains(normed[index], parts):
            return index
    return None


def _contains(text: str, parts: Sequence[str]) -> bool:
    """The parts occur in order, each on word boundaries, at most MAX_ELLIPSIS_GAP apart."""
    at, first = 0, True
    for part in parts:
        pattern = (r"(?<!\w)" if part[0].isalnum() else "") + re.escape(part) + (r"(?!\w)" if part[-1].isalnum() else "")
        match = re.compile(pattern).search(text, at)
        if match is None or (not first and match.start() - at > MAX_ELLIPSIS_GAP):
            return False
        at, first = match.end(), False
    return True
