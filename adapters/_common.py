"""What every framework adapter does with ``Memory``: read a block before a model call, capture after a turn.

Both fail open: a memory failure is logged on the adapter module's logger and
the host's call goes on without memory.

The pointers a session's blocks showed in its last ``shown_turns`` host turns are
kept in the store (a cursor named ``reflex:shown:<session_id>``, so a new process
continues the conversation) and passed to ``Memory.context`` as prior context: a
pointer comes back only when the user asks again ("remind me ...", a question) or
after that many host turns.

The host holds the messages it sends: the stored turns of the current session among them are
not memory to show it again. ``_context`` takes those messages as turns (converted as
the adapter captures them) and passes ``Memory.context`` the index of the session's first
stored turn among them (``first_held_index``: laid over the stored turns from the end, by message id
or by role and text) as ``held_from``: turns the host trimmed away before it are memory again, turns of
earlier sessions always are.
"""

from __future__ import annotations

import bisect
import ipaddress
import logging
from collections.abc import Callable, Iterable, Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any

from ..errors import AdapterError, CaptureConflict
from ..models import SHOWN_CURSOR, CaptureReceipt, JobInfo, MemoryBlock, tool_use_text, utc_now
from ..memory import storable

if TYPE_CHECKING:
    from ..memory import ExtractMode, Memory

__all__ = ("DEFAULT_SHOWN_TURNS", "MemoryAdapter", "before_model_extract", "check_memory", "check_session_id", "first_held_index", "is_loopback", "storable_turns", "tool_use_text")

#: Pointers a block showed in this many recent host turns of a session are not shown again unasked.
DEFAULT_SHOWN_TURNS = 3


def check_session_id(session_id: object) -> str:
    """``session_id`` if it is a non-blank string: a blank one would leave every run without memory.

    Raises:
        AdapterError: it is not.
    """
    if not isinstance(session_id, str) or not session_id.strip():
        raise AdapterError(f"session_id must be a non-empty string, e.g. MemorySession(mem, 'chat-42'), got "
                           f"{session_id!r}")
    return session_id


def check_memory(mem: object, adapter: str) -> None:
    """Refuse, when the adapter is built, what is not a ``Memory``: its calls would fail open on every turn after.

    Raises:
        AdapterError: ``mem`` is a path, an ``AsyncMemory`` or anything else but a ``Memory``.
    """
    from ..memory import Memory

    if isinstance(mem, Memory):
        return
    if isinstance(getattr(mem, "sync", None), Memory):
        raise AdapterError(f"{adapter} takes a Memory, not an AsyncMemory: pass its .sync (the adapter runs "
                           "the blocking calls itself)")
    example = f"Memory({str(mem)!r})" if isinstance(mem, (str, PathLike)) else "Memory('memory.db')"
    raise AdapterError(f"{adapter} takes a Memory, got {type(mem).__name__}: pass {example}")


def before_model_extract(extract: ExtractMode) -> ExtractMode:
    """The ``extract`` of a capture made before the host's model call: never inline, which would delay that call (a
    background capture folds into the session's job as usual; the turn's later capture extracts inline)."""
    return extract if extract == "background" else False


