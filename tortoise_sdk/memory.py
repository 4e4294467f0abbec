"""``Memory``: the one object a host application talks to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .capture import prepare_capture
from .config import DEFAULT_MAX_TURNS_PER_CAPTURE, DEFAULT_NAMESPACE, default_db_path
from .errors import ConfigError, InvalidInput
from .models import CaptureReceipt, SearchHit, SessionInfo, Turn
from .search import fts5_query
from .store.base import Store, open_store

if TYPE_CHECKING:
    import networkx

__all__ = ("Memory",)

TurnLike = Turn | Mapping[str, Any]


class Memory:
    """Long-term memory for one namespace of a store.

    Usage::

        mem = Memory("memory.db", namespace="alice")
        mem.capture("sess-1", [{"role": "user", "content": "I started at Acme today"}],
                    session_date="2023-05-08T13:56:00")
        hits = mem.search("where does she work")

    Args:
        db: a SQLite path, ``sqlite:///path`` or ``postgresql://...`` URL; default
            ``$TORTOISE_DB``, else ``~/.tortoise/memory.db``.
        namespace: every read and write is confined to it.
        max_turns_per_capture: the largest ``capture`` accepted in one call.
    """

    def __init__(
        self,
        db: str | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        max_turns_per_capture: int = DEFAULT_MAX_TURNS_PER_CAPTURE,
        store: Store | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError("namespace must be a non-empty string, e.g. Memory(namespace='alice')")
        if max_turns_per_capture < 1:
            raise ConfigError("max_turns_per_capture must be at least 1")
        self.namespace = namespace
        self.max_turns_per_capture = max_turns_per_capture
        self.store: Store = store if store is not None else open_store(db or default_db_path())

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store's connections."""
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory({self.store.url!r}, namespace={self.namespace!r})"

    # -- capture -----------------------------------------------------------------------------

    def capture(
        self,
        session_id: str,
        turns: Iterable[TurnLike],
        *,
        session_date: str | datetime | None = None,
        idempotency_key: str | None = None,
    ) -> CaptureReceipt:
        """Store a session's turns durably, in one transaction, before any model is called.

        Capturing the same session again appends only turns not stored yet.

        Raises:
            InvalidInput: a bad field (named in the message); nothing was written.
            CaptureConflict: a turn differs from the stored turn with the same identity.
            IdempotencyConflict: ``idempotency_key`` was used with different content.
        """
        request = prepare_capture(
            session_id, turns, session_date=session_date, idempotency_key=idempotency_key,
            max_turns=self.max_turns_per_capture,
        )
        return self.store.capture(self.namespace, request)

    def capture_many(self, sessions: Sequence[Mapping[str, Any]]) -> list[CaptureReceipt]:
        """Import several sessions ``{"session_id", "date"?, "turns", "idempotency_key"?}`` in one transaction."""
        requests = []
        for i, s in enumerate(sessions):
            if not isinstance(s, Mapping):
                raise InvalidInput("expected a session object", field=f"sessions[{i}]")
            try:
                requests.append(prepare_capture(
                    s.get("session_id"), s.get("turns"), session_date=s.get("date", s.get("session_date")),
                    idempotency_key=s.get("idempotency_key"), max_turns=self.max_turns_per_capture,
                ))
            except InvalidInput as exc:
                raise InvalidInput(str(exc), field=f"sessions[{i}]") from None
        return self.store.capture_many(self.namespace, requests)

    # -- reads -------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, session_id: str | None = None) -> list[SearchHit]:
        """BM25 search over captured turns; any string is safe, an empty one returns nothing."""
        if not isinstance(query, str):
            raise InvalidInput("must be a string", field="query")
        if k < 1:
            return []
        match = fts5_query(query)
        if match is None:
            return []
        return self.store.search_turns(self.namespace, match, k=k, session_id=session_id)

    def sessions(self) -> list[SessionInfo]:
        """Captured sessions in this namespace, oldest first."""
        return self.store.sessions(self.namespace)

    def turns(self, session_id: str) -> list[SearchHit]:
        """A session's stored turns, in order."""
        return self.store.turns(self.namespace, session_id)

    def receipts(self, session_id: str | None = None) -> list[CaptureReceipt]:
        """Capture receipts (with their extraction reports), oldest first."""
        return self.store.receipts(self.namespace, session_id)

    def graph(self) -> networkx.MultiDiGraph:
        """This namespace as a networkx MultiDiGraph: sessions, turns and (once extracted) memories."""
        from .graph import build_graph

        return build_graph(self.store, self.namespace)
