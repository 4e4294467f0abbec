"""Versioned schema migrations for the SQLite store.

Each migration is applied once, inside one transaction, and recorded in
``schema_migrations``; opening an older database applies only what it lacks.
Later features add migrations at the end of ``SQLITE_MIGRATIONS``; a shipped
migration is never edited.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import MigrationError

__all__ = ("Migration", "SQLITE_MIGRATIONS", "applied_versions", "migrate_sqlite")


@dataclass(frozen=True)
class Migration:
    """One schema step: a version number, a name, and its statements."""

    version: int
    name: str
    statements: tuple[str, ...]


M001_FOUNDATION = Migration(
    1,
    "foundation: sessions, turns, turn FTS, capture receipts",
    (
        """CREATE TABLE sessions (
            namespace    TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            session_date TEXT,
            created_at   TEXT NOT NULL,
            updated_at   TEXT NOT NULL,
            PRIMARY KEY (namespace, session_id)
        )""",
        """CREATE TABLE turns (
            rowid        INTEGER PRIMARY KEY,
            turn_id      TEXT NOT NULL UNIQUE,
            namespace    TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            idx          INTEGER NOT NULL,
            role         TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            name         TEXT,
            content      TEXT NOT NULL,
            external_id  TEXT,
            timestamp    TEXT,
            metadata     TEXT,
            content_hash TEXT NOT NULL,
            receipt_id   TEXT,
            created_at   TEXT NOT NULL,
            UNIQUE (namespace, session_id, idx),
            FOREIGN KEY (namespace, session_id) REFERENCES sessions (namespace, session_id)
        )""",
        """CREATE UNIQUE INDEX turns_external_id ON turns (namespace, session_id, external_id)
            WHERE external_id IS NOT NULL""",
        """CREATE VIRTUAL TABLE turns_fts USING fts5 (
            content, name, content='turns', content_rowid='rowid',
            tokenize='porter unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER turns_ai AFTER INSERT ON turns BEGIN
            INSERT INTO turns_fts (rowid, content, name) VALUES (new.rowid, new.content, new.name);
        END""",
        """CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
            INSERT INTO turns_fts (turns_fts, rowid, content, name) VALUES ('delete', old.rowid, old.content, old.name);
        END""",
        """CREATE TRIGGER turns_au AFTER UPDATE OF content, name ON turns BEGIN
            INSERT INTO turns_fts (turns_fts, rowid, content, name) VALUES ('delete', old.rowid, old.content, old.name);
            INSERT INTO turns_fts (rowid, content, name) VALUES (new.rowid, new.content, new.name);
        END""",
        """CREATE TABLE receipts (
            receipt_id      TEXT PRIMARY KEY,
            namespace       TEXT NOT NULL,
            session_id      TEXT NOT NULL,
            idempotency_key TEXT,
            request_hash    TEXT NOT NULL,
            body            TEXT NOT NULL,
            created_at      TEXT NOT NULL
        )""",
        """CREATE UNIQUE INDEX receipts_idempotency ON receipts (namespace, idempotency_key)
            WHERE idempotency_key IS NOT NULL""",
        "CREATE INDEX receipts_session ON receipts (namespace, session_id, created_at)",
    ),
)

SQLITE_MIGRATIONS: list[Migration] = [M001_FOUNDATION]


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    """Versions already recorded in the database."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def migrate_sqlite(conn: sqlite3.Connection, migrations: Sequence[Migration] | None = None) -> list[int]:
    """Apply the migrations the database lacks; return the versions applied now.

    The connection must be in autocommit mode (``isolation_level=None``). Each
    migration runs under ``BEGIN IMMEDIATE`` and re-checks what is applied, so
    two processes opening the same new database do not both apply it.
    """
    migrations = SQLITE_MIGRATIONS if migrations is None else migrations
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise MigrationError(f"migration versions must be unique and ascending, got {versions}")
    done: list[int] = []
    for m in migrations:
        if m.version in applied_versions(conn):
            continue
        try:
            conn.execute("BEGIN IMMEDIATE")
            if m.version not in applied_versions(conn):
                for stmt in m.statements:
                    conn.execute(stmt)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, datetime('now'))",
                    (m.version, m.name),
                )
                done.append(m.version)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise MigrationError(
                f"migration {m.version} ({m.name}) failed: {exc}; the database was left at the previous version"
            ) from exc
    return done
