"""Memory for a hand-written chat loop over OpenAI-style message lists.

Usage::

    from tortoise_sdk import Memory
    from tortoise_sdk.adapters.loop import MemorySession

    session = MemorySession(Memory("memory.db", namespace="alice"), "chat-42")
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]
    reply = call_model(session.before_turn(messages))   # the memory block rides along as a system message
    session.after_turn(text, reply)                        # the exchange is captured
    session.close()                                        # at the end: extract what is still pending
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import AdapterError
from ..models import MEMORY_BLOCK_MARKER, CaptureReceipt
from ._common import MemoryAdapter

if TYPE_CHECKING:
    from ..memory import ExtractMode, Memory

__all__ = ("MemorySession",)

Message = Mapping[str, Any]


class MemorySession(MemoryAdapter):
    """One conversation's memory: a block before each model call, a capture after each exchange.

    Neither method ever raises because of memory: a failure is logged, ``before_turn``
    then returns the messages unchanged and ``after_turn`` returns None.

    Args:
        mem: the ``Memory`` to read and write.
        session_id: this conversation's id in the store.
        budget, max_tokens: passed to ``Memory.context``.
        window_turns: how many recent non-system messages form the reflex window.
        extract: what ``after_turn``'s capture does about extraction (``Memory.capture``'s
            ``extract``); ``"background"`` keeps model calls off the chat loop.
    """

    def __init__(
        self,
        mem: Memory,
        session_id: str,
        *,
        budget: int = 3,
        max_tokens: int = 400,
        window_turns: int = 6,
        extract: ExtractMode = "background",
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise AdapterError("session_id must be a non-empty string, e.g. MemorySession(mem, 'chat-42')")
        super().__init__(mem, budget=budget, max_tokens=max_tokens, window_turns=window_turns, extract=extract)
        self.session_id = session_id

    def before_turn(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """A copy of ``messages`` with the memory block as a system message after the leading system ones.

        Messages that are not mappings are logged and returned as given (``[]`` for None), without a block.
        """
        out: list[dict[str, Any]] | None = None
        try:
            out = [dict(m) for m in messages]
            window = self._window(m for m in out if m.get("role") != "system")
            self.last_block = block = self._context(window, self.session_id)
        except Exception as exc:  # context() itself fails open; this guards bad input too
            self._block_skipped(exc)
            if out is not None:
                return out
            return [] if messages is None else messages  # type: ignore[return-value]
        if not block.block:
            return out
        at = 0
        while at < len(out) and out[at].get("role") == "system":
            at += 1
        out.insert(at, {"role": "system", "content": block.block})
        return out

    def _sessions(self) -> set[str]:
        return {self.session_id}

    def after_turn(self, user_msg: str | Message, assistant_msg: str | Message) -> CaptureReceipt | None:
        """Capture one exchange (each message gets a fresh id); returns the receipt, or None on failure."""
        exchange = ((user_msg, "user"), (assistant_msg, "assistant"))
        return self._capture(self.session_id, (_turn(msg, role) for msg, role in exchange))


def _turn(msg: str | Message, role: str) -> dict[str, Any] | None:
    if isinstance(msg, str):
        msg = {"role": role, "content": msg}
    content = msg.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    if not isinstance(content, str) or not content.strip() or content.startswith(MEMORY_BLOCK_MARKER):
        return None  # nothing said, or an echo of an injected memory block
    turn = {"role": msg.get("role", role), "content": content, "id": str(msg.get("id") or f"m-{uuid.uuid4().hex}")}
    if msg.get("name"):
        turn["name"] = msg["name"]
    return turn
