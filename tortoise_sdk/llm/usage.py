"""What model calls cost: tokens, dollars, attempts and errors per call (``Tally``) and per stage (``StatsBook``)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tortoise_sdk.models import StageStats

from .lazy import load_litellm

__all__ = ("StatsBook", "Tally")

@dataclass
class Tally:
    """What one logical call cost, across its attempts."""

    attempts: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    errors: Counter[str] = field(default_factory=Counter)

    def add_usage(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        # litellm fills a missing usage block with zeros, and no real call reads or writes 0 tokens: each count is
        # added only when reported (a provider that gives the prompt's alone leaves the completion's NULL, not 0).
        if prompt:
            self.prompt_tokens = (self.prompt_tokens or 0) + int(prompt)
        if completion:
            self.completion_tokens = (self.completion_tokens or 0) + int(completion)
        cost = _cost(response)
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost


class StatsBook:
    """Per-stage StageStats behind a lock; updates never await, so one lock serves threads and tasks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, StageStats] = {}

    def add(self, stage: str, tally: Tally, wall_ms: float, *, call: bool = True) -> None:
        with self._lock:
            s = self._stages.setdefault(stage, StageStats())
            if call:
                s.calls += 1
                s.retries += max(0, tally.attempts - 1)
                s.wall_ms += wall_ms
            if tally.prompt_tokens is not None:
                s.prompt_tokens = (s.prompt_tokens or 0) + tally.prompt_tokens
            if tally.completion_tokens is not None:
                s.completion_tokens = (s.completion_tokens or 0) + tally.completion_tokens
            if tally.cost_usd is not None:
                s.cost_usd = (s.cost_usd or 0.0) + tally.cost_usd
            for name, count in tally.errors.items():
                s.errors[name] = s.errors.get(name, 0) + count

    def snapshot(self) -> dict[str, StageStats]:
        with self._lock:
            return {k: v.model_copy(deep=True) for k, v in self._stages.items()}

    def reset(self) -> dict[str, StageStats]:
        with self._lock:
            taken, self._stages = self._stages, {}
            return taken


def _cost(response: Any) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    if "response_cost" in hidden:
        cost = hidden["response_cost"]
        return float(cost) if cost is not None else None
    try:
        return float(load_litellm().completion_cost(completion_response=response))
    except Exception:  # litellm raises when it has no price for the model
        return None
