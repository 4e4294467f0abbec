"""Background extraction: a durable job queue with leases, heartbeats and fencing revisions.

A worker leases the oldest runnable job, which bumps the job's revision; the S5
write commits only if the revision is unchanged (checked inside its
transaction), so a worker whose lease expired and was taken over cannot commit
a late result: the store refuses it with ``LeaseLost``, logs a warning and counts
it in ``store.fenced_writes`` (the same on both engines). While a job runs, a
heartbeat renews its lease every third of ``lease_s`` (the revision stays), so a
long extraction keeps its job and a worker that dies loses it within ``lease_s``:
another worker then retries it. A failed attempt puts the job back, due after a
backoff (``retry_backoff_s``, doubling with each attempt up to ``max_retry_backoff_s``),
so a failing provider is not asked again back to back; a pass never runs a job twice, nor the
session's newer job that took its retry over.
A ``partial`` run that left turns waiting (their S1 chunk or S2 failed: the watermark
stopped before them) counts as a failed attempt too, though what it found is written.
After ``max_attempts`` (3) the job is failed for good, keeping every attempt's error:
``jobs(status="failed")`` lists it and ``retry_failed`` puts it back (``tortoise flush
--retry-failed``); its turns stay stored and wait after the watermark meanwhile.

``run_worker`` is the loop of ``tortoise worker``: it polls for due jobs and, when
the store is unreachable (a database restart, a network cut), logs it, backs off
(exponentially, with jitter, up to ``max_backoff_s``) and goes on.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
from collections.abc import Callable
from types import TracebackType

from ..config import DEFAULT_JOB_RETRY_S
from ..errors import LeaseLost, StoreClosed, StoreError
from ..models import ExtractionReport, JobInfo
from ..store.base import Store
from ..store.plan import Fence

__all__ = (
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_RETRY_BACKOFF_S",
    "DEFAULT_RETRY_BACKOFF_S",
    "Heartbeat",
    "process_pending",
    "retry_delay",
    "run_worker",
)

#: A job's lease; the heartbeat renews it every third of this while the job runs.
DEFAULT_LEASE_S = 30.0
DEFAULT_MAX_ATTEMPTS = 3
#: The longest pause between attempts to reach a store that is down.
DEFAULT_MAX_BACKOFF_S = 30.0
#: A failed job is due again this long after its first failed attempt; the wait doubles with each attempt.
DEFAULT_RETRY_BACKOFF_S = DEFAULT_JOB_RETRY_S
DEFAULT_MAX_RETRY_BACKOFF_S = 600.0

Run = Callable[[JobInfo, Fence], ExtractionReport]

_log = logging.getLogger("tortoise_sdk.worker")


def process_pending(store: Store, namespace: str | None, run: Run, *, max_jobs: int | None = None,
                    lease_s: float = DEFAULT_LEASE_S, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                    session_id: str | None = None, due_only: bool = True,
                    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
                    max_retry_backoff_s: float = DEFAULT_MAX_RETRY_BACKOFF_S,
                    paused: Callable[[], bool] | None = None) -> list[JobInfo]:
    """Run queued jobs until none is runnable (or ``max_jobs`` ran); return each job's state afterwards.

    Only jobs that are due run, unless ``due_only=False`` (a flush); ``session_id`` limits it to one
    session. A failed job is due again after :func:`retry_delay` and runs at most once per pass
    (with ``retry_backoff_s=0``, at once, up to ``max_attempts``). No job is leased while ``paused()`` is true (the caller's circuit breaker is
    open: the provider would only refuse again), so waiting jobs keep their attempts.
    """
    done: list[JobInfo] = []
    ran: set[str] = set()
    while max_jobs is None or len(done) < max_jobs:
        if paused is not None and paused():
            break
        # With no backoff asked for (retry_backoff_s=0) a failed job may run again at once, in this pass.
        job = store.lease_job(namespace, lease_s=lease_s, max_attempts=max_attempts, session_id=session_id,
                              due_only=due_only, exclude=ran if retry_backoff_s > 0 else ())
        if job is None:
            break
        ran.add(job.job_id)
        fence = Fence(job.job_id, job.revision)
        retry_in = retry_delay(job.attempts, retry_backoff_s, max_retry_backoff_s)
        failed: JobInfo | None = None
        with Heartbeat(store, fence, lease_s=lease_s):
            try:
                report = run(job, fence)
                if report.status == "failed" or report.waiting is not None:
                    failed = store.fail_job(fence, report.reason or "extraction failed", max_attempts=max_attempts,
                                            retry_in_s=retry_in)
            except LeaseLost:
                pass  # refused, logged and counted by the store; the new lease holder's result counts
            except Exception as exc:  # noqa: BLE001 - recorded on the job, retried later
                try:
                    failed = store.fail_job(fence, f"{type(exc).__name__}: {exc}", max_attempts=max_attempts,
                                            retry_in_s=retry_in)
                except LeaseLost:
                    pass  # the error belongs to a lease that is gone; refused, logged and counted likewise
        if failed is not None and failed.status == "done" and retry_backoff_s > 0:
            # The retry went to the session's newer pending job: not in this pass either.
            ran.update(j.job_id for j in store.jobs(job.namespace, status="pending") if j.session_id == job.session_id)
        done.append(store.get_job(job.job_id))
    return done


def retry_delay(attempt: int, base_s: float = DEFAULT_RETRY_BACKOFF_S,
                max_s: float = DEFAULT_MAX_RETRY_BACKOFF_S) -> float:
    """Seconds until a job whose ``attempt``-th attempt failed is due again: ``base_s`` doubling, at most ``max_s``."""
    if base_s <= 0:
        return 0.0
    return min(max_s, base_s * 2 ** max(0, attempt - 1))


class Heartbeat:
    """Renews a job's lease every ``interval_s`` (default a third of ``lease_s``) until the block ends.

    It stops on its own when the lease is gone (another worker took the job: the late
    write will be refused anyway); a store error is logged and the next beat tries again.
    """

    def __init__(self, store: Store, fence: Fence, *, lease_s: float, interval_s: float | None = None) -> None:
        self.store = store
        self.fence = fence
        self.lease_s = lease_s
        self.interval_s = interval_s if interval_s is not None else lease_s / 3
        self.beats = 0
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tortoise-heartbeat-{fence.job_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.store.renew_lease(self.fence, lease_s=self.lease_s)
                self.beats += 1
            except LeaseLost as exc:
                self.lost = True
                _log.warning("heartbeat stopped: %s", exc)
                return
            except Exception as exc:  # noqa: BLE001 - a store outage; the lease may lapse, fencing holds
                _log.warning("heartbeat for job %s failed (%s); trying again in %.1f s",
                             self.fence.job_id, exc, self.interval_s)


def run_worker(process: Callable[[int | None], list[JobInfo]], *, poll_s: float = 2.0, once: bool = False,
               max_jobs: int | None = None, on_job: Callable[[JobInfo], None] | None = None,
               stop: threading.Event | None = None, max_backoff_s: float = DEFAULT_MAX_BACKOFF_S) -> int:
    """Call ``process(limit)`` (one pass over the due jobs) until stopped; return how many jobs ran.

    Between passes that found nothing it waits ``poll_s``. When the store cannot be reached
    (``StoreError``, a SQLite I/O error) the pass is logged and tried again after a backoff
    that doubles from ``poll_s`` up to ``max_backoff_s``; with ``once`` the error is raised, and
    ``StoreClosed`` (the store was closed under it) is always raised.
    Ends after one successful pass with ``once``, after ``max_jobs`` jobs, or when ``stop`` is set.
    """
    stop = stop or threading.Event()
    ran = failures = 0
    while not stop.is_set():
        try:
            jobs = process(None if max_jobs is None else max_jobs - ran)
        except StoreClosed:
            raise  # closed by its owner: no outage to wait out, it will not come back
        except (StoreError, sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
            if once:
                raise
            failures += 1
            delay = min(max_backoff_s, poll_s * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)
            _log.warning("store unavailable (%s); retrying in %.1f s (attempt %d)", exc, delay, failures)
            stop.wait(delay)
            continue
        if failures:
            _log.warning("store reachable again after %d failed attempt(s); going on", failures)
            failures = 0
        for job in jobs:
            if on_job is not None:
                on_job(job)
        ran += len(jobs)
        if once or (max_jobs is not None and ran >= max_jobs):
            break
        if not jobs:
            stop.wait(poll_s)
    return ran
