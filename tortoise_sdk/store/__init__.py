"""Durable storage: the contract every engine fulfils (``Store``) and the factory that opens one (``open_store``).

Layout: ``base`` (the contract), the engine-independent logic (``plan``, ``capture_plan``, ``rows``,
``extraction_core``, ``subagent_core``, ``schema``, ``copy``), and one package per engine,
``sqlite/`` and ``postgres/`` (store, migrations, extraction, sub-agents; PostgreSQL's full text in
``fts``). The engines import the contract, never this module: it imports them only inside
``open_store``, so opening SQLite never loads psycopg.
"""

from __future__ import annotations

import re

from ..errors import ConfigError
from .base import Store

__all__ = ("Store", "open_store")


def open_store(url: str) -> Store:
    """Open the store a path or URL names: ``postgresql://...`` or a SQLite path / ``sqlite:///path``."""
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore  # optional dependency

        return PostgresStore(url)
    from .sqlite import SQLiteStore

    if url.startswith("sqlite:///"):
        url = url[len("sqlite:///") :]
    elif re.match(r"^[A-Za-z][\w+.-]*://", url):
        raise ConfigError(
            f"unsupported database URL scheme in {url.split('://')[0]}://...; use a SQLite path, "
            "sqlite:///path or postgresql://user@host/db"
        )
    return SQLiteStore(url)
