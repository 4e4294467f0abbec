"""VET (optional, off by default): a gate that may keep, drop or merge candidates. It fails open."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..models import Diagnostic, SearchHit
from .common import diagnostic, format_transcript
from .merge import Event, Point, Proposal
from .prompts import Prompt

__all__ = ("vet",)


async def vet(client: Any, prompt: Prompt, proposal: Proposal, turns: Sequence[SearchHit]) -> tuple[Proposal, list[Diagnostic]]:
    """Apply the gate's decisions ``{"decisions": [{"id", "action": keep|drop|merge, "into"?, "reason"?}]}``.

    Candidates are events and points, numbered c1, c2 ... Anything the gate does
    not mention is kept; a failed or unreadable reply keeps everything.
    """
    items = [*proposal.events, *proposal.points]
    if not items:
        return proposal, []
    listing = "\n".join(f"c{i}: {json.dumps(it.model_dump(mode='json', exclude_none=True), ensure_ascii=False)}"
                        for i, it in enumerate(items, 1))
    text = prompt.render(candidates=listing, transcript=format_transcript(turns))
    try:
        result = await client.acomplete_json("vet", [{"role": "user", "content": text}], expect="object")
        decisions = result.parsed.value.get("decisions")
        if not isinstance(decisions, list):
            raise ValueError("expected {'decisions': [...]}")
    except Exception as exc:  # noqa: BLE001 - the gate fails open
        return proposal, [diagnostic("vet", exc, "vet failed; kept every candidate")]
    handle = {f"c{i}": it for i, it in enumerate(items, 1)}
    dropped: set[str] = set()
    extra: dict[str, dict[str, set[str]]] = {}
    warnings: list[Diagnostic] = []
    for d in decisions:
        if not isinstance(d, dict) or d.get("id") not in handle:
            continue
        action = d.get("action")
        if action == "drop":
            dropped.add(d["id"])
        elif action == "merge" and d.get("into") in handle and d.get("into") != d["id"]:
            dropped.add(d["id"])
            src = handle[d["id"]]
            bucket = extra.setdefault(d["into"], {"about": set(), "search_keys": set()})
            bucket["about"].update(getattr(src, "about", ()))
            bucket["search_keys"].update(getattr(src, "search_keys", ()))
        if action in ("drop", "merge"):
            warnings.append(Diagnostic(stage="vet", code=action, message=f"{d['id']} {action}: {d.get('reason', '')}".strip(),
                                       detail={"item": handle[d["id"]].content}))
    kept = {}
    for h, it in handle.items():
        if h in dropped:
            continue
        if h in extra:
            update: dict[str, Any] = {"about": tuple(dict.fromkeys([*it.about, *sorted(extra[h]["about"])]))}
            if hasattr(it, "search_keys"):
                update["search_keys"] = tuple(dict.fromkeys([*it.search_keys, *sorted(extra[h]["search_keys"])]))
            it = it.model_copy(update=update)
        kept[h] = it
    events = tuple(it for it in kept.values() if isinstance(it, Event))
    points = tuple(it for it in kept.values() if isinstance(it, Point))
    return proposal.model_copy(update={"events": events, "points": points}), warnings
