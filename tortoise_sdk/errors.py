"""Exceptions raised by tortoise-sdk.

The tree::

    TortoiseError
    ├── ConfigError (also ValueError)          bad argument or setting
    ├── InvalidInput (also ValueError)         an argument or field the SDK refuses; .field names it
    │   ├── InvalidType (also TypeError)       ... because of its type (capture("s", 5), k="5")
    │   └── CaptureConflict                    a turn differs from the stored one at its identity
    ├── IdempotencyConflict                    same idempotency key, different content
    ├── StoreError                             the database failed
    │   ├── MigrationError                     the schema could not be brought up to date
    │   │   └── SchemaTooNew                   written by a newer tortoise-sdk: upgrade it
    │   ├── NotADatabase                       the file is not a SQLite database (or is damaged)
    │   │   └── ForeignDatabase                another application's SQLite file or PostgreSQL schema
    │   ├── ReadOnlyStore                      a write to a database opened read-only
    │   ├── DatabaseReplaced                   the file was deleted, moved or replaced while open
    │   ├── NotFoundError                      no such database, session, memory, turn or job
    │   ├── StoreTimeout                       the database did not answer in time
    │   ├── StoreClosed                        a call after close() (or the with-block's end): open a new Memory
    │   └── LeaseLost                          a job's lease was taken over; its result was not written
    ├── ModelError                             a model call failed for good
    │   ├── ModelTimeout
    │   └── MalformedOutput                    the reply could not be parsed
    ├── StreamParseError                       a transcript line could not be read
    └── AdapterError                           a framework adapter was misused

Stage and reflex failures are never raised to the caller: they become a
``Diagnostic`` on the receipt, or an empty memory block with a reason.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = (
    "AdapterError",
    "CaptureConflict",
    "ConfigError",
    "DatabaseReplaced",
    "ForeignDatabase",
    "IdempotencyConflict",
    "InvalidInput",
    "InvalidType",
    "LeaseLost",
    "MalformedOutput",
    "MigrationError",
    "ModelError",
    "ModelTimeout",
    "NotADatabase",
    "NotFoundError",
    "ReadOnlyStore",
    "SchemaTooNew",
    "StoreClosed",
    "StoreError",
    "StoreTimeout",
    "StreamParseError",
    "TortoiseError",
)


class TortoiseError(Exception):
    """Base class of every error the SDK raises on purpose."""


class ConfigError(TortoiseError, ValueError):
    """A setting or constructor argument is invalid.

    Attributes:
        field: the argument at fault (``namespace``, ``model`` ...), when one is; a command line
            names its own flag for it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidInput(TortoiseError, ValueError):
    """Input was refused before anything was written.

    Attributes:
        field: the offending field, e.g. ``turns[3].role``.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field

    @property
    def turn(self) -> int | None:
        """The index of the turn ``field`` names (``turns[3]``, ``turns[3].role``), else None."""
        at = re.match(r"turns\[(\d+)\]", self.field or "")
        return int(at.group(1)) if at else None


class InvalidType(InvalidInput, TypeError):
    """An argument or field has the wrong type (so ``except TypeError`` catches it too)."""


class CaptureConflict(InvalidInput):
    """A captured turn differs from the turn already stored with the same identity."""


class IdempotencyConflict(TortoiseError):
    """The idempotency key was used before with different content (or in another session).

    Attributes:
        key: the key.
        first_session: the session the key was first used in, when known.
    """

    def __init__(self, key: str, first_session: str | None = None) -> None:
        where = f" (in session {first_session!r})" if first_session else ""
        super().__init__(
            f"idempotency key {key!r} was already used for a different capture{where}; keys are unique in the "
            "namespace: make one per exchange (e.g. uuid.uuid4().hex) and reuse it only to retry that exchange, "
            "not from a counter that restarts (len(history) after a restart or a trimmed history); "
            "resend the original content to replay it"
        )
        self.key = key
        self.first_session = first_session


class StoreError(TortoiseError):
    """The store failed to read or write."""


class MigrationError(StoreError):
    """The schema could not be migrated."""


class NotADatabase(StoreError):
    """The file named is not a SQLite database, or is damaged; it was left as it was."""


class SchemaTooNew(MigrationError):
    """The database was written by a newer tortoise-sdk; nothing was written to it."""


class ForeignDatabase(NotADatabase):
    """A database (a SQLite file, a PostgreSQL schema) of another application: tables, none of ours; left as it was."""


class ReadOnlyStore(StoreError):
    """A write to a database that is open read-only (file mode, read-only file system or server setting),
    or a new database in a folder that cannot be written."""


class DatabaseReplaced(StoreError):
    """The SQLite file at the store's path is no longer the one it opened (deleted, moved or replaced);
    nothing more is written to it."""


class NotFoundError(StoreError):
    """The requested record does not exist in this namespace."""


class StoreClosed(StoreError):
    """A call on a store (a ``Memory``) after it was closed: ``close()``, or the end of its ``with`` block."""

    def __init__(self, url: str) -> None:
        super().__init__(f"the store {url} is closed (close() was called, or its with-block ended); "
                         "open a new Memory to go on")


class StoreTimeout(StoreError):
    """The database did not answer within the call's bound (locked, overloaded, frozen or unreachable)."""


class LeaseLost(StoreError):
    """A worker's job lease expired and another worker took the job; the late result was refused."""


class ModelError(TortoiseError):
    """A model call failed after retries.

    Attributes:
        model: the litellm model name.
        status_code: the HTTP status, or None when there was no response.
        error_class: one of auth, billing, model_not_found, unreachable, timeout
            (fatal: an extraction run stops), rate_limit, server, network
            (retried), parse, truncation, bad_request, unknown.
        body: the provider's error text, when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        status_code: int | None = None,
        error_class: str = "unknown",
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status_code = status_code
        self.error_class = error_class
        self.body = body


class ModelTimeout(ModelError):
    """The model did not answer within the per-attempt deadline."""


class MalformedOutput(ModelError):
    """The model answered, but the reply could not be parsed into the stage's shape."""


class StreamParseError(TortoiseError):
    """A line of an agent transcript or stream could not be read.

    Attributes:
        source: the format being parsed (claude-code, stream-json, acp, ...).
        line: the 1-based line number, when known.
    """

    def __init__(self, message: str, *, source: str, line: int | None = None) -> None:
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"{source}{where}: {message}")
        self.source = source
        self.line = line


class AdapterError(TortoiseError):
    """A framework adapter was configured or called incorrectly."""


def reword(text: str, table: tuple[tuple[str, str], ...]) -> str:
    """``text`` (an error's message) with each phrase of ``table`` replaced: the library's advice (a Python call
    or argument) in the terms of the surface that shows it (a command line, an HTTP API, an MCP tool)."""
    for said, meant in table:
        text = text.replace(said, meant)
    return text


def install_hint(extra: str) -> str:
    """The command that installs the optional dependencies ``extra`` names, for a published package and
    for a clone (the package is not on PyPI yet): what a message for a missing one ends with."""
    return f"pip install 'tortoise-sdk[{extra}]' (from a clone of the repository: pip install -e '.[{extra}]')"
