"""S1: narrate the session chunk by chunk (concurrently, bounded) and compile the stories in order."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..models import Diagnostic, MemoryRecord, SearchHit
from ..text import jaccard
from .common import diagnostic, format_context, format_known, format_transcript
from .prompts import Prompt

__all__ = ("NarrationResult", "chunk_turns", "compile_stories", "narrate")

#: Sentences at a chunk seam at least this similar (token Jaccard) to a sentence just before are dropped.
SEAM_SIMILARITY = 0.8
_SEAM_WINDOW = 3
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
S1_MAX_TOKENS = 1024
#: A later chunk sees this many turns of the chunk before it, read-only.
CONTEXT_TAIL = 4


@dataclass
class NarrationResult:
    """Each chunk's story (None when it failed), the compiled story, and the failures."""

    stories: list[str | None]
    story: str
    errors: list[Diagnostic] = field(default_factory=list)


def chunk_turns(turns: Sequence[SearchHit], size: int) -> list[list[SearchHit]]:
    """Consecutive chunks of at most ``size`` turns."""
    return [list(turns[i:i + size]) for i in range(0, len(turns), size)]


async def narrate(client: object, prompt: Prompt, turns: Sequence[SearchHit], *, session_date: str | None,
                  size: int, concurrency: int, context: Sequence[SearchHit] = (),
                  known: Sequence[MemoryRecord] = (), coding: str = "") -> NarrationResult:
    """Narrate every chunk, at most ``concurrency`` at a time; a failed chunk is recorded, the rest go on.

    Each chunk sees the turns just before it read-only (``context`` for the first chunk, the end
    of the previous chunk for the others) and what the conversation already gave (``known``);
    ``coding`` fills the prompt's ``{coding}`` section (``prompts.coding_section``).
    """
    chunks = chunk_turns(turns, size)
    gate = asyncio.Semaphore(max(1, concurrency))
    known_text = format_known(known)

    async def one(n: int, chunk: list[SearchHit]) -> str | Diagnostic:
        before = list(context) if n == 0 else chunks[n - 1][-CONTEXT_TAIL:]
        text = prompt.render(
            session_date=session_date or "unknown", chunk_number=n + 1, chunk_count=len(chunks),
            first_turn=chunk[0].index, last_turn=chunk[-1].index, transcript=format_transcript(chunk),
            context=format_context(before), known=known_text, coding=coding,
        )
        async with gate:
            try:
                result = await client.acomplete("s1", [{"role": "user", "content": text}], chunk=n,  # type: ignore[attr-defined]
                                                max_tokens=S1_MAX_TOKENS)
            except Exception as exc:  # noqa: BLE001 - a chunk's failure is data, never raised
                return diagnostic("s1", exc, f"chunk {n} (turns {chunk[0].index}-{chunk[-1].index}) failed",
                                  chunk=n)
        story = result.text.strip()
        if not story:
            return Diagnostic(stage="s1", code="empty", message=f"chunk {n} returned no story", detail={"chunk": n})
        return story

    outcomes = await asyncio.gather(*(one(n, c) for n, c in enumerate(chunks)))
    stories = [o if isinstance(o, str) else None for o in outcomes]
    errors = [o for o in outcomes if isinstance(o, Diagnostic)]
    return NarrationResult(stories, compile_stories(stories), errors)


def compile_stories(stories: Sequence[str | None]) -> str:
    """Join the chunk stories in order, dropping near-duplicate sentences where one chunk meets the next."""
    seen: list[str] = []
    paragraphs: list[str] = []
    for story in stories:
        if not story:
            continue
        sentences = [s for s in _SENTENCE.split(story.strip()) if s.strip()]
        tail = seen[-_SEAM_WINDOW:]
        head = 0
        while head < min(_SEAM_WINDOW, len(sentences)) and any(
            jaccard(sentences[head], prior) >= SEAM_SIMILARITY for prior in tail
        ):
            head += 1
        if sentences[head:]:
            seen.extend(sentences[head:])
            paragraphs.append(" ".join(sentences[head:]))
    return "\n\n".join(paragraphs)
