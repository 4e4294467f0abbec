"""p50/p95 latency of ``Memory.context()`` on stores of 10,000 and 100,000 items (turns + memories).

The text is synthetic but shaped like chat: people, pets, places and activities in sentence
templates, with Zipf-distributed filler words, so common and rare terms both occur. Four
items in five are turns (sessions of 20), one in five an extracted memory written through
the store's real S5 write path. Queries are a mix of questions about stored facts, unrelated
questions and courtesy turns. Baselines in the same run: one plain ``Memory.search`` (FTS5
BM25 over turns, k=5), the least a retrieval step costs, and ``context()`` with the retrieval
methods added since the last quiet-machine figures switched off (``BEFORE``), so a change's cost
is read against a figure taken under the same load. The machine is shared: compare columns of one
run, not runs.

Usage::

    .venv/bin/python benchmarks/bench_reflex_latency.py [--sizes 10000 100000] [--queries 300]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.models import ExtractionReport  # noqa: E402
from tortoise_sdk.reflex import tuning  # noqa: E402
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, ItemPlan  # noqa: E402
from tortoise_sdk.store.sqlite import SQLiteStore  # noqa: E402

PEOPLE = ["Maya", "Jon", "Gina", "Priya", "Tom", "Lena", "Omar", "Sofia", "Ken", "Ava", "Luis", "Nora"]
PETS = ["Biscuit", "Luna", "Oliver", "Pepper", "Milo", "Bailey", "Coco", "Rex"]
PLACES = ["Oakland", "Berlin", "Lisbon", "Denver", "Kyoto", "Austin", "Toronto", "Nairobi", "Oslo", "Seattle"]
ACTIVITIES = ["pottery", "climbing", "painting", "running", "baking sourdough", "salsa dancing", "chess",
              "gardening", "kayaking", "photography", "volunteering", "learning Spanish", "woodworking"]
JOBS = ["data engineer", "nurse", "teacher", "barista", "architect", "lawyer", "designer", "chef", "pilot"]
TEMPLATES = [
    "I went {act} in {place} with {person} last weekend and it was {adj}.",
    "My dog {pet} has been {adj} since we moved to {place}.",
    "{person} started a new job as a {job} and the commute is {adj}.",
    "We are planning a trip to {place} next month, maybe some {act} too.",
    "Honestly {act} keeps me sane, it is {adj} after a long week at work.",
    "Did you ever try {act}? {person} says it is {adj}.",
    "I adopted a cat named {pet} from the shelter near {place}.",
    "Work as a {job} is {adj} lately, I might switch careers.",
]
ADJ = ["great", "exhausting", "wonderful", "stressful", "relaxing", "fun", "hard", "amazing", "quiet"]
QUESTIONS = [
    "what is the name of my dog?", "when did I go {act} in {place}?", "where does {person} work now?",
    "remind me what {person} said about {act}", "what did we plan for the trip to {place}?",
    "how is {pet} doing?", "what job did {person} start?", "did I adopt a cat?",
]
UNRELATED = ["what is the capital of Peru?", "explain quantum chromodynamics", "how do I invert a matrix in numpy?"]
COURTESY = ["thanks!", "hi", "ok cool", "good morning"]
# The reflex as it was before the methods these switches control (tuning attributes).
BEFORE: dict[str, object] = {"PRF_TERMS": 0}


def _filler(rng: random.Random, vocab: list[str], n: int) -> str:
    # Zipf-like: word i drawn with weight 1/(i+1).
    return " ".join(rng.choices(vocab, weights=[1 / (i + 1) for i in range(len(vocab))], k=n))


def _sentence(rng: random.Random, vocab: list[str]) -> str:
    s = rng.choice(TEMPLATES).format(act=rng.choice(ACTIVITIES), place=rng.choice(PLACES),
                                     person=rng.choice(PEOPLE), pet=rng.choice(PETS), job=rng.choice(JOBS),
                                     adj=rng.choice(ADJ))
    return s + " " + _filler(rng, vocab, rng.randint(3, 18)) + "."


def build(path: Path, items: int, seed: int = 7) -> Memory:
    rng = random.Random(seed)
    vocab = [f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po") for b in range(300)]
    store = SQLiteStore(path, synchronous="OFF")
    mem = Memory(store=store, namespace="bench")
    n_turns = items * 4 // 5
    n_memories = items - n_turns
    sessions = []
    for s in range(n_turns // 20):
        turns = [{"role": "user" if i % 2 == 0 else "assistant", "name": "Maya" if i % 2 == 0 else None,
                  "content": _sentence(rng, vocab)} for i in range(20)]
        sessions.append({"session_id": f"s{s}", "date": f"2024-{1 + s % 12:02d}-{1 + s % 28:02d}T10:00:00",
                         "turns": turns})
    for start in range(0, len(sessions), 200):
        mem.capture_many(sessions[start:start + 200])
    per_session = max(1, n_memories // len(sessions))
    written = 0
    for s in sessions:
        if written >= n_memories:
            break
        sid = s["session_id"]
        turn_ids = [t.turn_id for t in store.turns("bench", sid, start=0, stop=per_session)]
        items_ = []
        for k in range(min(per_session, n_memories - written)):
            person, act, place = rng.choice(PEOPLE), rng.choice(ACTIVITIES), rng.choice(PLACES)
            items_.append(ItemPlan(kind=rng.choice(["event", "point"]),
                                   content=f"{person} enjoys {act} in {place} ({sid}-{k}) {_filler(rng, vocab, 4)}",
                                   about=(person, place), search_keys=(act,), sources=()))
            written += 1
        plan = ExtractionPlan(session_id=sid, extraction_id=f"x-{sid}", valid_at=None,
                              entities=[EntityPlan(name=n, kind="person" if n in PEOPLE else "place")
                                        for n in PEOPLE + PLACES], items=items_)
        store.write_extraction("bench", plan, finalize=lambda r: ExtractionReport(status="ok"))
    del turn_ids
    return mem


def queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 10 == 8:
            out.append(rng.choice(UNRELATED))
        elif i % 10 == 9:
            out.append(rng.choice(COURTESY))
        else:
            out.append(rng.choice(QUESTIONS).format(act=rng.choice(ACTIVITIES), place=rng.choice(PLACES),
                                                    person=rng.choice(PEOPLE), pet=rng.choice(PETS)))
    return out


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def _timed_context(mem: Memory, q: str, overrides: dict[str, object]) -> tuple[float, bool]:
    saved = {k: getattr(tuning, k) for k in overrides}
    for k, v in overrides.items():
        setattr(tuning, k, v)
    try:
        t = time.perf_counter()
        block = mem.context([{"role": "user", "content": q}], budget=5, time_budget_ms=None)
        return (time.perf_counter() - t) * 1000, bool(block.pointers)
    finally:
        for k, v in saved.items():
            setattr(tuning, k, v)


def run(sizes: list[int], n_queries: int) -> int:
    print(f"{'items':>8} {'turns':>7} {'memories':>8} | {'context p50':>11} {'p95':>7} {'max':>7} "
          f"{'non-empty':>9} {'timeouts@50ms':>13} | {'before p50':>10} {'p95':>7} | {'search p50':>10} {'p95':>6}")
    print(f"  (before: context() with {BEFORE}, timed in the same loop)")
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            mem = build(Path(tmp) / "bench.db", size)
            built = time.perf_counter() - t0
            n_mem = len(mem.store.memories("bench"))
            n_turns = sum(s.turn_count for s in mem.sessions())
            qs = queries(n_queries)
            for q in qs[:20]:  # warm the page cache and the per-connection temp tables
                mem.context([{"role": "user", "content": q}], budget=5, time_budget_ms=None)
            lat, before, base, nonempty, timeouts = [], [], [], 0, 0
            for q in qs:
                ms, found = _timed_context(mem, q, {})
                lat.append(ms)
                nonempty += found
                timeouts += ms > 50
                before.append(_timed_context(mem, q, BEFORE)[0])
                t = time.perf_counter()
                mem.search(q, k=5)
                base.append((time.perf_counter() - t) * 1000)
            print(f"{size:>8} {n_turns:>7} {n_mem:>8} | {pct(lat, 50):>9.2f}ms {pct(lat, 95):>5.2f}ms "
                  f"{max(lat):>5.1f}ms {nonempty:>9} {timeouts:>13} | "
                  f"{pct(before, 50):>8.2f}ms {pct(before, 95):>5.2f}ms"
                  f" | {pct(base, 50):>8.2f}ms {pct(base, 95):>4.2f}ms"
                  f"   (built in {built:.0f}s)")
            mem.close()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    sys.exit(run(args.sizes, args.queries))
