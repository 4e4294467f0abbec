"""Deadlines that hold: ``context()`` returns within its budget and ``capture`` within ``store_timeout_s``,
whatever the database does (frozen, stopped, locked, its pool taken, another thread writing).

The bounds asserted here are the budget plus a slack of seconds: what fails is a call that waits
for the database (the old behaviour: 45 s for ``context()`` and 90 s for ``capture`` on a frozen
PostgreSQL, 30 s on a stopped one), not a busy machine. The PostgreSQL fault tests freeze or stop a
throwaway server of their own (``pgtemp.temp_server``), never the shared one.
"""

from __future__ import annotations

import contextvars
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pgtemp import require_postgres, temp_database, temp_server

from tortoise_sdk import Memory
from tortoise_sdk.errors import ConfigError, StoreError, StoreTimeout
from tortoise_sdk.store import open_store
from tortoise_sdk.store.deadline import within

SLACK_S = 3.0  # scheduling on a loaded 2-core machine; every hang this guards against is 10x longer
ASK = [{"role": "user", "content": "what is my dog called?"}]
DOG = [{"role": "user", "content": "my dog is called Biscuit"}, {"role": "assistant", "content": "Biscuit, noted"}]


def timed(fn: Callable[[], Any], give_up_s: float = 60.0) -> tuple[Any, float]:
    """``fn()``'s result and how long it took; a call still waiting after ``give_up_s`` fails the test
    (run on a daemon thread, so a hang is a failure, and the server is thawed, not a stuck suite)."""
    out: list[Any] = []
    started = time.monotonic()
    scope = contextvars.copy_context()  # the caller's deadline.within scope goes along
    worker = threading.Thread(target=lambda: out.append(scope.run(_outcome, fn)), daemon=True)
    worker.start()
    worker.join(give_up_s)
    elapsed = time.monotonic() - started
    if not out:
        pytest.fail(f"still waiting after {give_up_s:g} s")
    ok, value = out[0]
    if not ok:
        raise value
    return value, elapsed


def _outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except BaseException as exc:
        return False, exc


def raises_within(exc_type: type[BaseException], fn: Callable[[], Any]) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(exc_type) as info:
        timed(fn)
    return info.value, time.monotonic() - started


def eventually(fn: Callable[[], Any], *, within_s: float = 60.0) -> Any:
    """``fn()``'s result once it stops raising StoreError (a pool reconnecting after an outage)."""
    stop = time.monotonic() + within_s
    while True:
        try:
            return fn()
        except StoreError:
            if time.monotonic() > stop:
                raise
            time.sleep(0.2)


# -- Memory(store_timeout_s=...) ----------------------------------------------------------------


def test_store_timeout_s_is_a_positive_number_and_reaches_the_store(tmp_path):
    for bad in (0, -1, float("inf"), float("nan"), "5", True):
        with pytest.raises(ConfigError) as info:
            Memory(str(tmp_path / "m.db"), store_timeout_s=bad)
        assert info.value.field == "store_timeout_s"
    assert not (tmp_path / "m.db").exists()
    with Memory(str(tmp_path / "m.db"), store_timeout_s=2.5) as mem:
        assert mem.store.timeout_s == 2.5
    store = open_store(str(tmp_path / "m.db"))
    assert store.timeout_s == 30.0  # the default bound
    with Memory(store=store, store_timeout_s=4) as mem:
        assert mem.store.timeout_s == 4.0


# -- SQLite -----------------------------------------------------------------------------------------


def test_sqlite_context_reads_beside_a_capture_that_holds_the_write_lock(tmp_path):
    """The reflex reads on its own connection: a write transaction held open on another thread of the
    same Memory (a capture in progress) neither blocks it nor shows it uncommitted turns."""
    mem = Memory(str(tmp_path / "m.db"), store_timeout_s=5)
    mem.capture("s1", DOG, extract=False)
    before = mem.context(ASK, time_budget_ms=None)
    assert before.pointers and before.degraded_reason is None
    inside, release = threading.Event(), threading.Event()

    def held_write(c: sqlite3.Connection) -> None:
        c.execute("UPDATE sessions SET updated_at = updated_at")
        inside.set()
        assert release.wait(60)

    writer = threading.Thread(target=mem.store.transaction, args=(held_write,))
    writer.start()
    try:
        assert inside.wait(30)
        # No wall-clock budget: a read that waited for the writer would run into store_timeout_s (5 s)
        # and come back degraded; this one must be the same block as before.
        during = mem.context(ASK, time_budget_ms=None)
        assert during.degraded_reason is None and during.block == before.block
        assert sorted(h.content for h in mem.search("Biscuit")) == sorted(t["content"] for t in DOG)
    finally:
        release.set()
        writer.join(60)
    mem.close()


