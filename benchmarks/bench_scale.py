"""How ``context()`` and ``search()`` grow with one namespace's turns, and beside other namespaces, both engines.

Turns are the reflex latency benchmark's synthetic chat (``bench_reflex_latency.build``'s sentences,
sessions of 20), captured into namespace ``bench`` of one SQLite store in steps: 10,000 -> 100,000 ->
1,000,000 by default. The store at each size is kept under ``--cache`` (default
``/tmp/tortoise-bench-scale``) and reused by later runs. A PostgreSQL copy of each size
(``migrate-store``'s ``copy_store``) is kept as database ``tortoise_scale_<size>`` on
``$TORTOISE_TEST_PG_URL``'s server.

``--namespaces N`` also measures each size as N namespaces of that size (N x size turns): ``bench``
as captured and N - 1 copies of it (``bench-1`` ...), made inside each engine with ``INSERT ...
SELECT`` (namespace and ids rewritten) a chunk at a time and indexed and counted by the store's own
``index_turns``, as ``capture_many`` does after inserting a batch (SQLite: ``scale_<size>xN.db``;
PostgreSQL: ``tortoise_scale_<size>xN``, a ``TEMPLATE`` copy of the one-namespace database filled on
the server). Each build is checked (``check_tenants``: statistics equal, the same ``search()`` and
``context()`` answers but for ids), resumes where it stopped, and is kept.

Each query is answered in namespace ``bench`` (with N namespaces: the oldest, whose turns every
newest-first walk of the SQLite index reaches last) on each engine in turn, by this tree's code
and, with ``--against REV``, by git revision REV's code in the same loop. Printed per size, tenancy
and engine: p50/p95 of ``context()`` (no time budget) and ``search(k=5)``, blocks degraded at the
default 50 ms budget, bytes per turn (of the whole database); then the growth exponent of each p50
(``log(p50 ratio) / log(size ratio)``: 0 is flat, 1 linear), between sizes and, with N namespaces,
from the namespace alone to N x its size. ``--cold K`` then starts K fresh processes per mode on the
last PostgreSQL database and times each one's first ``context()`` against its later ones, with
concurrent reads (the first call opens the pool's second connection) and without.

Usage::

    .venv/bin/python benchmarks/bench_scale.py [--sizes 10000 100000 1000000] [--engines sqlite postgres]
        [--namespaces 10] [--queries 100] [--cold 10] [--against main]
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
PG_PREFIX = "tortoise_scale"  # a smoke run uses its own, and drops its databases
NAMESPACE = "bench"


def sqlite_store(cache: Path, size: int) -> Path:
    """The SQLite store of ``size`` turns, built from the largest smaller one cached (or from nothing)."""
    path = cache / f"scale_{size}.db"
    if path.exists():
        return path
    built = ((p.stem.split("_")[1], p) for p in cache.glob("scale_*.db"))  # not the many-namespace ones
    smaller = sorted((int(n), p) for n, p in built if n.isdigit() and int(n) < size)
    work = cache / f"building_{size}.db"
    if smaller:
        shutil.copyfile(smaller[-1][1], work)
    else:
        work.unlink(missing_ok=True)
    store = SQLiteStore(work, synchronous="OFF")
    mem = Memory(store=store, namespace=NAMESPACE)
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
    for side in ("-wal", "-shm"):
        Path(f"{work}{side}").unlink(missing_ok=True)
    print(f"  built {path.name} from {smaller[-1][0] if smaller else 0} turns in {time.perf_counter() - t0:.0f}s",
          flush=True)
    return path


def postgres_copy(sqlite_path: Path, size: int) -> str:
    """The URL of the PostgreSQL copy of the store of ``size`` turns, made once and kept."""
    import psycopg

    from tortoise_sdk.store.copy import copy_store

    name = f"{PG_PREFIX}_{size}"
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


# -- many namespaces: one captured, the others bulk copies inside the engine ------------------------

CHUNK = 100_000  # turns copied per transaction (the statistics of each chunk are counted as a capture does)


def tenant(k: int) -> str:
    """Namespace ``k`` of a many-tenant store: ``bench`` (captured through the SDK) and its copies."""
    return NAMESPACE if k == 0 else f"{NAMESPACE}-{k}"


def _suffix(k: int) -> str:
    return f"{k:02d}"  # appended to copied turn and receipt ids: still unique, still hex-like


def _resume_after(c, param: str, key: str, have: int) -> int:
    """The source row key after which copying into a namespace that already holds ``have`` turns resumes."""
    if have == 0:
        return 0
    return c.execute(f"SELECT {key} FROM turns WHERE namespace = {param} ORDER BY {key} LIMIT 1 OFFSET {param}",
                     (NAMESPACE, have - 1)).fetchone()[0]


def sqlite_tenants(cache: Path, size: int, n: int) -> Path:
    """The SQLite store of ``n`` namespaces of ``size`` turns: the captured one and ``n - 1`` copies.

    Each copy is made in the file with ``INSERT ... SELECT`` (namespace and ids rewritten), a chunk
    of turns a transaction; the store's own ``index_turns`` then indexes the chunk and counts it in
    the namespace's statistics, as ``capture_many`` does after inserting a batch. A build that stops
    resumes where it stopped; ``check_tenants`` verifies the result.
    """
    path = cache / f"scale_{size}x{n}.db"
    if path.exists():
        return path
    work = cache / f"building_{size}x{n}.db"
    if not work.exists():
        shutil.copyfile(sqlite_store(cache, size), work)
    store = SQLiteStore(work, synchronous="OFF", timeout_s=None)  # a chunk can outlast the default bound
    t0 = time.perf_counter()
    for k in range(1, n):
        ns, sfx = tenant(k), _suffix(k)
        while True:
            def step(c: sqlite3.Connection) -> int:
                row = c.execute("SELECT n_turns FROM rank_namespaces WHERE namespace = ?", (ns,)).fetchone()
                have = row[0] if row else 0
                if have >= size:
                    return 0
                if have == 0:
                    c.execute("INSERT INTO sessions (namespace, session_id, session_date, created_at, updated_at)"
                              " SELECT ?, session_id, session_date, created_at, updated_at FROM sessions"
                              " WHERE namespace = ? ORDER BY rowid", (ns, NAMESPACE))
                    c.execute(
                        "INSERT INTO receipts (receipt_id, namespace, session_id, idempotency_key, request_hash, body,"
                        " created_at) SELECT receipt_id || ?1, ?2, session_id, idempotency_key, request_hash,"
                        " json_set(body, '$.receipt_id', receipt_id || ?1, '$.namespace', ?2, '$.turn_ids',"
                        "  json((SELECT json_group_array(value || ?1) FROM json_each(body, '$.turn_ids'))))," 
                        " created_at FROM receipts WHERE namespace = ?3 ORDER BY rowid", (sfx, ns, NAMESPACE))
                after = _resume_after(c, "?", "rowid", have)
                last = c.execute("SELECT COALESCE(MAX(rowid), 0) FROM turns").fetchone()[0]
                got = c.execute(
                    "INSERT INTO turns (turn_id, namespace, session_id, idx, role, name, content, external_id,"
                    " timestamp, metadata, content_hash, receipt_id, created_at)"
                    " SELECT turn_id || ?1, ?2, session_id, idx, role, name, content, external_id, timestamp,"
                    " metadata, content_hash, receipt_id || ?1, created_at FROM turns"
                    " WHERE namespace = ?3 AND rowid > ?4 ORDER BY rowid LIMIT ?5",
                    (sfx, ns, NAMESPACE, after, min(CHUNK, size - have))).rowcount
                store.index_turns(c, ns, last)
                return got

            if not store.transaction(step):
                break
        print(f"  copied namespace {ns}: {k + 1} of {n} filled, {time.perf_counter() - t0:.0f}s", flush=True)
    store.close()
    with sqlite3.connect(work) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    work.rename(path)
    for side in ("-wal", "-shm"):
        Path(f"{work}{side}").unlink(missing_ok=True)
    print(f"  built {path.name} ({n} x {size:,} turns) in {time.perf_counter() - t0:.0f}s", flush=True)
    return path


def postgres_tenants(cache: Path, size: int, n: int, workers: int = 3) -> str:
    """The PostgreSQL copy of ``sqlite_tenants``' store, made on the server from the one-namespace copy.

    The database is a ``TEMPLATE`` copy of ``tortoise_scale_<size>``; each other namespace is filled
    with ``INSERT ... SELECT`` on the server (the full-text column is generated as a capture's is), a
    chunk a transaction, and counted in the namespace's statistics by the store's own
    ``index_turns``; ``workers`` namespaces at a time. The turn GIN index is dropped for the fill
    and built again after it, with the migration's definition (one bulk build instead of millions
    of pending-list inserts). Resumable; ``check_tenants`` verifies it.
    """
    import psycopg
    from concurrent.futures import ThreadPoolExecutor

    from tortoise_sdk.store.postgres import PostgresStore

    single = postgres_copy(sqlite_store(cache, size), size)
    name = f"{PG_PREFIX}_{size}x{n}"
    url = PG_BASE.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{single.rsplit("/", 1)[1]}"')
    with psycopg.connect(url, autocommit=True) as conn:
        have = dict(conn.execute("SELECT namespace, n_turns FROM rank_namespaces").fetchall())
        indexed = conn.execute("SELECT to_regclass('turns_fts')").fetchone()[0] is not None
    todo = [k for k in range(1, n) if have.get(tenant(k), 0) < size]
    if not todo and indexed:
        return url
    t0 = time.perf_counter()
    if todo:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP INDEX IF EXISTS turns_fts")
        store = PostgresStore(url, timeout_s=None, max_size=workers + 1)

        def fill(k: int) -> None:
            ns, sfx = tenant(k), _suffix(k)

            def step(c: psycopg.Connection) -> int:
                row = c.execute("SELECT n_turns FROM rank_namespaces WHERE namespace = %s", (ns,)).fetchone()
                have = row[0] if row else 0
                if have >= size:
                    return 0
                if have == 0:
                    c.execute("INSERT INTO sessions (namespace, session_id, session_date, created_at, updated_at)"
                              " SELECT %s, session_id, session_date, created_at, updated_at FROM sessions"
                              " WHERE namespace = %s", (ns, NAMESPACE))
                    c.execute(
                        "INSERT INTO receipts (receipt_id, namespace, session_id, idempotency_key, request_hash, body,"
                        " created_at) SELECT receipt_id || %(sfx)s, %(ns)s, session_id, idempotency_key, request_hash,"
                        " jsonb_set(jsonb_set(jsonb_set(body::jsonb, '{receipt_id}', to_jsonb(receipt_id || %(sfx)s)),"
                        "  '{namespace}', to_jsonb(%(ns)s::text)), '{turn_ids}', COALESCE((SELECT jsonb_agg(v || %(sfx)s"
                        "  ORDER BY o) FROM jsonb_array_elements_text(body::jsonb -> 'turn_ids') WITH ORDINALITY"
                        "  AS x (v, o)), '[]'::jsonb))::text, created_at FROM receipts WHERE namespace = %(src)s",
                        {"sfx": sfx, "ns": ns, "src": NAMESPACE})
                after = _resume_after(c, "%s", "id", have)
                ids = [r[0] for r in c.execute(
                    "INSERT INTO turns (turn_id, namespace, session_id, idx, role, name, content, external_id,"
                    " timestamp, metadata, content_hash, receipt_id, created_at)"
                    " SELECT turn_id || %(sfx)s, %(ns)s, session_id, idx, role, name, content, external_id, timestamp,"
                    " metadata, content_hash, receipt_id || %(sfx)s, created_at FROM turns"
                    " WHERE namespace = %(src)s AND id > %(after)s ORDER BY id LIMIT %(n)s RETURNING turn_id",
                    {"sfx": sfx, "ns": ns, "src": NAMESPACE, "after": after, "n": min(CHUNK, size - have)})]
                store.index_turns(c, ns, ids)
                return len(ids)

            while True:
                t1 = time.perf_counter()
                got = store.transaction(step)
                if not got:
                    break
                print(f"    {ns}: +{got:,} turns in {time.perf_counter() - t1:.0f}s", flush=True)
            print(f"  copied namespace {ns} at {time.perf_counter() - t0:.0f}s", flush=True)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(fill, todo))
        store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        t1 = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("CREATE INDEX IF NOT EXISTS turns_fts ON turns USING GIN (fts)")  # as the migration made it
        print(f"  built the turn GIN index in {time.perf_counter() - t1:.0f}s", flush=True)
        conn.execute("VACUUM ANALYZE")
    print(f"  built {name} ({n} x {size:,} turns) in {time.perf_counter() - t0:.0f}s", flush=True)
    return url

def check_tenants(engine: str, target: str, n: int, qs: list[str]) -> str:
    """That every copied namespace has the captured one's statistics, and the last one its answers.

    Statistics: turn and token totals and every term's counts, equal. Answers: ``search(k=5)`` and
    ``context()``'s pointers (no time budget) for each query, the same turns at the same scores (a
    copy's ids are the original's with its suffix). Raises AssertionError on the first difference.
    """
    if engine == "sqlite":
        conn = sqlite3.connect(target)
        ns_id = {ns: i for i, ns in conn.execute("SELECT ns_id, namespace FROM rank_namespaces")}
        totals = lambda ns: conn.execute("SELECT n_turns, n_tokens FROM rank_namespaces WHERE namespace = ?",
                                         (ns,)).fetchone()
        terms = lambda ns: set(conn.execute("SELECT term, n_turns, n_content, n_name FROM rank_terms WHERE ns_id = ?",
                                            (ns_id[ns],)))
    else:
        import psycopg

        conn = psycopg.connect(target)
        totals = lambda ns: conn.execute("SELECT n_turns, n_tokens FROM rank_namespaces WHERE namespace = %s",
                                         (ns,)).fetchone()
        terms = lambda ns: set(conn.execute("SELECT term, n_turns, n_content, n_name FROM rank_terms"
                                            " WHERE namespace = %s", (ns,)))
    want_totals, want_terms = tuple(totals(NAMESPACE)), terms(NAMESPACE)
    for k in range(1, n):
        assert tuple(totals(tenant(k))) == want_totals, (tenant(k), totals(tenant(k)), want_totals)
        assert terms(tenant(k)) == want_terms, f"{tenant(k)}: term statistics differ from {NAMESPACE}'s"
    conn.close()
    last, sfx = tenant(n - 1), _suffix(n - 1)
    a, b = Memory(target, namespace=NAMESPACE), Memory(target, namespace=last)
    try:
        for q in qs:
            ha, hb = a.search(q, k=5), b.search(q, k=5)
            assert [(h.turn_id + sfx, h.session_id, h.index, h.content, round(h.score, 9)) for h in ha] == \
                [(h.turn_id, h.session_id, h.index, h.content, round(h.score, 9)) for h in hb], f"search({q!r}) differs"
            window = [{"role": "user", "content": q}]
            ca, cb = a.context(window, budget=5, time_budget_ms=None), b.context(window, budget=5, time_budget_ms=None)
            # The same turns at the same scores (a synopsis can be cut shorter: the longer ids take tokens).
            assert [(p.id + sfx, p.kind, round(p.score, 9)) for p in ca.pointers] == \
                [(p.id, p.kind, round(p.score, 9)) for p in cb.pointers], f"context({q!r}) differs"
    finally:
        a.close()
        b.close()
    return (f"{n - 1} copies: statistics equal to {NAMESPACE}'s ({want_totals[0]:,} turns, {want_totals[1]:,} tokens,"
            f" {len(want_terms):,} terms); {last}: same search() and context() as {NAMESPACE} for {len(qs)} queries")


_COLD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from tortoise_sdk import Memory
url, mode, qs = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
t1 = time.perf_counter()
mem = Memory(url, namespace="bench")
mem.store.concurrent_reads = mode == "on"
t2 = time.perf_counter()
rows = []
for q in qs:
    t = time.perf_counter()
    block = mem.context([{"role": "user", "content": q}], budget=5, time_budget_ms=None)  # its whole cost
    rows.append(((time.perf_counter() - t) * 1000, bool(block.pointers)))
    if len(rows) == 1:
        pooled = mem.store._pool.get_stats().get("pool_size")
print(json.dumps({"import_ms": (t1 - t0) * 1000, "open_ms": (t2 - t1) * 1000, "rows": rows, "pooled": pooled}))
mem.close()
"""


