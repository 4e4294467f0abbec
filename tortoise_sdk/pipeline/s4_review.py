"""S4: gap review. Story, priors, the S2 list and the source turns in; a delta of missing and corrected items out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import SearchHit
from .common import format_context, format_transcript
from .merge import Proposal
from .prompts import Prompt
from .s2_map import StageOutcome, ask_for_proposal, proposal_json
from .s3_priors import Priors, render_priors

__all__ = ("review",)


async def review(client: Any, prompt: Prompt, *, story: str, priors: Priors, candidates: Proposal,
                 turns: Sequence[SearchHit], session_date: str | None,
                 context: Sequence[SearchHit] = ()) -> StageOutcome:
    """Run S4; the caller unions its delta with the S2 list (``merge.union``)."""
    text = prompt.render(
        session_date=session_date or "unknown",
        story=story or "(no story: narration failed)",
        priors=render_priors(priors),
        candidates=proposal_json(candidates),
        transcript=format_transcript(turns),
        context=format_context(context),
    )
    return await ask_for_proposal(client, "s4", text)