def test_sqlite_context_keeps_its_budget_while_another_thread_captures_a_10_mb_turn(tmp_path):
    mem = Memory(str(tmp_path / "m.db"))
    mem.capture("s1", DOG, extract=False)
    paste = "\n".join(f"line {i}: build log, compiler warning about unused variable" for i in range(180_000))
    assert len(paste) > 10_000_000
    done = threading.Event()
    failures: list[BaseException] = []

    def capture() -> None:
        try:
            mem.capture("paste", [{"role": "user", "content": paste}], extract=False)
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=capture)
    writer.start()
    blocks = []
    while not done.is_set() or not blocks:
        blocks.append(timed(lambda: mem.context(ASK, time_budget_ms=2000)))
    writer.join(60)
    assert not failures
    for block, elapsed in blocks:
        assert elapsed < 2.0 + SLACK_S
        assert block.degraded_reason is None and block.pointers, block
    assert mem.turns("paste")[0].content == paste
    mem.close()


def test_sqlite_capture_raises_store_timeout_within_its_bound_when_another_process_holds_the_lock(tmp_path):
    path = str(tmp_path / "m.db")
    mem = Memory(path, store_timeout_s=1.5)
    mem.capture("s1", DOG, extract=False)
    other = sqlite3.connect(path, isolation_level=None)  # as another process would, with its own connection
    other.execute("BEGIN IMMEDIATE")
    try:
        exc, elapsed = raises_within(StoreTimeout, lambda: mem.capture("s2", DOG, extract=False))
        assert 1.4 <= elapsed < 1.5 + SLACK_S
        assert "store_timeout_s=1.5s" in str(exc)
        block = mem.context(ASK, time_budget_ms=None)  # reads still work beside the lock
        assert block.pointers and block.degraded_reason is None
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert mem.capture("s2", DOG, extract=False).turns_stored == 2  # nothing half-written before
    mem.close()


def test_memory_within_bounds_the_store_calls_of_a_block_below_store_timeout_s(tmp_path):
    """``Memory.within`` (what the served Claude Code hook bounds each step with): the sooner bound holds."""
    path = str(tmp_path / "m.db")
    mem = Memory(path)  # the default 30 s bound
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with mem.within(0.5):
            _, elapsed = raises_within(StoreTimeout, lambda: mem.capture("s1", DOG, extract=False))
        assert 0.4 <= elapsed < 0.5 + SLACK_S
        with mem.within(5.0), mem.within(0.5):  # nested: the inner, sooner one
            _, elapsed = raises_within(StoreTimeout, lambda: mem.capture("s1", DOG, extract=False))
        assert elapsed < 0.5 + SLACK_S
    finally:
        other.execute("ROLLBACK")
        other.close()
    with mem.within(None):
        assert mem.capture("s1", DOG, extract=False).turns_stored == 2
    mem.close()


def test_async_memory_within_bounds_the_awaited_calls_inside(tmp_path):
    """The awaited call runs on a worker thread that inherits the task's context, so the bound reaches it."""
    import asyncio

    from tortoise_sdk import AsyncMemory

    path = str(tmp_path / "m.db")
    other = sqlite3.connect(path, isolation_level=None)

    async def go() -> float:
        async with AsyncMemory(path) as amem:
            await amem.capture("s0", DOG, extract=False)  # the database exists before the lock
            other.execute("BEGIN IMMEDIATE")
            started = time.monotonic()
            with amem.within(0.5), pytest.raises(StoreTimeout):
                await amem.capture("s1", DOG, extract=False)
            return time.monotonic() - started

    try:
        assert asyncio.run(go()) < 0.5 + SLACK_S
    finally:
        other.execute("ROLLBACK")
        other.close()


# -- PostgreSQL: a server of our own, frozen or stopped -------------------------------------------------


@pytest.fixture
def pg_server():
    require_postgres()
    with temp_server() as server:
        yield server


