"""What the reflex's steps hand each other: messages, weighted terms, candidates and one call's reading."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..models import MemoryRecord, SearchHit

if TYPE_CHECKING:
    from ..store.base import Store
    from .tokens import TokenCounter

__all__ = ("Candidate", "Message", "Reading", "Term", "Timeout", "session_day")


class Timeout(Exception):
    """The call ran past its time budget."""


@dataclass
class Message:
    role: str
    text: str
    id: str | None = None


@dataclass
class Term:
    surface: str
    stem: str
    weight: float
    df: int = 0
    is_name: bool = False
    context: bool = False  # from the earlier user turn, not the last one
    feedback: bool = False  # from the top-ranked turns (pseudo-relevance feedback), not the window
    date: bool = False  # a word of a date the question names, matched by the session's date (DATE_BOOST)
    instance_of: tuple[str, ...] = ()  # an instance of the category these query stems name (instances.py)


@dataclass
class Candidate:
    key: str
    kind: str  # "turn" | "memory"
    text: str
    hit: SearchHit | None = None
    memory: MemoryRecord | None = None
    score: float = 0.0
    own: float = 0.0
    matched: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)
    mult: float = 1.0
    nb_only: set[str] = field(default_factory=set)  # terms only its neighbouring turn matched
    lent_by: tuple[str, int] | None = None  # (session, index) of the neighbouring turn it inherits its score from
    answers: bool = False  # the turn before it asks a question that matched
    says_when: bool = False
    spoken: bool = False  # spoken by a person the query names
    weight: float = 1.0  # of this candidate's list in the rank fusion
    # a turn whose extracted facts were all superseded or retracted, or (a present-tense question) one a
    # later turn follows up saying what changed (scoring.latest_first), or one whose fact, or its asking
    # turn's, a ranked memory replaced (scoring.without_stale_turns): flagged SUPERSEDED in the block
    stale: bool = False


class Reading:
    """One call of the reflex: the store and namespace it reads, its token counter, its deadline,
    and what the query step learnt (the weighted terms, the number of turns in the index)."""

    def __init__(self, store: Store, namespace: str, count: TokenCounter, deadline: float | None) -> None:
        self.store = store
        self.ns = namespace
        self.count = count
        self.deadline = deadline
        self.terms: list[Term] = []
        self.n_docs = 0
        # turn id -> (its index tokens counted, how many): read once, whatever the scoring passes
        self.tokens: dict[str, tuple[Counter[str], int]] = {}
        # stem -> kind of fact, for the words of the kinds a present-tense question names (slots.expand)
        self.slots: dict[str, str] = {}
        # stem -> (turns whose content holds it, turns whose speaker name does), for every stem weigh_terms asked
        # about, 0 counts included: read in its one round trip, also for the words slots.expand adds
        self.known: dict[str, tuple[int, int]] = {}

    def tick(self) -> None:
        """Raise ``Timeout`` once the deadline has passed."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise Timeout


def session_day(hit: SearchHit | None) -> str:
    """A turn's session date as text that sorts in time ("" when undated; a time zone is ignored)."""
    return ((hit.session_date if hit is not None else None) or "")[:19]
