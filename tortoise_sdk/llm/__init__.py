"""The model layer: every model call of the SDK goes through :class:`LLMClient`.

It is the only package that imports litellm (lazily, on the first call, so
importing the SDK stays cheap and offline) and the only one that retries
model calls. Each call:

- carries ``X-Tortoise-Stage: <stage>`` and, for chunked stages,
  ``X-Tortoise-Chunk: <n>`` on the wire;
- has a per-attempt deadline and is retried with jittered exponential
  backoff (honouring ``Retry-After`` up to the backoff cap) on 429, 5xx and
  dropped connections; a refused connection is retried once, quickly, a
  timeout once; 400/401/402/403/404 fail at once; after a fatal class
  (``FATAL_CLASSES``) the client sends nothing more (``LLMClient.fatal``);
- when the reply is cut by the output cap (``finish_reason == "length"``) is
  asked once more with a larger cap, then accepted and marked ``partial``;
- maps litellm's exceptions once, here, into :class:`~tortoise_sdk.errors.ModelError`
  (``ModelTimeout``, ``MalformedOutput``) with an ``error_class``;
- adds its calls, retries, tokens, cost, time and errors to per-stage
  :class:`~tortoise_sdk.models.StageStats`.

Usage::

    client = LLMClient(LLMConfig.resolve(model="openai/gpt-4o-mini"))
    result = client.complete("s1", [{"role": "user", "content": "..."}], chunk=0)
    data = client.complete_json("s2", messages, expect="object").parsed.value
    client.stats["s1"].calls

Modules: ``config`` (``LLMConfig``, defaults), ``client`` (the call, retries, deadline, length
retry), ``classify`` (errors into classes), ``breaker`` (no calls for a while after a fatal class),
``usage`` (tokens, cost, stats), ``lazy`` (the import). ``LLMClient.embed`` sends embedding requests
(``X-Tortoise-Stage: embed``) the same way.
"""

from __future__ import annotations

from .classify import ERROR_CLASSES, FATAL_CLASSES, RETRYABLE_CLASSES, key_variables, map_error
from .client import LLMClient, LLMResult
from .config import (
    CHUNK_HEADER,
    DEFAULT_BACKOFF_BASE_S,
    DEFAULT_BACKOFF_MAX_S,
    DEFAULT_LENGTH_RETRY_FACTOR,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TIMEOUT_S,
    EMBED_STAGE,
    STAGE_HEADER,
    STAGES,
    LLMConfig,
    Message,
)

__all__ = (
    "CHUNK_HEADER",
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_BACKOFF_MAX_S",
    "DEFAULT_LENGTH_RETRY_FACTOR",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT_S",
    "EMBED_STAGE",
    "ERROR_CLASSES",
    "FATAL_CLASSES",
    "RETRYABLE_CLASSES",
    "STAGES",
    "STAGE_HEADER",
    "LLMClient",
    "LLMConfig",
    "LLMResult",
    "Message",
    "key_variables",
    "map_error",
)
