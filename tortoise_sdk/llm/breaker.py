"""The circuit breaker: after a fatal model failure, a ``Memory`` calls no model for a while."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from .config import LLMConfig

__all__ = ("CircuitBreaker", "Trip")


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
                "the model, api_base or key changes. The turns are stored: extract them later with "
                "mem.extract(session_id) or `tortoise extract SESSION`")


class CircuitBreaker:
    """Opened by a fatal failure for ``open_s`` seconds, for one model configuration.

    Keyed by the model, the endpoint and a hash of the key (the explicit one, else
    the environment's ``*_KEY`` variables litellm reads), so fixing the configuration
    closes it at once. ``open_s=0`` disables it; ``clock`` (monotonic seconds) is injectable for tests.
    Thread-safe.
    """

    def __init__(self, open_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.open_s = open_s
        self._clock = clock
        self._lock = threading.Lock()
        self._open: tuple[str, float, str, str, datetime] | None = None  # key, until, class, message, wall time

    def trip(self, config: LLMConfig, error_class: str, message: str) -> None:
        """Open the breaker for ``config`` after a failure of ``error_class``."""
        if self.open_s <= 0:
            return
        with self._lock:
            self._open = (_key(config), self._clock() + self.open_s, error_class, message,
                          datetime.now(timezone.utc))

    def check(self, config: LLMConfig) -> Trip | None:
        """The open trip that blocks ``config``, or None when calls may go ahead."""
        with self._lock:
            if self._open is None:
                return None
            key, until, error_class, message, opened = self._open
            remaining = until - self._clock()
            if remaining <= 0 or key != _key(config):
                self._open = None
                return None
        return Trip(error_class, message, opened, opened + timedelta(seconds=self.open_s), remaining)

    def reset(self) -> None:
        """Close the breaker now."""
        with self._lock:
            self._open = None


def _key(config: LLMConfig) -> str:
    secret = config.api_key
    if secret is None:  # litellm reads a provider variable: any change to one may fix the key
        secret = "\x00".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.endswith("_KEY"))
    digest = hashlib.sha256((secret or "").encode()).hexdigest()
    return "\x00".join((config.model, config.api_base or "", digest))