def test_a_frozen_postgres_never_holds_context_past_its_budget_nor_capture_past_its_bound(pg_server):
    mem = Memory(pg_server.url, namespace="a", store_timeout_s=2)
    mem.capture("s1", DOG, extract=False)
    assert mem.context(ASK, time_budget_ms=None).pointers
    with pg_server.frozen():
        for budget_ms in (300, 300, 50):  # a pooled connection, then the pool waiting to reconnect
            block, elapsed = timed(lambda: mem.context(ASK, time_budget_ms=budget_ms))
            assert block.degraded_reason == "timeout" and not block.block
            assert elapsed < budget_ms / 1000 + SLACK_S
        exc, elapsed = raises_within(StoreTimeout, lambda: mem.capture("s2", DOG, extract=False))
        assert 1.9 <= elapsed < 2 + SLACK_S
        assert "store_timeout_s=2s" in str(exc)
        _, elapsed = raises_within(StoreTimeout, lambda: mem.sessions())
        assert elapsed < 2 + SLACK_S
    # Thawed, the same Memory goes on: nothing was written by the capture that timed out.
    receipt = eventually(lambda: mem.capture("s2", DOG, extract=False))
    assert receipt.turns_stored == 2
    assert [s.session_id for s in mem.sessions()] == ["s1", "s2"]
    assert mem.context(ASK, time_budget_ms=None).pointers
    mem.close()


def test_a_stopped_postgres_gives_store_error_fast_and_the_memory_recovers(pg_server, caplog):
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    mem = Memory(pg_server.url, namespace="a", store_timeout_s=2)
    mem.capture("s1", DOG, extract=False)
    pg_server.stop()
    for _ in range(3):  # a dead pooled connection, then refused reconnections
        block, elapsed = timed(lambda: mem.context(ASK, time_budget_ms=300))
        assert block.degraded_reason == "store_error" and not block.block
        assert elapsed < 0.3 + SLACK_S
    # The server's refusal, named, once the bound has passed with the pool unable to reconnect.
    exc, elapsed = raises_within(StoreError, lambda: mem.capture("s2", DOG, extract=False))
    assert not isinstance(exc, StoreTimeout) and elapsed < 2 + SLACK_S
    assert "cannot connect to PostgreSQL" in str(exc) and "refused" in str(exc)
    # The pool's own warnings about it are kept at DEBUG: the store has said it, once, where it matters.
    pool = [r for r in caplog.records if r.name == "psycopg.pool"]
    assert any("error connecting" in r.getMessage() for r in pool)
    assert [r.getMessage() for r in pool if r.levelno >= logging.WARNING] == []
    pg_server.start()
    # Back at once: no call waits behind a reconnect pause the pool grew while the server was down.
    assert mem.capture("s2", DOG, extract=False).turns_stored == 2
    assert mem.context(ASK, time_budget_ms=None).pointers
    mem.close()


def test_after_a_long_outage_the_first_call_connects_at_once(pg_server):
    # While the server is down the pool's background retries pause longer and longer (1, 2, 4, 8 s...);
    # a call made once it is back must not wait behind that pause.
    mem = Memory(pg_server.url, namespace="a", store_timeout_s=2)
    mem.capture("s1", DOG, extract=False)
    pg_server.stop()
    down_until = time.monotonic() + 8
    while time.monotonic() < down_until:
        assert mem.context(ASK, time_budget_ms=300).degraded_reason == "store_error"
        time.sleep(0.5)
    pg_server.start()
    receipt, elapsed = timed(lambda: mem.capture("s2", DOG, extract=False))
    assert receipt.turns_stored == 2 and elapsed < 2
    mem.close()


def test_a_call_that_began_waiting_in_an_outage_is_served_when_it_ends(pg_server):
    # The pool stops retrying 1 s into an outage; a call still waiting must make it try again.
    from concurrent.futures import ThreadPoolExecutor

    mem = Memory(pg_server.url, namespace="a", store_timeout_s=30)
    mem.capture("s1", DOG, extract=False)
    pg_server.stop()
    for _ in range(2):  # the pooled connections the stop ended are passed over; then the pool gives up
        assert mem.context(ASK, time_budget_ms=300).degraded_reason == "store_error"
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiting = pool.submit(lambda: mem.capture("s2", DOG, extract=False))
        time.sleep(3)
        pg_server.start()
        back = time.monotonic()
        assert waiting.result(timeout=60).turns_stored == 2
    assert time.monotonic() - back < SLACK_S and time.monotonic() - started < 30
    mem.close()


