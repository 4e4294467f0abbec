"""Memory read back into a conversation: a memory block, and the JSON the ``tortoise`` command prints.

A host shows memory to the agent as a block (``models.MEMORY_BLOCK``). Memory also comes back by
other paths: what ``tortoise memories --json``, ``search --json``, ``expand --json`` or ``context
--json`` printed reaches the transcript in a tool result whose command is not a visible call of
``tortoise`` (``cat out.json``, a script that ran it), or pasted by the person, or quoted by the
agent. It is a copy of the memory, never evidence of it: ranked, the next block would point at the
copy; grounded, extraction would draw a memory from a memory (and count the copy as a second
source of it).

The command's JSON is told by its shape: an object whose first two keys are, in order, the ones the
command prints first for one of its records, with a value only this package writes:

- ``{"id": "m_…" or "t_…", "kind": …``: a memory (``memories``, a version in ``expand``), what
  ``expand`` printed, a pointer of ``context``;
- ``{"turn_id": "t_…", "external_id": …``: a hit of ``search``, a source, a turn around an expanded one;
- ``{"query": "…", "terms": [``: what ``search`` printed;
- ``{"block": "…", "pointers": [``: what ``context`` printed; or ``{"block": "[tortoise memory]…`` alone, the
  block's own marker: a host that stores a tool result's first characters (Claude Code's 300) cuts it inside
  the block, before ``"pointers"``.

Spacing between the tokens is free (``jq -c``, a re-indented paste), and so are the line numbers Claude
Code's Read tool puts before each line of a file the JSON was saved to (``     3→    "id": …``). The object runs to its closing
brace, its strings read as JSON reads them (a brace inside a memory's text closes nothing); one cut
short (``| head``, a truncated paste) runs to the end of the text, as a block without its end line
does. What the text says before and after it is its own.
"""

from __future__ import annotations

import re

from .models import MEMORY_BLOCK

__all__ = ("CLI_JSON", "REST_OF_PARAGRAPH", "cli_json_spans", "without_cli_json", "without_read_back")

#: A JSON string, escapes included (unrolled: linear on a long string).
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
#: Where the command starts a line (after ``{`` and ``,``): spacing, and the line numbers Claude Code's Read tool
#: puts before each line of a file (``     3→``).
_GAP = r"\s*(?:\d+→\s*)?"
#: The opening of one of the command's JSON records (see the module docstring).
CLI_JSON = re.compile(
    rf'\{{{_GAP}(?:"id"\s*:\s*"[tm]_[0-9a-f]{{6,}}"\s*,{_GAP}"kind"\s*:'
    rf'|"turn_id"\s*:\s*"t_[0-9a-f]{{6,}}"\s*,{_GAP}"external_id"\s*:'
    rf'|"query"\s*:\s*{_STRING}\s*,{_GAP}"terms"\s*:\s*\['
    rf'|"block"\s*:\s*(?:{_STRING}\s*,{_GAP}"pointers"\s*:\s*\[|"(?i:\[tortoise memory\])))')
#: A string (to its closing quote, or to the end of a text cut inside it) or a bracket: what the closing brace is
#: looked for among.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[{}\[\]]')
#: After a copy of memory, the rest of its paragraph: up to a blank line (or one of only ``>``), or the end.
REST_OF_PARAGRAPH = r"[^\n]*(?:\n(?![ \t>]*(?:\n|\Z))[^\n]*)*"
_PARAGRAPH = re.compile(REST_OF_PARAGRAPH)


def _closing(text: str, start: int) -> int:
    """The end of the JSON value opened at ``start`` (past its closing bracket), or ``len(text)`` when it is cut."""
    depth = 0
    for token in _TOKEN.finditer(text, start):
        first = token.group()[0]
        if first == '"':
            continue
        depth += 1 if first in "{[" else -1
        if depth == 0:
            return token.end()
    return len(text)


def cli_json_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds the command's JSON, as ``(start, end)`` offsets, in order and apart."""
    spans: list[tuple[int, int]] = []
    at = 0
    while (found := CLI_JSON.search(text, at)) is not None:
        end = _closing(text, found.start())
        spans.append((found.start(), end))
        at = end
    return spans


def without_cli_json(text: str, repl: str = " ", *, paragraph: bool = False) -> str:
    """``text`` with each of the command's JSON records replaced by ``repl``; with ``paragraph``, the rest of the
    paragraph after each too (the agent's words right after it are its copy, as after a block it printed)."""
    if "{" not in text:
        return text
    spans = cli_json_spans(text)
    if not spans:
        return text
    out, at = [], 0
    for start, end in spans:
        if start < at:  # inside the paragraph cut after the previous one
            continue
        if paragraph:
            end = _PARAGRAPH.match(text, end).end()  # type: ignore[union-attr]  # it matches the empty string
        out += [text[at:start], repl]
        at = end
    out.append(text[at:])
    return "".join(out)


def without_read_back(text: str, repl: str = " ") -> str:
    """``text`` with the memory read back in it (memory blocks, the command's JSON) replaced by ``repl``."""
    return MEMORY_BLOCK.sub(repl, without_cli_json(text, repl))
