"""Capture throughput: a 10,000-turn batch import into the embedded store.

Goal: at least 20,000 turns/s on a 2-core machine. Baseline, same run, same rows:
a bare ``executemany`` into a plain SQLite table (no validation, no FTS, no receipts),
i.e. the floor the store's own work sits on.

Run: .venv/bin/python benchmarks/bench_capture.py [--turns 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

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


def bench_tortoise(sessions: list[dict], folder: Path) -> float:
    path = folder / f"t{time.perf_counter_ns()}.db"
    with Memory(str(path), namespace="bench") as m:
        start = time.perf_counter()
        for i in range(0, len(sessions), 100):  # the CLI's batch size
            m.capture_many(sessions[i:i + 100])
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sessions = make_sessions(args.turns)
    with tempfile.TemporaryDirectory() as d:
        ours = [bench_tortoise(sessions, Path(d)) for _ in range(args.repeat)]
        base = [bench_baseline(sessions, Path(d)) for _ in range(args.repeat)]
    print(f"capture batch import, {args.turns} turns in {len(sessions)} sessions, median of {args.repeat} runs")
    print(f"  tortoise capture_many (validate + identity + FTS5 + receipts): {statistics.median(ours):>10,.0f} turns/s")
    print(f"  baseline bare executemany into a plain table:                 {statistics.median(base):>10,.0f} turns/s")
    print(f"  goal >= 20,000 turns/s: {'met' if statistics.median(ours) >= 20_000 else 'NOT met'}")


if __name__ == "__main__":
    main()
