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
import stat
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
    ConfigError,
    ForeignDatabase,
    Memory,
    NotADatabase,
    ReadOnlyStore,
    SchemaTooNew,
    StoreError,
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


def _open_new(path: str) -> dict:
    try:
        Memory(path).close()
        return {"error": None}
    except Exception as exc:  # noqa: BLE001 - the class is what is checked
        return {"error": f"{type(exc).__name__}: {exc}", "tortoise": isinstance(exc, StoreError)}


@pytest.mark.parametrize("where", ["in-the-folder", "in-a-new-subfolder"])
def test_a_new_database_in_a_folder_that_cannot_be_written_is_a_read_only_store(shared_dir, where):
    """Not a bare PermissionError, nor a StoreError that says only "unable to open database file"."""
    path = shared_dir / "memory.db" if where == "in-the-folder" else shared_dir / "sub" / "memory.db"
    shared_dir.chmod(0o555)
    result = _as_another_user(lambda: _open_new(str(path)))
    assert result["error"].startswith("ReadOnlyStore: "), result
    assert str(shared_dir) in result["error"] and "folder" in result["error"]
    assert not path.exists() and (where == "in-the-folder" or not path.parent.exists())


def test_a_database_path_under_a_file_is_a_config_error_naming_db(tmp_path):
    (tmp_path / "notes.txt").write_text("not a folder")
    with pytest.raises(ConfigError, match="notes.txt") as caught:
        Memory(str(tmp_path / "notes.txt" / "memory.db"))
    assert caught.value.field == "db"


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


# -- files that are not ours (issue 24): the mark, and what carries no mark ------------------------

OUR_ID = 0x546F7274
FOSSIL_ID = 0x0F055112  # another application's registered application_id
THEIR_MIGRATIONS = ["CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)",
                    "INSERT INTO schema_migrations VALUES (1, 'create users', '2024-01-01')",
                    "CREATE TABLE users (id, name)"]


