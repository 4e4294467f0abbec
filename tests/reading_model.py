"""A stand-in model that answers the extraction prompts from what they show, for the stub's ``responder=``.

A chat replayed exchange by exchange is extracted in many windows whose bounds
depend on the batching, so its replies cannot be scripted in advance. This one
reads each prompt as a careful model would and answers from its new turns only:

- S1 retells the new turns, one sentence each (who said what, the first words);
- S2 remembers one point for every turn of at least ``MIN_WORDS`` words whose
  index is a multiple of ``EVERY``, quoting that turn's first words verbatim and
  citing its index (never a context turn: those are under another heading);
- S4 finds nothing to change.

``S2Prompt`` splits a recorded S2 prompt into its sections, so tests can check
which turns an extraction read as new and which as context.

Used by tests/test_loop.py and benchmarks/bench_loop.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ("EVERY", "MIN_WORDS", "S2Prompt", "answer", "line_of")

#: S2 remembers turns whose index is a multiple of this ...
EVERY = 3
#: ... and that say at least this many words.
MIN_WORDS = 8
_QUOTE_WORDS = 8
_LINE = re.compile(r"^\[(\d+)\] ([^:\n]+): (.*)$")
_NEW = "New turns (each line is [turn index] speaker: text):"
_CONTEXT = "Earlier turns (read-only context"


def line_of(index: int, speaker: str, text: str) -> str:
    """A turn as the prompts show it (``format_transcript``): ``[index] speaker: text`` on one line."""
    return f"[{index}] {speaker}: {' '.join(text.split())}"


def _lines(section: str) -> list[tuple[int, str, str]]:
    found = []
    for line in section.splitlines():
        m = _LINE.match(line)
        if m:
            found.append((int(m.group(1)), m.group(2), m.group(3)))
        elif found and not line.strip():
            break  # the transcript ends at the first blank line after it
    return found


@dataclass(frozen=True)
class S2Prompt:
    """An S2 prompt's new turns and context turns, as ``(index, speaker, text)``."""

    new: list[tuple[int, str, str]]
    context: list[tuple[int, str, str]]

    @classmethod
    def parse(cls, prompt: str) -> S2Prompt:
        new = _lines(prompt.split(_NEW, 1)[1]) if _NEW in prompt else []
        context = []
        if _CONTEXT in prompt:
            context = _lines(prompt.split(_CONTEXT, 1)[1].split("\n", 1)[1].split(_NEW, 1)[0])
        return cls(new, context)


def _new_turns(prompt: str) -> list[tuple[int, str, str]]:
    # S1 and S4 put the new turns last too, under the same heading.
    return _lines(prompt.rsplit(_NEW, 1)[1]) if _NEW in prompt else []


def answer(request: Any) -> dict[str, Any] | None:
    """The reply to one stub request (a ``StubRequest``), by its ``X-Tortoise-Stage``."""
    turns = _new_turns(request.prompt)
    if request.stage == "s1":
        story = " ".join(f"{who} said: {' '.join(text.split()[:12])}." for _, who, text in turns)
        return {"content": story or "Nothing new was said."}
    if request.stage == "s2":
        points, names = [], []
        for index, who, text in turns:
            words = text.split()
            if index % EVERY or len(words) < MIN_WORDS:
                continue
            quote = " ".join(words[:_QUOTE_WORDS])
            points.append({"content": f"{who} said that {quote}", "about": [who], "quote": quote, "turn": index,
                           "search_keys": [w.strip(".,!?").lower() for w in words[:3]]})
            if who not in names:
                names.append(who)
        return {"content": json.dumps({"entities": [{"name": n, "kind": "person"} for n in names], "events": [],
                                       "points": points, "retractions": []})}
    if request.stage == "s4":
        return {"content": json.dumps({"entities": [], "events": [], "points": [], "retractions": []})}
    return None