def test_a_restarted_postgres_costs_no_call_an_error(pg_server):
    # Each pooled connection the restart ended used to fail the one call that drew it.
    mem = Memory(pg_server.url, namespace="a", store_timeout_s=5)
    mem.capture("s1", DOG, extract=False)
    assert mem.context(ASK, time_budget_ms=None).pointers  # the block reads on two pooled connections
    pg_server.stop()
    pg_server.start()
    block = mem.context(ASK, time_budget_ms=2000)
    assert block.degraded_reason is None and block.pointers
    assert mem.capture("s2", DOG, extract=False).turns_stored == 2
    assert [s.session_id for s in mem.sessions()] == ["s1", "s2"]
    mem.close()


# -- PostgreSQL: a live server that is slow, locked or busy ------------------------------------------------


@pytest.fixture
def pg_url():
    require_postgres()
    with temp_database("tortoise_deadlines") as url:
        yield url


def _active(url: str, query_like: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                            " AND state = 'active' AND query LIKE %s AND pid <> pg_backend_pid()",
                            (query_like,)).fetchone()[0]


def test_a_slow_statement_is_cancelled_by_the_server_at_the_deadline(pg_url):
    store = open_store(pg_url)
    try:
        with within(0.5):
            _, elapsed = raises_within(StoreTimeout, lambda: store._rows("SELECT pg_sleep(20)", ()))
        assert 0.45 <= elapsed < 0.5 + SLACK_S
        stop = time.monotonic() + 10
        while _active(pg_url, "SELECT pg_sleep(20)%") and time.monotonic() < stop:
            time.sleep(0.05)
        assert _active(pg_url, "SELECT pg_sleep(20)%") == 0  # the server stopped working on it too
        assert store._rows("SELECT 1", ()) == [(1,)]  # and the store goes on
        # Outside the scope the store's own bound is back: a statement may take longer than 0.5 s.
        assert store._rows("SELECT pg_sleep(0.8), 2", ())[0][1] == 2
    finally:
        store.close()


def test_a_capture_waiting_on_a_row_lock_raises_store_timeout_and_the_waiting_stops(pg_url):
    import psycopg

    mem = Memory(pg_url, namespace="a", store_timeout_s=1.5)
    mem.capture("s1", DOG, extract=False)
    with psycopg.connect(pg_url) as holder:  # another client holding the session row (a long transaction)
        holder.execute("SELECT 1 FROM sessions WHERE namespace = 'a' AND session_id = 's1' FOR UPDATE")
        exc, elapsed = raises_within(StoreTimeout, lambda: mem.capture("s1", DOG[:1] + [DOG[1], DOG[0]],
                                                                          extract=False))
        assert 1.4 <= elapsed < 1.5 + SLACK_S
        assert "store_timeout_s=1.5s" in str(exc)
        stop = time.monotonic() + 10
        while _active(pg_url, "%FOR UPDATE%") and time.monotonic() < stop:
            time.sleep(0.05)
        assert _active(pg_url, "%FOR UPDATE%") == 0
        assert mem.context(ASK, time_budget_ms=None).pointers  # reads are not blocked by the row lock
        holder.rollback()
    assert mem.capture("s1", DOG[:1] + [DOG[1], DOG[0]], extract=False).turns_stored == 1
    mem.close()


def test_connections_the_server_ended_are_passed_over_not_handed_out(pg_url):
    # pg_terminate_backend, an idle_session_timeout or a proxy's idle cut end pooled connections too.
    import psycopg

    from tortoise_sdk.store.postgres import PostgresStore

    store = PostgresStore(pg_url, max_size=3)
    try:
        with store.read() as a, store.read() as b, store.read() as c:  # the pool holds three
            ended = {x.info.backend_pid for x in (a, b, c)}
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(ended),))
            stop = time.monotonic() + 10
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                (list(ended),)).fetchone()[0] and time.monotonic() < stop:
                time.sleep(0.05)
        for _ in range(4):
            assert store._rows("SELECT 1", ()) == [(1,)]
        with store.read() as conn:
            assert conn.info.backend_pid not in ended
    finally:
        store.close()


