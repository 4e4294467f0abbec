"""Memory search latency in a namespace beside a large other tenant, beside the engine-wide baseline.

``search_memories`` (S3 priors, retraction candidates) counts the namespace's memories at query
time: N, total length, and each phrase's matching rows. This prints, for namespace B holding
--memories memories, the latency of its searches (p50/p95 over the queries): alone in the store,
then after tenant A adds --tenant memories made of the same words, and on SQLite also FTS5's own
``bm25()`` (the engine-wide ranking this replaced) on the same store. B's results must be equal
before and after A; the run checks it.

Run: .venv/bin/python benchmarks/bench_memory_search.py [--memories 2000] [--tenant 20000] [--pg URL]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import figures
from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.search import fts5_query
from tortoise_sdk.store import open_store
from tortoise_sdk.store.plan import ExtractionPlan, ItemPlan, SourcePlan

WORDS = ("kayak trip lake paddle rain tent camp river dog Biscuit beagle howls station bike commute work "
         "pasta tea coffee sister birthday party guitar lesson marathon training doctor visit office move "
         "apartment garden tomatoes book club novel flight Lisbon hotel budget savings car repair").split()
QUERIES = ["kayak trip", "dog howls at the station", "guitar lesson", "flight to Lisbon hotel", "garden tomatoes",
           "marathon training doctor", "birthday party for my sister", "car repair budget"]


def fill(store, ns: str, n: int, rng: random.Random, skew: str = "") -> None:
    r = store.capture(ns, prepare_capture("s1", [{"role": "user", "content": "notes"}], session_date=None,
                                          idempotency_key=None, max_turns=10))
    t0 = r.turn_ids[0]
    for start in range(0, n, 500):
        items = [ItemPlan("point", f"{skew} {' '.join(rng.choices(WORDS, k=rng.randint(5, 16)))} #{i}".strip(),
                          search_keys=tuple(rng.sample(WORDS, 2)), sources=(SourcePlan(t0, None),))
                 for i in range(start, min(n, start + 500))]
        plan = ExtractionPlan(session_id="s1", extraction_id=f"x_{uuid.uuid4().hex[:8]}",
                              valid_at=datetime(2024, 1, 1, tzinfo=timezone.utc), entities=[], items=items,
                              retractions=[], receipt=None)
        store.write_extraction(ns, plan, finalize=lambda res: ExtractionReport(status="ok"))


def timed(fn, rounds: int = 5) -> tuple[float, float]:
    ms = []
    for _ in range(rounds):
        for q in QUERIES:
            t = time.perf_counter()
            fn(q)
            ms.append((time.perf_counter() - t) * 1000)
    return statistics.median(ms), statistics.quantiles(ms, n=100)[94]


def run(label: str, url: str, args) -> None:
    store = open_store(url)
    ns = f"b_{uuid.uuid4().hex[:8]}"
    fill(store, ns, args.memories, random.Random(1))

    def ours(q):
        return [(m.id, s) for m, s in store.search_memories(ns, fts5_query(q), k=10)]

    before = [ours(q) for q in QUERIES]
    alone = timed(ours)
    fill(store, ns + "_a", args.tenant, random.Random(2), skew="kayak trip")
    assert [ours(q) for q in QUERIES] == before, "tenant A changed B's results"
    beside = timed(ours)
    print(f"{label}: B={args.memories} memories, A={args.tenant}; search_memories k=10 p50/p95 ms")
    print(f"  per-namespace, B alone      {alone[0]:7.2f} / {alone[1]:7.2f}")
    print(f"  per-namespace, beside A     {beside[0]:7.2f} / {beside[1]:7.2f}   (B's results unchanged)")
    if label == "sqlite":
        def engine_wide(q):
            with store.read() as c:
                return c.execute(
                    "SELECT m.rowid, bm25(memories_fts, 1.0, 0.8, 0.6) AS rank FROM memories_fts"
                    " JOIN memories m ON m.rowid = memories_fts.rowid"
                    " WHERE memories_fts MATCH ? AND m.namespace = ? AND m.status = 'live'"
                    " ORDER BY rank, m.rowid LIMIT 10", (fts5_query(q), ns)).fetchall()
        base = timed(engine_wide)
        print(f"  baseline FTS5 bm25() (engine-wide), beside A {base[0]:7.2f} / {base[1]:7.2f}")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--memories", type=int, default=2_000)
    ap.add_argument("--tenant", type=int, default=20_000)
    ap.add_argument("--pg", help="a PostgreSQL URL for a throwaway database (omit to run SQLite only)")
    ap.add_argument("--smoke", action="store_true", help="200 memories beside 1,000 of another tenant, for the tests")
    args = ap.parse_args()
    if args.smoke:
        args.memories, args.tenant = 200, 1_000
    with tempfile.TemporaryDirectory() as d:
        run("sqlite", str(Path(d) / "bench.db"), args)
    if args.pg:
        run("postgres", args.pg, args)


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
