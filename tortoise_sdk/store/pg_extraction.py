"""PostgreSQL side of extraction: memories, entities, provenance, the S5 write, and the shared job queue.

The same semantics as ``sqlite_extraction`` (outcomes, ids, ordering), built for many
writers on many hosts:

- the S5 write of a namespace holds a transaction-scoped advisory lock, so two workers
  consolidating into one namespace see each other's memories (no duplicate ADD), as
  SQLite's single writer guarantees;
- jobs are leased with ``FOR UPDATE SKIP LOCKED``, timed by the database clock (hosts
  with skewed clocks agree on expiry), and every lease bumps the job's revision: a
  write under an older revision is refused with ``LeaseLost``, logged and counted.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row

from ..errors import LeaseLost, NotFoundError
from ..models import Diagnostic, ExtractionReport, JobInfo, MemoryRecord, Source
from ..search import query_terms
from ..text import jaccard, norm_content, norm_name
from .pg_fts import bm25_search_sql, index_memories_sql, newest_matches_sql, usable_terms
from .plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, SourcePlan, WriteResult
from .sqlite_extraction import RETRACTION_MATCH, entity_id_for, memory_id_for

if TYPE_CHECKING:
    import networkx
    import psycopg

__all__ = ("PostgresExtractionMixin", "index_memory")

log = logging.getLogger("tortoise_sdk.store.postgres")

# The column weights of SQLite's bm25(memories_fts, 1.0, 0.8, 0.6): content is label A,
# search keys B, entity names C. Retraction matching uses plain bm25(memories_fts).
_MEMORY_WEIGHTS = {"A": 1.0, "B": 0.8, "C": 0.6}
_PLAIN_WEIGHTS = {"A": 1.0, "B": 1.0, "C": 1.0}
_MEMORY_OUTPUT = ("id, memory_id, namespace, session_id, kind, content, status, when_text, search_keys, valid_at,"
                  " invalid_at, superseded_by, supersedes, created_at")
_MEMORY_COLUMNS = ("m.id, m.memory_id, m.namespace, m.session_id, m.kind, m.content, m.status, m.when_text,"
                   " m.search_keys, m.valid_at, m.invalid_at, m.superseded_by, m.supersedes, m.created_at")
# Advisory-lock class for per-namespace S5 writes (the object id is hashtext(namespace)).
_S5_LOCK_CLASS = 0x7435


class PostgresExtractionMixin:
    """Memory reads, the S5 write and jobs for ``PostgresStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[psycopg.Connection]]

    #: Late writes refused because the lease had moved on (per process).
    fenced_writes: int = 0
    _fence_lock = threading.Lock()

    # -- memory reads ---------------------------------------------------------------------------

    def memories(
        self, namespace: str, session_id: str | None = None, include_superseded: bool = False
    ) -> list[MemoryRecord]:
        """Memories of a namespace (or one session), oldest first; live only unless asked."""
        sql = f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE m.namespace = %s"
        args: list[Any] = [namespace]
        if session_id is not None:
            sql += " AND m.session_id = %s"
            args.append(session_id)
        if not include_superseded:
            sql += " AND m.status = 'live'"
        with self.read() as c:
            return self._records(c, _dicts(c, sql + " ORDER BY m.id", args))

    def get_memory(self, namespace: str, memory_id: str) -> MemoryRecord:
        """One memory by id, whatever its status. Raises NotFoundError."""
        with self.read() as c:
            rows = _dicts(c, f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE m.namespace = %s AND m.memory_id = %s",
                          (namespace, memory_id))
            if not rows:
                raise NotFoundError(f"no memory {memory_id!r} in namespace {namespace!r}; "
                                    "list them with mem.memories() or `tortoise memories`")
            return self._records(c, rows)[0]

    def search_memories(
        self, namespace: str, match: str, *, k: int, include_superseded: bool = False
    ) -> list[tuple[MemoryRecord, float]]:
        """Ranked search over memory content, search keys and entity names (an ``fts5_query`` expression)."""
        from .postgres import terms_from_fts5

        return self.search_memory_terms(namespace, terms_from_fts5(match), k=k,
                                        include_superseded=include_superseded)

    def search_memory_terms(
        self, namespace: str, terms: Sequence[str], *, k: int, include_superseded: bool = False
    ) -> list[tuple[MemoryRecord, float]]:
        """Memories matching any of the plain ``terms``, best first (higher is better); ties oldest first."""
        terms = usable_terms(terms)
        if not terms or k < 1:
            return []
        statuses = ["live", "superseded"] if include_superseded else ["live"]
        sql = bm25_search_sql(table="memories", alias="m", select=_MEMORY_COLUMNS, from_="memories m",
                              where="m.namespace = %s AND m.status = ANY(%s)", output=_MEMORY_OUTPUT,
                              order_tail="matched.id", weights=_MEMORY_WEIGHTS)
        with self.read() as c:
            rows = _dicts(c, sql, [terms, namespace, statuses, k])
            records = self._records(c, rows)
        return [(rec, float(row["score"])) for rec, row in zip(records, rows)]

    def candidate_memories(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                           per_term: int = 200, include_superseded: bool = False) -> list[tuple[MemoryRecord, float]]:
        """Memories ranked by the summed weights of the terms they hold (content, search keys, entity
        names), newest first among equals; each term walks at most ``per_term`` newest matches."""
        terms = [t for t in weighted_terms if t and "\x00" not in t]
        if k < 1 or not terms:
            return []
        statuses = ["live", "superseded"] if include_superseded else ["live"]
        scores: dict[int, float] = {}
        sql = newest_matches_sql(table="memories", alias="m", where="m.namespace = %s AND m.status = ANY(%s)",
                                 content_only=False)
        with self.read() as c:
            for ord_, rid in c.execute(sql, (terms, namespace, statuses, per_term)).fetchall():
                scores[rid] = scores.get(rid, 0.0) + weighted_terms[terms[ord_ - 1]]
            top = sorted(scores, key=lambda r: (-scores[r], -r))[:k]
            if not top:
                return []
            rows = _dicts(c, f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE m.id = ANY(%s)", (top,))
            rows.sort(key=lambda r: (-scores[r["id"]], -r["id"]))
            records = self._records(c, rows)
        return [(rec, scores[r["id"]]) for rec, r in zip(records, rows)]

    def memories_about(self, namespace: str, entity_names: Sequence[str], *, k: int) -> list[MemoryRecord]:
        """Live memories linked to any of the entities (by normalised name), most links first."""
        names = sorted({norm_name(n) for n in entity_names if norm_name(n)})
        if not names or k < 1:
            return []
        with self.read() as c:
            rows = _dicts(
                c,
                f"SELECT {_MEMORY_COLUMNS}, COUNT(*) AS links FROM memories m"
                " JOIN memory_entities me ON me.memory_id = m.memory_id"
                " JOIN entities e ON e.entity_id = me.entity_id"
                " WHERE m.namespace = %s AND m.status = 'live' AND e.norm_name = ANY(%s)"
                " GROUP BY m.id ORDER BY links DESC, m.id DESC LIMIT %s",
                [namespace, names, k],
            )
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
        with self.read() as c:
            rows = c.execute(
                "SELECT entity_id, name, kind, note FROM entities WHERE namespace = %s AND norm_name = ANY(%s)"
                ' ORDER BY created_at, entity_id COLLATE "C"',
                (namespace, keys),
            ).fetchall()
        return [{"id": r[0], "name": r[1], "kind": r[2], "note": r[3]} for r in rows]

    def turn_metadata(self, namespace: str, session_id: str) -> dict[str, dict[str, Any] | None]:
        """Each turn's caller metadata by turn id."""
        with self.read() as c:
            rows = c.execute("SELECT turn_id, metadata FROM turns WHERE namespace = %s AND session_id = %s",
                             (namespace, session_id)).fetchall()
        return {r[0]: json.loads(r[1]) if r[1] else None for r in rows}

    def extend_graph(self, g: networkx.MultiDiGraph, namespace: str) -> None:
        """Add entities, memories, about/mentions, provenance (memory -> turn) and supersedes edges."""
        with self.read() as c:
            for r in c.execute("SELECT entity_id, name, kind, note FROM entities WHERE namespace = %s"
                               " ORDER BY created_at, entity_id", (namespace,)).fetchall():
                g.add_node(f"entity:{r[0]}", kind="entity", name=r[1], entity_kind=r[2], note=r[3])
            for r in c.execute("SELECT memory_id, kind, content, status, when_text, session_id, valid_at,"
                               " invalid_at, superseded_by FROM memories WHERE namespace = %s ORDER BY id",
                               (namespace,)).fetchall():
                g.add_node(f"memory:{r[0]}", kind="memory", memory_kind=r[1], content=r[2], status=r[3],
                           when=r[4], session_id=r[5], valid_at=_iso(r[6]), invalid_at=_iso(r[7]))
                if r[8]:
                    g.add_edge(f"memory:{r[8]}", f"memory:{r[0]}", key="supersedes", kind="supersedes")
            for r in c.execute("SELECT memory_id, entity_id, relation FROM memory_entities WHERE namespace = %s",
                               (namespace,)).fetchall():
                g.add_edge(f"memory:{r[0]}", f"entity:{r[1]}", key=r[2], kind=r[2])
            for r in c.execute("SELECT memory_id, turn_id, quote FROM provenance WHERE namespace = %s",
                               (namespace,)).fetchall():
                g.add_edge(f"memory:{r[0]}", f"turn:{r[1]}", key="source", kind="source", quote=r[2])

    def _records(self, c: psycopg.Connection, rows: Sequence[dict[str, Any]]) -> list[MemoryRecord]:
        if not rows:
            return []
        ids = [r["memory_id"] for r in rows]
        entities: dict[str, list[str]] = {}
        for mid, name in c.execute(
            "SELECT me.memory_id, e.name FROM memory_entities me JOIN entities e ON e.entity_id = me.entity_id"
            ' WHERE me.memory_id = ANY(%s) ORDER BY me.relation, e.name COLLATE "C"', (ids,)
        ).fetchall():
            entities.setdefault(mid, []).append(name)
        sources: dict[str, list[Source]] = {}
        for mid, turn_id, ext, sid, quote in c.execute(
            "SELECT p.memory_id, p.turn_id, t.external_id, t.session_id, p.quote FROM provenance p"
            ' JOIN turns t ON t.turn_id = p.turn_id WHERE p.memory_id = ANY(%s) ORDER BY t.session_id COLLATE "C",'
            " t.idx", (ids,)
        ).fetchall():
            sources.setdefault(mid, []).append(Source(turn_id=turn_id, external_id=ext, session_id=sid, quote=quote))
        return [
            MemoryRecord(
                id=r["memory_id"], kind=r["kind"], content=r["content"], status=r["status"], when=r["when_text"],
                session_id=r["session_id"], entities=entities.get(r["memory_id"], []),
                search_keys=json.loads(r["search_keys"]), sources=sources.get(r["memory_id"], []),
                valid_at=r["valid_at"], invalid_at=r["invalid_at"], superseded_by=r["superseded_by"],
                supersedes=r["supersedes"], created_at=r["created_at"],
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
        """Consolidate and write one session's extraction in one transaction (see ``SQLiteStore``).

        Raises:
            LeaseLost: ``fence`` no longer holds (another worker took the job); nothing was written.
        """

        def write(c: psycopg.Connection) -> WriteResult:
            if fence is not None:
                self._check_fence(c, fence)
            c.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_S5_LOCK_CLASS, namespace))
            result = WriteResult()
            now = _db_now(c)
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
                " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (plan.extraction_id, namespace, plan.session_id,
                 plan.receipt.receipt_id if plan.receipt else None, fence.job_id if fence else None,
                 report.status, report.model_dump_json(), now),
            )
            if plan.receipt is not None:
                receipt = plan.receipt.model_copy(update={"extraction": report})
                c.execute("UPDATE receipts SET body = %s WHERE namespace = %s AND receipt_id = %s",
                          (receipt.model_dump_json(), namespace, receipt.receipt_id))
            if fence is not None:
                c.execute("UPDATE jobs SET status = 'done', lease_until = NULL, updated_at = %s WHERE job_id = %s",
                          (now, fence.job_id))
            return result

        return self.transaction(write)

    def _resolve_entity(self, c: psycopg.Connection, namespace: str, e: EntityPlan, now: datetime) -> str:
        key = norm_name(e.name)
        row = c.execute(
            "SELECT entity_id, note FROM entities WHERE namespace = %s AND norm_name = %s"
            ' ORDER BY (kind = %s) DESC, created_at, entity_id COLLATE "C" LIMIT 1',
            (namespace, key, e.kind),
        ).fetchone()
        if row is not None:
            if e.note and not row[1]:
                c.execute("UPDATE entities SET note = %s, updated_at = %s WHERE entity_id = %s",
                          (e.note, now, row[0]))
            return row[0]
        entity_id = entity_id_for(namespace, e.name, e.kind)
        c.execute(
            "INSERT INTO entities (entity_id, namespace, name, norm_name, kind, note, created_at, updated_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (entity_id, namespace, e.name.strip(), key, e.kind, e.note, now, now),
        )
        return entity_id

    def _write_item(self, c: psycopg.Connection, namespace: str, plan: ExtractionPlan, item: ItemPlan,
                    entity_ids: dict[str, str], result: WriteResult, now: datetime) -> None:
        key = norm_content(item.content)
        for name in item.about:
            if norm_name(name) and norm_name(name) not in entity_ids:
                entity_ids[norm_name(name)] = self._resolve_entity(c, namespace, EntityPlan(name, "other"), now)
        about = [entity_ids[norm_name(n)] for n in item.about if norm_name(n)]
        same = c.execute(
            "SELECT memory_id FROM memories WHERE namespace = %s AND norm_content = %s AND status = 'live'"
            " ORDER BY id LIMIT 1",
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
                "UPDATE memories SET status = 'superseded', invalid_at = %s, superseded_by = %s WHERE memory_id = %s",
                (plan.valid_at or now, memory_id, old),
            )
            _bump(result.outcomes, "UPDATE")
        else:
            _bump(result.outcomes, "ADD")
        _bump(result.counts, item.kind)
        self._link(c, namespace, memory_id, about, item.sources, plan.extraction_id)
        self._index(c, memory_id)
        result.memory_ids.append(memory_id)

    def _insert_memory(self, c: psycopg.Connection, namespace: str, plan: ExtractionPlan, item: ItemPlan,
                       key: str, now: datetime, *, supersedes: str | None) -> str:
        n = 0
        while True:
            memory_id = memory_id_for(namespace, plan.session_id, item.kind, item.content, n)
            if c.execute("SELECT 1 FROM memories WHERE memory_id = %s", (memory_id,)).fetchone() is None:
                break
            n += 1
        c.execute(
            "INSERT INTO memories (memory_id, namespace, session_id, kind, content, norm_content, status, when_text,"
            " search_keys, valid_at, supersedes, extraction_id, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, 'live', %s, %s, %s, %s, %s, %s)",
            (memory_id, namespace, plan.session_id, item.kind, item.content.strip(), key, item.when,
             json.dumps(list(dict.fromkeys(item.search_keys)), ensure_ascii=False), plan.valid_at or now,
             supersedes, plan.extraction_id, now),
        )
        return memory_id

    def _link(self, c: psycopg.Connection, namespace: str, memory_id: str, about: Sequence[str],
              sources: Sequence[SourcePlan], extraction_id: str) -> None:
        with c.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_entities (namespace, memory_id, entity_id, relation) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(namespace, memory_id, eid, "about") for eid in dict.fromkeys(about)],
            )
            cur.executemany(
                "INSERT INTO provenance (namespace, memory_id, turn_id, quote, extraction_id)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(namespace, memory_id, s.turn_id, s.quote, extraction_id) for s in sources],
            )

    def _index(self, c: psycopg.Connection, memory_id: str) -> None:
        index_memory(c, memory_id)

    def _retract(self, c: psycopg.Connection, namespace: str, plan: ExtractionPlan, r: RetractionPlan,
                 result: WriteResult, now: datetime) -> None:
        target = _live_head(c, namespace, r.target) if r.target else None
        if target is None:
            target = self._match_live(c, namespace, r.content)
        if target is None:
            result.warnings.append(Diagnostic(
                stage="s5", code="retraction_unmatched",
                message=f"retraction {r.content!r} matches no live memory; nothing deleted",
            ))
            return
        c.execute("UPDATE memories SET status = 'deleted', invalid_at = %s WHERE memory_id = %s",
                  (plan.valid_at or now, target))
        with c.cursor() as cur:
            cur.executemany(
                "INSERT INTO provenance (namespace, memory_id, turn_id, quote, extraction_id)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(namespace, target, s.turn_id, s.quote, plan.extraction_id) for s in r.sources],
            )
        _bump(result.outcomes, "DELETE")
        result.memory_ids.append(target)

    def _match_live(self, c: psycopg.Connection, namespace: str, content: str) -> str | None:
        key = norm_content(content)
        row = c.execute(
            "SELECT memory_id FROM memories WHERE namespace = %s AND norm_content = %s AND status = 'live'"
            " ORDER BY id LIMIT 1",
            (namespace, key),
        ).fetchone()
        if row is not None:
            return row[0]
        terms = usable_terms(query_terms(content))
        if not terms:
            return None
        best, best_score = None, RETRACTION_MATCH
        sql = bm25_search_sql(table="memories", alias="m", select="m.id, m.memory_id, m.content", from_="memories m",
                              where="m.namespace = %s AND m.status = 'live'", output="memory_id, content",
                              order_tail="matched.id", weights=_PLAIN_WEIGHTS)
        for mid, text, _score in c.execute(sql, [terms, namespace, 20]).fetchall():
            score = jaccard(content, text)
            if score >= best_score:
                best, best_score = mid, score
        return best

    # -- jobs ---------------------------------------------------------------------------------------

    def enqueue_job(self, namespace: str, session_id: str, receipt_id: str | None = None) -> JobInfo:
        """Queue a durable extraction job for a session."""
        job_id = f"j_{uuid.uuid4().hex}"

        def write(c: psycopg.Connection) -> JobInfo:
            rows = _dicts(
                c,
                "INSERT INTO jobs (job_id, namespace, session_id, receipt_id, status, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, 'pending', clock_timestamp(), clock_timestamp()) RETURNING *",
                (job_id, namespace, session_id, receipt_id),
            )
            return _job(rows[0])

        return self.transaction(write)

    def get_job(self, job_id: str) -> JobInfo:
        """One job by id. Raises NotFoundError."""
        with self.read() as c:
            rows = _dicts(c, "SELECT * FROM jobs WHERE job_id = %s", (job_id,))
        if not rows:
            raise NotFoundError(f"no job {job_id!r}")
        return _job(rows[0])

    def jobs(self, namespace: str | None = None, status: str | None = None) -> list[JobInfo]:
        """Jobs, oldest first, optionally of one namespace and status."""
        sql, args = "SELECT * FROM jobs WHERE TRUE", []
        if namespace is not None:
            sql += " AND namespace = %s"
            args.append(namespace)
        if status is not None:
            sql += " AND status = %s"
            args.append(status)
        with self.read() as c:
            return [_job(r) for r in _dicts(c, sql + ' ORDER BY created_at, job_id COLLATE "C"', args)]

    def lease_job(self, namespace: str | None, *, lease_s: float, max_attempts: int,
                  now: datetime | None = None) -> JobInfo | None:
        """Take the oldest runnable job (pending, or running with an expired lease) and bump its revision.

        Rows other workers are leasing right now are skipped (``FOR UPDATE SKIP LOCKED``),
        so workers never wait on each other. A job whose lease expired after its last
        allowed attempt is marked failed instead. ``now`` defaults to the database clock.
        """

        def take(c: psycopg.Connection) -> JobInfo | None:
            at = now or _db_now(c)
            sql = ("SELECT * FROM jobs WHERE (status = 'pending' OR (status = 'running' AND lease_until < %s))")
            args: list[Any] = [at]
            if namespace is not None:
                sql += " AND namespace = %s"
                args.append(namespace)
            sql += ' ORDER BY created_at, job_id COLLATE "C" LIMIT 1 FOR UPDATE SKIP LOCKED'
            while True:
                rows = _dicts(c, sql, args)
                if not rows:
                    return None
                row = rows[0]
                if row["attempts"] >= max_attempts:
                    errors = json.loads(row["errors"]) + [
                        f"attempt {row['attempts']}: lease expired (worker crashed or stalled); "
                        f"giving up after {max_attempts} attempts"]
                    c.execute("UPDATE jobs SET status = 'failed', errors = %s, lease_until = NULL, updated_at = %s"
                              " WHERE job_id = %s", (json.dumps(errors), at, row["job_id"]))
                    continue
                errors = json.loads(row["errors"])
                if row["status"] == "running":
                    errors.append(f"attempt {row['attempts']}: lease expired (worker crashed or stalled); retried")
                leased = _dicts(
                    c,
                    "UPDATE jobs SET status = 'running', attempts = attempts + 1, revision = revision + 1,"
                    " lease_until = %s, errors = %s, updated_at = %s WHERE job_id = %s RETURNING *",
                    (at + timedelta(seconds=lease_s), json.dumps(errors), at, row["job_id"]),
                )
                return _job(leased[0])

        return self.transaction(take)

    def fail_job(self, fence: Fence, error: str, *, max_attempts: int) -> JobInfo:
        """Record a failed attempt: back to pending, or failed for good after ``max_attempts``.

        Raises:
            LeaseLost: the job was taken over; the error is not recorded by this worker.
        """

        def write(c: psycopg.Connection) -> JobInfo:
            row = self._check_fence(c, fence)
            errors = json.loads(row["errors"]) + [f"attempt {row['attempts']}: {error}"]
            status = "failed" if row["attempts"] >= max_attempts else "pending"
            rows = _dicts(
                c,
                "UPDATE jobs SET status = %s, errors = %s, lease_until = NULL, updated_at = clock_timestamp()"
                " WHERE job_id = %s RETURNING *",
                (status, json.dumps(errors), fence.job_id),
            )
            return _job(rows[0])

        return self.transaction(write)

    def finish_job(self, fence: Fence) -> None:
        """Mark a leased job done (when there was nothing to write). Raises LeaseLost."""

        def write(c: psycopg.Connection) -> None:
            self._check_fence(c, fence)
            c.execute("UPDATE jobs SET status = 'done', lease_until = NULL, updated_at = clock_timestamp()"
                      " WHERE job_id = %s", (fence.job_id,))

        self.transaction(write)

    def _check_fence(self, c: psycopg.Connection, fence: Fence) -> dict[str, Any]:
        # FOR UPDATE: a concurrent lease of this job waits (or skips it) until this write commits.
        rows = _dicts(c, "SELECT * FROM jobs WHERE job_id = %s FOR UPDATE", (fence.job_id,))
        if not rows:
            raise NotFoundError(f"no job {fence.job_id!r}")
        row = rows[0]
        if row["revision"] != fence.revision or row["status"] != "running":
            with self._fence_lock:
                self.fenced_writes += 1
            log.warning("refused a late write for job %s: it is at revision %s (%s), the worker held %s",
                        fence.job_id, row["revision"], row["status"], fence.revision)
            raise LeaseLost(
                f"job {fence.job_id} is at revision {row['revision']} ({row['status']}), this worker held "
                f"revision {fence.revision}: its lease expired and another worker took it; the result was discarded"
            )
        return row


