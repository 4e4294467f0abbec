"""Capture validation and turn identity: pure functions, nothing touches the store."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .errors import InvalidInput, InvalidType
from .models import HOST_SESSION, ROLES, Diagnostic, ExtractionReport, Turn, tool_call, tool_use_text
from .validate import MAX_ID_BYTES, check_id, check_json, check_session_id, check_text, take_at_most

__all__ = ("TEXT_PART_TYPES", "CaptureRequest", "content_hash", "first_timestamp", "flatten_content", "fold_tool_fields",
           "normalize_date", "prepare_capture", "turn_id_for")

#: Content-part types whose ``text`` is the turn's text (OpenAI chat ``text``; Responses ``input_text``/``output_text``).
TEXT_PART_TYPES = ("text", "input_text", "output_text")
#: The metadata key holding a turn's non-text content parts (images, audio, files ...), as given.
CONTENT_PARTS_KEY = "content_parts"


class CaptureRequest:
    """A validated capture: the turns, their identities and the request fingerprint."""

    __slots__ = ("session_id", "session_date", "date_given", "turns", "hashes", "idempotency_key", "extraction",
                 "warnings", "append", "_request_hash")

    def __init__(
        self,
        session_id: str,
        session_date: str | None,
        turns: list[Turn],
        idempotency_key: str | None,
        warnings: list[Diagnostic] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_date = session_date
        #: The caller named the date; False when it is the turns' first timestamp or ``append``'s now: then
        #: a session dated already keeps its date without a warning, and the fingerprint leaves it out.
        self.date_given = session_date is not None
        self.turns = turns
        self.hashes = [content_hash(t) for t in turns]
        self.idempotency_key = idempotency_key
        # Known before writing when no extraction will run: stored with the receipt in one write.
        self.extraction: ExtractionReport | None = None
        #: What validation noted without refusing (non-text content parts): copied onto the receipt.
        self.warnings = warnings or []
        #: ``Memory.append``: id-less turns go after the session's last stored turn, whatever their position.
        self.append = False
        self._request_hash: str | None = None

    @property
    def request_hash(self) -> str:
        """Fingerprint of the whole request, compared on idempotent replays (computed on demand)."""
        if self._request_hash is None:
            date = self.session_date if self.date_given else None  # a default date is the turns' or the clock's
            self._request_hash = _request_hash(self.session_id, date, self.turns, self.append)
        return self._request_hash


def content_hash(turn: Turn) -> str:
    """Hash of what makes a turn the same turn: role, name and content."""
    h = hashlib.sha256()
    for part in (turn.role, turn.name or "", turn.content):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def turn_id_for(namespace: str, session_id: str, index: int) -> str:
    """Deterministic, store-independent turn id (stable across SQLite and PostgreSQL)."""
    digest = hashlib.sha256(f"{namespace}\x00{session_id}\x00{index}".encode()).hexdigest()
    return f"t_{digest[:20]}"


def normalize_date(value: str | datetime | None, *, field: str = "session_date") -> str | None:
    """Accept an ISO 8601 string or datetime; return ISO text, or raise InvalidInput naming the field."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if not isinstance(value, str):
        raise InvalidType(f"expected an ISO 8601 string or a datetime, got {type(value).__name__}", field=field)
    try:
        text = value.strip()
        return datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat()
    except ValueError:
        raise InvalidInput(
            f"{value!r} is not an ISO 8601 date such as 2023-05-08T13:56:00", field=field
        ) from None


def prepare_capture(
    session_id: Any,
    turns: Iterable[Turn | Mapping[str, Any]] | None,
    *,
    session_date: str | datetime | None = None,
    idempotency_key: str | None = None,
    max_turns: int,
) -> CaptureRequest:
    """Validate a capture before anything is written.

    Raises:
        InvalidInput: naming the bad field (``session_id``, ``turns``, ``turns[3].role`` ...).
    """
    check_session_id(session_id)
    if session_id == HOST_SESSION:
        raise InvalidInput(f"{HOST_SESSION!r} is where the memories a host adds with remember() are filed: no turn is "
                           "captured under it; capture this session under another id", field="session_id")
    if check_id(idempotency_key, "idempotency_key", optional=True) == "":
        raise InvalidInput("must be a non-empty string, or None", field="idempotency_key")
    if turns is None or isinstance(turns, (str, bytes, Mapping)) or not isinstance(turns, Iterable):
        raise InvalidType(f"must be a list of turns, got {type(turns).__name__}", field="turns")
    raw = take_at_most(turns, max_turns, "turns", "split the capture or raise max_turns_per_capture")
    if not raw:
        raise InvalidInput("the conversation is empty; pass at least one turn", field="turns")
    kept: dict[int, list[str]] = {}
    parsed = [_parse_turn(i, t, kept) for i, t in enumerate(raw)]
    for i, t in enumerate(parsed):
        _refuse_unstorable(t, i)
    if all(not t.content.strip() for t in parsed):
        raise InvalidInput("every turn is blank; there is nothing to capture", field="turns")
    seen: dict[str, int] = {}
    for i, t in enumerate(parsed):
        if t.id is not None:
            if t.id in seen:
                raise InvalidInput(f"duplicate id {t.id!r} (also turns[{seen[t.id]}])", field=f"turns[{i}].id")
            seen[t.id] = i
    request = CaptureRequest(session_id, normalize_date(session_date), parsed, idempotency_key, _parts_note(kept))
    if request.session_date is None:
        request.session_date = first_timestamp(parsed)
    return request


