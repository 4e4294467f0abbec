"""Staged extraction end to end through litellm's real HTTP path, replayed from cassettes.

Each test replays ``cassettes/test_pipeline/<test>.yaml``, recorded from the
stub script beside it (``<test>.script.json``: a capable model's answers to the
exact prompts the pipeline sends). Re-record with
``pytest tests/test_pipeline.py --record-mode=rewrite`` (see tests/record_cassettes.md).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from importlib import resources
from typing import Any

import pytest

from conftest import ModelEndpoint
from locomo import LOCOMO_DIR, load_sessions, needs_locomo
from pipeline_scenarios import (
    capture_demo,
    later_session_supersedes,
    memory,
    repeated_capture_noops,
    whole_cassette_played,  # noqa: F401 - autouse: every recorded exchange is played
)
from tortoise_sdk import Memory
from tortoise_sdk.confidence import AGREED, BASE, S2_ONLY, S4_ONLY, VETTED

pytestmark = pytest.mark.vcr


def contents(mem: Memory, **kwargs: Any) -> list[str]:
    return [m.content for m in mem.memories(**kwargs)]


def codes(diagnostics: list[Any]) -> list[tuple[str, str]]:
    return [(d.stage, d.code) for d in diagnostics]


def prompt_hash(name: str) -> str:
    text = resources.files("tortoise_sdk.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


@needs_locomo
def test_locomo_session_happy_path(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    session = load_sessions(LOCOMO_DIR / "conv-26.json")[0]
    with memory(tmp_path, model_endpoint) as mem:
        receipt = mem.capture(session["session_id"], session["turns"], session_date=session["date"])
        report = receipt.extraction
        assert report.status == "ok", report
        assert report.errors == [] and report.warnings == []
        assert report.outcomes == {"ADD": 10}
        assert report.counts == {"entity": 3, "event": 3, "point": 7}
        assert {k: (v.calls, v.retries) for k, v in report.stages.items() if k in ("s1", "s2", "s4")} == {
            "s1": (1, 0), "s2": (1, 0), "s4": (1, 0)}
        assert report.stages["s2"].prompt_hash == prompt_hash("s2_map")
        assert report.stages["total"].calls == 3 and report.stages["total"].prompt_tokens > 0
        # Stored: the receipt carries the report, and the memories cite LoCoMo's dialogue ids.
        assert mem.receipts(session["session_id"])[0].extraction == report
        by_content = {m.content: m for m in mem.memories()}
        event = by_content["Caroline went to an LGBTQ support group on 7 May 2023."]
        assert (event.kind, event.when, event.entities) == ("event", "2023-05-07", ["Caroline", "LGBTQ support group"])
        assert [(s.external_id, s.quote) for s in event.sources] == [("D1:3", "I went to a LGBTQ support group yesterday")]
        # S4's delta was added to S2's list.
        assert by_content["Caroline found the transgender stories at the support group inspiring."].sources[0].external_id == "D1:5"
        assert event.valid_at == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
        hits = mem.store.search_memories("t", '"counseling"', k=3)
        assert [h.content for h, _ in hits] == [
            "Caroline wants to work in counseling or mental health to support people with similar issues."]


def test_one_s1_chunk_failing(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint, chunk_turns=3) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "partial"
        assert codes(report.errors) == [("s1", "server")]
        assert report.errors[0].detail["chunk"] == 1
        # What S2 found is written, but the watermark stops before the failed chunk: turns 3-6 wait
        # (turn 6's own chunk succeeded, but the watermark is a prefix) for the next extraction.
        assert report.reason == "s1: server; turns 3-6 wait for another run (S1 failed on turns 3-5)"
        assert (report.window, report.waiting) == ((0, 6), (3, 6))
        assert mem.store.extraction_state("t", "demo-1").watermark == 2
        assert report.outcomes == {"ADD": 7}
        assert report.stages["s1"].calls == 3
        assert report.stages["s1"].errors == {"server": 2}
        assert len(mem.memories()) == 7
    if model_endpoint.stub is not None:
        assert sorted(r.chunk for r in model_endpoint.stub.requests if r.stage == "s1") == ["0", "1", "1", "2"]


def test_s2_truncated_then_recovered(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    # A real cut: the 300-token cap stops S2 mid-list; the retry's 600-token cap holds the whole reply.
    with memory(tmp_path, model_endpoint, model_settings={"max_tokens": 300}) as mem:
        report = capture_demo(mem, "demo-2").extraction
        assert report.status == "ok"
        assert codes(report.warnings) == [("s2", "truncation_recovered")]
        assert report.stages["s2"].errors == {"truncation": 1}
        assert report.outcomes == {"ADD": 5}
        assert "Maya wants to learn Rust this summer to contribute to Helix Health's ingestion service." in contents(mem)
    if model_endpoint.stub is not None:
        caps = [r.body["max_tokens"] for r in model_endpoint.stub.requests if r.stage == "s2"]
        assert caps == [300, 600]


def test_s2_truncated_twice_keeps_complete_items(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    # A real cut: S2 fills the 150-token cap, then the retry's 300-token cap, inside the Rust point.
    with memory(tmp_path, model_endpoint, model_settings={"max_tokens": 150}) as mem:
        report = capture_demo(mem, "demo-2").extraction
        assert report.status == "ok"  # the window the cut held was read again in halves: every turn extracted
        assert codes(report.warnings) == [("s2", "truncation")]
        assert report.stages["s2"].errors == {"truncation": 2}
        # The union: S2's complete items kept, and S4 recovered the point the cut lost, cited to turn 4. The cut fell
        # in the points, so no turn's retractions were read: the window waited whole and was read again in halves,
        # whose replies fit and restate the same facts.
        assert report.outcomes == {"ADD": 5, "NOOP": 5} and report.waiting is None
        assert mem.store.extraction_state(mem.namespace, "demo-2").watermark == 4
        assert "Maya's commute is a 15-minute walk." in contents(mem)
        rust = next(m for m in mem.memories() if "Rust" in m.content)
        assert rust.content == "Maya wants to learn Rust this summer to contribute to Helix Health's ingestion service."
        assert [(s.external_id, s.quote) for s in rust.sources] == [("d2-5", "I want to learn Rust this summer")]
    if model_endpoint.stub is not None:
        caps = [r.body["max_tokens"] for r in model_endpoint.stub.requests if r.stage == "s2"]
        assert caps == [150, 300, 150, 150, 150]


def test_s4_server_errors_keep_s2(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "partial"
        assert codes(report.errors) == [("s4", "server")]
        assert "kept the S2 list" in report.errors[0].message
        assert report.stages["s4"].errors == {"server": 2}
        # Every S2 item, and nothing of S4 (it never answered).
        assert report.outcomes == {"ADD": 6}
        assert not any("Tomás" in c for c in contents(mem))
        # No review ran: each S2 item stands on one stage, so each is low (unconfirmed in the block).
        assert {m.confidence for m in mem.memories()} == {BASE[S2_ONLY]}


def test_rate_limit_then_success(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "ok" and report.errors == []
        assert (report.stages["s2"].calls, report.stages["s2"].retries) == (1, 1)
        assert report.stages["s2"].errors == {"rate_limit": 1}
        assert report.stages["total"].retries == 1
        assert report.stages["total"].errors == {"rate_limit": 1}  # the run's census sums the stages'
        assert report.outcomes == {"ADD": 7}


def test_ungrounded_quote_rejected_alone(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "ok"
        assert codes(report.warnings) == [("ground", "reanchored"), ("ground", "ungrounded_quote")]
        assert report.counts["rejected"] == 1
        assert report.outcomes == {"ADD": 6}
        assert "Maya adopted Biscuit from a shelter in 2022." not in contents(mem)
        beagle = next(m for m in mem.memories() if m.content == "Maya has a dog named Biscuit, a two-year-old beagle.")
        assert [s.external_id for s in beagle.sources] == ["d1-5"]  # re-anchored from the cited turn 2 to turn 4


def test_repeated_capture_noops(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint) as mem:
        repeated_capture_noops(mem)


def test_later_session_supersedes(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint) as mem:
        new = later_session_supersedes(mem)
        live = contents(mem)
        assert "Maya works at Helix Health in San Francisco, leading its data platform." in live
        assert "Maya works at Northwind Labs, a biotech startup in Oakland." not in live
        assert "Maya is a data engineer on the protein folding team at Northwind Labs." not in live
        assert "Maya leads the data platform at Helix Health." in live
        g = mem.graph()
        assert any(d["kind"] == "source" for _, _, d in g.out_edges(f"memory:{new.id}", data=True))


def test_s4_answers_nothing_to_add(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    # S2 already has everything, so S4 answers {}: a normal "no change", not a parse error, not partial.
    with memory(tmp_path, model_endpoint) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "ok" and report.reason is None
        assert report.errors == [] and report.warnings == []
        assert report.outcomes == {"ADD": 7}
        assert "Maya's neighbour Tomás offered to walk Biscuit on Tuesdays and Thursdays." in contents(mem)
        # S4 reviewed S2's list and let it stand: agreed.
        assert {m.confidence for m in mem.memories()} == {BASE[AGREED]}


def test_vet_runs_again_on_what_s4_added(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint, vet=True) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "ok"
        assert [(w.stage, w.code, (w.detail or {}).get("pass")) for w in report.warnings] == [("vet", "drop", "s4")]
        assert report.stages["vet"].calls == 2
        assert report.outcomes == {"ADD": 7}
        assert "Maya's neighbour Tomás offered to walk Biscuit on Tuesdays and Thursdays." in contents(mem)
        assert "The assistant suggested a midday dog walker for Biscuit." not in contents(mem)
        # S2's items passed the gate's first pass and S4's review; the item only S4 proposed stays low.
        sure = {m.content: m.confidence for m in mem.memories()}
        assert sure.pop("Maya's neighbour Tomás offered to walk Biscuit on Tuesdays and Thursdays.") == BASE[S4_ONLY]
        assert set(sure.values()) == {BASE[VETTED]}
    if model_endpoint.stub is not None:
        assert [r.stage for r in model_endpoint.stub.requests] == ["s1", "s2", "vet", "s4", "vet"]
        second = model_endpoint.stub.requests[-1].prompt.split("Transcript")[0]
        # The second gate sees only S4's additions, numbered afresh.
        assert "c1: " in second and "Tomás" in second and "c3: " not in second and "BART" not in second


def test_second_vet_fails_open(tmp_path: Any, model_endpoint: ModelEndpoint) -> None:
    with memory(tmp_path, model_endpoint, vet=True) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "partial"
        assert codes(report.errors) == [("vet", "server")]
        assert "vet of the items S4 added failed; kept every one" in report.errors[0].message
        assert report.errors[0].detail["pass"] == "s4"
        assert report.outcomes == {"ADD": 8}
        assert "The assistant suggested a midday dog walker for Biscuit." in contents(mem)


CHAT = [
    {"role": "user", "name": "Maya", "id": "c-0",
     "content": "I just started a new job at Northwind Labs in Oakland, I'm a data engineer there."},
    {"role": "assistant", "id": "c-1", "content": "Congratulations! How is your dog coping with the new hours?"},
    {"role": "user", "name": "Maya", "id": "c-2",
     "content": "Biscuit, my beagle, hates being alone. My neighbour Tomás walks him on Tuesdays and Thursdays."},
    {"role": "assistant", "id": "c-3", "content": "That's kind of Tomás. Does Biscuit like the walks?"},
    {"role": "user", "name": "Maya", "id": "c-4",
     "content": "He loves them, especially the dog park by Lake Merritt. Work at Northwind Labs is going well too."},
    {"role": "assistant", "id": "c-5", "content": "Lake Merritt is lovely. Is the Tuesday walk still on?"},
    {"role": "user", "name": "Maya", "id": "c-6",
     "content": "Not anymore, Tomás can only do Thursdays now, so I take Biscuit at lunch on Tuesdays."},
    {"role": "assistant", "id": "c-7", "content": "A lunchtime walk sounds like a nice break from work."},
]


def _prompts(vcr: Any, stage: str) -> list[str]:
    """The prompts of the recorded requests of one stage, in order."""
    import json

    return [json.loads(r.body)["messages"][0]["content"] for r in vcr.requests
            if r.headers.get("X-Tortoise-Stage") == stage]


def test_one_chat_extracted_in_parts(tmp_path: Any, model_endpoint: ModelEndpoint, vcr: Any) -> None:
    """A chat captured in two parts: the second extraction reads only its own turns, sees the first part's turns
    read-only and its memories as known, so a restated fact adds nothing and a changed one supersedes."""
    with memory(tmp_path, model_endpoint) as mem:
        first = mem.capture("chat", CHAT[:4], session_date="2024-03-02T18:20:00").extraction
        assert (first.status, first.window, first.outcomes) == ("ok", (0, 3), {"ADD": 4})
        second = mem.capture("chat", CHAT[4:]).extraction
        assert (second.status, second.window) == ("ok", (4, 7))
        assert second.outcomes == {"ADD": 2, "UPDATE": 1} and second.warnings == []
        assert second.stages["s2"].prompt_hash == prompt_hash("s2_map")
        old = next(m for m in mem.memories(include_superseded=True) if "Tuesdays and Thursdays" in m.content)
        new = next(m for m in mem.memories() if "only on Thursdays" in m.content)
        assert (old.status, old.superseded_by, [s.external_id for s in new.sources]) == ("superseded", new.id, ["c-6"])
        # The restated job ("Work at Northwind Labs is going well") added nothing.
        assert sum("Northwind" in c for c in contents(mem)) == 2
        assert mem.store.extraction_state("t", "chat").watermark == 7
        # Nothing new since: nothing to read. In full: every turn again, and all of it is known already.
        again = mem.extract("chat")
        assert (again.status, again.stages) == ("skipped", {})
        full = mem.extract("chat", full=True)
        assert (full.status, full.window, full.outcomes) == ("ok", (0, 7), {})
        assert len(mem.memories()) == 6
    s2 = _prompts(vcr, "s2")
    assert len(s2) == 3
    new_part = s2[1].split("New turns (each line")[1]
    context_part = s2[1].split("Earlier turns (read-only context")[1].split("New turns (each line")[0]
    assert "[4] Maya: He loves them" in new_part and "[0] Maya:" not in new_part
    assert "[0] Maya: I just started" in context_part and "[3] assistant:" in context_part
    assert "- [point] Maya's neighbour Tomás walks Biscuit on Tuesdays and Thursdays." in s2[1]
    s4 = _prompts(vcr, "s4")[1]
    assert "Maya's neighbour Tomás walks Biscuit on Tuesdays and Thursdays. (about:" in s4.split("Draft list")[0]


HOST_CATEGORIES = ["work", "pets", "health"]
HOST_INSTRUCTIONS = "Keep facts about work and pets; ignore how people commute."


def test_host_vocabulary_reaches_prompts_and_categories_are_stored(tmp_path: Any, model_endpoint: ModelEndpoint,
                                                                   vcr: Any) -> None:
    """Memory(categories=..., extraction_instructions=...): S1, S2 and S4 prompts carry them (the script answers
    only such prompts), their hashes record them, and each memory keeps the host's category, filterable."""
    with memory(tmp_path, model_endpoint, categories=HOST_CATEGORIES,
                extraction_instructions=HOST_INSTRUCTIONS) as mem:
        report = capture_demo(mem, "demo-1").extraction
        assert report.status == "ok" and report.outcomes == {"ADD": 4}
        assert [(d.stage, d.code) for d in report.warnings] == [("s5", "unknown_category")]
        assert "'hobbies'" in report.warnings[0].message
        # The vocabulary is part of the prompts' hashes (a change re-reads the session in full).
        assert report.stages["s2"].prompt_hash != prompt_hash("s2_map")
        assert report.stages["s1"].prompt_hash != prompt_hash("s1_narrate")
        assert {m.content: m.category for m in mem.memories()} == {
            "Maya finished her first week at Northwind Labs.": "work",
            "Maya is a data engineer on the protein folding team at Northwind Labs.": "work",
            "Maya has a two-year-old beagle named Biscuit who howls when she leaves at 7.": "pets",
            "Maya's neighbour Tomás offered to walk Biscuit on Tuesdays and Thursdays.": None,
        }
        assert [m.content for m in mem.memories(category="PETS")] == [
            "Maya has a two-year-old beagle named Biscuit who howls when she leaves at 7."]
        assert len(mem.memories(category="work")) == 2 and mem.memories(category="health") == []
    for stage in ("s1", "s2", "s4"):
        (prompt,) = _prompts(vcr, stage)
        assert HOST_INSTRUCTIONS in prompt
        assert prompt.index(HOST_INSTRUCTIONS) < prompt.index("New turns (each line")
