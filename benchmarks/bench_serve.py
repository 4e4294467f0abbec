"""p50/p95 of ``POST /context`` on ``tortoise serve`` (loopback) beside ``Memory.context()`` in-process, same run.

A store of synthetic chat turns (sessions of 20; people, pets, places, activities) is built, then
``tortoise serve`` runs in a subprocess on a free loopback port and a pool of client threads
(httpx, one connection each) sends ``POST /v1/ns/bench/context`` with chat-like questions. The
in-process baseline calls ``Memory.context()`` on the same database from the same number of
threads. The two alternate in rounds, so they share the machine's load; each row counts the blocks
that came back degraded (past the reflex's 50 ms budget, or failed) and the requests that failed.
The run is bounded by ``--requests`` per side and by ``--max-seconds`` overall.

Usage::

    .venv/bin/python benchmarks/bench_serve.py [--items 5000] [--clients 1 4] [--requests 400]
    .venv/bin/python benchmarks/bench_serve.py --items 100000
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import figures  # noqa: E402
from tortoise_sdk import Memory  # noqa: E402

PEOPLE = ["Maya", "Jon", "Gina", "Priya", "Tom", "Lena", "Omar", "Sofia", "Ken", "Ava"]
PETS = ["Biscuit", "Luna", "Oliver", "Pepper", "Milo", "Coco"]
PLACES = ["Oakland", "Berlin", "Lisbon", "Denver", "Kyoto", "Austin", "Toronto", "Oslo"]
ACTIVITIES = ["pottery", "climbing", "painting", "running", "baking sourdough", "chess", "gardening", "kayaking"]
TEMPLATES = [
    "I went {act} in {place} with {person} last weekend and it was lovely.",
    "My dog {pet} has been restless since we moved to {place}.",
    "{person} started a new job in {place} and the commute is long.",
    "We are planning a trip to {place} next month, maybe some {act} too.",
    "Did you ever try {act}? {person} says it is relaxing.",
]
QUESTIONS = ["how is {pet} doing?", "when did I go {act} in {place}?", "what did {person} say about {act}?",
             "what is the capital of Peru?", "thanks!", "remind me about the trip to {place}"]
NAMESPACE = "bench"


def fill(rng: random.Random, template: str) -> str:
    return template.format(person=rng.choice(PEOPLE), pet=rng.choice(PETS), place=rng.choice(PLACES),
                           act=rng.choice(ACTIVITIES))


def build(db: str, items: int, rng: random.Random) -> float:
    started = time.perf_counter()
    sessions = []
    for s in range(0, items, 20):
        turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": fill(rng, rng.choice(TEMPLATES))}
                 for i in range(min(20, items - s))]
        sessions.append({"session_id": f"s{s // 20}", "turns": turns, "date": "2024-05-01T10:00:00"})
    with Memory(db, namespace=NAMESPACE) as mem:
        mem.capture_many(sessions, extract=False, chunk_size=500)
    return time.perf_counter() - started


def start_server(db: str, namespace: str = NAMESPACE, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """This checkout's ``tortoise serve`` on ``db`` at a free loopback port, once it answers /health; and its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "tortoise_sdk.cli", "serve", "--db", db, "--namespace",
                             namespace, "--port", str(port), *options], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not answer /health within 60 s")


class Side:
    """One way of calling context: its latencies, degraded blocks and failures."""

    def __init__(self, name: str, call: Callable[[str], dict | None]) -> None:
        self.name, self.call = name, call
        self.ms: list[float] = []
        self.degraded = 0
        self.failed = 0
        self.lock = threading.Lock()

    def run(self, queries: list[str]) -> None:
        for q in queries:
            t0 = time.perf_counter()
            try:
                block = self.call(q)
            except Exception:  # noqa: BLE001 - counted, the run goes on
                block = None
            elapsed = (time.perf_counter() - t0) * 1000
            with self.lock:
                self.ms.append(elapsed)
                if block is None:
                    self.failed += 1
                elif block.get("degraded_reason"):
                    self.degraded += 1

    def row(self) -> str:
        if not self.ms:
            return f"{self.name:<34} no requests ran"
        qs = statistics.quantiles(self.ms, n=100) if len(self.ms) > 1 else [self.ms[0]] * 99
        return (f"{self.name:<34} {len(self.ms):>6} {qs[49]:>9.1f} {qs[94]:>9.1f} {self.degraded:>9} "
                f"{self.failed:>7}")


def measure(sides: list[Side], clients: int, queries: list[str], args: argparse.Namespace) -> None:
    """Alternate the sides round by round (order flipped each round), ``clients`` threads each."""
    per_round = max(1, len(queries) // args.rounds)
    started = time.monotonic()
    for r in range(args.rounds):
        if time.monotonic() - started > args.max_seconds:
            print(f"stopped after {r} round(s): --max-seconds {args.max_seconds} reached")
            break
        chunk = queries[r * per_round:(r + 1) * per_round]
        for side in sides if r % 2 == 0 else reversed(sides):
            threads = [threading.Thread(target=side.run, args=(chunk[i::clients],)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--items", type=int, default=5000, help="turns in the store (default 5,000; try 100000)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4], help="concurrent callers on each side, one "
                                                                       "table per count (default: 1 4)")
    ap.add_argument("--requests", type=int, default=400, help="context calls per side")
    ap.add_argument("--rounds", type=int, default=4, help="alternations of the two sides")
    ap.add_argument("--max-seconds", type=float, default=300, help="per client count: stop starting rounds after "
                                                                   "this long")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="a tiny run (300 turns, 20 calls, 1 round): checks the script")
    args = ap.parse_args()
    if args.smoke:
        args.items, args.clients, args.requests, args.rounds = 300, [1, 2], 20, 1
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        db = str(Path(tmp) / "bench.db")
        built = build(db, args.items, rng)
        print(f"store: {args.items} turns in {built:.1f} s; {args.requests} calls per side, {args.rounds} alternating "
              f"rounds; cpus {os.cpu_count()}")
        proc, url = start_server(db)
        mem = Memory(db, namespace=NAMESPACE)
        local = threading.local()

        def over_http(q: str) -> dict | None:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = httpx.Client(base_url=url, timeout=30)
            answer = client.post(f"/v1/ns/{NAMESPACE}/context", json={"query": q})
            return answer.json() if answer.status_code == 200 else None

        def in_process(q: str) -> dict | None:
            return mem.context([{"role": "user", "content": q}]).model_dump()

        failed = 0
        try:
            for _ in range(3):  # warm both: connections, caches
                over_http("warm up")
                in_process("warm up")
            for clients in args.clients:
                sides = [Side("POST /context (HTTP, loopback)", over_http),
                         Side("Memory.context() in-process", in_process)]
                measure(sides, clients, [fill(rng, rng.choice(QUESTIONS)) for _ in range(args.requests)], args)
                print(f"\n{clients} concurrent caller(s) per side")
                print(f"{'':<34} {'calls':>6} {'p50 ms':>9} {'p95 ms':>9} {'degraded':>9} {'failed':>7}")
                for side in sides:
                    print(side.row(), flush=True)
                failed += sum(side.failed for side in sides)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            mem.close()
    if failed:
        print(f"{failed} call(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    raise SystemExit(main())
