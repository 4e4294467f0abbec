"""What the pipeline hands the store to write (S5): resolved, grounded items; the store decides outcomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..models import CaptureReceipt, Diagnostic, ExtractionReport

__all__ = (
    "ENTITY_KINDS",
    "EntityPlan",
    "ExtractionPlan",
    "Fence",
    "ItemPlan",
    "RetractionPlan",
    "SourcePlan",
    "Window",
    "WriteResult",
)


@dataclass(frozen=True)
class SourcePlan:
    """A grounded source: the stored turn and the verbatim quote found in it."""

    turn_id: str
    quote: str | None


#: The kinds an entity can have (what S2 is asked for; a host may name them in ``remember(about=...)``).
ENTITY_KINDS = ("person", "place", "organization", "pet", "object", "concept", "other")


@dataclass(frozen=True)
class EntityPlan:
    """An entity to resolve to an existing node by normalised name, or create."""

    name: str
    kind: str
    note: str | None = None


@dataclass(frozen=True)
class ItemPlan:
    """An event or point to consolidate against the namespace's live memories."""

    kind: Literal["event", "point"]
    content: str
    about: tuple[str, ...] = ()
    when: str | None = None
    search_keys: tuple[str, ...] = ()
    sources: tuple[SourcePlan, ...] = ()
    supersedes: str | None = None
    category: str | None = None
    #: Kinds the host gave for some ``about`` names (``(name, kind)``); the others are guessed.
    about_kinds: tuple[tuple[str, str], ...] = ()
    #: How many stages agreed on it (``tortoise_sdk.confidence``: S4_ONLY 0 .. VETTED 3).
    agreement: int = 2
    #: The host's own wording (``correct_memory``): a change of case or punctuation to the memory it
    #: supersedes is a new version, not the same fact restated.
    exact: bool = False


@dataclass(frozen=True)
class RetractionPlan:
    """An explicit retraction: a memory id (from S4) or the retracted content to match."""

    content: str
    sources: tuple[SourcePlan, ...] = ()
    target: str | None = None


@dataclass(frozen=True)
class Fence:
    """A job lease: the write commits only while the job still carries this revision."""

    job_id: str
    revision: int


@dataclass(frozen=True)
class Window:
    """The turns an extraction read as new: ``start``..``end`` (turn indexes), from the watermark ``base``.

    S5 moves the session's watermark to ``mark`` in its transaction: ``end``, or just before
    ``held_from``, the first turn whose S1 chunk or S2 failed (the watermark is a prefix: a
    turn after a failed one waits too, even when its own chunk succeeded). ``full``: every
    turn was re-read on purpose (the watermark is set, not only advanced). ``more``: turns follow
    ``end`` that the window's bound left out (a job runs on to them: S5 does not settle it).
    """

    start: int
    end: int
    base: int
    prompts_sha: str | None = None
    full: bool = False
    held_from: int | None = None
    more: bool = False

    @property
    def mark(self) -> int:
        """The last turn this extraction covers for good: the watermark it leaves (``start - 1``: none)."""
        return self.end if self.held_from is None else min(self.end, self.held_from - 1)


@dataclass
class ExtractionPlan:
    """Everything S5 writes for one session, in one transaction."""

    session_id: str
    extraction_id: str
    valid_at: datetime | None
    entities: list[EntityPlan] = field(default_factory=list)
    items: list[ItemPlan] = field(default_factory=list)
    retractions: list[RetractionPlan] = field(default_factory=list)
    receipt: CaptureReceipt | None = None
    window: Window | None = None


@dataclass
class WriteResult:
    """What S5 did: outcome per item, the ids it touched, and anything it skipped."""

    outcomes: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    memory_ids: list[str] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    report: ExtractionReport | None = None
    #: Another extraction committed this window first: nothing of this one was written.
    already_covered: bool = False