def cold_first_context(url: str, k: int, qs: list[str]) -> None:
    """``k`` fresh processes per mode time their first ``context()`` against their later ones.

    With concurrent reads (``Store.concurrent_reads``, PostgreSQL's default) the first call also
    opens the pool's second connection and the reader threads; with them off, the call reads on
    the one connection the store opened. Each process asks the same 11 queries, the first one
    rotating, with no time budget (the whole cost is timed); modes alternate process by process.
    """
    import json
    import statistics
    import subprocess

    got: dict[str, list[dict]] = {"on": [], "off": []}
    for i in range(k):
        for mode in ("on", "off") if i % 2 else ("off", "on"):
            ask = qs[i % len(qs):] + qs[:i % len(qs)]
            out = subprocess.run([sys.executable, "-c", _COLD, str(ROOT), url, mode, json.dumps(ask[:11])],
                                 check=True, capture_output=True, text=True).stdout
            got[mode].append(json.loads(out))
    print(f"\ncold processes on PostgreSQL ({url.rsplit('/', 1)[-1]}), {k} per mode, no time budget: median ms"
          " (and how many ran past the default 50 ms budget, of all)")
    print(f"{'concurrent reads':>16} | {'open':>6} | {'1st context()':>13} {'>50ms':>7} | {'2nd':>6} | "
          f"{'3rd-11th':>8} {'>50ms':>7} | connections after the 1st")
    for mode, runs in got.items():
        first = [r["rows"][0][0] for r in runs]
        second = [r["rows"][1][0] for r in runs]
        later = [ms for r in runs for ms, _ in r["rows"][2:]]
        print(f"{mode:>16} | {statistics.median(r['open_ms'] for r in runs):>6.1f} | "
              f"{statistics.median(first):>13.1f} {sum(ms > 50 for ms in first):>3}/{len(first):<3} | "
              f"{statistics.median(second):>6.1f} | {statistics.median(later):>8.1f} "
              f"{sum(ms > 50 for ms in later):>3}/{len(later):<3} | {sorted({r['pooled'] for r in runs})}")

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
    ap.add_argument("--namespaces", type=int, default=1, metavar="N",
                    help="also each size as N namespaces of that size (one captured, N-1 bulk copies): N x size turns")
    ap.add_argument("--engines", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--cold", type=int, default=0, metavar="K",
                    help="on PostgreSQL, K fresh processes each time their first context() against later ones")
    ap.add_argument("--against", metavar="REV", help="time git revision REV's code beside this tree's")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tortoise-bench-scale")
    ap.add_argument("--smoke", action="store_true",
                    help="300 and 1,200 turns, also as 3 namespaces, 10 queries, 2 cold processes, a fresh cache")
    args = ap.parse_args()
    if args.smoke:
        global PG_PREFIX
        args.sizes, args.queries, args.namespaces, args.cold = [300, 1_200], 10, 3, 2
        args.cache = Path(tempfile.mkdtemp(prefix="bench-scale-smoke-"))
        PG_PREFIX = f"tortoise_scale_smoke_{os.getpid()}"
        try:
            return run(args)
        finally:
            shutil.rmtree(args.cache, ignore_errors=True)
            if "postgres" in args.engines:
                import psycopg

                with psycopg.connect(PG_BASE, autocommit=True) as conn:
                    for (db,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                              (PG_PREFIX + "\\_%",)).fetchall():
                        conn.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
    return run(args)