def index_memory(c: psycopg.Connection, memory_id: str | None) -> None:
    """Recompute one memory's full-text vector and length (every memory's when ``memory_id`` is None)."""
    if memory_id is None:
        c.execute(index_memories_sql("TRUE"))
    else:
        c.execute(index_memories_sql("m.memory_id = %s"), (memory_id,))


def _dicts(c: psycopg.Connection, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
    with c.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, args).fetchall()


def _db_now(c: psycopg.Connection) -> datetime:
    return c.execute("SELECT clock_timestamp()").fetchone()[0]


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()


def _live_head(c: psycopg.Connection, namespace: str, memory_id: str) -> str | None:
    """The live memory at the end of ``memory_id``'s supersession chain, if any."""
    seen: set[str] = set()
    current: str | None = memory_id
    while current and current not in seen:
        seen.add(current)
        row = c.execute("SELECT status, superseded_by FROM memories WHERE namespace = %s AND memory_id = %s",
                        (namespace, current)).fetchone()
        if row is None or row[0] == "deleted":
            return None
        if row[0] == "live":
            return current
        current = row[1]
    return None


def _bump(counter: dict[str, int], key: str) -> None:
    counter[key] = counter.get(key, 0) + 1


def _job(row: dict[str, Any]) -> JobInfo:
    return JobInfo(
        job_id=row["job_id"], namespace=row["namespace"], session_id=row["session_id"], status=row["status"],
        attempts=row["attempts"], revision=row["revision"], lease_until=row["lease_until"],
        errors=json.loads(row["errors"]), receipt_id=row["receipt_id"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )
