"""S3: what the namespace already knows that bears on this session's candidates.

Entities by normalised name or alias, memories by FTS over content and search keys (for
each candidate and for S1's story of the session, which names what the items may word
differently), and one graph hop (networkx) from the matched entities to the memories about them.
Runs on the embedded store; when it cannot run it reports ``degraded`` and the
pipeline treats every candidate as new.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models import MemoryRecord
from ..search import fts5_query
from ..store.base import Store
from ..text import norm_content, norm_name
from .merge import Proposal

__all__ = ("Priors", "find_priors", "render_priors")

DEFAULT_PRIORS = 30
_PER_ITEM = 5
#: Memories the story's own search adds (after every candidate's).
_PER_STORY = 5
#: Capitalised words of the story, looked up as entity names (S1 writes people's names as the session does).
_NAME = re.compile(r"\b[A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+)*")


@dataclass
class Priors:
    """Prior entities and memories; memories carry short handles (P1, P2 ...) that S4 may cite."""

    entities: list[dict[str, Any]] = field(default_factory=list)
    memories: list[MemoryRecord] = field(default_factory=list)
    degraded: str | None = None

    @property
    def handles(self) -> dict[str, str]:
        """``{"P1": memory_id, ...}`` in the order shown to S4."""
        return {f"P{i}": m.id for i, m in enumerate(self.memories, 1)}


def find_priors(store: Store, namespace: str, proposal: Proposal, *, k: int = DEFAULT_PRIORS,
                known: Sequence[MemoryRecord] = (), story: str = "") -> Priors:
    """Search the namespace for priors of the proposal; never raises (degraded instead).

    ``known`` (the session's own newest memories) are always among the ``k`` priors, so S4
    can tell a restated or changed fact of the same conversation from a new one. ``story``
    (S1's) is searched too, and its capitalised names looked up as entities.
    """
    import networkx as nx

    try:
        names = {e.name for e in proposal.entities}
        for item in (*proposal.events, *proposal.points):
            names.update(item.about)
        in_story = {m.group(0) for m in _NAME.finditer(story)} | {w for m in _NAME.finditer(story)
                                                                   for w in m.group(0).split()}
        entities = store.find_entities(namespace, sorted(names | in_story))
        names.update(e["name"] for e in entities)
        g = nx.Graph()
        scores: dict[str, float] = {}
        records: dict[str, MemoryRecord] = {}
        for item in (*proposal.events, *proposal.points, *proposal.retractions):
            match = fts5_query(" ".join([item.content, *getattr(item, "search_keys", ())]))
            if match is None:
                continue
            for rec, score in store.search_memories(namespace, match, k=_PER_ITEM):
                records[rec.id] = rec
                scores[rec.id] = max(scores.get(rec.id, 0.0), score)
        match = fts5_query(story) if story.strip() else None
        if match is not None:
            for rec, score in store.search_memories(namespace, match, k=_PER_STORY):
                records.setdefault(rec.id, rec)
                scores[rec.id] = max(scores.get(rec.id, 0.0), score)
        for rec in store.memories_about(namespace, sorted(names), k=k):
            records.setdefault(rec.id, rec)
        for rec in records.values():
            g.add_node(("m", rec.id))
            for name in rec.entities:
                g.add_edge(("m", rec.id), ("e", norm_name(name)))
        seeds = [("e", norm_name(n)) for n in names if ("e", norm_name(n)) in g]
        hop = {node[1] for seed in seeds for node in g.neighbors(seed) if node[0] == "m"}
        ranked = sorted(records, key=lambda mid: (-(scores.get(mid, 0.0) + (1.0 if mid in hop else 0.0)),
                                                  records[mid].created_at, mid))
        # Relevance picks which priors are shown; the order shown (hence the P-handles) is canonical, so
        # every backend gives S4 the same prompt for the same stored facts.
        own = {m.id: m for m in known if m.status == "live"}
        picked = [*own, *(mid for mid in ranked if mid not in own)][:max(k, len(own))]
        chosen = sorted((own.get(mid) or records[mid] for mid in picked), key=_canonical)
        entities.sort(key=lambda e: (norm_name(e["name"]), e["kind"]))
        return Priors(entities=entities, memories=chosen)
    except Exception as exc:  # noqa: BLE001 - S3 fails open
        return Priors(degraded=f"{type(exc).__name__}: {exc}")


def _canonical(m: MemoryRecord) -> tuple[str, str, str]:
    return (m.valid_at.isoformat() if m.valid_at else "", norm_content(m.content), m.id)


def render_priors(priors: Priors) -> str:
    """The priors as S4 reads them."""
    if priors.degraded:
        return "(unavailable: the stored graph could not be searched; treat every item as new)"
    lines = []
    if priors.entities:
        lines.append("Known entities:")
        for e in priors.entities:
            note = f": {e['note']}" if e.get("note") else ""
            lines.append(f"- {e['name']} ({e['kind']}){note}")
    if priors.memories:
        lines.append("Stored memories (cite by handle):")
        for handle, m in zip(priors.handles, priors.memories):
            since = m.valid_at.date().isoformat() if m.valid_at else "unknown date"
            about = f" (about: {', '.join(m.entities)})" if m.entities else ""
            lines.append(f"{handle} [{m.kind}, since {since}] {m.content}{about}")
    return "\n".join(lines) if lines else "(none: nothing related is stored yet)"
