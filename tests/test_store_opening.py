"""Opening a database: what is not a tortoise memory is refused untouched; a read-only one opens for reads.

Each refusal is checked byte for byte: the file is identical after the failed open and no
``-wal``/``-shm``/journal file appeared beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgtemp import require_postgres, temp_database

from tortoise_sdk import (
    ForeignDatabase,
    Memory,
    NotADatabase,
    ReadOnlyStore,
    SchemaTooNew,
)
from tortoise_sdk.cli import main
from tortoise_sdk.store.sqlite.migrations import SQLITE_MIGRATIONS

TURNS = [{"role": "user", "content": f"note {i}: the weather on day {i} was mild, and lunch was soup number {i}. " * 3}
         for i in range(60)]
TURNS[40] = {"role": "user", "content": "My kayak is red, and I paddle it on the lake every Sunday."}


@pytest.fixture(scope="module")
def real_db(tmp_path_factory) -> bytes:
    """The bytes of a closed tortoise memory (WAL mode, several pages)."""
    path = tmp_path_factory.mktemp("real") / "real.db"
    with Memory(str(path), namespace="n") as m:
        m.capture("s", TURNS, session_date="2024-05-01")
    data = path.read_bytes()
    assert data[18] == 2 and len(data) >= 8 * 4096  # WAL, and long enough to cut
    return data


def fingerprint(path: Path) -> tuple[str, list[str]]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(p.name for p in path.parent.iterdir())


def refused_untouched(path: Path, error: type[Exception], match: str) -> Exception:
    before = fingerprint(path)
    with pytest.raises(error, match=match) as raised:
        Memory(str(path))
    assert fingerprint(path) == before  # byte-identical, nothing beside it
    return raised.value


# -- not a database, damaged, another application's, newer --------------------------------------


@pytest.mark.parametrize("content", [b"my notes\n" * 200, os.urandom(8192), b"SQLite format 2\x00" + b"\x00" * 200,
                                     b"SQLite format 3\x00" + b"\x00" * 20],
                         ids=["text", "random", "other-magic", "short-header"])
def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path, content):
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    refused_untouched(path, NotADatabase, "is not a SQLite database")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 0.999))
def test_a_truncated_database_is_refused_untouched(tmp_path_factory, real_db, cut):
    path = tmp_path_factory.mktemp("cut") / "memory.db"
    path.write_bytes(real_db[: max(1, int(len(real_db) * cut))])
    refused_untouched(path, NotADatabase, "is not a SQLite database|damaged")


@pytest.mark.parametrize("pages", [1, 2, 5])
def test_a_database_cut_at_a_page_boundary_is_refused(tmp_path, real_db, pages):
    path = tmp_path / "memory.db"
    path.write_bytes(real_db[: pages * 4096])
    refused_untouched(path, NotADatabase, r"damaged SQLite database \(.*; \d+ bytes: truncated")


def test_a_damaged_database_is_refused_untouched(tmp_path, real_db):
    path = tmp_path / "memory.db"
    path.write_bytes(real_db[:100] + os.urandom(len(real_db) - 100))  # a sound header, garbage pages
    refused_untouched(path, NotADatabase, "damaged")


def _foreign(path: Path, journal: str, tables: list[str]) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    for sql in tables:
        conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(("journal", "tables"), [
    ("DELETE", ["CREATE TABLE users (id, name)"]),
    ("WAL", ["CREATE TABLE users (id, name)", "CREATE TABLE sessions (id)"]),
    ("DELETE", ["CREATE TABLE schema_migrations (version TEXT PRIMARY KEY)", "CREATE TABLE ar_internal_metadata (k)"]),
], ids=["app", "app-wal-with-a-sessions-table", "rails"])
def test_another_applications_database_is_detected_before_anything_is_written(tmp_path, journal, tables):
    path = tmp_path / "app.db"
    _foreign(path, journal, tables)
    mode = path.read_bytes()[18]
    error = refused_untouched(path, ForeignDatabase, "of another application .* not a tortoise memory")
    assert isinstance(error, NotADatabase)  # a caller handling "not a database" handles this too
    assert path.read_bytes()[18] == mode  # not switched to WAL (the bytes are the same, so no table was added)


def test_a_database_from_a_newer_tortoise_is_refused_and_not_written(tmp_path, real_db):
    path = tmp_path / "memory.db"
    path.write_bytes(real_db)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', '2030-01-01')",
                 (SQLITE_MIGRATIONS[-1].version + 1,))
    conn.commit()
    conn.close()
    error = refused_untouched(path, SchemaTooNew, "newer than this tortoise-sdk knows .*upgrade tortoise-sdk")
    assert "nothing was written" in str(error)


def test_a_database_from_a_newer_tortoise_is_refused_on_postgres():
    require_postgres()
    import psycopg

    with temp_database("tortoise_newer") as url:
        Memory(url).close()
        newer = 10_000
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, 'from the future')", (newer,))
            tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        with pytest.raises(SchemaTooNew, match="upgrade tortoise-sdk"):
            Memory(url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == tables
            assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (newer,)


# -- read-only databases -------------------------------------------------------------------------


def _reads_and_a_write(path: str) -> dict:
    """What a read-only memory does: every read, then one write."""
    out: dict = {}
    with Memory(path, namespace="n", create=False) as m:
        out["read_only"] = m.store.read_only
        out["sessions"] = [s.session_id for s in m.sessions()]
        hits = m.search("kayak paddle", k=3)
        out["hits"] = len(hits)
        block = m.context([{"role": "user", "content": "what colour is my kayak?"}], time_budget_ms=None)
        out["pointers"], out["degraded"] = len(block.pointers), block.degraded_reason
        out["answered"] = "My kayak is red" in block.block
        out["expand"] = m.expand(hits[0].turn_id).content[:8] if hits else None
        try:
            m.capture("s2", [{"role": "user", "content": "a new turn"}])
            out["write"] = "written"
        except ReadOnlyStore as exc:
            out["write"] = f"ReadOnlyStore: {exc}"
    return out


def _as_another_user(fn: Callable[[], dict]) -> dict:
    """``fn()`` in a child process that cannot write what root owns (root itself writes any file)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.fixture
