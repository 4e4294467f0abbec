"""The circuit breaker: after a fatal model failure, a ``Memory`` calls no model for a while."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from datetime import datetime, timedelta, timezone

from .config import LLMConfig

__all__ = ("CircuitBreaker", "Shared", "Trip")


@dataclass(frozen=True)
class Trip:
    """Why the breaker is open: the failure's class and message, and when it closes."""

    error_class: str
    message: str
    opened_at: datetime
    closes_at: datetime
    remaining_s: float

    def reason(self, *, cause: bool = True) -> str:
        """One line for a receipt: what failed, and when or how extraction resumes.

        ``cause=False`` leaves out the failure's message, for a caller that has just shown it.
        """
        said = f" ({self.message})" if cause else ""
        return (f"extraction skipped, no model was called: the provider failed with {self.error_class} at "
                f"{self.opened_at.isoformat(timespec='seconds')}{said}; calls resume after "
                f"{self.closes_at.isoformat(timespec='seconds')} (in {self.remaining_s:.0f} s) or at once when "
                "the model, api_base, key or timeout changes. The turns are stored: extract them later with "
                "mem.extract(session_id) or `tortoise extract SESSION`")


class Shared(Protocol):
    """Where a breaker keeps its trip for other processes (a ``Memory``'s store): a JSON object, ``{}`` for none."""

    def load(self) -> dict[str, Any]: ...

    def save(self, value: dict[str, Any]) -> None: ...


class CircuitBreaker:
    """Opened by a fatal failure for ``open_s`` seconds, for one model configuration.

    Keyed by the model, the endpoint, a hash of the key (the explicit one, else
    the environment's ``*_KEY`` variables litellm reads) and the request timeout, so fixing the
    configuration closes it at once. ``open_s=0`` disables it; ``clock`` (monotonic seconds) is injectable for tests.
    With ``shared``, a trip is also kept there (by wall-clock time) and another process's trip is honoured:
    each ``tortoise flush`` is a new process, and three of them within seconds spent a job's three attempts.
    Thread-safe; a failure of ``shared`` is ignored (the breaker then holds for this process alone).
    """

    def __init__(self, open_s: float, *, clock: Callable[[], float] = time.monotonic,
                 shared: Shared | None = None) -> None:
        self.open_s = open_s
        self._clock = clock
        self._shared = shared
        self._lock = threading.Lock()
        self._open: tuple[str, float, str, str, datetime] | None = None  # key, until, class, message, wall time

    def trip(self, config: LLMConfig, error_class: str, message: str) -> None:
        """Open the breaker for ``config`` after a failure of ``error_class``."""
        if self.open_s <= 0:
            return
        opened = datetime.now(timezone.utc)
        with self._lock:
            self._open = (_key(config), self._clock() + self.open_s, error_class, message, opened)
        self._keep({"key": _key(config), "class": error_class, "message": message, "opened_at": opened.isoformat(),
                    "closes_at": (opened + timedelta(seconds=self.open_s)).isoformat()})

    def check(self, config: LLMConfig) -> Trip | None:
        """The open trip that blocks ``config``, or None when calls may go ahead."""
        with self._lock:
            if self._open is not None:
                key, until, error_class, message, opened = self._open
                remaining = until - self._clock()
                if remaining > 0 and key == _key(config):
                    return Trip(error_class, message, opened, opened + timedelta(seconds=self.open_s), remaining)
                self._open = None
        return self._kept(config)

    def reset(self) -> None:
        """Close the breaker now (for the other processes sharing it too)."""
        with self._lock:
            self._open = None
        self._keep({})

    def _kept(self, config: LLMConfig) -> Trip | None:
        """Another process's (or an earlier one's) trip for ``config`` that has not ended."""
        if self._shared is None or self.open_s <= 0:
            return None
        try:
            value = self._shared.load()
            if value.get("key") != _key(config):
                return None
            opened, closes = datetime.fromisoformat(value["opened_at"]), datetime.fromisoformat(value["closes_at"])
            remaining = (closes - datetime.now(timezone.utc)).total_seconds()
            return Trip(str(value["class"]), str(value["message"]), opened, closes, remaining) if remaining > 0 else None
        except Exception:  # noqa: BLE001 - an unreadable or malformed record holds nothing
            return None

    def _keep(self, value: dict[str, Any]) -> None:
        if self._shared is not None:
            try:
                self._shared.save(value)
            except Exception:  # noqa: BLE001 - a read-only or busy store: the breaker holds for this process
                pass


def _key(config: LLMConfig) -> str:
    """The configuration a trip holds for, as a hash (it is kept in the store): model, endpoint, key and timeout."""
    secret = config.api_key
    if secret is None:  # litellm reads a provider variable: any change to one may fix the key
        secret = "\x00".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.endswith("_KEY"))
    # the timeout too: raising it is how a timed-out configuration is fixed (the failure's own advice)
    parts = (config.model, config.api_base or "", secret or "", repr(config.timeout_s))
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
