"""Memory's extraction API and CLI against a live stub on loopback: no model, durability, jobs, worker, demo."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_RETRY
from tortoise_sdk import Memory
from tortoise_sdk.cli import main
from tortoise_sdk.demo import load_demo_sessions, load_recorded_extraction
from tortoise_sdk.errors import ConfigError, LeaseLost, NotFoundError
from tortoise_sdk.pipeline.runner import extract_session
from tortoise_sdk.store.plan import Fence

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

DEMO = {s["session_id"]: s for s in load_demo_sessions()}
NO_MODEL = "no model configured (set TORTOISE_MODEL or Memory(model=...))"


def mem_for(tmp_path: Path, stub: Any, **kwargs: Any) -> Memory:
    return Memory(str(tmp_path / "m.db"), namespace="t", model="openai/stub-model", api_base=stub.base_url,
                  api_key="sk-stub", model_settings={**FAST_RETRY, "max_attempts": 2}, **kwargs)


def capture(mem: Memory, name: str, **kwargs: Any) -> Any:
    s = DEMO[name]
    return mem.capture(s["session_id"], s["turns"], session_date=s["date"], **kwargs)


def test_without_a_model_capture_is_verbatim_and_says_why(tmp_path: Path) -> None:
    with Memory(str(tmp_path / "m.db")) as mem:
        r = capture(mem, "demo-1")
        assert (r.turns_stored, r.extraction.status, r.extraction.reason) == (7, "skipped", NO_MODEL)
        assert mem.receipts("demo-1")[0].extraction.reason == NO_MODEL
        with pytest.raises(ConfigError, match="TORTOISE_MODEL") as raised:
            mem.extract("demo-1")
        assert raised.value.field == "model"
        with pytest.raises(NotFoundError, match="no such session 'demo-9'"):  # the session is checked first
            mem.extract("demo-9")


def test_a_capture_that_adds_nothing_extracts_the_turns_that_wait(tmp_path: Path, stub_model: Any) -> None:
    """Reviewers: turns captured with no model (or whose extraction failed) were never extracted by the same capture
    run again once the model was set: it said "skipped - no new turns" and exited 0, the turns still waiting."""
    with Memory(str(tmp_path / "m.db"), namespace="t") as mem:
        assert capture(mem, "demo-1").extraction.reason == NO_MODEL
    stub = stub_model(load_recorded_extraction())
    with mem_for(tmp_path, stub) as mem:
        again = capture(mem, "demo-1")
        assert again.turns_stored == 0 and again.extraction.status == "ok"
        assert again.extraction.outcomes == {"ADD": 7} and len(mem.memories()) == 7
        calls = len(stub.requests)
        third = capture(mem, "demo-1")  # now nothing waits: no model call
        assert third.extraction.status == "skipped" and third.extraction.reason.startswith("no new turns")
        assert len(stub.requests) == calls


def test_a_background_capture_that_adds_nothing_counts_the_turns_that_wait(tmp_path: Path, stub_model: Any) -> None:
    """Verification pass: such a capture queued a job saying "0 of 20 evidence turns waiting" while 7 waited."""
    with Memory(str(tmp_path / "m.db"), namespace="t") as mem:
        capture(mem, "demo-1")  # no model: the 7 turns wait
    with mem_for(tmp_path, stub_model(load_recorded_extraction())) as mem:
        first = capture(mem, "demo-1", extract="background")
        assert first.turns_stored == 0 and "(7 of 20 evidence turns waiting" in first.extraction.reason
        again = capture(mem, "demo-1", extract="background")  # the pending job counts them once, not twice
        assert again.extraction.job_id == first.extraction.job_id
        assert "(7 of 20 evidence turns waiting" in again.extraction.reason
        mem.flush()
        assert len(mem.memories()) == 7


def test_a_retried_background_capture_queues_the_job_its_first_call_died_before(tmp_path: Path, stub_model: Any,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A reviewer's kill -9 between the capture's commit and the queueing: the retry with the same key replayed,
    no job was ever queued, and `tortoise flush` said nothing was pending."""
    from tortoise_sdk.store.sqlite import SQLiteStore

    turns = [{"role": "user", "content": "My dog Biscuit is a beagle."}]
    with mem_for(tmp_path, stub_model(load_recorded_extraction())) as mem:
        def died(*args: Any, **kwargs: Any) -> None:
            raise SystemExit("killed")  # the process dies here

        with monkeypatch.context() as m:
            m.setattr(SQLiteStore, "enqueue_job", died)
            with pytest.raises(SystemExit):
                mem.append("s1", turns, idempotency_key="k1", extract="background")
        assert mem.jobs() == [] and len(mem.turns("s1")) == 1
        retry = mem.append("s1", turns, idempotency_key="k1", extract="background")
        assert retry.replayed and retry.extraction is not None and retry.extraction.status == "queued"
        (job,) = mem.jobs()
        assert (job.status, job.turns) == ("pending", (0, 0))
        again = mem.append("s1", turns, idempotency_key="k1", extract="background")  # the job is open: no second one
        assert again.replayed and [j.job_id for j in mem.jobs()] == [job.job_id]


