"""Nearest vectors inside SQLite through the ``sqlite-vec`` extension (extra ``[vectors]``).

The search is ``vec_distance_cosine`` over the namespace's rows of the ``vectors`` table: a
brute-force scan in C, exact, so its neighbours are those of the in-memory exact search (ties
broken the same way, by kind then id), with no copy of the vectors in the process and nothing to
reload when they change. The schema is unchanged: the extension only reads the table.

Python's ``sqlite3`` can load an extension only when its SQLite was built to allow it (many
builds, pyenv's by default among them, are not); then the search runs on a connection of
``apsw``, which the extra installs beside ``sqlite-vec``. Without either, or for an in-memory
database (which no second connection can see), ``SqliteVec.available`` is False and says why, and
the caller searches exactly in memory.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from ...errors import install_hint
from ..vectors import pack

__all__ = ("SqliteVec",)

_INSTALL = install_hint("vectors")


class SqliteVec:
    """The sqlite-vec search of one SQLite file: a read connection per thread, opened on first use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[Any] = []
        self._closed = False
        self.driver, self.reason = self._probe()

    @property
    def available(self) -> bool:
        """Whether the search can run here (``reason`` says why not)."""
        return self.driver is not None

    def describe(self) -> str:
        """Which search is used, for ``tortoise stats``."""
        if self.driver is None:
            return f"exact cosine in memory (sqlite-vec not in use: {self.reason})"
        return (f"sqlite-vec {self._version()}: exact cosine inside SQLite ({self.driver} connection) until the "
                "vectors are loaded into memory, then exact cosine in memory until they change")

    def nearest(self, namespace: str, model: str, vector: Sequence[float], k: int,
                kind: str | None) -> list[tuple[str, str, float]]:
        """The ``k`` items closest to ``vector`` by cosine, closest first, as (kind, id, cosine)."""
        blob = pack(vector)
        where = "namespace = ? AND model = ? AND dim = ?" + (" AND kind = ?" if kind else "")
        params: list[Any] = [blob, namespace, model, len(vector), *([kind] if kind else []), int(k)]
        rows = self._connection().execute(
            f"SELECT kind, item_id, vec_distance_cosine(vector, ?) AS d FROM vectors WHERE {where}"
            " ORDER BY d, kind, item_id LIMIT ?", params)
        return [(str(r[0]), str(r[1]), 1.0 - float(r[2])) for r in rows if r[2] is not None]

    def close(self) -> None:
        """Close every connection this search opened."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for c in connections:
            c.close()

    # -- private --------------------------------------------------------------------------------

    def _probe(self) -> tuple[str | None, str]:
        if self.path == ":memory:":
            return None, "an in-memory database"
        try:
            import sqlite_vec  # noqa: F401
        except ImportError:
            return None, f"the sqlite-vec package is not installed; {_INSTALL}"
        if hasattr(sqlite3.Connection, "enable_load_extension"):
            return "sqlite3", ""
        try:
            import apsw  # noqa: F401
        except ImportError:
            return None, (f"this Python's sqlite3 cannot load extensions and apsw is not installed; {_INSTALL}")
        return "apsw", ""

    def _version(self) -> str:
        try:
            return str(self._connection().execute("SELECT vec_version()").fetchone()[0])
        except Exception:  # noqa: BLE001 - a description only
            return "(version unknown)"

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        import sqlite_vec

        if self.driver == "sqlite3":
            conn = sqlite3.connect(f"{Path(self.path).absolute().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
        else:
            import apsw

            conn = _Apsw(apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READONLY))
            conn.raw.enable_load_extension(True)
            conn.raw.load_extension(sqlite_vec.loadable_path())
            conn.raw.enable_load_extension(False)
        with self._lock:
            if self._closed:
                conn.close()
                raise sqlite3.ProgrammingError("the store is closed")
            self._connections.append(conn)
        self._local.conn = conn
        return conn


class _Apsw:
    """An apsw connection with the two calls used here in sqlite3's shape."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        raw.setbusytimeout(5000)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return _Rows(list(self.raw.cursor().execute(sql, tuple(params))))

    def close(self) -> None:
        self.raw.close()


class _Rows(list):  # type: ignore[type-arg]
    def fetchone(self) -> Any:
        return self[0] if self else None
