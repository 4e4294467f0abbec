"""Row -> model mapping and deterministic ids, shared by the SQLite and PostgreSQL stores.

Rows are anything indexable by column name (``sqlite3.Row``, psycopg dict rows). Each
store passes its own timestamp reader (``to_dt``): SQLite keeps ISO text, PostgreSQL
returns datetimes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from ..models import ExtractionState, JobInfo, MemoryRecord, SearchHit, Source, SubagentContext, SubagentCounters
from ..text import norm_content, norm_name

if TYPE_CHECKING:
    import networkx

    from ..subagent_models import NormalizedFrame

__all__ = (
    "COUNTER_NAMES",
    "Row",
    "add_graph",
    "and_equal",
    "counter_rows",
    "entity_dicts",
    "entity_id_for",
    "iso_dt",
    "job_info",
    "memory_id_for",
    "memory_records",
    "norm_keys",
    "state_info",
    "subagent_context",
    "subagent_id_for",
    "subagent_params",
    "tombstone_id_for",
    "turn_hit",
    "utc",
)


class Row(Protocol):
    """A result row read by column name: ``sqlite3.Row`` or a psycopg dict row."""

    def __getitem__(self, key: str, /) -> Any: ...

    def keys(self) -> Iterable[str]: ...


ToDt = Callable[[Any], Any]

#: The persistent sub-agent counters (``SubagentCounters`` field names).
COUNTER_NAMES: tuple[str, ...] = tuple(SubagentCounters.model_fields)


def entity_id_for(namespace: str, name: str, kind: str, n: int = 0) -> str:
    """Deterministic entity id: the same name and kind resolve to the same node on every backend.

    ``n`` > 0 gives the next id for that name: an entity renamed to a fuller name keeps the id of
    the name it was created under, so a new entity of that name takes the first id still free.
    """
    key = f"{namespace}\x00{norm_name(name)}\x00{kind}" + (f"\x00{n}" if n else "")
    return "e_" + hashlib.sha256(key.encode()).hexdigest()[:20]


def memory_id_for(namespace: str, session_id: str, kind: str, content: str, n: int = 0) -> str:
    """Deterministic memory id (re-extraction and cassettes give the same ids)."""
    key = f"{namespace}\x00{session_id}\x00{kind}\x00{norm_content(content)}\x00{n}"
    return "m_" + hashlib.sha256(key.encode()).hexdigest()[:20]


def subagent_id_for(namespace: str, session_id: str, agent_execution_id: str, tool_call_id: str) -> str:
    """A sub-agent row's id: a hash of its namespace and key, so it tells nothing of other namespaces' rows."""
    key = f"{namespace}\x00{session_id}\x00{agent_execution_id}\x00{tool_call_id}"
    return "a_" + hashlib.sha256(key.encode()).hexdigest()[:20]


def tombstone_id_for(namespace: str, subject_hash: str, n: int) -> str:
    """The id of the ``n``-th tombstone (from 0) of one subject in a namespace: a hash, not a shared counter."""
    return "f_" + hashlib.sha256(f"{namespace}\x00{subject_hash}\x00{n}".encode()).hexdigest()[:20]


def iso_dt(text: str | None) -> datetime | None:
    """A stored ISO timestamp as an aware datetime (naive means UTC); None for empty."""
    if not text:
        return None
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def utc(dt: datetime) -> datetime:
    """``dt`` in UTC (naive means UTC)."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _same(value: Any) -> Any:
    return value


def and_equal(sql: str, args: list[Any], filters: Mapping[str, Any], mark: str = "?") -> str:
    """``sql`` plus ``AND <column> = <mark>`` for each filter that is not None (its value appended to ``args``)."""
    for column, value in filters.items():
        if value is not None:
            sql += f" AND {column} = {mark}"
            args.append(value)
    return sql


def norm_keys(names: Iterable[str]) -> list[str]:
    """The distinct non-empty normalised names, sorted (the lookup keys of entities)."""
    return sorted({norm_name(n) for n in names if norm_name(n)})