def run(args: argparse.Namespace) -> int:
    args.cache.mkdir(parents=True, exist_ok=True)
    qs = queries(args.queries)
    tenancies = [1] if args.namespaces <= 1 else [1, args.namespaces]
    p50: dict[tuple[str, str, str, str, int], list[tuple[int, float]]] = {}
    cold_targets: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = _tree_of(args.against, Path(tmp) / "base")
        print(f"{args.queries} queries; with N namespaces, each holds the size and two are queried: {NAMESPACE} (the"
              " oldest, captured) and the newest copy")
        print(f"{'turns':>10} {'namespaces':>10} {'queried':>8} {'engine':>8} {'code':>10} | {'context p50':>11} "
              f"{'p95':>8} {'degraded@50ms':>13} | {'search p50':>10} {'p95':>8} | {'bytes/turn':>10}")
        for size in sorted(args.sizes):
            for n in tenancies:
                path = sqlite_store(args.cache, size) if n == 1 else sqlite_tenants(args.cache, size, n)
                for engine in args.engines:
                    if engine == "sqlite":
                        target = str(path)
                    else:
                        target = postgres_copy(path, size) if n == 1 else postgres_tenants(args.cache, size, n)
                        cold_targets.append(target)
                    if n > 1:
                        print(f"  {engine} check: {check_tenants(engine, target, n, qs[:10])}", flush=True)
                    per_turn = bytes_per_turn(engine, target, size * n)
                    for ns in [NAMESPACE] if n == 1 else [NAMESPACE, tenant(n - 1)]:
                        got = time_trees(target, trees, qs, namespace=ns)
                        for code, rows in got.items():
                            lat, search = [r["ms"] for r in rows], [r["search_ms"] for r in rows]
                            degraded = sum(r["degraded"] is not None for r in rows)
                            print(f"{size * n:>10} {n:>10} {ns:>8} {engine:>8} {code:>10} | {pct(lat, 50):>9.2f}ms "
                                  f"{pct(lat, 95):>6.2f}ms {degraded:>13} | {pct(search, 50):>8.2f}ms "
                                  f"{pct(search, 95):>6.2f}ms | {per_turn:>10.0f}", flush=True)
                            key = (engine, code, ns if n > 1 and ns != NAMESPACE else "", n)
                            p50.setdefault((*key[:2], "context", *key[2:]), []).append((size * n, pct(lat, 50)))
                            p50.setdefault((*key[:2], "search", *key[2:]), []).append((size * n, pct(search, 50)))
    print("\ngrowth exponent of p50 (log of the p50 ratio over log of the total turns' ratio):")
    for (engine, code, what, ns, n), points in p50.items():
        label = f"{engine:>8} {code:>10} {what:>8}"
        if n > 1:  # the namespace alone, then beside n - 1 others of its size
            alone = dict(p50[(engine, code, what, "", 1)])
            steps = [f"{t // n:,} alone->{t:,} in {n} namespaces{' (' + ns + ' queried)' if ns else ''}: "
                     f"{math.log(tt / alone[t // n]) / math.log(n):.2f} (p50 {tt / alone[t // n]:.2f}x)"
                     for t, tt in points]
            print(f"  {label}  " + "; ".join(steps))
        else:
            steps = [f"{a:,}->{b:,}: {math.log(tb / ta) / math.log(b / a):.2f}"
                     for (a, ta), (b, tb) in zip(points, points[1:])]
            print(f"  {label}  " + ("; ".join(steps) or "(one size)"))
    if args.cold and cold_targets:
        cold_first_context(cold_targets[-1], args.cold, qs)
    return 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
