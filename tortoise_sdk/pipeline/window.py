"""What one extraction reads: the new turns after the session's watermark, a few earlier turns as
read-only context, and what the session already remembers.

An extraction covers the turns after the watermark (the last turn a committed
extraction covered), up to ``WINDOW_CHARS`` characters as the prompts show them (a
longer session is read window after window; a turn longer than a prompt shows is
shown by its head and tail). The last ``CONTEXT_TURNS`` evidence turns of the previous
window come along as context: S1, S2 and S4 see them marked read-only, so a
reference to them can be understood, but grounding rejects an item whose quote is
only in a context turn. Each turn is so read as new once and as context at most
once more. The session's newest ``KNOWN_MEMORIES`` live memories are shown to S1
and S2 (and join S3's priors, so S4 can supersede them): a fact restated later is
a NOOP or an UPDATE, not a duplicate. ``full``, or prompts that changed since the
watermark was set, read the whole session again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..models import MemoryRecord, SearchHit
from ..store.base import Store
from ..store.plan import Window
from .common import transcript_line
from .grounding import evidence_turns
from .prompts import Prompt

__all__ = ("CONTEXT_TURNS", "KNOWN_MEMORIES", "Reading", "prompts_sha", "read_window")

#: Evidence turns of the previous window shown as read-only context.
CONTEXT_TURNS = 4
#: The session's newest live memories shown as already known.
KNOWN_MEMORIES = 12
# How far before the watermark to look for context turns (tool turns in between are skipped).
_CONTEXT_SCAN = 24


@dataclass
class Reading:
    """The window (``start``..``end`` set once turns are read), its evidence, context and known memories."""

    window: Window
    turns: list[SearchHit] = field(default_factory=list)
    evidence: list[SearchHit] = field(default_factory=list)
    context: list[SearchHit] = field(default_factory=list)
    known: list[MemoryRecord] = field(default_factory=list)
    #: The last turn an earlier run extracted under these prompts (-1: none); a ``full`` re-read does not undo it.
    extracted: int = -1

    @property
    def session_date(self) -> str | None:
        return self.turns[0].session_date if self.turns else None


#: A window holds the turns after the watermark up to about this many characters as the prompts show them (at least
#: one turn): a long session (a 3,000-turn transcript) is read in windows, not as one prompt past the model's context.
WINDOW_CHARS = 80_000


def _bounded(turns: list[SearchHit], evidence: set[str]) -> list[SearchHit]:
    """The first of ``turns`` whose ``evidence`` turns' lines (``transcript_line``, as the prompts show them) fit
    ``WINDOW_CHARS`` (at least one): the others (tool results, sub-agent records) are never shown."""
    size = 0
    for n, t in enumerate(turns):
        size += len(transcript_line(t)) if t.turn_id in evidence else 0
        if size > WINDOW_CHARS and n > 0:
            return turns[:n]
    return turns


def prompts_sha(prompts: Mapping[str, Prompt]) -> str:
    """One hash of the prompts that shape what is extracted (S1, S2, S4 and the coding section of S1 and S2,
    when given): when it changes, sessions are re-read."""
    joined = ",".join(f"{name}:{prompts[name].sha256}" for name in ("s1_narrate", "s2_map", "s4_review", "coding")
                      if name in prompts)
    return hashlib.sha256(joined.encode()).hexdigest()


def read_window(store: Store, namespace: str, session_id: str, prompts: Mapping[str, Prompt], *,
                full: bool, max_turns: int | None = None) -> Reading:
    """Read what the next extraction of the session covers, up to ``WINDOW_CHARS`` (and ``max_turns`` turns, at
    least one); ``turns`` is empty when nothing is new."""
    sha = prompts_sha(prompts)
    state = store.extraction_state(namespace, session_id)
    stale = state is not None and state.prompts_sha is not None and state.prompts_sha != sha
    full = full or stale
    base = -1 if full or state is None else state.watermark
    reading = Reading(Window(start=base + 1, end=base, base=base, prompts_sha=sha, full=full),
                      extracted=-1 if state is None or stale else state.watermark)
    after = store.turns(namespace, session_id, start=base + 1)
    if not after:
        return reading
    since = max(state.window_start, base + 1 - _CONTEXT_SCAN) if state is not None and base >= 0 else base + 1
    metadata = store.turn_metadata(namespace, session_id, start=since)
    evidence = evidence_turns(after, metadata)
    reading.turns = _bounded(after, {t.turn_id for t in evidence})
    reading.turns = reading.turns[:max(1, max_turns or len(reading.turns))]
    reading.window = Window(start=reading.turns[0].index, end=reading.turns[-1].index, base=base, prompts_sha=sha,
                            full=full, more=len(reading.turns) < len(after))
    reading.evidence = [t for t in evidence if t.index <= reading.window.end]
    if state is not None and base >= 0:
        earlier = store.turns(namespace, session_id, start=since, stop=base + 1)
        reading.context = evidence_turns(earlier, metadata)[-CONTEXT_TURNS:]
        reading.known = store.memories(namespace, session_id, latest=KNOWN_MEMORIES)
    elif full:
        reading.known = store.memories(namespace, session_id, latest=KNOWN_MEMORIES)
    return reading
