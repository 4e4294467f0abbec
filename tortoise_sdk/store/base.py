"""The store contract every backend (SQLite, PostgreSQL) fulfils with the same semantics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..capture import CaptureRequest
from ..models import (
    CaptureReceipt,
    Cursor,
    ExtractionReport,
    ExtractionState,
    ForgetReport,
    JobInfo,
    MemoryRecord,
    NamespaceInfo,
    SearchHit,
    SessionInfo,
    SubagentContext,
    SubagentCounters,
    SubagentHealth,
    Tombstone,
)

if TYPE_CHECKING:
    from datetime import datetime

    import networkx

    from ..subagent_models import NormalizedFrame
    from .plan import ExtractionPlan, Fence, WriteResult
    from .vectors import VectorKind

__all__ = ("NAMESPACES_SQL", "NamespaceCounts", "Store", "TurnFacts", "near_offsets")

#: Per namespace: sessions, turns and live memories (plain SQL both engines run; ``ORDER BY`` added by each).
NAMESPACES_SQL = (
    "SELECT ns, SUM(s), SUM(t), SUM(m) FROM ("
    " SELECT namespace AS ns, COUNT(*) AS s, 0 AS t, 0 AS m FROM sessions GROUP BY namespace"
    " UNION ALL SELECT namespace, 0, COUNT(*), 0 FROM turns GROUP BY namespace"
    " UNION ALL SELECT namespace, 0, 0, COUNT(*) FROM memories WHERE status = 'live' GROUP BY namespace"
    ") x GROUP BY ns ORDER BY ns"
)


class Store(ABC):
    """Durable storage for one database; every method takes the namespace it acts in.

    No read may return rows of another namespace. A store opened read-only (``read_only``)
    serves every read; each write raises ``ReadOnlyStore``. Each call ends within ``timeout_s``
    seconds (None: no bound), or sooner inside a ``deadline.within`` scope, else raises
    ``StoreTimeout`` (``store.deadline``).
    """

    url: str
    read_only: bool = False
    timeout_s: float | None = None
    #: Whether reads from several threads run at once (a pool of connections), so the reflex reads
    #: its turn and memory candidates side by side.
    concurrent_reads: bool = False

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

    def search_terms(
        self, namespace: str, terms: Sequence[str], *, k: int, session_id: str | None = None
    ) -> list[SearchHit]:
        """Turns matching any of the plain ``terms`` (the dialect-neutral seam; each engine builds its own query)."""
        from ..search import fts5_query

        match = fts5_query("", terms=list(terms))
        if match is None or k < 1:
            return []
        return self.search_turns(namespace, match, k=k, session_id=session_id)

    @abstractmethod
    def sessions(self, namespace: str) -> list[SessionInfo]:
        """Captured sessions, oldest first."""

    def namespaces(self) -> list[NamespaceInfo]:
        """Every namespace holding a session, a turn or a memory, by name (the one read across namespaces)."""
        raise NotImplementedError(f"{type(self).__name__} does not list namespaces")

    @abstractmethod
    def namespace_counts(self, namespace: str) -> NamespaceCounts:
        """How much one namespace holds, counted by the database (``Memory.stats``): no row loaded, no other
        namespace counted."""

    @staticmethod
    def _namespace_infos(rows: Sequence[Sequence[Any]]) -> list[NamespaceInfo]:
        return [NamespaceInfo(name=r[0], sessions=int(r[1]), turns=int(r[2]), memories=int(r[3])) for r in rows]

    @abstractmethod
    def turns(
        self, namespace: str, session_id: str, *, start: int = 0, stop: int | None = None, last: int | None = None,
        external_ids: Sequence[str] | None = None, role: str | None = None,
    ) -> list[SearchHit]:
        """Turns of a session in order (score 0), optionally a slice of positions; with ``last``, the latest
        ``last`` of them (read newest first through the session's index: the cost is ``last``'s, not the session's);
        with ``external_ids``, only the turns captured under those ids (read through their index); with ``role``,
        only the turns of that role (``last`` counts those)."""

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

    # -- extraction: memories, the S5 write, jobs ------------------------------------------------

    @abstractmethod
    def memories(
        self, namespace: str, session_id: str | None = None, include_superseded: bool = False, *,
        latest: int | None = None, category: str | None = None,
    ) -> list[MemoryRecord]:
        """Memories, oldest first; live only unless ``include_superseded`` (then every status); of one
        ``category`` (the host's, as stored) when given.

        ``latest``: only the newest that many (still oldest first).
        """

    @abstractmethod
    def get_memory(self, namespace: str, memory_id: str) -> MemoryRecord:
        """One memory by id, whatever its status. Raises NotFoundError."""

    @abstractmethod
    def search_memories(
        self, namespace: str, match: str, *, k: int, include_superseded: bool = False
    ) -> list[tuple[MemoryRecord, float]]:
        """BM25 over content, search keys and entity names with a prepared FTS5 expression; higher is better."""

    @abstractmethod
    def memories_about(self, namespace: str, entity_names: Sequence[str], *, k: int) -> list[MemoryRecord]:
        """Live memories linked to those entities by normalised name (the one-hop neighbourhood)."""

    @abstractmethod
    def supersession_chain(self, namespace: str, memory_id: str) -> list[MemoryRecord]:
        """The versions of the fact ``memory_id`` belongs to, oldest first. Raises NotFoundError."""

    @abstractmethod
    def entities(self, namespace: str) -> list[dict[str, Any]]:
        """Every entity of the namespace, oldest first: ``{id, name, kind, note, aliases}``."""

    @abstractmethod
    def find_entities(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Stored entities whose normalised name or alias is one of ``names``: ``{id, name, kind, note}``."""

    @abstractmethod
    def merge_entities(self, namespace: str, keep: str, other: str, *, now: datetime,
                       reason: str = "merged by the host") -> dict[str, Any]:
        """Merge entity ``other`` into ``keep`` (ids, names or aliases), keeping provenance; the kept entity."""

    @abstractmethod
    def split_entity(self, namespace: str, entity: str, name: str, *, now: datetime,
                     reason: str = "split by the host") -> dict[str, Any]:
        """Take the name ``name`` back out of ``entity`` as an entity of its own; the new entity."""

    @abstractmethod
    def entity_events(self, namespace: str, entity: str | None = None) -> list[dict[str, Any]]:
        """The namespace's entity merges and splits (of one entity id), oldest first."""

    @abstractmethod
    def turn_metadata(self, namespace: str, session_id: str, *, start: int = 0,
                      stop: int | None = None) -> dict[str, dict[str, Any] | None]:
        """Caller metadata of a session's turns (positions ``start`` to ``stop``, excluded), by turn id."""

    @abstractmethod
    def extend_graph(self, g: networkx.MultiDiGraph, namespace: str) -> None:
        """Add entity and memory nodes, about, provenance (memory -> turn) and supersedes edges."""

    @abstractmethod
    def write_extraction(
        self, namespace: str, plan: ExtractionPlan, *,
        finalize: Callable[[WriteResult], ExtractionReport], fence: Fence | None = None,
    ) -> WriteResult:
        """S5: consolidate and write a session's extraction in one transaction. Raises LeaseLost."""

    @abstractmethod
    def extraction_state(self, namespace: str, session_id: str) -> ExtractionState | None:
        """How far the session is extracted (its watermark); None before its first windowed extraction."""

    @abstractmethod
    def enqueue_job(self, namespace: str, session_id: str, receipt_id: str | None = None, *,
                    waiting_turns: int = 0, due_after_turns: int = 1, idle_s: float = 0.0,
                    waiting_in_all: bool = False) -> JobInfo:
        """Queue a durable extraction job, or fold into the session's pending one (due rules: ``ExtractionCore``)."""

    @abstractmethod
    def get_job(self, job_id: str) -> JobInfo:
        """One job. Raises NotFoundError."""

    @abstractmethod
    def jobs(self, namespace: str | None = None, status: str | None = None) -> list[JobInfo]:
        """Jobs, oldest first."""

    @abstractmethod
    def lease_job(self, namespace: str | None, *, lease_s: float, max_attempts: int,
                  session_id: str | None = None, due_only: bool = True,
                  exclude: Collection[str] = ()) -> JobInfo | None:
        """Lease the oldest runnable job not in ``exclude``, bumping its revision (the fencing token)."""

    @abstractmethod
    def renew_lease(self, fence: Fence, *, lease_s: float) -> JobInfo:
        """Extend a held lease (the worker's heartbeat); the revision stays. Raises LeaseLost."""

    @abstractmethod
    def fail_job(self, fence: Fence, error: str, *, max_attempts: int, retry_in_s: float = 0.0) -> JobInfo:
        """Record a failed attempt under a lease; a retry is due ``retry_in_s`` from now. Raises LeaseLost."""

    @abstractmethod
    def finish_job(self, fence: Fence) -> None:
        """Mark a leased job done. Raises LeaseLost."""

    @abstractmethod
    def retry_failed_jobs(self, namespace: str, session_id: str | None = None) -> list[JobInfo]:
        """Queue the jobs that failed for good again, due now, attempts reset; returns the pending jobs."""

    # -- sub-agent contexts (structure of sub-agent invocations; never memory grounding) ----------

    @abstractmethod
    def upsert_subagent(
        self, namespace: str, frame: NormalizedFrame, now: datetime,
        increments: Mapping[str, int] | None = None,
    ) -> SubagentContext:
        """Merge a normalized frame into its row with one atomic upsert (``subagents.COLUMN_RULES``).

        ``frame.turn_id`` is the source's message id, kept as the row's ``turn_ref`` (first
        non-empty wins): ``turn_id`` is the stored turn it names in the frame's session (or
        a derived ``:agent-``/``:task-`` session), else NULL until a capture stores that turn.
        ``persisted`` and ``increments`` are added to the counters in the same transaction.
        """

    @abstractmethod
    def subagents(
        self, namespace: str, session_id: str | None = None, turn_id: str | None = None
    ) -> list[SubagentContext]:
        """Sub-agent rows ordered by observed_at, tool_call_id, agent_execution_id, session_id (text in byte order)."""

    @abstractmethod
    def bump_subagent_counters(self, namespace: str, increments: Mapping[str, int]) -> None:
        """Add to the namespace's persistent sub-agent counters (``SubagentCounters`` field names)."""

    @abstractmethod
    def subagent_counters(self, namespace: str) -> SubagentCounters:
        """The namespace's sub-agent counters."""

    @abstractmethod
    def subagent_health(
        self, namespace: str, *, tool_names: Collection[str], since: datetime | None = None,
        session_id: str | None = None,
    ) -> SubagentHealth:
        """Launching calls (``tool_uses`` entries of turn metadata named in ``tool_names``) with no row,
        and rows with no launching call: two anti-joins, never netted."""

    # -- forgetting -------------------------------------------------------------------------------

    @abstractmethod
    def forget_session(self, namespace: str, session_id: str) -> ForgetReport:
        """Remove a session and its derived sessions from every table in one transaction (see ``store.forget``)."""

    @abstractmethod
    def forget_memory(self, namespace: str, memory_id: str) -> ForgetReport:
        """Remove one memory, re-linking its supersession chain, in one transaction."""

    @abstractmethod
    def tombstones(self, namespace: str, subject: str | None = None, subject_id: str | None = None) -> list[Tombstone]:
        """The audit rows forgetting left, oldest first (one subject's, when named)."""

    @abstractmethod
    def vacuum(self) -> None:
        """Physically drop what deletes left behind (every namespace): index segments, free pages, dead tuples."""

    # -- cursors (named host state kept between processes) ---------------------------------------

    @abstractmethod
    def get_cursor(self, namespace: str, name: str) -> Cursor:
        """The cursor ``name``; revision 0 with an empty value when it was never saved."""

    @abstractmethod
    def put_cursor(self, namespace: str, name: str, value: Mapping[str, Any], revision: int) -> Cursor | None:
        """Save ``value`` if the stored revision is still ``revision`` (0: never saved); None when another save won."""

    # -- vectors (both engines: ``vectors.VectorMixin``, declared here so that code typed ``Store`` can call them) --

    @abstractmethod
    def pending_embeddings(self, namespace: str, model: str, limit: int, *,
                           after: tuple[VectorKind, str] | None = None) -> list[tuple[VectorKind, str, str]]:
        """Up to ``limit`` (kind, id, text) with no vector under ``model``; ``after``: where the last call ended."""

    @abstractmethod
    def save_vectors(self, namespace: str, model: str,
                     items: Sequence[tuple[VectorKind, str, Sequence[float]]]) -> int:
        """Store each (kind, id, vector) under ``model``; how many were stored."""

    @abstractmethod
    def load_vectors(self, namespace: str, model: str) -> list[tuple[VectorKind, str, bytes]]:
        """Every (kind, id, packed vector) of the namespace under ``model``."""

    @abstractmethod
    def vector_version(self, namespace: str, model: str) -> tuple[int, str | None]:
        """What changes whenever the namespace's vectors under ``model`` do: (count, newest write)."""

    @abstractmethod
    def nearest_vectors(self, namespace: str, model: str, vector: Sequence[float], k: int,
                        kind: str | None = None) -> list[tuple[str, str, float]] | None:
        """The ``k`` items closest to ``vector`` as (kind, id, cosine); None where the engine has no such search."""

    @abstractmethod
    def vector_search(self) -> str:
        """How the namespace's vectors are searched here, for ``tortoise stats``."""

    @abstractmethod
    def vector_counts(self, namespace: str) -> dict[str, int]:
        """Vectors of the namespace by model."""

    # Reads the reflex uses. A backend may override them with faster, index-exact versions;
    # these defaults keep the reflex working (with plainer query weighting) on any backend.
    # The hits of ``candidate_turns`` and ``turns_at`` carry the indexed text of each turn (its
    # first ``search.INDEX_CHARS`` characters), what ranking reads; ``get_turn`` gives it whole.

    def analyze(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's tokens as the turn index sees them (lower-cased; stemmed where the index stems)."""
        import re

        return [re.findall(r"[^\W_]+", t.lower()) for t in texts]

    def term_stats(self, namespace: str, terms: Sequence[str]) -> tuple[int, dict[str, tuple[int, int]]]:
        """``(turns in the namespace, {term: (its turns whose content has it, whose speaker name has it)})``.

        Counts cover ``namespace`` alone, so no tenant's data moves another's weights; terms
        are index terms (``analyze``); unknown terms are absent.
        """
        return 0, {}

    def candidate_turns(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                        per_term: int = 200) -> list[SearchHit]:
        """Turns ranked by the summed weights of the terms their content holds, newest first among equals.

        Each term contributes at most its ``per_term`` newest matches, so the cost is bounded
        whatever the term's frequency. This default ranks by the engine's full-text score instead.
        """
        return self.search_terms(namespace, list(weighted_terms), k=k)

    def candidate_turns_near(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                             per_term: int = 200, known: Collection[tuple[str, int]] = (),
                             reach: int | Sequence[int] = 1) -> tuple[list[SearchHit], list[SearchHit]]:
        """``candidate_turns``, and the turns near each (index - ``reach`` to + ``reach``, or at the offsets
        ``reach`` names: ``near_offsets``) not at a ``known`` position.

        One call, so that a store across a network can answer both in one round trip; the
        neighbours may include turns at known positions or the candidates' own.
        """
        (hits,), near = self.candidate_turns_near_each(namespace, [weighted_terms], k=k, per_term=per_term,
                                                       known=known, reach=reach)
        return hits, near

    def candidate_turns_near_each(self, namespace: str, weightings: Sequence[Mapping[str, float]], *, k: int,
                                  per_term: int = 200, known: Collection[tuple[str, int]] = (),
                                  reach: int | Sequence[int] = 1) -> tuple[list[list[SearchHit]], list[SearchHit]]:
        """``candidate_turns`` for each weighting of terms, and the turns near any of them, up to ``reach``
        turns before or after, or at the offsets it names (as ``candidate_turns_near``).

        One call, so that a store can find a term's matches once for every weighting that holds it
        (the reflex ranks the question's words, then the same words with those of the fact's kind).
        """
        each = self.candidate_turns_each(namespace, weightings, k=k, per_term=per_term)
        have = set(known) | {(h.session_id, h.index) for hits in each for h in hits}
        wanted = list(dict.fromkeys((h.session_id, h.index + d) for hits in each for h in hits
                                    for d in near_offsets(reach)
                                    if h.index + d >= 0 and (h.session_id, h.index + d) not in have))
        return each, self.turns_at(namespace, wanted) if wanted else []

    def candidate_turns_each(self, namespace: str, weightings: Sequence[Mapping[str, float]], *, k: int,
                             per_term: int = 200) -> list[list[SearchHit]]:
        """``candidate_turns`` for each weighting; a store may walk a term that several hold once."""
        return [self.candidate_turns(namespace, w, k=k, per_term=per_term) for w in weightings]

    def turn_fact_status(self, namespace: str, turn_ids: Sequence[str]) -> dict[str, TurnFacts]:
        """For turns that ground memories: ``turn_id -> TurnFacts`` (live and no longer live memory
        counts, and the memories that superseded its own).

        The reflex uses it to keep turns whose facts were all superseded or retracted out of the
        block unless the user asks about a change, and to flag, for a present-tense question, a turn
        whose fact a memory of the block superseded.
        """
        ids = list(dict.fromkeys(turn_ids))
        return {r[0]: TurnFacts(int(r[1]), int(r[2]), _ids(r[3]))
                for r in self._turn_fact_rows(namespace, ids)} if ids else {}

    def _turn_fact_rows(self, namespace: str, turn_ids: list[str]) -> Sequence[Sequence[Any]]:
        """``(turn_id, live count, other count, superseding memory ids)`` rows (the ids a list, or a
        space-separated string); a store without memories has none."""
        return []

    def candidate_memories(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                           per_term: int = 200, include_superseded: bool = False,
                           newest_first: bool = False) -> list[tuple[MemoryRecord, float]]:
        """Memories ranked like ``candidate_turns``, over content, search keys and entity names.

        ``newest_first`` tells the store that the terms are in a large share of the memories (the
        names of entities many are about), so that it may walk the newest memories rather than read
        every match through an index; the result is the same. This default ranks by the engine's
        full-text score (``search_memories``) instead.
        """
        from ..search import fts5_query

        match = fts5_query("", terms=list(weighted_terms))
        if match is None or k < 1:
            return []
        return self.search_memories(namespace, match, k=k, include_superseded=include_superseded)

    def turns_at(self, namespace: str, positions: Sequence[tuple[str, int]]) -> list[SearchHit]:
        """The turns at the given ``(session_id, index)`` positions, in no particular order; missing ones skipped."""
        out: list[SearchHit] = []
        for session_id, index in dict.fromkeys(positions):
            out.extend(self.turns(namespace, session_id, start=index, stop=index + 1))
        return out


class NamespaceCounts(NamedTuple):
    """What one namespace holds (``Store.namespace_counts``)."""

    sessions: int
    turns: int
    memories: int  # live
    entities: int
    subagents: int  # sub-agent rows
    jobs: dict[str, int]  # extraction jobs by status, statuses by name


class TurnFacts(NamedTuple):
    """What became of the memories a turn grounds (``Store.turn_fact_status``)."""

    live: int
    gone: int  # superseded or retracted
    superseded_by: frozenset[str] = frozenset()  # the memories that superseded those of its facts


def _ids(value: Any) -> frozenset[str]:
    return frozenset(value.split() if isinstance(value, str) else (value or ()))


def near_offsets(reach: int | Sequence[int]) -> tuple[int, ...]:
    """The positions near a turn: for a number, nearest first, -1, 1, -2, 2... up to ``reach``; for offsets
    (the reflex reads ``(-1, 1, 2)`` when only the turn two after a candidate is wanted), those, as integers."""
    if isinstance(reach, int):
        return tuple(d for n in range(1, max(1, reach) + 1) for d in (-n, n))
    return tuple(dict.fromkeys(int(d) for d in reach if int(d)))