def storable_turns(turns: Iterable[dict[str, Any]], session_id: str, log: logging.Logger,
                   told: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """``turns`` as a store can hold them: a NUL or a lone surrogate in a turn's content, name or metadata (a pasted
    binary, a tool's output read from a binary file) becomes U+FFFD, as transcript ingestion stores it.

    Capture refuses such text, and an adapter cannot ask the host to fix a user's, a model's or a tool's message:
    refused, the whole exchange was lost. Always the same replacement, so a message sent again is the same turn.
    A warning names each changed message once (``told``: the (session, message id) pairs said already).
    """
    out = []
    for turn in turns:
        fixed = {k: storable(v) for k in ("content", "name", "metadata") if (v := turn.get(k)) is not None}
        changed = [k for k, v in fixed.items() if v != turn[k]]
        if changed:
            turn = {**turn, **fixed}
            if (session_id, str(turn.get("id"))) not in told:
                told.add((session_id, str(turn.get("id"))))
                log.warning("tortoise: message %r of %s held a NUL or an unpaired surrogate (in its %s), which no store "
                            "keeps: stored with U+FFFD in its place", turn.get("id"), session_id, " and ".join(changed))
        out.append(turn)
    return out


#: How many of a session's latest turns ``first_held_index`` reads first, per message the host sends (at least
#: ``_TAIL_MIN``); when they cannot settle the walk, the whole session is read.
_TAIL_PER_MESSAGE = 4
_TAIL_MIN = 64


def first_held_index(mem: Memory, session_id: str, held: Iterable[dict[str, Any] | None]) -> int | None:
    """The index of ``session_id``'s first stored turn the host still sends, to pass ``Memory.context`` as
    ``held_from``; None when it sends none of them.

    ``held`` (the turns the host sends, oldest first) is laid over the stored turns from the end: newest first,
    each is the latest stored turn before the one the newer turn matched, by ``id`` or by role and text, and
    one that matches none is passed over. A text said early in the session too ("ok") is so the recent turn,
    not the early one. The host's turns after the newest that is the last stored turn are not stored yet:
    they match nothing (a new "ok" would have matched an earlier one).

    Only the session's latest turns are read (``Memory.turns(last=...)``), a few per message sent: a match found
    in them is the one the whole session gives. A message that matches none of them may match an older turn: then
    the whole session is read (as it was for every host turn: 155 ms a turn 20,000 turns into a session); so it is
    when a message matched one of them by its text only and its id is stored further back (looked up by id).
    """
    sent = [t for t in held if t is not None]
    if not sent:
        return None
    tail = max(_TAIL_PER_MESSAGE * len(sent), _TAIL_MIN)
    stored = mem.turns(session_id, last=tail)
    found, sure, by_text = _lay_over(sent, stored)
    if len(stored) < tail:
        return found
    # A message matched by its text whose id is stored further back is that older turn (its id first).
    if sure and (not by_text or all(h.index >= stored[0].index
                                    for h in mem.turns(session_id, external_ids=by_text))):
        return found
    return _lay_over(sent, mem.turns(session_id))[0]


def _lay_over(sent: Sequence[dict[str, Any]], stored: Sequence[Any]) -> tuple[int | None, bool, list[str]]:
    """``first_held_index`` over ``stored``, a session's latest turns; whether older turns could change it
    (a message of the walk matched none of ``stored``, or the walk ran past them); and the ids of the walk's
    messages matched by their text, not their id (an older turn may hold the id)."""
    if not stored:
        return None, False, []
    by_text: list[str] = []
    spots: dict[tuple[str, ...], list[int]] = {}  # ascending positions in ``stored``
    for at, t in enumerate(stored):
        if t.external_id:
            spots.setdefault(("id", t.external_id), []).append(at)
        spots.setdefault(("text", t.content.strip()), []).append(at)
        spots.setdefault(("text", t.content.strip(), t.role), []).append(at)

    def latest(turn: dict[str, Any], limit: int) -> int | None:
        """The position of the latest stored turn at or before ``limit`` that ``turn`` is (its id first)."""
        said = storable(str(turn.get("content")).strip())  # as the adapters store it
        text = ("text", said, *([str(turn["role"])] if turn.get("role") else []))
        for key in ([("id", str(turn["id"])), text] if turn.get("id") is not None else [text]):
            found = spots.get(key, [])
            if (n := bisect.bisect_right(found, limit)) > 0:
                if key is text and turn.get("id") is not None:
                    by_text.append(str(turn["id"]))
                return found[n - 1]
        return None

    last = len(stored) - 1
    end = next((i for i in range(len(sent) - 1, -1, -1) if latest(sent[i], last) == last), len(sent) - 1)
    first, sure = None, True
    for turn in reversed(sent[:end + 1]):
        if last < 0:
            sure = False  # older turns may hold the rest
            break
        if (at := latest(turn, last)) is not None:
            first, last = at, at - 1
        else:
            sure = False
    return (None if first is None else stored[first].index), sure, by_text


class MemoryAdapter:
    """The settings and the fail-open read/capture steps shared by ``MemorySession`` and ``MemoryMiddleware``.

    Args:
        mem: the ``Memory`` to read and write.
        budget, max_tokens: passed to ``Memory.context``.
        window_turns: how many recent messages form the reflex window.
        extract: ``Memory.capture``'s ``extract`` for the captures.
        shown_turns: a pointer shown in one of the session's last ``shown_turns`` host turns is
            not shown again unless the user asks (0: no memory of what was shown).
    """

    def __init__(
        self, mem: Memory, *, budget: int, max_tokens: int, window_turns: int, extract: ExtractMode,
        shown_turns: int = DEFAULT_SHOWN_TURNS,
    ) -> None:
        check_memory(mem, type(self).__name__)
        if window_turns < 1:
            raise AdapterError("window_turns must be at least 1")
        if not isinstance(shown_turns, int) or shown_turns < 0:
            raise AdapterError("shown_turns must be an integer of at least 0, e.g. shown_turns=3")
        self.shown_turns = shown_turns
        self.mem = mem
        self.budget = budget
        self.max_tokens = max_tokens
        self.window_turns = window_turns
        self.extract = extract
        self.last_block: MemoryBlock = MemoryBlock()
        self._dated: set[str] = set()
        self._edits_told: set[tuple[str, str]] = set()  # (session, message id) whose edit was logged once
        self._replaced_told: set[tuple[str, str]] = set()  # (session, message id) whose NUL was logged once

    def _window(self, messages: Iterable[Any]) -> list[Any]:
        """The reflex window: the last ``window_turns`` of ``messages`` (already without system ones)."""
        return list(messages)[-self.window_turns:]

    def _held_from(self, session_id: str, held: Iterable[dict[str, Any] | None]) -> int | None:
        """``first_held_index`` for this adapter's memory; a store failure is logged and excludes nothing."""
        try:
            return first_held_index(self.mem, session_id, held)
        except Exception as exc:
            self._log().warning("tortoise: the turns %s holds not read: %s", session_id, exc)
            return None

    def _context(self, window: Sequence[Any], session_id: str,
                 held: Iterable[dict[str, Any] | None] = ()) -> MemoryBlock:
        """``Memory.context`` for one host turn of ``session_id``: what its last host turns showed is prior context.

        ``held`` is every message the host sends (as the adapter captures them): the stored turns of the
        session from the first of them on are never shown (``_held_from``).

        The pointers of this block are then kept as the session's latest host turn (a block that
        went silent with a ``degraded_reason`` is not a turn). Keeping them is best effort: when the
        store fails or another process saved first, the block is still returned.
        """
        held_from = self._held_from(session_id, held)
        if not self.shown_turns:
            return self.mem.context(window, budget=self.budget, max_tokens=self.max_tokens, session_id=session_id,
                                    held_from=held_from)
        name = f"{SHOWN_CURSOR}{session_id}"
        try:
            cursor = self.mem.cursor(name)
            turns = [[i for i in ids if isinstance(i, str)] for ids in cursor.value.get("turns") or []
                     if isinstance(ids, list)][-self.shown_turns:]
        except Exception as exc:
            self._log().warning("tortoise: pointers already shown in %s not read: %s", session_id, exc)
            cursor, turns = None, []
        prior = " ".join(f"ref:{i}" for ids in turns for i in ids) or None
        block = self.mem.context(window, prior, budget=self.budget, max_tokens=self.max_tokens, session_id=session_id,
                                 held_from=held_from)
        if cursor is not None and block.degraded_reason is None:
            kept = [*turns, [p.id for p in block.pointers]][-self.shown_turns:]
            try:
                self.mem.save_cursor(name, {"turns": kept}, revision=cursor.revision)
            except Exception as exc:
                self._log().warning("tortoise: pointers shown in %s not kept: %s", session_id, exc)
        return block

    def _block_skipped(self, exc: BaseException) -> MemoryBlock:
        """Log a failed block read; ``last_block`` becomes a degraded empty block, which is returned."""
        self._log().warning("tortoise: memory block skipped: %s", exc)
        self.last_block = MemoryBlock(degraded_reason=f"adapter_error: {type(exc).__name__}")
        return self.last_block

    def _capture(
        self, session: str | Callable[[], str], turns: Iterable[dict[str, Any] | None], *, before_model: bool = False
    ) -> CaptureReceipt | None:
        """Capture the non-None ``turns``; None when there are none or on failure.

        ``turns`` may be a generator and ``session`` a function: both are resolved
        inside the guard, so a malformed message or a failing lookup is logged, not
        raised. The first capture of a session sets its date to now.

        ``before_model``: the host's messages are stored before its model is called (a run that then fails
        keeps them), with ``before_model_extract``.
        """
        try:
            kept = [t for t in turns if t is not None]
            if not kept:
                return None
            session_id = session() if callable(session) else session
            kept = storable_turns(kept, session_id, self._log(), self._replaced_told)
            date = None if session_id in self._dated else utc_now().isoformat()
            # Message ids are the turns' identity: already stored ones are skipped, new ones appended.
            extract = before_model_extract(self.extract) if before_model else self.extract
            receipt = self._capture_past_edits(session_id, kept, date, extract)
            self._dated.add(session_id)
            return receipt
        except Exception as exc:
            self._log().warning("tortoise: capture skipped: %s", exc)
            return None

    def _capture_past_edits(self, session_id: str, turns: list[dict[str, Any]], date: str | None,
                            extract: ExtractMode) -> CaptureReceipt:
        """``Memory.capture`` of ``turns``, leaving out a message the host edited after it was stored (same id,
        other text: LangGraph's ``update_state``, a reused tool call id). The stored version stays, as every
        stored turn does, and the rest of the thread is captured (one edit stopped every later capture). The
        warning is logged once per message and adapter."""
        while True:
            try:
                return self.mem.capture(session_id, turns, session_date=date, extract=extract)
            except CaptureConflict as exc:
                edited = turns[exc.turn] if exc.turn is not None else {}
                if not edited.get("id"):
                    raise
                # The host sends the edited message again each run: once is enough to say so.
                if (session_id, str(edited["id"])) not in self._edits_told:
                    self._edits_told.add((session_id, str(edited["id"])))
                    self._log().warning("tortoise: message %r of %s was changed after it was stored; the stored "
                                        "text is kept and the change is not captured", edited["id"], session_id)
                turns = [t for t in turns if t is not edited]

    def close(self) -> list[JobInfo]:
        """Extract now what this adapter's background captures left pending (``Memory.flush``); never raises.

        Call it when the conversation ends: the last exchanges may not have filled a batch.
        Returns the jobs run (none without a model, or on failure, which is logged).
        """
        if not self.mem.model:
            return []
        jobs: list[JobInfo] = []
        for session_id in sorted(self._sessions()):
            try:
                jobs.extend(self.mem.flush(session_id))
            except Exception as exc:
                self._log().warning("tortoise: flush of %s skipped: %s", session_id, exc)
        return jobs

    def _sessions(self) -> set[str]:
        """The sessions this adapter captured into (what ``close`` flushes)."""
        return set(self._dated)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log(self) -> logging.Logger:
        # The adapter's own module logger, as before the steps were shared.
        return logging.getLogger(type(self).__module__)


def is_loopback(host: str) -> bool:
    """``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
