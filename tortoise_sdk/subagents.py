"""Sub-agent frame merge rules: the pure reference the SQL upserts must match.

One row per key ``(session_id, agent_execution_id, tool_call_id)``. A frame is
first normalized (``normalize_frame``): blanks become None, metrics that mean
"not reported" become None, anomalies are counted. Then ``merge`` computes the
new row column by column from the *old* row and the frame only (never from
another column's new value), exactly as ``INSERT ... ON CONFLICT DO UPDATE SET
col = <rule>(table.col, excluded.col)`` does. A new row is the same rules
applied to ``EMPTY_ROW``.

Rules, one per column (see ``COLUMN_RULES`` for the code):

- key columns, ``observed_at``: write-once (the first committed frame's).
- ``source``: ``live`` once any live frame merged (a backfilled row a live frame
  reaches becomes live, which from then on shields it from backfills); ``backfill`` only
  while every frame was a backfill's. (The README's "Deviations from the sub-agent spec"
  says why this and the backfill rule below differ from the spec's AC-1/AC-22.)
- ``turn_id``: first non-empty wins; a stored NULL is filled by a later frame.
  This is the frame's raw reference (a message id); a store keeps it as
  ``turn_ref`` and stores in ``turn_id`` the turn it resolves to, filled forward
  by a later frame or by the capture that stores that turn.
- ``is_async``: sticky, False -> True only.
- ``tool_status``: last reported wins until settled, then frozen.
- ``settled_at``: the observation time (the frame's own ``observed_at``) of the
  first frame whose ``tool_status`` is terminal (lowercased and stripped, in
  ``TERMINAL_STATUSES``); then write-once. ``agent_status`` never decides terminality.
- every other column, metrics included: last reported (non-None) wins; a frame
  that does not report a value never blanks the stored one, settled or not.
- ``updated_at``: ``now`` of the last merge.

A backfill never touches a live row (AC-22): a backfill frame meeting a row whose
``source`` is live leaves it as it is, so a live write always wins. A backfill
frame meeting a backfilled row merges by the rules above only if that changes a
column; otherwise the row stays as it is, ``updated_at`` included, so a replayed
backfill is a no-op. (A grown transcript ingested again still completes the row it
started.) A recorder folds a backfill's frames per key (``fold``) and writes each
key once, which is what makes a replay of the whole backfill change nothing.

Normalization: empty or whitespace strings are None; a status is stored stripped (``' Completed '`` is
``'Completed'``); ``total_tokens`` and
``duration_ms`` of exactly 0 are None (not reported); ``tool_use_count`` 0 is a
real zero; a negative metric, or one above ``MAX_METRIC`` (2**63 - 1, what a
row can hold), is None and counts as ``anomalous_value``; a missing execution
id is stored as ``'unknown'`` and counts as ``unknown_execution`` for a live
frame (a live path that should carry one and did not) or
``backfill_unknown_execution`` for a backfill one (no transcript carries one); a
frame without session or tool call id writes nothing and counts as
``skipped_no_identity``. Every frame counts once in ``attempted`` and ends in exactly
one of ``persisted`` (the recorder's), ``skipped_no_identity`` or ``failed``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from tortoise_sdk.models import SubagentContext, SubagentCounters, utc_now
from tortoise_sdk.streams.base import SubagentFrame
from tortoise_sdk.subagent_models import LAST_REPORTED, TERMINAL_STATUSES, Key, NormalizedFrame, is_terminal

if TYPE_CHECKING:
    from tortoise_sdk.store.base import Store

logger = logging.getLogger(__name__)

__all__ = (
    "COLUMN_RULES",
    "COUNTER_NAMES",
    "EMPTY_ROW",
    "LAST_REPORTED",
    "MAX_METRIC",
    "ROW_COLUMNS",
    "TERMINAL_STATUSES",
    "UNKNOWN_EXECUTION",
    "ColumnRule",
    "NormalizedFrame",
    "SubagentRecorder",
    "fold",
    "is_terminal",
    "merge",
    "normalize_frame",
    "replay",
)

UNKNOWN_EXECUTION = "unknown"
#: Counters ``normalize_frame`` increments (``persisted``/``failed`` are the recorder's): ``attempted`` always.
COUNTER_NAMES: tuple[str, ...] = (
    "attempted", "skipped_no_identity", "unknown_execution", "backfill_unknown_execution", "anomalous_value",
)


#: Every column of a stored row, in order.
ROW_COLUMNS: tuple[str, ...] = (*(f.name for f in fields(NormalizedFrame)), "updated_at")
#: The "old row" a new key is merged onto.
EMPTY_ROW: Mapping[str, Any] = {**dict.fromkeys(ROW_COLUMNS), "is_async": False}


def _text(value: str | None) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


#: The largest metric a row can hold (a signed 64-bit integer on both engines).
MAX_METRIC = 2**63 - 1


def _metric(value: int | None, zero_is_unreported: bool, counts: dict[str, int]) -> int | None:
    if value is None or (zero_is_unreported and value == 0):
        return None
    if value < 0 or value > MAX_METRIC:
        counts["anomalous_value"] += 1
        return None
    return value


def normalize_frame(frame: SubagentFrame) -> tuple[NormalizedFrame | None, dict[str, int]]:
    """Normalize a frame; None when it has no identity. Returns the counter increments too."""
    counts = dict.fromkeys(COUNTER_NAMES, 0)
    counts["attempted"] = 1
    session_id, tool_call_id = _text(frame.session_id), _text(frame.tool_call_id)
    if session_id is None or tool_call_id is None:
        counts["skipped_no_identity"] += 1
        return None, counts
    execution = _text(frame.agent_execution_id)
    if execution is None:
        counts["backfill_unknown_execution" if frame.source == "backfill" else "unknown_execution"] += 1
        execution = UNKNOWN_EXECUTION
    tool_status, agent_status = (_text(v) and v.strip() for v in (frame.tool_status, frame.agent_status))
    normalized = NormalizedFrame(
        session_id=session_id,
        agent_execution_id=execution,
        tool_call_id=tool_call_id,
        turn_id=_text(frame.turn_external_id),
        parent_tool_call_id=_text(frame.parent_tool_call_id),
        subagent_type=_text(frame.subagent_type),
        description=_text(frame.description),
        agent_id=_text(frame.agent_id),
        child_session_id=_text(frame.child_session_id),
        model=_text(frame.model),
        agent_status=agent_status,
        tool_status=tool_status,
        is_async=frame.is_async,
        total_tokens=_metric(frame.total_tokens, True, counts),
        tool_use_count=_metric(frame.tool_use_count, False, counts),
        duration_ms=_metric(frame.duration_ms, True, counts),
        source=frame.source,
        observed_at=frame.observed_at,
        settled_at=frame.observed_at if is_terminal(tool_status) else None,
    )
    return normalized, counts


# -- column rules: (old row, frame, now) -> new value -------------------------------------

Rule = Callable[[Mapping[str, Any], NormalizedFrame, datetime], Any]


class ColumnRule(NamedTuple):
    """How one column is merged, with its one-line statement for the SQL writer."""

    rule: Rule
    doc: str


def _write_once(column: str) -> ColumnRule:
    def rule(old: Mapping[str, Any], frame: NormalizedFrame, now: datetime) -> Any:
        return old[column] if old[column] is not None else getattr(frame, column)

    return ColumnRule(rule, f"write-once: COALESCE(old.{column}, new.{column})")


def _last_reported(column: str) -> ColumnRule:
    def rule(old: Mapping[str, Any], frame: NormalizedFrame, now: datetime) -> Any:
        value = getattr(frame, column)
        return value if value is not None else old[column]

    return ColumnRule(rule, f"last reported wins, never blanked: COALESCE(new.{column}, old.{column})")


def _tool_status(old: Mapping[str, Any], frame: NormalizedFrame, now: datetime) -> Any:
    if old["settled_at"] is not None:
        return old["tool_status"]
    return frame.tool_status if frame.tool_status is not None else old["tool_status"]


def _settled_at(old: Mapping[str, Any], frame: NormalizedFrame, now: datetime) -> Any:
    return old["settled_at"] if old["settled_at"] is not None else frame.settled_at


def _source(old: Mapping[str, Any], frame: NormalizedFrame, now: datetime) -> Any:
    return "live" if frame.source == "live" else (old["source"] or frame.source)


_METRICS = ("total_tokens", "tool_use_count", "duration_ms")

COLUMN_RULES: Mapping[str, ColumnRule] = {
    "session_id": _write_once("session_id"),
    "agent_execution_id": _write_once("agent_execution_id"),
    "tool_call_id": _write_once("tool_call_id"),
    "turn_id": ColumnRule(
        _write_once("turn_id").rule, "first non-empty wins, NULL filled forward: COALESCE(old.turn_id, new.turn_id)"
    ),
    **{column: _last_reported(column) for column in LAST_REPORTED if column not in _METRICS},
    "tool_status": ColumnRule(
        _tool_status,
        "frozen once settled: CASE WHEN old.settled_at IS NOT NULL THEN old.tool_status "
        "ELSE COALESCE(new.tool_status, old.tool_status) END",
    ),
    "is_async": ColumnRule(
        lambda old, frame, now: bool(old["is_async"]) or frame.is_async is True,
        "sticky false->true: old.is_async OR COALESCE(new.is_async, FALSE)",
    ),
    **{column: _last_reported(column) for column in _METRICS},
    "source": ColumnRule(_source, "live once a live frame merged: CASE WHEN new.source = 'live' THEN 'live' "
                                  "ELSE old.source END"),
    "observed_at": _write_once("observed_at"),
    "settled_at": ColumnRule(
        _settled_at,
        "the observation time of the first terminal frame, then write-once: COALESCE(old.settled_at, "
        "new.settled_at), where a frame's settled_at is its observed_at when LOWER(TRIM(tool_status)) IN TERMINAL",
    ),
    "updated_at": ColumnRule(lambda old, frame, now: now, "now of the last merge: :now"),
}
assert tuple(COLUMN_RULES) == ROW_COLUMNS, "every column has exactly one rule"


def merge(
    row: Mapping[str, Any] | None, frame: SubagentFrame | NormalizedFrame, now: datetime
) -> dict[str, Any] | None:
    """The row after merging ``frame`` onto ``row`` (None: no row yet) at time ``now``.

    A frame without identity writes nothing: the row comes back unchanged.

    Raises:
        ValueError: ``row`` belongs to another key (two keys never merge).
    """
    normalized = normalize_frame(frame)[0] if isinstance(frame, SubagentFrame) else frame
    if normalized is None:
        return dict(row) if row is not None else None
    old = EMPTY_ROW if row is None else row
    if row is not None and (row["session_id"], row["agent_execution_id"], row["tool_call_id"]) != normalized.key:
        raise ValueError(f"frame key {normalized.key} does not match the row it is merged onto")
    new = {column: spec.rule(old, normalized, now) for column, spec in COLUMN_RULES.items()}
    if row is not None and normalized.source == "backfill" and (
        row["source"] == "live" or all(new[c] == row[c] for c in ROW_COLUMNS if c != "updated_at")
    ):
        return dict(row)  # ON CONFLICT DO NOTHING: a backfill never touches a live row, nor repeats itself
    return new


def fold(frames: Iterable[NormalizedFrame]) -> list[tuple[NormalizedFrame, int]]:
    """One frame per key that merges like all of that key's ``frames`` in order, with how many it stands for.

    For the frames of one source (a backfill's). Keys come in order of first appearance. Merging the folded frame onto any row gives
    that row merged with each frame in turn (``updated_at`` aside), so a backfill can
    write each key once, and writing the same backfill again changes nothing.
    """
    rows: dict[Key, dict[str, Any]] = {}
    counts: dict[Key, int] = {}
    for frame in frames:
        rows[frame.key] = merge(rows.get(frame.key), frame, frame.observed_at)  # type: ignore[assignment]
        counts[frame.key] = counts.get(frame.key, 0) + 1
    names = [f.name for f in fields(NormalizedFrame)]
    return [(NormalizedFrame(**{n: row[n] for n in names}), counts[key]) for key, row in rows.items()]


def replay(
    frames: Iterable[SubagentFrame], nows: Iterable[datetime]
) -> tuple[dict[Key, dict[str, Any]], SubagentCounters]:
    """Merge frames in order into an in-memory table (the oracle for a store's recorder).

    ``nows`` gives the merge time of each frame, in the same order.
    """
    rows: dict[Key, dict[str, Any]] = {}
    counters = SubagentCounters()
    for frame, now in zip(frames, nows):
        normalized, counts = normalize_frame(frame)
        for name, increment in counts.items():
            setattr(counters, name, getattr(counters, name) + increment)
        if normalized is None:
            continue
        rows[normalized.key] = merge(rows.get(normalized.key), normalized, now)  # type: ignore[assignment]
        counters.persisted += 1
    return rows, counters


# -- the recorder: the rules above, applied by a store --------------------------------------


class SubagentRecorder:
    """Writes sub-agent frames into a store's ``subagent_contexts``; never raises.

    Usage::

        recorder = SubagentRecorder(store, "alice")
        recorder.record(frame)                      # from a parser, or as a LangChain sink:
        SubagentCallbackHandler(recorder.record, session_id="s1")

    Each frame is normalized (``normalize_frame``) and merged by the store's one-statement
    upsert; its counter increments commit in the same transaction. A frame without
    identity only counts ``skipped_no_identity``. A failing upsert logs a warning and
    counts ``failed``; the caller (a capture, an agent run) carries on.

    Attributes:
        counts: what this recorder did since it was made (the store keeps the totals).
    """

    def __init__(self, store: Store, namespace: str, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.store = store
        self.namespace = namespace
        self.counts = SubagentCounters()
        self._clock = clock
        self._lock = threading.Lock()

    def record(self, frame: SubagentFrame) -> SubagentContext | None:
        """Merge one frame; returns the row as stored, or None (skipped or failed)."""
        normalized, increments = self._normalize(frame)
        if normalized is None:
            self._bump(increments)
            return None
        return self._write(normalized, increments)

    def record_all(self, frames: Iterable[SubagentFrame]) -> SubagentCounters:
        """Record frames in order; returns what these frames added to the counters.

        Live frames are merged one by one. Backfill frames are folded per key (``fold``)
        and each key is written once, after the live ones: so ingesting the same
        transcript again leaves every row as it was.
        """
        before = self.counts.model_copy()
        backfill: list[NormalizedFrame] = []
        increments: dict[Key, dict[str, int]] = {}
        for frame in frames:
            if frame.source != "backfill":
                self.record(frame)
                continue
            normalized, counts = self._normalize(frame)
            if normalized is None:
                self._bump(counts)
                continue
            backfill.append(normalized)
            total = increments.setdefault(normalized.key, dict.fromkeys(counts, 0))
            for name, n in counts.items():
                total[name] += n
        for folded, n in fold(backfill):
            self._write(folded, {**increments[folded.key], "persisted": n - 1})
        return SubagentCounters(**{name: getattr(self.counts, name) - getattr(before, name)
                                   for name in SubagentCounters.model_fields})

    def _normalize(self, frame: SubagentFrame) -> tuple[NormalizedFrame | None, dict[str, int]]:
        try:
            return normalize_frame(frame)
        except Exception:  # noqa: BLE001 - a malformed frame must not break the capture or the agent run
            logger.warning("subagent frame could not be normalized; counted as failed", exc_info=True)
            return None, {"attempted": 1, "failed": 1}

    def _write(self, normalized: NormalizedFrame, increments: Mapping[str, int]) -> SubagentContext | None:
        """One upsert; ``increments`` (with ``persisted`` beyond the one this write adds) commit with it."""
        try:
            row = self.store.upsert_subagent(self.namespace, normalized, self._clock(), increments)
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            logger.warning("subagent upsert failed for %s (tool call %s): %s; counted as failed",
                           normalized.session_id, normalized.tool_call_id, exc)
            self._bump({"attempted": increments.get("attempted", 0), "failed": 1 + increments.get("persisted", 0)})
            return None
        self._tally({**increments, "persisted": increments.get("persisted", 0) + 1})
        return row

    __call__ = record

    def _bump(self, increments: Mapping[str, int]) -> None:
        if not any(increments.values()):
            return
        try:
            self.store.bump_subagent_counters(self.namespace, increments)
        except Exception as exc:  # noqa: BLE001 - counting must not break the caller either
            logger.warning("subagent counters could not be updated (%s): %s", dict(increments), exc)
        self._tally(increments)

    def _tally(self, increments: Mapping[str, int]) -> None:
        with self._lock:
            for name, n in increments.items():
                setattr(self.counts, name, getattr(self.counts, name) + n)
