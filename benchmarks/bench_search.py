"""Search latency over 100,000 stored turns, beside a plain rank_bm25 baseline on the same turns.

Goal: p95 of ``Memory.search`` at most 5 ms. The store holds the two LoCoMo
conversations (real text, from ../shared/data/locomo) plus filler turns sampled
from their vocabulary up to --turns; the queries are the LoCoMo questions, so the
same run also reports evidence recall@10 for both methods with the distractors present.

``--rev 9364ca8`` times the same store and questions with that revision's code, alternating
with the working tree's (see ``revision.py``); it also prints the CPU time per search (the process's),
the figure a shared machine's load moves least. ``--smoke``: 3,000 turns and 60 questions, for the tests.

Run: .venv/bin/python benchmarks/bench_search.py [--turns 100000] [--rev REV]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import figures  # noqa: E402
import revision  # noqa: E402
from locomo import load_questions, load_sessions, locomo_files  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.search import tokenize  # noqa: E402


def filler_sessions(real: list[dict], n_turns: int, seed: int = 7) -> list[dict]:
    """Distractor turns: bags of words drawn with the real corpus's word frequencies (Zipf-like),
    in random order, so common and rare terms occur as often as in real chat without copying
    any evidence sentence."""
    rng = random.Random(seed)
    words = [w for s in real for t in s["turns"] for w in t["content"].split()]
    names = sorted({t["name"] for s in real for t in s["turns"]}) + ["Jordan", "Priya", "Sam", "Lena"]
    out, made, s = [], 0, 0
    while made < n_turns:
        turns = []
        for i in range(min(25, n_turns - made)):
            length = max(4, int(rng.gauss(18, 8)))
            turns.append({"role": "user", "name": rng.choice(names), "id": f"F{s}:{i}",
                          "content": " ".join(rng.choices(words, k=length))})
        out.append({"session_id": f"filler-{s}", "date": "2023-01-01T10:00:00", "turns": turns})
        made += len(turns)
        s += 1
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def measure(sessions: list[dict], questions: list) -> dict[str, float]:
    """Load ``sessions`` into a new store and time ``Memory.search`` for each question."""
    with tempfile.TemporaryDirectory() as d, Memory(str(Path(d) / "bench.db"), namespace="bench") as mem:
        t0 = time.perf_counter()
        for i in range(0, len(sessions), 200):
            mem.capture_many(sessions[i:i + 200])
        load_s = time.perf_counter() - t0
        for q in questions[:20]:  # warm the page cache
            mem.search(q.question)
        lat, cpu, recall = [], [], 0.0
        for q in questions:
            t, c = time.perf_counter(), time.process_time()
            hits = mem.search(q.question, k=10)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            recall += len({h.external_id for h in hits} & q.evidence) / len(q.evidence)
    return {"p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "cpu_p50_ms": pct(cpu, 50), "cpu_p95_ms": pct(cpu, 95),
            "recall": recall / len(questions), "load_s": load_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--baseline-queries", type=int, default=60, help="rank_bm25 is slow; time a subset")
    ap.add_argument("--smoke", action="store_true", help="a tiny size (3,000 turns), for the tests")
    revision.add_options(ap)
    args = ap.parse_args()
    if args.smoke:
        args.turns, args.baseline_queries, args.rounds = 3_000, 5, 1
    files = locomo_files()
    if not files:
        sys.exit("needs ../shared/data/locomo (LoCoMo, CC BY-NC 4.0, evaluation only)")
    real = [s for f in files for s in load_sessions(f)]
    questions = [q for f in files for q in load_questions(f)]
    if args.smoke:
        questions = questions[:60]
    n_real = sum(len(s["turns"]) for s in real)
    sessions = real + filler_sessions(real, args.turns - n_real)
    docs = [(t["id"], t["content"]) for s in sessions for t in s["turns"]]
    if args.measure_json:
        print(json.dumps(measure(sessions, questions)))
        return
    fig = measure(sessions, questions)

    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([tokenize(text) for _, text in docs])
    b_lat, b_recall = [], 0.0
    for q in questions[: args.baseline_queries]:
        t = time.perf_counter()
        scores = bm25.get_scores(tokenize(q.question))
        top = sorted(range(len(docs)), key=lambda i: -scores[i])[:10]
        b_lat.append((time.perf_counter() - t) * 1000)
    for q in questions:
        scores = bm25.get_scores(tokenize(q.question))
        top = sorted(range(len(docs)), key=lambda i: -scores[i])[:10]
        b_recall += len({docs[i][0] for i in top} & q.evidence) / len(q.evidence)

    print(f"search over {len(docs):,} turns ({n_real} real LoCoMo turns + filler), {len(questions)} LoCoMo questions;"
          f" load {fig['load_s']:.1f}s")
    print(f"  {'method':<34}{'p50 ms':>9}{'p95 ms':>9}{'recall@10':>11}")
    print(f"  {'tortoise search (FTS5, stemmed)':<34}{fig['p50_ms']:>9.2f}{fig['p95_ms']:>9.2f}{fig['recall']:>11.3f}")
    print(f"  {'baseline rank_bm25 (BM25Okapi)':<34}{pct(b_lat, 50):>9.2f}{pct(b_lat, 95):>9.2f}"
          f"{b_recall / len(questions):>11.3f}")
    print(f"  goal p95 <= 5 ms: {'met' if fig['p95_ms'] <= 5 else 'NOT met'}")
    if args.rev:
        argv = ["--turns", str(args.turns)]
        ours, theirs = revision.alternate(__file__, argv, args.rev, args.rounds)
        revision.report(args.rev, args.rounds, ours, theirs, {
            "p50_ms": "search p50, ms", "p95_ms": "search p95, ms", "cpu_p50_ms": "CPU per search p50, ms",
            "cpu_p95_ms": "CPU per search p95, ms", "recall": "recall@10", "load_s": "load, s"})
        ratio = ours["p95_ms"] / theirs["p95_ms"]
        print(f"  goal p95 <= 1.25x {args.rev}: {'met' if ratio <= 1.25 else 'NOT met'} ({ratio:.2f}x)")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
