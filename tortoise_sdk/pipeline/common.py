"""Helpers the stages share: the transcript format, error diagnostics, running async code from sync."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from ..errors import ModelError
from ..models import Diagnostic, MemoryRecord, SearchHit
from ..readback import without_read_back

__all__ = ("diagnostic", "format_context", "format_known", "format_transcript", "run_sync")

T = TypeVar("T")


#: A turn longer than this (a pasted log, a file) is shown to the model by its head and tail: one paste must not
#: push a prompt past the model's context, which failed every stage of the session on every retry.
PROMPT_TURN_HEAD = 4_000
PROMPT_TURN_TAIL = 2_000


def format_transcript(turns: Sequence[SearchHit]) -> str:
    """One line per turn, ``[index] Speaker: text``; the index is what replies cite as ``turn``.

    A turn's text longer than ``PROMPT_TURN_HEAD + PROMPT_TURN_TAIL`` characters shows its head and its tail around
    ``… [N characters not shown] …`` (the stored turn stays whole; a quote is grounded against it).
    """
    return "\n".join(transcript_line(t) for t in turns)


def transcript_line(t: SearchHit) -> str:
    """A turn's line in ``format_transcript``."""
    # memory read back into a turn (a block, the tortoise command's JSON) is an echo of memory: the model never
    # reads it as the conversation's
    text = " ".join(without_read_back(t.content, " [memory block not shown] ").split())
    if len(text) > PROMPT_TURN_HEAD + PROMPT_TURN_TAIL:
        cut = len(text) - PROMPT_TURN_HEAD - PROMPT_TURN_TAIL
        text = f"{text[:PROMPT_TURN_HEAD]} … [{cut} characters not shown] … {text[-PROMPT_TURN_TAIL:]}"
    return f"[{t.index}] {t.name or t.role}: {text}"


def format_context(turns: Sequence[SearchHit]) -> str:
    """Earlier turns shown read-only (already extracted), in the transcript format, or why there are none."""
    return format_transcript(turns) if turns else "(none: these are the first turns read from this conversation)"


def format_known(memories: Sequence[MemoryRecord]) -> str:
    """What the conversation's earlier turns already gave, one memory a line, or ``(nothing yet)``."""
    if not memories:
        return "(nothing yet)"
    lines = []
    for m in memories:
        when = f" (when: {m.when})" if m.when else ""
        lines.append(f"- [{m.kind}] {' '.join(m.content.split())}{when}")
    return "\n".join(lines)


def diagnostic(stage: str, exc: BaseException, what: str, **detail: Any) -> Diagnostic:
    """A stage failure as a Diagnostic whose code is the error class (rate_limit, parse, ...)."""
    if isinstance(exc, ModelError):
        code = exc.error_class
        detail.setdefault("status_code", exc.status_code)
    else:
        code = type(exc).__name__
    return Diagnostic(stage=stage, code=code, message=f"{what}: {exc}", detail=detail or None)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop running: run it here, below
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coro).result()
    # Outside the except block: raised inside it, every model error would chain this RuntimeError
    # as its context instead of its transport cause (a refused connection then reads as a 500).
    return asyncio.run(coro)
