"""Background extraction: a durable job queue with leases and fencing revisions.

A worker leases the oldest runnable job, which bumps the job's revision; the S5
write commits only if the revision is unchanged (checked inside its
transaction), so a worker whose lease expired and was taken over cannot commit
a late result: the store refuses it with ``LeaseLost``, logs a warning and counts
it in ``store.fenced_writes`` (the same on both engines). A crashed worker's job is leased again after its lease expires;
after ``max_attempts`` the job is failed, keeping every attempt's error.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import LeaseLost
from ..models import ExtractionReport, JobInfo
from ..store.base import Store
from ..store.plan import Fence

__all__ = ("DEFAULT_LEASE_S", "DEFAULT_MAX_ATTEMPTS", "process_pending")

DEFAULT_LEASE_S = 600.0
DEFAULT_MAX_ATTEMPTS = 3

Run = Callable[[JobInfo, Fence], ExtractionReport]


def process_pending(store: Store, namespace: str | None, run: Run, *, max_jobs: int | None = None,
                    lease_s: float = DEFAULT_LEASE_S, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[JobInfo]:
    """Run queued jobs until none is runnable (or ``max_jobs`` ran); return each job's state afterwards."""
    done: list[JobInfo] = []
    while max_jobs is None or len(done) < max_jobs:
        job = store.lease_job(namespace, lease_s=lease_s, max_attempts=max_attempts)
        if job is None:
            break
        fence = Fence(job.job_id, job.revision)
        try:
            report = run(job, fence)
            if report.status == "failed":
                store.fail_job(fence, report.reason or "extraction failed", max_attempts=max_attempts)
        except LeaseLost:
            pass  # refused, logged and counted by the store; the new lease holder's result counts
        except Exception as exc:  # noqa: BLE001 - recorded on the job, retried later
            try:
                store.fail_job(fence, f"{type(exc).__name__}: {exc}", max_attempts=max_attempts)
            except LeaseLost:
                pass  # the error belongs to a lease that is gone; refused, logged and counted likewise
        done.append(store.get_job(job.job_id))
    return done
