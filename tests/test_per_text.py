"""``text.per_text``: a pure function of one text remembered for short texts only, within its bound."""

from __future__ import annotations

from tortoise_sdk.text import per_text


def test_a_short_text_is_computed_once_a_long_one_each_time_and_the_bound_holds():
    calls: list[str] = []

    def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

    f = per_text(shout, maxsize=2, longest=5)
    assert [f("ab"), f("ab"), f("abcdef"), f("abcdef")] == ["AB", "AB", "ABCDEF", "ABCDEF"]
    assert calls == ["ab", "abcdef", "abcdef"]  # the long text is never held
    f("cd"), f("ef"), f("ab")  # "ab" was the least recently used of three: computed again
    assert calls[-3:] == ["cd", "ef", "ab"]
    assert f.__name__ == "shout"
