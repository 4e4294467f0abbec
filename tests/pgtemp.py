"""Throwaway PostgreSQL databases (and servers) for tests and benchmarks.

The server is ``$TORTOISE_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
When it cannot be reached, tests skip with a loud reason, except under ``CI=true``,
where they fail: CI must never silently drop the PostgreSQL half of the suite.

Tests that stop, kill or freeze a server start their own with ``temp_server()``
(``initdb`` + ``pg_ctl`` in a temporary directory, as the ``postgres`` user when run
as root, on a free loopback port) and act only on that server's PID: the shared
server above is never touched.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ("TempServer", "pg_base_url", "pg_unavailable_reason", "require_postgres", "temp_database", "temp_server")

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def pg_base_url() -> str:
    """The server tests create their databases on."""
    return os.environ.get("TORTOISE_TEST_PG_URL") or DEFAULT_PG_URL


@lru_cache(maxsize=1)
def pg_unavailable_reason() -> str | None:
    """None when the server answers, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(pg_base_url(), connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {pg_base_url()} is unreachable: {str(exc).strip()}"
    return None


def require_postgres() -> None:
    """Skip (locally) or fail (CI=true) when PostgreSQL is unreachable."""
    from needs import skip_or_fail

    reason = pg_unavailable_reason()
    if reason is not None:
        skip_or_fail(f"PostgreSQL tests: {reason}; start PostgreSQL or set TORTOISE_TEST_PG_URL "
                     "(e.g. pg_ctlcluster --skip-systemctl-redirect 15 main start)")


@contextmanager
def temp_database(prefix: str = "tortoise_test") -> Iterator[str]:
    """Create a fresh database on the test server, yield its URL, then drop it (connections forced off)."""
    import psycopg

    base = pg_base_url()
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(base)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: [int(x) for x in p.split("/")[4].split(".") if x.isdigit()])
    return versions[-1] if versions else None


class TempServer:
    """A PostgreSQL server of our own in a temporary directory; only its own PID is ever signalled."""

    def __init__(self, root: Path, port: int, run_as: str | None) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._run_as = run_as

    def _cmd(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self._run_as, "--", *argv] if self._run_as else list(argv)

    def start(self) -> None:
        """Start (or restart) the server on the same port and data; waits until it accepts connections."""
        done = subprocess.run(self._cmd(_pg_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"),
                                 "-w", "-t", "60", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
                                 " -c fsync=off", "start"),
                              capture_output=True, text=True)
        if done.returncode != 0:
            log = (self.root / "log").read_text(errors="replace")[-2000:] if (self.root / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()}\n{log}")

    @property
    def pid(self) -> int | None:
        """The postmaster's PID, from its own pid file; None when it is not running."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL this server's postmaster (by its PID), then wait until its backends are gone too."""
        pid = self.pid
        if pid is None:
            return
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        # Backends notice their postmaster's death and exit; a restart needs its shared memory free.
        while time.monotonic() < deadline and any(Path(f"/proc/{c}").exists() for c in [pid, *children]):
            time.sleep(0.05)
        (self.data / "postmaster.pid").unlink(missing_ok=True)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP this server's postmaster and its backends (by their PIDs) for the block, as a paused VM
        would be: connections stay open and nothing answers; SIGCONT on the way out, whatever happens."""
        pid = self.pid
        assert pid is not None, "the server is not running"
        pids = [pid, *_children(pid)]
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        try:
            yield
        finally:
            for p in pids:
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        """Stop this server (immediate shutdown) if it runs."""
        if self.pid is not None:
            subprocess.run(self._cmd(_pg_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w",
                                     "stop"), capture_output=True)


def _children(pid: int) -> list[int]:
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return out


@contextmanager
def temp_server() -> Iterator[TempServer]:
    """A fresh PostgreSQL server for a fault test; skipped (failed under CI=true) when initdb is missing."""
    from needs import skip_or_fail

    initdb = _pg_bin("initdb")
    if initdb is None or _pg_bin("pg_ctl") is None:
        skip_or_fail("throwaway PostgreSQL server: initdb/pg_ctl not found (install the PostgreSQL server package)")
    run_as = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="tortoise-pg-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = TempServer(root, port, run_as)
    try:
        if run_as:
            shutil.chown(root, run_as)
        subprocess.run(server._cmd(initdb, "-D", str(server.data), "-A", "trust", "-U", "postgres", "--no-sync"),
                       check=True, capture_output=True)
        server.start()
        yield server
    finally:
        server.stop()
        if server.pid is not None:
            os.kill(server.pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
