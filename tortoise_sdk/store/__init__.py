"""Durable storage: the contract every engine fulfils (``Store``) and the factory that opens one (``open_store``).

Layout: ``base`` (the contract), the engine-independent logic (``plan``, ``capture_plan``, ``rows``,
``extraction_core``, ``subagent_core``, ``schema``, ``copy``), and one package per engine,
``sqlite/`` and ``postgres/`` (store, migrations, extraction, sub-agents; PostgreSQL's full text in
``fts``; SQLite's look at a file before anything is written to it in ``opening``). The engines import the contract, never this module: it imports them only inside
``open_store``, so opening SQLite never loads psycopg.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConfigError, NotFoundError
from .base import Store
from .deadline import DEFAULT_STORE_TIMEOUT_S

__all__ = ("Store", "open_store", "sqlite_path")

#: The scheme of a SQLite URL: ``sqlite:///memory.db`` is relative, ``sqlite:////home/me/memory.db``
#: absolute (the path is what follows the third slash, as in SQLAlchemy).
SQLITE_SCHEME = "sqlite:///"


def sqlite_path(url: str) -> str:
    """The file path a SQLite path or ``sqlite:///`` URL names (``sqlite:////abs.db`` is ``/abs.db``)."""
    return url.removeprefix(SQLITE_SCHEME)


def open_store(url: str, *, create: bool = True, timeout_s: float | None = DEFAULT_STORE_TIMEOUT_S) -> Store:
    """Open the store a path or URL names: ``postgresql://...``, or a SQLite path or URL (``sqlite_path``).

    ``timeout_s`` bounds each store call (``StoreTimeout`` past it); None for no bound.

    Raises:
        NotFoundError: ``create=False`` and no SQLite file is there (nothing is created).
        NotADatabase: the file is not a SQLite database, or is damaged (``ForeignDatabase``:
            another application's); it is left as it was.
        SchemaTooNew: the database was written by a newer tortoise-sdk.
        ReadOnlyStore: the database cannot be written and needs a schema upgrade.
    """
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore  # optional dependency

        return PostgresStore(url, timeout_s=timeout_s)
    from .sqlite import SQLiteStore

    if url.startswith(SQLITE_SCHEME):
        url = sqlite_path(url)
    elif re.match(r"^[A-Za-z][\w+.-]*://", url):
        raise ConfigError(
            f"unsupported database URL scheme in {url.split('://')[0]}://...; use a SQLite path, "
            "sqlite:///relative.db, sqlite:////absolute/path.db or postgresql://user@host/db"
        )
    elif re.match(r"^(postgres|postgresql|sqlite)(\+\w+)?:", url, re.IGNORECASE):
        raise ConfigError(f"{url!r} looks like a database URL without its '//' after the scheme; write "
                          "postgresql://user@host/db, sqlite:///relative.db or a plain SQLite path")
    if not create and url != ":memory:" and not Path(url).expanduser().exists():
        raise NotFoundError(f"no database at {url} (nothing was created)")
    return SQLiteStore(url, timeout_s=timeout_s)
