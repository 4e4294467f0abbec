"""``Memory.stats`` (``tortoise stats``, ``GET /stats``) counts one namespace in SQL, on SQLite and PostgreSQL.

It used to list the namespace's sessions, entities, sub-agent rows and jobs to count them, and to count
every namespace of the store to report one: on a store of 100,000 turns that was slow. The figures must
not move: each test compares them with the ones the old code gave (``old_stats``) on a store that mixes
namespaces, sessions of several lengths, superseded memories, entities, sub-agent rows and jobs of each
status.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from tortoise_sdk import Memory
from tortoise_sdk.models import NamespaceStats
from tortoise_sdk.store import Store
from tortoise_sdk.store.plan import Fence

EXCERPT = Path(__file__).parent / "data" / "claude_code_subagent_excerpt.jsonl"
#: The store's reads that load rows: ``stats`` must call none of them.
ROW_READS = ("sessions", "namespaces", "entities", "subagents", "jobs", "extraction_state", "turns", "memories")


def old_stats(mem: Memory) -> NamespaceStats:
    """The figures as ``Memory.stats`` computed them before it counted in SQL (rows loaded and counted here)."""
    found = mem.sessions()
    held = next((n for n in mem.namespaces() if n.name == mem.namespace), None)
    return NamespaceStats(namespace=mem.namespace, sessions=len(found), turns=sum(s.turn_count for s in found),
                          memories=0 if held is None else held.memories, entities=len(mem.entities()),
                          subagents=len(mem.subagents()), subagent_counters=mem.subagent_counters(),
                          jobs=dict(Counter(j.status for j in mem.jobs())))


def _turns(n: int, word: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{word} turn {i} of the talk"}
            for i in range(n)]


def mixed_store(store: Store) -> dict[str, str]:
    """Namespaces of every shape, each name unique to the test (the PostgreSQL database is the module's):
    ``full`` (sessions of 1, 4 and 7 turns, an ingested transcript with sub-agent rows, remembered and
    corrected memories, entities, jobs pending, running, done and failed), ``other`` (more of the same, so
    a count that crosses namespaces shows), ``notes`` (only a remembered memory) and ``empty``."""
    tag = uuid.uuid4().hex[:8]
    names = {k: f"{k}-{tag}" for k in ("full", "other", "notes", "empty")}
    full = Memory(store=store, namespace=names["full"])
    for sid, n in (("s1", 1), ("s2", 4), ("s3", 7)):
        full.capture(sid, _turns(n, "kestrel"), session_date="2026-01-0" + sid[1])
    full.ingest(EXCERPT)
    kept = full.remember("Maya works at Helix Health", about={"Maya": "person", "Helix Health": "organization"})
    full.remember("Maya has a cat called Pixel", about=["Maya", "Pixel"])
    full.correct_memory(kept.id, "Maya works at Northwind Labs", about={"Maya": "person", "Northwind Labs": "organization"})
    for sid in ("s1", "s2", "s3"):
        store.enqueue_job(names["full"], sid)
    done = store.lease_job(names["full"], lease_s=60, max_attempts=3, session_id="s1", due_only=False)
    failed = store.lease_job(names["full"], lease_s=60, max_attempts=3, session_id="s2", due_only=False)
    assert done is not None and failed is not None
    store.finish_job(Fence(done.job_id, done.revision))
    store.fail_job(Fence(failed.job_id, failed.revision), "the model was down", max_attempts=1)
    assert store.lease_job(names["full"], lease_s=60, max_attempts=3, session_id="s3", due_only=False)  # running

    other = Memory(store=store, namespace=names["other"])
    for sid, n in (("s1", 2), ("s9", 5)):
        other.capture(sid, _turns(n, "heron"))
    other.remember("Sam lives in Lisbon", about=["Sam"])
    store.enqueue_job(names["other"], "s9")
    Memory(store=store, namespace=names["notes"]).remember("Use tabs in Makefiles")
    return names


def test_stats_gives_the_old_figures_without_reading_rows(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    names = mixed_store(store)
    expected = {ns: old_stats(Memory(store=store, namespace=ns)) for ns in names.values()}
    full = expected[names["full"]]
    # The store is as mixed as meant: every figure of ``full`` differs from ``other``'s, and every job status is there.
    assert (full.sessions, full.turns, full.memories, full.entities, full.subagents) == (5, 17, 2, 4, 1)
    assert full.jobs == {"done": 1, "failed": 1, "running": 1}
    assert expected[names["other"]].jobs == {"pending": 1} and expected[names["empty"]].turns == 0
    for read in ROW_READS:  # from here on a row read fails the test: stats counts in the database
        monkeypatch.setattr(store, read, _refused(read))
    for ns, want in expected.items():
        got = Memory(store=store, namespace=ns).stats()
        assert got == want, ns
        assert got.model_dump(mode="json") == want.model_dump(mode="json"), ns


def _refused(name: str) -> Any:
    def read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"stats loaded rows: store.{name}{args}")
    return read


def test_each_count_reads_only_its_namespace_through_an_index(tmp_path: Path) -> None:
    # Not the whole table, the other namespaces' rows too (the jobs table, a row per extraction run and not per
    # turn, has no index by namespace: its count is left a scan, as ``jobs()`` was).
    from tortoise_sdk.store.counts import COUNTS_SQL

    db = str(tmp_path / "m.db")
    Memory(db).close()  # the schema, migrated
    with sqlite3.connect(db) as c:
        plan = [row[-1] for row in c.execute("EXPLAIN QUERY PLAN " + COUNTS_SQL.format(p="?"), ("x",) * 5)]
    searched = {table for line in plan for table in ("sessions", "turns", "memories", "entities", "subagent_contexts")
                if line.startswith(f"SEARCH {table} ") and "(namespace=?" in line}
    assert searched == {"sessions", "turns", "memories", "entities", "subagent_contexts"}, plan
    assert [line for line in plan if line.startswith("SCAN ")] == ["SCAN CONSTANT ROW"], plan


def test_the_stats_command_counts_without_listing_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # ``tortoise stats`` asked whether the namespace was empty (to name the others) by listing its sessions.
    from tortoise_sdk.store.sqlite import SQLiteStore

    db = str(tmp_path / "m.db")
    with Memory(db, namespace="work") as mem:
        names = mixed_store(mem.store)
        expected = old_stats(Memory(store=mem.store, namespace=names["full"])).model_dump(mode="json")
    for read in ROW_READS[:3]:
        monkeypatch.setattr(SQLiteStore, read, _refused(read))
    code, out, err = run_cli(capsys, "--db", db, "--namespace", names["full"], "stats", "--json")
    assert (code, err) == (0, "") and json.loads(out) == expected
    monkeypatch.undo()
    # An empty namespace is still said to be empty, with the namespaces that hold data named.
    code, out, err = run_cli(capsys, "--db", db, "--namespace", names["empty"], "stats")
    assert code == 0 and f"namespace {names['empty']!r} is empty; data is in: " in err and names["full"] in err
    code, out, err = run_cli(capsys, "--db", db, "--namespace", names["notes"], "stats")
    assert (code, err) == (0, "") and "1 live memory(ies)" in out
