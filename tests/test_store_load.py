"""Real processes on one memory, on both engines: capture writers and job workers, some of them stalling.

Capture processes append identified turns to shared sessions and queue jobs; worker
processes drain the queue with the store's own lease / fenced write. The first STALLS first
attempts (whichever workers lease them; fewer than WORKERS, so one is always free) stall until
another worker has taken the job over (its lease ran out), so their late writes must be refused. The stall waits for the takeover, never for a fixed time, and any worker
may lose a lease to a loaded machine: the checks hold whatever the timing. Afterwards every turn and job is accounted for, each job is
written exactly once, and no live memory is duplicated. (benchmarks/bench_load.py is
the full-size run through the stub model.)
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from pgtemp import require_postgres, temp_database

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.errors import LeaseLost
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import ExtractionPlan, Fence, ItemPlan

WRITERS, CAPTURES, WORKERS, SESSIONS, JOB_EVERY = 4, 60, 3, 8, 4
LEASE_S = 0.4
STALLS = 2  # first attempts held until they are taken over; below WORKERS, so someone takes them over
NS = "load"


def _finalize(result: Any) -> ExtractionReport:
    return ExtractionReport(status="ok", outcomes=dict(result.outcomes))


def _capture(url: str, proc: int, go: Any, queued: Any) -> None:
    store = open_store(url)
    go.wait()
    job_ids = set()
    for i in range(CAPTURES):
        session = f"s{(proc + i) % SESSIONS}"
        turn = {"role": "user", "content": f"note {proc}.{i}", "id": f"p{proc}-{i}"}
        r = store.capture(NS, prepare_capture(session, [turn], idempotency_key=f"p{proc}-{i}", max_turns=10))
        if i % JOB_EVERY == 0:
            job_ids.add(store.enqueue_job(NS, session, r.receipt_id).job_id)
    queued.put(sorted(job_ids))
    store.close()


def _work(url: str, stalls: Any, go: Any, captured: Any, out: Any) -> None:
    store = open_store(url)
    go.wait()
    written = fenced = stalled = stalled_fenced = 0
    while True:
        job = store.lease_job(NS, lease_s=LEASE_S, max_attempts=10)
        if job is None:
            if captured.is_set() and not store.jobs(NS, "pending") and not store.jobs(NS, "running"):
                break
            time.sleep(0.02)
            continue
        stall = False
        if job.attempts == 1:
            with stalls.get_lock():
                stall = stalls.value < STALLS
                stalls.value += stall
        if stall:
            stalled += 1
            # Stalled until another worker has leased the job again (its lease ran out meanwhile).
            give_up = time.monotonic() + 120
            while store.get_job(job.job_id).revision == job.revision and time.monotonic() < give_up:
                time.sleep(0.02)
        plan = ExtractionPlan(session_id=job.session_id, extraction_id=f"x_{uuid.uuid4().hex}", valid_at=None,
                              items=[ItemPlan("point", f"Maya wrote in {job.session_id}")])
        try:
            store.write_extraction(NS, plan, finalize=_finalize, fence=Fence(job.job_id, job.revision))
            written += 1
        except LeaseLost:
            fenced += 1
            stalled_fenced += stall
    out.put({"written": written, "fenced": fenced, "stalled": stalled, "stalled_fenced": stalled_fenced})
    store.close()


def _run(url: str) -> tuple[list[dict[str, int]], set[str]]:
    open_store(url).close()
    ctx = mp.get_context("spawn")
    go, captured, out, queued, stalls = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Value("i", 0)
    writers = [ctx.Process(target=_capture, args=(url, p, go, queued)) for p in range(WRITERS)]
    workers = [ctx.Process(target=_work, args=(url, stalls, go, captured, out)) for _ in range(WORKERS)]
    for p in writers + workers:
        p.start()
    go.set()
    job_ids = {j for _ in writers for j in queued.get(timeout=120)}
    for p in writers:
        p.join(timeout=120)
    captured.set()
    results = [out.get(timeout=120) for _ in workers]
    for p in workers:
        p.join(timeout=30)
    assert [p.exitcode for p in writers + workers] == [0] * (WRITERS + WORKERS)
    return results, job_ids


def _account(url: str, run: tuple[list[dict[str, int]], set[str]]) -> None:
    results, queued = run
    store = open_store(url)
    try:
        turns = [t for s in store.sessions(NS) for t in store.turns(NS, s.session_id)]
        ids = Counter(t.external_id for t in turns)
        assert len(turns) == WRITERS * CAPTURES and max(ids.values()) == 1
        for s in store.sessions(NS):
            assert [t.index for t in store.turns(NS, s.session_id)] == list(range(s.turn_count))
        assert len(store.receipts(NS)) == WRITERS * CAPTURES
        jobs = store.jobs(NS)
        # A session has one pending job: an enqueue while one waits folds into it, so there are at most as
        # many jobs as enqueues, and every job an enqueue returned exists.
        assert {j.job_id for j in jobs} == queued
        assert SESSIONS <= len(jobs) <= WRITERS * len(range(0, CAPTURES, JOB_EVERY))
        assert {j.status for j in jobs} == {"done"}
        assert sum(r["written"] for r in results) == len(jobs)
        assert _runs_per_job(store) == {j.job_id: 1 for j in jobs}  # each job written exactly once
        # Every stalled write came after the takeover and was refused; other workers may lose a lease to load.
        stalled = sum(r["stalled"] for r in results)
        assert stalled == STALLS and sum(r["stalled_fenced"] for r in results) == stalled
        assert sum(r["fenced"] for r in results) >= stalled
        live = [m.content for m in store.memories(NS)]
        assert sorted(live) == sorted({f"Maya wrote in s{i}" for i in range(SESSIONS)})
    finally:
        store.close()


def _runs_per_job(store: Any) -> dict[str, int]:
    sql = "SELECT job_id, COUNT(*) FROM extractions WHERE namespace = {} GROUP BY job_id"
    if hasattr(store, "_rows"):  # PostgreSQL
        return dict(store._rows(sql.format("%s"), (NS,)))
    with store.read() as c:
        return dict(c.execute(sql.format("?"), (NS,)).fetchall())


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_writers_and_stalling_workers_account_for_every_turn_and_job(engine: str, tmp_path: Any) -> None:
    if engine == "sqlite":
        url = str(tmp_path / "load.db")
        _account(url, _run(url))
        return
    require_postgres()
    with temp_database("tortoise_load") as url:
        _account(url, _run(url))
