"""process_pending on both engines: a worker whose lease was taken over is refused, logged and counted."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from pgtemp import require_postgres, temp_database

from tortoise_sdk.models import ExtractionReport, JobInfo
from tortoise_sdk.pipeline.jobs import process_pending
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import Fence

NS = "jobs"


@pytest.fixture(scope="module")
def pg_url():
    require_postgres()
    with temp_database("tortoise_jobs") as url:
        yield url


@pytest.fixture(params=("sqlite", "postgres"))
def store(request, tmp_path):
    url = str(tmp_path / "jobs.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(url)
    yield s
    s.close()


@pytest.mark.parametrize("late", ["finishes", "crashes"])
def test_a_late_write_is_refused_logged_and_counted_on_both_engines(store, caplog, late):
    ns = f"{NS}_{late}"
    job = store.enqueue_job(ns, "s1")

    def run(info: JobInfo, fence: Fence) -> ExtractionReport:
        # While this worker runs, its lease expires and another worker takes the job over.
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        store.lease_job(ns, lease_s=30, max_attempts=3, now=later)
        if late == "crashes":
            raise RuntimeError("worker died")  # process_pending records it with fail_job: refused too
        store.finish_job(fence)
        return ExtractionReport(status="ok")

    with caplog.at_level(logging.WARNING, logger="tortoise_sdk.store"):
        done = process_pending(store, ns, run, lease_s=30)

    assert [(j.job_id, j.status, j.revision, j.attempts) for j in done] == [(job.job_id, "running", 2, 2)]
    assert done[0].errors == ["attempt 1: lease expired (worker crashed or stalled); retried"]
    assert store.fenced_writes == 1
    assert [r.getMessage() for r in caplog.records if r.name.startswith("tortoise_sdk.store")] == [
        f"refused a late write for job {job.job_id}: it is at revision 2 (running), the worker held 1"
    ]