def first_timestamp(turns: Iterable[Turn]) -> str | None:
    """The first ISO 8601 ``timestamp`` of ``turns`` (what a session is dated by when no date is given)."""
    for t in turns:
        try:
            if date := normalize_date(t.timestamp, field="timestamp"):
                return date
        except InvalidInput:
            continue
    return None


def flatten_content(turn: Mapping[str, Any], field: str = "turn") -> tuple[Mapping[str, Any], list[dict[str, Any]]]:
    """A turn whose ``content`` is a list of OpenAI-style parts, made a text turn.

    The text parts (``TEXT_PART_TYPES``) are joined with newlines into ``content``; the other
    parts (``image_url``, ``input_audio``, ``file`` ...) are kept, as given and in order, in
    ``metadata["content_parts"]``. Returns the turn (unchanged when its content is not a list)
    and those other parts.

    Raises:
        InvalidInput: a bad part, named like ``turns[2].content[1].text``.
    """
    parts = turn.get("content")
    if not isinstance(parts, list):
        return turn, []
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        where = f"{field}.content[{j}]"
        if not isinstance(part, Mapping):
            raise InvalidInput(f'expected a content part such as {{"type": "text", "text": "..."}}, '
                               f"got {type(part).__name__}", field=where)
        kind = part.get("type")
        if not isinstance(kind, str) or not kind:
            raise InvalidInput("a content part needs its type: text, image_url, input_audio, file ...",
                               field=f"{where}.type")
        if kind not in TEXT_PART_TYPES:
            others.append(dict(part))
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise InvalidInput(f"a {kind} part needs its text as a string", field=f"{where}.text")
    metadata = turn.get("metadata")
    if others:
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInput("must be a dict (it receives the non-text content parts)", field=f"{field}.metadata")
        if metadata is not None and CONTENT_PARTS_KEY in metadata:
            raise InvalidInput(f"{CONTENT_PARTS_KEY!r} is where the non-text parts of a list content go; "
                               "rename this key", field=f"{field}.metadata.{CONTENT_PARTS_KEY}")
        metadata = {**(metadata or {}), CONTENT_PARTS_KEY: others}
    return {**turn, "content": "\n".join(texts), "metadata": metadata}, others


def _parts_note(kept: dict[int, list[str]]) -> list[Diagnostic]:
    """One warning naming the turns whose non-text parts were kept in metadata, not searched."""
    if not kept:
        return []
    kinds = sorted({k for ks in kept.values() for k in ks})
    where = ", ".join(f"turns[{i}]" for i in kept)
    return [Diagnostic(stage="capture", code="content_parts_kept",
                       message=f"{sum(map(len, kept.values()))} non-text content part(s) ({', '.join(kinds)}) of "
                               f"{where} kept in metadata[{CONTENT_PARTS_KEY!r}]: stored, not searchable",
                       detail={"turns": {str(i): ks for i, ks in kept.items()}})]


#: The OpenAI chat-completions fields of a message that calls tools or answers one, beside role, content and name.
TOOL_FIELDS = ("tool_calls", "function_call", "tool_call_id")