def test_a_process_with_many_open_files_keeps_its_pooled_connections(pg_url):
    # select() refuses a descriptor past 1,024: each live connection was taken as ended and replaced.
    import os
    import resource

    from tortoise_sdk.store.postgres import PostgresStore
    from tortoise_sdk.store.postgres.deadline import dropped

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1_200:
        pytest.skip("needs a limit of at least 1,200 open files (ulimit -n)")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1_100)]
    store = PostgresStore(pg_url, max_size=2)
    try:
        pids = {store._rows("SELECT pg_backend_pid()", ())[0][0] for _ in range(20)}
        with store.read() as conn:
            assert conn.pgconn.socket > 1_024 and not dropped(conn)
        assert len(pids) <= 2  # the pool's own (max_size), not one a call
    finally:
        store.close()
        for fd in held:
            os.close(fd)


def test_the_pool_wait_is_bounded_by_the_budget(pg_url):
    from tortoise_sdk.store.postgres import PostgresStore

    store = PostgresStore(pg_url, min_size=1, max_size=1, timeout_s=1.5)
    mem = Memory(store=store, namespace=f"ns_{uuid.uuid4().hex[:8]}")
    mem.capture("s1", DOG, extract=False)
    with store.read():  # the pool's only connection, taken
        block, elapsed = timed(lambda: mem.context(ASK, time_budget_ms=200))
        assert block.degraded_reason == "timeout" and elapsed < 0.2 + SLACK_S
        exc, elapsed = raises_within(StoreTimeout, lambda: mem.capture("s2", DOG, extract=False))
        assert 1.4 <= elapsed < 1.5 + SLACK_S and "waiting for a pooled connection" in str(exc)
    assert mem.context(ASK, time_budget_ms=None).pointers
    mem.close()


_FROZEN_WORKER = """
import sys, time
from pathlib import Path
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.store.postgres import PostgresStore
from tortoise_sdk.store.plan import ExtractionPlan, Fence, ItemPlan

url, ns, flag = sys.argv[1:4]
store = PostgresStore(url, timeout_s=2)
job = store.lease_job(ns, lease_s=1, max_attempts=3)

def finalize(result):
    Path(flag).write_text(job.job_id)  # inside the S5 transaction, holding the job's row lock
    time.sleep(120)
    return ExtractionReport(status="ok")

plan = ExtractionPlan(session_id="s1", extraction_id="x-frozen", valid_at=None,
                      items=[ItemPlan("point", "Maya works at Acme")])
store.write_extraction(ns, plan, finalize=finalize, fence=Fence(job.job_id, job.revision))
"""


def test_a_frozen_workers_transaction_ends_at_its_bound_and_its_job_is_leased_again(pg_url, tmp_path):
    """A worker frozen mid-write (SIGSTOP: its socket stays open, so its backend never notices) held
    the job's row lock for good, and ``FOR UPDATE SKIP LOCKED`` skipped the job: the server now ends
    a transaction left idle past the store's bound (idle_in_transaction_session_timeout)."""
    import os
    import signal
    import subprocess
    import sys

    from tortoise_sdk.capture import prepare_capture

    store = open_store(pg_url)
    proc = None
    try:
        store.capture("a", prepare_capture("s1", DOG, max_turns=10))
        job = store.enqueue_job("a", "s1")
        flag = tmp_path / "inside"
        proc = subprocess.Popen([sys.executable, "-c", _FROZEN_WORKER, pg_url, "a", str(flag)])
        give_up = time.monotonic() + 60
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < give_up, "the worker did not reach its write"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)  # our own child, by its PID
        frozen_at = time.monotonic()
        again = None
        while again is None and time.monotonic() < frozen_at + 2 + SLACK_S + 10:
            again = store.lease_job("a", lease_s=30, max_attempts=3)  # its 1 s lease is long gone
            time.sleep(0.05)
        assert again is not None and (again.job_id, again.revision) == (job.job_id, 2)
        assert time.monotonic() - frozen_at < 2 + SLACK_S + 10
        assert store.memories("a") == []  # the frozen write committed nothing
    finally:
        if proc is not None:
            proc.kill()  # SIGKILL ends a stopped process too
            proc.wait(timeout=30)
        store.close()
