"""Defaults and environment lookup, in one place."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = (
    "DEFAULT_BREAKER_S",
    "DEFAULT_CHUNK_TURNS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_EXTRACT_EVERY",
    "DEFAULT_IDLE_S",
    "DEFAULT_IMPORT_PIECE_TURNS",
    "DEFAULT_JOB_RETRY_S",
    "DEFAULT_MAX_TURNS_PER_CAPTURE",
    "DEFAULT_NAMESPACE",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "default_db_path",
    "ensure_litellm_env",
    "env_api_key",
    "env_embedder",
    "env_model",
)

DEFAULT_NAMESPACE = "default"
DEFAULT_MAX_TURNS_PER_CAPTURE = 5_000
DEFAULT_CHUNK_TURNS = 50
#: A ``capture_many`` with no ``chunk_size`` commits sessions in transactions of at most this many
#: turns (about 0.2 s on SQLite, 3 s on PostgreSQL), so an import's size never meets the store's time bound.
DEFAULT_IMPORT_PIECE_TURNS = 5_000
DEFAULT_CONCURRENCY = 4
#: Background extraction of a session is due once this many evidence turns wait ...
DEFAULT_EXTRACT_EVERY = 20
#: ... or once the session has had no capture for this many seconds.
DEFAULT_IDLE_S = 300.0
DEFAULT_BUSY_TIMEOUT_MS = 30_000
#: After a fatal model failure (auth, billing, model_not_found, unreachable, timeout) a Memory calls no model
#: this long.
DEFAULT_BREAKER_S = 60.0
#: The deadline of one model request (one HTTP attempt), in seconds.
DEFAULT_REQUEST_TIMEOUT_S = 60.0
#: A failed background job is due again this long after its first failed attempt (doubling after each).
DEFAULT_JOB_RETRY_S = 30.0


def default_db_path() -> str:
    """The database used when none is given: ``$TORTOISE_DB``, else ``~/.tortoise/memory.db``."""
    env = os.environ.get("TORTOISE_DB")
    if env:
        return env
    return str(Path.home() / ".tortoise" / "memory.db")


def env_model() -> str | None:
    """The model named by ``$TORTOISE_MODEL``, or None."""
    return os.environ.get("TORTOISE_MODEL") or None


def env_embedder() -> tuple[str | None, str | None, str | None]:
    """The embedding model, endpoint and key in ``$TORTOISE_EMBEDDER``, ``$TORTOISE_EMBED_API_BASE`` and
    ``$TORTOISE_EMBED_API_KEY`` (None where unset)."""
    return tuple(os.environ.get(f"TORTOISE_{name}") or None  # type: ignore[return-value]
                 for name in ("EMBEDDER", "EMBED_API_BASE", "EMBED_API_KEY"))


def env_api_key() -> str | None:
    """The model key in ``$TORTOISE_API_KEY``, or None (litellm then reads the provider's own variable)."""
    return os.environ.get("TORTOISE_API_KEY") or None


def ensure_litellm_env() -> None:
    """Keep litellm from fetching its cost map over the network at import.

    Call before the first ``import litellm``. A value the user set wins.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
