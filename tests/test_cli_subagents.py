"""CLI: capture of agent transcripts (--format), ``tortoise subagents`` and ``tortoise stats``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import run_cli as run
from tortoise_sdk import Memory

EXCERPT = Path(__file__).parent / "data" / "claude_code_subagent_excerpt.jsonl"
SESSION = "491e126e-1e71-469c-ade2-fcc8af567c74"
TASK_ID = "toolu_01Cz2Pnv7qNcnK1ZiocxWhQX"


@pytest.mark.parametrize("fmt", ["auto", "claude-code"])
def test_capture_a_transcript_then_list_subagents_and_stats(capsys, db, fmt):
    code, out, _ = run(capsys, "--db", db, "capture", str(EXCERPT), "--format", fmt, "--json")
    assert code == 0
    report = json.loads(out)
    assert (report["format"], report["sessions"], report["turns_stored"], report["frames_recorded"]) == (
        "claude-code", 2, 5, 3)  # the sub-agent's progress message is a turn of "<session>:agent-afb92ff"
    assert report["counters"] == {"attempted": 3, "persisted": 3, "upserted": 3, "skipped_no_identity": 0, "unknown_execution": 0,
                                  "backfill_unknown_execution": 3, "anomalous_value": 0, "failed": 0}
    assert report["parse"]["lines"] == 5

    code, out, _ = run(capsys, "--db", db, "subagents", "--json")
    (row,) = json.loads(out)
    assert (row["session_id"], row["tool_call_id"], row["agent_execution_id"]) == (SESSION, TASK_ID, "unknown")
    assert (row["total_tokens"], row["duration_ms"], row["tool_use_count"]) == (33894, 38799, 9)
    assert (row["tool_status"], row["source"], row["is_async"]) == ("completed", "backfill", False)
    assert row["settled_at"] is not None and row["turn_id"].startswith("t_")

    code, out, _ = run(capsys, "--db", db, "subagents", "--session", "elsewhere", "--json")
    assert (code, json.loads(out)) == (0, [])

    code, out, _ = run(capsys, "--db", db, "stats", "--json")
    assert json.loads(out) == {"namespace": "default", "sessions": 2, "turns": 5, "memories": 0, "entities": 0,
                               "subagents": 1,
                               "subagent_counters": {"attempted": 3, "persisted": 3, "upserted": 3,
                                                     "skipped_no_identity": 0,
                                                     "unknown_execution": 0, "backfill_unknown_execution": 3,
                                                     "anomalous_value": 0, "failed": 0}, "jobs": {}}


def test_recapture_stores_nothing_new_and_text_output(capsys, db):
    assert run(capsys, "--db", db, "capture", str(EXCERPT))[0] == 0
    code, out, err = run(capsys, "--db", db, "capture", str(EXCERPT))
    assert code == 0
    assert out.startswith("ingested claude-code: 2 session(s), 0 new turn(s) of 5; 3 of 3 sub-agent frame(s) recorded")
    assert err == ""  # every line of the excerpt was used
    code, out, _ = run(capsys, "--db", db, "subagents")
    assert code == 0 and TASK_ID in out and "33,894" in out and "38.8s" in out and "Plan" in out
    code, out, _ = run(capsys, "--db", db, "stats")
    assert "2 session(s), 5 turn(s), 0 live memory(ies), 0 entity(ies), 1 sub-agent invocation(s)" in out and "attempted 6, persisted 6," in out
    assert "upserted" not in out


def test_stats_counts_the_memories_a_host_remembered(capsys, db):
    # a namespace holding only what a host remembered has no session: its memories are still counted
    from tortoise_sdk import Memory

    with Memory(db, namespace="notes") as mem:
        mem.remember("Maya likes green tea", about=["Maya"])
    code, out, _ = run(capsys, "--db", db, "--namespace", "notes", "stats", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["sessions"], doc["memories"], doc["entities"]) == (0, 1, 1)


def test_capture_a_transcript_from_stdin(monkeypatch, capsys, db):
    monkeypatch.setattr("sys.stdin", io.StringIO(EXCERPT.read_text(encoding="utf-8")))
    code, out, _ = run(capsys, "--db", db, "capture", "-", "--json")
    assert code == 0 and json.loads(out)["frames_recorded"] == 3


def test_turn_files_keep_todays_behaviour(capsys, db, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"role": "user", "content": "hello", "id": "m1"}) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "--db", db, "capture", str(f))
    assert code == 2 and "--session" in err
    code, out, _ = run(capsys, "--db", db, "capture", str(f), "--format", "turns", "--session", "s1", "--json")
    assert code == 0 and json.loads(out)["turns_stored"] == 1
    f.write_text('{"role": "user", "content": "hello"}\n{"role": \n', encoding="utf-8")
    code, _, err = run(capsys, "--db", db, "capture", str(f), "--session", "s1")
    assert code == 2 and "line 2 is not valid JSON" in err


def test_transcript_options_that_do_not_apply_are_refused(capsys, db):
    code, _, err = run(capsys, "--db", db, "capture", str(EXCERPT), "--key", "k1")
    assert code == 2 and "--key" in err


def test_subagents_of_a_session_shown_cut_short_and_of_one_with_none(capsys, db):
    # Reviewer: the table cuts session ids ("491e126e-1e…") and only the whole id matched; a session with no
    # row was told to ingest a transcript, though rows existed.
    assert run(capsys, "--db", db, "capture", str(EXCERPT))[0] == 0
    code, out, _ = run(capsys, "--db", db, "subagents")
    shown = next(w for w in out.split() if w.startswith(SESSION[:8]))
    assert shown.endswith("…")
    code, out, _ = run(capsys, "--db", db, "subagents", "--session", shown, "--json")
    assert [r["tool_call_id"] for r in json.loads(out)] == [TASK_ID]
    code, out, _ = run(capsys, "--db", db, "subagents", "--session", SESSION[:8], "--json")
    assert json.loads(out) == []  # a plain id is matched whole
    code, out, err = run(capsys, "--db", db, "subagents", "--session", "elsewhere")
    assert (code, out) == (0, "") and "for session 'elsewhere'" in err and "without --session" in err


def test_subagents_on_an_empty_store(capsys, db):
    Memory(db).close()
    code, out, err = run(capsys, "--db", db, "subagents")
    assert (code, out) == (0, "") and "no sub-agent invocations" in err


def test_empty_input_is_still_invalid(capsys, db, tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text("\n", encoding="utf-8")
    code, _, err = run(capsys, "--db", db, "capture", str(f), "--session", "s1")
    assert code == 2 and "the input is empty" in err
