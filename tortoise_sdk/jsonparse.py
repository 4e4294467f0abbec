"""Read JSON out of a model reply, recovering what can honestly be recovered.

The ladder, first success wins:

1. ``strict``: the whole reply is JSON.
2. ``stripped_fences`` / ``extracted``: the JSON sits in a markdown fence or
   between prose; each ``{`` or ``[`` in turn is tried as its start until one
   begins a complete value of the expected shape (prose brackets such as
   ``turn [0]`` or ``{curly}`` are passed over), and prose after it is ignored.
3. ``closed_tail``: the reply stops after a complete value (e.g. the output
   cap hit just before the last brackets): the open brackets are closed.
4. ``kept_complete_items``: the reply stops inside a value: everything back
   to the last complete item is kept, the cut item is dropped.

Steps 3 and 4 set ``partial``. Recovery never invents content: a cut string,
number or literal is dropped, never closed, and an element of a list is kept
only whole, so a recovered list is always a prefix of the list the model was
writing. Anything else raises :class:`~tortoise_sdk.errors.MalformedOutput`
with ``error_class`` ``"truncation"`` (the reply ran out and nothing complete
was left) or ``"parse"`` (it is not JSON). An empty or garbage reply is never
turned into an empty result.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from tortoise_sdk.errors import MalformedOutput

__all__ = ("Expect", "ParsedJSON", "parse_json")

Expect = Literal["object", "list", "any"]

_DECODER = json.JSONDecoder(strict=False)
# A markdown fence opens and closes a line of its own (up to three spaces in): three backticks inside
# a JSON string ({"code": "```py ..."}) are neither.
_FENCE = re.compile(r"^[ \t]{0,3}```[^\n`]*\n(.*?)(?:^[ \t]{0,3}```|\Z)", re.DOTALL | re.MULTILINE)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBERISH = re.compile(r"[-+0-9.eE]+")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_WS = " \t\r\n"
_BODY_LIMIT = 4000


@dataclass(frozen=True)
class ParsedJSON:
    """A parsed reply: the value, whether it was cut short, and the ladder steps taken."""

    value: Any
    partial: bool = False
    steps: list[str] = field(default_factory=list)


def parse_json(text: str, expect: Expect = "object") -> ParsedJSON:
    """Parse a model reply as JSON, climbing the recovery ladder as far as needed.

    Args:
        text: the reply text.
        expect: ``"object"`` or ``"list"`` requires that container at the top
            (a list wrapped alone in an object, as JSON mode forces, is
            unwrapped); ``"any"`` accepts every JSON value.

    Raises:
        MalformedOutput: ``error_class="truncation"`` when the reply was cut
            before anything complete, ``"parse"`` when it is not JSON.
    """
    if not isinstance(text, str) or not text.strip():
        raise _fail("parse", "the reply is empty; expected JSON", text)
    stripped = text.strip()
    try:
        return _shape(_DECODER.decode(stripped), expect, ["strict"], False, text)
    except ValueError:
        pass

    steps: list[str] = []
    # Trailing whitespace is kept: it shows that a final number is complete.
    body = text.lstrip()
    for fenced in _FENCE.finditer(body):
        inner = fenced.group(1).lstrip()
        try:
            return _shape(_DECODER.decode(inner), expect, ["stripped_fences"], False, text)
        except ValueError:
            pass
        if "{" in inner or "[" in inner:
            body = inner
            steps.append("stripped_fences")
            break

    start, failure = _extract(body, expect, steps, text)
    if isinstance(start, ParsedJSON):
        return start
    if start is None:
        raise failure or _fail("parse", f"no JSON {_noun(expect)} in the reply", text)
    scan = _scan(body, start)
    if scan.cut is None:
        raise _fail("truncation", "the reply was cut off before any complete value", text)
    cut, closers = scan.cut
    try:
        value = _DECODER.decode(body[start:cut] + closers)
    except ValueError as exc:  # e.g. a bad escape the scanner does not check
        raise _fail("parse", f"could not close the truncated reply: {exc}", text) from exc
    if not _has_leaf(value):
        raise _fail("truncation", "the reply was cut off before any complete item", text)
    if start > 0:
        steps.append("extracted")
    steps.append("closed_tail" if not body[cut:].strip(_WS) else "kept_complete_items")
    return _shape(value, expect, steps, True, text)


def _extract(body: str, expect: Expect, steps: list[str], text: str) -> tuple[ParsedJSON | int | None,
                                                                            MalformedOutput | None]:
    """Try each bracket of ``body`` in order as the start of the reply's JSON.

    Returns the parsed value of the expected shape, else the start of a value the
    reply was cut inside (for the truncation ladder), else None with the first
    failure. A bracket that starts valid JSON of another shape is skipped whole,
    and one that starts invalid JSON is skipped up to where it went wrong, so an
    item inside a list or a broken reply is never taken for the reply; prose
    brackets (``turn [0]``, ``{curly}``) are passed over.
    """
    failure: MalformedOutput | None = None
    at = _first_bracket(body, 0)
    while at is not None:
        try:
            value, end = _DECODER.raw_decode(body, at)
        except ValueError:
            scan = _scan(body, at)
            if scan.error is None:
                return at, failure
            failure = failure or _fail("parse", f"invalid JSON at offset {scan.error}", text)
            at = _first_bracket(body, max(scan.error, at + 1))
            continue
        try:
            return _shape(value, expect, [*steps, "extracted"], False, text), None
        except MalformedOutput as exc:
            failure = failure or exc
        at = _first_bracket(body, end)
    return None, failure


def _shape(value: Any, expect: Expect, steps: list[str], partial: bool, text: str) -> ParsedJSON:
    if expect == "any":
        return ParsedJSON(value, partial, steps)
    if expect == "object":
        if isinstance(value, dict):
            return ParsedJSON(value, partial, steps)
        raise _fail("parse", f"expected a JSON object, got {_kind(value)}", text)
    if isinstance(value, list):
        return ParsedJSON(value, partial, steps)
    if isinstance(value, dict) and len(value) == 1:
        (inner,) = value.values()
        if isinstance(inner, list):
            return ParsedJSON(inner, partial, [*steps, "unwrapped"])
    raise _fail("parse", f"expected a JSON list, got {_kind(value)}", text)


def _fail(error_class: str, message: str, text: Any) -> MalformedOutput:
    body = text[:_BODY_LIMIT] if isinstance(text, str) else text
    return MalformedOutput(message, error_class=error_class, body=body)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _noun(expect: Expect) -> str:
    return {"object": "object", "list": "list", "any": "value"}[expect]


def _first_bracket(text: str, start: int) -> int | None:
    # The outermost bracket, whatever the expected shape: starting inside a
    # list to find an object would return one item as if it were the reply.
    found = [i for i in (text.find("{", start), text.find("[", start)) if i >= 0]
    return min(found) if found else None


def _has_leaf(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_leaf(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_leaf(v) for v in value)
    return True


@dataclass
class _Frame:
    closer: str
    is_item: bool
    state: str  # "first" (just opened), "key", "colon", "value", "comma"


@dataclass
class _Scan:
    cut: tuple[int, str] | None = None
    error: int | None = None


def _scan(text: str, start: int) -> _Scan:
    """Walk a JSON document that may stop early, remembering the last safe place to close it.

    A safe place follows a complete value while no open container is itself a
    list element (closing one would alter an item). Reaching the end of the
    text is truncation; anything else unexpected is a syntax error.
    """
    result = _Scan()
    stack: list[_Frame] = []
    items_open = 0
    n = len(text)
    i = start

    def mark(end: int) -> None:
        if items_open == 0:
            result.cut = (end, "".join(f.closer for f in reversed(stack)))

    def value_done(end: int) -> None:
        if stack:
            stack[-1].state = "comma"
        mark(end)

    def error(at: int) -> _Scan:
        return _Scan(result.cut, at)

    while i < n:
        c = text[i]
        if c in _WS:
            i += 1
            continue
        top = stack[-1] if stack else None
        in_list = top is not None and top.closer == "]"
        wants_value = top is None or top.state == "value" or (in_list and top.state == "first")
        wants_key = top is not None and not in_list and top.state in ("first", "key")
        if c in "{[":
            if not wants_value:
                return error(i)
            stack.append(_Frame("}" if c == "{" else "]", in_list, "first"))
            items_open += in_list
            i += 1
            mark(i)
        elif c in "}]":
            if top is None or c != top.closer or top.state not in ("first", "comma"):
                return error(i)
            stack.pop()
            items_open -= top.is_item
            i += 1
            if not stack:
                return _Scan((i, ""), None)
            value_done(i)
        elif c == ",":
            if top is None or top.state != "comma":
                return error(i)
            top.state = "value" if in_list else "key"
            i += 1
        elif c == ":":
            if top is None or in_list or top.state != "colon":
                return error(i)
            top.state = "value"
            i += 1
        elif c == '"':
            if not (wants_key or wants_value):
                return error(i)
            end = _string_end(text, i)
            if end is None:
                return result
            if wants_key:
                top.state = "colon"  # type: ignore[union-attr]
            else:
                value_done(end)
            i = end
        else:
            if not wants_value:
                return error(i)
            literal = next((w for w in _LITERALS if text.startswith(w, i)), None)
            if literal is not None:
                i += len(literal)
                value_done(i)
                continue
            if any(w.startswith(text[i:]) for w in _LITERALS):
                return result
            token = _NUMBERISH.match(text, i)
            if token is None:
                return error(i)
            if token.end() >= n:
                return result  # the number may go on: 1. 1e 12
            if _NUMBER.fullmatch(token.group()) is None:
                return error(i)
            i = token.end()
            value_done(i)
    return result


def _string_end(text: str, i: int) -> int | None:
    """Index just past the closing quote of the string opening at ``i``, or None if it never closes."""
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        else:
            j += 1
    return None
