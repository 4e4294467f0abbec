"""Workers on both engines: a taken-over lease is refused, logged and counted; a heartbeat keeps a long job;
a dead worker's job is retried within its (short) lease; the worker waits out a database outage."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from pgtemp import temp_server

from tortoise_sdk.errors import LeaseLost
from tortoise_sdk.models import ExtractionReport, JobInfo
from tortoise_sdk.pipeline.jobs import process_pending
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import Fence

NS = "jobs"


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


def test_a_flush_pass_does_not_run_the_retry_it_handed_to_a_newer_job(store):
    # A capture during the failed attempt queued the session's next job; the retry went to it. Running
    # it in the same pass would ask the failing provider again at once and spend a second attempt.
    ns = f"{NS}_handed"
    store.enqueue_job(ns, "s1")
    calls: list[tuple[str, int]] = []

    def run(info: JobInfo, fence: Fence) -> ExtractionReport:
        calls.append((info.job_id, info.attempts))
        if len(calls) == 1:
            store.enqueue_job(ns, "s1", waiting_turns=1)
        raise RuntimeError("provider 500")

    process_pending(store, ns, run, due_only=False)
    assert len(calls) == 1
    (pending,) = store.jobs(ns, status="pending")
    assert (pending.attempts, pending.errors) == (1, ["attempt 1: RuntimeError: provider 500"])


# -- heartbeats and dead workers -------------------------------------------------------------------


def test_a_heartbeat_keeps_a_long_job_from_being_taken_over(store):
    ns = f"{NS}_heartbeat"
    job = store.enqueue_job(ns, "s1")
    stolen: list[JobInfo] = []

    def run(info: JobInfo, fence: Fence) -> ExtractionReport:
        # The job runs three leases long; another worker keeps trying to take it meanwhile.
        end = time.monotonic() + 1.8
        while time.monotonic() < end:
            if (other := store.lease_job(ns, lease_s=0.6, max_attempts=3)) is not None:
                stolen.append(other)
            time.sleep(0.05)
        store.finish_job(fence)
        return ExtractionReport(status="ok")

    done = process_pending(store, ns, run, lease_s=0.6)
    assert stolen == []
    assert [(j.job_id, j.status, j.revision, j.attempts) for j in done] == [(job.job_id, "done", 1, 1)]


def _hang_on_a_job(url: str, ns: str) -> None:
    store = open_store(url)

    def run(info: JobInfo, fence: Fence) -> ExtractionReport:
        time.sleep(3600)  # killed mid-job
        raise AssertionError("unreachable")

    process_pending(store, ns, run, lease_s=1.0)


def test_a_dead_workers_job_is_retried_within_its_lease_and_its_write_is_fenced(store, tmp_path):
    ns = f"{NS}_dead"
    job = store.enqueue_job(ns, "s1")
    url = store.url
    worker = mp.get_context("spawn").Process(target=_hang_on_a_job, args=(url, ns))
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while store.get_job(job.job_id).status != "running":
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.05)
        time.sleep(1.5)  # its heartbeat has renewed the 1 s lease by now
        assert store.lease_job(ns, lease_s=1.0, max_attempts=3) is None
        os.kill(worker.pid, signal.SIGKILL)  # our own child, by PID
        killed = time.monotonic()
        while (retry := store.lease_job(ns, lease_s=30, max_attempts=3)) is None:
            assert time.monotonic() - killed < 10, "the dead worker's job was not retried"
            time.sleep(0.05)
        waited = time.monotonic() - killed
    finally:
        worker.join(timeout=10)
    assert waited < 2.0  # the lease (1 s) ran out, not the old 600 s
    assert (retry.job_id, retry.revision, retry.attempts) == (job.job_id, 2, 2)
    assert retry.errors == ["attempt 1: lease expired (worker crashed or stalled); retried"]
    with pytest.raises(LeaseLost):  # the dead worker's lease can commit nothing
        store.finish_job(Fence(job.job_id, 1))
    store.finish_job(Fence(job.job_id, retry.revision))


# -- the worker survives a database outage ---------------------------------------------------------


@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
def test_the_worker_waits_out_a_postgres_outage_and_goes_on(tmp_path, stub_model):
    from tortoise_sdk import Memory
    from tortoise_sdk.demo import load_demo_sessions, load_recorded_extraction

    demo = {s["session_id"]: s for s in load_demo_sessions()}
    stub = stub_model(load_recorded_extraction())
    with temp_server() as server:
        open_store(server.url).close()  # migrated before the worker starts
        out, err = (tmp_path / "worker.out").open("w"), (tmp_path / "worker.err").open("w")
        worker = subprocess.Popen(
            [sys.executable, "-m", "tortoise_sdk.cli", "--db", server.url, "--namespace", "t", "worker",
             "--poll", "0.2", "--model", "openai/stub-model", "--api-base", stub.base_url],
            stdout=out, stderr=err, env={**os.environ, "OPENAI_API_KEY": "sk-stub"})
        try:
            time.sleep(2.0)  # idle, polling
            server.kill()
            time.sleep(3.0)  # the database is gone while the worker is idle
            assert worker.poll() is None, (tmp_path / "worker.err").read_text()
            server.start()
            s = demo["demo-1"]
            with Memory(server.url, namespace="t", model="openai/stub-model", api_base=stub.base_url,
                        extract_every=1) as mem:
                receipt = mem.capture(s["session_id"], s["turns"], session_date=s["date"], extract="background")
                deadline = time.monotonic() + 60
                while mem.store.get_job(receipt.extraction.job_id).status != "done":
                    assert time.monotonic() < deadline and worker.poll() is None, (tmp_path / "worker.err").read_text()
                    time.sleep(0.1)
                assert len(mem.memories()) == 7
            # The worker prints the job after committing it: under load, SIGTERM could land in between.
            said = f"job {receipt.extraction.job_id} demo-1: done (attempt 1)"
            deadline = time.monotonic() + 30
            while said not in (tmp_path / "worker.out").read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert worker.poll() is None
        finally:
            worker.terminate()  # our own child, by its handle
            worker.wait(timeout=30)
            out.close()
            err.close()
    logged = (tmp_path / "worker.err").read_text()
    # The outage is seen either by a pass that failed and backed off, or by a pass that waited inside
    # the pool for a connection (up to the store's bound) while the pool retried: which one depends on
    # where the worker was when the server died. Either way it says so.
    backed_off = "store unavailable" in logged and "store reachable again" in logged
    waited_in_pool = "cannot connect to PostgreSQL" in logged and "answers again" in logged
    assert backed_off or waited_in_pool, logged
    assert said in (tmp_path / "worker.out").read_text()


def test_run_worker_backs_off_through_store_errors_and_raises_only_once_asked(caplog):
    from tortoise_sdk.errors import StoreError
    from tortoise_sdk.pipeline.jobs import run_worker

    calls: list[int | None] = []
    done = JobInfo(job_id="j1", namespace="n", session_id="s", status="done",
                   created_at=datetime.now(timezone.utc), updated_at=datetime.now(timezone.utc))

    def process(limit):
        calls.append(limit)
        if len(calls) <= 2:
            raise StoreError("PostgreSQL write failed: server closed the connection unexpectedly")
        return [done]

    seen: list[JobInfo] = []
    with caplog.at_level(logging.WARNING, logger="tortoise_sdk.worker"):
        assert run_worker(process, poll_s=0.01, max_jobs=1, on_job=seen.append) == 1
    assert calls == [1, 1, 1] and seen == [done]
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(";")[0] for m in messages[:2]] == ["store unavailable (PostgreSQL write failed: server closed "
                                                       "the connection unexpectedly)"] * 2
    assert messages[2] == "store reachable again after 2 failed attempt(s); going on"
    calls.clear()
    with pytest.raises(StoreError):
        run_worker(process, once=True)


@pytest.mark.parametrize("poll_s", [0, -1.0, float("nan"), float("inf"), 1e300])
def test_a_worker_refuses_a_poll_that_would_spin_or_overflow(tmp_path, poll_s) -> None:
    """Reviewer: poll_s=0 ran a busy loop at 100 % CPU (and inf overflowed the timer after the first pass)."""
    from tortoise_sdk import Memory
    from tortoise_sdk.errors import InvalidInput

    with Memory(str(tmp_path / "w.db"), model="openai/unused") as mem, \
            pytest.raises(InvalidInput, match="poll_s") as refused:
        mem.run_worker(poll_s=poll_s, once=True)
    assert refused.value.field == "poll_s"
