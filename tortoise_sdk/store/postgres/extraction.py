"""PostgreSQL side of extraction: memories, entities, provenance, the S5 write, and the shared job queue.

The decisions (outcomes, ids, ordering, job states) are ``extraction_core.ExtractionCore``'s,
as on SQLite; this module holds the SQL, built for many writers on many hosts:

- the S5 write of a namespace holds a transaction-scoped advisory lock, so two workers
  consolidating into one namespace see each other's memories (no duplicate ADD), as
  SQLite's single writer guarantees;
- jobs are leased with ``FOR UPDATE SKIP LOCKED``, timed by the database clock (hosts
  with skewed clocks agree on expiry), and every lease bumps the job's revision: a
  write under an older revision is refused with ``LeaseLost``, logged and counted.
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row

from ...errors import NotFoundError
from ...models import ExtractionReport, ExtractionState, JobInfo, MemoryRecord
from ...search import query_terms
from ..extraction_core import BUSY_SESSION, ExtractionCore
from ..plan import EntityPlan, ExtractionPlan, ItemPlan, SourcePlan
from ..rows import add_graph, and_equal, entity_dicts, job_info, memory_records, norm_keys, state_info
from .fts import (bm25_search_sql, index_memories_sql, newest_memory_matches_sql, terms_from_fts5, top_matches_sql,
                  usable_terms, walk_rule)

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
                  " invalid_at, superseded_by, supersedes, created_at, category, confidence")
_MEMORY_COLUMNS = ("m.id, m.memory_id, m.namespace, m.session_id, m.kind, m.content, m.status, m.when_text,"
                   " m.search_keys, m.valid_at, m.invalid_at, m.superseded_by, m.supersedes, m.created_at, m.category,"
                   " m.confidence")
# A memory's entity names and sources, in the order ``_records`` reads them, as two columns of its own row.
_MEMORY_LINKS = (
    "(SELECT COALESCE(array_agg(e.name ORDER BY me.relation, e.name COLLATE \"C\"), '{}') FROM memory_entities me"
    " JOIN entities e ON e.entity_id = me.entity_id WHERE me.memory_id = m.memory_id) AS entity_names,"
    " (SELECT COALESCE(json_agg(json_build_array(p.turn_id, t.external_id, t.session_id, p.quote)"
    " ORDER BY t.session_id COLLATE \"C\", t.idx), '[]') FROM provenance p JOIN turns t ON t.turn_id = p.turn_id"
    " WHERE p.memory_id = m.memory_id) AS source_rows"
)
#: Per turn, its memories that are live and those that are not, and the memories that superseded them
#: (``turn_fact_status``). Parameters: the namespace, the turn ids (``text[]``).
_TURN_FACT_STATUS_SQL = (
    "SELECT p.turn_id, COUNT(*) FILTER (WHERE m.status = 'live'), COUNT(*) FILTER (WHERE m.status <> 'live'),"
    " COALESCE(array_agg(m.superseded_by) FILTER (WHERE m.status <> 'live' AND m.superseded_by IS NOT NULL), '{}')"
    " FROM provenance p JOIN memories m ON m.memory_id = p.memory_id"
    " WHERE p.namespace = %s AND p.turn_id = ANY(%s) GROUP BY p.turn_id"
)


@functools.cache
def _candidate_memories_sql(walk: bool, rule: tuple[float, float, float]) -> str:
    """``candidate_memories``' statement, with or without the newest-first walk (built once each per walk
    rule, ``fts.walk_rule()``)."""
    return top_matches_sql(newest_memory_matches_sql(walk=walk), alias="m", select=f"{_MEMORY_COLUMNS}, {_MEMORY_LINKS}",
                           from_="memories m", where="TRUE")


# Advisory-lock class for per-namespace S5 writes (the object id is hashtext(namespace)).
_S5_LOCK_CLASS = 0x7435


#: Held by the transaction that leases a job of the session (a lock of its own, not the capture's).
_STILL_BUSY = ("SELECT EXISTS (SELECT 1 FROM jobs AS busy WHERE busy.namespace = %s AND busy.session_id = %s"
               " AND busy.status = 'running' AND busy.lease_until >= %s AND busy.job_id <> %s)")
_LEASING_SESSION = "SELECT pg_try_advisory_xact_lock(hashtextextended('job' || chr(31) || %s || chr(31) || %s, 25))"

class PostgresExtractionMixin(ExtractionCore):
    """Memory reads, the S5 write and jobs for ``PostgresStore``."""

    BYTE_ORDER = ' COLLATE "C"'
    transaction: Callable[..., Any]
    read: Callable[[], AbstractContextManager[psycopg.Connection]]
    _log = log

    # -- memory reads ---------------------------------------------------------------------------

    def memories(
        self, namespace: str, session_id: str | None = None, include_superseded: bool = False, *,
        latest: int | None = None, category: str | None = None,
    ) -> list[MemoryRecord]:
        """Memories of a namespace (or one session, or one category), oldest first; live only unless asked;
        the newest ``latest``.

        The newest are never found by walking the primary key backwards, which passes every newer memory
        of every other namespace (``fts.own_newest``): a whole namespace's are walked down its own
        index, a session's or a category's (a few) are read through theirs and sorted."""
        walk = latest is not None and session_id is None and category is None
        args: list[Any] = [namespace, namespace] if walk else [namespace]
        own = "m.namespace >= %s AND m.namespace <= %s" if walk else "m.namespace = %s"
        sql = and_equal(f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE {own}", args,
                        {"m.session_id": session_id, "m.category": category}, "%s")
        if not include_superseded:
            sql += " AND m.status = 'live'"
        if walk:
            sql = f"SELECT * FROM ({sql} ORDER BY m.namespace DESC, m.id DESC LIMIT %s) m"
        elif latest is not None:
            sql = f"WITH found AS MATERIALIZED ({sql}) SELECT * FROM (SELECT * FROM found ORDER BY id DESC LIMIT %s) m"
        if latest is not None:
            args.append(max(0, latest))
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
            rows = _dicts(c, sql, [terms, namespace, namespace, statuses, k])
            records = self._records(c, rows)
        return [(rec, float(row["score"])) for rec, row in zip(records, rows)]

    def _turn_fact_rows(self, namespace: str, turn_ids: list[str]) -> Sequence[Sequence[Any]]:
        with self.read() as c:
            return c.execute(_TURN_FACT_STATUS_SQL, (namespace, turn_ids)).fetchall()

    def candidate_memories(self, namespace: str, weighted_terms: Mapping[str, float], *, k: int,
                           per_term: int = 200, include_superseded: bool = False,
                           newest_first: bool = False) -> list[tuple[MemoryRecord, float]]:
        """Memories ranked by the summed weights of the terms they hold (content, search keys, entity
        names), newest first among equals; each term walks at most ``per_term`` newest matches.

        With ``newest_first`` (the terms are common among the memories), a term common among the
        turns is sought in the namespace's newest memories before the index is asked for older ones
        (``newest_memory_matches_sql``): the same result, found faster.
        """
        terms = [t for t in weighted_terms if t and "\x00" not in t]
        if k < 1 or not terms:
            return []
        statuses = ["live", "superseded"] if include_superseded else ["live"]
        sql = _candidate_memories_sql(newest_first, walk_rule())
        with self.read() as c:  # one round trip: the reflex's budget is mostly round trips on a busy host
            rows = _dicts(c, sql, (terms, namespace, statuses, per_term, [weighted_terms[t] for t in terms], k))
        rows.sort(key=lambda r: (-r["score"], -r["id"]))
        return [(rec, r["score"]) for rec, r in zip(_linked_records(rows), rows)]

    def memories_about(self, namespace: str, entity_names: Sequence[str], *, k: int) -> list[MemoryRecord]:
        """Live memories linked to any of the entities (by normalised name), most links first."""
        names = norm_keys(entity_names)
        if not names or k < 1:
            return []
        with self.read() as c:
            rows = _dicts(
                c,
                f"SELECT {_MEMORY_COLUMNS}, COUNT(*) AS links FROM memories m"
                " JOIN memory_entities me ON me.memory_id = m.memory_id"
                " JOIN entities e ON e.entity_id = me.entity_id"
                " WHERE m.namespace = %s AND m.status = 'live' AND (e.norm_name = ANY(%s) OR e.entity_id IN"
                " (SELECT entity_id FROM entity_aliases WHERE namespace = %s AND how <> 'not'"
                " AND norm_alias = ANY(%s)))"
                " GROUP BY m.id ORDER BY links DESC, m.id DESC LIMIT %s",
                [namespace, names, namespace, names, k],
            )
            return self._records(c, rows)

    def find_entities(self, namespace: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Stored entities whose normalised name matches one of ``names``: ``{id, name, kind, note}``."""
        keys = norm_keys(names)
        if not keys:
            return []
        with self.read() as c:
            rows = c.execute(
                "SELECT entity_id, name, kind, note FROM entities WHERE namespace = %s AND (norm_name = ANY(%s)"
                " OR entity_id IN (SELECT entity_id FROM entity_aliases WHERE namespace = %s AND how <> 'not'"
                ' AND norm_alias = ANY(%s))) ORDER BY created_at, entity_id COLLATE "C"',
                (namespace, keys, namespace, keys),
            ).fetchall()
        return entity_dicts(rows)

    def turn_metadata(self, namespace: str, session_id: str, *, start: int = 0,
                      stop: int | None = None) -> dict[str, dict[str, Any] | None]:
        """Each turn's caller metadata by turn id."""
        with self.read() as c:
            rows = c.execute("SELECT turn_id, metadata FROM turns WHERE namespace = %s AND session_id = %s"
                             " AND idx >= %s" + ("" if stop is None else " AND idx < %s"),
                             (namespace, session_id, start, *(() if stop is None else (stop,)))).fetchall()
        return {r[0]: json.loads(r[1]) if r[1] else None for r in rows}

    def extend_graph(self, g: networkx.MultiDiGraph, namespace: str) -> None:
        """Add entities, memories, about/mentions, provenance (memory -> turn) and supersedes edges."""
        with self.read() as c:
            add_graph(
                g,
                c.execute("SELECT entity_id, name, kind, note FROM entities WHERE namespace = %s"
                          " ORDER BY created_at, entity_id", (namespace,)).fetchall(),
                c.execute("SELECT memory_id, kind, content, status, when_text, session_id, valid_at,"
                          " invalid_at, superseded_by FROM memories WHERE namespace = %s ORDER BY id",
                          (namespace,)).fetchall(),
                c.execute("SELECT memory_id, entity_id, relation FROM memory_entities WHERE namespace = %s",
                          (namespace,)).fetchall(),
                c.execute("SELECT memory_id, turn_id, quote FROM provenance WHERE namespace = %s",
                          (namespace,)).fetchall(),
                stamp=_iso,
            )

    def _records(self, c: psycopg.Connection, rows: Sequence[dict[str, Any]]) -> list[MemoryRecord]:
        if not rows:
            return []
        ids = [r["memory_id"] for r in rows]
        entity_rows = c.execute(
            "SELECT me.memory_id, e.name FROM memory_entities me JOIN entities e ON e.entity_id = me.entity_id"
            ' WHERE me.memory_id = ANY(%s) ORDER BY me.relation, e.name COLLATE "C"', (ids,)
        ).fetchall()
        source_rows = c.execute(
            "SELECT p.memory_id, p.turn_id, t.external_id, t.session_id, p.quote FROM provenance p"
            ' JOIN turns t ON t.turn_id = p.turn_id WHERE p.memory_id = ANY(%s) ORDER BY t.session_id COLLATE "C",'
            " t.idx", (ids,)
        ).fetchall()
        return memory_records(rows, entity_rows, source_rows)

    # -- S5 hooks ---------------------------------------------------------------------------------

    def _begin_s5(self, c: psycopg.Connection, namespace: str) -> datetime:
        c.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_S5_LOCK_CLASS, namespace))
        return _db_now(c)

    def _find_entity(self, c: psycopg.Connection, namespace: str, key: str, kind: str) -> tuple[str, str | None] | None:
        row = c.execute(
            "SELECT entity_id, note FROM entities WHERE namespace = %s AND norm_name = %s"
            ' ORDER BY (kind = %s) DESC, created_at, entity_id COLLATE "C" LIMIT 1',
            (namespace, key, kind),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def _insert_entity(self, c: psycopg.Connection, namespace: str, entity_id: str, e: EntityPlan, key: str,
                       now: datetime, note_session_id: str | None, session_id: str | None = None) -> None:
        c.execute(
            "INSERT INTO entities (entity_id, namespace, name, norm_name, kind, note, note_session_id, created_at,"
            " updated_at, created_session_id)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (entity_id, namespace, e.name.strip(), key, e.kind, e.note, note_session_id, now, now, session_id),
        )

    def _live_with_content(self, c: psycopg.Connection, namespace: str, keys: Sequence[str],
                           entity_key: str | None = None) -> str | None:
        row = c.execute(
            "SELECT memory_id FROM memories WHERE namespace = %s AND (norm_content IN"
            f" ({', '.join('%s' for _ in keys)}) OR entity_key = %s) AND status = 'live' ORDER BY id LIMIT 1",
            (namespace, *keys, entity_key),
        ).fetchone()
        return None if row is None else row[0]

    def _memory_state(self, c: psycopg.Connection, namespace: str, memory_id: str) -> tuple[str, str | None] | None:
        row = c.execute("SELECT status, superseded_by FROM memories WHERE namespace = %s AND memory_id = %s",
                        (namespace, memory_id)).fetchone()
        return None if row is None else (row[0], row[1])

    def _memory_exists(self, c: psycopg.Connection, memory_id: str) -> bool:
        return c.execute("SELECT 1 FROM memories WHERE memory_id = %s", (memory_id,)).fetchone() is not None

    def _insert_memory_row(self, c: psycopg.Connection, namespace: str, memory_id: str, plan: ExtractionPlan,
                           item: ItemPlan, key: str, now: datetime, supersedes: str | None,
                           entity_key: str | None = None) -> None:
        c.execute(
            "INSERT INTO memories (memory_id, namespace, session_id, kind, content, norm_content, status, when_text,"
            " search_keys, valid_at, supersedes, extraction_id, created_at, category, entity_key, agreement)"
            " VALUES (%s, %s, %s, %s, %s, %s, 'live', %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (memory_id, namespace, plan.session_id, item.kind, item.content.strip(), key, item.when,
             json.dumps(list(dict.fromkeys(item.search_keys)), ensure_ascii=False), plan.valid_at or now,
             supersedes, plan.extraction_id, now, item.category, entity_key, item.agreement),
        )

    def _set_memory_status(self, c: psycopg.Connection, memory_id: str, status: str, invalid_at: datetime,
                           superseded_by: str | None = None) -> None:
        c.execute("UPDATE memories SET status = %s, invalid_at = %s,"
                  " superseded_by = COALESCE(%s, superseded_by) WHERE memory_id = %s",
                  (status, invalid_at, superseded_by, memory_id))

    def _link(self, c: psycopg.Connection, namespace: str, memory_id: str, about: Sequence[str],
              sources: Sequence[SourcePlan], extraction_id: str, *, mentions: Sequence[str] = ()) -> None:
        named = dict(zip(reversed(about), reversed(list(mentions)))) if mentions else {}
        with c.cursor() as cur:
            if about:
                cur.executemany(
                    "INSERT INTO memory_entities (namespace, memory_id, entity_id, relation, mention)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [(namespace, memory_id, eid, "about", named.get(eid)) for eid in dict.fromkeys(about)],
                )
            cur.executemany(
                "INSERT INTO provenance (namespace, memory_id, turn_id, quote, extraction_id)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(namespace, memory_id, s.turn_id, s.quote, extraction_id) for s in sources],
            )

    def _support(self, c: psycopg.Connection, memory_id: str) -> tuple[int, list[tuple[str, str]]]:
        level = c.execute("SELECT agreement FROM memories WHERE memory_id = %s", (memory_id,)).fetchone()[0]
        pairs = c.execute("SELECT t.session_id, p.turn_id FROM provenance p JOIN turns t ON t.turn_id = p.turn_id"
                          " WHERE p.memory_id = %s", (memory_id,)).fetchall()
        return level, [(r[0], r[1]) for r in pairs]

    def _save_confidence(self, c: psycopg.Connection, memory_id: str, agreement: int, value: float) -> None:
        c.execute("UPDATE memories SET agreement = %s, confidence = %s WHERE memory_id = %s",
                  (agreement, value, memory_id))

    def _index(self, c: psycopg.Connection, memory_id: str) -> None:
        index_memory(c, memory_id)

    def _retraction_candidates(self, c: psycopg.Connection, namespace: str, content: str) -> Iterable[tuple[str, str]]:
        terms = usable_terms(query_terms(content))
        if not terms:
            return []
        sql = bm25_search_sql(table="memories", alias="m", select="m.id, m.memory_id, m.content", from_="memories m",
                              where="m.namespace = %s AND m.status = 'live'", output="memory_id, content",
                              order_tail="matched.id", weights=_PLAIN_WEIGHTS)
        return [(mid, text) for mid, text, _score in c.execute(sql, [terms, namespace, namespace, 20]).fetchall()]

    def _insert_extraction(self, c: psycopg.Connection, namespace: str, plan: ExtractionPlan,
                           report: ExtractionReport, job_id: str | None, now: datetime) -> None:
        c.execute(
            "INSERT INTO extractions (extraction_id, namespace, session_id, receipt_id, job_id, status, report,"
            " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (plan.extraction_id, namespace, plan.session_id, plan.receipt.receipt_id if plan.receipt else None,
             job_id, report.status, report.model_dump_json(), now),
        )

    def _set_receipt_body(self, c: psycopg.Connection, namespace: str, receipt: Any) -> None:
        c.execute("UPDATE receipts SET body = %s WHERE namespace = %s AND receipt_id = %s",
                  (receipt.model_dump_json(), namespace, receipt.receipt_id))

    # -- jobs ---------------------------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobInfo:
        """One job by id. Raises NotFoundError."""
        with self.read() as c:
            rows = _dicts(c, "SELECT * FROM jobs WHERE job_id = %s", (job_id,))
        if not rows:
            raise NotFoundError(f"no job {job_id!r}")
        return job_info(rows[0])

    def jobs(self, namespace: str | None = None, status: str | None = None) -> list[JobInfo]:
        """Jobs, oldest first, optionally of one namespace and status."""
        args: list[Any] = []
        sql = and_equal("SELECT * FROM jobs WHERE TRUE", args, {"namespace": namespace, "status": status}, "%s")
        with self.read() as c:
            return [job_info(r) for r in _dicts(c, sql + ' ORDER BY created_at, job_id COLLATE "C"', args)]

    def _clock(self, c: psycopg.Connection) -> datetime:
        return _db_now(c)

    def _runnable_jobs(self, c: psycopg.Connection, namespace: str | None, at: datetime, *,
                       session_id: str | None, due_only: bool, exclude: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
        # One row at a time, skipping rows other workers are leasing right now, so workers
        # never wait on each other; a row given up on no longer matches the next query.
        args: list[Any] = [not due_only, at, at]
        sql = and_equal("SELECT * FROM jobs WHERE ((status = 'pending' AND (%s OR due_at IS NULL OR due_at <= %s))"
                        " OR (status = 'running' AND lease_until < %s))",
                        args, {"namespace": namespace, "session_id": session_id}, "%s")
        sql += f" AND NOT EXISTS ({BUSY_SESSION})"
        args.append(at)
        passed = list(exclude)
        sql += " AND job_id <> ALL(%s)"
        args.append(passed)  # the same list: a row passed over below is left out of the next query
        sql += ' ORDER BY created_at, job_id COLLATE "C" LIMIT 1 FOR UPDATE SKIP LOCKED'
        while rows := _dicts(c, sql, args):
            # Another worker leasing a job of this session right now (a lapsed one it is taking over, whose row
            # this query skipped) has not committed its lease yet, so BUSY_SESSION cannot see it: the session's
            # lock for leasing tells; once it is ours, a lease committed since this query began is seen afresh.
            row = rows[0]
            if not c.execute(_LEASING_SESSION, (row["namespace"], row["session_id"])).fetchone()[0] or c.execute(
                    _STILL_BUSY, (row["namespace"], row["session_id"], at, row["job_id"])).fetchone()[0]:
                passed.append(row["job_id"])
                continue
            yield row

    def _pending_job(self, c: psycopg.Connection, namespace: str, session_id: str) -> JobInfo | None:
        rows = _dicts(c, "SELECT * FROM jobs WHERE namespace = %s AND session_id = %s AND status = 'pending'"
                         " FOR UPDATE", (namespace, session_id))
        return job_info(rows[0]) if rows else None

    def _insert_job(self, c: psycopg.Connection, namespace: str, session_id: str, receipt_id: str | None,
                    waiting: int, due: datetime | None, at: datetime) -> JobInfo:
        rows = _dicts(
            c,
            "INSERT INTO jobs (job_id, namespace, session_id, receipt_id, status, due_at, waiting_turns, created_at,"
            " updated_at) VALUES (%s, %s, %s, %s, 'pending', %s, %s, %s, %s) RETURNING *",
            (f"j_{uuid.uuid4().hex}", namespace, session_id, receipt_id, due, waiting, at, at),
        )
        return job_info(rows[0])

    def _update_pending_job(self, c: psycopg.Connection, job_id: str, receipt_id: str | None, waiting: int,
                            due: datetime | None, at: datetime) -> JobInfo:
        rows = _dicts(c, "UPDATE jobs SET receipt_id = %s, waiting_turns = %s, due_at = %s, updated_at = %s"
                         " WHERE job_id = %s RETURNING *", (receipt_id, waiting, due, at, job_id))
        return job_info(rows[0])

    def _extend_lease(self, c: psycopg.Connection, job_id: str, until: datetime, at: datetime) -> JobInfo:
        rows = _dicts(c, "UPDATE jobs SET lease_until = %s, updated_at = %s WHERE job_id = %s RETURNING *",
                      (until, at, job_id))
        return job_info(rows[0])

    def _extraction_state_in(self, c: psycopg.Connection, namespace: str, session_id: str) -> ExtractionState | None:
        rows = _dicts(c, "SELECT * FROM extraction_state WHERE namespace = %s AND session_id = %s",
                      (namespace, session_id))
        return state_info(rows[0]) if rows else None

    def _save_extraction_state(self, c: psycopg.Connection, namespace: str, state: ExtractionState) -> None:
        c.execute(
            "INSERT INTO extraction_state (namespace, session_id, watermark, window_start, prompts_sha, extraction_id,"
            " updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, session_id) DO UPDATE SET"
            " watermark = excluded.watermark, window_start = excluded.window_start,"
            " prompts_sha = excluded.prompts_sha, extraction_id = excluded.extraction_id,"
            " updated_at = excluded.updated_at",
            (namespace, state.session_id, state.watermark, state.window_start, state.prompts_sha,
             state.extraction_id, state.updated_at),
        )

    def _lease_row(self, c: psycopg.Connection, job_id: str, until: datetime, errors: list[str],
                   at: datetime) -> JobInfo:
        rows = _dicts(
            c,
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, revision = revision + 1,"
            " lease_until = %s, errors = %s, updated_at = %s WHERE job_id = %s RETURNING *",
            (until, json.dumps(errors), at, job_id),
        )
        return job_info(rows[0])

    def _set_job_due(self, c: psycopg.Connection, job_id: str, due: datetime | None) -> None:
        c.execute("UPDATE jobs SET due_at = %s WHERE job_id = %s", (due, job_id))

    def _take_over_retry(self, c: psycopg.Connection, job_id: str, attempts: int, errors: list[str],
                         due: datetime | None) -> None:
        c.execute("UPDATE jobs SET attempts = %s, errors = %s, due_at = %s WHERE job_id = %s",
                  (attempts, json.dumps(errors), due, job_id))

    def _settle_job(self, c: psycopg.Connection, job_id: str, status: str, at: datetime,
                    errors: list[str] | None = None) -> JobInfo:
        rows = _dicts(
            c,
            "UPDATE jobs SET status = %s, errors = COALESCE(%s, errors), lease_until = NULL, updated_at = %s"
            " WHERE job_id = %s RETURNING *",
            (status, None if errors is None else json.dumps(errors), at, job_id),
        )
        return job_info(rows[0])

    def _fenced_job_row(self, c: psycopg.Connection, job_id: str) -> dict[str, Any] | None:
        # FOR UPDATE: a concurrent lease of this job waits (or skips it) until this write commits.
        rows = _dicts(c, "SELECT * FROM jobs WHERE job_id = %s FOR UPDATE", (job_id,))
        return rows[0] if rows else None

    def _failed_job_rows(self, c: psycopg.Connection, namespace: str, session_id: str | None) -> list[dict[str, Any]]:
        args: list[Any] = [namespace]
        sql = and_equal("SELECT * FROM jobs WHERE namespace = %s AND status = 'failed'", args,
                        {"session_id": session_id}, "%s")
        return _dicts(c, sql + ' ORDER BY created_at, job_id COLLATE "C" FOR UPDATE', args)

    def _requeue_job(self, c: psycopg.Connection, job_id: str, errors: list[str], at: datetime) -> JobInfo:
        rows = _dicts(c, "UPDATE jobs SET status = 'pending', attempts = 0, due_at = NULL, lease_until = NULL,"
                         " errors = %s, updated_at = %s WHERE job_id = %s RETURNING *", (json.dumps(errors), at, job_id))
        return job_info(rows[0])

    def _job_in(self, c: psycopg.Connection, job_id: str) -> JobInfo:
        return job_info(_dicts(c, "SELECT * FROM jobs WHERE job_id = %s", (job_id,))[0])


def index_memory(c: psycopg.Connection, memory_id: str | None) -> None:
    """Recompute one memory's full-text vector and length (every memory's when ``memory_id`` is None)."""
    if memory_id is None:
        c.execute(index_memories_sql("TRUE"))
    else:
        c.execute(index_memories_sql("m.memory_id = %s"), (memory_id,))


def _linked_records(rows: Sequence[dict[str, Any]]) -> list[MemoryRecord]:
    """Records of rows that carry their links (``_MEMORY_LINKS``), with no further read."""
    return memory_records(rows, [(r["memory_id"], name) for r in rows for name in r["entity_names"]],
                          [(r["memory_id"], *src) for r in rows for src in r["source_rows"]])


def _dicts(c: psycopg.Connection, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
    with c.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, args).fetchall()


def _db_now(c: psycopg.Connection) -> datetime:
    return c.execute("SELECT clock_timestamp()").fetchone()[0]


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
