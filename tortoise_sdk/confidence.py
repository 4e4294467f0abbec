"""How sure tortoise is of a memory: agreement of the pipeline's stages, promoted by repeated evidence. Pure.

A memory's **agreement** is what the run that wrote it knew (the best of every run that stated it):

- ``S4_ONLY`` (0): only the review (S4) proposed it, the first pass (S2) did not;
- ``S2_ONLY`` (1): S2 proposed it and no review ran (S4 failed or was not called);
- ``AGREED`` (2): S2 proposed it and S4 reviewed it (kept it as it was, or restated it);
- ``VETTED`` (3): agreed, and the gate (VET) kept it on its first pass.

Its **confidence** is the agreement's base, raised by a step for each further turn that states
it and a step more for each further session (bounded promotion): never past ``PROMOTION_CAP``,
so repetition alone never makes a memory certain. Only the best agreement and the set of
distinct sources count, so the same evidence in any order, or twice, gives the same value.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = (
    "AGREED",
    "BASE",
    "LOW_CONFIDENCE",
    "PROMOTION_CAP",
    "PROMOTION_STEP",
    "S2_ONLY",
    "S4_ONLY",
    "VETTED",
    "agreement",
    "confidence",
    "is_low",
)

S4_ONLY = 0
S2_ONLY = 1
AGREED = 2
VETTED = 3

#: Confidence of a memory stated once, by agreement.
BASE: dict[int, float] = {S4_ONLY: 0.3, S2_ONLY: 0.4, AGREED: 0.6, VETTED: 0.7}
#: Added per further distinct source turn, and again per further distinct session.
PROMOTION_STEP = 0.1
#: Repeated evidence raises confidence up to here, never past it.
PROMOTION_CAP = 0.9
#: Below this a memory is shown as unconfirmed in the block.
LOW_CONFIDENCE = 0.5


def agreement(*, from_s2: bool, from_s4: bool, reviewed: bool, vetted: bool) -> int:
    """The agreement level of one item of a run (see the module docstring).

    Args:
        from_s2: S2 (after VET's first pass) proposed it.
        from_s4: S4's delta proposed it (new, or restating an S2 item).
        reviewed: S4 ran and answered, so it saw every S2 item.
        vetted: VET answered on its first pass and kept it.
    """
    if not from_s2:
        return S4_ONLY
    if not (from_s4 or reviewed):
        return S2_ONLY
    return VETTED if vetted else AGREED


def confidence(level: int, sources: Iterable[tuple[Hashable, Hashable]]) -> float:
    """Confidence from the best ``level`` seen and the ``(session_id, turn_id)`` sources stating the memory."""
    distinct = set(sources)
    turns = max(1, len({t for _, t in distinct}))
    sessions = max(1, len({s for s, _ in distinct}))
    base = BASE[max(S4_ONLY, min(VETTED, level))]
    promoted = base + PROMOTION_STEP * ((turns - 1) + (sessions - 1))
    return round(min(PROMOTION_CAP, promoted), 2)


def is_low(value: float | None) -> bool:
    """Whether a confidence is low enough to be marked unconfirmed (unknown is not)."""
    return value is not None and value < LOW_CONFIDENCE