def test_tortoise_model_env_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORTOISE_MODEL", "openai/from-env")
    with Memory(str(tmp_path / "m.db")) as mem:
        assert mem.model == "openai/from-env"
        r = capture(mem, "demo-1", extract=False)
        assert r.extraction.reason == "extraction disabled for this capture (extract=False)"


def test_capture_stays_durable_when_extraction_explodes(tmp_path: Path, stub_model: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import tortoise_sdk.pipeline.runner as runner

    def explode(*args: Any, **kwargs: Any) -> None:
        raise MemoryError("the pipeline blew up")

    monkeypatch.setattr(runner, "extract_session", explode)
    with mem_for(tmp_path, stub_model([])) as mem:
        r = capture(mem, "demo-1")
        assert r.extraction.status == "failed"
        assert r.extraction.reason == "extraction crashed: MemoryError: the pipeline blew up"
        assert len(mem.turns("demo-1")) == 7
        assert mem.receipts("demo-1")[0].extraction.status == "failed"


def test_s5_exception_writes_nothing_and_keeps_the_turns(tmp_path: Path, stub_model: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tortoise_sdk.store.sqlite.extraction import SQLiteExtractionMixin

    real = SQLiteExtractionMixin._write_item
    calls = []

    def third_item_fails(self: Any, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk on fire")
        real(self, *args)

    monkeypatch.setattr(SQLiteExtractionMixin, "_write_item", third_item_fails)
    with mem_for(tmp_path, stub_model(load_recorded_extraction())) as mem:
        report = capture(mem, "demo-1").extraction
        assert report.status == "failed"
        assert [(d.stage, d.code) for d in report.errors] == [("s5", "RuntimeError")]
        assert mem.memories(include_superseded=True) == []
        assert mem.store.find_entities("t", ["Maya"]) == []
        assert len(mem.turns("demo-1")) == 7
        assert mem.receipts("demo-1")[0].extraction.status == "failed"


def test_background_job_then_process_pending(tmp_path: Path, stub_model: Any) -> None:
    stub = stub_model(load_recorded_extraction())
    with mem_for(tmp_path, stub) as mem:
        r = capture(mem, "demo-1", extract="background")
        assert r.extraction.status == "queued" and r.extraction.job_id
        assert r.extraction.reason.startswith("due at ") and "(7 of 20 evidence turns waiting, or 300 s" in r.extraction.reason
        # The batch is not full (7 of 20 evidence turns) and the session is not idle yet: nothing is due.
        assert mem.process_pending() == []
        assert stub.requests == [] and mem.memories() == []
        jobs = mem.flush()
        assert [(j.job_id, j.status, j.attempts, j.revision) for j in jobs] == [(r.extraction.job_id, "done", 1, 1)]
        assert len(mem.memories()) == 7
        stored = mem.receipts("demo-1")[0].extraction
        assert (stored.status, stored.job_id, stored.outcomes) == ("ok", r.extraction.job_id, {"ADD": 7})
        assert mem.process_pending() == []


def test_failing_job_is_retried_after_a_backoff_and_keeps_its_errors(tmp_path: Path, stub_model: Any) -> None:
    stub = stub_model({"routes": [{"replies": [{"status": 500}], "cycle": True}]})
    with mem_for(tmp_path, stub, extract_every=1, job_retry_s=30) as mem:
        capture(mem, "demo-1", extract="background")
        first = mem.process_pending()
        # One attempt, then the job waits out its backoff instead of being retried back to back.
        assert [(j.status, j.attempts) for j in first] == [("pending", 1)]
        assert (first[0].due_at - first[0].updated_at).total_seconds() == pytest.approx(30, abs=1)
        calls = len(stub.requests)
        assert mem.process_pending() == [] and len(stub.requests) == calls
        # A flush runs it now, once per pass; the next wait is twice as long.
        second = mem.flush()
        assert [(j.status, j.attempts) for j in second] == [("pending", 2)]
        assert (second[0].due_at - second[0].updated_at).total_seconds() == pytest.approx(60, abs=1)
        third = mem.flush()
        assert [(j.status, j.attempts) for j in third] == [("failed", 3)]
        assert third[-1].errors == [f"attempt {n}: S2 and S4 both failed; nothing was extracted (the turns are stored)"
                                    "; turns 0-6 wait for another run (S2 failed, S1 failed on turns 0-6)"
                                    for n in (1, 2, 3)]
        assert len(mem.turns("demo-1")) == 7


def test_a_taken_over_worker_cannot_commit_through_the_pipeline(tmp_path: Path, stub_model: Any) -> None:
    from datetime import datetime, timedelta, timezone

    stub = stub_model(load_recorded_extraction())
    with mem_for(tmp_path, stub, extract_every=1) as mem:
        capture(mem, "demo-1", extract="background")
        store, now = mem.store, datetime.now(timezone.utc)
        a = store.lease_job("t", lease_s=1, max_attempts=3, now=now)
        b = store.lease_job("t", lease_s=600, max_attempts=3, now=now + timedelta(seconds=2))
        from tortoise_sdk.llm import LLMConfig

        config = LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-stub")
        with pytest.raises(LeaseLost):
            extract_session(store, "t", "demo-1", llm_config=config, fence=Fence(a.job_id, a.revision))
        assert mem.memories() == [] and store.get_job(a.job_id).status == "running"


def test_cli_capture_extract_memories_worker(tmp_path: Path, stub_model: Any, capsys: pytest.CaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")  # the CLI takes keys from the provider's variable
    db = str(tmp_path / "cli.db")
    turns = tmp_path / "d1.jsonl"
    turns.write_text("\n".join(json.dumps(t) for t in DEMO["demo-1"]["turns"]), encoding="utf-8")
    stub = stub_model(load_recorded_extraction())
    model = ["--model", "openai/stub-model", "--api-base", stub.base_url]
    assert main(["--db", db, "capture", str(turns), "--session", "demo-1", "--date", DEMO["demo-1"]["date"],
                 "--extract", "background", *model]) == 0
    out = capsys.readouterr().out
    assert "queued" in out and "`tortoise flush`" in out  # what to run, in the command line's terms
    assert main(["--db", db, "worker", "--once", *model]) == 0  # 7 evidence turns of 20: not due yet
    assert re.fullmatch(r"no job due \(1 pending, the next due at \S+; `tortoise flush` runs them now\)\n",
                        capsys.readouterr().out)
    assert main(["--db", db, "flush", "--session", "demo-1", *model]) == 0
    assert " demo-1: done (attempt 1)" in capsys.readouterr().out
    assert main(["--db", db, "flush", *model]) == 0
    assert capsys.readouterr().out == "nothing pending\n"
    assert main(["--db", db, "worker", "--once", *model]) == 0
    assert capsys.readouterr().out == "no job queued\n"
    assert main(["--db", db, "memories", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 7 and records[0]["sources"][0]["external_id"] == "d1-1"
    assert set(records[0]) >= {"id", "kind", "content", "status", "when", "entities", "sources"}
    # Nothing was captured since: extract has nothing new to read.
    assert main(["--db", db, "extract", "demo-1", *model, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reason"].startswith("no turns after turn 6, the last one extracted")
    # --full re-reads the session against a fresh recording: every fact is already there.
    stub2 = stub_model(load_recorded_extraction())
    assert main(["--db", db, "extract", "demo-1", "--full", "--model", "openai/stub-model", "--api-base",
                 stub2.base_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outcomes"] == {"NOOP": 7}


def test_demo_replays_a_recorded_extraction(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--db", str(tmp_path / "demo.db"), "demo"]) == 0
    out = capsys.readouterr().out
    assert "RECORDED replies" in out
    assert "extraction ok: ADD 3, UPDATE 3, 3 model calls" in out
    assert "~ [point] Maya works at Northwind Labs, a biotech startup in Oakland." in out
    assert "~ [point] Maya is a data engineer on the protein folding team at Northwind Labs." in out
    # "where do I work now?": Maya's March turn about the old job is flagged, since the Helix Health memory above
    # it replaced its fact; the assistant's reply to it ("Congratulations on the new job!") states no fact of hers
    assert '1. (memory) "Maya works at Helix Health in San Francisco' in out
    assert '3. SUPERSEDED (2024-03-02, Maya) "Hi! I just got back from my first week at Northwind Labs' in out
    assert main(["--db", str(tmp_path / "demo.db"), "demo"]) == 0  # idempotent: replayed, memories listed again
    again = capsys.readouterr().out
    assert "replayed (already captured)" in again and "Maya works at Helix Health" in again


def test_s3_degraded_treats_everything_as_new(tmp_path: Path, stub_model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tortoise_sdk.store.sqlite.extraction import SQLiteExtractionMixin

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("fts index corrupt")

    monkeypatch.setattr(SQLiteExtractionMixin, "search_memories", broken)
    stub = stub_model(load_recorded_extraction())
    with mem_for(tmp_path, stub) as mem:
        report = capture(mem, "demo-1").extraction
        assert report.status == "partial" and report.outcomes == {"ADD": 7}
        assert [(w.stage, w.code) for w in report.warnings] == [("s3", "degraded")]
        s4 = next(r for r in stub.requests if r.stage == "s4")
        assert "(unavailable: the stored graph could not be searched; treat every item as new)" in s4.prompt


def test_vet_gate_runs_between_s2_and_s4_when_enabled(tmp_path: Path, stub_model: Any) -> None:
    script = load_recorded_extraction()
    script["routes"].append({"stage": "vet", "replies": [
        {"content": {"decisions": [{"id": "c6", "action": "drop", "reason": "a passing detail, not worth remembering"}]}},
        {"content": {"decisions": [{"id": "c1", "action": "keep"}]}},  # the second pass, over S4's Tomás point
    ]})
    stub = stub_model(script)
    with mem_for(tmp_path, stub, vet=True) as mem:
        report = capture(mem, "demo-1").extraction
        assert [r.stage for r in stub.requests] == ["s1", "s2", "vet", "s4", "vet"]
        assert "Tomás" in stub.requests[-1].prompt and "Northwind" not in stub.requests[-1].prompt.split("Transcript")[0]
        assert report.status == "ok" and report.outcomes == {"ADD": 6}
        assert [(w.stage, w.code) for w in report.warnings] == [("vet", "drop")]
        assert report.stages["vet"].calls == 2 and report.stages["vet"].prompt_hash
        assert "Biscuit howls when Maya leaves for work at 7." not in [m.content for m in mem.memories()]


def test_stage_wall_ms_is_elapsed_time_not_the_sum_of_concurrent_calls(tmp_path: Path, stub_model: Any) -> None:
    empty = {"content": {"entities": [], "events": [], "points": [], "retractions": []}}
    stub = stub_model({"routes": [
        {"stage": "s1", "replies": [{"content": "Maya talked about her week.", "delay": 0.3}], "cycle": True},
        {"stage": "s2", "replies": [empty]}, {"stage": "s4", "replies": [empty]}]})
    with mem_for(tmp_path, stub, chunk_turns=2, concurrency=4) as mem:
        stages = capture(mem, "demo-1").extraction.stages
    assert stages["s1"].calls == 4
    assert stages["s1"].wall_ms >= 300
    # Sequential stages fit inside the run; four overlapping 0.3 s calls summed would not.
    assert stages["s1"].wall_ms + stages["s2"].wall_ms + stages["s4"].wall_ms <= stages["total"].wall_ms


@pytest.mark.parametrize("mode", ["inline", "background"])
def test_a_session_longer_than_a_window_is_extracted_window_after_window(tmp_path: Path, stub_model: Any,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         mode: str) -> None:
    """A reviewer's: every turn after the watermark went into one prompt (a 3,000-turn transcript: one S2 prompt of
    a million characters, past any model's context), so a long session was never extracted, retry after retry."""
    from tortoise_sdk.pipeline import window

    monkeypatch.setattr(window, "WINDOW_CHARS", 600)
    empty = {"content": {"entities": [], "events": [], "points": [], "retractions": []}}
    stub = stub_model({"routes": [{"stage": "s1", "replies": [{"content": "They talked."}], "cycle": True},
                                  {"stage": "s2", "replies": [empty], "cycle": True},
                                  {"stage": "s4", "replies": [empty], "cycle": True}]})
    turns = [{"role": "user", "content": f"turn {i}: " + "words of the conversation " * 4} for i in range(12)]
    with mem_for(tmp_path, stub, extract_every=1) as mem:
        report = mem.capture("long", turns, extract=mode if mode == "background" else True).extraction
        if mode == "background":
            assert report.status == "queued"
            jobs = []
            while pending := mem.flush():
                jobs += pending
            assert [j.status for j in jobs] == ["done"]  # one job runs on through the windows, under its lease
        else:
            assert report.status == "ok" and report.window == (0, 11) and "windows" in (report.reason or "")
        from reading_model import S2Prompt

        windows = [[index for index, _, _ in S2Prompt.parse(r.prompt).new] for r in stub.requests if r.stage == "s2"]
        assert len(windows) > 1 and max(len(w) for w in windows) < 12
        assert sorted(i for w in windows for i in w) == list(range(12))  # each turn read as new by one window
        assert mem.store.extraction_state("t", "long").watermark == 11


def test_a_window_is_bounded_by_what_the_prompts_show(tmp_path: Path) -> None:
    """A reviewer's: the bound counted tool results the prompts never show, so a coding session with large tool
    output was read in 27-turn windows (586 characters of prompt each, against 80,000): twenty times the calls."""
    from tortoise_sdk.pipeline.prompts import load_prompt
    from tortoise_sdk.pipeline.window import read_window

    turns = [t for i in range(300) for t in ({"role": "user", "content": f"step {i}: run the parser on file {i}"},
                                             {"role": "tool", "content": "x" * 15_000})]
    with Memory(str(tmp_path / "m.db"), namespace="t") as mem:
        mem.capture("coding", turns, extract=False)
        prompts = {name: load_prompt(name) for name in ("s1_narrate", "s2_map", "s4_review", "coding")}
        reading = read_window(mem.store, "t", "coding", prompts, full=False)
    assert reading.window.end == 599 and not reading.window.more and len(reading.evidence) == 300
