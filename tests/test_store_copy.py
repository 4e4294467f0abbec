"""`tortoise migrate-store`: a SQLite memory copied into PostgreSQL is the same memory, row for row."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from pgtemp import require_postgres, temp_database

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.cli import main
from tortoise_sdk.errors import ConfigError
from tortoise_sdk.memory import Memory
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.store import open_store
from tortoise_sdk.store.copy import copy_store
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, Fence, ItemPlan, RetractionPlan, SourcePlan, Window

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def pg_url():
    require_postgres()
    with temp_database("tortoise_copy") as url:
        yield url


def _req(session_id, turns, **kw):
    turns = [t if isinstance(t, dict) else {"role": "user", "content": t} for t in turns]
    return prepare_capture(session_id, turns, max_turns=5000, **kw)


def _finalize(result):
    return ExtractionReport(status="ok", counts=dict(result.counts), outcomes=dict(result.outcomes))


def _populate(path: str) -> None:
    store = open_store(path)
    for ns in ("alice", "bob"):
        r1 = store.capture(ns, _req("s1", [
            {"role": "user", "name": "Maya", "content": f"{ns}: I started at Acme — naïve café ☕", "id": "m1",
             "timestamp": "2024-03-01T12:00:00Z", "metadata": {"k": [1, 2.5, None], "ü": "x"}},
            {"role": "assistant", "content": "Congrats!\nMultiline\ttext"},
        ], session_date="2024-03-01T12:00:00", idempotency_key="key-1"))
        store.capture(ns, _req("s2", ["I adopted a cat named Miso", "I moved to Lisbon"]))
        store.capture_many(ns, [_req("s3", ["batch one"]), _req("s4", [{"role": "tool", "content": "{}"}])])
        store.save_receipt(ns, r1.model_copy(update={"extraction": ExtractionReport(status="queued", reason="q")}))
        first = store.write_extraction(ns, ExtractionPlan(
            session_id="s1", extraction_id=f"x1-{ns}", valid_at=T0, receipt=r1,
            window=Window(start=0, end=1, base=-1, prompts_sha="sha-1"),
            entities=[EntityPlan("Maya", "person", "the user"), EntityPlan("Acme", "org")],
            items=[ItemPlan("point", "Maya works at Acme", about=("Maya", "Acme"), search_keys=("job",),
                            sources=(SourcePlan(r1.turn_ids[0], "started at Acme"),)),
                   ItemPlan("event", "Maya adopted Miso", about=("Maya",), when="2024-02"),
                   ItemPlan("point", "Maya lives in Porto")]), finalize=_finalize)
        store.write_extraction(ns, ExtractionPlan(
            session_id="s2", extraction_id=f"x2-{ns}", valid_at=T0 + timedelta(days=3),
            items=[ItemPlan("point", "Maya works at Globex", about=("Maya",), supersedes=first.memory_ids[0])],
            retractions=[RetractionPlan("Maya lives in Porto")]), finalize=_finalize)
        done = store.enqueue_job(ns, "s1", r1.receipt_id)
        lease = store.lease_job(ns, lease_s=60, max_attempts=3)
        assert lease.job_id == done.job_id
        store.finish_job(Fence(lease.job_id, lease.revision))
        store.enqueue_job(ns, "s2")
        failing = store.lease_job(ns, lease_s=60, max_attempts=1)
        store.fail_job(Fence(failing.job_id, failing.revision), "boom", max_attempts=1)
        store.enqueue_job(ns, "s3", waiting_turns=1, due_after_turns=20, idle_s=300)  # a batch still filling
        for frame in (
            _frame("call-1", tool_status="running", is_async=True, observed_at=T0),
            _frame("call-1", tool_status="completed", total_tokens=1200, observed_at=T0 + timedelta(seconds=5)),
            _frame("call-2", turn_id="m1", subagent_type="Explore", observed_at=T0 + timedelta(seconds=1)),
        ):
            store.upsert_subagent(ns, frame, now=T0 + timedelta(seconds=9), increments={"anomalous_value": 1})
        saved = store.put_cursor(ns, "claude-code:/tmp/s.jsonl", {"offset": 120, "tail": "ab"}, 0)
        store.put_cursor(ns, saved.name, {"offset": 240, "tail": "cd"}, saved.revision)
    store.close()


def _frame(call: str, **kw):
    from tortoise_sdk.subagents import NormalizedFrame

    fields = dict(session_id="s1", agent_execution_id="exec-1", tool_call_id=call, turn_id=None,
                  parent_tool_call_id=None, subagent_type=None, description=None, agent_id=None,
                  child_session_id=None, model=None, agent_status=None, tool_status=None, is_async=None,
                  total_tokens=None, tool_use_count=None, duration_ms=None, source="live")
    return NormalizedFrame(**{**fields, **kw})


def _pk_order(table: str) -> str:
    return {"sessions": "namespace, session_id", "turns": "turn_id", "receipts": "receipt_id",
            "entities": "entity_id", "memories": "memory_id", "memory_entities": "memory_id, entity_id",
            "provenance": "memory_id, turn_id", "extractions": "extraction_id", "jobs": "job_id",
            "subagent_counters": "namespace, name", "cursors": "namespace, name",
            "extraction_state": "namespace, session_id", "vectors": "namespace, kind, item_id",
            "entity_aliases": "namespace, norm_alias, entity_id"}.get(table, "id")


def _norm(value):
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return value


def _sqlite_value(value, like):
    if isinstance(like, datetime) and isinstance(value, str):
        dt = datetime.fromisoformat(value)
        return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    return value


def test_migrate_store_copies_every_row_of_every_table(tmp_path, pg_url, capsys):
    src = str(tmp_path / "memory.db")
    _populate(src)
    assert main(["migrate-store", src, pg_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["namespaces"] == ["alice", "bob"]
    assert report["rows"]["turns"] == 12 and report["rows"]["jobs"] == 6

    import psycopg

    lite = sqlite3.connect(src)
    with psycopg.connect(pg_url) as pg:
        pg.execute("SET TIME ZONE 'UTC'")
        for table, n in report["rows"].items():
            cols = [r[1] for r in lite.execute(f"PRAGMA table_info({table})")]
            src_list = ", ".join(cols)
            dst_list = ", ".join("id" if c == "rowid" else c for c in cols)
            src_rows = lite.execute(f"SELECT {src_list} FROM {table} ORDER BY {_pk_order(table)}").fetchall()
            dst_rows = pg.execute(f"SELECT {dst_list} FROM {table} ORDER BY {_pk_order(table)}").fetchall()
            assert len(src_rows) == len(dst_rows) == n, table
            for s_row, d_row in zip(src_rows, dst_rows):
                assert tuple(_sqlite_value(s, d) for s, d in zip(s_row, d_row)) == tuple(map(_norm, d_row)), table
    lite.close()


def test_the_copied_memory_reads_and_behaves_the_same(tmp_path, pg_url):
    src = str(tmp_path / "memory.db")
    _populate(src)
    copy_store(src, pg_url)
    a, b = open_store(src), open_store(pg_url)
    try:
        for ns in ("alice", "bob"):
            assert a.sessions(ns) == b.sessions(ns)
            for s in a.sessions(ns):
                assert a.turns(ns, s.session_id) == b.turns(ns, s.session_id)
                assert a.turn_metadata(ns, s.session_id) == b.turn_metadata(ns, s.session_id)
            assert a.receipts(ns) == b.receipts(ns)
            assert a.memories(ns, include_superseded=True) == b.memories(ns, include_superseded=True)
            assert a.memories(ns) == b.memories(ns)
            assert a.jobs(ns) == b.jobs(ns) and a.jobs(ns)[-1].due_at is not None
            assert a.extraction_state(ns, "s1") == b.extraction_state(ns, "s1") is not None
            assert a.subagents(ns) == b.subagents(ns) and len(a.subagents(ns)) == 2
            assert a.subagent_counters(ns) == b.subagent_counters(ns)
            assert a.subagent_counters(ns).persisted == 3
            assert a.get_cursor(ns, "claude-code:/tmp/s.jsonl") == b.get_cursor(ns, "claude-code:/tmp/s.jsonl")
            assert b.get_cursor(ns, "claude-code:/tmp/s.jsonl").value == {"offset": 240, "tail": "cd"}
            assert a.find_entities(ns, ["maya", "acme"]) == b.find_entities(ns, ["maya", "acme"])
            assert [m.id for m, _ in a.search_memories(ns, '"globex"', k=5)] == \
                [m.id for m, _ in b.search_memories(ns, '"globex"', k=5)]
            assert [h.turn_id for h in a.search_terms(ns, ["cafe", "miso"], k=5)] == \
                [h.turn_id for h in b.search_terms(ns, ["cafe", "miso"], k=5)]
        # Identity, idempotency and the queue carry on where SQLite left off.
        replay = b.capture("alice", _req("s1", [
            {"role": "user", "name": "Maya", "content": "alice: I started at Acme — naïve café ☕", "id": "m1",
             "timestamp": "2024-03-01T12:00:00Z", "metadata": {"k": [1, 2.5, None], "ü": "x"}},
            {"role": "assistant", "content": "Congrats!\nMultiline\ttext"},
        ], session_date="2024-03-01T12:00:00", idempotency_key="key-1"))
        assert replay.replayed and replay.receipt_id == a.receipts("alice", "s1")[0].receipt_id
        more = b.capture("alice", _req("s2", ["I adopted a cat named Miso", "I moved to Lisbon", "new"]))
        assert [t.index for t in b.turns("alice", "s2")] == [0, 1, 2] and more.turns_stored == 1
        after = b.upsert_subagent("alice", _frame("call-3", observed_at=T0), now=T0)
        # a new row gets an internal id past the copied ones (else the insert would collide) and its own public id
        assert after.id in {r.id for r in b.subagents("alice")} - {r.id for r in a.subagents("alice")}
        assert b.lease_job("alice", lease_s=60, max_attempts=3) is None  # s3's batch is not due yet
        job = b.lease_job("alice", lease_s=60, max_attempts=3, due_only=False)
        assert job is not None and job.session_id == "s3" and job.revision == 1
    finally:
        a.close()
        b.close()


def test_migrate_store_refuses_a_destination_that_holds_data(tmp_path, pg_url, capsys):
    src = str(tmp_path / "memory.db")
    _populate(src)
    copy_store(src, pg_url)
    assert main(["migrate-store", src, pg_url]) == 2
    assert "already holds data" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="SQLite path"):
        copy_store(pg_url, pg_url)
    with pytest.raises(ConfigError, match="no SQLite database"):
        copy_store(str(tmp_path / "missing.db"), pg_url)


def test_the_copy_leaves_planner_statistics_behind(tmp_path, pg_url):
    """Without ANALYZE the reflex's reads on a fresh copy were planned blind until autovacuum came by
    (context() p50 134 ms instead of 44 ms on a 20,000-item copy)."""
    import time

    import psycopg

    src = str(tmp_path / "memory.db")
    lite = open_store(src)
    lite.capture("ns", _req("s1", ["I rented a kayak in Lisbon", "the kayak was red"]))
    lite.close()
    copy_store(src, pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        stop = time.monotonic() + 10
        while True:
            unanalyzed = [r[0] for r in conn.execute(
                "SELECT relname FROM pg_stat_user_tables WHERE relname IN ('turns', 'sessions', 'rank_terms')"
                " AND last_analyze IS NULL ORDER BY relname")]
            if not unanalyzed or time.monotonic() > stop:
                break
            time.sleep(0.1)
    assert unanalyzed == []


def test_the_copy_leaves_no_full_text_index_entries_pending(tmp_path, pg_url):
    """Bulk-inserted rows wait in a GIN index's pending list until a VACUUM, and every full-text
    search scans that list: the copy vacuums, so nothing is pending (gin_clean_pending_list finds
    no page to merge)."""
    import psycopg

    src = str(tmp_path / "memory.db")
    lite = open_store(src)
    lite.capture("ns", _req("s1", [f"I rented kayak number {i} in Lisbon" for i in range(200)]))
    lite.close()
    copy_store(src, pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        gin = [r[0] for r in conn.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'gin'"
            " AND c.relnamespace = current_schema()::regnamespace ORDER BY 1")]
        assert "turns_fts" in gin and "memories_fts" in gin
        pending = {name: conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (name,)).fetchone()[0]
                   for name in gin}
    assert pending == dict.fromkeys(gin, 0)


def test_a_turn_of_megabytes_is_copied_whole_and_ranks_the_same(tmp_path, pg_url):
    src = str(tmp_path / "memory.db")
    paste = "\n".join(f"line {i}: kayak rental log, paddle returned late" for i in range(40_000))  # ~1.7 MB
    big = "\n".join(f"entry {i}: kayak sensor dump, battery low warning" for i in range(110_000))  # ~5 MB
    assert len(paste) > 1_700_000 and len(big) > 5_000_000
    lite = open_store(src)
    lite.capture("ns", _req("s1", ["I rented a kayak in Lisbon", paste, "the kayak was red"]))
    lite.capture("ns", _req("s2", [big]))
    lite.close()
    copy_store(src, pg_url)
    a, b = open_store(src), open_store(pg_url)
    try:
        assert b.turns("ns", "s1") == a.turns("ns", "s1") and b.turns("ns", "s1")[1].content == paste
        big_id = b.turns("ns", "s2")[0].turn_id
        assert Memory(store=b, namespace="ns").expand(big_id).content == big  # returned whole on PostgreSQL
        stems = [s for st in a.analyze(["kayak paddle lisbon red"]) for s in st]
        assert a.term_stats("ns", stems) == b.term_stats("ns", stems) and a.term_stats("ns", stems)[0] == 4
        hits_a, hits_b = (s.search_terms("ns", ["kayak", "red"], k=4) for s in (a, b))
        assert [(h.session_id, h.index) for h in hits_a] == [(h.session_id, h.index) for h in hits_b]
        assert [(h.session_id, h.index) for h in hits_a][:2] == [("s1", 2), ("s1", 0)]  # the pastes rank below
    finally:
        a.close()
        b.close()


def test_migrate_store_piped_to_a_reader_that_goes_away_still_copies(tmp_path, pg_url):
    """Reviewer: `migrate-store SRC DST 2>&1 | head -2` exited 0 with nothing copied: the progress line printed
    inside the copy's transaction raised BrokenPipeError, which rolled it back, and the CLI calls that no error."""
    import os
    import subprocess
    import sys

    src = str(tmp_path / "memory.db")
    _populate(src)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    done = subprocess.run([sys.executable, "-m", "tortoise_sdk.cli", "migrate-store", src, pg_url],
                          stdout=write, stderr=write, timeout=120)
    os.close(write)
    assert done.returncode == 0
    with sqlite3.connect(src) as c:
        turns = c.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
    with Memory(pg_url, namespace="n") as mem:
        assert turns > 0 and mem.store.transaction(lambda c: c.execute("SELECT COUNT(*) FROM turns").fetchone())[0] == turns
