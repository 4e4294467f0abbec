"""A bounded, thread-safe LRU of text -> lexemes, for ``PostgresStore.analyze``.

``to_tsvector`` under one text search configuration is immutable for a given text, so a text
analysed once need not go to the server again: the reflex asks for the same query words and the
same candidate turns and memories block after block. Bounded by entries and by characters held,
so a store that sees many long texts keeps only the most recently used.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ("LexemeCache",)


class LexemeCache:
    """Lexemes (in order) of recently analysed texts; least recently used go first past the bounds."""

    def __init__(self, *, max_entries: int = 50_000, max_chars: int = 8_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get_many(self, texts: Sequence[str]) -> list[tuple[str, ...] | None]:
        """Each text's lexemes, or None where it is not held (those held become the most recent)."""
        out: list[tuple[str, ...] | None] = []
        with self._lock:
            for text in texts:
                got = self._items.get(text)
                if got is not None:
                    self._items.move_to_end(text)
                out.append(got)
        return out

    def put(self, text: str, lexemes: Sequence[str]) -> None:
        """Hold ``text``'s lexemes; a text longer than the whole bound is not held."""
        size = len(text) + sum(len(x) for x in lexemes)
        if size > self.max_chars:
            return
        with self._lock:
            old = self._items.pop(text, None)
            if old is not None:
                self._chars -= len(text) + sum(len(x) for x in old)
            self._items[text] = tuple(lexemes)
            self._chars += size
            while self._items and (len(self._items) > self.max_entries or self._chars > self.max_chars):
                key, gone = self._items.popitem(last=False)
                self._chars -= len(key) + sum(len(x) for x in gone)
