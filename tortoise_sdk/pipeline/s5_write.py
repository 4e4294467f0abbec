"""S5: turn grounded items into a write plan and write it in one transaction (consolidation is in the store)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..confidence import AGREED
from ..models import CaptureReceipt, Diagnostic, ExtractionReport
from ..store.base import Store
from ..store.plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, Window, WriteResult
from ..vocabulary import Vocabulary
from .grounding import Grounded, GroundingResult

__all__ = ("build_plan", "write_plan")


def build_plan(
    session_id: str,
    grounded: GroundingResult,
    handles: Mapping[str, str],
    *,
    extraction_id: str,
    valid_at: datetime | None,
    receipt: CaptureReceipt | None,
    window: Window | None = None,
    vocabulary: Vocabulary | None = None,
    agreement_of: Callable[[Any], int] | None = None,
) -> tuple[ExtractionPlan, list[Diagnostic]]:
    """The plan for S5; ``supersedes`` handles (P1 ...) become memory ids, unknown ones a warning.

    With a ``window``, an item grounded outside it (a turn an earlier extraction already read)
    is left out with a warning: new memories cite new turns. The plan carries the window, so S5
    moves the session's watermark in its transaction. An item's category is kept in the host's
    spelling when it names one of ``vocabulary``'s categories; another is left out with a warning.
    ``agreement_of`` gives an item's agreement level (:mod:`~tortoise_sdk.confidence`); without it,
    every item counts as agreed.
    """
    warnings: list[Diagnostic] = []
    known_ids = set(handles.values())

    def inside(g: Grounded, label: str) -> bool:
        if window is None or window.start <= g.turn_index <= window.end:
            return True
        warnings.append(Diagnostic(stage="s5", code="outside_window",
                                   message=f"{label} cites turn {g.turn_index}, outside the turns read as new "
                                           f"({window.start}-{window.end}); left out",
                                   detail={"turn": g.turn_index}))
        return False

    def target(ref: str | None, label: str) -> str | None:
        if not ref:
            return None
        ref = ref.strip()
        if ref.upper() in handles:
            return handles[ref.upper()]
        if ref in known_ids:
            return ref
        warnings.append(Diagnostic(stage="s5", code="supersedes_unknown",
                                   message=f"{label} cites {ref!r}, which is not one of the priors shown; ignored"))
        return None

    vocabulary = vocabulary or Vocabulary()

    def category(raw: str | None, label: str) -> str | None:
        chosen = vocabulary.category(raw)
        if raw and chosen is None:
            warnings.append(Diagnostic(stage="s5", code="unknown_category",
                                       message=f"{label} has category {raw!r}, not one of the host's "
                                               f"({', '.join(vocabulary.categories)}); stored without one"))
        return chosen

    items = []
    for kind, group in (("event", grounded.events), ("point", grounded.points)):
        for g in group:
            if not inside(g, f"{kind} {g.item.content!r}"):
                continue
            it = g.item
            items.append(ItemPlan(
                kind=kind, content=it.content, about=tuple(getattr(it, "about", ())), when=getattr(it, "when", None),
                search_keys=tuple(getattr(it, "search_keys", ())), sources=(g.source, *g.also),
                supersedes=target(it.supersedes, f"{kind} {it.content!r}"),
                category=category(it.category, f"{kind} {it.content!r}"),
                agreement=AGREED if agreement_of is None else agreement_of(it),
            ))
    retractions = [
        RetractionPlan(content=g.item.content, sources=(g.source, *g.also),
                       target=target(g.item.supersedes, f"retraction {g.item.content!r}"))
        for g in grounded.retractions if inside(g, f"retraction {g.item.content!r}")
    ]
    entities = [EntityPlan(e.name, e.kind, e.note) for e in grounded.entities]
    plan = ExtractionPlan(session_id=session_id, extraction_id=extraction_id, valid_at=valid_at,
                          entities=entities, items=items, retractions=retractions, receipt=receipt, window=window)
    return plan, warnings


def write_plan(store: Store, namespace: str, plan: ExtractionPlan, *,
               finalize: Callable[[WriteResult], ExtractionReport], fence: Fence | None) -> WriteResult:
    """Write the plan; raises whatever the store raises (the runner turns it into diagnostics)."""
    return store.write_extraction(namespace, plan, finalize=finalize, fence=fence)