def entity_dicts(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """``(entity_id, name, kind, note)`` rows as ``Store.find_entities`` returns them."""
    return [{"id": r[0], "name": r[1], "kind": r[2], "note": r[3]} for r in rows]


def turn_hit(row: Sequence[Any], score: float) -> SearchHit:
    """A ``(turn_id, external_id, session_id, session_date, idx, role, name, content)`` row as a hit."""
    return SearchHit(
        turn_id=row[0], external_id=row[1], session_id=row[2], session_date=row[3], index=row[4],
        role=row[5], name=row[6], content=row[7], score=score,
    )


def memory_records(rows: Sequence[Row], entity_rows: Iterable[Sequence[Any]],
                   source_rows: Iterable[Sequence[Any]], to_dt: ToDt = _same) -> list[MemoryRecord]:
    """Memory rows as records, with their ``(memory_id, entity name)`` and
    ``(memory_id, turn_id, external_id, session_id, quote)`` links, each already in order."""
    entities: dict[str, list[str]] = {}
    for mid, name in entity_rows:
        entities.setdefault(mid, []).append(name)
    sources: dict[str, list[Source]] = {}
    for mid, turn_id, ext, sid, quote in source_rows:
        sources.setdefault(mid, []).append(Source(turn_id=turn_id, external_id=ext, session_id=sid, quote=quote))
    return [
        MemoryRecord(
            id=r["memory_id"], kind=r["kind"], content=r["content"], status=r["status"], when=r["when_text"],
            session_id=r["session_id"], entities=entities.get(r["memory_id"], []),
            search_keys=json.loads(r["search_keys"]), sources=sources.get(r["memory_id"], []),
            valid_at=to_dt(r["valid_at"]), invalid_at=to_dt(r["invalid_at"]), superseded_by=r["superseded_by"],
            supersedes=r["supersedes"], created_at=to_dt(r["created_at"]), category=r["category"],
            confidence=r["confidence"],
        )
        for r in rows
    ]


def job_info(row: Row, to_dt: ToDt = _same) -> JobInfo:
    """A ``jobs`` row as ``JobInfo``."""
    return JobInfo(
        job_id=row["job_id"], namespace=row["namespace"], session_id=row["session_id"], status=row["status"],
        attempts=row["attempts"], revision=row["revision"], lease_until=to_dt(row["lease_until"]),
        errors=json.loads(row["errors"]), receipt_id=row["receipt_id"], due_at=to_dt(row["due_at"]),
        waiting_turns=row["waiting_turns"], created_at=to_dt(row["created_at"]), updated_at=to_dt(row["updated_at"]),
    )


def state_info(row: Row, to_dt: ToDt = _same) -> ExtractionState:
    """An ``extraction_state`` row as ``ExtractionState``."""
    return ExtractionState(session_id=row["session_id"], watermark=row["watermark"], window_start=row["window_start"],
                           prompts_sha=row["prompts_sha"], extraction_id=row["extraction_id"],
                           updated_at=to_dt(row["updated_at"]))


def add_graph(g: networkx.MultiDiGraph, entities: Iterable[Sequence[Any]], memories: Iterable[Sequence[Any]],
              links: Iterable[Sequence[Any]], provenance: Iterable[Sequence[Any]],
              stamp: Callable[[Any], Any] = _same) -> None:
    """Add entity and memory nodes, about, supersedes and source (memory -> turn) edges from stored rows.

    Rows: entities ``(entity_id, name, kind, note)``; memories ``(memory_id, kind, content,
    status, when_text, session_id, valid_at, invalid_at, superseded_by)``; links
    ``(memory_id, entity_id, relation)``; provenance ``(memory_id, turn_id, quote)``.
    """
    for r in entities:
        g.add_node(f"entity:{r[0]}", kind="entity", name=r[1], entity_kind=r[2], note=r[3])
    for r in memories:
        g.add_node(f"memory:{r[0]}", kind="memory", memory_kind=r[1], content=r[2], status=r[3],
                   when=r[4], session_id=r[5], valid_at=stamp(r[6]), invalid_at=stamp(r[7]))
        if r[8]:
            g.add_edge(f"memory:{r[8]}", f"memory:{r[0]}", key="supersedes", kind="supersedes")
    for r in links:
        g.add_edge(f"memory:{r[0]}", f"entity:{r[1]}", key=r[2], kind=r[2])
    for r in provenance:
        g.add_edge(f"memory:{r[0]}", f"turn:{r[1]}", key="source", kind="source", quote=r[2])


def subagent_params(namespace: str, frame: NormalizedFrame, now: datetime, *,
                    stamp: Callable[[datetime], Any], is_async: Any) -> dict[str, Any]:
    """The upsert parameters of a frame; ``stamp`` stores a time, ``is_async`` is the stored flag."""
    at = stamp(now)
    return {
        "public_id": subagent_id_for(namespace, *frame.key),
        "namespace": namespace,
        "session_id": frame.session_id,
        "turn_ref": frame.turn_id,
        "agent_execution_id": frame.agent_execution_id,
        "tool_call_id": frame.tool_call_id,
        "parent_tool_call_id": frame.parent_tool_call_id,
        "subagent_type": frame.subagent_type,
        "description": frame.description,
        "agent_id": frame.agent_id,
        "child_session_id": frame.child_session_id,
        "model": frame.model,
        "agent_status": frame.agent_status,
        "tool_status": frame.tool_status,
        "is_async": is_async,
        "total_tokens": frame.total_tokens,
        "tool_use_count": frame.tool_use_count,
        "duration_ms": frame.duration_ms,
        "source": frame.source,
        "observed_at": stamp(frame.observed_at),
        "settled_at": stamp(frame.settled_at) if frame.settled_at is not None else None,
        "now": at,
    }


def subagent_context(row: Row) -> SubagentContext:
    """A ``subagent_contexts`` row as ``SubagentContext``."""
    return SubagentContext.model_validate({**row, "id": row["public_id"], "is_async": bool(row["is_async"])})


def counter_rows(namespace: str, increments: Mapping[str, int]) -> list[tuple[str, str, int]]:
    """``(namespace, name, n)`` rows to add for the non-zero increments.

    Raises:
        ValueError: a name is not a ``SubagentCounters`` field.
    """
    rows = [(namespace, name, n) for name, n in increments.items() if n]
    unknown = [name for _, name, _ in rows if name not in COUNTER_NAMES]
    if unknown:
        raise ValueError(f"unknown subagent counters {unknown}; use {', '.join(COUNTER_NAMES)}")
    return rows
