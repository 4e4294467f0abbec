"""The JSON recovery ladder: exact on clean JSON, honest on cut or wrapped JSON, loud on garbage."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tortoise_sdk.errors import MalformedOutput
from tortoise_sdk.jsonparse import ParsedJSON, parse_json

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
containers = objects | st.lists(json_values, max_size=5)
# What models say around JSON: no brackets, so the first bracket starts the value.
prose = st.sampled_from(
    [
        "",
        "Here is the JSON you asked for:",
        "Sure! Below are the extracted items.\n",
        "I found these entities in the conversation -",
    ]
) | st.text(alphabet=st.characters(blacklist_characters='{}[]`"', blacklist_categories=("Cs",)), max_size=30)
trailer = st.sampled_from(["", "\n", "\nLet me know if you need anything else.", "\n(3 items) [end]"])
items = st.lists(
    st.fixed_dictionaries(
        {"name": st.text(max_size=12), "score": st.integers() | st.floats(allow_nan=False, allow_infinity=False)},
        optional={"tags": st.lists(st.text(max_size=5), max_size=3), "note": st.none() | st.booleans()},
    ),
    min_size=1,
    max_size=6,
)


@FAST
@given(json_values)
def test_any_json_value_round_trips(value: Any) -> None:
    parsed = parse_json(json.dumps(value), expect="any")
    assert parsed == ParsedJSON(value, False, ["strict"])


@FAST
@given(objects, st.sampled_from([None, 2]))
def test_objects_round_trip_with_any_indent(value: dict[str, Any], indent: int | None) -> None:
    assert parse_json(json.dumps(value, indent=indent), expect="object").value == value


@FAST
@given(json_values, st.sampled_from(["json", "JSON", ""]), prose, prose)
def test_fenced_values_survive_prose(value: Any, lang: str, before: str, after: str) -> None:
    text = f"{before}\n```{lang}\n{json.dumps(value, indent=2)}\n```\n{after}"
    parsed = parse_json(text, expect="any")
    assert parsed.value == value
    assert not parsed.partial


@FAST
@given(containers, prose, trailer)
@example({"```": None}, "", "\n(3 items) [end]")  # three backticks in a string are no fence (found by hypothesis)
@example({"code": "```py\nprint(1)\n```"}, "Here it is:", "")
def test_containers_survive_surrounding_prose(value: Any, before: str, after: str) -> None:
    parsed = parse_json(f"{before} {json.dumps(value)}{after}", expect="any")
    assert parsed.value == value
    assert not parsed.partial


@settings(max_examples=60, deadline=None)
@given(items, st.sampled_from([None, 2]), st.data())
def test_truncated_list_keeps_a_prefix_of_whole_items(
    original: list[dict[str, Any]], indent: int | None, data: st.DataObject
) -> None:
    text = json.dumps(original, indent=indent)
    cut = data.draw(st.integers(min_value=0, max_value=len(text)), label="cut")
    try:
        parsed = parse_json(text[:cut], expect="list")
    except MalformedOutput as exc:
        assert exc.error_class in ("parse", "truncation")
        return
    assert parsed.value == original[: len(parsed.value)]
    assert parsed.partial == (cut < len(text))


@pytest.mark.parametrize("indent", [None, 2])
def test_every_cut_of_a_list_is_a_prefix_or_raises(indent: int | None) -> None:
    original = [
        {"name": "Caroline", "aliases": ["Caro", "C."], "age": 31, "note": None, "score": -1.5e-3},
        {"name": 'Melanie "Mel"', "kids": True, "age": 35, "pets": {"dog": "Oliver"}},
        {"name": "Grandma", "age": None, "quote": "[not] {json}, \\ really"},
    ]
    text = json.dumps(original, indent=indent)
    kept_sizes = set()
    for cut in range(len(text) + 1):
        try:
            parsed = parse_json(text[:cut], expect="list")
        except MalformedOutput as exc:
            assert exc.error_class == ("truncation" if cut else "parse"), (cut, text[:cut])
            continue
        assert parsed.value == original[: len(parsed.value)], (cut, text[:cut])
        kept_sizes.add(len(parsed.value))
    assert kept_sizes == {1, 2, 3}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["entities", "events", "points"]), items, min_size=1), st.data())
def test_truncated_object_keeps_whole_items_under_each_key(original: dict[str, Any], data: st.DataObject) -> None:
    text = json.dumps(original)
    cut = data.draw(st.integers(min_value=0, max_value=len(text)), label="cut")
    try:
        parsed = parse_json(text[:cut], expect="object")
    except MalformedOutput as exc:
        assert exc.error_class == ("truncation" if cut else "parse")  # an empty reply is not JSON
        return
    assert list(parsed.value) == list(original)[: len(parsed.value)]
    for key, kept in parsed.value.items():
        assert kept == original[key][: len(kept)]


@pytest.mark.parametrize(
    ("text", "expect", "value", "partial", "steps"),
    [
        ('{"a": 1}', "object", {"a": 1}, False, ["strict"]),
        ('```json\n{"a": [1, 2]}\n```', "object", {"a": [1, 2]}, False, ["stripped_fences"]),
        ('Sure! Here it is:\n{"a": 1}\nHope that helps {x}', "object", {"a": 1}, False, ["extracted"]),
        ('{"a": 1}\n```', "object", {"a": 1}, False, ["extracted"]),
        ('[{"a": 1}, {"b": 2}', "list", [{"a": 1}, {"b": 2}], True, ["closed_tail"]),
        ('[{"a": 1}, {"b": 2}, {"c": 3', "list", [{"a": 1}, {"b": 2}], True, ["kept_complete_items"]),
        ("[1, 2 ", "list", [1, 2], True, ["closed_tail"]),
        ("[1, 2", "list", [1], True, ["kept_complete_items"]),  # 2 may have been 25
        ("[1, 2.", "list", [1], True, ["kept_complete_items"]),
        ('{"a": "x", "b": -', "object", {"a": "x"}, True, ["kept_complete_items"]),
        ('{"a": "x", "b": tr', "object", {"a": "x"}, True, ["kept_complete_items"]),
        ('{"items": [1, 2]}', "list", [1, 2], False, ["strict", "unwrapped"]),
        ('{"summary": "She said \\"hi\\" and left', "object", None, None, None),
        (
            '```json\n{"entities": [{"name": "Caroline"}], "events": [{"what": "moved',
            "object",
            {"entities": [{"name": "Caroline"}], "events": []},
            True,
            ["stripped_fences", "kept_complete_items"],
        ),
        ('{"text": "line one\nline two"}', "object", {"text": "line one\nline two"}, False, ["strict"]),
    ],
)
def test_ladder_steps(text: str, expect: Any, value: Any, partial: bool | None, steps: list[str] | None) -> None:
    if value is None:
        with pytest.raises(MalformedOutput) as caught:
            parse_json(text, expect=expect)
        assert caught.value.error_class == "truncation"
        return
    assert parse_json(text, expect=expect) == ParsedJSON(value, partial, steps)


@pytest.mark.parametrize(
    ("text", "expect", "error_class"),
    [
        ("", "object", "parse"),
        ("   \n", "list", "parse"),
        ("I'm sorry, I can't help with that.", "object", "parse"),
        ('{"a": 1 "b": 2}', "object", "parse"),
        ("{'a': 1}", "object", "parse"),
        ("[1, 2]", "object", "parse"),
        ('{"a": 1, "b": 2}', "list", "parse"),
        ('"just a string"', "object", "parse"),
        ("[", "list", "truncation"),
        ('[{"name": "Carol', "list", "truncation"),
        ('{"entities": [', "object", "truncation"),
        ('{"a": tru', "object", "truncation"),
    ],
)
def test_garbage_raises_classified(text: str, expect: Any, error_class: str) -> None:
    with pytest.raises(MalformedOutput) as caught:
        parse_json(text, expect=expect)
    assert caught.value.error_class == error_class
    assert caught.value.body == text


def test_a_list_is_never_mistaken_for_its_first_object() -> None:
    with pytest.raises(MalformedOutput, match="got a list"):
        parse_json('Here: [{"a": 1}, {"b": 2}]', expect="object")


# Prose with brackets of its own (no quotes, and it ends in words: a bracket left open
# right before the value would make it a cut or broken reply, not prose).
bracket_prose = st.lists(
    st.sampled_from(["Based on turn [0],", "Use the {curly} format", "see [notes]", "{", "[", "]", "}", "[1, 2]",
                     "{x: 1}", "[]", "{}", "(a) [b] {c}"])
    | st.text(alphabet=st.sampled_from(list("abxyz 019:,.'-[]{}")), max_size=20),
    max_size=4,
).map(" ".join).flatmap(lambda p: st.sampled_from(["here is the list:", "Output", "result ->"]).map(
    lambda end: f"{p} {end}"))


def _holds(prose: str, expect: str) -> bool:
    """Whether ``prose`` itself has complete JSON of the expected shape at one of its brackets."""
    for i, c in enumerate(prose):
        if c in "[{":
            try:
                value, _ = json.JSONDecoder().raw_decode(prose, i)
            except ValueError:
                continue
            if isinstance(value, dict if expect == "object" else list):
                return True
    return False


@FAST
@given(st.sampled_from(["object", "list"]), objects, st.lists(json_values, max_size=4), bracket_prose, trailer)
def test_prose_brackets_before_the_value_are_passed_over(
    expect: Any, obj: dict[str, Any], lst: list[Any], before: str, after: str
) -> None:
    assume(not _holds(before, expect))
    value = obj if expect == "object" else lst
    parsed = parse_json(f"{before} {json.dumps(value)}{after}", expect=expect)
    assert parsed == ParsedJSON(value, False, ["extracted"])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('Based on turn [0], here is the list: {"entities": []}', {"entities": []}),
        ('Use the {curly} format: {"entities": []}', {"entities": []}),
        ('Use the {curly} format: [1] {"entities": [{"name": "A"}]}', {"entities": [{"name": "A"}]}),
        ('In [0] we saw {"a": "x", "b": tr', {"a": "x"}),
    ],
)
def test_prose_brackets_are_not_the_reply(text: str, value: Any) -> None:
    assert parse_json(text, expect="object").value == value


def test_a_broken_reply_is_not_read_as_one_of_its_items() -> None:
    with pytest.raises(MalformedOutput, match="invalid JSON at offset 29") as caught:
        parse_json('{"entities": [{"name": "A"}] "events": []}', expect="object")
    assert caught.value.error_class == "parse"


@FAST
@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_raises_classified(text: str) -> None:
    try:
        parsed = parse_json(text, expect="any")
    except MalformedOutput as exc:
        assert exc.error_class in ("parse", "truncation")
        return
    assume(parsed.partial)
    assert parsed.value not in ({}, [])  # a salvaged result always holds something
