"""The embedded store: pragmas, migrations, crash atomicity, concurrent writers, FTS sync."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk import Memory
from tortoise_sdk.store.sqlite.migrations import SQLITE_MIGRATIONS, migrate_sqlite
from tortoise_sdk.store.sqlite import SQLiteStore

LATEST = SQLITE_MIGRATIONS[-1].version


def test_pragmas_wal_foreign_keys_busy_timeout(tmp_path):
    store = SQLiteStore(tmp_path / "m.db")
    with store.read() as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert c.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert c.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    store.close()


def test_migrations_twice_change_nothing(tmp_path):
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    assert store.schema_version() == LATEST
    with store.read() as c:
        schema = c.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    assert store.migrate() == []
    store.close()
    reopened = SQLiteStore(path)
    with reopened.read() as c:
        assert c.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall() == schema
        assert c.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == len(SQLITE_MIGRATIONS)
    reopened.close()


def test_opening_an_older_database_upgrades_it_and_keeps_its_data(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate_sqlite(conn, SQLITE_MIGRATIONS[:1]) == [1]
    conn.execute("INSERT INTO sessions VALUES ('ns', 's1', NULL, '2024-01-01T00:00:00', '2024-01-01T00:00:00')")
    conn.execute(
        "INSERT INTO turns (turn_id, namespace, session_id, idx, role, content, content_hash, created_at)"
        " VALUES ('t_old', 'ns', 's1', 0, 'user', 'an old turn about gardening', 'h', '2024-01-01T00:00:00')"
    )
    conn.execute("INSERT INTO turns_fts (rowid, content, name) SELECT rowid, content, name FROM turns")
    conn.close()
    with Memory(str(path), namespace="ns") as m:
        assert m.store.schema_version() == LATEST
        assert [h.turn_id for h in m.search("gardening")] == ["t_old"]


def test_fts_index_stays_in_sync(tmp_path):
    with Memory(str(tmp_path / "m.db")) as m:
        m.capture("s1", [{"role": "user", "content": f"turn number {i} about kayaks"} for i in range(50)])
        with m.store.read() as c:
            c.execute("INSERT INTO turns_fts (turns_fts) VALUES ('integrity-check')")
            n_fts = c.execute("SELECT COUNT(*) FROM turns_fts WHERE turns_fts MATCH 'kayak'").fetchone()[0]
        assert n_fts == 50


_WRITER = textwrap.dedent(
    """
    import sys
    from tortoise_sdk import Memory
    path, worker, sessions, turns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with Memory(path, namespace="load") as m:
        for s in range(sessions):
            m.capture(f"{worker}-{s}", [{"role": "user", "content": f"{worker} {s} {i} lorem ipsum"} for i in range(turns)],
                      idempotency_key=f"{worker}-{s}")
    print("ok")
    """
)


def test_four_processes_capture_concurrently_and_lose_nothing(tmp_path):
    path = str(tmp_path / "m.db")
    SQLiteStore(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, path, f"w{w}", "40", "25"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "locked" not in err
    with Memory(path, namespace="load") as m:
        sessions = m.sessions()
        assert len(sessions) == 160
        assert sum(s.turn_count for s in sessions) == 4 * 40 * 25
        assert len(m.receipts()) == 160


_CRASHER = textwrap.dedent(
    """
    import sys
    from tortoise_sdk import Memory
    with Memory(sys.argv[1], namespace="crash") as m:
        print("ready", flush=True)
        for s in range(10_000):
            m.capture(f"s{s}", [{"role": "user", "content": f"turn {i} of session {s} " * 20} for i in range(2_000)])
    """
)


def test_kill_9_mid_capture_leaves_each_call_all_or_nothing(tmp_path):
    path = str(tmp_path / "m.db")
    p = subprocess.Popen([sys.executable, "-c", _CRASHER, path], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with Memory(path, namespace="crash") as m:
        with m.store.read() as c:
            assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            counts = c.execute("SELECT session_id, COUNT(*) FROM turns GROUP BY session_id").fetchall()
            n_receipts = c.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
        sessions = m.sessions()
        assert counts, "the writer was killed before committing anything; raise the sleep"
        assert {n for _, n in counts} == {2_000}
        assert len(sessions) == len(counts) == n_receipts
        # the store still accepts writes after the crash
        assert m.capture("after", [{"role": "user", "content": "still works"}]).turns_stored == 1


def test_receipt_body_round_trips(tmp_path):
    with Memory(str(tmp_path / "m.db")) as m:
        r = m.capture("s1", [{"role": "user", "content": "x"}])
        with m.store.read() as c:
            body = json.loads(c.execute("SELECT body FROM receipts").fetchone()[0])
        assert body["receipt_id"] == r.receipt_id and body["turns_stored"] == 1


# -- memory ranking: FTS5's bm25() with the namespace's counts ------------------------------------

_MEM_WORDS = ["kayak", "kayaking", "trip", "lake", "Café", "cafe", "new", "york", "ha", "\ue000", "x"]
_mem_texts = st.lists(st.sampled_from(_MEM_WORDS), max_size=12).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(_mem_texts, _mem_texts, _mem_texts, st.sampled_from(["live", "superseded"])),
                     min_size=1, max_size=12),
       long_row=st.booleans(),
       phrases=st.lists(st.sampled_from(["kayak", "Kayaking", "trip", "new york", "cafe", "\ue000", "zzz", "x"]),
                        min_size=1, max_size=4))
def test_memory_bm25_of_a_lone_namespace_equals_fts5_bm25(rows, long_row, phrases):
    from tortoise_sdk.store.sqlite.ranking import memory_bm25

    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE memories (namespace TEXT, status TEXT)")
    c.execute("CREATE VIRTUAL TABLE memories_fts USING fts5 (content, search_keys, entities,"
              " tokenize='porter unicode61 remove_diacritics 2')")
    if long_row:  # sizes of 128 tokens and more are multi-byte varints in memories_fts_docsize
        rows = [*rows, ("kayak " * 150 + "trip", "lake " * 130, "new york", "live")]
    for content, keys, names, status in rows:
        rid = c.execute("INSERT INTO memories VALUES ('b', ?)", (status,)).lastrowid
        c.execute("INSERT INTO memories_fts (rowid, content, search_keys, entities) VALUES (?, ?, ?, ?)",
                  (rid, content, keys, names))
    match = " OR ".join('"' + p + '"' for p in phrases)
    expected = c.execute(
        "SELECT m.rowid, -bm25(memories_fts, 1.0, 0.8, 0.6) AS s FROM memories_fts JOIN memories m"
        " ON m.rowid = memories_fts.rowid WHERE memories_fts MATCH ? AND m.status = 'live' ORDER BY s DESC, m.rowid",
        (match,)).fetchall()
    got = dict(memory_bm25(c, "b", phrases, ("live",), k=100))
    assert set(got) == {r for r, _ in expected}
    assert all(abs(got[r] - s) <= 1e-9 * max(1.0, abs(s)) for r, s in expected)


# -- capture cost: linear in the batch ------------------------------------------------------------


def _capture_steps(tmp_path, n_turns: int) -> int:
    """SQLite VM steps (a deterministic count, not a time) of one capture_many of ``n_turns`` turns."""
    from tortoise_sdk.capture import prepare_capture

    store = SQLiteStore(tmp_path / f"steps{n_turns}.db", timeout_s=None)  # no deadline handler: ours counts
    requests = [prepare_capture(f"s{s}", [{"role": "user", "content": f"turn {s}.{i} about kayak trip number {i}"}
                                          for i in range(50)], max_turns=5000) for s in range(n_turns // 50)]
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(count, 100)
    store.capture_many("ns", requests)
    store.close()
    return steps[0]


def test_one_capture_many_costs_steps_linear_in_its_size(tmp_path):
    """Four times the turns in one call cost at most five times the work (the per-row grouped join cost 16x)."""
    small, large = _capture_steps(tmp_path, 1_000), _capture_steps(tmp_path, 4_000)
    assert large <= 5 * small, (small, large)
