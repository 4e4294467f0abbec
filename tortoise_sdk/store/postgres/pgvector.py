"""Nearest vectors inside PostgreSQL through pgvector, where the server has the extension.

``PgVector.ensure`` (run before the first vectors are saved, so by the background embedding, never
by the reflex) creates the ``vector`` extension when the server offers it and adds to the ``vectors``
table a generated column ``embedding``: the stored float32 bytes read as a pgvector ``vector`` by
``tortoise_f32`` (an immutable SQL function). Being generated, it is computed by PostgreSQL for every
row however the row was written (``save_vectors``, ``migrate-store``'s ``COPY``, an older version of
this SDK) and goes with its row (forgetting). The search orders by ``<=>`` (cosine distance) with no
ANN index: a scan, exact, so its neighbours are those of the in-memory exact search.

Where the server lacks pgvector, or the role may not create the extension, ``available`` is False,
``reason`` says why, and the caller searches exactly in memory. Nothing here is a numbered
migration: the column exists only where the extension does, and its absence changes no result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

__all__ = ("PgVector",)

#: Serialises ``ensure`` across processes (b"tortvec" + 1 read as an int64), as migrations do with theirs.
ENSURE_LOCK_KEY = 0x746F727476656301

_F32 = """CREATE OR REPLACE FUNCTION tortoise_f32(b bytea) RETURNS real[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT array_agg(
        (CASE WHEN e = 0 THEN m * power(2::float8, -149) ELSE (1 + m / 8388608::float8) * power(2::float8, e - 127) END
         * CASE WHEN s = 1 THEN -1 ELSE 1 END)::real ORDER BY i)
    FROM (SELECT i, (w >> 31) & 1 AS s, ((w >> 23) & 255)::int AS e, (w & 8388607)::float8 AS m
          FROM (SELECT i, get_byte(b, 4 * i)::bigint | (get_byte(b, 4 * i + 1)::bigint << 8)
                          | (get_byte(b, 4 * i + 2)::bigint << 16) | (get_byte(b, 4 * i + 3)::bigint << 24) AS w
                FROM generate_series(0, length(b) / 4 - 1) AS i) AS words) AS parts
$$"""


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

    @property
    def available(self) -> bool:
        """Whether the ``embedding`` column exists, so the search runs in PostgreSQL (probed on first use)."""
        if self._schema is None and self.reason is None:
            self._probe()
        return self._schema is not None

    def describe(self) -> str:
        """Which search is used, for ``tortoise stats``."""
        if not self.available:
            return f"exact cosine in memory (pgvector not in use: {self.reason})"
        return f"pgvector {self._version}: exact cosine inside PostgreSQL (a scan, no ANN index)"

    def ensure(self) -> None:
        """Create the extension and the ``embedding`` column where the server allows it; never raises."""
        if self._schema is not None or self._read_only:
            return
        with self._lock:
            if self._schema is not None:
                return
            try:
                self._create()
            except Exception as exc:  # noqa: BLE001 - refused or failed: the exact search in memory stays
                self.reason = f"pgvector could not be set up ({type(exc).__name__}: {str(exc).strip()[:200]})"
                return
            self.reason = None
            self._probe()

    def nearest(self, namespace: str, model: str, vector: Sequence[float], k: int,
                kind: str | None) -> list[tuple[str, str, float]]:
        """The ``k`` items closest to ``vector`` by cosine, closest first, as (kind, id, cosine)."""
        ns = _ident(self._schema or "public")
        q = "[" + ",".join(repr(float(x)) for x in vector) + "]"
        where = "namespace = %s AND model = %s AND dim = %s" + (" AND kind = %s" if kind else "")
        distance = f"embedding OPERATOR({ns}.<=>) %s::{ns}.vector"
        with self._read() as c:
            rows = c.execute(
                f"SELECT kind, item_id, {distance} AS d FROM vectors WHERE {where}"
                f" ORDER BY {distance}, kind, item_id LIMIT %s",
                (q, namespace, model, len(vector), *([kind] if kind else []), q, int(k))).fetchall()
        return [(str(r[0]), str(r[1]), 1.0 - float(r[2])) for r in rows if r[2] is not None]

    # -- private --------------------------------------------------------------------------------

    def _probe(self) -> None:
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
                c.execute(_F32)
                c.execute(f"ALTER TABLE vectors ADD COLUMN embedding {_ident(schema)}.vector"
                          f" GENERATED ALWAYS AS (tortoise_f32(vector)::{_ident(schema)}.vector) STORED")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
