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

``--instances W`` switches on a listing question's category instances (``tuning.INSTANCE_WEIGHT``
= W) for this tree's ``context()`` (not for "before" nor ``--against``) and adds listing questions
("which cities has Jon visited?") to the mix, so their cost is read beside both.

``--second-neighbours S`` switches on the turns two before and after each candidate
(``tuning.SECOND_NEIGHBOUR_SHARE`` = S) for this tree's ``context()`` and off for "before", so its cost is
read beside it.

``--pastes N`` measures pasted logs instead: the store is built once and copied, the copy gets N
pasted 5 MB logs (each line full of the names, pets, places and activities the questions use),
and each query is timed on both stores in turn, so the two columns share the machine's load.
Goal: the same p95 with the pastes as without, and no block degraded at the default 50 ms budget.
With ``--engine postgres`` both stores are copied (``migrate-store``) into two fresh databases on
``$TORTOISE_TEST_PG_URL``'s server (dropped afterwards) and timed there.

``--store URL --against REV`` times an existing store (a PostgreSQL copy of ``build``'s, say) with
this tree's code and git revision REV's, each in its own process, query by query in turn (the store
is first migrated by this tree; REV's code is told of the migrations it lacks, so both read one
database with this tree's indexes, which REV's statements may also use); ``--explain``
then prints ``EXPLAIN (ANALYZE, BUFFERS)`` of every statement the slowest query's ``context()`` sends.
``--busy TURNS`` does so on a copy of the store where another namespace then wrote TURNS turns, its
newest pages not yet vacuumed: a namespace quiet while another keeps writing (``busy_copy``).
``--store URL --live TURNS`` weighs the GIN indexes' pending list on a live PostgreSQL store: two
copies, ``fastupdate`` on and off, get the same new turns, then are timed in turn (``run_live``).
``--store URL --cold K`` starts K new processes per tree (this one and ``--against``'s), each asking
two questions at the default budget: what a CLI call, a hook or a freshly started server meets
(``--present``: every first question present-tense, the slowest kind).

Usage::

    .venv/bin/python benchmarks/bench_reflex_latency.py [--sizes 10000 100000] [--queries 300]
    .venv/bin/python benchmarks/bench_reflex_latency.py --sizes 100000 --pastes 3 [--engine postgres]
    .venv/bin/python benchmarks/bench_reflex_latency.py --store postgresql://.../db --against main [--explain] [--rounds 5]
    .venv/bin/python benchmarks/bench_reflex_latency.py --store postgresql://.../db --against main --busy 100000
    .venv/bin/python benchmarks/bench_reflex_latency.py --store postgresql://.../db --live 8000 --queries 100
    .venv/bin/python benchmarks/bench_reflex_latency.py --store postgresql://.../db --against main --cold 20 [--present]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import figures  # noqa: E402
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
# --instances W: listing questions whose category has instances in WordNet's table (reflex/instances.py).
LISTING = ["what activities has {person} done?", "which cities has {person} visited?", "what sports does {person} play?",
           "what pets does {person} have?", "what kinds of art has {person} made?"]
UNRELATED = ["what is the capital of Peru?", "explain quantum chromodynamics", "how do I invert a matrix in numpy?"]
COURTESY = ["thanks!", "hi", "ok cool", "good morning"]
# The reflex as it was before the methods these switches control (tuning attributes).
BEFORE: dict[str, object] = {"ANSWER_SHARE": 0.0, "SESSION_BOOST": 0.0, "DATE_BOOST": 0.0, "EXCHANGE_REPLIES": False}


#: The filler words of the synthetic chat, drawn Zipf-like by ``_filler``.
VOCAB = [f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po") for b in range(300)]


def _chat(rng: random.Random, n: int = 20) -> list[dict[str, str]]:
    """A session of ``n`` synthetic turns, user and assistant in turn (no speaker names)."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": _sentence(rng, VOCAB)} for i in range(n)]


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
    vocab = VOCAB
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


def queries(n: int, seed: int = 11, listing: bool = False) -> list[str]:
    rng = random.Random(seed)
    asked = QUESTIONS + LISTING if listing else QUESTIONS
    out = []
    for i in range(n):
        if i % 10 == 8:
            out.append(rng.choice(UNRELATED))
        elif i % 10 == 9:
            out.append(rng.choice(COURTESY))
        else:
            out.append(rng.choice(asked).format(act=rng.choice(ACTIVITIES), place=rng.choice(PLACES),
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


# The other checkout's context(), in a process of its own reading the same store: the package this
# interpreter has installed (editable) is hidden from it, so ``tortoise_sdk`` is the other tree's.
_OTHER = """
import json, sys, time
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:] = [p for p in sys.path if "__editable__" not in p]
sys.path.insert(0, sys.argv[1])
import tortoise_sdk
from tortoise_sdk import Memory
assert tortoise_sdk.__file__.startswith(sys.argv[1]), tortoise_sdk.__file__
mem = Memory(sys.argv[2], namespace="bench")
print("ready", flush=True)
for line in sys.stdin:
    t = time.perf_counter()
    block = mem.context([{"role": "user", "content": json.loads(line)}], budget=5, time_budget_ms=None)
    print(json.dumps([(time.perf_counter() - t) * 1000, bool(block.pointers)]), flush=True)
"""


class Other:
    """``context()`` of another checkout (``--against``) on the same store, timed in its own process."""

    def __init__(self, checkout: str, db: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _OTHER, str(Path(checkout).resolve()), str(db)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def timed(self, q: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(q) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline())[0])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def run(sizes: list[int], n_queries: int, against: str | None = None, instances: float = 0.0,
        near: float = 0.0) -> int:
    before_overrides = dict(BEFORE)
    if near:  # this tree's context() reads and scores the turns two away too; "before" does not
        tuning.SECOND_NEIGHBOUR_SHARE = near
        before_overrides["SECOND_NEIGHBOUR_SHARE"] = 0.0
        print(f"  SECOND_NEIGHBOUR_SHARE {near} for this tree's context()")
    if instances:  # this tree's context() seeks a listing question's instances; "before" does not
        tuning.INSTANCE_WEIGHT = instances
        before_overrides["INSTANCE_WEIGHT"] = 0.0
        print(f"  INSTANCE_WEIGHT {instances} for this tree's context() (listing questions added to the mix)")
    print(f"{'items':>8} {'turns':>7} {'memories':>8} | {'context p50':>11} {'p95':>7} {'max':>7} "
          f"{'non-empty':>9} {'timeouts@50ms':>13} | {'before p50':>10} {'p95':>7} | {'search p50':>10} {'p95':>6}"
          + (f" | {'against p50':>11} {'p95':>7}" if against else ""))
    print(f"  (before: context() with {before_overrides}, timed in the same loop"
          + (f"; against: context() of {against}, alternating query by query)" if against else ")"))
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            mem = build(Path(tmp) / "bench.db", size)
            built = time.perf_counter() - t0
            n_mem = len(mem.store.memories("bench"))
            n_turns = sum(s.turn_count for s in mem.sessions())
            qs = queries(n_queries, listing=bool(instances))
            for q in qs[:20]:  # warm the page cache and the per-connection temp tables
                mem.context([{"role": "user", "content": q}], budget=5, time_budget_ms=None)
            other = Other(against, Path(tmp) / "bench.db") if against else None
            if other is not None:
                for q in qs[:20]:
                    other.timed(q)
            lat, before, base, vs, nonempty, timeouts = [], [], [], [], 0, 0
            for i, q in enumerate(qs):
                if other is not None and i % 2 == 0:  # before this checkout's call on even queries, after on odd
                    vs.append(other.timed(q))
                ms, found = _timed_context(mem, q, {})
                lat.append(ms)
                nonempty += found
                timeouts += ms > 50
                before.append(_timed_context(mem, q, before_overrides)[0])
                t = time.perf_counter()
                mem.search(q, k=5)
                base.append((time.perf_counter() - t) * 1000)
                if other is not None and i % 2 == 1:
                    vs.append(other.timed(q))
            print(f"{size:>8} {n_turns:>7} {n_mem:>8} | {pct(lat, 50):>9.2f}ms {pct(lat, 95):>5.2f}ms "
                  f"{max(lat):>5.1f}ms {nonempty:>9} {timeouts:>13} | "
                  f"{pct(before, 50):>8.2f}ms {pct(before, 95):>5.2f}ms"
                  f" | {pct(base, 50):>8.2f}ms {pct(base, 95):>4.2f}ms"
                  + (f" | {pct(vs, 50):>9.2f}ms {pct(vs, 95):>5.2f}ms" if vs else "")
                  + f"   (built in {built:.0f}s)")
            if other is not None:
                other.close()
            mem.close()
    return 0


PASTE_MB = 5


def paste(rng: random.Random) -> str:
    """A pasted log of PASTE_MB megabytes whose every line names people, pets, places and activities."""
    lines, size = [], 0
    while size < PASTE_MB * 1_000_000:
        line = (f"2024-05-{rng.randint(1, 28):02d} WARN job {rng.choice(JOBS)} {rng.choice(PEOPLE)} "
                f"{rng.choice(ACTIVITIES)} {rng.choice(PLACES)} dog {rng.choice(PETS)} trip timeout retry")
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


@contextmanager
def _postgres_copy(sqlite_path: Path) -> Iterator[str]:
    """A fresh database on the test server holding a copy of ``sqlite_path``; dropped afterwards."""
    import psycopg

    from tortoise_sdk.store.copy import copy_store

    base = os.environ.get("TORTOISE_TEST_PG_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
    name = f"tortoise_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _on_database(base, name)
    try:
        copy_store(str(sqlite_path), url)
        yield url
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_pastes(sizes: list[int], n_queries: int, n_pastes: int, engine: str = "sqlite") -> int:
    print(f"engine: {engine}")
    print(f"{'items':>8} {'pastes':>6} | {'without: p50':>12} {'p95':>7} {'max':>7} {'degraded@50ms':>13} | "
          f"{'with: p50':>9} {'p95':>7} {'max':>7} {'degraded@50ms':>13} | {'same pointers':>13} "
          f"{'paste pointed':>13}")
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            plain_path, pasted_path = Path(tmp) / "plain.db", Path(tmp) / "pasted.db"
            build(plain_path, size).close()
            shutil.copyfile(plain_path, pasted_path)
            if engine == "postgres":
                with _postgres_copy(plain_path) as plain_url, _postgres_copy(pasted_path) as pasted_url:
                    _time_pastes(size, Memory(plain_url, namespace="bench"), Memory(pasted_url, namespace="bench"),
                                 n_queries, n_pastes)
            else:
                _time_pastes(size, Memory(str(plain_path), namespace="bench"),
                             Memory(str(pasted_path), namespace="bench"), n_queries, n_pastes)
    return 0


def _time_pastes(size: int, plain: Memory, pasted: Memory, n_queries: int, n_pastes: int) -> None:
    """Add the pastes to ``pasted``, then time each query on both stores in turn and print the row."""
    rng = random.Random(5)
    for i in range(n_pastes):
        pasted.capture(f"paste-{i}", [{"role": "user", "content": paste(rng)},
                                      {"role": "assistant", "content": "that log shows retries"}],
                       extract=False)
    qs = queries(n_queries)
    for q in qs[:20]:
        for mem in (plain, pasted):
            mem.context([{"role": "user", "content": q}], budget=5, time_budget_ms=None)
    lat: dict[str, list[float]] = {"plain": [], "pasted": []}
    degraded = {"plain": 0, "pasted": 0}
    same = pointed = 0
    for i, q in enumerate(qs):
        window = [{"role": "user", "content": q}]
        ids = {}
        pair = [("plain", plain), ("pasted", pasted)]
        for name, mem in pair if i % 2 else pair[::-1]:  # alternate which store goes first
            t = time.perf_counter()
            block = mem.context(window, budget=5, time_budget_ms=None)
            lat[name].append((time.perf_counter() - t) * 1000)
            ids[name] = [p.id for p in block.pointers]
            degraded[name] += mem.context(window, budget=5).degraded_reason is not None  # 50 ms default
        same += ids["plain"] == ids["pasted"]
        pointed += any(p.session_id.startswith("paste-") for p in pasted.context(window, budget=5,
                       time_budget_ms=None).pointers if p.session_id)
    row = [f"{size:>8} {n_pastes:>6}"]
    for name in ("plain", "pasted"):
        row.append(f"{pct(lat[name], 50):>10.2f}ms {pct(lat[name], 95):>5.2f}ms {max(lat[name]):>5.1f}ms "
                   f"{degraded[name]:>13}")
    print(" | ".join(row) + f" | {same:>9}/{len(qs)} {pointed:>13}")
    plain.close()
    pasted.close()


# Prepended to the processes below: an older tree (``--against``) refuses a store this tree has
# migrated further. The migrations it lacks are made known to it as done, under their recorded
# names, so that it runs on the same database (the same cache) with their indexes present: its
# statements may use them, which can only flatter the older tree.
_NEWER_SCHEMA = r"""
import sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2].startswith("postgresql://"):
    import psycopg
    from tortoise_sdk.store.postgres import migrations as _m
    _known, _ask = _m.POSTGRES_MIGRATIONS, "SELECT version, name FROM schema_migrations WHERE version > %s ORDER BY version"
    with psycopg.connect(sys.argv[2]) as _c:
        _newer = _c.execute(_ask, (_known[-1].version,)).fetchall()
else:
    import sqlite3
    from tortoise_sdk.store.sqlite import migrations as _m
    _known, _c = _m.SQLITE_MIGRATIONS, sqlite3.connect(sys.argv[2])
    _newer = _c.execute("SELECT version, name FROM schema_migrations WHERE version > ? ORDER BY version",
                        (_known[-1].version,)).fetchall()
    _c.close()
_known.extend(type(_known[0])(v, n, ()) for v, n in _newer)
"""

# A process that answers queries on stdin with one JSON line each, running the tortoise_sdk of the
# tree given as its first argument against the store given as its second (in the namespace given
# as its third, ``bench`` without one): two of them, one per tree, let two versions of the code be
# timed in turn on one store under the same load.
_SERVE = _NEWER_SCHEMA + r"""
import json, os, sys, time
from tortoise_sdk import Memory
url = sys.argv[2]
cpu = lambda: time.process_time()
if url.startswith("postgresql://"):
    # CPU time, less sensitive to a shared machine's load than wall time: this process's, plus that of
    # its server backends (same machine; found by an application_name of its own).
    import psycopg
    tag = f"tortoise_bench_{os.getpid()}"
    url += ("&" if "?" in url else "?") + f"application_name={tag}"
    admin = psycopg.connect(sys.argv[2], autocommit=True)
    tick = os.sysconf("SC_CLK_TCK")

    def backends():
        total = 0
        for (pid,) in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (tag,)):
            try:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / tick

    cpu = lambda: time.process_time() + backends()
