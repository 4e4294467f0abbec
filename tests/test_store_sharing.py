"""One SQLite file shared by several ``Memory`` objects, threads and processes: nothing acknowledged is lost.

A plain ``open()``/``close()`` of the database file by this process drops every POSIX lock the
process holds on it, including those of SQLite's connections: another process closing the
database then believes it is the last user and deletes the WAL under them. These tests run
that scenario (several objects in this process, other processes opening, writing and closing)
and check, from a fresh process, that every acknowledged turn is there and that
``PRAGMA integrity_check`` is ok. No assertion depends on timing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tortoise_sdk import DatabaseReplaced, Memory, StoreError, StreamParseError

OTHER_PROCESS = """
import json, sys
from tortoise_sdk import Memory
path, session, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Memory(path, namespace="other") as m:
    m.search("weather")
    r = m.capture(session, [{"role": "user", "content": f"other process turn {i} about the weather"}
                            for i in range(n)], extract=False)
print(json.dumps(r.turn_ids))
"""


def other_process(path: Path, session: str, n: int = 5) -> list[str]:
    """Open the database in another process, search, capture ``n`` turns, close; the turn ids it acknowledged."""
    done = subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(path), session, str(n)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def stored(path: Path) -> tuple[set[str], str]:
    """The turn ids in the file and its integrity check, read by a fresh process as another user would."""
    script = ("import json, sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
              "print(json.dumps([[r[0] for r in c.execute('SELECT turn_id FROM turns')],"
              " c.execute('PRAGMA integrity_check').fetchone()[0]]))")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    ids, check = json.loads(out.stdout)
    return set(ids), check


def capture(m: Memory, session: str, n: int, tag: str) -> list[str]:
    turns = [{"role": "user", "content": f"{tag} turn {i}: the weather was mild"} for i in range(n)]
    return m.capture(session, turns, extract=False).turn_ids


@pytest.mark.parametrize("objects", [2, 5, 50])
def test_memories_sharing_a_file_in_one_process_lose_nothing_when_other_processes_open_and_close(tmp_path, objects):
    path = tmp_path / "memory.db"
    acked: list[str] = []
    memories = [Memory(str(path), namespace="here")]
    acked += capture(memories[0], "first", 5, "first")
    memories += [Memory(str(path), namespace=f"here{i}") for i in range(1, objects)]
    try:
        for round_ in range(3):
            for i, m in enumerate(memories[:5]):
                acked += capture(m, f"before-{round_}-{i}", 3, "before")
            acked += other_process(path, f"other-{round_}")  # opens, writes and closes while all are open
            errors: list[BaseException] = []

            def write(i: int, m: Memory) -> None:
                try:
                    ids = capture(m, f"after-{round_}-{i}", 2, f"thread {i}")
                    acked.extend(ids)  # list.extend is atomic under the GIL
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(i, m)) for i, m in enumerate(memories)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
    finally:
        for m in memories:
            m.close()
    acked += other_process(path, "last")
    ids, check = stored(path)
    assert check == "ok"
    assert set(acked) - ids == set()
    assert len(acked) == len(set(acked))


def test_a_user_connection_in_the_same_process_keeps_its_locks_when_a_memory_opens(tmp_path):
    """The host's own sqlite3 connection to the file, and then a ``Memory``: the connection's locks stay."""
    path = tmp_path / "memory.db"
    with Memory(str(path), namespace="a") as m:
        acked = capture(m, "s", 3, "a")
    mine = sqlite3.connect(path)
    mine.execute("SELECT count(*) FROM turns").fetchone()  # WAL: holds a shared lock on the file from now on
    try:
        with Memory(str(path), namespace="b") as m:
            acked += capture(m, "s", 3, "b")
            acked += other_process(path, "other")
            acked += capture(m, "s2", 3, "b")
            acked += other_process(path, "other2")
    finally:
        mine.close()
    ids, check = stored(path)
    assert check == "ok" and set(acked) <= ids


# -- the file deleted, moved or replaced under a running process ---------------------------------


def _replace(path: Path, how: str) -> None:
    if how == "deleted":
        path.unlink()
        for side in ("-wal", "-shm"):
            Path(f"{path}{side}").unlink(missing_ok=True)
    elif how == "moved":
        path.rename(path.with_name("moved.db"))
    elif how == "replaced-by-a-copy":  # e.g. a backup restored over it
        copy = path.with_name("copy.db")
        with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
        os.replace(copy, path)
    elif how == "replaced-by-another-memory":
        other = path.with_name("other.db")
        Memory(str(other), namespace="x").close()
        os.replace(other, path)


@pytest.mark.parametrize("how", ["deleted", "moved", "replaced-by-a-copy", "replaced-by-another-memory"])
def test_a_database_file_replaced_under_a_running_process_is_refused_not_acknowledged(tmp_path, how):
    path = tmp_path / "memory.db"
    with Memory(str(path), namespace="n") as m:
        capture(m, "s", 3, "before")
        m.search("weather")  # a read connection exists too
        _replace(path, how)
        with pytest.raises(DatabaseReplaced, match="no longer the file this process opened.*nothing was read or "
                                                   "written: close this Memory and open it again") as raised:
            m.capture("s2", [{"role": "user", "content": "after the file went"}], extract=False)
        assert isinstance(raised.value, StoreError)
        with pytest.raises(DatabaseReplaced):  # every later write too, not only the first
            m.capture("s3", [{"role": "user", "content": "again"}], extract=False)
        with pytest.raises(DatabaseReplaced):  # and reads, which would mix the old file with the new
            m.search("weather")
        block = m.context([{"role": "user", "content": "how was the weather?"}], time_budget_ms=None)
        assert block.block == "" and block.degraded_reason == "store_error"  # context() never raises
    if path.exists():  # what is at the path now never got the refused turns
        ids, check = stored(path)
        assert check == "ok" and len(ids) <= 3


def test_a_reopened_memory_writes_to_the_new_file(tmp_path):
    path = tmp_path / "memory.db"
    with Memory(str(path), namespace="n") as m:
        capture(m, "s", 2, "before")
        _replace(path, "deleted")
    with Memory(str(path), namespace="n") as m:
        acked = capture(m, "s", 2, "after")
    assert stored(path) == (set(acked), "ok")


@pytest.mark.parametrize(("call", "side"), [("follow", ""), ("follow", "-wal"), ("ingest", "-shm"), ("ingest", "")])
def test_the_open_database_given_as_a_transcript_is_not_read(tmp_path, call, side):
    path = tmp_path / "memory.db"
    with Memory(str(path), namespace="n") as m:
        acked = capture(m, "s", 3, "before")
        with pytest.raises(StreamParseError, match="that this process has open, not a transcript; nothing was read"):
            getattr(m, call)(f"{path}{side}")
        acked += other_process(path, "other")  # would delete the WAL had the read dropped the locks
        acked += capture(m, "s2", 3, "after")
        acked += other_process(path, "other2")
    ids, check = stored(path)
    assert check == "ok" and set(acked) <= ids


def test_vacuum_of_a_replaced_file_says_so(tmp_path):
    path = tmp_path / "memory.db"
    with Memory(str(path), namespace="n") as m:
        capture(m, "s", 2, "before")
        _replace(path, "deleted")
        with pytest.raises(DatabaseReplaced):
            m.vacuum()


def test_memories_opened_at_once_by_many_threads_on_a_new_file_all_work(tmp_path):
    path = tmp_path / "memory.db"
    acked: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(20)

    def open_and_write(i: int) -> None:
        try:
            start.wait()
            with Memory(str(path), namespace=f"n{i}") as m:
                acked.extend(capture(m, "s", 2, f"thread {i}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_write, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ids, check = stored(path)
    assert check == "ok" and set(acked) == ids and len(ids) == 40


@pytest.mark.parametrize("side", ["", "-wal", "-shm"])
def test_export_over_the_database_is_refused_and_the_memory_kept(tmp_path, capsys, side):
    from tortoise_sdk.cli import main

    path = tmp_path / "memory.db"
    with Memory(str(path), namespace="n") as m:
        acked = capture(m, "s", 3, "kept")
        other = Memory(str(path), namespace="n")  # holds the -wal and -shm open while export runs
        try:  # (no read of the file here to compare bytes: this process holds it; stored() checks below)
            assert main(["--db", str(path), "--namespace", "n", "export", "--format", "json", f"{path}{side}"]) == 2
            assert "would destroy it; choose another output file" in capsys.readouterr().err
            acked += capture(m, "s2", 2, "after")
        finally:
            other.close()
    assert stored(path) == (set(acked), "ok")


def test_a_relative_path_keeps_its_file_after_the_process_changes_directory(tmp_path, monkeypatch):
    """Read connections open lazily: they resolved a relative path against the new working directory,
    made an empty database there and failed ("no such table"), while writes still went to the first file."""
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    with Memory("memory.db", namespace="n") as m:
        before = capture(m, "s", 2, "before")  # a write only: no read connection is open yet
        monkeypatch.chdir(tmp_path / "sub")
        assert len(m.search("weather")) == 2
        after = capture(m, "s2", 1, "after")
        seen: list[int] = []
        reader = threading.Thread(target=lambda: seen.append(len(m.search("weather"))))  # a new connection
        reader.start()
        reader.join()
        assert seen == [3]
    assert not (tmp_path / "sub" / "memory.db").exists()
    ids, check = stored(tmp_path / "memory.db")
    assert check == "ok" and ids == set(before) | set(after)


def test_a_search_reads_its_statistics_from_one_snapshot_while_another_memory_writes(tmp_path, monkeypatch):
    """A search read the namespace's turn count, then its term counts, in two statements: a turn another
    thread or ``Memory`` committed between them gave a term in more turns than the namespace holds, and
    ``search()`` raised ``ValueError: math domain error`` (seen with 12 threads on one ``Memory``)."""
    from tortoise_sdk.store.sqlite import ranking

    path = tmp_path / "m.db"
    reader, writer = Memory(path, namespace="a"), Memory(path, namespace="a")
    reader.append("s", [{"role": "user", "content": "the kayak trip"}])
    totals = ranking._totals

    def totals_then_a_commit(c, namespace):
        out = totals(c, namespace)
        writer.append("s", [{"role": "user", "content": "another kayak trip"}])
        return out

    monkeypatch.setattr(ranking, "_totals", totals_then_a_commit)
    hits = reader.search("kayak")
    monkeypatch.setattr(ranking, "_totals", totals)
    assert [h.content for h in hits] == ["the kayak trip"]  # the snapshot the search began with
    assert len(reader.search("kayak")) == 2
    reader.close()
    writer.close()


def test_an_in_memory_search_of_a_common_word_reads_inside_its_own_read(monkeypatch):
    """On ``":memory:"`` every read shares the one connection: a search whose rarest word has more postings than
    the budget stems it again (a read inside the search's read), whose ``BEGIN`` met the search's own and raised
    ``StoreError: SQLite read failed: cannot start a transaction within a transaction`` (2,000+ matching turns)."""
    from tortoise_sdk.store.sqlite import ranking

    monkeypatch.setattr(ranking, "POSTINGS_BUDGET", 5)  # 2,000 postings in production: 6 turns stand for them
    mem = Memory(":memory:", namespace="a")
    mem.capture("s", [{"role": "user", "content": f"I adopted cat number {i}"} for i in range(8)])
    hits = mem.search("adopted", k=2)
    assert len(hits) == 2 and all("adopted" in h.content for h in hits)
    with mem.store.read() as c, mem.store.read() as inner:  # the snapshot it reads in is the outer read's
        assert inner is c and c.in_transaction
    assert not c.in_transaction
    mem.close()


def test_a_memory_whose_first_capture_timed_out_captures_the_next(tmp_path, monkeypatch):
    """The write connection's TEMP ranking tables are made in its first capture's transaction: that capture
    timed out (``with mem.within(2.0)`` around a big first import), the rollback took the tables, the connection
    still counted them as made, and every later capture of that Memory raised ``StoreError: SQLite write failed:
    no such table: temp.tortoise_batch`` until the process opened the file again."""
    from tortoise_sdk import StoreTimeout
    from tortoise_sdk.store.sqlite import ranking

    index = ranking.SQLiteRankingMixin.index_turns

    def index_then_time_out(self, c, *args):
        index(self, c, *args)
        raise StoreTimeout("the bound passed while the capture indexed its turns")

    mem = Memory(tmp_path / "m.db", namespace="a")
    monkeypatch.setattr(ranking.SQLiteRankingMixin, "index_turns", index_then_time_out)
    with pytest.raises(StoreTimeout):
        mem.capture("s", [{"role": "user", "content": "the kayak trip"}])
    monkeypatch.setattr(ranking.SQLiteRankingMixin, "index_turns", index)
    assert mem.capture("s", [{"role": "user", "content": "the kayak trip"}]).turns_stored == 1
    assert [h.content for h in mem.search("kayak")] == ["the kayak trip"]
    mem.close()
