"""Load test, SQLite beside PostgreSQL: concurrent capture processes and extraction workers on one memory.

Per backend: 8 processes x 500 captures (every capture appends one identified turn
to one of 40 shared sessions, under an idempotency key; every 10th is sent twice,
to replay) while 4 worker processes drain the extraction jobs the captures queue
(one per 10 captures; a session's pending job takes in the next one queued for it, so
there are fewer jobs than queue calls), through litellm's real HTTP path to the local stub
model (tests/stub_model.py, loopback only). Afterwards every turn and every job is
accounted for: turns == captures, each caller id stored once, positions gap-free,
one receipt per capture, every job a queue call returned done exactly once (one
extraction run each), no other job, no live memory duplicated.

Bounded: ~4,000 captures and at most ~400 jobs per backend; about a minute on 2 cores.
``--smoke``: 2 x 30 captures and one worker, for the tests.

Run: .venv/bin/python benchmarks/bench_load.py [--procs 8] [--captures 500] [--workers 4]
     [--backends sqlite,postgres] [--pg-url postgresql://postgres@127.0.0.1:5432/postgres] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import figures

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

NAMESPACE = "load"
SESSIONS = 40
JOB_EVERY = 10
REPLAY_EVERY = 10
FACT = "I work at Acme as a designer"

STUB_SCRIPT = {
    "routes": [
        {"stage": "s1", "cycle": True, "replies": [{"content": "Maya said she works at Acme as a designer."}]},
        {"stage": "s2", "cycle": True, "replies": [{"content": {
            "entities": [{"name": "Maya", "kind": "person", "note": "the user"},
                         {"name": "Acme", "kind": "organization"}],
            "events": [],
            "points": [{"content": "Maya works at Acme as a designer.", "about": ["Maya", "Acme"],
                        "quote": FACT, "turn": 0, "search_keys": ["job", "employer"]}],
            "retractions": [],
        }}]},
        {"stage": "s4", "cycle": True, "replies": [{"content": {
            "entities": [], "events": [], "points": [], "retractions": []}}]},
        {"cycle": True, "replies": [{"content": {"entities": [], "events": [], "points": [], "retractions": []}}]},
    ]
}


def capture_proc(url: str, proc: int, captures: int, ready: Any, out: Any) -> None:
    from tortoise_sdk import Memory

    mem = Memory(url, namespace=NAMESPACE)
    ready.wait()
    t = time.perf_counter()
    replays = 0
    queued: set[str] = set()
    for i in range(captures):
        session = f"s{(proc * 7 + i) % SESSIONS}"
        turn = {"role": "user", "name": "Maya", "id": f"p{proc}-{i}",
                "content": f"{FACT}. Note {proc}.{i} about river gardens and pottery."}
        key = f"p{proc}-{i}"
        r = mem.capture(session, [turn], idempotency_key=key)
        if i % REPLAY_EVERY == 0:
            again = mem.capture(session, [turn], idempotency_key=key)
            assert again.replayed and again.receipt_id == r.receipt_id
            replays += 1
        if i % JOB_EVERY == 0:
            queued.add(mem.store.enqueue_job(NAMESPACE, session, r.receipt_id).job_id)
    out.put({"proc": proc, "captures": captures, "replays": replays, "jobs": sorted(queued),
             "seconds": time.perf_counter() - t})
    mem.close()


def worker_proc(url: str, api_base: str, captures_done: Any, ready: Any, out: Any) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from tortoise_sdk import Memory

    # litellm's first call costs seconds (imports, client set-up): pay it before the clock starts.
    litellm.completion(model="openai/stub-model", api_base=api_base, api_key="sk-stub",
                       messages=[{"role": "user", "content": "warm up"}])

    mem = Memory(url, namespace=NAMESPACE, model="openai/stub-model", api_base=api_base, api_key="sk-stub",
                 model_settings={"max_attempts": 2})
    ready.wait()
    t = time.perf_counter()
    ran = Counter()
    while True:
        jobs = mem.process_pending()
        for j in jobs:
            ran[j.status] += 1
        if not jobs:
            if captures_done.is_set():
                # One more pass: a job queued just before the flag was set.
                jobs = mem.process_pending()
                for j in jobs:
                    ran[j.status] += 1
                if not jobs:
                    break
            time.sleep(0.05)
    fenced = getattr(mem.store, "fenced_writes", 0)
    out.put({"ran": dict(ran), "seconds": time.perf_counter() - t, "fenced": fenced})
    mem.close()


def run_backend(name: str, url: str, args: argparse.Namespace, api_base: str) -> dict[str, Any]:
    from tortoise_sdk.store import open_store

    open_store(url).close()  # migrate once, outside the timed part
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    done = ctx.Event()
    # Every process imports and connects first; the clock starts when all are ready.
    ready = ctx.Barrier(args.procs + args.workers + 1)
    caps = [ctx.Process(target=capture_proc, args=(url, p, args.captures, ready, out)) for p in range(args.procs)]
    workers = [ctx.Process(target=worker_proc, args=(url, api_base, done, ready, out))
               for _ in range(args.workers)]
    for p in caps + workers:
        p.start()
    ready.wait(timeout=300)
    start = time.perf_counter()
    for p in caps:
        p.join()
    capture_wall = time.perf_counter() - start
    done.set()
    for p in workers:
        p.join()
    total_wall = time.perf_counter() - start
    results = [out.get(timeout=5) for _ in caps + workers]
    if any(p.exitcode != 0 for p in caps + workers):
        raise SystemExit(f"{name}: a process failed: {[p.exitcode for p in caps + workers]}")
    # Each process times itself from the common start: process start-up and teardown are not counted.
    capture_s = max(r["seconds"] for r in results if "captures" in r)
    drain_s = max(r["seconds"] for r in results if "ran" in r)
    return {"capture_wall": capture_s, "total_wall": drain_s, "joined_s": [round(capture_wall, 2), round(total_wall, 2)],
            **account(url, args, results)}


def account(url: str, args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Check that every turn and job is there exactly once; return the figures."""
    from tortoise_sdk.store import open_store
    from tortoise_sdk.text import norm_content

    store = open_store(url)
    try:
        expected = args.procs * args.captures
        turns = [t for s in store.sessions(NAMESPACE) for t in store.turns(NAMESPACE, s.session_id)]
        ids = Counter(t.external_id for t in turns)
        assert len(turns) == expected, f"{len(turns)} turns stored, {expected} captured"
        assert set(ids) == {f"p{p}-{i}" for p in range(args.procs) for i in range(args.captures)}
        assert max(ids.values()) == 1, "a turn was stored twice"
        for s in store.sessions(NAMESPACE):
            assert [t.index for t in store.turns(NAMESPACE, s.session_id)] == list(range(s.turn_count)), s
        receipts = store.receipts(NAMESPACE)
        assert len(receipts) == expected, f"{len(receipts)} receipts for {expected} captures"
        jobs = store.jobs(NAMESPACE)
        # The jobs the queue calls returned (a call may fold into its session's pending job): each
        # one done, and no other job.
        queued = {j for r in results for j in r.get("jobs", ())}
        calls = args.procs * len(range(0, args.captures, JOB_EVERY))
        assert 0 < len(queued) <= calls, (len(queued), calls)
        expected_jobs = len(queued)
        statuses = Counter(j.status for j in jobs)
        assert {j.job_id for j in jobs} == queued and statuses == {"done": expected_jobs}, statuses
        runs = _extraction_runs(store)
        assert runs == {j.job_id: 1 for j in jobs}, "a job was extracted twice or not at all"
        live = [norm_content(m.content) for m in store.memories(NAMESPACE)]
        assert len(live) == len(set(live)), "a live memory is duplicated"
        worker_runs = sum(sum(r["ran"].values()) for r in results if "ran" in r)
        assert worker_runs == expected_jobs, f"workers report {worker_runs} runs for {expected_jobs} jobs"
        return {"turns": len(turns), "receipts": len(receipts), "jobs": len(jobs), "memories": len(live),
                "replays": sum(r.get("replays", 0) for r in results),
                "fenced": sum(r.get("fenced", 0) for r in results),
                "retried_jobs": sum(1 for j in jobs if j.attempts > 1)}
    finally:
        store.close()