mem = Memory(url, namespace=sys.argv[3] if len(sys.argv) > 3 else "bench")
for line in sys.stdin:
    window = [{"role": "user", "content": json.loads(line)}]
    c0 = cpu()
    t = time.perf_counter()
    block = mem.context(window, budget=5, time_budget_ms=None)
    ms = (time.perf_counter() - t) * 1000
    cpu_ms = (cpu() - c0) * 1000
    t = time.perf_counter()
    found = mem.search(window[0]["content"], k=5)
    search_ms = (time.perf_counter() - t) * 1000
    degraded = mem.context(window, budget=5).degraded_reason  # the default 50 ms budget
    print(json.dumps({"ms": ms, "cpu_ms": cpu_ms, "search_ms": search_ms, "ids": [p.id for p in block.pointers],
                      "search": [h.turn_id for h in found], "degraded": degraded}), flush=True)
"""


# A new process's first context() at the default budget, then its second: what a CLI call, a hook
# or a freshly started server meets. Prints one JSON line.
_COLD = _NEWER_SCHEMA + r"""
import json, sys, time
from tortoise_sdk import Memory
mem = Memory(sys.argv[2], namespace="bench")
rows = []
for q in json.loads(sys.argv[3]):
    t = time.perf_counter()
    block = mem.context([{"role": "user", "content": q}], budget=5)  # the default 50 ms budget
    rows.append({"ms": (time.perf_counter() - t) * 1000, "in_budget": block.elapsed_ms,
                 "degraded": block.degraded_reason})
