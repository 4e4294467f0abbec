"""Nearest vectors inside PostgreSQL through pgvector, where the server has the extension.

``PgVector.ensure`` (run by each embedding run, never by the reflex) creates the ``vector``
extension when the server offers it and adds to the ``vectors`` table a column ``embedding``: the
stored float32 bytes as a pgvector ``vector``, written by ``save_vectors`` beside the bytes. A row
written without it (``migrate-store``'s ``COPY``, an older version of this SDK, a row whose bytes
changed, which a trigger marks by clearing ``embedding``) has it NULL until ``fill`` computes it, at
the next embedding run. The search orders by ``<=>`` (cosine distance) with no ANN index: a scan,
exact, so its neighbours are those of the in-memory exact search; while any row of the namespace
still waits for its ``embedding``, ``nearest`` answers None and the exact search in memory runs.

Where the server lacks pgvector, or the role may not create the extension, ``available`` is False,
``reason`` says why, and the caller searches exactly in memory. Nothing here is a numbered
migration: the column exists only where the extension does, and its absence changes no result.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..vectors import unpack

try:
    import numpy as np
except ImportError:  # the plain-Python path below
    np = None

__all__ = ("PgVector",)

log = logging.getLogger("tortoise_sdk.store.postgres")

#: Serialises ``ensure`` across processes (b"tortvec" + 1 read as an int64), as migrations do with theirs.
ENSURE_LOCK_KEY = 0x746F727476656301

_CLEAR = ("""CREATE OR REPLACE FUNCTION vectors_embedding_stale() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.vector IS DISTINCT FROM OLD.vector AND NEW.embedding IS NOT DISTINCT FROM OLD.embedding THEN
                NEW.embedding := NULL;
            END IF;
            RETURN NEW;
        END $$""",
          """CREATE TRIGGER vectors_embedding_bu BEFORE UPDATE OF vector ON vectors
            FOR EACH ROW EXECUTE FUNCTION vectors_embedding_stale()""")

#: Seconds a "not in use" answer is kept before the catalogue is read again.
RECHECK_S = 60.0
#: Rows given their ``embedding`` per statement by ``fill``.
FILL_BATCH = 500


class PgVector:
    """The pgvector search of one PostgreSQL store; its state is read once and kept."""

    #: What the server offers (a test points it elsewhere to play a server without pgvector).
    AVAILABLE_SQL = "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"

    def __init__(self, read: Callable[[], AbstractContextManager[Any]],
                 setup: Callable[[], AbstractContextManager[Any]], read_only: bool) -> None:
        self._read = read
        self._setup = setup  # a connection with no statement timeout: adding the column computes every row's
        self._read_only = read_only
        self._lock = threading.Lock()
        self._schema: str | None = None  # the extension's schema, once the column is there
        self._version = ""
        self.reason: str | None = None  # why not, once known
        self._probed_at = 0.0

    @property
    def available(self) -> bool:
        """Whether the ``embedding`` column exists, so the search runs in PostgreSQL (probed on first use)."""
        if self._schema is None and (self.reason is None or time.monotonic() - self._probed_at > RECHECK_S):
            self._probe()  # another process may have set it up since
        return self._schema is not None

    def describe(self) -> str:
        """Which search is used, for ``tortoise stats``."""
        if not self.available:
            return f"exact cosine in memory (pgvector not in use: {self.reason})"
        return (f"pgvector {self._version}: exact cosine inside PostgreSQL (a scan, no ANN index) until the vectors "
                "are loaded into memory, then exact cosine in memory until they change")

    def ensure(self) -> None:
        """Create the extension and the ``embedding`` column where the server allows it; never raises."""
        if self._read_only:
            return
        if self._schema is not None:
            self.fill()
            return
        with self._lock:
            if self._schema is not None:
                return
            try:
                self._create()
            except Exception as exc:  # noqa: BLE001 - refused or failed: the exact search in memory stays
                self.reason = f"pgvector could not be set up ({type(exc).__name__}: {str(exc).strip()[:200]})"
                self._probed_at = time.monotonic()
                log.warning("%s; vectors are searched in memory", self.reason)
                return
            self.reason = None
            self._probe()
        self.fill()

    def column(self) -> tuple[str, str, Callable[[Sequence[float]], Any]] | None:
        """The ``embedding`` column for ``save_vectors`` (name, placeholder, value), once it exists."""
        if not self.available:
            return None
        return "embedding", f"%s::{_ident(self._schema or 'public')}.vector", text

    def fill(self) -> int:
        """Compute ``embedding`` for the rows that lack it; how many were filled."""
        if not self.available or self._read_only:
            return 0
        ns = _ident(self._schema or "public")
        done = 0
        while True:
            with self._setup() as c, c.transaction():
                rows = c.execute("SELECT namespace, kind, item_id, vector FROM vectors WHERE embedding IS NULL"
                                 " LIMIT %s FOR UPDATE SKIP LOCKED", (FILL_BATCH,)).fetchall()
                if not rows:
                    return done
                with c.cursor() as cur:
                    cur.executemany(f"UPDATE vectors SET embedding = %s::{ns}.vector WHERE namespace = %s"
                                    " AND kind = %s AND item_id = %s",
                                    [(text(unpack(r[3])), r[0], r[1], r[2]) for r in rows])
                done += len(rows)

    def nearest(self, namespace: str, model: str, vector: Sequence[float], k: int,
                kind: str | None) -> list[tuple[str, str, float]] | None:
        """The ``k`` items closest to ``vector`` by cosine, closest first, as (kind, id, cosine); None while
        some of the namespace's rows wait for their ``embedding``."""
        ns = _ident(self._schema or "public")
        q = text(vector)
        where = "namespace = %s AND model = %s AND dim = %s" + (" AND kind = %s" if kind else "")
        distance = f"embedding OPERATOR({ns}.<=>) %s::{ns}.vector"
        with self._read() as c:
            if c.execute("SELECT EXISTS (SELECT 1 FROM vectors WHERE namespace = %s AND model = %s"
                         " AND embedding IS NULL)", (namespace, model)).fetchone()[0]:
                return None  # some rows wait for ``fill``: only the exact search in memory sees them all
            rows = c.execute(
                f"SELECT kind, item_id, {distance} AS d FROM vectors WHERE {where}"
                f" ORDER BY {distance}, kind, item_id LIMIT %s",
                (q, namespace, model, len(vector), *([kind] if kind else []), q, int(k))).fetchall()
        return [(str(r[0]), str(r[1]), 1.0 - float(r[2])) for r in rows if r[2] is not None]

    # -- private --------------------------------------------------------------------------------

    def _probe(self) -> None:
        self._probed_at = time.monotonic()
        with self._read() as c:
            ext = c.execute("SELECT n.nspname, e.extversion FROM pg_extension e JOIN pg_namespace n"
                            " ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
            column = c.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                               " AND table_name = 'vectors' AND column_name = 'embedding'").fetchone()
            offered = c.execute(self.AVAILABLE_SQL).fetchone() if ext is None else None
        if ext is not None and column is not None:
            self._schema, self._version = str(ext[0]), str(ext[1])
        elif ext is None and offered is None:
            self.reason = ("pgvector is not installed on this server (Debian: apt-get install "
                           "postgresql-NN-pgvector, then it is set up by the next embedding run)")
        elif self._read_only:
            self.reason = "the store is read-only, and the embedding column is not set up yet"
        else:
            self.reason = "not set up yet: the next embedding run sets it up"

    def _create(self) -> None:
        with self._setup() as c, c.transaction():
            c.execute("SELECT pg_advisory_xact_lock(%s)", (ENSURE_LOCK_KEY,))
            if c.execute(self.AVAILABLE_SQL).fetchone() is None:
                raise LookupError("pgvector is not installed on this server")
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")
            schema = c.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
                               " WHERE e.extname = 'vector'").fetchone()[0]
            if c.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                         " AND table_name = 'vectors' AND column_name = 'embedding'").fetchone() is None:
                c.execute(f"ALTER TABLE vectors ADD COLUMN embedding {_ident(schema)}.vector")
                c.execute("CREATE INDEX vectors_embedding_missing ON vectors (namespace, model) WHERE embedding IS NULL")
                for sql in _CLEAR:
                    c.execute(sql)


def text(vector: Sequence[float]) -> str:
    """A vector as pgvector reads it: each value as the float32 the bytes hold, in its shortest exact form."""
    return "[" + ",".join(repr(x) for x in np.asarray(vector, dtype=np.float32).tolist()) + "]" if np is not None \
        else "[" + ",".join(_f32_repr(x) for x in vector) + "]"


def _f32_repr(x: float) -> str:
    return repr(struct.unpack("<f", struct.pack("<f", x))[0])


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
