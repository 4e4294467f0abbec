"""The embedded store: SQLite with FTS5, one file, one writer at a time (``SQLiteStore``)."""

from __future__ import annotations

from .store import SQLiteStore

__all__ = ("SQLiteStore",)
