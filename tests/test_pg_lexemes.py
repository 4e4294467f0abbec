"""The PostgreSQL store's lexeme cache: bounded LRU, and analyze() asks the server only for new texts."""

from __future__ import annotations

from tortoise_sdk.store.postgres.lexemes import LexemeCache

from pgtemp import require_postgres, temp_database


def test_the_cache_keeps_the_most_recently_used_within_its_entry_bound():
    cache = LexemeCache(max_entries=2, max_chars=1_000)
    cache.put("a", ["x"])
    cache.put("b", ["y"])
    assert cache.get_many(["a"]) == [("x",)]  # a is now the most recent
    cache.put("c", ["z"])
    assert cache.get_many(["a", "b", "c"]) == [("x",), None, ("z",)]
    assert len(cache) == 2


def test_the_cache_holds_at_most_its_characters_and_never_a_text_past_them():
    cache = LexemeCache(max_entries=100, max_chars=20)
    cache.put("aaaaaaaa", ["aa"])  # 10 characters
    cache.put("bbbbbbbb", ["bb"])  # 20 in all
    cache.put("cccccccc", ["cc"])  # the oldest goes
    assert cache.get_many(["aaaaaaaa", "bbbbbbbb", "cccccccc"]) == [None, ("bb",), ("cc",)]
    cache.put("d" * 30, ["d"])
    assert cache.get_many(["d" * 30]) == [None] and len(cache) == 2
    cache.put("bbbbbbbb", ["b", "b"])  # replacing an entry counts only its new size
    assert cache._chars == 20 and cache.get_many(["bbbbbbbb"]) == [("b", "b")]


def test_postgres_analyze_asks_the_server_only_for_texts_it_has_not_seen(monkeypatch):
    from tortoise_sdk.store.postgres import PostgresStore

    require_postgres()
    with temp_database("tortoise_lexemes") as url:
        store = PostgresStore(url)
        try:
            sent: list[list[str]] = []
            rows = store._rows

            def counting(sql, args):
                sent.append(list(args[0]))
                return rows(sql, args)

            monkeypatch.setattr(store, "_rows", counting)
            first = store.analyze(["kayaking on lakes", "cafés", "kayaking on lakes"])
            assert sent == [["kayaking on lakes", "cafés"]]
            again = store.analyze(["cafés", "new words here", "kayaking on lakes"])
            assert sent[1:] == [["new words here"]]
            assert again == [first[1], ["new", "word", "here"], first[0]] and first[0] == ["kayak", "on", "lake"]
            assert store.analyze(["cafés"]) == [["cafe"]] and len(sent) == 2
        finally:
            store.close()