print(json.dumps(rows))
mem.close()
"""


def run_cold(url: str, rev: str, k: int, present: bool = False) -> int:
    """``k`` new processes per tree (this one and ``rev``), alternating, each asking two questions at the
    default budget: how often the first block of a process comes back empty, against the second. With
    ``present``, every first question is the slowest kind, a present-tense one ("where does Jon work now?")."""
    import json

    qs = [q for q in queries(4 * k) if q not in UNRELATED and q not in COURTESY]
    if present:
        rng = random.Random(5)
        qs = [q for i in range(k) for q in (f"where does {rng.choice(PEOPLE)} work now?", qs[i])]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT, rev: _tree_of(rev, Path(tmp) / "base")}
        got: dict[str, list[list[dict]]] = {name: [] for name in trees}
        Memory(url, namespace="bench").close()  # this tree's migrations first: an older tree then runs on them
        for i in range(k):
            for name in list(trees) if i % 2 else list(trees)[::-1]:
                out = subprocess.run([sys.executable, "-c", _COLD, str(trees[name]), url, json.dumps(qs[2 * i:2 * i + 2])],
                                     check=True, capture_output=True, text=True).stdout
                got[name].append(json.loads(out))
    print(f"store: {url.rsplit('/', 1)[-1]}; {k} new processes per tree, alternating, two questions each at the default"
          " 50 ms budget" + ("; every first question present-tense" if present else ""))
    print(f"{'code':>12} | {'1st context() p50':>17} {'in budget p50':>13} {'p90':>7} {'degraded':>9} | "
          f"{'2nd p50':>8} {'degraded':>9}")
    for name, runs in got.items():
        first, second = [r[0] for r in runs], [r[1] for r in runs]
        inside = [r["in_budget"] for r in first]
        print(f"{name:>12} | {statistics.median(r['ms'] for r in first):>15.1f}ms {statistics.median(inside):>11.1f}ms "
              f"{pct(inside, 90):>5.1f}ms {sum(r['degraded'] is not None for r in first):>5}/{k:<3} | "
              f"{statistics.median(r['ms'] for r in second):>6.1f}ms {sum(r['degraded'] is not None for r in second):>5}/{k:<3}")
    print("  (the first call's time includes what it does before its budget starts: opening and warming connections;"
          " 'in budget' is the block's own elapsed_ms, what the 50 ms budget bounds)")
    return 0


def _tree_of(rev: str, into: Path) -> Path:
    """The files of git revision ``rev`` of this repository, under ``into``."""
    import subprocess

    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def time_trees(url: str, trees: dict[str, Path], qs: list[str], namespace: str = "bench") -> dict[str, list[dict]]:
    """Each query answered in ``namespace`` of the store at ``url`` by each tree's code (one process per tree), in turn."""
    import json
    import subprocess

    Memory(url, namespace=namespace).close()  # this tree's migrations first: an older tree then runs on them
    procs = {name: subprocess.Popen([sys.executable, "-c", _SERVE, str(tree), url, namespace], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True) for name, tree in trees.items()}

    def ask(name: str, q: str) -> dict:
        procs[name].stdin.write(json.dumps(q) + "\n")
        procs[name].stdin.flush()
        return json.loads(procs[name].stdout.readline())

    try:
        for q in qs[:20]:  # warm the caches and the pools
            for name in procs:
                ask(name, q)
        got: dict[str, list[dict]] = {name: [] for name in procs}
        names = list(procs)
        for i, q in enumerate(qs):
            for name in names if i % 2 else names[::-1]:  # alternate which goes first
                got[name].append(ask(name, q))
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    return got


