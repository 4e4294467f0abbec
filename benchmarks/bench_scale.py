"""How ``context()`` and ``search()`` grow with one namespace's turns: 10,000 -> 100,000 -> 1,000,000, both engines.

Turns are the reflex latency benchmark's synthetic chat (``bench_reflex_latency.build``'s sentences,
sessions of 20), captured into one SQLite store in steps; the store at each size is kept under
``--cache`` (default ``/tmp/tortoise-bench-scale``) and reused by later runs. A PostgreSQL copy of
each size (``migrate-store``'s ``copy_store``) is kept as database ``tortoise_scale_<size>`` on
``$TORTOISE_TEST_PG_URL``'s server. Each query is answered on each engine in turn, by this tree's
code and, with ``--against REV``, by git revision REV's code in the same loop. Printed per size
and engine: p50/p95 of ``context()`` (no time budget) and ``search(k=5)``, blocks degraded at the
default 50 ms budget, bytes per turn; then the growth exponent of each p50 between sizes
(``log(p50 ratio) / log(size ratio)``: 0 is flat, 1 linear).

Usage::

    .venv/bin/python benchmarks/bench_scale.py [--sizes 10000 100000 1000000] [--engines sqlite postgres]
        [--queries 100] [--against main]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_reflex_latency import _sentence, _tree_of, pct, queries, time_trees  # noqa: E402

import figures  # noqa: E402
from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.store.sqlite import SQLiteStore  # noqa: E402

PG_BASE = os.environ.get("TORTOISE_TEST_PG_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
VOCAB = [f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po") for b in range(300)]
BATCH = 500  # sessions per capture_many


def sqlite_store(cache: Path, size: int) -> Path:
    """The SQLite store of ``size`` turns, built from the largest smaller one cached (or from nothing)."""
    path = cache / f"scale_{size}.db"
    if path.exists():
        return path
    smaller = sorted((int(p.stem.split("_")[1]), p) for p in cache.glob("scale_*.db") if int(p.stem.split("_")[1]) < size)
    work = cache / f"building_{size}.db"
    if smaller:
        shutil.copyfile(smaller[-1][1], work)
    else:
        work.unlink(missing_ok=True)
    store = SQLiteStore(work, synchronous="OFF")
    mem = Memory(store=store, namespace="bench")
    have = sum(s.turn_count for s in mem.sessions())
    rng = random.Random(have + 7)
    t0 = time.perf_counter()
    s = have // 20
    while have < size:
        batch = []
        for _ in range(min(BATCH, (size - have) // 20)):
            batch.append({"session_id": f"s{s}", "date": f"2024-{1 + s % 12:02d}-{1 + s % 28:02d}T10:00:00",
                          "turns": [{"role": "user" if i % 2 == 0 else "assistant",
                                     "name": "Maya" if i % 2 == 0 else None, "content": _sentence(rng, VOCAB)}
                                    for i in range(20)]})
            s += 1
        mem.capture_many(batch, extract=False)
        have += 20 * len(batch)
    mem.close()
    with sqlite3.connect(work) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    work.rename(path)
    print(f"  built {path.name} from {smaller[-1][0] if smaller else 0} turns in {time.perf_counter() - t0:.0f}s",
          flush=True)
    return path


def postgres_copy(sqlite_path: Path, size: int) -> str:
    """The URL of the PostgreSQL copy of the store of ``size`` turns, made once and kept."""
    import psycopg

    from tortoise_sdk.store.copy import copy_store

    name = f"tortoise_scale_{size}"
    url = PG_BASE.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            try:
                with psycopg.connect(url) as c:
                    if c.execute("SELECT COALESCE(SUM(n_turns), 0) FROM rank_namespaces").fetchone()[0] == size:
                        return url
            except psycopg.Error:
                pass
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    t0 = time.perf_counter()
    copy_store(str(sqlite_path), url)
    print(f"  copied {size} turns to PostgreSQL in {time.perf_counter() - t0:.0f}s", flush=True)
    return url


def bytes_per_turn(engine: str, target: str, size: int) -> float:
    if engine == "sqlite":
        return Path(target).stat().st_size / size
    import psycopg

    with psycopg.connect(target) as c:
        return c.execute("SELECT pg_database_size(current_database())").fetchone()[0] / size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--engines", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--against", metavar="REV", help="time git revision REV's code beside this tree's")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tortoise-bench-scale")
    ap.add_argument("--smoke", action="store_true", help="300 and 1,200 turns, 10 queries, a fresh cache: checks the script")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.queries = [300, 1_200], 10
        args.cache = Path(tempfile.mkdtemp(prefix="bench-scale-smoke-"))
    args.cache.mkdir(parents=True, exist_ok=True)
    qs = queries(args.queries)
    p50: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = _tree_of(args.against, Path(tmp) / "base")
        print(f"{'turns':>9} {'engine':>8} {'code':>10} | {'context p50':>11} {'p95':>8} {'degraded@50ms':>13} | "
              f"{'search p50':>10} {'p95':>8} | {'bytes/turn':>10}")
        for size in sorted(args.sizes):
            path = sqlite_store(args.cache, size)
            for engine in args.engines:
                target = str(path) if engine == "sqlite" else postgres_copy(path, size)
                got = time_trees(target, trees, qs)
                per_turn = bytes_per_turn(engine, target, size)
                for code, rows in got.items():
                    lat, search = [r["ms"] for r in rows], [r["search_ms"] for r in rows]
                    degraded = sum(r["degraded"] is not None for r in rows)
                    print(f"{size:>9} {engine:>8} {code:>10} | {pct(lat, 50):>9.2f}ms {pct(lat, 95):>6.2f}ms "
                          f"{degraded:>13} | {pct(search, 50):>8.2f}ms {pct(search, 95):>6.2f}ms | {per_turn:>10.0f}",
                          flush=True)
                    p50.setdefault((engine, code, "context"), []).append((size, pct(lat, 50)))
                    p50.setdefault((engine, code, "search"), []).append((size, pct(search, 50)))
    print("\ngrowth exponent of p50 (log of the p50 ratio over log of the size ratio):")
    for (engine, code, what), points in p50.items():
        steps = [f"{a:,}->{b:,}: {math.log(tb / ta) / math.log(b / a):.2f}"
                 for (a, ta), (b, tb) in zip(points, points[1:])]
        print(f"  {engine:>8} {code:>10} {what:>8}  " + ("; ".join(steps) or "(one size)"))
    return 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
