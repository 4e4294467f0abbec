"""Extraction throughput on PostgreSQL with 1, 2, 4 and 8 worker processes, against a stub model of fixed latency.

For each worker count, a fresh database gets ``--jobs`` sessions of 6 turns each (captured without
extraction) and one queued job per session; then that many processes, each a ``Memory`` calling
``process_pending()`` until the queue is empty (what ``tortoise worker`` does), drain it through
litellm's real HTTP path to the local stub model (tests/stub_model.py, loopback only), every reply
held ``--delay`` seconds. Printed: jobs per second (from the common start to the last worker's
end), the scaling factor over one worker, and the check that every job ran exactly once (one
extraction per job, runs reported by the workers == jobs).

Usage::

    .venv/bin/python benchmarks/bench_workers.py [--workers 1 2 4 8] [--jobs 48] [--delay 0.1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_load import FACT, STUB_SCRIPT, _extraction_runs  # noqa: E402

import figures  # noqa: E402

NAMESPACE = "load"


def worker(url: str, api_base: str, ready: Any, out: Any) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from tortoise_sdk import Memory

    litellm.completion(model="openai/stub-model", api_base=api_base, api_key="sk-stub",
                       messages=[{"role": "user", "content": "warm up"}])  # litellm's first call costs seconds
    mem = Memory(url, namespace=NAMESPACE, model="openai/stub-model", api_base=api_base, api_key="sk-stub",
                 model_settings={"max_attempts": 2})
    ready.wait()
    t = time.perf_counter()
    ran: Counter[str] = Counter()
    while jobs := mem.process_pending(due_only=False):
        for j in jobs:
            ran[j.status] += 1
    out.put({"ran": dict(ran), "seconds": time.perf_counter() - t})
    mem.close()


def run(url: str, n_workers: int, n_jobs: int, api_base: str) -> dict[str, Any]:
    from tortoise_sdk import Memory

    mem = Memory(url, namespace=NAMESPACE)
    mem.capture_many([{"session_id": f"s{i}", "turns": [
        {"role": "user" if k % 2 == 0 else "assistant", "name": "Maya" if k % 2 == 0 else None,
         "content": f"{FACT}. Note {i}.{k} about river gardens and pottery."} for k in range(6)]}
        for i in range(n_jobs)], extract=False)
    for i in range(n_jobs):
        mem.store.enqueue_job(NAMESPACE, f"s{i}", None)
    ctx = mp.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Barrier(n_workers)
    procs = [ctx.Process(target=worker, args=(url, api_base, ready, out)) for _ in range(n_workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
    runs = _extraction_runs(mem.store)
    mem.close()
    reported = sum(sum(r["ran"].values()) for r in results)
    done = sum(r["ran"].get("done", 0) for r in results)
    return {"seconds": max(r["seconds"] for r in results), "reported": reported, "done": done,
            "jobs_run": len(runs), "run_twice": sum(n > 1 for n in runs.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--jobs", type=int, default=48)
    ap.add_argument("--delay", type=float, default=0.1, help="seconds the stub holds every reply")
    ap.add_argument("--smoke", action="store_true", help="6 jobs with 1 and 2 workers: checks the script")
    args = ap.parse_args()
    if args.smoke:
        args.workers, args.jobs = [1, 2], 6
    unaccounted = 0
    from pgtemp import require_postgres, temp_database
    from stub_model import StubModel

    require_postgres()
    print(f"{args.jobs} jobs, stub model delay {args.delay}s per call, PostgreSQL")
    print(f"{'workers':>7} | {'seconds':>7} {'jobs/s':>7} {'scaling':>7} | {'done':>4} {'reported':>8} "
          f"{'run twice':>9}")
    base = None
    with StubModel(STUB_SCRIPT, delay=args.delay) as stub:
        for n in args.workers:
            with temp_database("tortoise_workers") as url:
                r = run(url, n, args.jobs, stub.base_url)
            rate = args.jobs / r["seconds"]
            base = base or rate
            print(f"{n:>7} | {r['seconds']:>7.1f} {rate:>7.2f} {rate / base:>6.2f}x | {r['done']:>4} "
                  f"{r['reported']:>8} {r['run_twice']:>9}", flush=True)
            if r["run_twice"] or r["jobs_run"] != args.jobs or r["reported"] != args.jobs:
                print(f"  NOT ACCOUNTED FOR: {r}", flush=True)
                unaccounted += 1
    return 1 if unaccounted else 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
