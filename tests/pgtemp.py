"""Throwaway PostgreSQL databases for tests and benchmarks.

The server is ``$TORTOISE_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
When it cannot be reached, tests skip with a loud reason, except under ``CI=true``,
where they fail: CI must never silently drop the PostgreSQL half of the suite.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from urllib.parse import urlsplit

__all__ = ("pg_base_url", "pg_unavailable_reason", "require_postgres", "temp_database")

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def pg_base_url() -> str:
    """The server tests create their databases on."""
    return os.environ.get("TORTOISE_TEST_PG_URL") or DEFAULT_PG_URL


@lru_cache(maxsize=1)
def pg_unavailable_reason() -> str | None:
    """None when the server answers, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'tortoise-sdk[postgres]')"
    try:
        with psycopg.connect(pg_base_url(), connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {pg_base_url()} is unreachable: {str(exc).strip()}"
    return None


def require_postgres() -> None:
    """Skip (locally) or fail (CI=true) when PostgreSQL is unreachable."""
    from needs import skip_or_fail

    reason = pg_unavailable_reason()
    if reason is not None:
        skip_or_fail(f"PostgreSQL tests: {reason}; start PostgreSQL or set TORTOISE_TEST_PG_URL "
                     "(e.g. pg_ctlcluster --skip-systemctl-redirect 15 main start)")


@contextmanager
def temp_database(prefix: str = "tortoise_test") -> Iterator[str]:
    """Create a fresh database on the test server, yield its URL, then drop it (connections forced off)."""
    import psycopg

    base = pg_base_url()
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(base)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
