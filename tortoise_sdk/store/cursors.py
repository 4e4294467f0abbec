"""Named host state (``cursors``): the same compare-and-set on SQLite and PostgreSQL.

A mixin of both stores (it relies on their ``transaction`` and ``read``). A save names
the revision it read; it is refused (``None``) when another process saved in between,
so two hook processes can never move a transcript's offset past each other unseen.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar

from ..errors import InvalidInput
from ..models import Cursor, utc_now

__all__ = ("CursorMixin",)


class CursorMixin:
    """``get_cursor`` and ``put_cursor``; ``PARAM`` is the driver's placeholder."""

    PARAM: ClassVar[str] = "?"
    transaction: Callable[[Callable[[Any], Any]], Any]
    read: Callable[[], AbstractContextManager[Any]]

    def _time_param(self, value: datetime) -> Any:
        return value.isoformat()

    def get_cursor(self, namespace: str, name: str) -> Cursor:
        """The cursor ``name`` (revision 0 and an empty value when it was never saved)."""
        p = self.PARAM
        with self.read() as c:
            row = c.execute(f"SELECT value, revision, updated_at FROM cursors WHERE namespace = {p} AND name = {p}",
                            (namespace, name)).fetchone()
        if row is None:
            return Cursor(name=name)
        return Cursor(name=name, value=json.loads(row[0]), revision=row[1], updated_at=row[2])

    def put_cursor(self, namespace: str, name: str, value: Mapping[str, Any], revision: int) -> Cursor | None:
        """Save ``value`` if the stored revision is still ``revision`` (0: never saved); None when it is not."""
        try:
            text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"a cursor value must be a JSON object: {exc}", field="value") from None
        now = utc_now()
        p = self.PARAM

        def write(c: Any) -> int:
            if revision == 0:
                cur = c.execute(
                    f"INSERT INTO cursors (namespace, name, value, revision, updated_at) VALUES ({p}, {p}, {p}, 1, {p})"
                    " ON CONFLICT (namespace, name) DO NOTHING",
                    (namespace, name, text, self._time_param(now)))
            else:
                cur = c.execute(
                    f"UPDATE cursors SET value = {p}, revision = revision + 1, updated_at = {p}"
                    f" WHERE namespace = {p} AND name = {p} AND revision = {p}",
                    (text, self._time_param(now), namespace, name, revision))
            return cur.rowcount

        if self.transaction(write) != 1:
            return None
        return Cursor(name=name, value=json.loads(text), revision=revision + 1, updated_at=now)
