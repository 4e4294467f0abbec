"""The host's vocabulary: validation, the optional prompt section and its hash, category matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from tortoise_sdk import Memory
from tortoise_sdk.errors import ConfigError, InvalidInput
from tortoise_sdk.pipeline.prompts import load_prompt
from tortoise_sdk.vocabulary import MAX_INSTRUCTIONS_CHARS, Vocabulary, vocabulary

STAGES = ("s1_narrate", "s2_map", "s4_review")


def test_without_a_vocabulary_the_prompts_and_their_hashes_are_unchanged() -> None:
    for name in (*STAGES, "vet"):
        shipped = load_prompt(name)
        assert shipped.with_vocabulary(None) == shipped
        assert shipped.with_vocabulary(Vocabulary()) == shipped


def test_the_section_sits_before_the_new_turns_and_enters_the_hash() -> None:
    vocab = vocabulary(["Health", "work"], "Keep medical facts; ignore small talk.")
    for name in STAGES:
        shipped = load_prompt(name)
        prompt = shipped.with_vocabulary(vocab)
        assert prompt.sha256 != shipped.sha256 and prompt.fields == shipped.fields
        text = prompt.render(**{f: f"<{f}>" for f in prompt.fields})
        assert text.index("Keep medical facts; ignore small talk.") < text.index("New turns (each line")
        assert "Health, work" in text
    s2 = load_prompt("s2_map").with_vocabulary(vocab)
    assert load_prompt("s2_map").with_vocabulary(vocabulary(["Health"], None)).sha256 != s2.sha256
    assert '"category": one of Health, work' in s2.text


def test_a_placeholder_in_the_host_text_is_never_filled_in() -> None:
    prompt = load_prompt("s2_map").with_vocabulary(vocabulary(None, "ignore {transcript} and {nothing}"))
    assert prompt.fields == load_prompt("s2_map").fields  # render does not ask for {nothing}
    text = prompt.render(**{f: "X" for f in prompt.fields})
    assert "ignore {\u200btranscript} and {\u200bnothing}" in text


@pytest.mark.parametrize(("categories", "instructions", "field"), [
    ("health", None, "categories"),
    (["ok", ""], None, "categories"),
    (["ok", 3], None, "categories"),
    (["a,b"], None, "categories"),
    ([f"c{i}" for i in range(51)], None, "categories"),
    (None, 42, "extraction_instructions"),
    (None, "x" * (MAX_INSTRUCTIONS_CHARS + 1), "extraction_instructions"),
])
def test_a_malformed_vocabulary_is_refused_naming_its_argument(tmp_path: Path, categories, instructions,
                                                              field) -> None:
    with pytest.raises(ConfigError) as err:
        Memory(str(tmp_path / "m.db"), categories=categories, extraction_instructions=instructions)
    assert err.value.field == field


def test_categories_are_matched_in_the_hosts_spelling() -> None:
    vocab = vocabulary(["Health", "work", "health "], None)
    assert vocab is not None and vocab.categories == ("Health", "work")
    assert (vocab.category("HEALTH"), vocab.category(" work "), vocab.category("hobbies")) == ("Health", "work", None)
    assert vocabulary(None, "  ") is None
    assert Vocabulary().category("anything") == "anything"


def test_memories_refuses_a_category_the_host_did_not_name(tmp_path: Path) -> None:
    with Memory(str(tmp_path / "m.db"), categories=["work"]) as mem:
        assert mem.memories(category="WORK") == []
        with pytest.raises(InvalidInput, match="not one of this memory's categories"):
            mem.memories(category="hobbies")
    with Memory(str(tmp_path / "n.db")) as mem, pytest.raises(InvalidInput, match="Memory\\(categories"):
        mem.memories(category="work")


def test_context_shows_only_memories_of_the_categories_asked_for(tmp_path: Path, caplog) -> None:
    import uuid

    from tortoise_sdk.models import ExtractionReport
    from tortoise_sdk.store.plan import ExtractionPlan, ItemPlan, SourcePlan

    mem = Memory(str(tmp_path / "m.db"), categories=["Health", "work"])
    r = mem.capture("s1", [{"role": "user", "content": "Maya's knee surgery is in May, and Maya works at Acme"},
                           {"role": "user", "content": "Maya's knee hurt on the Acme hike, her job is fun"}])
    mem.store.write_extraction(mem.namespace, ExtractionPlan(
        session_id="s1", extraction_id=f"x_{uuid.uuid4().hex[:8]}", valid_at=None, items=[
            ItemPlan("event", "Maya has knee surgery in May", sources=(SourcePlan(r.turn_ids[0], None),),
                     category="Health"),
            ItemPlan("point", "Maya works at Acme as a designer", sources=(SourcePlan(r.turn_ids[0], None),),
                     category="work")]),
        finalize=lambda res: ExtractionReport(status="ok"))
    ask = [{"role": "user", "content": "What do you remember about Maya, her knee and her job at Acme?"}]
    every = mem.context(ask, budget=5)
    assert {p.kind for p in every.pointers} == {"memory", "turn"}
    health = mem.context(ask, budget=5, categories=["health"])
    assert [p.synopsis for p in health.pointers] == ["Maya has knee surgery in May"]
    both = mem.context(ask, budget=5, categories=["Health", "WORK"])
    assert {p.kind for p in both.pointers} == {"memory"} and len(both.pointers) == 2
    with caplog.at_level("WARNING", logger="tortoise_sdk.reflex"):  # where the README says the reflex warns
        unknown = mem.context(ask, categories=["pets"])
    assert unknown.block == "" and "'pets' is not one of this memory's categories" in (unknown.degraded_reason or "")
    assert [r.name for r in caplog.records] == ["tortoise_sdk.reflex"]
    mem.close()


def test_a_memory_added_by_hand_is_filed_under_the_hosts_category(tmp_path: Path) -> None:
    # remember() had no category: a host's own memories never showed in context(categories=[...]).
    with Memory(str(tmp_path / "m.db"), categories=["Health", "work"]) as mem:
        knee = mem.remember("Maya has knee surgery in May", kind="event", category="health")
        assert knee.category == "Health"  # the host's spelling
        mem.remember("Maya works at Acme as a designer", category="work")
        ask = [{"role": "user", "content": "What about Maya's knee and her job at Acme?"}]
        assert [p.synopsis for p in mem.context(ask, categories=["health"]).pointers] == [knee.content]
        assert [m.content for m in mem.memories(category="HEALTH")] == [knee.content]
        assert mem.correct_memory(knee.id, "Maya has knee surgery in June").category == "Health"
        with pytest.raises(InvalidInput, match="not one of this memory's categories"):
            mem.remember("Maya likes jazz", category="hobbies")
    with Memory(str(tmp_path / "n.db")) as mem, pytest.raises(InvalidInput, match="Memory\\(categories"):
        mem.remember("Maya likes jazz", category="hobbies")
    import asyncio

    from tortoise_sdk import AsyncMemory

    async def by_hand() -> str | None:
        async with AsyncMemory(str(tmp_path / "a.db"), categories=["work"]) as amem:
            return (await amem.remember("Maya works at Acme", category="WORK")).category

    assert asyncio.run(by_hand()) == "work"


@pytest.mark.parametrize("argv, env, expected", [
    (["extract", "s1", "--categories", "Health, work"], None, ["Health", "work"]),
    (["worker", "--once"], "health,work", ["health", "work"]),
    (["capture", "s1", "--categories", "pets"], "health", ["pets"]),  # the option wins over the variable
    (["flush"], None, None),
])
def test_the_commands_that_extract_take_the_hosts_categories(monkeypatch, argv, env, expected) -> None:
    from tortoise_sdk.cli import build_parser
    from tortoise_sdk.cli._common import model_options

    monkeypatch.delenv("TORTOISE_CATEGORIES", raising=False)
    if env is not None:
        monkeypatch.setenv("TORTOISE_CATEGORIES", env)
    assert model_options(build_parser().parse_args(argv)).get("categories") == expected


def test_a_command_that_extracts_opens_the_memory_with_the_categories_it_was_given(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    from tortoise_sdk import cli

    Memory(str(tmp_path / "m.db")).close()
    seen = []
    real = Memory.__init__

    def spy(self, *args, **kwargs):  # the Memory the command opens, as the command configured it
        real(self, *args, **kwargs)
        seen.append(self.vocabulary.categories if self.vocabulary else None)

    monkeypatch.setattr(Memory, "__init__", spy)
    monkeypatch.setenv("TORTOISE_CATEGORIES", "Health,work")
    assert cli.main(["--db", str(tmp_path / "m.db"), "flush", "--model", "openai/m", "--api-key", "k"]) == 0
    assert seen == [("Health", "work")]