def _application_id(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("PRAGMA application_id").fetchone()[0]


def _set_application_id(path: Path, value: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {value}")
    conn.commit()
    conn.close()


def _ours_marked_by(real_db: bytes, application_id: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(real_db)
        _set_application_id(path, application_id)
    return make


FOREIGN_FILES: dict[str, Callable[[Path], None]] = {
    "their-schema_migrations": lambda p: _foreign(p, "DELETE", THEIR_MIGRATIONS),
    "their-schema_migrations-wal": lambda p: _foreign(p, "WAL", THEIR_MIGRATIONS),
    "their-empty-schema_migrations": lambda p: _foreign(p, "DELETE", THEIR_MIGRATIONS[:1] + THEIR_MIGRATIONS[2:]),
    "only-their-schema_migrations": lambda p: _foreign(p, "DELETE", THEIR_MIGRATIONS[:2]),
    "their-mark-no-tables": lambda p: _foreign(p, "DELETE", [f"PRAGMA application_id = {FOSSIL_ID}"]),
    "their-mark-on-our-tables": lambda p: None,  # filled in by the test (needs real_db)
}


@pytest.mark.parametrize("case", sorted(FOREIGN_FILES))
def test_a_sqlite_file_without_our_mark_or_our_migrations_is_refused_untouched(tmp_path, real_db, case):
    path = tmp_path / "app.db"
    (_ours_marked_by(real_db, FOSSIL_ID) if case == "their-mark-on-our-tables" else FOREIGN_FILES[case])(path)
    refused_untouched(path, ForeignDatabase, "of another application .*not a tortoise memory.*give tortoise its own file")


@pytest.mark.parametrize("case", ["new", "marked", "unmarked-up-to-date", "unmarked-older-schema",
                                  "unmarked-only-an-empty-schema_migrations"])
def test_our_databases_open_and_carry_the_mark(tmp_path, real_db, case):
    path = tmp_path / "memory.db"
    if case == "marked":
        path.write_bytes(real_db)
    elif case == "unmarked-up-to-date":  # written before the mark
        _ours_marked_by(real_db, 0)(path)
    elif case == "unmarked-older-schema":
        from tortoise_sdk.store.sqlite.migrations import migrate_sqlite

        conn = sqlite3.connect(path, isolation_level=None)
        migrate_sqlite(conn, SQLITE_MIGRATIONS[:3])
        conn.execute("PRAGMA application_id = 0")
        conn.close()
    elif case == "unmarked-only-an-empty-schema_migrations":  # a first open that stopped before migration 1
        _foreign(path, "DELETE", ["CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                                  " applied_at TEXT NOT NULL)"])
    if path.exists() and case != "marked":
        assert _application_id(path) == 0
    with Memory(str(path), namespace="n") as m:
        assert m.store.schema_version() == SQLITE_MIGRATIONS[-1].version
        if case in ("marked", "unmarked-up-to-date"):
            assert m.search("kayak", k=1)[0].content.startswith("My kayak is red")
    assert _application_id(path) == OUR_ID


@pytest.mark.parametrize("make", ["char-device", "fifo", "directory"])
def test_a_path_that_is_not_a_regular_file_is_refused_with_nothing_created(tmp_path, make, capsys):
    if make == "char-device":
        path = Path("/dev/null")
        if not path.exists() or not stat.S_ISCHR(path.stat().st_mode):
            pytest.skip("no /dev/null character device here")
    else:
        path = tmp_path / "db"
        os.mkfifo(path) if make == "fifo" else path.mkdir()
    beside = sorted(p.name for p in path.parent.iterdir())
    kind = {"char-device": "a character device", "fifo": "a FIFO", "directory": "a directory"}[make]
    try:
        with pytest.raises(NotADatabase, match=f"is {kind}, not a database file; it was left as it was"):
            Memory(str(path))
        assert main(["--db", str(path), "sessions"]) == 2
        err = capsys.readouterr().err
        assert kind in err and len(err.strip().splitlines()) == 1
        assert sorted(p.name for p in path.parent.iterdir()) == beside  # no -journal, -wal or -shm beside it
    finally:
        for side in ("-journal", "-wal", "-shm"):  # what the code before this check left in /dev
            if f"{path.name}{side}" not in beside:
                Path(f"{path}{side}").unlink(missing_ok=True)


def _pg_tables(url: str, schema: str = "public") -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                                           (schema,))]


@pytest.mark.parametrize("theirs", [
    ["CREATE TABLE users (id int, name text)"],
    ["CREATE TABLE schema_migrations (version int PRIMARY KEY, name text, applied_at timestamptz DEFAULT now())",
     "INSERT INTO schema_migrations (version, name) VALUES (1, 'create users')", "CREATE TABLE users (id int)"],
    ["CREATE VIEW report AS SELECT 1 AS x"],
], ids=["app", "their-schema_migrations", "a-view"])
def test_a_postgres_schema_of_another_application_is_refused_and_a_schema_of_our_own_works(theirs):
    require_postgres()
    import psycopg

    with temp_database("tortoise_foreign") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            for sql in theirs:
                conn.execute(sql)
        before = _pg_tables(url)
        with pytest.raises(ForeignDatabase, match="holds another application's tables .*CREATE SCHEMA tortoise.*"
                                                  "search_path.* or its own database"):
            Memory(url)
        assert _pg_tables(url) == before
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA tortoise")
        own = url + "?options=-csearch_path%3Dtortoise"
        with Memory(own, namespace="n") as m:  # the way the message gives
            m.capture("s", TURNS[:2], extract=False)
        with Memory(own, namespace="n") as m:
            assert len(m.turns("s")) == 2
        assert _pg_tables(url) == before and "turns" in _pg_tables(url, "tortoise")


def test_a_postgres_search_path_without_a_schema_says_how_to_create_one():
    require_postgres()
    with temp_database("tortoise_noschema") as url:
        with pytest.raises(StoreError, match="no schema of the search_path exists.*CREATE SCHEMA tortoise"):
            Memory(url + "?options=-csearch_path%3Dmissing")


def test_a_postgres_role_that_may_not_read_the_memory_is_told_so_not_that_it_is_another_applications():
    """Reviewer: a role without table privileges was told the schema held "another application's tables"."""
    require_postgres()
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    role = f"tortoise_noread_{uuid.uuid4().hex[:8]}"
    with temp_database("tortoise_grants") as url:
        with Memory(url, namespace="n") as m:
            m.capture("s", TURNS[:2], extract=False)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN")
        try:
            parts = urlsplit(url)
            theirs = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))
            with pytest.raises(StoreError, match=f"role '{role}' may not read the tables of schema 'public'.*GRANT"):
                Memory(theirs)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")
