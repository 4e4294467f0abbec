"""What turns text into vectors: ``Embedder``, a litellm embedding model or an in-process callable."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from tortoise_sdk.errors import ConfigError, ModelError
from tortoise_sdk.models import StageStats

from .breaker import CircuitBreaker
from .classify import FATAL_CLASSES
from .client import LLMClient
from .config import EMBED_STAGE, LLMConfig

__all__ = ("DEFAULT_EMBED_BATCH", "DEFAULT_EMBED_TIMEOUT_S", "EmbedFunction", "Embedder", "check_embedder")

EmbedFunction = Callable[[list[str]], Sequence[Sequence[float]]]
#: Texts per embedding request.
DEFAULT_EMBED_BATCH = 64
#: Deadline of one embedding request, in seconds (a query's wait is bounded by the reflex's budget first).
DEFAULT_EMBED_TIMEOUT_S = 30.0


def check_embedder(embedder: object) -> None:
    """Refuse what cannot embed: neither a non-blank litellm model name nor a callable.

    Raises:
        ConfigError: named ``embedder``.
    """
    if callable(embedder) or (isinstance(embedder, str) and embedder.strip()):
        return
    raise ConfigError(f"embedder must be a litellm embedding model name (e.g. 'openai/text-embedding-3-small') or "
                      f"a callable taking a list of texts and returning one vector per text, got {embedder!r}",
                      field="embedder")


class Embedder:
    """Embeds texts with a litellm model (through ``LLMClient.embed``: its retries, error classes and stats)
    or with a callable; after a fatal failure (auth, billing, model_not_found, unreachable, timeout) no
    call is made for ``breaker_s`` seconds.

    Usage::

        embedder = Embedder("openai/text-embedding-3-small")
        vectors = embedder.embed(["I'm allergic to peanuts"])

    Args:
        model: a litellm embedding model name, or a callable ``list[str] -> list[list[float]]``, whose
            vectors are kept under its ``model_name`` (or its object's, for a bound method like ``m.encode``).
        api_base: the endpoint (a local server: ``openai/<name>`` with its ``/v1`` URL).
        api_key: the endpoint's key.
        timeout_s: the deadline of one request.
        breaker_s: how long calls pause after a fatal failure; 0 never pauses.
        settings: more ``LLMConfig`` fields (``max_attempts``, ``backoff_base_s`` ...).
    """

    def __init__(self, model: str | EmbedFunction, *, api_base: str | None = None, api_key: str | None = None,
                 timeout_s: float = DEFAULT_EMBED_TIMEOUT_S, breaker_s: float = 60.0, **settings: Any) -> None:
        check_embedder(model)
        self._function: EmbedFunction | None = None
        self._config: LLMConfig | None = None
        if isinstance(model, str):
            settings.setdefault("timeout_s", timeout_s)
            try:
                self._config = LLMConfig(model=model.strip(), api_base=api_base, api_key=api_key, **settings)
            except ValidationError as exc:
                raise ConfigError(f"invalid embedder settings: {exc}", field="embedder") from exc
            self.model = self._config.model
        else:
            self._function = model
            self.model = _callable_name(model)
        self._breaker = CircuitBreaker(breaker_s)
        self._lock = threading.Lock()
        self._stats = StageStats()

    @property
    def is_model(self) -> bool:
        """A litellm model (its calls are counted in ``stats``), not a callable."""
        return self._config is not None

    @property
    def stats(self) -> StageStats:
        """Calls, retries, tokens, cost and errors of this embedder's model calls so far (a copy)."""
        with self._lock:
            return self._stats.model_copy(deep=True)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order.

        Raises:
            ModelError: the model failed (``error_class`` says how), is paused after a fatal failure
                (``error_class`` of that failure), or returned vectors of unequal or zero length.
        """
        texts = list(texts)
        if not texts:
            return []
        if self._function is not None:
            try:
                vectors = [[float(x) for x in v] for v in self._function(texts)]
            except Exception as exc:
                raise ModelError(f"the embedder {self.model} failed: {type(exc).__name__}: {exc}", model=self.model,
                                 error_class="unknown") from exc
            return _checked(vectors, len(texts), self.model)
        config = self._config
        assert config is not None
        trip = self._breaker.check(config)
        if trip is not None:
            raise ModelError(f"embeddings paused until {trip.closes_at.isoformat(timespec='seconds')}: "
                             f"{trip.message}", model=self.model, error_class=trip.error_class)
        client = LLMClient(config)
        try:
            return _checked(client.embed(texts), len(texts), self.model)
        except ModelError as exc:
            if exc.error_class in FATAL_CLASSES:
                self._breaker.trip(config, exc.error_class or "unknown", str(exc))
            raise
        finally:
            self._add(client.stats.get(EMBED_STAGE))

    def _add(self, stats: StageStats | None) -> None:
        if stats is None:
            return
        with self._lock:
            s = self._stats
            s.calls += stats.calls
            s.retries += stats.retries
            s.wall_ms += stats.wall_ms
            for name in ("prompt_tokens", "completion_tokens", "cost_usd"):
                value = getattr(stats, name)
                if value is not None:
                    setattr(s, name, (getattr(s, name) or 0) + value)
            for name, count in stats.errors.items():
                s.errors[name] = s.errors.get(name, 0) + count


def _checked(vectors: list[list[float]], expected: int, model: str) -> list[list[float]]:
    dims = {len(v) for v in vectors}
    if len(vectors) != expected or len(dims) != 1 or 0 in dims:
        raise ModelError(f"the embedder {model} returned {len(vectors)} vector(s) of lengths {sorted(dims)} "
                         f"for {expected} text(s); it must return one vector of one fixed length per text",
                         model=model, error_class="parse")
    return vectors


def _callable_name(function: EmbedFunction) -> str:
    """The model name a callable's vectors are kept under: its ``model_name``, a bound method's object's
    ``model_name`` (every model of one class shares ``encode``'s module and qualified name, so without it a
    changed model would not re-embed), else ``callable:<module>.<qualified name>``."""
    name = getattr(function, "model_name", None) or getattr(getattr(function, "__self__", None), "model_name", None)
    return str(name or f"callable:{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}")