def shared_dir():
    """A directory other users can read (pytest's own tmp dirs are private to their owner)."""
    where = Path(tempfile.mkdtemp(prefix="tortoise-ro-"))
    where.chmod(0o755)
    yield where
    where.chmod(0o755)
    shutil.rmtree(where)


def _expect_read_only(result: dict) -> None:
    assert result.get("error") is None, result
    assert result["read_only"] is True and result["sessions"] == ["s"] and result["hits"] == 1
    assert result["pointers"] >= 1 and result["answered"] and result["degraded"] is None
    assert result["expand"] == "My kayak"
    assert result["write"].startswith("ReadOnlyStore: ") and "reads work" in result["write"]


@pytest.mark.parametrize("folder_writable", [False, True], ids=["read-only-folder", "writable-folder"])
def test_a_read_only_file_opens_for_reads_and_refuses_writes(shared_dir, real_db, folder_writable):
    path = shared_dir / "memory.db"
    path.write_bytes(real_db)
    _reads_and_a_write(str(shutil.copy(path, shared_dir / "warm.db")))  # load every module before the fork
    (shared_dir / "warm.db").unlink()
    path.chmod(0o444)
    shared_dir.chmod(0o777 if folder_writable else 0o555)
    before = fingerprint(path)
    _expect_read_only(_as_another_user(lambda: _reads_and_a_write(str(path))))
    assert fingerprint(path) == before


def test_a_read_only_file_system_opens_for_reads(tmp_path, real_db):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to mount a read-only file system in a private namespace")
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "memory.db").write_bytes(real_db)
    code = ("import json, sys; sys.path[:0] = [sys.argv[1]]; from test_store_opening import _reads_and_a_write; "
            "print(json.dumps(_reads_and_a_write(sys.argv[2])))")
    script = ('mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" "$1" && touch "$1/x" 2>/dev/null && exit 9; '
              'exec "$2" -c "$3" "$4" "$1/memory.db"')
    run = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(folder), sys.executable, code,
                          str(Path(__file__).parent)], capture_output=True, text=True, timeout=120)
    if run.returncode != 0 and not run.stdout:
        pytest.skip(f"cannot mount a read-only file system here (unshare -rm: {run.stderr.strip()[:200]})")
    _expect_read_only(json.loads(run.stdout.strip().splitlines()[-1]))


def test_a_read_only_database_at_an_older_schema_says_to_open_it_once_writable(shared_dir):
    path = shared_dir / "memory.db"
    conn = sqlite3.connect(path, isolation_level=None)
    from tortoise_sdk.store.sqlite.migrations import migrate_sqlite

    migrate_sqlite(conn, SQLITE_MIGRATIONS[:2])
    conn.close()
    path.chmod(0o444)
    shared_dir.chmod(0o555)
    result = _as_another_user(lambda: _reads_and_a_write(str(path)))
    assert result["error"].startswith("ReadOnlyStore: ") and "at schema version 2" in result["error"]
    assert "open it once with write access" in result["error"]


def test_a_read_only_postgres_session_serves_reads_and_refuses_writes():
    require_postgres()
    with temp_database("tortoise_ro") as url:
        with Memory(url, namespace="n") as m:
            m.capture("s", TURNS, session_date="2024-05-01")
        read_only = url + ("&" if "?" in url else "?") + "options=-c%20default_transaction_read_only%3Don"
        _expect_read_only(_reads_and_a_write(read_only))


# -- the command line ----------------------------------------------------------------------------


def test_the_cli_says_so_in_one_line_with_exit_2(tmp_path, capsys, real_db):
    app = tmp_path / "app.db"
    _foreign(app, "DELETE", ["CREATE TABLE users (id, name)"])
    newer = tmp_path / "newer.db"
    newer.write_bytes(real_db)
    conn = sqlite3.connect(newer)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'x', 'x')")
    conn.commit()
    conn.close()
    for db, said in [(app, "another application"), (newer, "upgrade tortoise-sdk")]:
        assert main(["--db", str(db), "sessions"]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
