"""A listing question's category reaches the turns that name its instances (reflex/instances.py)."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from needs import REPO
from reflex_chat import ask, capture_chatter
from tortoise_sdk import Memory
from tortoise_sdk.reflex import instances, tuning

WORDNET = Path("/usr/share/wordnet")


def _chat(mem: Memory) -> None:
    mem.capture("s1", [{"role": "user", "name": "Melanie", "content": "I signed up for a pottery class yesterday!"},
                       {"role": "user", "name": "Caroline", "content": "That sounds lovely, enjoy it."}],
                session_date="2023-05-01T10:00:00")
    mem.capture("s2", [{"role": "user", "name": "Caroline", "content": "We flew to Rome for the conference."},
                       {"role": "user", "name": "Melanie", "content": "Lucky you!"}],
                session_date="2023-06-01T10:00:00")
    mem.capture("s3", [{"role": "user", "name": "Melanie", "content": "My crafts teacher is strict but kind."}],
                session_date="2023-06-02T10:00:00")
    capture_chatter(mem, "Caroline")


def test_only_a_listing_question_reads_the_category_table():
    # The table costs a fresh process (a Claude Code hook) about 20 ms: a prompt that lists nothing must not read it.
    mem = Memory(":memory:", namespace="inst")
    _chat(mem)
    instances.table.cache_clear()
    try:
        mem.context([{"role": "user", "content": "Why does the pottery build fail on Windows?"}])
        assert instances.table.cache_info().currsize == 0
        block = mem.context([{"role": "user", "content": "What crafts does Melanie do?"}])
        assert instances.table.cache_info().currsize == 1
        assert block.degraded_reason is None
        assert "I signed up for a pottery class yesterday!" in [p.synopsis for p in block.pointers]
    finally:
        instances.table()  # the next test finds it read, as before


def test_a_category_finds_the_turn_naming_its_instance_on_both_engines(store, monkeypatch):
    mem = Memory(store=store, namespace="inst")
    _chat(mem)
    question = "What crafts does Melanie do?"
    monkeypatch.setattr(tuning, "INSTANCE_WEIGHT", 0.0)
    assert "I signed up for a pottery class yesterday!" not in [p.synopsis for p in ask(mem, question).pointers]
    monkeypatch.setattr(tuning, "INSTANCE_WEIGHT", 1.0)
    block = ask(mem, question)
    said = [p.synopsis for p in block.pointers]
    assert "I signed up for a pottery class yesterday!" in said
    assert "names 'pottery', a kind of 'crafts'" in block.why[said.index("I signed up for a pottery class yesterday!")]
    # Two words name one category ("cities"), a proper noun is its instance.
    assert "We flew to Rome for the conference." in [p.synopsis for p in ask(mem, "Which cities has Caroline visited?").pointers]


def test_an_unrelated_question_stays_silent_though_its_category_has_instances_here(store, monkeypatch):
    monkeypatch.setattr(tuning, "INSTANCE_WEIGHT", 1.0)
    mem = Memory(store=store, namespace="quiet")
    _chat(mem)
    # "Rome" is a city the store names, yet the question's own words are about nothing stored: a turn
    # naming an instance covers the category word ("cities"), never more, and one word of six is under
    # the gate's fifth (MIN_COVERAGE), as it would be were "cities" itself said there.
    question = "Which cities did the ancient emperors conquer by sea in wartime?"
    assert ask(mem, question).pointers == []
    # A question that is not a listing one never seeks instances ("Rome" would cover a third of this one).
    assert ask(mem, "Is the capital of Peru a city?").pointers == []
    mem.capture("s4", [{"role": "user", "name": "Caroline", "content": "So many cities, so little time."}],
                session_date="2023-08-01T10:00:00")
    assert ask(mem, question).pointers == []


def test_the_method_is_on_as_shipped():
    # Admitted by leave one conversation out (docs/figures/bench_reflex_recall-loo.md): ranker.json is
    # trained with it on, and the record's "today's constants" rows have it on.
    assert tuning.INSTANCE_WEIGHT > 0


def test_table_holds_categories_and_their_instances():
    table = instances.table()
    assert {"taekwondo", "karate"} <= set(table["martial_art"].split())
    assert "rome" in table["city"].split() and "pottery" in table["craft"].split()
    assert table["city"] == table["metropolis"]  # synonyms share a line
    assert all(w.isalpha() and w.islower() for w in table["city"].split())
    data = (REPO / "tortoise_sdk" / "reflex" / "instances.tsv.gz").stat().st_size
    assert data < 600_000
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in (
        REPO / "tortoise_sdk" / "reflex" / "instances.LICENSE").read_text()


@pytest.mark.skipif(not (WORDNET / "data.noun").exists(), reason="WordNet (Debian wordnet-base) not installed")
def test_the_table_is_what_the_script_builds_from_wordnet():
    spec = importlib.util.spec_from_file_location("build_instances", REPO / "benchmarks" / "build_instances.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    shipped = gzip.decompress((REPO / "tortoise_sdk" / "reflex" / "instances.tsv.gz").read_bytes()).decode()
    assert build.build(WORDNET) == shipped


_words = st.from_regex(r"[a-z]{2,9}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(_words)
def test_a_plural_finds_its_singular(word):
    forms = instances.lemmas(word)
    assert forms[0] == word and len(set(forms)) == len(forms)
    if not word.endswith("s"):
        assert word in instances.lemmas(word + "s")
    if len(word) >= 3 and word.endswith("y"):
        assert word in instances.lemmas(word[:-1] + "ies")


# Words of the table's categories (a two-word one split in its words, as a question says them).
_known = sorted({w for key in sorted(instances.table())[::40] for w in key.split("_")}) + ["martial", "arts", "cities", "the"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_known), _words), max_size=8))
def test_categories_use_each_word_once_and_pairs_are_adjacent(words):
    found = instances.categories(words)
    used = [i for at, _ in found for i in at]
    assert len(used) == len(set(used))
    table = instances.table()
    for at, key in found:
        assert key in table
        assert len(at) == key.count("_") + 1
        if len(at) == 2:
            assert at[1] == at[0] + 1 and key.split("_")[0] == words[at[0]]
            assert key.split("_")[1] in instances.lemmas(words[at[1]])
        else:
            assert key in instances.lemmas(words[at[0]])
    if words[:2] == ["martial", "arts"]:
        assert ((0, 1), "martial_art") in found