def fold_tool_fields(turn: Mapping[str, Any], field: str = "turn") -> Mapping[str, Any]:
    """An OpenAI-style message that calls tools or answers one, made a turn as transcript ingestion keeps one.

    ``tool_calls`` (and the older ``function_call``) are added to the text as ``[tool_use name arg=…]``, one
    line per call after what the message says (a ``None`` content is then no text), and kept whole in
    ``metadata["tool_uses"]``; a tool message's ``tool_call_id`` goes to ``metadata["tool_call_id"]``.
    Returns the turn unchanged when it has none of these fields.

    Raises:
        InvalidInput: a field of the wrong shape, or ``metadata`` already holding one of those keys.
    """
    if not any(k in turn for k in TOOL_FIELDS):
        return turn
    raw = turn.get("tool_calls") or []
    if not isinstance(raw, (list, tuple)) or not all(isinstance(c, Mapping) for c in raw):
        raise InvalidType("must be a list of tool calls, e.g. [{'id': 'c1', 'type': 'function', 'function': "
                          "{'name': 'search', 'arguments': '{}'}}]", field=f"{field}.tool_calls")
    legacy = turn.get("function_call")
    if legacy is not None and not isinstance(legacy, Mapping):
        raise InvalidType("must be a dict {'name': ..., 'arguments': ...}", field=f"{field}.function_call")
    ident = turn.get("tool_call_id")
    if ident is not None and not isinstance(ident, str):
        raise InvalidType(f"must be the id of the call this message answers (a str), got {type(ident).__name__}",
                          field=f"{field}.tool_call_id")
    metadata = turn.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidInput("must be a dict (it receives the message's tool fields)", field=f"{field}.metadata")
    calls = [tool_call(c) for c in [*raw, *([legacy] if legacy else [])]]
    added = {**({"tool_uses": calls} if calls else {}), **({"tool_call_id": ident} if ident is not None else {})}
    if metadata is not None and (clash := sorted(added.keys() & metadata.keys())):
        raise InvalidInput(f"{clash[0]!r} is where the message's tool fields go; rename this key",
                           field=f"{field}.metadata.{clash[0]}")
    out = {k: v for k, v in turn.items() if k not in TOOL_FIELDS}
    if calls:
        said = out.get("content")
        said = said.strip() if isinstance(said, str) else ""
        out["content"] = "\n".join(p for p in (said, *(tool_use_text(c["name"], c["input"]) for c in calls)) if p)
    if added:
        out["metadata"] = {**(metadata or {}), **added}
    return out


def _parse_turn(i: int, value: Turn | Mapping[str, Any], kept: dict[int, list[str]]) -> Turn:
    if isinstance(value, Turn):
        return value
    if not isinstance(value, Mapping):
        raise InvalidType(f"expected a dict or Turn, got {type(value).__name__}", field=f"turns[{i}]")
    value, others = flatten_content(value, f"turns[{i}]")
    value = fold_tool_fields(value, f"turns[{i}]")
    if others:
        kept[i] = [str(p["type"]) for p in others]
    role = value.get("role")
    if role is None:  # as a missing content is said: not "unknown role None"
        raise InvalidInput(f"Field required: give each turn a role, one of {', '.join(ROLES)}",
                           field=f"turns[{i}].role")
    if role not in ROLES:
        raise InvalidInput(f"unknown role {role!r}; use one of {', '.join(ROLES)}", field=f"turns[{i}].role")
    if value.get("content", "") is None:
        raise InvalidType("is None: give the message's text (\"\" for none), or the tool_calls it makes",
                          field=f"turns[{i}].content")
    try:
        return Turn.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        kind = InvalidType if err["type"].endswith("_type") else InvalidInput
        raise kind(err["msg"], field=f"turns[{i}].{loc}" if loc else f"turns[{i}]") from None


def _refuse_unstorable(turn: Turn, i: int) -> None:
    """Refuse what no engine stores faithfully: NUL (PostgreSQL cannot), lone surrogates (not UTF-8), ids too
    long to index, and metadata that is not plain JSON (see ``validate``)."""
    # ASCII text without NUL passes every check: only other text pays for them (and for its field's name).
    for field in ("content", "name", "timestamp"):
        value = getattr(turn, field)
        if value is not None and ("\x00" in value or not value.isascii()):
            check_text(value, f"turns[{i}].{field}")
    ident = turn.id
    if ident is not None and not (ident.__class__ is str and ident.isascii() and len(ident) <= MAX_ID_BYTES
                                  and "\x00" not in ident):
        check_id(ident, f"turns[{i}].id", optional=True)
    if turn.metadata is not None:
        check_json(turn.metadata, f"turns[{i}].metadata")


def _request_hash(session_id: str, session_date: str | None, turns: list[Turn], append: bool = False) -> str:
    # An append and a capture of the same turns are different requests (a key reused across them conflicts).
    head: list[Any] = [session_id, session_date, "append"] if append else [session_id, session_date]
    body = json.dumps(
        [*head, [t.model_dump(mode="json") for t in turns]],
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