def machine_ms() -> float:
    """How fast this machine runs Python just now: the best of five runs of a fixed loop, in ms.

    This VM's speed moves by a third between runs of the same code; printed beside each round, it
    says which phase a figure was taken in (lower is faster)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        sum(i * i % 7 for i in range(200_000))
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def run_against(url: str, rev: str, n_queries: int, explain: bool, rounds: int = 1, busy: int = 0) -> int:
    """Time ``context()`` on the store at ``url`` with this tree's code and with ``rev``'s, query by query in
    turn; with ``rounds`` > 1 the whole comparison is run that many times, each round's p50/p95 printed
    and their medians and ranges summed up (this machine's speed moves p95 from run to run). With
    ``busy`` it is run on a copy where another namespace wrote that many turns after (``busy_copy``)."""
    if busy:
        with busy_copy(url, busy) as copy:
            return run_against(copy, rev, n_queries, explain, rounds)
    qs = queries(n_queries)
    runs, speed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT, rev: _tree_of(rev, Path(tmp) / "base")}
        for _ in range(rounds):
            speed.append(machine_ms())
            runs.append(time_trees(url, trees, qs))
    got = {name: [r for run in runs for r in run[name]] for name in runs[0]}
    print(f"store: {url.rsplit('/', 1)[-1]}; {n_queries} queries, each timed on both trees in turn"
          + (f"; {rounds} rounds (the first table is all rounds together)" if rounds > 1 else ""))
    print(f"{'code':>12} | {'context p50':>11} {'p95':>7} {'max':>7} {'degraded@50ms':>13} {'non-empty':>9} | "
          f"{'CPU mean':>8} | {'search p50':>10} {'p95':>7}")
    for name, rows in got.items():
        lat, search, cpu = [r["ms"] for r in rows], [r["search_ms"] for r in rows], [r["cpu_ms"] for r in rows]
        print(f"{name:>12} | {pct(lat, 50):>9.2f}ms {pct(lat, 95):>5.2f}ms {max(lat):>5.1f}ms "
              f"{sum(r['degraded'] is not None for r in rows):>13} {sum(bool(r['ids']) for r in rows):>9} | "
              f"{statistics.mean(cpu):>6.1f}ms | {pct(search, 50):>8.2f}ms {pct(search, 95):>5.2f}ms")
    print("  (CPU mean: of one context(), this process's and its PostgreSQL backends' together; the server's is "
          f"counted in {1000 / os.sysconf('SC_CLK_TCK'):.0f} ms ticks, hence a mean)")
    if rounds > 1:
        print("each round's context() p50 / p95 / degraded@50ms:")
        for name in got:
            cells = [f"{pct([r['ms'] for r in run[name]], 50):.2f} / {pct([r['ms'] for r in run[name]], 95):.2f} / "
                     f"{sum(r['degraded'] is not None for r in run[name])}" for run in runs]
            p95s = sorted(pct([r["ms"] for r in run[name]], 95) for run in runs)
            print(f"{name:>12} | " + " | ".join(cells)
                  + f"  (p95 median {statistics.median(p95s):.2f}, from {p95s[0]:.2f} to {p95s[-1]:.2f} ms)")
    print("this machine's speed before each round (a fixed Python loop, ms, lower is faster): "
          + " | ".join(f"{x:.1f}" for x in speed))
    same = sum(a["ids"] == b["ids"] for a, b in zip(*got.values()))
    same_search = sum(a["search"] == b["search"] for a, b in zip(*got.values()))
    print(f"same block pointers: {same}/{len(got['this tree'])}; same search hits: {same_search}/{len(got['this tree'])}")
    if explain:
        _explain(url, qs)
    return 0


def _explain(url: str, qs: list[str]) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement one ``context()`` sends, for the slowest query.

    Each is explained in a session configured as the store's own (``jit`` off, UTC) that has run them
    all once, then again with ``jit`` on, printing that run's execution and JIT compilation times.
    """
    import psycopg

    from tortoise_sdk.store.postgres.store import _set_session

    mem = Memory(url, namespace="bench")
    slowest = max(qs, key=lambda q: _timed_context(mem, q, {})[0])
    sent: list[tuple[str, object]] = []
    real = psycopg.Cursor.execute

    def record(self, query, params=None, **kw):  # type: ignore[no-untyped-def]
        if isinstance(query, str) and query.lstrip().upper().startswith(("SELECT", "WITH")):
            sent.append((query, params))
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = record  # type: ignore[method-assign]
    try:
        mem.context([{"role": "user", "content": slowest}], budget=5, time_budget_ms=None)
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]
    print(f"\nEXPLAIN (ANALYZE, BUFFERS) of the {len(sent)} statements of context({slowest!r}), in a session set as"
          " the store sets its own; after each, the same statement with the server's default jit (on):")
    with psycopg.connect(url, autocommit=True) as conn:
        _set_session(conn, None)
        for query, params in sent:  # warm: a new session's first statement loads the dictionaries (2-3 ms)
            conn.execute(query, params).fetchall()
        for query, params in sent:
            plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + query, params).fetchall()]
            print("\n" + " ".join(query.split())[:160])
            print("\n".join("    " + line for line in plan))
            with conn.transaction():
                conn.execute("SET LOCAL jit = on")
                on = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()[0][0]  # type: ignore[index]
            jit = on.get("JIT", {}).get("Timing", {}).get("Total")
            print(f"  with jit = on: Execution Time {on['Execution Time']:.3f} ms, "
                  + ("not compiled" if jit is None else f"of which JIT compilation {jit:.3f} ms"))
    mem.close()


