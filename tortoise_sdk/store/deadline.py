"""Time bounds on store calls: a deadline scope (the reflex's budget) and each store's own bound.

A store call ends by the earlier of two times: the innermost ``within(seconds)`` scope of the
calling thread, and ``now + timeout_s`` (the store's bound, ``Memory(store_timeout_s=...)``).
Past it the call raises ``StoreTimeout``; the engines enforce it while waiting for a lock or a
connection and while a statement runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ..errors import StoreTimeout

__all__ = ("DEFAULT_STORE_TIMEOUT_S", "deadline", "expired", "remaining", "timeout_error", "within")

#: The bound on one store call when the caller sets none (seconds).
DEFAULT_STORE_TIMEOUT_S = 30.0

_SCOPE: ContextVar[float | None] = ContextVar("tortoise_store_deadline", default=None)


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """Store calls made inside must end within ``seconds`` from now (an outer, earlier deadline still holds)."""
    if seconds is None:
        yield
        return
    new = time.monotonic() + max(seconds, 0.0)
    outer = _SCOPE.get()
    token = _SCOPE.set(new if outer is None else min(outer, new))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def deadline(bound_s: float | None) -> float | None:
    """The monotonic time a call starting now must end by: the scope's or ``now + bound_s``, whichever is first."""
    scope = _SCOPE.get()
    own = None if bound_s is None else time.monotonic() + bound_s
    if scope is None:
        return own
    return scope if own is None else min(scope, own)


def remaining(at: float | None) -> float | None:
    """Seconds left until ``at`` (never negative), None without a deadline."""
    return None if at is None else max(at - time.monotonic(), 0.0)


def expired(at: float | None) -> bool:
    """Whether the deadline ``at`` has passed."""
    return at is not None and time.monotonic() >= at


def timeout_error(what: str, bound_s: float | None) -> StoreTimeout:
    """The error for a call that ran out of time: says what waited and what to do."""
    scope = _SCOPE.get() is not None
    limit = "its time budget" if scope else f"store_timeout_s={bound_s:g}s" if bound_s is not None else "its deadline"
    return StoreTimeout(
        f"{what} did not finish within {limit}: the database is locked by another writer, overloaded, "
        "frozen or unreachable; check it and retry, or raise Memory(store_timeout_s=...). A write cut at its "
        "commit may have been stored: retry a capture with the same idempotency_key (or capture() the whole "
        "session), so that it stores nothing twice"
    )
