"""S2: from the compiled story and the indexed source turns, propose entities, events, points, retractions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models import Diagnostic, MemoryRecord, SearchHit
from .common import diagnostic, format_context, format_known, format_transcript
from .merge import Proposal, coerce_proposal
from .prompts import Prompt

__all__ = ("StageOutcome", "ask_for_proposal", "map_session")


@dataclass
class StageOutcome:
    """A JSON stage's result: the proposal (None when the stage failed), and what went wrong."""

    proposal: Proposal | None
    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    partial: bool = False
    #: The lists the reply held, in its order (of a cut reply: the last is where the cut fell, those absent are lost).
    lists: tuple[str, ...] = ()


async def ask_for_proposal(client: Any, stage: str, text: str) -> StageOutcome:
    """Call a JSON stage and validate its reply against the contract, item by item."""
    try:
        result = await client.acomplete_json(stage, [{"role": "user", "content": text}], expect="object")
    except Exception as exc:  # noqa: BLE001 - stage failures become diagnostics
        return StageOutcome(None, errors=[diagnostic(stage, exc, f"{stage} failed")])
    outcome = StageOutcome(None)
    parsed = result.parsed
    if result.partial or parsed.partial:
        outcome.partial = True
        outcome.warnings.append(Diagnostic(
            stage=stage, code="truncation",
            message=(f"{stage} reply was cut by the output cap even after a retry with a larger cap; "
                     if result.partial else
                     f"{stage} reply ended in the middle of its JSON (the model said it had finished); ")
                    + f"kept its complete items ({', '.join(parsed.steps)})",
            detail={"steps": parsed.steps},
        ))
    elif result.attempts > 1 and client.stats.get(stage) and client.stats[stage].errors.get("truncation"):
        outcome.warnings.append(Diagnostic(
            stage=stage, code="truncation_recovered",
            message=f"{stage} reply was cut by the output cap; the retry with a larger cap completed it",
        ))
    if isinstance(parsed.value, dict):
        outcome.lists = tuple(k for k in parsed.value if k in ("entities", "events", "points", "retractions"))
    try:
        outcome.proposal, item_warnings = coerce_proposal(parsed.value, stage=stage)
    except ValueError as exc:
        outcome.errors.append(Diagnostic(stage=stage, code="parse", message=f"{stage} reply ignored: {exc}",
                                         detail={"reply": result.text[:500]}))
        return outcome
    outcome.warnings.extend(item_warnings)
    return outcome


async def map_session(client: Any, prompt: Prompt, *, story: str, turns: Sequence[SearchHit],
                      session_date: str | None, context: Sequence[SearchHit] = (),
                      known: Sequence[MemoryRecord] = (), coding: str = "") -> StageOutcome:
    """Run S2 on the new turns, with earlier turns read-only (``context``) and what is ``known`` already;
    ``coding`` fills the prompt's ``{coding}`` section (``prompts.coding_section``)."""
    text = prompt.render(
        session_date=session_date or "unknown",
        story=story or "(no story: narration failed; work from the transcript alone)",
        transcript=format_transcript(turns),
        context=format_context(context),
        known=format_known(known),
        coding=coding,
    )
    return await ask_for_proposal(client, "s2", text)


def proposal_json(proposal: Proposal) -> str:
    """A proposal as the compact JSON the later prompts show."""
    return json.dumps(proposal.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
                      ensure_ascii=False, indent=1)
