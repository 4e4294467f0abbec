"""VET (optional, off by default): a gate that may keep, drop or merge candidates. It fails open."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..models import Diagnostic, SearchHit
from .common import diagnostic, format_transcript
from .merge import Event, Point, Proposal, with_sources
from .prompts import Prompt

__all__ = ("vet",)


async def vet(client: Any, prompt: Prompt, proposal: Proposal, turns: Sequence[SearchHit], *,
              of_s4: bool = False) -> tuple[Proposal, list[Diagnostic]]:
    """Apply the gate's decisions ``{"decisions": [{"id", "action": keep|drop|merge, "into"?, "reason"?}]}``.

    Candidates are events and points, numbered c1, c2 ... Anything the gate does
    not mention is kept; a failed or unreadable reply keeps everything. Merges
    join groups that each keep one survivor (a merge cycle keeps one, never
    none); a merge into a dropped candidate is ignored. ``of_s4`` marks the second
    pass, over the items S4 added; its diagnostics say so (``detail["pass"] == "s4"``).
    """
    items = [*proposal.events, *proposal.points]
    if not items:
        return proposal, []
    listing = "\n".join(f"c{i}: {json.dumps(_shown(it), ensure_ascii=False)}" for i, it in enumerate(items, 1))
    text = prompt.render(candidates=listing, transcript=format_transcript(turns))
    try:
        result = await client.acomplete_json("vet", [{"role": "user", "content": text}], expect="object")
        decisions = result.parsed.value.get("decisions")
        if not isinstance(decisions, list):
            raise ValueError("expected {'decisions': [...]}")
    except Exception as exc:  # noqa: BLE001 - the gate fails open
        if of_s4:
            return proposal, [diagnostic("vet", exc, "vet of the items S4 added failed; kept every one",
                                      **{"pass": "s4"})]
        return proposal, [diagnostic("vet", exc, "vet failed; kept every candidate")]
    handle = {f"c{i}": it for i, it in enumerate(items, 1)}
    # A decision names a candidate by its handle, a string: anything else (a list, an object) names none.
    valid = [d for d in decisions if isinstance(d, dict) and isinstance(d.get("id"), str) and d["id"] in handle]
    dropped = {d["id"] for d in valid if d.get("action") == "drop"}
    # Merges form groups (union-find); each group keeps its root, so a merge cycle cannot lose the fact.
    parent = {h: h for h in handle}

    def root(h: str) -> str:
        while parent[h] != h:
            parent[h] = parent[parent[h]]
            h = parent[h]
        return h

    warnings: list[Diagnostic] = []
    for d in valid:
        h, action, into = d["id"], d.get("action"), d.get("into")
        reason = f"{h} {action}: {d.get('reason', '')}".strip()
        if action == "merge":
            if not isinstance(into, str) or into not in handle or into == h or h in dropped:
                continue
            if into in dropped:
                reason = f"{h} merge ignored: target {into} is dropped"
            elif root(h) == root(into):
                continue
            else:
                parent[root(h)] = root(into)
        elif action != "drop":
            continue
        detail = {"item": handle[h].content, **({"pass": "s4"} if of_s4 else {})}
        warnings.append(Diagnostic(stage="vet", code=action, message=f"S4 item {reason}" if of_s4 else reason,
                                   detail=detail))
    groups: dict[str, list[str]] = {}
    for h in handle:
        if h not in dropped:
            groups.setdefault(root(h), []).append(h)
    kept = {}
    for h, it in handle.items():
        if h not in groups:
            continue
        others = [handle[m] for m in groups[h] if m != h]
        if others:
            update: dict[str, Any] = {"about": tuple(dict.fromkeys(
                [*it.about, *sorted({a for o in others for a in getattr(o, "about", ())})]))}
            if hasattr(it, "search_keys"):
                update["search_keys"] = tuple(dict.fromkeys(
                    [*it.search_keys, *sorted({k for o in others for k in getattr(o, "search_keys", ())})]))
            it = with_sources(it.model_copy(update=update), others)  # the merged ones' quotes stay its sources
        kept[h] = it
    events = tuple(it for it in kept.values() if isinstance(it, Event))
    points = tuple(it for it in kept.values() if isinstance(it, Point))
    return proposal.model_copy(update={"events": events, "points": points}), warnings


def _shown(item: Event | Point) -> dict[str, Any]:
    """A candidate as the gate sees it: the reply's fields, not the provenance the union kept."""
    return item.model_dump(mode="json", exclude_none=True, exclude={"also"})