def _extraction_runs(store: Any) -> dict[str, int]:
    sql = "SELECT job_id, COUNT(*) FROM extractions WHERE namespace = {} AND job_id IS NOT NULL GROUP BY job_id"
    if hasattr(store, "_rows"):
        rows = store._rows(sql.format("%s"), (NAMESPACE,))
    else:
        with store.read() as c:
            rows = c.execute(sql.format("?"), (NAMESPACE,)).fetchall()
    return {r[0]: r[1] for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    figures.add_option(parser)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--captures", type=int, default=500)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=os.environ.get("TORTOISE_TEST_PG_URL")
                        or "postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="2 x 30 captures and one worker, for the tests")
    args = parser.parse_args()
    if args.smoke:
        args.procs, args.captures, args.workers = 2, 30, 1

    from stub_model import StubModel

    results: dict[str, dict[str, Any]] = {}
    with StubModel(STUB_SCRIPT) as stub, tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            if backend == "sqlite":
                results["sqlite"] = run_backend("sqlite", str(Path(tmp) / "load.db"), args, stub.base_url)
            elif backend == "postgres":
                os.environ["TORTOISE_TEST_PG_URL"] = args.pg_url
                from pgtemp import pg_unavailable_reason, temp_database

                if (reason := pg_unavailable_reason()) is not None:
                    print(f"postgres: skipped: {reason}", file=sys.stderr)
                    continue
                with temp_database("tortoise_load") as url:
                    results["postgres"] = run_backend("postgres", url, args, stub.base_url)
            else:
                raise SystemExit(f"unknown backend {backend!r}; use sqlite and/or postgres")
        unanswered = len(stub.unanswered)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    n_caps = args.procs * args.captures
    print(f"load: {args.procs} capture processes x {args.captures} captures, {args.workers} extraction workers, "
          f"stub model on loopback; every turn and job accounted for (stub unanswered: {unanswered})")
    print(f"{'backend':10} {'captures/s':>11} {'jobs/s':>8} {'capture s':>10} {'drain s':>8} "
          f"{'turns':>6} {'jobs':>5} {'memories':>8} {'retried':>7} {'fenced':>6}")
    for name, f in results.items():
        print(f"{name:10} {n_caps / f['capture_wall']:11.0f} {f['jobs'] / f['total_wall']:8.1f} "
              f"{f['capture_wall']:10.1f} {f['total_wall']:8.1f} {f['turns']:6d} {f['jobs']:5d} "
              f"{f['memories']:8d} {f['retried_jobs']:7d} {f['fenced']:6d}")
    return 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
