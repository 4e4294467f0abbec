"""The store contract every backend (SQLite, PostgreSQL) fulfils with the same semantics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ..capture import CaptureRequest
from ..models import CaptureReceipt, SearchHit, SessionInfo

__all__ = ("Store", "open_store")


class Store(ABC):
    """Durable storage for one database; every method takes the namespace it acts in.

    No read may return rows of another namespace.
    """

    url: str

    @abstractmethod
    def migrate(self) -> list[int]:
        """Bring the schema up to date; return the versions applied now (empty when current)."""

    @abstractmethod
    def schema_version(self) -> int:
        """The highest applied migration version."""

    @abstractmethod
    def capture(self, namespace: str, request: CaptureRequest, *, max_turns: int | None = None) -> CaptureReceipt:
        """Write one validated capture atomically and return its stored receipt.

        Raises:
            IdempotencyConflict: the key was used with different content.
            CaptureConflict: a turn differs from the stored turn with the same identity.
        """

    @abstractmethod
    def capture_many(self, namespace: str, requests: Sequence[CaptureRequest]) -> list[CaptureReceipt]:
        """Write several captures in one transaction (a batch import): all or nothing."""

    @abstractmethod
    def search_turns(
        self, namespace: str, match: str, *, k: int, session_id: str | None = None
    ) -> list[SearchHit]:
        """BM25 search of turns with a prepared full-text expression; best first, ties by position."""

    @abstractmethod
    def sessions(self, namespace: str) -> list[SessionInfo]:
        """Captured sessions, oldest first."""

    @abstractmethod
    def turns(
        self, namespace: str, session_id: str, *, start: int = 0, stop: int | None = None
    ) -> list[SearchHit]:
        """Turns of a session in order (score 0), optionally a slice of positions."""

    @abstractmethod
    def get_turn(self, namespace: str, turn_id: str) -> SearchHit:
        """One turn by id. Raises NotFoundError."""

    @abstractmethod
    def receipts(self, namespace: str, session_id: str | None = None) -> list[CaptureReceipt]:
        """Stored capture receipts, oldest first."""

    @abstractmethod
    def save_receipt(self, namespace: str, receipt: CaptureReceipt) -> None:
        """Overwrite a stored receipt's body (extraction results are added after capture)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""


def open_store(url: str) -> Store:
    """Open the store a path or URL names: ``postgresql://...`` or a SQLite path / ``sqlite:///path``."""
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore  # optional dependency

        return PostgresStore(url)
    from .sqlite import SQLiteStore

    if url.startswith("sqlite:///"):
        url = url[len("sqlite:///") :]
    return SQLiteStore(url)
