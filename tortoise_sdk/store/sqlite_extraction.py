"""SQLite side of extraction: memories, entities, provenance, the S5 write, and the durable job queue.

A mixin of ``SQLiteStore`` (it relies on its ``transaction`` and ``read``), kept in
its own module so the foundation store stays small.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import LeaseLost, NotFoundError
from ..models import Diagnostic, ExtractionReport, JobInfo, MemoryRecord, Source, utc_now
from ..search import fts5_query
from ..text import jaccard, norm_content, norm_name
from .plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, SourcePlan, WriteResult

if TYPE_CHECKING:
    import networkx

__all__ = ("SQLiteExtractionMixin", "entity_id_for", "memory_id_for")

T = TypeVar("T")

#: A retraction whose text overlaps a live memory at least this much (token Jaccard) deletes it.
RETRACTION_MATCH = 0.5


def entity_id_for(namespace: str, name: str, kind: str) -> str:
    """Deterministic entity id: the same name and kind resolve to the same node on every backend."""
    return "e_" + hashlib.sha256(f"{namespace}\x00{norm_name(name)}\x00{kind}".encode()).hexdigest()[:20]


def memory_id_for(namespace: str, session_id: str, kind: str, content: str, n: int = 0) -> str:
    """Deterministic memory id (re-extraction and cassettes give the same ids)."""
    key = f"{namespace}\x00{session_id}\x00{kind}\x00{norm_content(content)}\x00{n}"
    return "m_" + hashlib.sha256(key.encode()).hexdigest()[:20]


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _dt(text: str | None) -> datetime | None:
    if not text:
        return None
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class SQLiteExtractionMixin:
    """Memory reads, the S5 write and jobs for ``SQLiteStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[sqlite3.Connection]]

    # -- memory reads ---------------------------------------------------------------------------

    def memories(
        self, namespace: str, session_id: str | None = None, include_superseded: bool = False
    ) -> list[MemoryRecord]:
        """Memories of a namespace (or one session), oldest first; live only unless asked."""
        sql = "SELECT * FROM memories WHERE namespace = ?"
        args: list[Any] = [namespace]
        if session_id is not None:
            sql += " AND session_id = ?"
            args.append(session_id)
        if not include_superseded:
            sql += " AND status = 'live'"
        with self.read() as c:
            rows = c.execute(sql + " ORDER BY rowid", args).fetchall()
            return self._records(c, rows)

    def get_memory(self, namespace: str, memory_id: str) -> MemoryRecord:
        """One memory by id, whatever its status. Raises NotFoundError."""
        with self.read() as c:
            row = c.execute("SELECT * FROM memories WHERE namespace = ? AND memory_id = ?",
                            (namespace, memory_id)).fetchone()
            if row is None:
                raise NotFoundError(f"no memory {memory_id!r} in namespace {namespace!r}; "
                                    "list them with mem.memories() or `tortoise memories`")
            return self._records(c, [row])[0]

    def search_memories(
        self, namespace: str, match: str, *, k: int, include_superseded: bool = False
    ) -> list[tuple[MemoryRecord, float]]:
        """BM25 over memory content, search keys and entity names; best first (higher is better)."""
        statuses = ("live", "superseded") if include_superseded else ("live",)
        marks = ", ".join("?" for _ in statuses)
        with self.read() as c:
            rows = c.execute(
                "SELECT m.*, bm25(memories_fts, 1.0, 0.8, 0.6) AS rank FROM memories_fts"
                " JOIN memories m ON m.rowid = memories_fts.rowid"
                f" WHERE memories_fts MATCH ? AND m.namespace = ? AND m.status IN ({marks})"
                " ORDER BY rank, m.rowid LIMIT ?",
                [match, namespace, *statuses, k],
            ).fetchall()
            records = self._records(c, rows)
        return [(rec, -row["rank"]) for rec, row in zip(records, rows)]

    def memories_about(self, namespace: str, entity_names: Sequence[str], *, k: int) -> list[MemoryRecord]:
        """Live memories linked to any of the entities (by normalised name), most links first."""
        names = sorted({norm_name(n) for n in entity_names if norm_name(n)})
        if not names or k < 1:
            return []
        marks = ", ".join("?" for _ in names)
        with self.read() as c:
            rows = c.execute(
                "SELECT m.*, COUNT(*) AS links FROM memories m"
                " JOIN memory_entities me ON me.memory_id = m.memory_id"
                " JOIN entities e ON e.entity_id = me.entity_id"
                f" WHERE m.namespace = ? AND m.status = 'live' AND e.norm_name IN ({marks})"
                " GROUP BY m.memory_id ORDER BY links DESC, m.rowid DESC LIMIT ?",
                [namespace, *names, k],
            ).fetchall()
            return self._records(c, rows)

    def supersession_chain(self, namespace: str, memory_id: str) -> list[MemoryRecord]:
        """The versions of a fact, oldest first, that ``memory_id`` belongs to. Raises NotFoundError."""
        first = self.get_memory(namespace, memory_id)
        chain = [first]
        seen = {first.id}
        node = first
        while node.supersedes and node.supersedes not in seen:
            node = self.get_memory(namespace, node.supersedes)
            chain.insert(0, node)
            seen.add(node.id)
        node = first
        while node.superseded_by and node.superseded_by not in seen:
            node = self.get_memory(namespace, node.superseded_by)
            chain.append(node)
            seen.add(node.id)
        return chain

    def find_entities(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Stored entities whose normalised name matches one of ``names``: ``{id, name, kind, note}``."""
        keys = sorted({norm_name(n) for n in names if norm_name(n)})
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        with self.read() as c:
            rows = c.execute(
                f"SELECT entity_id, name, kind, note FROM entities WHERE namespace = ? AND norm_name IN ({marks})"
                " ORDER BY created_at, entity_id",
                [namespace, *keys],
            ).fetchall()
        return [{"id": r[0], "name": r[1], "kind": r[2], "note": r[3]} for r in rows]

    def turn_metadata(self, namespace: str, session_id: str) -> dict[str, dict[str, Any] | None]:
        """Each turn's caller metadata by turn id (what grounding needs to skip memory blocks and subagents)."""
        with self.read() as c:
            rows = c.execute("SELECT turn_id, metadata FROM turns WHERE namespace = ? AND session_id = ?",
                             (namespace, session_id)).fetchall()
        return {r[0]: json.loads(r[1]) if r[1] else None for r in rows}

    def extend_graph(self, g: networkx.MultiDiGraph, namespace: str) -> None:
        """Add entities, memories, about/mentions, provenance (memory -> turn) and supersedes edges."""
        with self.read() as c:
            for r in c.execute("SELECT entity_id, name, kind, note FROM entities WHERE namespace = ?", (namespace,)):
                g.add_node(f"entity:{r[0]}", kind="entity", name=r[1], entity_kind=r[2], note=r[3])
            for r in c.execute("SELECT memory_id, kind, content, status, when_text, session_id, valid_at,"
                               " invalid_at, superseded_by FROM memories WHERE namespace = ?", (namespace,)):
                g.add_node(f"memory:{r[0]}", kind="memory", memory_kind=r[1], content=r[2], status=r[3],
                           when=r[4], session_id=r[5], valid_at=r[6], invalid_at=r[7])
                if r[8]:
                    g.add_edge(f"memory:{r[8]}", f"memory:{r[0]}", key="supersedes", kind="supersedes")
            for r in c.execute("SELECT memory_id, entity_id, relation FROM memory_entities WHERE namespace = ?",
                               (namespace,)):
                g.add_edge(f"memory:{r[0]}", f"entity:{r[1]}", key=r[2], kind=r[2])
            for r in c.execute("SELECT memory_id, turn_id, quote FROM provenance WHERE namespace = ?", (namespace,)):
                g.add_edge(f"memory:{r[0]}", f"turn:{r[1]}", key="source", kind="source", quote=r[2])

    def _records(self, c: sqlite3.Connection, rows: Sequence[sqlite3.Row]) -> list[MemoryRecord]:
        if not rows:
            return []
        ids = [r["memory_id"] for r in rows]
        marks = ", ".join("?" for _ in ids)
        entities: dict[str, list[str]] = {}
        for mid, name in c.execute(
            f"SELECT me.memory_id, e.name FROM memory_entities me JOIN entities e ON e.entity_id = me.entity_id"
            f" WHERE me.memory_id IN ({marks}) ORDER BY me.relation, e.name", ids
        ):
            entities.setdefault(mid, []).append(name)
        sources: dict[str, list[Source]] = {}
        for mid, turn_id, ext, sid, quote in c.execute(
            f"SELECT p.memory_id, p.turn_id, t.external_id, t.session_id, p.quote FROM provenance p"
            f" JOIN turns t ON t.turn_id = p.turn_id WHERE p.memory_id IN ({marks}) ORDER BY t.session_id, t.idx", ids
        ):
            sources.setdefault(mid, []).append(Source(turn_id=turn_id, external_id=ext, session_id=sid, quote=quote))
        return [
            MemoryRecord(
                id=r["memory_id"], kind=r["kind"], content=r["content"], status=r["status"], when=r["when_text"],
                session_id=r["session_id"], entities=entities.get(r["memory_id"], []),
                search_keys=json.loads(r["search_keys"]), sources=sources.get(r["memory_id"], []),
                valid_at=_dt(r["valid_at"]), invalid_at=_dt(r["invalid_at"]), superseded_by=r["superseded_by"],
                supersedes=r["supersedes"], created_at=_dt(r["created_at"]),
            )
            for r in rows
        ]

    # -- S5: the write ----------------------------------------------------------------------------

    def write_extraction(
        self,
        namespace: str,
        plan: ExtractionPlan,
        *,
        finalize: Callable[[WriteResult], ExtractionReport],
        fence: Fence | None = None,
    ) -> WriteResult:
        """Consolidate and write one session's extraction in one transaction.

        Entities resolve to existing nodes by normalised name; each item becomes ADD,
        NOOP (same normalised content as a live memory), UPDATE (``supersedes`` names a
        live memory, which is kept, marked superseded and linked) or, for a retraction,
        DELETE. ``finalize`` turns the outcome into the report stored with the run and
        on the receipt, inside the same transaction.

        Raises:
            LeaseLost: ``fence`` no longer holds (another worker took the job); nothing was written.
        """

        def write(c: sqlite3.Connection) -> WriteResult:
            if fence is not None:
                _check_fence(c, fence)
            result = WriteResult()
            now = utc_now()
            entity_ids = {norm_name(e.name): self._resolve_entity(c, namespace, e, now) for e in plan.entities}
            for item in plan.items:
                self._write_item(c, namespace, plan, item, entity_ids, result, now)
            for retraction in plan.retractions:
                self._retract(c, namespace, plan, retraction, result, now)
            result.counts["entity"] = len(entity_ids)
            report = finalize(result)
            result.report = report
            c.execute(
                "INSERT INTO extractions (extraction_id, namespace, session_id, receipt_id, job_id, status, report,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (plan.extraction_id, namespace, plan.session_id,
                 plan.receipt.receipt_id if plan.receipt else None, fence.job_id if fence else None,
                 report.status, report.model_dump_json(), now.isoformat()),
            )
            if plan.receipt is not None:
                receipt = plan.receipt.model_copy(update={"extraction": report})
                c.execute("UPDATE receipts SET body = ? WHERE namespace = ? AND receipt_id = ?",
                          (receipt.model_dump_json(), namespace, receipt.receipt_id))
            if fence is not None:
                c.execute("UPDATE jobs SET status = 'done', lease_until = NULL, updated_at = ? WHERE job_id = ?",
                          (now.isoformat(), fence.job_id))
            return result

        return self.transaction(write)

    def _resolve_entity(self, c: sqlite3.Connection, namespace: str, e: EntityPlan, now: datetime) -> str:
        key = norm_name(e.name)
        row = c.execute(
            "SELECT entity_id, note FROM entities WHERE namespace = ? AND norm_name = ?"
            " ORDER BY (kind = ?) DESC, created_at, entity_id LIMIT 1",
            (namespace, key, e.kind),
        ).fetchone()
        if row is not None:
            if e.note and not row["note"]:
                c.execute("UPDATE entities SET note = ?, updated_at = ? WHERE entity_id = ?",
                          (e.note, now.isoformat(), row["entity_id"]))
            return row["entity_id"]
        entity_id = entity_id_for(namespace, e.name, e.kind)
        c.execute(
            "INSERT INTO entities (entity_id, namespace, name, norm_name, kind, note, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (entity_id, namespace, e.name.strip(), key, e.kind, e.note, now.isoformat(), now.isoformat()),
        )
        return entity_id

    def _write_item(self, c: sqlite3.Connection, namespace: str, plan: ExtractionPlan, item: ItemPlan,
                    entity_ids: dict[str, str], result: WriteResult, now: datetime) -> None:
        key = norm_content(item.content)
        for name in item.about:
            if norm_name(name) and norm_name(name) not in entity_ids:
                entity_ids[norm_name(name)] = self._resolve_entity(c, namespace, EntityPlan(name, "other"), now)
        about = [entity_ids[norm_name(n)] for n in item.about if norm_name(n)]
        same = c.execute(
            "SELECT memory_id FROM memories WHERE namespace = ? AND norm_content = ? AND status = 'live'"
            " ORDER BY rowid LIMIT 1",
            (namespace, key),
        ).fetchone()
        if same is not None:
            memory_id = same[0]
            self._link(c, namespace, memory_id, about, item.sources, plan.extraction_id)
            self._index(c, memory_id)
            _bump(result.outcomes, "NOOP")
            result.memory_ids.append(memory_id)
            return
        old = None
        if item.supersedes:
            old = _live_head(c, namespace, item.supersedes)
            if old is None:
                result.warnings.append(Diagnostic(
                    stage="s5", code="supersedes_unknown",
                    message=f"{item.kind} {item.content!r} names {item.supersedes!r} as superseded, but no live "
                            "memory has that id; added as new",
                ))
        memory_id = self._insert_memory(c, namespace, plan, item, key, now, supersedes=old)
        if old is not None:
            c.execute(
                "UPDATE memories SET status = 'superseded', invalid_at = ?, superseded_by = ? WHERE memory_id = ?",
                (_iso(plan.valid_at or now), memory_id, old),
            )
            _bump(result.outcomes, "UPDATE")
        else:
            _bump(result.outcomes, "ADD")
        _bump(result.counts, item.kind)
        self._link(c, namespace, memory_id, about, item.sources, plan.extraction_id)
        self._index(c, memory_id)
        result.memory_ids.append(memory_id)

    def _insert_memory(self, c: sqlite3.Connection, namespace: str, plan: ExtractionPlan, item: ItemPlan,
                       key: str, now: datetime, *, supersedes: str | None) -> str:
        n = 0
        while True:
            memory_id = memory_id_for(namespace, plan.session_id, item.kind, item.content, n)
            if c.execute("SELECT 1 FROM memories WHERE memory_id = ?", (memory_id,)).fetchone() is None:
                break
            n += 1
        c.execute(
            "INSERT INTO memories (memory_id, namespace, session_id, kind, content, norm_content, status, when_text,"
            " search_keys, valid_at, supersedes, extraction_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'live', ?, ?, ?, ?, ?, ?)",
            (memory_id, namespace, plan.session_id, item.kind, item.content.strip(), key, item.when,
             json.dumps(list(dict.fromkeys(item.search_keys)), ensure_ascii=False), _iso(plan.valid_at or now),
             supersedes, plan.extraction_id, now.isoformat()),
        )
        return memory_id

    def _link(self, c: sqlite3.Connection, namespace: str, memory_id: str, about: Sequence[str],
              sources: Sequence[SourcePlan], extraction_id: str) -> None:
        c.executemany(
            "INSERT OR IGNORE INTO memory_entities (namespace, memory_id, entity_id, relation) VALUES (?, ?, ?, ?)",
            [(namespace, memory_id, eid, "about") for eid in dict.fromkeys(about)],
        )
        c.executemany(
            "INSERT OR IGNORE INTO provenance (namespace, memory_id, turn_id, quote, extraction_id)"
            " VALUES (?, ?, ?, ?, ?)",
            [(namespace, memory_id, s.turn_id, s.quote, extraction_id) for s in sources],
        )

    def _index(self, c: sqlite3.Connection, memory_id: str) -> None:
        row = c.execute("SELECT rowid, content, search_keys FROM memories WHERE memory_id = ?",
                        (memory_id,)).fetchone()
        names = [r[0] for r in c.execute(
            "SELECT e.name FROM memory_entities me JOIN entities e ON e.entity_id = me.entity_id"
            " WHERE me.memory_id = ?", (memory_id,))]
        c.execute("DELETE FROM memories_fts WHERE rowid = ?", (row[0],))
        c.execute("INSERT INTO memories_fts (rowid, content, search_keys, entities) VALUES (?, ?, ?, ?)",
                  (row[0], row[1], " ".join(json.loads(row[2])), " ".join(names)))

    def _retract(self, c: sqlite3.Connection, namespace: str, plan: ExtractionPlan, r: RetractionPlan,
                 result: WriteResult, now: datetime) -> None:
        target = _live_head(c, namespace, r.target) if r.target else None
        if target is None:
            target = _match_live(c, namespace, r.content)
        if target is None:
            result.warnings.append(Diagnostic(
                stage="s5", code="retraction_unmatched",
                message=f"retraction {r.content!r} matches no live memory; nothing deleted",
            ))
            return
        c.execute("UPDATE memories SET status = 'deleted', invalid_at = ? WHERE memory_id = ?",
                  (_iso(plan.valid_at or now), target))
        c.executemany(
            "INSERT OR IGNORE INTO provenance (namespace, memory_id, turn_id, quote, extraction_id)"
            " VALUES (?, ?, ?, ?, ?)",
            [(namespace, target, s.turn_id, s.quote, plan.extraction_id) for s in r.sources],
        )
        _bump(result.outcomes, "DELETE")
        result.memory_ids.append(target)

    # -- jobs ---------------------------------------------------------------------------------------

    def enqueue_job(self, namespace: str, session_id: str, receipt_id: str | None = None) -> JobInfo:
        """Queue a durable extraction job for a session."""
        now = utc_now().isoformat()
        job_id = f"j_{uuid.uuid4().hex}"

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO jobs (job_id, namespace, session_id, receipt_id, status, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                (job_id, namespace, session_id, receipt_id, now, now),
            )

        self.transaction(write)
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> JobInfo:
        """One job by id. Raises NotFoundError."""
        with self.read() as c:
            row = c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id!r}")
        return _job(row)

    def jobs(self, namespace: str | None = None, status: str | None = None) -> list[JobInfo]:
        """Jobs, oldest first, optionally of one namespace and status."""
        sql, args = "SELECT * FROM jobs WHERE 1 = 1", []
        if namespace is not None:
            sql += " AND namespace = ?"
            args.append(namespace)
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        with self.read() as c:
            return [_job(r) for r in c.execute(sql + " ORDER BY created_at, job_id", args).fetchall()]

    def lease_job(self, namespace: str | None, *, lease_s: float, max_attempts: int,
                  now: datetime | None = None) -> JobInfo | None:
        """Take the oldest runnable job (pending, or running with an expired lease) and bump its revision.

        A job whose lease expired after its last allowed attempt is marked failed instead.
        """
        at = now or utc_now()

        def take(c: sqlite3.Connection) -> JobInfo | None:
            sql = ("SELECT * FROM jobs WHERE (status = 'pending' OR (status = 'running' AND lease_until < ?))")
            args: list[Any] = [at.isoformat()]
            if namespace is not None:
                sql += " AND namespace = ?"
                args.append(namespace)
            for row in c.execute(sql + " ORDER BY created_at, job_id", args).fetchall():
                if row["attempts"] >= max_attempts:
                    errors = json.loads(row["errors"]) + [
                        f"attempt {row['attempts']}: lease expired (worker crashed or stalled); "
                        f"giving up after {max_attempts} attempts"]
                    c.execute("UPDATE jobs SET status = 'failed', errors = ?, lease_until = NULL, updated_at = ?"
                              " WHERE job_id = ?", (json.dumps(errors), at.isoformat(), row["job_id"]))
                    continue
                errors = json.loads(row["errors"])
                if row["status"] == "running":
                    errors.append(f"attempt {row['attempts']}: lease expired (worker crashed or stalled); retried")
                c.execute(
                    "UPDATE jobs SET status = 'running', attempts = attempts + 1, revision = revision + 1,"
                    " lease_until = ?, errors = ?, updated_at = ? WHERE job_id = ?",
                    ((at + timedelta(seconds=lease_s)).isoformat(), json.dumps(errors), at.isoformat(),
                     row["job_id"]),
                )
                return _job(c.execute("SELECT * FROM jobs WHERE job_id = ?", (row["job_id"],)).fetchone())
            return None

        return self.transaction(take)

    def fail_job(self, fence: Fence, error: str, *, max_attempts: int) -> JobInfo:
        """Record a failed attempt: back to pending, or failed for good after ``max_attempts``.

        Raises:
            LeaseLost: the job was taken over; the error is not recorded by this worker.
        """

        def write(c: sqlite3.Connection) -> JobInfo:
            row = _check_fence(c, fence)
            errors = json.loads(row["errors"]) + [f"attempt {row['attempts']}: {error}"]
            status = "failed" if row["attempts"] >= max_attempts else "pending"
            c.execute("UPDATE jobs SET status = ?, errors = ?, lease_until = NULL, updated_at = ? WHERE job_id = ?",
                      (status, json.dumps(errors), utc_now().isoformat(), fence.job_id))
            return _job(c.execute("SELECT * FROM jobs WHERE job_id = ?", (fence.job_id,)).fetchone())

        return self.transaction(write)

    def finish_job(self, fence: Fence) -> None:
        """Mark a leased job done (when there was nothing to write). Raises LeaseLost."""

        def write(c: sqlite3.Connection) -> None:
            _check_fence(c, fence)
            c.execute("UPDATE jobs SET status = 'done', lease_until = NULL, updated_at = ? WHERE job_id = ?",
                      (utc_now().isoformat(), fence.job_id))

        self.transaction(write)


