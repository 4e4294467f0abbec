"""The dialect-neutral half of the extraction mixins of both stores (``ExtractionCore``).

It holds the S5 consolidation (order of application, ADD / NOOP / UPDATE / DELETE
decisions, retraction matching), the supersession walk and the job state machine
(leases, attempts, fencing, counting refused late writes). A store's mixin supplies
``transaction`` and the small ``_``-hooks below: SQL text and driver calls only.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..confidence import confidence
from ..errors import LeaseLost, NotFoundError
from ..models import HOST_SESSION, Diagnostic, ExtractionReport, ExtractionState, JobInfo, MemoryRecord
from ..names import host_entity_kind
from ..text import fact_key, jaccard, norm_content, norm_name
from .entity_core import EntityCore, Names
from .plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, SourcePlan, Window, WriteResult
from .rows import Row, iso_dt, memory_id_for, utc

__all__ = ("RETRACTION_MATCH", "ExtractionCore")

#: A job's session has another job running under a live lease (``%s``: now): a session's jobs run one at a
#: time, so a job queued while another runs waits for it, and its window starts where that one's ended.
BUSY_SESSION = ("SELECT 1 FROM jobs AS busy WHERE busy.namespace = jobs.namespace AND busy.session_id = jobs.session_id"
                " AND busy.status = 'running' AND busy.lease_until >= %s AND busy.job_id <> jobs.job_id")
#: A retraction whose text overlaps a live memory at least this much (token Jaccard) deletes it.
RETRACTION_MATCH = 0.5

Conn = Any


def _keys(content: str) -> tuple[str, str]:
    """The stored keys a restatement of ``content`` may have: its fact key (memories written since the key
    became the dedupe key), and its plain normalised content (memories written before)."""
    return (fact_key(content), norm_content(content))


def _bump(counter: dict[str, int], key: str) -> None:
    counter[key] = counter.get(key, 0) + 1


class ExtractionCore(EntityCore):
    """Supersession reads, the S5 write and the job queue, over per-dialect hooks."""

    transaction: Callable[..., Any]
    get_memory: Callable[[str, str], MemoryRecord]

    #: Late writes this store refused because the job's lease had moved on.
    fenced_writes: int = 0
    _fence_lock = threading.Lock()
    _log: logging.Logger = logging.getLogger("tortoise_sdk.store")

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

        Entities resolve to existing nodes by name, alias, short form or role
        (:mod:`~tortoise_sdk.store.entity_core`); each item becomes ADD,
        NOOP (a live memory states the same fact up to wording, :func:`~tortoise_sdk.text.fact_key`:
        its sources are added to that memory's), UPDATE (``supersedes`` names a
        live memory, which is kept, marked superseded and linked) or, for a retraction,
        DELETE. ``finalize`` turns the outcome into the report stored with the run and
        on the receipt, inside the same transaction.

        Raises:
            LeaseLost: ``fence`` no longer holds (another worker took the job); nothing was written.
            NotFoundError: the session is not stored (it was forgotten meanwhile); nothing was written.
        """

        def write(c: Conn) -> WriteResult:
            if fence is not None:
                self._check_fence(c, fence)
            now = self._begin_s5(c, namespace)
            # An inline extraction holds no job: forgetting its session while the model answered must win here too.
            if plan.session_id != HOST_SESSION and c.execute(self._q(
                    "SELECT 1 FROM sessions WHERE namespace = ? AND session_id = ?"),
                    (namespace, plan.session_id)).fetchone() is None:
                raise NotFoundError(f"session {plan.session_id!r} is not stored (forgotten while it was extracted?): "
                                    "its extraction was not written")
            result = WriteResult()
            if plan.window is not None and self._covered(c, namespace, plan.session_id, plan.window):
                result.already_covered = True
                return self._record_run(c, namespace, plan, result, finalize, fence, now)
            names = Names(namespace, now, plan.session_id)
            entity_ids: dict[str, str] = {}
            for e in plan.entities:
                if norm_name(e.name):
                    entity_ids[norm_name(e.name)] = self.resolve_entity(c, names, e)
            for item in plan.items:
                self._write_item(c, namespace, plan, item, entity_ids, result, now, names)
            for retraction in plan.retractions:
                self._retract(c, namespace, plan, retraction, result, now)
            result.counts["entity"] = len({names.current(i) for i in entity_ids.values()})
            if plan.window is not None:
                self._advance_watermark(c, namespace, plan, now)
            return self._record_run(c, namespace, plan, result, finalize, fence, now)

        return self.transaction(write)

    def _record_run(self, c: Conn, namespace: str, plan: ExtractionPlan, result: WriteResult,
                    finalize: Callable[[WriteResult], ExtractionReport], fence: Fence | None,
                    now: datetime) -> WriteResult:
        report = finalize(result)
        result.report = report
        self._insert_extraction(c, namespace, plan, report, fence.job_id if fence else None, now)
        if plan.receipt is not None:
            self._set_receipt_body(c, namespace, plan.receipt.model_copy(update={"extraction": report}))
        # A run that leaves turns waiting keeps its job running: the worker then puts it back for a retry.
        if fence is not None and (result.already_covered or plan.window is None
                                  or (plan.window.held_from is None and not plan.window.more)):
            self._settle_job(c, fence.job_id, "done", now)
            # The session's jobs that failed for good waited for turns this run has now read: settled
            # too, so that flush and worker stop reporting a failure that no longer holds.
            for failed in (self._failed_job_rows(c, namespace, plan.session_id) if plan.window is not None else ()):
                self._settle_job(c, failed["job_id"], "done", now, json.loads(failed["errors"])
                                 + [f"its turns were extracted by job {fence.job_id}"])
        return result

    def _covered(self, c: Conn, namespace: str, session_id: str, window: Window) -> bool:
        """Whether another extraction already committed this whole window (an incremental one only)."""
        state = self._extraction_state_in(c, namespace, session_id)
        return not window.full and state is not None and state.watermark >= window.end

    def _advance_watermark(self, c: Conn, namespace: str, plan: ExtractionPlan, now: datetime) -> None:
        w = plan.window
        assert w is not None
        state = self._extraction_state_in(c, namespace, plan.session_id)
        if w.mark < w.start:
            return  # no turn is covered for good: every one waits, the state stays as it was
        mark = w.mark if w.full or state is None else max(state.watermark, w.mark)
        self._save_extraction_state(c, namespace, ExtractionState(
            session_id=plan.session_id, watermark=mark, window_start=w.start, prompts_sha=w.prompts_sha,
            extraction_id=plan.extraction_id, updated_at=now))

    def extraction_state(self, namespace: str, session_id: str) -> ExtractionState | None:
        """How far the session is extracted (None: no extraction recorded a window yet)."""
        with self.read() as c:  # type: ignore[attr-defined]
            return self._extraction_state_in(c, namespace, session_id)

    def _write_item(self, c: Conn, namespace: str, plan: ExtractionPlan, item: ItemPlan,
                    entity_ids: dict[str, str], result: WriteResult, now: datetime, names: Names) -> None:
        kinds = dict(item.about_kinds)
        for name in item.about:
            if norm_name(name) and norm_name(name) not in entity_ids:
                kind = kinds.get(name) or host_entity_kind(name)
                entity_ids[norm_name(name)] = self.resolve_entity(c, names, EntityPlan(name, kind))
        named = [n for n in item.about if norm_name(n)]
        about = [names.current(entity_ids[norm_name(n)]) for n in named]
        # The key names each entity by its id, so "Mel loves pottery" restates "Melanie Hart loves pottery".
        ekey = self.entity_key(c, item.content, about, named) if about else None
        key = fact_key(item.content)
        same = self._live_with_content(c, namespace, _keys(item.content), ekey)
        if (same is not None and item.exact and item.supersedes
                and same == self._live_head(c, namespace, item.supersedes)
                and c.execute(self._q("SELECT content FROM memories WHERE memory_id = ?"),
                              (same,)).fetchone()[0] != item.content.strip()):
            same = None  # the host rewrote the wording of the memory it corrects: a new version, below
        if same is not None:
            self._link(c, namespace, same, about, item.sources, plan.extraction_id, mentions=named)
            self._confide(c, same, item.agreement)
            self.roles_stated(c, names, same, item.content, named, entity_ids)
            self._index(c, same)
            _bump(result.outcomes, "NOOP")
            result.memory_ids.append(same)
            return
        old = None
        if item.supersedes:
            old = self._live_head(c, namespace, item.supersedes)
            if old is None:
                result.warnings.append(Diagnostic(
                    stage="s5", code="supersedes_unknown",
                    message=f"{item.kind} {item.content!r} names {item.supersedes!r} as superseded, but no live "
                            "memory has that id; added as new",
                ))
        if old is not None and (since := self._newer_than(c, old, plan.valid_at)) is not None:
            # Older news extracted late (a backfilled session): the live fact stays, and this one takes its place
            # in the fact's history by date, between the versions valid before and after it.
            after, before = old, self._version(c, old)[0]
            while before is not None and (earlier := self._newer_than(c, before, plan.valid_at)) is not None:
                after, since, before = before, earlier, self._version(c, before)[0]
            memory_id = self._insert_memory(c, namespace, plan, item, key, now, supersedes=before, entity_key=ekey)
            self._set_memory_status(c, memory_id, "superseded", since, superseded_by=after)
            c.execute(self._q("UPDATE memories SET supersedes = ? WHERE memory_id = ?"), (memory_id, after))
            if before is not None:
                c.execute(self._q("UPDATE memories SET superseded_by = ?, invalid_at = ? WHERE memory_id = ?"),
                          (memory_id, self._time_param(plan.valid_at), before))
            result.warnings.append(Diagnostic(
                stage="s5", code="older_than_live",
                message=f"{item.kind} {item.content!r} (valid from {plan.valid_at:%Y-%m-%d}) is older than the "
                        f"live memory {old} it would replace; kept in its history, before {after}",
            ))
            old = None
        else:
            memory_id = self._insert_memory(c, namespace, plan, item, key, now, supersedes=old, entity_key=ekey)
        if old is not None:
            self._set_memory_status(c, old, "superseded", plan.valid_at or now, superseded_by=memory_id)
            _bump(result.outcomes, "UPDATE")
        else:
            _bump(result.outcomes, "ADD")
        _bump(result.counts, item.kind)
        self._link(c, namespace, memory_id, about, item.sources, plan.extraction_id, mentions=named)
        self._confide(c, memory_id, item.agreement)
        self._index(c, memory_id)
        self.roles_stated(c, names, memory_id, item.content, named, entity_ids)
        result.memory_ids.append(memory_id)

    def _confide(self, c: Conn, memory_id: str, level: int) -> None:
        """Set the memory's confidence from the best agreement it was stated with and all its sources."""
        stored, sources = self._support(c, memory_id)
        best = max(stored, level)
        self._save_confidence(c, memory_id, best, confidence(best, sources))

    def _insert_memory(self, c: Conn, namespace: str, plan: ExtractionPlan, item: ItemPlan,
                       key: str, now: datetime, *, supersedes: str | None, entity_key: str | None = None) -> str:
        n = 0
        while self._memory_exists(c, memory_id := memory_id_for(namespace, plan.session_id, item.kind,
                                                                item.content, n)):
            n += 1
        self._insert_memory_row(c, namespace, memory_id, plan, item, key, now, supersedes, entity_key)
        return memory_id

    def _retract(self, c: Conn, namespace: str, plan: ExtractionPlan, r: RetractionPlan,
                 result: WriteResult, now: datetime) -> None:
        target = self._live_head(c, namespace, r.target) if r.target else None
        if target is None:
            target = self._match_live(c, namespace, r.content)
        if target is None:
            result.warnings.append(Diagnostic(
                stage="s5", code="retraction_unmatched",
                message=f"retraction {r.content!r} matches no live memory; nothing deleted",
            ))
            return
        if (since := self._newer_than(c, target, plan.valid_at)) is not None:
            result.warnings.append(Diagnostic(
                stage="s5", code="older_than_live",
                message=f"retraction {r.content!r} (valid from {plan.valid_at:%Y-%m-%d}) is older than the live "
                        f"memory {target} it matches (valid from {since:%Y-%m-%d}); nothing deleted",
            ))
            return
        self._set_memory_status(c, target, "deleted", plan.valid_at or now)
        self._link(c, namespace, target, (), r.sources, plan.extraction_id)
        _bump(result.outcomes, "DELETE")
        result.memory_ids.append(target)

    def _version(self, c: Conn, memory_id: str) -> tuple[str | None, datetime | None]:
        """``(supersedes, valid_at)`` of a stored memory."""
        row = c.execute(self._q("SELECT supersedes, valid_at FROM memories WHERE memory_id = ?"), (memory_id,)).fetchone()
        if row is None or row[1] is None:
            return (None if row is None else row[0]), None
        return row[0], iso_dt(row[1]) if isinstance(row[1], str) else utc(row[1])  # SQLite keeps ISO text

    def _newer_than(self, c: Conn, memory_id: str, valid_at: datetime | None) -> datetime | None:
        """When memory ``memory_id`` became valid, if that is after ``valid_at`` (None otherwise or undated)."""
        if valid_at is None:
            return None
        since = self._version(c, memory_id)[1]
        return since if since is not None and since > valid_at else None

    def _live_head(self, c: Conn, namespace: str, memory_id: str) -> str | None:
        """The live memory at the end of ``memory_id``'s supersession chain, if any."""
        seen: set[str] = set()
        current: str | None = memory_id
        while current and current not in seen:
            seen.add(current)
            state = self._memory_state(c, namespace, current)
            if state is None or state[0] == "deleted":
                return None
            if state[0] == "live":
                return current
            current = state[1]
        return None

    def _match_live(self, c: Conn, namespace: str, content: str) -> str | None:
        """The live memory a retraction names: same normalised content, else the best close match."""
        same = self._live_with_content(c, namespace, _keys(content))
        if same is not None:
            return same
        best, best_score = None, RETRACTION_MATCH
        for mid, text in self._retraction_candidates(c, namespace, content):
            score = jaccard(content, text)
            if score >= best_score:
                best, best_score = mid, score
        return best

    # -- jobs ---------------------------------------------------------------------------------------

    def enqueue_job(self, namespace: str, session_id: str, receipt_id: str | None = None, *,
                    waiting_turns: int = 0, due_after_turns: int = 1, idle_s: float = 0.0,
                    waiting_in_all: bool = False) -> JobInfo:
        """Queue an extraction of the session, or fold this capture into its pending job.

        A session has at most one pending job. It is due now once ``due_after_turns``
        evidence turns wait (``waiting_turns`` of every capture folded in are summed), else
        ``idle_s`` after the latest capture (each capture pushes that back); a job already
        due stays due, and one waiting out the backoff of a failed attempt keeps its time. The defaults queue a job that is due at once. ``receipt_id`` (the
        latest capture's receipt) is where the job's report is stored. ``waiting_in_all``: ``waiting_turns``
        counts every turn that waits, not a capture's new ones (a capture that added none), so it is not
        added to the pending job's count but kept when larger.
        """

        def write(c: Conn) -> JobInfo:
            at = self._clock(c)
            job = self._pending_job(c, namespace, session_id)
            before = job.waiting_turns if job else 0
            waiting = max(before, waiting_turns) if waiting_in_all else before + max(0, waiting_turns)
            # None: due now (also for a lease asked with an earlier ``now``).
            due = None if waiting >= due_after_turns else at + timedelta(seconds=max(0.0, idle_s))
            if job is None:
                return self._insert_job(c, namespace, session_id, receipt_id, waiting, due, at)
            if job.due_at is None or job.due_at <= at or job.attempts > 0:
                due = job.due_at  # a job already due stays due; one waiting out a failed attempt's backoff waits
            return self._update_pending_job(c, job.job_id, receipt_id or job.receipt_id, waiting, due, at)

        return self.transaction(write)

    def lease_job(self, namespace: str | None, *, lease_s: float, max_attempts: int,
                  now: datetime | None = None, session_id: str | None = None, due_only: bool = True,
                  exclude: Collection[str] = ()) -> JobInfo | None:
        """Take the oldest runnable job (pending and due, or running with an expired lease) and bump its revision.

        A job whose lease expired after its last allowed attempt is marked failed instead.
        ``now`` defaults to the store's clock (the database clock on PostgreSQL);
        ``session_id`` takes only that session's jobs; ``due_only=False`` takes pending
        jobs that are not due yet too (a flush); ``exclude`` names jobs not to take (those
        a pass already ran, so a flush does not retry a failed job back to back).
        """

        def take(c: Conn) -> JobInfo | None:
            at = now or self._clock(c)
            for row in self._runnable_jobs(c, namespace, at, session_id=session_id, due_only=due_only,
                                           exclude=sorted(exclude)):
                errors = json.loads(row["errors"])
                lapsed = f"attempt {row['attempts']}: lease expired (worker crashed or stalled); "
                if row["attempts"] >= max_attempts:
                    errors.append(lapsed + f"giving up after {max_attempts} attempts")
                    self._failed_for_good(c, row["job_id"], row["session_id"], at, errors)
                    continue
                if row["status"] == "running":
                    errors.append(lapsed + "retried")
                return self._lease_row(c, row["job_id"], at + timedelta(seconds=lease_s), errors, at)
            return None

        return self.transaction(take)

    def renew_lease(self, fence: Fence, *, lease_s: float) -> JobInfo:
        """Extend a running job's lease to ``lease_s`` from now (a worker's heartbeat); the revision stays.

        Raises:
            LeaseLost: the lease already expired and another worker took the job (or it was settled).
        """

        def write(c: Conn) -> JobInfo:
            self._check_fence(c, fence, late_write=False)
            at = self._clock(c)
            return self._extend_lease(c, fence.job_id, at + timedelta(seconds=lease_s), at)

        return self.transaction(write)

    def fail_job(self, fence: Fence, error: str, *, max_attempts: int, retry_in_s: float = 0.0) -> JobInfo:
        """Record a failed attempt: back to pending, due ``retry_in_s`` from now, or failed for good after
        ``max_attempts``.

        When a capture queued a new pending job for the session while this one ran, that job
        (which extracts every turn after the watermark, these too) takes the retry over: it is
        due when the retry would be (neither sooner nor, waiting for ``idle_s``, later; later
        captures do not push it back) and carries this job's attempts and errors, so
        ``last_error`` shows the failure and the attempts still end at ``max_attempts``. This
        one is settled ``done`` with a note naming the other.

        Raises:
            LeaseLost: the job was taken over; the error is not recorded by this worker.
        """

        def write(c: Conn) -> JobInfo:
            row = self._check_fence(c, fence)
            at = self._clock(c)
            errors = json.loads(row["errors"]) + [f"attempt {row['attempts']}: {error}"]
            if row["attempts"] >= max_attempts:
                return self._failed_for_good(c, fence.job_id, row["session_id"], at, errors)
            due = at + timedelta(seconds=retry_in_s) if retry_in_s > 0 else None
            newer = self._pending_job(c, row["namespace"], row["session_id"])
            if newer is not None:
                # Its own failed attempts too, if another worker ran it meanwhile: every attempt counts.
                attempts, carried = row["attempts"] + newer.attempts, errors + newer.errors
                if attempts >= max_attempts:
                    self._failed_for_good(c, newer.job_id, row["session_id"], at, carried)
                else:
                    self._take_over_retry(c, newer.job_id, attempts, carried, due)
                return self._settle_job(c, fence.job_id, "done", at,
                                        errors + [f"retried as pending job {newer.job_id} of the same session"])
            if due is not None:
                self._set_job_due(c, fence.job_id, due)
            return self._settle_job(c, fence.job_id, "pending", at, errors)

        return self.transaction(write)

    def retry_failed_jobs(self, namespace: str, session_id: str | None = None) -> list[JobInfo]:
        """Put the namespace's jobs that failed for good (of one session, or all) back in the queue, due now.

        Each is pending again with its attempts reset (its errors are kept, with a note); a
        session that has a pending job already keeps that one (it reads every turn after the
        watermark, these too), and the failed job is settled ``done`` with a note naming it.
        Returns the jobs now pending for those sessions, oldest first.
        """

        def write(c: Conn) -> list[JobInfo]:
            at = self._clock(c)
            queued: dict[str, JobInfo] = {}
            for row in self._failed_job_rows(c, namespace, session_id):
                errors = json.loads(row["errors"])
                pending = queued.get(row["session_id"]) or self._pending_job(c, namespace, row["session_id"])
                if pending is not None:
                    self._settle_job(c, row["job_id"], "done", at,
                                     errors + [f"re-queued: retried as pending job {pending.job_id} of the same "
                                               "session"])
                    self._set_job_due(c, pending.job_id, None)
                    queued[row["session_id"]] = pending
                    continue
                queued[row["session_id"]] = self._requeue_job(
                    c, row["job_id"], errors + [f"re-queued after {row['attempts']} attempt(s); attempts start over"],
                    at)
            return [self._job_in(c, j.job_id) for j in queued.values()]

        return self.transaction(write)

    def _failed_for_good(self, c: Conn, job_id: str, session_id: str, at: datetime, errors: list[str]) -> JobInfo:
        """Settle a job whose attempts are spent as failed, and say so (a running worker logs it on stderr)."""
        self._log.warning("job %s of session %s failed for good after its last attempt (%s); "
                          "`tortoise flush --retry-failed` queues it again", job_id, session_id, errors[-1])
        return self._settle_job(c, job_id, "failed", at, errors)

    def finish_job(self, fence: Fence) -> None:
        """Mark a leased job done (when there was nothing to write). Raises LeaseLost."""

        def write(c: Conn) -> None:
            self._check_fence(c, fence)
            self._settle_job(c, fence.job_id, "done", self._clock(c))

        self.transaction(write)

    def _check_fence(self, c: Conn, fence: Fence, *, late_write: bool = True) -> Row:
        """The job's row, if ``fence`` still holds its lease; else raise LeaseLost.

        A refused write (``late_write``) is also counted and logged; a refused heartbeat is not.
        """
        row = self._fenced_job_row(c, fence.job_id)
        if row is None:
            raise NotFoundError(f"no job {fence.job_id!r}")
        if row["revision"] != fence.revision or row["status"] != "running":
            if not late_write:
                raise LeaseLost(f"job {fence.job_id} is at revision {row['revision']} ({row['status']}); "
                                f"the lease of revision {fence.revision} is gone")
            with self._fence_lock:
                self.fenced_writes += 1
            self._log.warning("refused a late write for job %s: it is at revision %s (%s), the worker held %s",
                        fence.job_id, row["revision"], row["status"], fence.revision)
            raise LeaseLost(
                f"job {fence.job_id} is at revision {row['revision']} ({row['status']}), this worker held "
                f"revision {fence.revision}: its lease expired and another worker took it; the result was discarded"
            )
        return row

    # -- dialect hooks: SQL text and driver calls ---------------------------------------------------

    def _clock(self, c: Conn) -> datetime:
        """Now, by the clock leases are timed with."""
        raise NotImplementedError

    def _begin_s5(self, c: Conn, namespace: str) -> datetime:
        """Serialise S5 writes of the namespace (where the engine needs it); return the write's time."""
        raise NotImplementedError

    def _live_with_content(self, c: Conn, namespace: str, keys: Sequence[str],
                           entity_key: str | None = None) -> str | None:
        """The oldest live memory whose stored key (``norm_content`` column) is one of ``keys``, or whose
        ``entity_key`` is ``entity_key``."""
        raise NotImplementedError

    def _memory_state(self, c: Conn, namespace: str, memory_id: str) -> tuple[str, str | None] | None:
        """``(status, superseded_by)`` of a memory, None when absent."""
        raise NotImplementedError

    def _memory_exists(self, c: Conn, memory_id: str) -> bool:
        raise NotImplementedError

    def _insert_memory_row(self, c: Conn, namespace: str, memory_id: str, plan: ExtractionPlan, item: ItemPlan,
                           key: str, now: datetime, supersedes: str | None, entity_key: str | None = None) -> None:
        raise NotImplementedError

    def _set_memory_status(self, c: Conn, memory_id: str, status: str, invalid_at: datetime,
                           superseded_by: str | None = None) -> None:
        """Retire a memory: ``superseded`` (by ``superseded_by``) or ``deleted``, invalid from ``invalid_at``."""
        raise NotImplementedError

    def _link(self, c: Conn, namespace: str, memory_id: str, about: Sequence[str],
              sources: Sequence[SourcePlan], extraction_id: str, *, mentions: Sequence[str] = ()) -> None:
        """Add about-edges (each with the name the item used, ``mentions``, in ``about``'s order) and
        provenance, keeping the ones already stored."""
        raise NotImplementedError

    def _retraction_candidates(self, c: Conn, namespace: str, content: str) -> Iterable[tuple[str, str]]:
        """``(memory_id, content)`` of the 20 live memories ranking best for ``content``."""
        raise NotImplementedError

    def _support(self, c: Conn, memory_id: str) -> tuple[int, list[tuple[str, str]]]:
        """The memory's stored agreement and the ``(session_id, turn_id)`` of each of its sources."""
        raise NotImplementedError

    def _save_confidence(self, c: Conn, memory_id: str, agreement: int, value: float) -> None:
        raise NotImplementedError

    def _insert_extraction(self, c: Conn, namespace: str, plan: ExtractionPlan, report: ExtractionReport,
                           job_id: str | None, now: datetime) -> None:
        raise NotImplementedError

    def _set_receipt_body(self, c: Conn, namespace: str, receipt: Any) -> None:
        raise NotImplementedError

    def _runnable_jobs(self, c: Conn, namespace: str | None, at: datetime, *, session_id: str | None,
                       due_only: bool, exclude: Sequence[str] = ()) -> Iterable[Row]:
        """Pending jobs (due by ``at`` when ``due_only``) and running ones whose lease ended before ``at``,
        oldest first, leaving out the ``exclude`` ids."""
        raise NotImplementedError

    def _set_job_due(self, c: Conn, job_id: str, due: datetime | None) -> None:
        """Set when a pending job is due (None: now)."""
        raise NotImplementedError

    def _take_over_retry(self, c: Conn, job_id: str, attempts: int, errors: list[str], due: datetime | None) -> None:
        """Make a pending job the retry of failed attempts: ``attempts`` and ``errors`` its own, due at ``due``."""
        raise NotImplementedError

    def _pending_job(self, c: Conn, namespace: str, session_id: str) -> JobInfo | None:
        """The session's pending job, locked until the transaction ends."""
        raise NotImplementedError

    def _insert_job(self, c: Conn, namespace: str, session_id: str, receipt_id: str | None, waiting: int,
                    due: datetime | None, at: datetime) -> JobInfo:
        raise NotImplementedError

    def _update_pending_job(self, c: Conn, job_id: str, receipt_id: str | None, waiting: int,
                            due: datetime | None, at: datetime) -> JobInfo:
        raise NotImplementedError

    def _extend_lease(self, c: Conn, job_id: str, until: datetime, at: datetime) -> JobInfo:
        raise NotImplementedError

    def _extraction_state_in(self, c: Conn, namespace: str, session_id: str) -> ExtractionState | None:
        raise NotImplementedError

    def _save_extraction_state(self, c: Conn, namespace: str, state: ExtractionState) -> None:
        """Insert or replace the session's extraction state."""
        raise NotImplementedError

    def _lease_row(self, c: Conn, job_id: str, until: datetime, errors: list[str], at: datetime) -> JobInfo:
        """Lease the job until ``until``: running, one more attempt, the next revision."""
        raise NotImplementedError

    def _settle_job(self, c: Conn, job_id: str, status: str, at: datetime,
                    errors: list[str] | None = None) -> JobInfo:
        """End the job's lease with ``status`` (and ``errors`` when given)."""
        raise NotImplementedError

    def _fenced_job_row(self, c: Conn, job_id: str) -> Row | None:
        """The job's row, locked against a concurrent lease until the transaction ends."""
        raise NotImplementedError

    def _failed_job_rows(self, c: Conn, namespace: str, session_id: str | None) -> Iterable[Row]:
        """The namespace's failed jobs (of one session when given), oldest first, locked."""
        raise NotImplementedError

    def _requeue_job(self, c: Conn, job_id: str, errors: list[str], at: datetime) -> JobInfo:
        """Make a failed job pending and due now, with no attempt made and ``errors``."""
        raise NotImplementedError

    def _job_in(self, c: Conn, job_id: str) -> JobInfo:
        """One job, read inside the transaction."""
        raise NotImplementedError

