"""SQLite side of extraction: memories, entities, provenance, the S5 write, and the durable job queue.

A mixin of ``SQLiteStore`` (it relies on its ``transaction`` and ``read``), kept in
its own module so the foundation store stays small. The decisions (outcomes, order,
job states) live in ``extraction_core.ExtractionCore``; this module holds SQLite's SQL.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...errors import NotFoundError
from ...models import ExtractionReport, ExtractionState, JobInfo, MemoryRecord, utc_now
from ...search import query_terms, terms_from_fts5
from ..extraction_core import BUSY_SESSION, ExtractionCore
from ..plan import EntityPlan, ExtractionPlan, ItemPlan, SourcePlan
from ..rows import add_graph, and_equal, entity_dicts, iso_dt, job_info, memory_records, norm_keys, state_info
from .ranking import memory_bm25

if TYPE_CHECKING:
    import networkx

__all__ = ("SQLiteExtractionMixin",)


class SQLiteExtractionMixin(ExtractionCore):
    """Memory reads, the S5 write and jobs for ``SQLiteStore``."""

    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[sqlite3.Connection]]
    _log = logging.getLogger("tortoise_sdk.store.sqlite")

    # -- memory reads ---------------------------------------------------------------------------

    def memories(
        self, namespace: str, session_id: str | None = None, include_superseded: bool = False, *,
        latest: int | None = None, category: str | None = None,
    ) -> list[MemoryRecord]:
        """Memories of a namespace (or one session, or one category), oldest first; live only unless asked;
        the newest ``latest``."""
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM memories WHERE namespace = ?", args,
                        {"session_id": session_id, "category": category})
        if not include_superseded:
            sql += " AND status = 'live'"
        if latest is not None:
            sql = f"SELECT * FROM ({sql} ORDER BY rowid DESC LIMIT ?)"
            args.append(max(0, latest))
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
        """BM25 over memory content, search keys and entity names with the namespace's statistics;
        best first (higher is better), ties oldest first."""
        statuses = ("live", "superseded") if include_superseded else ("live",)
        with self.read() as c:
            ranked = memory_bm25(c, namespace, terms_from_fts5(match), statuses, k=k)
            rows = _rows_by_rowid(c, [rid for rid, _ in ranked])
            records = self._records(c, rows)
        return [(rec, score) for rec, (_, score) in zip(records, ranked)]

    def memories_about(self, namespace: str, entity_names: Sequence[str], *, k: int) -> list[MemoryRecord]:
        """Live memories linked to any of the entities (by normalised name), most links first."""
        names = norm_keys(entity_names)
        if not names or k < 1:
            return []
        marks = ", ".join("?" for _ in names)
        with self.read() as c:
            rows = c.execute(
                "SELECT m.*, COUNT(*) AS links FROM memories m"
                " JOIN memory_entities me ON me.memory_id = m.memory_id"
                " JOIN entities e ON e.entity_id = me.entity_id"
                f" WHERE m.namespace = ? AND m.status = 'live' AND (e.norm_name IN ({marks}) OR e.entity_id IN"
                f" (SELECT entity_id FROM entity_aliases WHERE namespace = ? AND how <> 'not'"
                f" AND norm_alias IN ({marks})))"
                " GROUP BY m.memory_id ORDER BY links DESC, m.rowid DESC LIMIT ?",
                [namespace, *names, namespace, *names, k],
            ).fetchall()
            return self._records(c, rows)

    def find_entities(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Stored entities whose normalised name matches one of ``names``: ``{id, name, kind, note}``."""
        keys = norm_keys(names)
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        with self.read() as c:
            rows = c.execute(
                f"SELECT entity_id, name, kind, note FROM entities WHERE namespace = ? AND (norm_name IN ({marks})"
                f" OR entity_id IN (SELECT entity_id FROM entity_aliases WHERE namespace = ? AND how <> 'not'"
                f" AND norm_alias IN ({marks}))) ORDER BY created_at, entity_id",
                [namespace, *keys, namespace, *keys],
            ).fetchall()
        return entity_dicts(rows)

    def turn_metadata(self, namespace: str, session_id: str, *, start: int = 0,
                      stop: int | None = None) -> dict[str, dict[str, Any] | None]:
        """Each turn's caller metadata by turn id (what grounding needs to skip memory blocks and subagents)."""
        with self.read() as c:
            rows = c.execute("SELECT turn_id, metadata FROM turns WHERE namespace = ? AND session_id = ?"
                             " AND idx >= ? AND idx < ?",
                             (namespace, session_id, start, stop if stop is not None else 2**62)).fetchall()
        return {r[0]: json.loads(r[1]) if r[1] else None for r in rows}

    def extend_graph(self, g: networkx.MultiDiGraph, namespace: str) -> None:
        """Add entities, memories, about/mentions, provenance (memory -> turn) and supersedes edges."""
        with self.read() as c:
            add_graph(
                g,
                c.execute("SELECT entity_id, name, kind, note FROM entities WHERE namespace = ?",
                          (namespace,)).fetchall(),
                c.execute("SELECT memory_id, kind, content, status, when_text, session_id, valid_at,"
                          " invalid_at, superseded_by FROM memories WHERE namespace = ?", (namespace,)).fetchall(),
                c.execute("SELECT memory_id, entity_id, relation FROM memory_entities WHERE namespace = ?",
                          (namespace,)).fetchall(),
                c.execute("SELECT memory_id, turn_id, quote FROM provenance WHERE namespace = ?",
                          (namespace,)).fetchall(),
            )

    def _records(self, c: sqlite3.Connection, rows: Sequence[sqlite3.Row]) -> list[MemoryRecord]:
        if not rows:
            return []
        ids = [r["memory_id"] for r in rows]
        marks = ", ".join("?" for _ in ids)
        entity_rows = c.execute(
            f"SELECT me.memory_id, e.name FROM memory_entities me JOIN entities e ON e.entity_id = me.entity_id"
            f" WHERE me.memory_id IN ({marks}) ORDER BY me.relation, e.name", ids
        ).fetchall()
        source_rows = c.execute(
            f"SELECT p.memory_id, p.turn_id, t.external_id, t.session_id, p.quote FROM provenance p"
            f" JOIN turns t ON t.turn_id = p.turn_id WHERE p.memory_id IN ({marks}) ORDER BY t.session_id, t.idx", ids
        ).fetchall()
        return memory_records(rows, entity_rows, source_rows, iso_dt)

    # -- S5 hooks ---------------------------------------------------------------------------------

    def _begin_s5(self, c: sqlite3.Connection, namespace: str) -> datetime:
        return utc_now()  # BEGIN IMMEDIATE already made this the only writer

    def _find_entity(self, c: sqlite3.Connection, namespace: str, key: str, kind: str) -> tuple[str, str | None] | None:
        row = c.execute(
            "SELECT entity_id, note FROM entities WHERE namespace = ? AND norm_name = ?"
            " ORDER BY (kind = ?) DESC, created_at, entity_id LIMIT 1",
            (namespace, key, kind),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def _insert_entity(self, c: sqlite3.Connection, namespace: str, entity_id: str, e: EntityPlan, key: str,
                       now: datetime, note_session_id: str | None, session_id: str | None = None) -> None:
        c.execute(
            "INSERT INTO entities (entity_id, namespace, name, norm_name, kind, note, note_session_id, created_at,"
            " updated_at, created_session_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entity_id, namespace, e.name.strip(), key, e.kind, e.note, note_session_id, now.isoformat(),
             now.isoformat(), session_id),
        )

    def _live_with_content(self, c: sqlite3.Connection, namespace: str, keys: Sequence[str],
                           entity_key: str | None = None) -> str | None:
        row = c.execute(
            "SELECT memory_id FROM memories WHERE namespace = ? AND (norm_content IN"
            f" ({', '.join('?' for _ in keys)}) OR entity_key = ?) AND status = 'live' ORDER BY rowid LIMIT 1",
            (namespace, *keys, entity_key),
        ).fetchone()
        return None if row is None else row[0]

    def _memory_state(self, c: sqlite3.Connection, namespace: str, memory_id: str) -> tuple[str, str | None] | None:
        row = c.execute("SELECT status, superseded_by FROM memories WHERE namespace = ? AND memory_id = ?",
                        (namespace, memory_id)).fetchone()
        return None if row is None else (row[0], row[1])

    def _memory_exists(self, c: sqlite3.Connection, memory_id: str) -> bool:
        return c.execute("SELECT 1 FROM memories WHERE memory_id = ?", (memory_id,)).fetchone() is not None

    def _insert_memory_row(self, c: sqlite3.Connection, namespace: str, memory_id: str, plan: ExtractionPlan,
                           item: ItemPlan, key: str, now: datetime, supersedes: str | None,
                           entity_key: str | None = None) -> None:
        c.execute(
            "INSERT INTO memories (memory_id, namespace, session_id, kind, content, norm_content, status, when_text,"
            " search_keys, valid_at, supersedes, extraction_id, created_at, category, entity_key, agreement)"
            " VALUES (?, ?, ?, ?, ?, ?, 'live', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (memory_id, namespace, plan.session_id, item.kind, item.content.strip(), key, item.when,
             json.dumps(list(dict.fromkeys(item.search_keys)), ensure_ascii=False),
             (plan.valid_at or now).isoformat(), supersedes, plan.extraction_id, now.isoformat(), item.category,
             entity_key, item.agreement),
        )

    def _set_memory_status(self, c: sqlite3.Connection, memory_id: str, status: str, invalid_at: datetime,
                           superseded_by: str | None = None) -> None:
        c.execute("UPDATE memories SET status = ?, invalid_at = ?, superseded_by = COALESCE(?, superseded_by)"
                  " WHERE memory_id = ?", (status, invalid_at.isoformat(), superseded_by, memory_id))

    def _link(self, c: sqlite3.Connection, namespace: str, memory_id: str, about: Sequence[str],
              sources: Sequence[SourcePlan], extraction_id: str, *, mentions: Sequence[str] = ()) -> None:
        named = dict(zip(reversed(about), reversed(list(mentions)))) if mentions else {}
        c.executemany(
            "INSERT OR IGNORE INTO memory_entities (namespace, memory_id, entity_id, relation, mention)"
            " VALUES (?, ?, ?, ?, ?)",
            [(namespace, memory_id, eid, "about", named.get(eid)) for eid in dict.fromkeys(about)],
        )
        c.executemany(
            "INSERT OR IGNORE INTO provenance (namespace, memory_id, turn_id, quote, extraction_id)"
            " VALUES (?, ?, ?, ?, ?)",
            [(namespace, memory_id, s.turn_id, s.quote, extraction_id) for s in sources],
        )

    def _support(self, c: sqlite3.Connection, memory_id: str) -> tuple[int, list[tuple[str, str]]]:
        level = c.execute("SELECT agreement FROM memories WHERE memory_id = ?", (memory_id,)).fetchone()[0]
        pairs = c.execute("SELECT t.session_id, p.turn_id FROM provenance p JOIN turns t ON t.turn_id = p.turn_id"
                          " WHERE p.memory_id = ?", (memory_id,)).fetchall()
        return level, [(r[0], r[1]) for r in pairs]

    def _save_confidence(self, c: sqlite3.Connection, memory_id: str, agreement: int, value: float) -> None:
        c.execute("UPDATE memories SET agreement = ?, confidence = ? WHERE memory_id = ?",
                  (agreement, value, memory_id))

    def _index(self, c: sqlite3.Connection, memory_id: str) -> None:
        row = c.execute("SELECT rowid, content, search_keys FROM memories WHERE memory_id = ?",
                        (memory_id,)).fetchone()
        names = [r[0] for r in c.execute(
            "SELECT e.name FROM memory_entities me JOIN entities e ON e.entity_id = me.entity_id"
            " WHERE me.memory_id = ? UNION ALL SELECT a.alias FROM memory_entities me JOIN entity_aliases a"
            " ON a.entity_id = me.entity_id WHERE me.memory_id = ? AND a.how NOT IN ('not', 'role')",
            (memory_id, memory_id))]
        c.execute("DELETE FROM memories_fts WHERE rowid = ?", (row[0],))
        c.execute("INSERT INTO memories_fts (rowid, content, search_keys, entities) VALUES (?, ?, ?, ?)",
                  (row[0], row[1], " ".join(json.loads(row[2])), " ".join(names)))

    def _retraction_candidates(self, c: sqlite3.Connection, namespace: str, content: str) -> Iterable[tuple[str, str]]:
        ranked = memory_bm25(c, namespace, query_terms(content), ("live",), k=20, weights=(1.0, 1.0, 1.0))
        return [(r["memory_id"], r["content"]) for r in _rows_by_rowid(c, [rid for rid, _ in ranked])]

    def _insert_extraction(self, c: sqlite3.Connection, namespace: str, plan: ExtractionPlan,
                           report: ExtractionReport, job_id: str | None, now: datetime) -> None:
        c.execute(
            "INSERT INTO extractions (extraction_id, namespace, session_id, receipt_id, job_id, status, report,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (plan.extraction_id, namespace, plan.session_id, plan.receipt.receipt_id if plan.receipt else None,
             job_id, report.status, report.model_dump_json(), now.isoformat()),
        )

    def _set_receipt_body(self, c: sqlite3.Connection, namespace: str, receipt: Any) -> None:
        c.execute("UPDATE receipts SET body = ? WHERE namespace = ? AND receipt_id = ?",
                  (receipt.model_dump_json(), namespace, receipt.receipt_id))

    # -- jobs ---------------------------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobInfo:
        """One job by id. Raises NotFoundError."""
        with self.read() as c:
            row = c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id!r}")
        return job_info(row, iso_dt)

    def jobs(self, namespace: str | None = None, status: str | None = None) -> list[JobInfo]:
        """Jobs, oldest first, optionally of one namespace and status."""
        args: list[Any] = []
        sql = and_equal("SELECT * FROM jobs WHERE 1 = 1", args, {"namespace": namespace, "status": status})
        with self.read() as c:
            return [job_info(r, iso_dt) for r in c.execute(sql + " ORDER BY created_at, job_id", args).fetchall()]

    def _clock(self, c: sqlite3.Connection) -> datetime:
        return utc_now()

    def _runnable_jobs(self, c: sqlite3.Connection, namespace: str | None, at: datetime, *,
                       session_id: str | None, due_only: bool, exclude: Sequence[str] = ()) -> Iterable[sqlite3.Row]:
        args: list[Any] = [int(not due_only), at.isoformat(), at.isoformat()]
        sql = and_equal("SELECT * FROM jobs WHERE ((status = 'pending' AND (? OR due_at IS NULL OR due_at <= ?))"
                        " OR (status = 'running' AND lease_until < ?))",
                        args, {"namespace": namespace, "session_id": session_id})
        sql += " AND NOT EXISTS (" + BUSY_SESSION.replace("%s", "?") + ")"
        args.append(at.isoformat())
        if exclude:
            sql += f" AND job_id NOT IN ({', '.join('?' * len(exclude))})"
            args.extend(exclude)
        return c.execute(sql + " ORDER BY created_at, job_id", args).fetchall()

    def _set_job_due(self, c: sqlite3.Connection, job_id: str, due: datetime | None) -> None:
        c.execute("UPDATE jobs SET due_at = ? WHERE job_id = ?", (due and due.isoformat(), job_id))

    def _take_over_retry(self, c: sqlite3.Connection, job_id: str, attempts: int, errors: list[str],
                         due: datetime | None) -> None:
        c.execute("UPDATE jobs SET attempts = ?, errors = ?, due_at = ? WHERE job_id = ?",
                  (attempts, json.dumps(errors), due and due.isoformat(), job_id))

    def _pending_job(self, c: sqlite3.Connection, namespace: str, session_id: str) -> JobInfo | None:
        row = c.execute("SELECT * FROM jobs WHERE namespace = ? AND session_id = ? AND status = 'pending'",
                        (namespace, session_id)).fetchone()
        return None if row is None else job_info(row, iso_dt)

    def _insert_job(self, c: sqlite3.Connection, namespace: str, session_id: str, receipt_id: str | None,
                    waiting: int, due: datetime | None, at: datetime) -> JobInfo:
        job_id = f"j_{uuid.uuid4().hex}"
        c.execute(
            "INSERT INTO jobs (job_id, namespace, session_id, receipt_id, status, due_at, waiting_turns, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
            (job_id, namespace, session_id, receipt_id, due and due.isoformat(), waiting, at.isoformat(), at.isoformat()),
        )
        return job_info(c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone(), iso_dt)

    def _update_pending_job(self, c: sqlite3.Connection, job_id: str, receipt_id: str | None, waiting: int,
                            due: datetime | None, at: datetime) -> JobInfo:
        c.execute("UPDATE jobs SET receipt_id = ?, waiting_turns = ?, due_at = ?, updated_at = ? WHERE job_id = ?",
                  (receipt_id, waiting, due and due.isoformat(), at.isoformat(), job_id))
        return job_info(c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone(), iso_dt)

    def _extend_lease(self, c: sqlite3.Connection, job_id: str, until: datetime, at: datetime) -> JobInfo:
        c.execute("UPDATE jobs SET lease_until = ?, updated_at = ? WHERE job_id = ?",
                  (until.isoformat(), at.isoformat(), job_id))
        return job_info(c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone(), iso_dt)

    def _extraction_state_in(self, c: sqlite3.Connection, namespace: str, session_id: str) -> ExtractionState | None:
        row = c.execute("SELECT * FROM extraction_state WHERE namespace = ? AND session_id = ?",
                        (namespace, session_id)).fetchone()
        return None if row is None else state_info(row, iso_dt)

    def _save_extraction_state(self, c: sqlite3.Connection, namespace: str, state: ExtractionState) -> None:
        c.execute(
            "INSERT INTO extraction_state (namespace, session_id, watermark, window_start, prompts_sha, extraction_id,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, session_id) DO UPDATE SET"
            " watermark = excluded.watermark, window_start = excluded.window_start,"
            " prompts_sha = excluded.prompts_sha, extraction_id = excluded.extraction_id,"
            " updated_at = excluded.updated_at",
            (namespace, state.session_id, state.watermark, state.window_start, state.prompts_sha,
             state.extraction_id, state.updated_at.isoformat()),
        )

    def _lease_row(self, c: sqlite3.Connection, job_id: str, until: datetime, errors: list[str],
                   at: datetime) -> JobInfo:
        c.execute(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, revision = revision + 1,"
            " lease_until = ?, errors = ?, updated_at = ? WHERE job_id = ?",
            (until.isoformat(), json.dumps(errors), at.isoformat(), job_id),
        )
        return job_info(c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone(), iso_dt)

    def _settle_job(self, c: sqlite3.Connection, job_id: str, status: str, at: datetime,
                    errors: list[str] | None = None) -> JobInfo:
        c.execute("UPDATE jobs SET status = ?, errors = COALESCE(?, errors), lease_until = NULL, updated_at = ?"
                  " WHERE job_id = ?", (status, None if errors is None else json.dumps(errors), at.isoformat(), job_id))
        return job_info(c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone(), iso_dt)

    def _fenced_job_row(self, c: sqlite3.Connection, job_id: str) -> sqlite3.Row | None:
        return c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()

    def _failed_job_rows(self, c: sqlite3.Connection, namespace: str, session_id: str | None) -> list[sqlite3.Row]:
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM jobs WHERE namespace = ? AND status = 'failed'", args,
                        {"session_id": session_id})
        return c.execute(sql + " ORDER BY created_at, job_id", args).fetchall()

    def _requeue_job(self, c: sqlite3.Connection, job_id: str, errors: list[str], at: datetime) -> JobInfo:
        c.execute("UPDATE jobs SET status = 'pending', attempts = 0, due_at = NULL, lease_until = NULL, errors = ?,"
                  " updated_at = ? WHERE job_id = ?", (json.dumps(errors), at.isoformat(), job_id))
        return self._job_in(c, job_id)

    def _job_in(self, c: sqlite3.Connection, job_id: str) -> JobInfo:
        return job_info(c.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone(), iso_dt)


def _rows_by_rowid(c: sqlite3.Connection, rowids: Sequence[int]) -> list[sqlite3.Row]:
    """The memories rows of ``rowids``, in that order."""
    if not rowids:
        return []
    rows = {r["rowid"]: r for r in c.execute(
        f"SELECT m.rowid AS rowid, m.* FROM memories m WHERE m.rowid IN ({', '.join('?' * len(rowids))})", rowids)}
    return [rows[r] for r in rowids]
