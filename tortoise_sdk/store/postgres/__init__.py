"""The shared store: PostgreSQL through psycopg 3 and a connection pool (``PostgresStore``).

Needs the extra: ``pip install 'tortoise-sdk[postgres]'``.
"""

from __future__ import annotations

from ...errors import ConfigError, install_hint

try:  # the optional extra, checked before any module of this package needs it
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:
    raise ConfigError(
        "PostgreSQL support needs psycopg 3 and psycopg-pool: " + install_hint("postgres")
    ) from exc

from .store import PostgresStore, redact_url  # noqa: E402

__all__ = ("PostgresStore", "redact_url")