def _check_fence(c: sqlite3.Connection, fence: Fence) -> sqlite3.Row:
    row = c.execute("SELECT * FROM jobs WHERE job_id = ?", (fence.job_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no job {fence.job_id!r}")
    if row["revision"] != fence.revision or row["status"] != "running":
        raise LeaseLost(
            f"job {fence.job_id} is at revision {row['revision']} ({row['status']}), this worker held "
            f"revision {fence.revision}: its lease expired and another worker took it; the result was discarded"
        )
    return row


def _live_head(c: sqlite3.Connection, namespace: str, memory_id: str) -> str | None:
    """The live memory at the end of ``memory_id``'s supersession chain, if any."""
    seen: set[str] = set()
    current: str | None = memory_id
    while current and current not in seen:
        seen.add(current)
        row = c.execute("SELECT status, superseded_by FROM memories WHERE namespace = ? AND memory_id = ?",
                        (namespace, current)).fetchone()
        if row is None or row["status"] == "deleted":
            return None
        if row["status"] == "live":
            return current
        current = row["superseded_by"]
    return None


def _match_live(c: sqlite3.Connection, namespace: str, content: str) -> str | None:
    key = norm_content(content)
    row = c.execute("SELECT memory_id FROM memories WHERE namespace = ? AND norm_content = ? AND status = 'live'",
                    (namespace, key)).fetchone()
    if row is not None:
        return row[0]
    match = fts5_query(content)
    if match is None:
        return None
    best, best_score = None, RETRACTION_MATCH
    for mid, text in c.execute(
        "SELECT m.memory_id, m.content FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid"
        " WHERE memories_fts MATCH ? AND m.namespace = ? AND m.status = 'live' ORDER BY bm25(memories_fts) LIMIT 20",
        (match, namespace),
    ):
        score = jaccard(content, text)
        if score >= best_score:
            best, best_score = mid, score
    return best


def _bump(counter: dict[str, int], key: str) -> None:
    counter[key] = counter.get(key, 0) + 1


def _job(row: sqlite3.Row) -> JobInfo:
    return JobInfo(
        job_id=row["job_id"], namespace=row["namespace"], session_id=row["session_id"], status=row["status"],
        attempts=row["attempts"], revision=row["revision"], lease_until=_dt(row["lease_until"]),
        errors=json.loads(row["errors"]), receipt_id=row["receipt_id"],
        created_at=_dt(row["created_at"]), updated_at=_dt(row["updated_at"]),
    )
