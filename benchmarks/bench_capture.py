"""Capture throughput: a 10,000-turn batch import into the embedded store.

Goal: at least 20,000 turns/s on a 2-core machine. Baseline, same run, same rows:
a bare ``executemany`` into a plain SQLite table (no validation, no FTS, no receipts),
i.e. the floor the store's own work sits on. It also times one ``capture_many`` call of
the whole import and of four times as many turns: a capture is linear in its size (goal: the
ratio at most 5).

``--rev 9364ca8`` runs the same imports with that revision's code, alternating with the
working tree's, and prints the ratios (see ``revision.py``). ``--smoke``: a tiny size, for the tests.

Run: .venv/bin/python benchmarks/bench_capture.py [--turns 10000] [--repeat 5] [--rev REV]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import figures
import revision
from tortoise_sdk import Memory

WORDS = ("river garden nurse pottery camping guitar adoption marathon kids painting library "
         "concert recipe beach hiking festival volunteer promotion bakery museum").split()


def make_sessions(n_turns: int, per_session: int = 25) -> list[dict]:
    sessions = []
    for s in range(n_turns // per_session):
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "name": "Maya" if i % 2 == 0 else None,
             "id": f"s{s}-{i}",
             "content": " ".join(WORDS[(s * 7 + i * 3 + j) % len(WORDS)] for j in range(18)) + f" ({s}.{i})"}
            for i in range(per_session)
        ]
        sessions.append({"session_id": f"s{s}", "date": "2024-01-01T10:00:00", "turns": turns})
    return sessions


def bench_tortoise(sessions: list[dict], folder: Path, batch: int = 100) -> float:
    """Turns a second importing ``sessions`` into a new store, ``batch`` sessions a call (100: the CLI's)."""
    path = folder / f"t{time.perf_counter_ns()}.db"
    with Memory(str(path), namespace="bench") as m:
        start = time.perf_counter()
        for i in range(0, len(sessions), batch):
            m.capture_many(sessions[i:i + batch])
        elapsed = time.perf_counter() - start
        n = sum(s.turn_count for s in m.sessions())
    assert n == sum(len(s["turns"]) for s in sessions)
    return n / elapsed


def bench_baseline(sessions: list[dict], folder: Path) -> float:
    conn = sqlite3.connect(folder / f"b{time.perf_counter_ns()}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE turns (session_id TEXT, idx INTEGER, role TEXT, name TEXT, content TEXT)")
    rows = [(s["session_id"], i, t["role"], t.get("name"), t["content"]) for s in sessions for i, t in enumerate(s["turns"])]
    start = time.perf_counter()
    for i in range(0, len(rows), 2500):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO turns VALUES (?, ?, ?, ?, ?)", rows[i:i + 2500])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return len(rows) / elapsed


def measure(turns: int, repeat: int) -> dict[str, float]:
    """The figures of one run: batch throughput, and the seconds of one call of ``turns`` and of 4 x ``turns``."""
    sessions = make_sessions(turns)
    big = make_sessions(4 * turns)
    with tempfile.TemporaryDirectory() as d:
        ours = [bench_tortoise(sessions, Path(d)) for _ in range(repeat)]
        one = len(sessions) / bench_tortoise(sessions, Path(d), batch=len(sessions)) * 25
        four = len(big) / bench_tortoise(big, Path(d), batch=len(big)) * 25
    return {"turns_per_s": statistics.median(ours), "one_call_s": one, "four_calls_s": four}


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a tiny size (500 turns, 1 run), for the tests")
    revision.add_options(ap)
    args = ap.parse_args()
    if args.smoke:
        args.turns, args.repeat, args.rounds = 500, 1, 1
    if args.measure_json:
        print(json.dumps(measure(args.turns, args.repeat)))
        return
    fig = measure(args.turns, args.repeat)
    with tempfile.TemporaryDirectory() as d:
        base = [bench_baseline(make_sessions(args.turns), Path(d)) for _ in range(args.repeat)]
    n = args.turns // 25 * 25
    print(f"capture batch import, {n} turns in {n // 25} sessions, median of {args.repeat} runs")
    print(f"  tortoise capture_many (validate + identity + FTS5 + receipts): {fig['turns_per_s']:>10,.0f} turns/s")
    print(f"  baseline bare executemany into a plain table:                 {statistics.median(base):>10,.0f} turns/s")
    print(f"  goal >= 20,000 turns/s: {'met' if fig['turns_per_s'] >= 20_000 else 'NOT met'}")
    growth = fig["four_calls_s"] / fig["one_call_s"]
    print(f"  one capture_many call: {n:,} turns {fig['one_call_s']:.2f} s, {4 * n:,} turns {fig['four_calls_s']:.2f} s"
          f" (x{growth:.1f}; goal <= 5: {'met' if growth <= 5 else 'NOT met'})")
    if args.rev:
        argv = ["--turns", str(args.turns), "--repeat", str(args.repeat)]
        ours, theirs = revision.alternate(__file__, argv, args.rev, args.rounds)
        revision.report(args.rev, args.rounds, ours, theirs, {
            "turns_per_s": "batch import, turns/s", "one_call_s": f"one call of {n:,} turns, s",
            "four_calls_s": f"one call of {4 * n:,} turns, s"})
        ratio = ours["turns_per_s"] / theirs["turns_per_s"]
        print(f"  goal throughput >= 0.8x {args.rev}: {'met' if ratio >= 0.8 else 'NOT met'} ({ratio:.2f}x)")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
