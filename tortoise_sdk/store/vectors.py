"""Embeddings in the store (``VectorMixin``): one vector per turn and per memory, with the model that made it.

A mixin of both stores, like ``CursorMixin``: the SQL is the same on both engines but for the
placeholder (``PARAM``) and the insertion-order column (``ROW_ORDER``). Vectors are float32
little-endian bytes (``pack``/``unpack``). What needs a vector is what has none under the current
model: a new turn or memory, and every row after the model changed. A vector goes with its row
(forgetting, any delete) and with a change of its text, by the triggers of migration 9; a vector
is saved only while its row still exists, so a row forgotten while its vector was computed leaves none.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Literal

from ..models import utc_now
from ..search import INDEX_CHARS

__all__ = ("VectorKind", "VectorMixin", "pack", "unpack")

VectorKind = Literal["turn", "memory"]

_ROWS = {"turn": ("turns", "turn_id"), "memory": ("memories", "memory_id")}


def pack(vector: Sequence[float]) -> bytes:
    """A vector as stored: float32, little-endian."""
    return struct.pack(f"<{len(vector)}f", *vector)


def unpack(blob: bytes) -> list[float]:
    """The vector ``pack`` stored."""
    return list(struct.unpack(f"<{len(blob) // 4}f", bytes(blob)))


class VectorMixin:
    """``pending_embeddings``, ``save_vectors``, ``load_vectors``, ``vector_version``, ``vector_counts``,
    and the engine's own nearest-vector search where it has one (``nearest_vectors``, ``vector_search``)."""

    PARAM: ClassVar[str] = "?"
    ROW_ORDER: ClassVar[str] = "rowid"
    transaction: Callable[[Callable[[Any], Any]], Any]
    read: Callable[[], AbstractContextManager[Any]]

    def pending_embeddings(self, namespace: str, model: str, limit: int, *,
                           after: tuple[VectorKind, str] | None = None) -> list[tuple[VectorKind, str, str]]:
        """Up to ``limit`` (kind, id, text) with no vector under ``model``: turns first (system turns never),
        oldest first, then live memories. A turn's text is what its full-text index holds.

        ``after`` is the (kind, id) of the last item a previous call returned: the read goes on from
        there instead of passing every row already embedded again (a run over n rows in batches reads
        each row once, not n / batch times). An ``after`` row deleted meanwhile starts its kind over.
        """
        p, order = self.PARAM, self.ROW_ORDER
        missing = (f"NOT EXISTS (SELECT 1 FROM vectors v WHERE v.namespace = {p} AND v.kind = {p}"
                   f" AND v.item_id = {{id}} AND v.model = {p})")

        def past(table: str, column: str, kind: VectorKind) -> tuple[str, tuple[str, ...]]:
            if after is None or after[0] != kind:
                return "", ()
            return (f" AND {order} > COALESCE((SELECT {order} FROM {table} WHERE namespace = {p}"
                    f" AND {column} = {p}), 0)", (namespace, after[1]))

        out: list[tuple[VectorKind, str, str]] = []
        with self.read() as c:
            if after is None or after[0] == "turn":
                cond, args = past("turns", "turn_id", "turn")
                rows = c.execute(
                    f"SELECT turn_id, substr(content, 1, {INDEX_CHARS}) FROM turns WHERE namespace = {p}"
                    f" AND role <> 'system' AND length(trim(content)) > 0 AND {missing.format(id='turns.turn_id')}"
                    f"{cond} ORDER BY {order} LIMIT {p}",
                    (namespace, namespace, "turn", model, *args, limit)).fetchall()
                out += [("turn", r[0], r[1]) for r in rows]
            if len(out) < limit:
                cond, args = past("memories", "memory_id", "memory")
                rows = c.execute(
                    f"SELECT memory_id, content FROM memories WHERE namespace = {p} AND status = 'live'"
                    f" AND {missing.format(id='memories.memory_id')}{cond} ORDER BY {order} LIMIT {p}",
                    (namespace, namespace, "memory", model, *args, limit - len(out))).fetchall()
                out += [("memory", r[0], r[1]) for r in rows]
        return out

    def save_vectors(self, namespace: str, model: str,
                     items: Sequence[tuple[VectorKind, str, Sequence[float]]]) -> int:
        """Store each (kind, id, vector) under ``model``, replacing the item's vector of any model.

        Returns how many were stored: an item deleted meanwhile gets none.
        """
        p = self.PARAM
        at = utc_now().isoformat()
        extra = self._vector_extra()
        col, val, upd = (f", {extra[0]}", f", {extra[1]}", f", {extra[0]} = excluded.{extra[0]}") if extra else ("", "", "")

        def run(c: Any) -> int:
            n = 0
            for kind, item_id, vector in items:
                table, column = _ROWS[kind]
                more = (extra[2](vector),) if extra else ()
                n += max(c.execute(
                    f"INSERT INTO vectors (namespace, kind, item_id, model, dim, vector, created_at{col})"
                    f" SELECT {p}, {p}, {p}, {p}, {p}, {p}, {p}{val}"
                    f" WHERE EXISTS (SELECT 1 FROM {table} WHERE namespace = {p} AND {column} = {p})"
                    " ON CONFLICT (namespace, kind, item_id) DO UPDATE SET model = excluded.model,"
                    f" dim = excluded.dim, vector = excluded.vector, created_at = excluded.created_at{upd}",
                    (namespace, kind, item_id, model, len(vector), pack(vector), at, *more, namespace, item_id)
                ).rowcount, 0)
            return n

        return int(self.transaction(run))

    def load_vectors(self, namespace: str, model: str) -> list[tuple[VectorKind, str, bytes]]:
        """Every (kind, id, packed vector) of the namespace under ``model``."""
        p = self.PARAM
        with self.read() as c:
            return [(r[0], r[1], bytes(r[2])) for r in c.execute(
                f"SELECT kind, item_id, vector FROM vectors WHERE namespace = {p} AND model = {p}"
                " ORDER BY kind, item_id", (namespace, model))]

    def vector_version(self, namespace: str, model: str) -> tuple[int, str | None]:
        """What changes whenever the namespace's vectors under ``model`` do: (count, newest write)."""
        p = self.PARAM
        with self.read() as c:
            row = c.execute(f"SELECT COUNT(*), MAX(created_at) FROM vectors WHERE namespace = {p} AND model = {p}",
                            (namespace, model)).fetchone()
        return int(row[0]), row[1]

    def _vector_extra(self) -> tuple[str, str, Callable[[Sequence[float]], Any]] | None:
        """A column the engine keeps beside the bytes (name, placeholder SQL, value of a vector), or None."""
        return None

    def nearest_vectors(self, namespace: str, model: str, vector: Sequence[float], k: int,
                        kind: str | None = None) -> list[tuple[str, str, float]] | None:
        """The ``k`` items closest to ``vector`` by cosine as (kind, id, cosine), closest first, searched by
        the engine; None where the engine has no such search (the caller then searches exactly in memory)."""
        return None

    def vector_search(self) -> str:
        """How the namespace's vectors are searched here, for ``tortoise stats``."""
        return "exact cosine in memory"

    def vector_counts(self, namespace: str) -> dict[str, int]:
        """Vectors of the namespace by model."""
        p = self.PARAM
        with self.read() as c:
            return {r[0]: int(r[1]) for r in c.execute(
                f"SELECT model, COUNT(*) FROM vectors WHERE namespace = {p} GROUP BY model ORDER BY model",
                (namespace,))}
