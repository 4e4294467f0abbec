"""What a capture writes, decided the same way on every engine: turn rows, replays, the receipt.

Each store runs these inside its capture transaction and keeps only the SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..capture import CaptureRequest, turn_id_for
from ..errors import CaptureConflict, IdempotencyConflict
from ..models import CaptureReceipt, Diagnostic

__all__ = ("identities_read", "new_receipt", "plan_append", "receipt_row", "repeated_tail", "replay_or_conflict",
           "session_date_for")


def replay_or_conflict(req: CaptureRequest, stored_hash: str | None, body: str) -> CaptureReceipt:
    """The receipt stored under ``req``'s idempotency key, marked replayed.

    Raises:
        IdempotencyConflict: the key was first used with different content.
    """
    receipt = CaptureReceipt.model_validate_json(body)
    if stored_hash != req.request_hash:
        raise IdempotencyConflict(str(req.idempotency_key), receipt.session_id)
    return receipt.model_copy(update={"replayed": True})


def session_date_for(stored_date: str | None, req: CaptureRequest) -> tuple[str | None, list[Diagnostic]]:
    """The date an existing session keeps (the first one wins) and a warning when a date ``req`` names disagrees."""
    warnings: list[Diagnostic] = []
    if stored_date and req.date_given and req.session_date and stored_date != req.session_date:
        warnings.append(Diagnostic(stage="capture", code="session_date_kept",
                                   message=f"session already dated {stored_date}; kept it, ignored {req.session_date}"))
    if not req.date_given:  # a default (the turns' first timestamp, append's clock) dates only a new session
        return stored_date, warnings
    return stored_date or req.session_date, warnings


def identities_read(req: CaptureRequest) -> tuple[list[str], int, int]:
    """Which stored turns of its session a capture reads (``plan_append``, ``repeated_tail``), so that its cost is
    the request's, not the session's: the ``external_id``s it names, the positions below the second number (an
    id-less turn of a capture that is not an append is the stored turn at its position), and as many of the
    session's latest turns as the third number (the next position, a retried append's repeat)."""
    ids = list(dict.fromkeys(t.id for t in req.turns if t.id is not None))
    below = 0 if req.append else max((pos + 1 for pos, t in enumerate(req.turns) if t.id is None), default=0)
    return ids, below, max(len(req.turns), 1)


def plan_append(
    namespace: str,
    req: CaptureRequest,
    existing: Sequence[tuple[int, str | None, str]],
    receipt_id: str,
    now: str,
) -> list[tuple[Any, ...]]:
    """Rows to insert for a capture, given the stored ``(idx, external_id, content_hash)`` of its session.

    Identity is the caller's id when given, else the position plus content hash.
    A known identity with a different content raises CaptureConflict. In an append
    (``req.append``) an id-less turn has no stored identity: it goes after the last stored turn.
    """
    by_ext = {ext: h for _, ext, h in existing if ext is not None}
    by_idx = {idx: h for idx, _, h in existing}
    next_idx = max(by_idx, default=-1) + 1
    rows: list[tuple[Any, ...]] = []
    for pos, (turn, h) in enumerate(zip(req.turns, req.hashes)):
        if turn.id is not None and turn.id in by_ext:
            if by_ext[turn.id] != h:
                raise CaptureConflict(
                    f"turn id {turn.id!r} is already stored with different content; "
                    "stored turns are never overwritten — use a new id for a new message",
                    field=f"turns[{pos}]",
                )
            continue
        if turn.id is None and not req.append and pos in by_idx:
            if by_idx[pos] != h:
                raise CaptureConflict(
                    f"differs from the turn already stored at position {pos} of session {req.session_id!r}; "
                    "send the whole conversation so far in order, or give each turn an 'id'",
                    field=f"turns[{pos}]",
                )
            continue
        rows.append((
            turn_id_for(namespace, req.session_id, next_idx), namespace, req.session_id, next_idx,
            turn.role, turn.name, turn.content, turn.id, turn.timestamp,
            json.dumps(turn.metadata, ensure_ascii=False) if turn.metadata is not None else None,
            h, receipt_id, now,
        ))
        by_idx[next_idx] = h
        if turn.id is not None:
            by_ext[turn.id] = h
        next_idx += 1
    return rows


def repeated_tail(req: CaptureRequest, existing: Sequence[tuple[int, str | None, str]]) -> list[Diagnostic]:
    """A warning when a keyless append's turns equal the session's last stored turns (a retry, or a real repeat).

    Both are stored: the store cannot tell a retry from a user saying the same thing again,
    and dropping a turn that was said loses it for good. The warning names the fix.
    """
    if not req.append or req.idempotency_key is not None or any(t.id is not None for t in req.turns):
        return []
    n = len(req.hashes)
    tail = [h for _, _, h in sorted(existing)[-n:]]
    if len(tail) < n or tail != req.hashes:
        return []
    return [Diagnostic(stage="capture", code="repeated_tail",
                       message=f"these {n} turn(s) equal the session's last {n} stored turns and were stored again; "
                               "if this call was a retry, pass idempotency_key so a retry is recognised")]


def new_receipt(namespace: str, req: CaptureRequest, receipt_id: str, session_date: str | None,
                rows: Sequence[tuple[Any, ...]], warnings: list[Diagnostic]) -> CaptureReceipt:
    """The receipt of a capture that stored ``rows`` (as made by ``plan_append``)."""
    return CaptureReceipt(
        receipt_id=receipt_id,
        namespace=namespace,
        session_id=req.session_id,
        session_date=session_date,
        turns_received=len(req.turns),
        turns_stored=len(rows),
        turn_ids=[r[0] for r in rows],
        idempotency_key=req.idempotency_key,
        warnings=[*req.warnings, *warnings],
        extraction=req.extraction,
    )


def receipt_row(receipt: CaptureReceipt, req: CaptureRequest, now: Any) -> tuple[Any, ...]:
    """``(receipt_id, namespace, session_id, idempotency_key, request_hash, body, created_at)`` to insert.

    The request hash is kept only with an idempotency key (it is what a replay is checked against).
    """
    return (receipt.receipt_id, receipt.namespace, req.session_id, req.idempotency_key,
            req.request_hash if req.idempotency_key is not None else None,
            receipt.model_dump_json(), now)
