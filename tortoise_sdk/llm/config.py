"""Which model to call and how patiently: ``LLMConfig``, its defaults, the stage names and wire headers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tortoise_sdk.config import DEFAULT_REQUEST_TIMEOUT_S, env_model
from tortoise_sdk.errors import ConfigError

__all__ = (
    "CHUNK_HEADER",
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_BACKOFF_MAX_S",
    "DEFAULT_LENGTH_RETRY_FACTOR",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT_S",
    "EMBED_STAGE",
    "STAGES",
    "STAGE_HEADER",
    "LLMConfig",
    "Message",
)

DEFAULT_TIMEOUT_S = DEFAULT_REQUEST_TIMEOUT_S
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_MAX_TOKENS = 4096
DEFAULT_BACKOFF_BASE_S = 1.0
DEFAULT_BACKOFF_MAX_S = 30.0
DEFAULT_LENGTH_RETRY_FACTOR = 2.0

STAGE_HEADER = "X-Tortoise-Stage"
CHUNK_HEADER = "X-Tortoise-Chunk"
STAGES: tuple[str, ...] = ("s1", "s2", "vet", "s4", "resolve")
#: The ``X-Tortoise-Stage`` of embedding calls (``LLMClient.embed``).
EMBED_STAGE = "embed"
Message = Mapping[str, Any]

class LLMConfig(BaseModel):
    """Which model to call and how patiently.

    Attributes:
        model: a litellm model name, e.g. ``openai/gpt-4o-mini``; any
            OpenAI-compatible server works as ``openai/<name>`` with ``api_base``.
        api_base: the endpoint, when not the provider's default.
        api_key: the key, when not in the provider's environment variable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, description="litellm model name, e.g. 'openai/gpt-4o-mini'.")
    api_base: str | None = Field(default=None, description="Endpoint URL, e.g. 'http://127.0.0.1:8765/v1'.")
    api_key: str | None = Field(
        default=None, repr=False, description="Provider key; None reads the provider's env var."
    )
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, description="Deadline of one attempt, in seconds.")
    max_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS, ge=1, description="Attempts per request, the first included."
    )
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1, description="Output cap of a first attempt.")
    backoff_base_s: float = Field(
        default=DEFAULT_BACKOFF_BASE_S, ge=0, description="Backoff before the 2nd attempt; doubles after."
    )
    backoff_max_s: float = Field(
        default=DEFAULT_BACKOFF_MAX_S, ge=0, description="Longest wait between attempts, Retry-After included."
    )
    length_retry_factor: float = Field(
        default=DEFAULT_LENGTH_RETRY_FACTOR,
        ge=1,
        description="Output cap multiplier for the retry of a reply cut by the cap.",
    )
    temperature: float | None = Field(
        default=None, description="Sampling temperature; None leaves the provider default."
    )

    @classmethod
    def resolve(
        cls,
        model: str | None = None,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        **settings: Any,
    ) -> LLMConfig:
        """Build a config from explicit arguments, falling back to ``$TORTOISE_MODEL``.

        Raises:
            ConfigError: no model was given or a setting is invalid.
        """
        name = model or env_model()
        if not name:
            raise ConfigError(
                "no model configured: pass model='openai/gpt-4o-mini' (any litellm model name) or set TORTOISE_MODEL"
            )
        try:
            return cls(model=name, api_base=api_base, api_key=api_key, **settings)
        except ValidationError as exc:
            raise ConfigError(f"invalid model settings: {exc}") from exc