def _on_database(url: str, name: str) -> str:
    """``url`` pointed at database ``name`` (user, host and query string kept)."""
    return urlsplit(url)._replace(path=f"/{name}").geturl()


@contextmanager
def _template_copies(url: str, suffixes: list[str]) -> Iterator[list[str]]:
    """Copies of the PostgreSQL database at ``url`` (``CREATE DATABASE ... TEMPLATE``), ``<name>_<suffix>``
    each, replaced if left by an earlier run and dropped afterwards; yields their URLs."""
    import psycopg

    template = urlsplit(url).path.lstrip("/")
    names = [f"{template}_{suffix}" for suffix in suffixes]
    admin = _on_database(url, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield [_on_database(url, name) for name in names]
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def busy_copy(url: str, n_turns: int) -> Iterator[str]:
    """A copy of the PostgreSQL store at ``url`` (``CREATE DATABASE ... TEMPLATE``, dropped afterwards) where
    namespace "busy" then captured ``n_turns`` turns, so "bench" is a namespace quiet while another kept
    writing. Autovacuum is off on ``turns`` and its statistics are taken by hand: the newest pages are
    not yet all-visible, as in a live store between two vacuums."""
    import psycopg

    with _template_copies(url, ["busy"]) as (copy,):
        with psycopg.connect(copy, autocommit=True) as conn:
            conn.execute("ALTER TABLE turns SET (autovacuum_enabled = false)")
        rng = random.Random(23)
        with Memory(copy, namespace="busy") as mem:
            for start in range(0, n_turns // 20, 200):
                mem.capture_many([{"session_id": f"busy{s}", "turns": _chat(rng)}
                                  for s in range(start, min(start + 200, n_turns // 20))])
        with psycopg.connect(copy, autocommit=True) as conn:
            conn.execute("ANALYZE turns")
            seen = conn.execute("SELECT relallvisible, relpages FROM pg_class WHERE relname = 'turns'").fetchone()
        print(f"namespace busy: {n_turns} turns captured after bench's; turns' pages all-visible: {seen[0]} of {seen[1]}")
        yield copy


def run_live(url: str, n_turns: int, n_queries: int) -> int:
    """The GIN pending list on a live store: ``fastupdate`` on (PostgreSQL's default) against off.

    Two copies of the store at ``url`` (``CREATE DATABASE ... TEMPLATE``), one with ``fastupdate=off``
    on both full-text indexes, get the same ``n_turns`` new turns, one 20-turn session per capture as a
    host sends them, alternating between the copies; then each query is timed on both in turn.
    Printed: capture time per session, the pending list's pages (``pgstatginindex``), ``context()``
    p50/p95 and blocks degraded at the default 50 ms budget. The copies are dropped afterwards.
    """
    import psycopg

    template = urlsplit(url).path.lstrip("/")
    with _template_copies(url, ["live_on", "live_off"]) as (on, off):
        urls = {"on": on, "off": off}
        for mode, copy in urls.items():
            with psycopg.connect(copy, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
                for index in ("turns_fts", "memories_fts"):
                    conn.execute(f"ALTER INDEX {index} SET (fastupdate = {mode})")
        mems = {mode: Memory(copy, namespace="bench") for mode, copy in urls.items()}
        rng = random.Random(17)
        capture_ms: dict[str, list[float]] = {"on": [], "off": []}
        for s in range(n_turns // 20):
            turns = _chat(rng)
            for mode in (["on", "off"] if s % 2 else ["off", "on"]):
                t = time.perf_counter()
                mems[mode].capture(f"live{s}", turns, extract=False)
                capture_ms[mode].append((time.perf_counter() - t) * 1000)
        pending = {}
        for mode, copy in urls.items():
            with psycopg.connect(copy, autocommit=True) as conn:
                pending[mode] = conn.execute("SELECT pending_pages FROM pgstatginindex('turns_fts')").fetchone()[0]
        qs = queries(n_queries)
        for q in qs[:20]:
            for mem in mems.values():
                mem.context([{"role": "user", "content": q}], budget=5, time_budget_ms=None)
        lat: dict[str, list[float]] = {"on": [], "off": []}
        degraded = {"on": 0, "off": 0}
        for i, q in enumerate(qs):
            window = [{"role": "user", "content": q}]
            for mode in (["on", "off"] if i % 2 else ["off", "on"]):
                t = time.perf_counter()
                mems[mode].context(window, budget=5, time_budget_ms=None)
                lat[mode].append((time.perf_counter() - t) * 1000)
                degraded[mode] += mems[mode].context(window, budget=5).degraded_reason is not None
        print(f"live store: {n_turns} turns captured into a copy of {template}, 20 a capture; {n_queries} queries")
        print(f"{'fastupdate':>10} | {'capture p50':>11} {'p95':>8} | {'pending pages':>13} | "
              f"{'context p50':>11} {'p95':>8} {'degraded@50ms':>13}")
        for mode in ("on", "off"):
            print(f"{mode:>10} | {pct(capture_ms[mode], 50):>9.2f}ms {pct(capture_ms[mode], 95):>6.2f}ms | "
                  f"{pending[mode]:>13} | {pct(lat[mode], 50):>9.2f}ms {pct(lat[mode], 95):>6.2f}ms "
                  f"{degraded[mode]:>13}")
        for mem in mems.values():
            mem.close()
    return 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--pastes", type=int, default=0, help="compare with a copy holding this many 5 MB pastes")
    ap.add_argument("--engine", choices=["sqlite", "postgres"], default="sqlite", help="for --pastes")
    ap.add_argument("--smoke", action="store_true", help="2,000 items and 20 queries, for the tests")
    ap.add_argument("--store", help="time an existing store (a path or a PostgreSQL URL built by this benchmark)")
    ap.add_argument("--against", metavar="CHECKOUT|REV",
                    help="also time another code beside this tree's, alternating: a checkout directory (e.g. ../main), "
                         "or with --store a git revision")
    ap.add_argument("--explain", action="store_true", help="with --store: EXPLAIN the slowest query's statements")
    ap.add_argument("--live", type=int, metavar="TURNS",
                    help="with --store (PostgreSQL): capture TURNS turns into two copies, GIN fastupdate on and off, "
                         "and time both")
    ap.add_argument("--busy", type=int, default=0, metavar="TURNS",
                    help="with --store (PostgreSQL) and --against: time namespace bench of a copy where another "
                         "namespace then wrote TURNS turns, its newest pages not yet vacuumed")
    ap.add_argument("--rounds", type=int, default=1, metavar="R",
                    help="with --store and --against: run the comparison R times and print each round's figures")
    ap.add_argument("--cold", type=int, default=0, metavar="K",
                    help="with --store: K new processes per tree, each timing its first two context() calls at the "
                         "default budget")
    ap.add_argument("--present", action="store_true",
                    help="with --cold: every process's first question is a present-tense one, the slowest kind")
    ap.add_argument("--second-neighbours", type=float, default=0.0, metavar="S",
                    help="this tree's context() with tuning.SECOND_NEIGHBOUR_SHARE = S, 'before' with it off")
    ap.add_argument("--instances", type=float, default=0.0, metavar="W",
                    help="set INSTANCE_WEIGHT to W for this tree's context() and add listing questions to the mix")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.queries = [2_000], 20
    if args.busy and not (args.store and args.store.startswith("postgresql://")) or args.busy and (args.cold or args.live):
        ap.error("--busy times a PostgreSQL --store beside --against; it does not combine with --cold or --live")
    if args.store and args.live:
        sys.exit(run_live(args.store, args.live, args.queries))
    if args.store and args.cold:
        sys.exit(run_cold(args.store, args.against or "HEAD", args.cold, args.present))
    if args.store:
        sys.exit(run_against(args.store, args.against or "HEAD", args.queries, args.explain, args.rounds, args.busy))
    sys.exit(run_pastes(args.sizes, args.queries, args.pastes, args.engine) if args.pastes
             else run(args.sizes, args.queries, args.against, args.instances, args.second_neighbours))
