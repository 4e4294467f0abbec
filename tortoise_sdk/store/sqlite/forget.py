"""SQLite side of forgetting: its tables and its search-index bookkeeping (``ForgetMixin``'s hooks).

The turns' FTS5 entries go with the rows (the ``turns_ad`` trigger), their ranking statistics
through ``SQLiteRankingMixin.unindex_turns``; a memory's FTS5 entry
is deleted by its rowid. FTS5 keeps deleted terms in its segments until they are merged,
and the file keeps freed pages: ``vacuum`` merges and rewrites (see ``SQLiteStore.vacuum``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from ...errors import ReadOnlyStore, StoreError
from ..forget import ForgetMixin

__all__ = ("SQLiteForgetMixin",)


class SQLiteForgetMixin(ForgetMixin):
    """Forgetting for ``SQLiteStore``."""

    url: str
    read_only: bool
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _call_with_lock_retry: Callable[[Callable[[], Any], float | None], Any]
    _check_file: Callable[[], None]

    def vacuum(self) -> None:
        """Merge the FTS5 indexes (dropping deleted terms), rewrite the file without free pages, empty the WAL.

        Takes the database for its duration; a process that holds a read open makes the WAL
        truncation wait for it (then run it again).
        """

        def run() -> None:
            self._check_file()  # a file deleted or replaced meanwhile: say so, not "vacuumed"
            for table in ("turns_fts", "memories_fts"):
                self._conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            self._conn.execute("VACUUM")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        if self.read_only:
            raise ReadOnlyStore(f"{self.url} is open read-only: vacuum needs write access to the file and its folder")
        try:
            with self._lock:
                self._call_with_lock_retry(run, None)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite vacuum failed: {exc}; nothing was lost, run it again when no other process "
                             "writes") from exc

    def _session_tables(self, c: sqlite3.Connection) -> list[str]:
        return [r[0] for r in c.execute(
            "SELECT m.name FROM sqlite_master m WHERE m.type = 'table'"
            " AND (SELECT COUNT(*) FROM pragma_table_info(m.name) i WHERE i.name IN ('namespace', 'session_id')) = 2"
            " ORDER BY m.name")]

    def _unindex_memory(self, c: sqlite3.Connection, memory_id: str) -> None:
        c.execute("DELETE FROM memories_fts WHERE rowid = (SELECT rowid FROM memories WHERE memory_id = ?)",
                  (memory_id,))
