"""A ``Memory`` on PostgreSQL opened before ``fork`` (gunicorn ``--preload``, a multiprocessing or Celery prefork
pool) keeps working in the parent and in each child: a child never talks on the connections it inherited."""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path
import pytest

from tortoise_sdk import Memory

from pgtemp import require_postgres, temp_database

pytestmark = pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                                reason="needs the fork start method")

_INHERITED: Memory | None = None  # the parent's Memory, as a forked child finds it


def _backend_pid(mem: Memory) -> int:
    with mem.store.read() as conn:  # type: ignore[attr-defined]
        return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def _child(i: int) -> int:
    mem = _INHERITED
    assert mem is not None
    for j in range(10):
        mem.append(f"child-{i}", [{"role": "user", "content": f"kayak trip {i} {j}"}])
        mem.search("kayak trip")
    pid = _backend_pid(mem)
    mem.close()  # a child's close must not end the parent's connections either
    return pid


def test_a_memory_opened_before_fork_works_in_the_parent_and_its_children(tmp_path: Path) -> None:
    """A user's prefork server: the children used the PostgreSQL pool's connections the parent opened, on the same
    sockets: 'IndexError: tuple index out of range', a 30 s StoreTimeout and 'server closed the connection
    unexpectedly' in the children, nothing of theirs stored, and the parent's connections broken too."""
    global _INHERITED
    require_postgres()
    with temp_database("tortoise_fork") as url:
        _INHERITED = mem = Memory(url, namespace="fork")
        try:
            mem.append("parent", [{"role": "user", "content": "before the fork"}])
            parent_pid = _backend_pid(mem)
            with multiprocessing.get_context("fork").Pool(3) as pool:
                results = pool.map(_child, range(3))
            assert parent_pid not in results  # each child on a connection of its own
            mem.append("parent", [{"role": "user", "content": "after the fork"}])
            assert [t.content for t in mem.turns("parent")] == ["before the fork", "after the fork"]
            assert [len(mem.turns(f"child-{i}")) for i in range(3)] == [10, 10, 10]
            assert _backend_pid(mem) == parent_pid  # the parent's own connection was left alone
        finally:
            _INHERITED = None
            mem.close()
