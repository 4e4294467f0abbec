"""Latency of ``context()`` and ``search()`` with vectors at scale: words alone, fused with the exact
in-memory search, fused with sqlite-vec, beside another revision's code in the same run.

One SQLite store of ``--items`` turns (default 100,000; LoCoMo's turns repeated, each tagged with its
number), every turn with a 384-dimension vector from a hashing toy (in-process, not a model: this
measures search and fusion, not a model's quality or an embedding request's latency); with ``--rev``,
that code builds its own store of the same turns and vectors before its first round, untimed (an older
code cannot open a store whose schema a newer one migrated). Then, for
each code (this tree, and ``--rev`` alternating with it through ``revision.py``), in a fresh process:

- ``words``: no embedder;
- ``fused``: the code's own vector search (this tree: the vectors held in memory while current, else
  sqlite-vec while they load in the background, with the ``[vectors]`` extra; a code without it:
  exact in memory, loaded when they changed);
- ``engine only``: this tree, sqlite-vec on every call (nothing held in memory);
- ``exact``: this tree with sqlite-vec turned off, the exact search over the vectors held in memory;
- ``... after a write``: one vector is written before each query (as the background embedding does
  while a session goes on), so the vectors held in memory are stale each time.

Each query is a LoCoMo question (a fresh one each time, so its vector is computed, by the toy);
``context()`` runs without a time budget, so the figures are whole run times. p50/p95 in ms.

Usage::

    TORTOISE_TEST_SHARED_DATA=../shared/data .venv/bin/python benchmarks/bench_vector_search.py \\
        [--items 100000] [--queries 40] [--rev main --rounds 2] [--record]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the LoCoMo loader only; tortoise_sdk comes from PYTHONPATH or the install
sys.path.insert(0, str(ROOT / "benchmarks"))

from locomo import load_questions, load_sessions, locomo_files  # noqa: E402
import figures  # noqa: E402
from toy_vectors import hashing  # noqa: E402
from revision import add_options, alternate  # noqa: E402

MODES = ("words", "fused", "engine only", "exact", "fused after a write", "engine only after a write",
         "exact after a write")


def corpus(queries: int) -> tuple[list[str], list[str]]:
    files = locomo_files()
    texts = [t["content"] for p in files for s in load_sessions(p) for t in s["turns"]] if files else []
    if not texts:
        texts = [f"turn {i} about topic {i % 97} and thing {i % 89}" for i in range(1000)]
    questions = [q.question for p in files for q in load_questions(p)] or texts
    return texts, questions[:queries]


def store_for(work: str) -> str:
    """This process's code's own store in ``work``: each code builds its store (the same turns and vectors), since
    an older code cannot open a store whose schema a newer one migrated."""
    import hashlib

    import tortoise_sdk

    return str(Path(work) / f"big-{hashlib.sha1(str(Path(tortoise_sdk.__file__).parent).encode()).hexdigest()[:10]}.db")


def build(db: str, items: int) -> float:
    from tortoise_sdk import Memory

    texts, _ = corpus(0)
    t0 = time.perf_counter()
    with Memory(db, namespace="big", embedder=hashing) as mem:
        sessions = [{"session_id": f"s{i // 50}", "turns": [
            {"role": "user" if j % 2 == 0 else "assistant", "content": f"{texts[(i + j) % len(texts)]} (#{i + j})"}
            for j in range(50)]} for i in range(0, items, 50)]
        mem.capture_many(sessions, chunk_size=200)
        # Straight into the store, in large transactions: the build is not what this bench measures
        # (embed_pending's batches of 64, each its own transaction, would dominate its time).
        pending = mem.store.pending_embeddings("big", hashing.model_name, items + 1)
        for start in range(0, len(pending), 5000):
            chunk = pending[start:start + 5000]
            mem.store.save_vectors("big", hashing.model_name, [
                (kind, item_id, v) for (kind, item_id, _), v in zip(chunk, hashing([t for _, _, t in chunk]))])
    return time.perf_counter() - t0


def measure(db: str, queries: int, write_queries: int) -> dict[str, float]:
    """One code's figures (this process imports whichever ``tortoise_sdk`` is first on the path)."""
    import tortoise_sdk
    from tortoise_sdk import Memory

    _, questions = corpus(queries)
    plain = Memory(db, namespace="big")
    fused = Memory(db, namespace="big", embedder=hashing)
    exact = engine = None
    try:
        from tortoise_sdk.store.sqlite.vec import SqliteVec
    except ImportError:  # a code without the engine search: its fused search is the exact one
        SqliteVec = None  # noqa: N806
    if SqliteVec is not None:
        exact = Memory(db, namespace="big", embedder=hashing)
        exact.store._vec = SqliteVec(":memory:")  # unavailable: the exact search in memory answers
        engine = Memory(db, namespace="big", embedder=hashing)
        engine._semantic_search().keep_in_memory = False
    arms = {"words": plain, "fused": fused, "engine only": engine, "exact": exact}
    writer = Memory(db, namespace="big")
    some_turn = writer.turns("s0")[0].turn_id
    out: dict[str, float] = {}
    times: dict[str, dict[str, list[float]]] = {m: {"context": [], "search": []} for m in MODES}
    for mem in (fused, exact, engine):  # the in-memory index is loaded before timing starts
        if mem is not None:
            mem.context([{"role": "user", "content": "warm up"}], time_budget_ms=None)
            semantic = mem._semantic_search()
            if hasattr(semantic, "loaded"):
                semantic.loaded()
    for i, q in enumerate(questions):
        for name, mem in arms.items():
            if mem is None:
                continue
            t = time.perf_counter()
            mem.context([{"role": "user", "content": f"{q} ({name} {i})"}], time_budget_ms=None)
            times[name]["context"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            mem.search(f"{q} ({name} {i} s)", k=10)
            times[name]["search"].append((time.perf_counter() - t) * 1000)
    for i, q in enumerate(questions[:write_queries]):
        for name, mem in (("fused after a write", fused), ("engine only after a write", engine),
                          ("exact after a write", exact)):
            if mem is None:
                continue
            writer.store.save_vectors("big", hashing.model_name, [("turn", some_turn, hashing([f"{q} {i}"])[0])])
            t = time.perf_counter()
            mem.context([{"role": "user", "content": f"{q} ({name} {i})"}], time_budget_ms=None)
            times[name]["context"].append((time.perf_counter() - t) * 1000)
    for mode, by in times.items():
        for call, values in by.items():
            if values:
                values.sort()
                out[f"{mode}|{call}|p50"] = statistics.median(values)
                out[f"{mode}|{call}|p95"] = values[max(0, int(round(0.95 * (len(values) - 1))))]
    path = fused.vector_stats()["vector_search"] if hasattr(fused, "vector_stats") else "?"
    print(f"{tortoise_sdk.__file__}: fused search {path}", file=sys.stderr)
    for m in (plain, fused, writer, *([exact, engine] if exact else [])):
        m.close()
    return out


def show(label: str, figures: dict[str, float]) -> None:
    print(f"  {label}")
    for mode in MODES:
        row = []
        for call in ("context", "search"):
            p50, p95 = figures.get(f"{mode}|{call}|p50"), figures.get(f"{mode}|{call}|p95")
            if p50 is not None and p95 is not None:
                row.append(f"{call}() p50 {p50:7.1f} p95 {p95:7.1f}")
        if row:
            print(f"    {mode:26s} " + "   ".join(row))


def main() -> None:
    figures.record_if_asked(__file__)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--write-queries", type=int, default=10, help="queries after a write (each reloads an index)")
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="1,000 items, 5 queries, this tree only: checks the script")
    add_options(ap, rounds=2)
    args = ap.parse_args()
    if args.smoke:
        args.items, args.queries, args.write_queries, args.rev = 1000, 5, 2, None
    if args.measure_json:
        db = store_for(args.work)
        if not Path(db).exists():  # another code (--rev): its own store, built before its first timing
            print(f"built {db} in {build(db, args.items):.0f} s", file=sys.stderr)
        print(json.dumps(measure(db, args.queries, args.write_queries)))
        return
    import subprocess

    with tempfile.TemporaryDirectory(prefix="bench-vectors-") as tmp:
        build_s = build(store_for(tmp), args.items)
        print(f"{args.items:,} turns, each with a 384-dimension vector ({hashing.model_name}), built in {build_s:.0f} s; "
              f"{args.queries} LoCoMo questions per arm ({args.write_queries} after a write), context() unbudgeted; "
              "ms")
        argv = ["--work", tmp, "--items", str(args.items), "--queries", str(args.queries),
                "--write-queries", str(args.write_queries)]
        if args.rev:
            ours, theirs = alternate(__file__, argv, args.rev, args.rounds)
            show(f"this tree (medians of {args.rounds} rounds)", ours)
            show(f"{args.rev} (alternating with it, on a store its own code built from the same turns and vectors)",
                 theirs)
        else:
            done = subprocess.run([sys.executable, __file__, *argv, "--measure-json"], capture_output=True, text=True)
            if done.returncode:
                sys.exit(done.stderr[-3000:])
            show("this tree", json.loads(done.stdout.strip().splitlines()[-1]))
            print("  " + done.stderr.strip().splitlines()[-1])
        load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
        print(f"  load average after the run: {' '.join(load)} ({__import__('os').cpu_count()} cores)")


if __name__ == "__main__":
    main()
