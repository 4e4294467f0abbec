"""``tortoise hook`` and ``tortoise hooks``: Claude Code hook payloads against real transcripts growing line by line.

The payloads have the fields Claude Code sends (``session_id``, ``transcript_path``, ``cwd``,
``permission_mode``, ``hook_event_name``; ``prompt`` on UserPromptSubmit; ``stop_hook_active``
on Stop; ``agent_id``/``agent_type``/``agent_transcript_path`` on SubagentStop; ``trigger`` on
PreCompact; ``reason`` on SessionEnd).
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from needs import TRANSCRIPTS, needs_transcripts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tortoise_sdk import Memory
from tortoise_sdk.streams import parse_stream
from tortoise_sdk.adapters.claude_code import MAX_BYTES_PER_CALL, handle_event
from tortoise_sdk.cli import main

DATA = Path(__file__).resolve().parent / "data"
SHORT = DATA / "claude_code_short.jsonl"
EXCERPT = DATA / "claude_code_subagent_excerpt.jsonl"
TORTOISE = str(Path(sys.executable).with_name("tortoise"))
SHORT_SESSION = "55604662-cf2a-4331-851a-ec234028f8ca"
#: Row fields that differ between a live hook and a backfill of the same file by design.
NOT_COMPARED = {"id", "source", "settled_at", "updated_at"}


def payload(event: str, session_id: str, transcript: Path, **extra: Any) -> dict[str, Any]:
    base = {"session_id": session_id, "transcript_path": str(transcript), "cwd": "/home/marco/projects/spotter",
            "permission_mode": "default", "hook_event_name": event}
    defaults = {"Stop": {"stop_hook_active": False}, "PreCompact": {"trigger": "auto", "custom_instructions": ""},
                "SessionEnd": {"reason": "other"}}
    return {**base, **defaults.get(event, {}), **extra}


def run_hook(monkeypatch, capsys, db: Path, event: dict[str, Any], *options: str) -> dict[str, Any] | None:
    """``tortoise hook`` in this process, the event on stdin; returns the printed JSON, or None."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(event)))
    assert main(["--db", str(db), "hook", *options]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if out.strip() else None


def grow(src: Path, dst: Path) -> Any:
    """Append ``src`` to ``dst`` one line at a time, yielding after each line (as Claude Code writes it)."""
    dst.write_bytes(b"")
    for line in src.read_bytes().splitlines(keepends=True):
        with dst.open("ab") as f:
            f.write(line)
        yield line


def rows(mem: Memory) -> list[dict[str, Any]]:
    return [r.model_dump(exclude=NOT_COMPARED) for r in mem.subagents()]


def stored_turns(mem: Memory) -> dict[str, list[tuple[Any, ...]]]:
    return {s.session_id: [(t.external_id, t.role, t.content) for t in mem.turns(s.session_id)]
            for s in mem.sessions()}


# -- the transcript, growing line by line ----------------------------------------------------------


def feed_line_by_line(monkeypatch, capsys, tmp_path: Path, src: Path, session_id: str) -> tuple[Path, list[str]]:
    """Every line appended is followed by a hook event, cycling through the five events."""
    db, transcript = tmp_path / "hooks.db", tmp_path / "live" / f"{session_id}.jsonl"
    transcript.parent.mkdir()
    events = ["UserPromptSubmit", "Stop", "SubagentStop", "PreCompact", "SessionEnd"]
    captured: list[str] = []
    with Memory(str(db)) as mem:
        for n, _ in enumerate(grow(src, transcript)):
            before = {r.receipt_id for r in mem.receipts()}
            extra = {"prompt": "what next?"} if events[n % 5] == "UserPromptSubmit" else {}
            if events[n % 5] == "SubagentStop":
                extra = {"agent_id": "a1", "agent_type": "Plan", "agent_transcript_path": str(transcript)}
            run_hook(monkeypatch, capsys, db, payload(events[n % 5], session_id, transcript, **extra))
            captured += [t for r in mem.receipts() if r.receipt_id not in before for t in r.turn_ids]
    return db, captured


@pytest.mark.parametrize("src, session_id", [(SHORT, SHORT_SESSION),
                                              (EXCERPT, "491e126e-1e71-469c-ade2-fcc8af567c74")])
def test_hooks_on_a_growing_transcript_capture_each_turn_once_and_equal_a_whole_capture(
        monkeypatch, capsys, tmp_path, src, session_id) -> None:
    db, captured = feed_line_by_line(monkeypatch, capsys, tmp_path, src, session_id)
    whole = tmp_path / "whole.db"
    assert main(["--db", str(whole), "capture", str(tmp_path / "live" / f"{session_id}.jsonl")]) == 0
    with Memory(str(db)) as live, Memory(str(whole)) as backfill:
        assert len(captured) == len(set(captured)), "a turn was captured twice"
        assert len(captured) == sum(s.turn_count for s in live.sessions()) > 0
        assert stored_turns(live) == stored_turns(backfill)
        assert rows(live) == rows(backfill)
        assert {r.source for r in live.subagents()} <= {"live"}


@needs_transcripts
def test_the_real_sub_agent_session_line_by_line_gives_the_rows_of_tortoise_capture(monkeypatch, capsys,
                                                                                     tmp_path) -> None:
    session = "491e126e-1e71-469c-ade2-fcc8af567c74"
    db, captured = feed_line_by_line(monkeypatch, capsys, tmp_path, TRANSCRIPTS / "subagent.jsonl", session)
    whole = tmp_path / "whole.db"
    assert main(["--db", str(whole), "capture", str(TRANSCRIPTS / "subagent.jsonl")]) == 0
    with Memory(str(db)) as live, Memory(str(whole)) as backfill:
        assert len(captured) == len(set(captured)) == 62
        assert stored_turns(live) == stored_turns(backfill)
        assert rows(live) == rows(backfill) and len(rows(live)) == 1
        row = live.subagents()[0]
        assert (row.subagent_type, row.total_tokens, row.tool_status) == ("Plan", 33894, "completed")
        assert row.turn_id is not None  # the launching turn, captured in an earlier hook call


def test_subagent_stop_captures_the_sub_agents_own_transcript(monkeypatch, capsys, tmp_path) -> None:
    """SubagentStop names the sub-agent's own file (``agent_transcript_path``): its lines are captured too."""
    session = "491e126e-1e71-469c-ade2-fcc8af567c74"
    lines = EXCERPT.read_text(encoding="utf-8").splitlines()
    parent = tmp_path / f"{session}.jsonl"
    parent.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")  # up to the Task call, no progress line
    # The sub-agent's own file holds its messages as sidechain lines (built from the progress line's message).
    progress = json.loads(lines[3])
    agent = progress["data"]["agentId"]
    child = tmp_path / session / "subagents" / f"agent-{agent}.jsonl"
    child.parent.mkdir(parents=True)
    child.write_text(json.dumps({"parentUuid": None, "isSidechain": True, "userType": "external", "cwd": progress["cwd"],
                                 "sessionId": session, "version": progress["version"], "agentId": agent,
                                 **progress["data"]["message"]}) + "\n", encoding="utf-8")
    db = tmp_path / "m.db"
    assert run_hook(monkeypatch, capsys, db, payload("SubagentStop", session, parent, stop_hook_active=False,
                                                     agent_id=agent, agent_type="Plan",
                                                     agent_transcript_path=str(child))) is None
    with Memory(str(db)) as live, Memory(str(tmp_path / "whole.db")) as whole:
        whole.ingest(parent)
        whole.ingest(child)
        assert stored_turns(live) == stored_turns(whole)
        (turn,) = live.turns(f"{session}:agent-{agent}")
        assert turn.external_id == progress["data"]["message"]["uuid"]
        assert turn.content.startswith("Draft bead content for setting up Credo")


def own_transcript(parent: Path, dst: Path) -> list[str]:
    """The sub-agent's own file as Claude Code writes it: each agent_progress message (its uuid kept) in a
    sidechain envelope. Returns the messages' uuids."""
    uuids, lines, previous = [], [], None
    for raw in parent.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        data = line.get("data") or {}
        if line.get("type") != "progress" or data.get("type") != "agent_progress":
            continue
        message = data["message"]
        lines.append(json.dumps({"parentUuid": previous, "isSidechain": True, "userType": "external",
                                 "cwd": line["cwd"], "sessionId": line["sessionId"], "version": line["version"],
                                 "gitBranch": line["gitBranch"], "agentId": data["agentId"], "slug": line["slug"],
                                 **message}))
        previous = message["uuid"]
        uuids.append(previous)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return uuids


@needs_transcripts
@pytest.mark.parametrize("agent_first", [False, True])
def test_a_sub_agents_messages_are_stored_once_from_the_parents_progress_and_its_own_file(
        monkeypatch, capsys, tmp_path, agent_first) -> None:
    """The parent's agent_progress lines carry the sub-agent's messages with their uuids, and SubagentStop's
    agent_transcript_path holds the same messages: both land in ``<session>:agent-<agentId>`` under the uuid."""
    session = "491e126e-1e71-469c-ade2-fcc8af567c74"
    parent = tmp_path / f"{session}.jsonl"
    parent.write_bytes((TRANSCRIPTS / "subagent.jsonl").read_bytes())
    child = tmp_path / session / "subagents" / "agent-afb92ff.jsonl"
    uuids = own_transcript(parent, child)
    db = tmp_path / "m.db"
    stop = payload("Stop", session, parent)
    subagent_stop = payload("SubagentStop", session, parent, stop_hook_active=False, agent_id="afb92ff",
                            agent_type="Plan", agent_transcript_path=str(child))
    for event in ([subagent_stop, stop] if agent_first else [stop, subagent_stop]):
        assert run_hook(monkeypatch, capsys, db, event) is None
    with Memory(str(db)) as live, Memory(str(tmp_path / "parent-only.db")) as parent_only:
        parent_only.ingest(parent)
        turns = live.turns(f"{session}:agent-afb92ff")
        assert [t.external_id for t in turns] == uuids and len(set(uuids)) == 19
        assert stored_turns(live) == stored_turns(parent_only)
        assert sum(s.turn_count for s in live.sessions()) == 62
        assert len(live.subagents()) == 1


def test_the_block_of_an_earlier_session_reaches_additional_context(monkeypatch, capsys, tmp_path) -> None:
    db = tmp_path / "m.db"
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_bytes(SHORT.read_bytes())
    assert run_hook(monkeypatch, capsys, db, payload("SessionEnd", SHORT_SESSION, earlier)) is None
    today = tmp_path / "today.jsonl"
    today.write_bytes(b"")  # a new session: the prompt is not in its transcript yet
    ask = payload("UserPromptSubmit", "today", today, prompt="mix phx.server doesnt start again")
    out = run_hook(monkeypatch, capsys, db, ask)
    assert out is not None and set(out) == {"hookSpecificOutput"}
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    block = out["hookSpecificOutput"]["additionalContext"]
    assert block.startswith("[tortoise memory]") and "mix phx.server doesnt seem to start" in block
    # Shown once in this session: the same words do not bring it (or anything shown with it) again; what
    # comes, if anything, is evidence not shown yet (in this small store every word of the prompt is searched).
    shown = set(re.findall(r"ref:(\S+)", block))
    repeat = run_hook(monkeypatch, capsys, db, ask)
    said = repeat["hookSpecificOutput"]["additionalContext"] if repeat else ""
    assert shown and not shown & set(re.findall(r"ref:(\S+)", said)) and "doesnt seem to start" not in said
    # ... unless the user asks for it.
    again = run_hook(monkeypatch, capsys, db, {**ask, "prompt": "remind me what we found about mix phx.server?"})
    assert again is not None and "mix phx.server doesnt seem to start" in again["hookSpecificOutput"][
        "additionalContext"]
    # Another session has its own record of what it was shown.
    other = run_hook(monkeypatch, capsys, db, {**ask, "session_id": "tomorrow"})
    assert other is not None
    # A prompt with nothing relevant prints nothing at all.
    assert run_hook(monkeypatch, capsys, db, {**ask, "prompt": "thanks!"}) is None


def test_the_line_after_the_block_opens_a_pointer_whole_and_exact(monkeypatch, capsys, tmp_path) -> None:
    """Reviewer: a block shows `2>&1` as `2)&1` (brackets are made inert) and cuts a turn at 300 characters, and
    the refs were dead ends in Claude Code. The line after the block is the command that prints one whole; the id
    may be copied with its `ref:` as printed."""
    import shlex

    db = tmp_path / "m.db"
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_bytes(SHORT.read_bytes())
    run_hook(monkeypatch, capsys, db, payload("SessionEnd", SHORT_SESSION, earlier))
    (tmp_path / "today.jsonl").write_bytes(b"")
    out = run_hook(monkeypatch, capsys, db, payload("UserPromptSubmit", "today", tmp_path / "today.jsonl",
                                                    prompt="mix phx.server doesnt start again"))
    text = out["hookSpecificOutput"]["additionalContext"]
    block, hint = text.rsplit("\n", 1)
    assert block.endswith("[/tortoise memory]") and "ref:" not in hint
    command = re.search(r"`(tortoise .*? expand) ID`", hint).group(1)
    assert f"--db {db}" in command
    ref = re.search(r"ref:(t_\w+)", block).group(0)  # as printed, "ref:" and all
    assert main([*shlex.split(command)[1:], ref]) == 0
    shown = capsys.readouterr().out
    with Memory(str(db)) as mem:
        whole = mem.expand(ref.removeprefix("ref:"))
        assert mem.expand(ref) == whole  # the library takes it as printed too
    assert whole.content in shown


def test_the_expand_line_never_writes_a_password_and_says_which_db_to_give() -> None:
    """Reviewer: with a PostgreSQL URL holding a password the line dropped --db, so it read the default database."""
    from types import SimpleNamespace

    from tortoise_sdk.adapters.claude_code import expand_hint

    mem = SimpleNamespace(store=SimpleNamespace(url="postgresql://bob:***@db.internal/mem"), namespace="alpha")
    hint = expand_hint(mem)  # type: ignore[arg-type]
    assert "`tortoise --db DB_URL --namespace alpha expand ID`" in hint and "--db of the hook's command" in hint
    assert "***" not in hint and "bob" not in hint
    from tortoise_sdk.store.postgres import redact_url

    mem.store.url = redact_url("postgresql://bob@db.internal/mem?password=hunter2")  # as the store keeps it
    assert "DB_URL" in expand_hint(mem) and "hunter2" not in expand_hint(mem)  # type: ignore[arg-type]


def test_a_rewritten_or_truncated_transcript_is_read_again_safely(monkeypatch, capsys, tmp_path) -> None:
    db, transcript = tmp_path / "m.db", tmp_path / "t.jsonl"
    lines = SHORT.read_bytes().splitlines(keepends=True)
    transcript.write_bytes(b"".join(lines[:10]))
    run_hook(monkeypatch, capsys, db, payload("Stop", SHORT_SESSION, transcript))
    with Memory(str(db)) as mem:
        first = stored_turns(mem)
        # Truncated (e.g. a rewrite in progress), then rewritten whole with the same messages.
        transcript.write_bytes(b"".join(lines[:3]))
        run_hook(monkeypatch, capsys, db, payload("Stop", SHORT_SESSION, transcript))
        assert stored_turns(mem) == first
        assert mem.cursor(f"follow:{transcript.resolve()}").value["offset"] == len(b"".join(lines[:3]))
        transcript.write_bytes(b"".join(lines))
        run_hook(monkeypatch, capsys, db, payload("Stop", SHORT_SESSION, transcript))
        report_turns = stored_turns(mem)
    whole = Memory(str(tmp_path / "w.db"))
    whole.ingest(SHORT)
    assert report_turns == stored_turns(whole)
    whole.close()


def test_a_half_written_last_line_waits_for_the_next_call(tmp_path) -> None:
    transcript = tmp_path / "t.jsonl"
    lines = SHORT.read_bytes().splitlines(keepends=True)
    with Memory(str(tmp_path / "m.db")) as mem:
        transcript.write_bytes(b"".join(lines[:6]) + lines[6][:40])
        first = mem.follow(transcript, "claude-code")
        assert first.end_offset == len(b"".join(lines[:6])) and first.turns_stored == 1
        transcript.write_bytes(b"".join(lines[:7]))
        second = mem.follow(transcript, "claude-code")
        assert (second.start_offset, second.end_offset) == (first.end_offset, len(b"".join(lines[:7])))
        assert second.turns_stored == 1 and not second.parse.malformed
        bounded = mem.follow(transcript.with_name("t.jsonl"), "claude-code")
        assert bounded.turns_stored == 0 and bounded.start_offset == bounded.end_offset


def test_a_whole_last_line_without_its_newline_is_read_and_the_next_lines_follow_it(tmp_path) -> None:
    # Transcripts that end without a newline (every file of the entireio project does) lost their last reply.
    transcript = tmp_path / "t.jsonl"
    lines = SHORT.read_bytes().splitlines(keepends=True)
    with Memory(str(tmp_path / "m.db")) as mem:
        transcript.write_bytes(b"".join(lines[:7]).rstrip(b"\n"))
        first = mem.follow(transcript, "claude-code")
        # Line 7 is read; the cursor stays at its start, so the next call reads it again, whole.
        assert first.end_offset == len(b"".join(lines[:6])) and first.turns_stored == 2
        again = mem.follow(transcript, "claude-code")
        assert (again.start_offset, again.end_offset, again.turns_stored) == (first.end_offset, first.end_offset, 0)
        transcript.write_bytes(b"".join(lines))
        rest = mem.follow(transcript, "claude-code")
        assert rest.start_offset == first.end_offset and not rest.parse.malformed
        with Memory(str(tmp_path / "w.db")) as whole:
            whole.ingest(SHORT)
            assert stored_turns(mem) == stored_turns(whole)
        # Lines keep their numbers: what the rest reports is what a whole parse reports of lines 7 on.
        assert [(s.line, s.reason) for s in rest.parse.skipped] == [
            (s.line, s.reason) for s in parse_stream(SHORT).report.skipped if s.line is not None and s.line > 6]
        assert rest.parse.skipped


def test_a_tool_call_read_without_its_newline_still_names_its_result(tmp_path) -> None:
    # The line read without its newline was not indexed by the next call: its result lost the tool's name.
    def line(kind, content, n):
        return json.dumps({"type": kind, "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n else None, "sessionId": "s",
                           "timestamp": f"2026-01-05T12:00:0{n}Z", "message": {"role": kind, "content": content}})
    call = [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest -q"}}]
    result = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3 passed"}]
    parts = [line("user", "run the tests", 0), line("assistant", call, 1), line("user", result, 2)]
    transcript = tmp_path / "t.jsonl"
    with Memory(str(tmp_path / "m.db")) as mem:
        transcript.write_text("\n".join(parts[:2]))
        mem.follow(transcript, "claude-code")
        transcript.write_text("\n".join(parts) + "\n")
        mem.follow(transcript, "claude-code")
        with Memory(str(tmp_path / "w.db")) as whole:
            whole.ingest(transcript)
            assert stored_turns(mem) == stored_turns(whole)
        assert any(t.content.startswith("[tool_result Bash]") for t in mem.turns("s"))


def test_max_bytes_takes_a_backlog_over_several_calls(tmp_path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(SHORT.read_bytes())
    with Memory(str(tmp_path / "m.db")) as mem:
        calls = 0
        while True:
            report = mem.follow(transcript, "claude-code", max_bytes=1)  # one line per call at least
            calls += 1
            if report.end_offset == report.start_offset:
                break
        assert calls == len(SHORT.read_bytes().splitlines()) + 1
        whole = Memory(str(tmp_path / "w.db"))
        whole.ingest(SHORT)
        assert stored_turns(mem) == stored_turns(whole)
        whole.close()


def test_the_last_turns_after_megabytes_of_tool_output_are_captured_when_the_session_ends(
        monkeypatch, capsys, tmp_path) -> None:
    """A user's: the last turn read three large files (2.9 MB of tool results) and then answered; Stop and SessionEnd
    took 1 MiB each, and the answer, the session's conclusion, was never captured (no later event came)."""
    sid = "s-big"

    def line(n: int, kind: str, content: Any) -> str:
        return json.dumps({"type": kind, "uuid": f"u{n}", "sessionId": sid, "timestamp": f"2026-01-05T12:00:{n:02d}Z",
                           "message": {"id": f"m{n}", "role": kind, "content": content}})

    lines = [line(0, "user", "which of the generated parsers sets MAX_FRAME?")]
    for i in range(3):
        lines.append(line(1 + 2 * i, "assistant", [{"type": "tool_use", "id": f"t{i}", "name": "Read",
                                                    "input": {"file_path": f"/p/gen{i}.go"}}]))
        lines.append(line(2 + 2 * i, "user", [{"type": "tool_result", "tool_use_id": f"t{i}",
                                               "content": f"// gen{i}.go\n" + "var x = 1\n" * 90_000}]))
    lines.append(line(7, "assistant", "gen2.go sets MAX_FRAME to 65536 in its init function."))
    transcript = tmp_path / f"{sid}.jsonl"
    transcript.write_text("\n".join(lines) + "\n")
    assert transcript.stat().st_size > 2 * MAX_BYTES_PER_CALL
    db = tmp_path / "m.db"
    for event in ("Stop", "SessionEnd"):  # the session's last two events
        run_hook(monkeypatch, capsys, db, payload(event, sid, transcript))
    with Memory(str(db)) as mem, Memory(str(tmp_path / "whole.db")) as whole:
        whole.ingest(transcript)
        assert stored_turns(mem) == stored_turns(whole)
        assert "MAX_FRAME to 65536" in mem.turns(sid)[-1].content


def test_a_prompt_still_takes_one_piece_of_a_backlog(tmp_path) -> None:
    """The prompt waits for its block: only a capture event reads on past ``max_bytes``."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(SHORT.read_bytes())
    with ExitStack() as stack:
        mem = stack.enter_context(Memory(str(tmp_path / "m.db")))
        whole = stack.enter_context(Memory(str(tmp_path / "w.db")))
        whole.ingest(SHORT)
        handle_event(mem, payload("UserPromptSubmit", SHORT_SESSION, transcript, prompt="hello"), max_bytes=1)
        assert len(mem.turns(SHORT_SESSION)) < len(whole.turns(SHORT_SESSION))
        handle_event(mem, payload("Stop", SHORT_SESSION, transcript), max_bytes=1)
        assert stored_turns(mem) == stored_turns(whole)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, len(SHORT.read_bytes())), max_size=12),
       shrink_at=st.one_of(st.none(), st.integers(0, 11)), max_bytes=st.one_of(st.none(), st.integers(1, 4000)))
def test_any_growth_of_the_file_captures_each_turn_once_and_ends_equal_to_a_whole_ingest(
        tmp_path_factory, cuts, shrink_at, max_bytes) -> None:
    """Writes cut anywhere (mid-line too), a truncation at any step, any per-call byte bound."""
    data = SHORT.read_bytes()
    d = tmp_path_factory.mktemp("growth")
    transcript = d / "t.jsonl"
    transcript.write_bytes(b"")
    seen: list[str] = []
    with Memory(str(d / "m.db")) as mem:
        for i, cut in enumerate([*sorted(cuts), len(data)]):
            if i == shrink_at:
                transcript.write_bytes(data[: cut // 2])  # truncated, then written again below
                seen += [t for r in mem.follow(transcript, "claude-code", max_bytes=max_bytes).receipts
                         for t in r.turn_ids]
            transcript.write_bytes(data[:cut])
            seen += [t for r in mem.follow(transcript, "claude-code", max_bytes=max_bytes).receipts
                     for t in r.turn_ids]
        while (report := mem.follow(transcript, "claude-code", max_bytes=max_bytes)).end_offset > report.start_offset:
            seen += [t for r in report.receipts for t in r.turn_ids]
        assert len(seen) == len(set(seen))
        with Memory(str(d / "whole.db")) as whole:
            whole.ingest(SHORT)
            assert stored_turns(mem) == stored_turns(whole)
            assert len(seen) == sum(s.turn_count for s in whole.sessions())


# -- the real command, as Claude Code runs it -------------------------------------------------------


def hook_process(db: str, event: dict[str, Any], *options: str, timeout: float = 60) -> tuple[
        subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run([TORTOISE, "--db", db, "hook", *options], input=json.dumps(event),
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - started


@pytest.mark.parametrize("event", ["UserPromptSubmit", "SessionEnd"])
def test_an_event_on_a_stdin_claude_code_leaves_open_is_handled_at_once(tmp_path, event) -> None:
    """Claude Code writes the event and, in some versions and cases (SessionEnd after /clear; hooks on Windows),
    leaves the pipe open: the hook waited for an end of input that never came, was stopped at its 8 s limit and
    did nothing (a prompt waited 8 s for no block; the session's end was not captured)."""
    db = str(tmp_path / "m.db")
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(SHORT.read_bytes())
    body = payload(event, SHORT_SESSION, transcript, prompt="why does mix phx.server not start? é")
    started = time.monotonic()
    proc = subprocess.Popen([TORTOISE, "--db", db, "hook"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    text = json.dumps(body, ensure_ascii=False).encode()
    proc.stdin.write(text[:7])  # in two writes, the first ending inside a word
    proc.stdin.flush()
    time.sleep(0.2)
    proc.stdin.write(text[7:])
    proc.stdin.flush()  # and not closed
    try:
        code = proc.wait(timeout=30)  # stdout and stderr are small: the pipes do not fill
        elapsed = time.monotonic() - started
        err = proc.stderr.read() if proc.stderr else b""
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert (code, err) == (0, b"")
    log = tmp_path / "hooks.log"
    assert not log.exists() or "timed out" not in log.read_text()
    assert elapsed < 7, elapsed  # under the hook's own 8 s limit: it did not wait for the end of input
    with Memory(db) as mem:
        assert len(mem.turns(SHORT_SESSION)) > 0  # the event was acted on

def test_the_hook_command_prints_the_hook_output_for_claude_code(tmp_path) -> None:
    db = str(tmp_path / "m.db")
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_bytes(SHORT.read_bytes())
    proc, _ = hook_process(db, payload("Stop", SHORT_SESSION, earlier))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    proc, _ = hook_process(db, payload("UserPromptSubmit", "s2", tmp_path / "none-yet.jsonl",
                                       prompt="why does mix phx.server not start?"))
    assert proc.returncode == 0 and proc.stderr == ""
    out = json.loads(proc.stdout)
    assert "mix phx.server doesnt seem to start" in out["hookSpecificOutput"]["additionalContext"]
    # The transcript a new session's first prompt names is not written yet: no block lost, no warning logged
    # (reviewer: one per new session). A Stop naming a missing file logs one line, no traceback.
    assert not (tmp_path / "hooks.log").exists() or "s2" not in (tmp_path / "hooks.log").read_text()
    proc, _ = hook_process(db, payload("Stop", "s3", tmp_path / "gone.jsonl"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    log = (tmp_path / "hooks.log").read_text()
    assert "StreamParseError" in log and "gone.jsonl" in log and "Traceback" not in log


def test_a_locked_database_costs_a_prompt_the_store_bound_and_the_block_still_comes(tmp_path) -> None:
    db = str(tmp_path / "m.db")
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_bytes(SHORT.read_bytes())
    hook_process(db, payload("Stop", SHORT_SESSION, earlier))
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "user", "sessionId": "s2", "uuid": "u-1", "timestamp":
                                      "2026-12-01T10:00:00Z", "message": {"role": "user", "content": "hello"}}) + "\n")
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database: every write waits, reads go on
    try:
        proc, elapsed = hook_process(db, payload("UserPromptSubmit", "s2", transcript,
                                                 prompt="why does mix phx.server not start?"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    # Claude Code waits for the hook: the capture gives up after HOOK_STORE_TIMEOUT_S, not the hook's 8 s
    # limit (which would print nothing), and the block is built from what is stored.
    assert proc.returncode == 0 and proc.stderr == ""
    assert "mix phx.server doesnt seem to start" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    log = (tmp_path / "hooks.log").read_text()
    assert "transcript not captured" in log and "within store_timeout_s=2s" in log and "timed out after" not in log
    with Memory(db) as mem:
        assert mem.turns("s2") == []  # the capture that gave up left nothing half-written...
    hook_process(db, payload("Stop", "s2", transcript))
    with Memory(db) as mem:
        assert [t.content for t in mem.turns("s2")] == ["hello"]  # ... and the next event took it


#: ``tortoise hook`` in a process whose event handler first sleeps 30 s: a run the hard limit must stop.
_STALLED_HOOK = """
import sys, time
import tortoise_sdk.adapters.claude_code as cc
real = cc.handle_event
cc.handle_event = lambda *a, **k: (time.sleep(30), real(*a, **k))[1]
from tortoise_sdk.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_run_past_the_limit_exits_0_silently_and_loses_nothing(tmp_path) -> None:
    db = str(tmp_path / "m.db")
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(SHORT.read_bytes())
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _STALLED_HOOK, "--db", db, "hook", "--timeout", "1"],
                          input=json.dumps(payload("UserPromptSubmit", SHORT_SESSION, transcript, prompt="hello mix")),
                          capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert elapsed < 1 + 5.0, f"the hook took {elapsed:.1f} s"  # the limit plus interpreter start-up
    assert "timed out after 1 s; nothing printed, the host went on" in (tmp_path / "hooks.log").read_text()
    hook_process(db, payload("Stop", SHORT_SESSION, transcript))
    with Memory(db) as mem, Memory(str(tmp_path / "w.db")) as whole:
        whole.ingest(SHORT)
        assert stored_turns(mem) == stored_turns(whole)


@pytest.mark.parametrize("db", ["postgresql://postgres@127.0.0.1:1/postgres", "{tmp}/a-directory"])
def test_a_broken_store_exits_0_silently_and_says_why_in_the_log(tmp_path, db) -> None:
    (tmp_path / "a-directory").mkdir()
    db = db.format(tmp=tmp_path)
    proc, elapsed = hook_process(db, payload("UserPromptSubmit", "s", SHORT, prompt="mix phx.server?"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert elapsed < 8 + 3.0
    log_dir = Path.home() / ".tortoise" if db.startswith("postgresql") else tmp_path
    said = "StoreError" if db.startswith("postgresql") else "NotADatabase: " + db + " is a directory"
    assert said in (log_dir / "hooks.log").read_text()


@pytest.mark.parametrize("options", [["--bogus"], ["--budget", "x"], ["--timeout", "nan"], ["extra-word"]])
def test_refused_arguments_exit_0_silently_and_say_why_in_the_log(monkeypatch, capsys, tmp_path, options) -> None:
    """Reviewer: a hook command with an argument this version does not take (a settings file written by another
    version, or edited by hand) exited 2 with usage on stderr, which Claude Code reads as "block the prompt"."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(payload("UserPromptSubmit", "s", SHORT, prompt="hi"))))
    assert main(["hook", "--db", str(tmp_path / "m.db"), *options]) == 0
    assert capsys.readouterr() == ("", "")
    log = (tmp_path / "hooks.log").read_text()
    assert "the hook's arguments were refused, so it did nothing" in log and options[0] in log
    assert not (tmp_path / "m.db").exists()


def test_garbage_on_stdin_exits_0_silently(tmp_path) -> None:
    proc = subprocess.run([TORTOISE, "--db", str(tmp_path / "m.db"), "hook"], input="not json",
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    log = (tmp_path / "hooks.log").read_text()
    assert "JSONDecodeError" in log and "Traceback" not in log and log.count("\n") == 1  # one line, not a traceback


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (os.openpty)")
def test_run_by_hand_on_a_terminal_it_says_what_it_is_for_and_exits_2(tmp_path) -> None:
    """A real hook never has a terminal on stdin; a person who types `tortoise hook` gets a line, not a 30 s wait."""
    db = tmp_path / "m.db"
    primary, terminal = os.openpty()
    try:
        proc = subprocess.run([TORTOISE, "--db", str(db), "hook", "--timeout", "30"], stdin=terminal,
                              capture_output=True, text=True, timeout=20)
    finally:
        os.close(terminal)
        os.close(primary)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert len(proc.stderr.splitlines()) == 1 and "tortoise hooks install" in proc.stderr
    assert "Claude Code hook event" in proc.stderr and "stdin" in proc.stderr
    assert not db.exists() and not (tmp_path / "hooks.log").exists()


# -- hooks install / uninstall ---------------------------------------------------------------------

OTHER_HOOKS = {
    "model": "opus",
    "hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "~/.claude/hooks/branch-context.sh"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5}]}],
        "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"},
                                           {"type": "command", "command": "bd sync"}]}],
    },
    "permissions": {"allow": ["Bash(mix test:*)"]},
}


def test_install_keeps_every_other_hook_and_uninstall_restores_the_file(tmp_path, capsys) -> None:
    settings = tmp_path / "proj" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(OTHER_HOOKS, indent=2))
    args = ["hooks", "install", "--project", str(tmp_path / "proj"), "--shared", "--namespace", "spotter",
            "--db", str(tmp_path / "m.db")]
    assert main(args) == 0
    installed = json.loads(settings.read_text())
    assert {k: v for k, v in installed.items() if k != "hooks"} == {"model": "opus",
                                                                  "permissions": {"allow": ["Bash(mix test:*)"]}}
    hooks = installed["hooks"]
    assert hooks["PreToolUse"] == OTHER_HOOKS["hooks"]["PreToolUse"]
    assert hooks["UserPromptSubmit"][0] == OTHER_HOOKS["hooks"]["UserPromptSubmit"][0]
    assert hooks["Stop"][0] == OTHER_HOOKS["hooks"]["Stop"][0]
    ours = {event: [h for g in groups for h in g["hooks"] if "tortoise" in h["command"]]
            for event, groups in hooks.items()}
    assert {e for e, h in ours.items() if h} == {"UserPromptSubmit", "Stop", "SubagentStop", "PreCompact",
                                                  "SessionEnd"}
    command = ours["Stop"][0]["command"]
    assert command.endswith(f"--db {tmp_path / 'm.db'} --namespace spotter hook") and ours["Stop"][0]["timeout"] == 30
    # Installing again replaces ours, never duplicates it.
    assert main(args) == 0
    assert json.loads(settings.read_text()) == installed
    assert main(["hooks", "uninstall", "--project", str(tmp_path / "proj"), "--shared"]) == 0
    assert json.loads(settings.read_text()) == OTHER_HOOKS
    capsys.readouterr()


def test_print_shows_the_json_and_writes_nothing(tmp_path, capsys) -> None:
    assert main(["hooks", "install", "--project", str(tmp_path), "--print"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert list(shown["hooks"]) == ["UserPromptSubmit", "Stop", "SubagentStop", "PreCompact", "SessionEnd"]
    assert shown["hooks"]["Stop"] == [{"hooks": [{"type": "command", "command": shown["hooks"]["Stop"][0]["hooks"][0][
        "command"], "timeout": 30}]}]
    assert not (tmp_path / ".claude").exists()


def test_user_install_writes_the_home_settings(tmp_path, capsys) -> None:
    assert main(["hooks", "install", "--user"]) == 0
    written = json.loads((Path.home() / ".claude" / "settings.json").read_text())
    assert len(written["hooks"]["SessionEnd"]) == 1
    assert main(["hooks", "uninstall", "--user"]) == 0
    assert not (Path.home() / ".claude" / "settings.json").exists()  # it held only our hooks


def test_a_settings_file_that_is_not_json_is_left_alone(tmp_path, capsys) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{ not json")
    assert main(["hooks", "install", "--project", str(tmp_path), "--shared"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert settings.read_text() == "{ not json"


@pytest.mark.parametrize("settings_text, key", [
    ('{"hooks": {"Stop": {"command": "notify-send done"}}}', '"hooks.Stop" must be a list'),
    ('{"hooks": ["Stop"]}', '"hooks" must be an object'),
])
def test_a_settings_file_of_another_shape_is_refused_with_its_path_and_left_alone(tmp_path, capsys, settings_text,
                                                                                   key) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(settings_text)
    for action in ("install", "uninstall"):
        code = main(["hooks", action, "--project", str(tmp_path), "--shared"])
        err = capsys.readouterr().err
        if action == "uninstall" and "hooks.Stop" in key:
            assert code == 0 and "not found in" in err  # nothing of ours: another tool's entry is left as it is
            continue
        assert code == 2, err
        assert err.startswith(f"tortoise: {settings}: ") and key in err and "nothing was changed" in err
        assert err.count("\n") == 1
    assert settings.read_text() == settings_text


def test_uninstall_with_nothing_of_ours_writes_nothing(tmp_path, capsys) -> None:
    assert main(["hooks", "uninstall", "--project", str(tmp_path)]) == 0
    assert not (tmp_path / ".claude").exists()  # no settings file conjured up
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(OTHER_HOOKS))  # compact, as the user wrote it
    assert main(["hooks", "uninstall", "--project", str(tmp_path), "--shared"]) == 0
    assert settings.read_text() == json.dumps(OTHER_HOOKS)
    assert "not found in" in capsys.readouterr().err


# -- what a transcript path may point at (issue 24) -------------------------------------------------


def _at_most_1_gb() -> None:  # a hook that read a device whole would fail here, not swap the machine
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("event", ["UserPromptSubmit", "Stop"])
@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "a FIFO", "a directory"])
def test_a_transcript_path_that_is_not_a_regular_file_is_refused_unread(tmp_path, target, event) -> None:
    """/dev/zero reached 5.7 GB before the kill; a FIFO with no writer blocked until the time limit."""
    path = {"a FIFO": tmp_path / "fifo", "a directory": tmp_path}.get(target, Path(target))
    if target == "a FIFO":
        os.mkfifo(path)
    started = time.monotonic()
    proc = subprocess.run([TORTOISE, "--db", str(tmp_path / "m.db"), "hook"], capture_output=True, text=True,
                          input=json.dumps(payload(event, "s", path, prompt="hello")), timeout=60,
                          preexec_fn=_at_most_1_gb)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert time.monotonic() - started < 8  # under the hook's own limit: nothing waited for it
    assert "is not a regular file" in (tmp_path / "hooks.log").read_text()


def test_follow_reads_a_large_transcript_in_pieces(tmp_path) -> None:
    """Only the new lines are held: the earlier part of a long file is read a piece at a time (a 200 MB
    transcript cost 262-313 MB on every hook call)."""
    import tracemalloc

    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        for i in range(12_000):  # about 30 MB of earlier lines
            f.write(json.dumps({"type": "file-history-snapshot", "messageId": f"u{i}", "snapshot": "x" * 2400})
                    .encode() + b"\n")
    with Memory(str(tmp_path / "m.db")) as mem:
        mem.follow(big, "claude-code")
        with big.open("ab") as f:
            f.write(SHORT.read_bytes())
        tracemalloc.start()
        report = mem.follow(big, "claude-code", max_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert report.turns_stored > 0
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB held for a {big.stat().st_size / 2**20:.0f} MiB file"


def test_lines_of_another_session_are_not_captured_and_are_logged(monkeypatch, capsys, tmp_path) -> None:
    """A transcript holding another session's lines (or another app's JSONL shaped like one) is not captured
    under that session's id: only the event's session (and its sub-agents) is."""
    other = [json.dumps({**obj, "sessionId": "other-session", "uuid": f"o-{obj.get('uuid')}"})
             if isinstance(obj := json.loads(line), dict) and "sessionId" in obj else line
             for line in SHORT.read_text().splitlines()]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(other) + "\n" + SHORT.read_text())
    db = tmp_path / "m.db"
    run_hook(monkeypatch, capsys, db, payload("Stop", SHORT_SESSION, mixed))
    with Memory(str(db)) as mem, Memory(str(tmp_path / "whole.db")) as whole:
        whole.ingest(SHORT)
        assert stored_turns(mem) == stored_turns(whole)
    assert "lines of session 'other-session' not captured" in (tmp_path / "hooks.log").read_text()


def test_following_plain_turn_lines_without_ids_stores_each_line_once(tmp_path, monkeypatch) -> None:
    """A reviewer's: a second follow read "three", "four" as turns 0 and 1 (a CaptureConflict, and the cursor moved
    on: lost), and a repeated "one" was taken silently for the stored turn 0."""
    path = tmp_path / "t.jsonl"

    def add(*texts: str) -> None:
        with path.open("a") as f:
            for i, text in enumerate(texts):
                f.write(json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": text}) + "\n")

    with Memory(str(tmp_path / "m.db"), namespace="a") as mem:
        add("one", "two")
        assert mem.follow(path, session_id="S").turns_stored == 2
        add("three", "four")
        with monkeypatch.context() as m:  # the process dies after the capture, before the cursor is saved
            m.setattr(Memory, "save_cursor", lambda *a, **k: (_ for _ in ()).throw(SystemExit("killed")))
            with pytest.raises(SystemExit):
                mem.follow(path, session_id="S")
        assert [h.content for h in mem.turns("S")] == ["one", "two", "three", "four"]
        again = mem.follow(path, session_id="S")  # the same lines read again: nothing twice
        assert (again.turns_stored, again.errors) == (0, [])
        add("one")
        assert mem.follow(path, session_id="S").turns_stored == 1
        assert [h.content for h in mem.turns("S")] == ["one", "two", "three", "four", "one"]
        # Read again from the start (the cursor gone): nothing twice.
        mem.save_cursor(mem.cursor(f"follow:{path.resolve()}").name, {}, revision=mem.cursor(
            f"follow:{path.resolve()}").revision)
        assert mem.follow(path, session_id="S").turns_stored == 0
        assert len(mem.turns("S")) == 5


def test_a_nul_in_a_followed_transcript_loses_neither_its_turn_nor_the_ones_after_it(tmp_path) -> None:
    """A reviewer's: one NUL (a pasted binary) made the whole chunk refused, and follow moved past it: that turn and
    the user's next one ("the heron rollback command is make heron-rollback") never reached memory."""
    path = tmp_path / "t.jsonl"
    lines = [{"role": "user", "content": "the build log:\u0000\u0000 ELF"},
             {"role": "user", "content": "the heron rollback command is make heron-rollback",
              "metadata": {"tool_uses": [{"input": {"path": "/tmp/a\u0000b"}}]}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with Memory(str(tmp_path / "m.db"), namespace="a") as mem:
        report = mem.follow(path, session_id="S")
        assert [h.content for h in mem.turns("S")] == ["the build log:\ufffd\ufffd ELF",
                                                       "the heron rollback command is make heron-rollback"]
        assert report.errors == [] and [w.code for w in report.warnings] == ["replaced_characters"] * 2
        assert mem.follow(path, session_id="S").turns_stored == 0  # read again: nothing twice
        # A turn no store can hold at all (an id past what an index row holds) is left out alone, said on the report.
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"role": "user", "content": "bad id", "id": "x" * 5000}) + "\n")
            f.write(json.dumps({"role": "user", "content": "and the deploy key is in vault"}) + "\n")
        report = mem.follow(path, session_id="S")
        assert [e.code for e in report.errors] == ["InvalidInput"] and "turns[0].id" in report.errors[0].message
        assert [h.content for h in mem.turns("S")][-1] == "and the deploy key is in vault"


def test_a_file_captured_whole_then_followed_is_not_stored_again(tmp_path) -> None:
    """The verification pass: follow gave line ids to the turns ingest had stored by position: all stored twice."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"role": "user", "content": "one"}\n{"role": "assistant", "content": "two"}\n')
    with Memory(str(tmp_path / "m.db"), namespace="a") as mem:
        mem.ingest(path, session_id="S")
        assert mem.follow(path, session_id="S").turns_stored == 0
        with path.open("a") as f:
            f.write('{"role": "user", "content": "three"}\n')
        assert mem.follow(path, session_id="S").turns_stored == 1
        assert [h.content for h in mem.turns("S")] == ["one", "two", "three"]


def test_a_prompt_reads_only_the_new_bytes_of_a_long_transcript_and_still_resolves_earlier_ids(tmp_path,
                                                                                               monkeypatch) -> None:
    """A follow reads what is new, not every earlier line again (a prompt on a 22 MB transcript took 0.9 s against
    0.56 s with nothing new: its earlier lines were parsed again for their ids); the ids they taught the parser
    (a Task call, before the offset, whose progress and result come after it) are kept with the offset, so the
    new lines yield what a whole ingest yields."""
    from tortoise_sdk.ingest import CHECK_BYTES, FollowedFile

    lines = EXCERPT.read_bytes().splitlines(keepends=True)
    filler = b"".join(json.dumps({"type": "file-history-snapshot", "messageId": f"u{i}", "snapshot": "x" * 2000})
                      .encode() + b"\n" for i in range(1000))  # 2 MB before the session
    path = tmp_path / "t.jsonl"
    path.write_bytes(filler + b"".join(lines[:3]))  # ... up to the Task call
    read: list[int] = []
    real = FollowedFile._pread

    def counted(self: FollowedFile, size: int, offset: int) -> bytes:
        got = real(self, size, offset)
        read.append(len(got))
        return got

    monkeypatch.setattr(FollowedFile, "_pread", counted)
    with Memory(str(tmp_path / "m.db")) as mem, Memory(str(tmp_path / "whole.db")) as whole:
        mem.follow(path, "claude-code")
        new = b"".join(lines[3:])
        with path.open("ab") as f:
            f.write(new)
        read.clear()
        report = mem.follow(path, "claude-code", max_bytes=MAX_BYTES_PER_CALL)
        assert report.turns_stored > 0 and not report.restarted
        assert sum(read) <= 2 * len(new) + 8 * CHECK_BYTES, f"read {sum(read)} bytes for {len(new)} new"
        whole.ingest(path)
        assert stored_turns(mem) == stored_turns(whole)
        compared = lambda m: [r.model_dump(exclude=NOT_COMPARED | {"observed_at"}) for r in m.subagents()]  # noqa: E731
        assert compared(mem) == compared(whole) != []


def test_a_sub_agents_final_report_is_held_by_its_session_but_its_other_turns_are_shown(monkeypatch, capsys,
                                                                                        tmp_path) -> None:
    """Reviewer: after SubagentStop, a prompt of the session that ran the sub-agent got as its first pointer the
    sub-agent's last message, word for word the Task result that session's context holds. That report is held; the
    sub-agent's own work before it (which the context does not hold) may still be shown."""
    lines = [json.loads(line) for line in EXCERPT.read_text(encoding="utf-8").splitlines()]
    report = lines[4]["message"]["content"][0]["content"][0]["text"]  # the Task result: the sub-agent's last message
    lines[4]["toolUseResult"]["agentId"] = "abc123"
    parent = tmp_path / "S1.jsonl"
    parent.write_text("".join(json.dumps({**o, "sessionId": "S1"}) + "\n" for i, o in enumerate(lines) if i != 3),
                      encoding="utf-8")  # the Task call and its result; the sub-agent's lines are in its own file
    child = tmp_path / "S1" / "subagents" / "agent-abc123.jsonl"
    child.parent.mkdir(parents=True)
    side = {"isSidechain": True, "userType": "external", "cwd": "/home/marco/projects/spotter", "sessionId": "S1",
            "agentId": "abc123", "type": "assistant"}
    work = ("Read mix.exs: credo is absent, and the spotter deps pin oban 2.17 with the Oban.Engines.Basic engine "
            "in config/config.exs")
    child.write_text("".join(json.dumps({**side, "uuid": f"c{i}", "parentUuid": f"c{i - 1}" if i else None,
                                         "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
                             + "\n" for i, text in enumerate([work, report])), encoding="utf-8")
    db = tmp_path / "s.db"
    assert run_hook(monkeypatch, capsys, db, payload("SubagentStop", "S1", parent, agent_id="abc123",
                                                     agent_transcript_path=str(child)), "--namespace", "s") is None

    def pointed(prompt: str) -> list[str]:
        out = run_hook(monkeypatch, capsys, db, payload("UserPromptSubmit", "S1", parent, prompt=prompt),
                       "--namespace", "s")
        with Memory(str(db), namespace="s") as mem:
            ids = re.findall(r"\bt_[0-9a-f]+", out["hookSpecificOutput"]["additionalContext"]) if out else []
            return [mem.store.get_turn(mem.namespace, i).content for i in dict.fromkeys(ids)]

    with Memory(str(db), namespace="s") as mem:
        assert [t.content for t in mem.turns("S1:agent-abc123")] == [work, report]  # both captured
    assert report not in pointed("what did the sub-agent find about the Credo, Dialyxir and mix_audit bead "
                                 "content: the spotter-2qx epic and its mix quality alias?")
    assert pointed("which Oban engine does the spotter config use, the sub-agent read it in config.exs?") == [work]


@needs_transcripts
def test_a_sub_agent_whose_report_was_not_captured_holds_none_of_its_work_back(tmp_path) -> None:
    """The final report is the sub-agent's last message: a sub-agent whose stored turns end in a tool's result (its
    messages came as the parent's progress lines, which do not carry the report) holds nothing back, so its read of
    config.exs still answers the question (a last assistant turn taken for the report hid that tool call and all after)."""
    session = "491e126e-1e71-469c-ade2-fcc8af567c74"
    parent = tmp_path / f"{session}.jsonl"
    parent.write_bytes((TRANSCRIPTS / "subagent.jsonl").read_bytes())
    with Memory(str(tmp_path / "m.db")) as mem:
        handle_event(mem, payload("Stop", session, parent))
        out = handle_event(mem, payload("UserPromptSubmit", session, parent,
                                        prompt="which Oban engine does the spotter config use?"))
        assert out is not None
        assert "engine: Oban.Engines.Lite" in out["hookSpecificOutput"]["additionalContext"]


def test_a_prompt_reads_the_stored_turns_it_needs_not_the_whole_session(tmp_path, monkeypatch) -> None:
    """A prompt on a long session read all its stored turns three times (the capture's check of what is stored, the
    capture's plan, the block's window and compaction point): 0.12 s of a prompt on a 3808-turn session, growing with
    it. Each read now asks the store for the rows it needs: those the new lines name, the last ones, the system turns
    (the plan's since the store's capture reads the turns its request can meet)."""
    import tortoise_sdk.store.sqlite.store as sqlite_store

    def line(i: int) -> str:
        role = "user" if i % 2 == 0 else "assistant"
        return json.dumps({"type": role, "uuid": f"u{i}", "sessionId": "long", "timestamp": "2026-01-05T10:00:00Z",
                           "message": {"role": role, "content": f"step {i} of the migration, table t{i}"}}) + "\n"

    path = tmp_path / "long.jsonl"
    path.write_text("".join(line(i) for i in range(1500)), encoding="utf-8")
    rows: list[int] = []
    planned: list[int] = []
    hit, plan = sqlite_store._hit, sqlite_store.plan_append
    monkeypatch.setattr(sqlite_store, "_hit", lambda *a: rows.append(1) or hit(*a))
    monkeypatch.setattr(sqlite_store, "plan_append",
                        lambda ns, req, existing, *a: planned.append(len(existing)) or plan(ns, req, existing, *a))
    with Memory(str(tmp_path / "m.db")) as mem:
        handle_event(mem, payload("Stop", "long", path))
        assert len(mem.turns("long")) == 1500
        with path.open("a", encoding="utf-8") as f:
            f.write(line(1500))
        rows.clear(), planned.clear()
        handle_event(mem, payload("UserPromptSubmit", "long", path, prompt="which table did step 1500 migrate?"))
        assert planned == [1] and len(rows) < 150, (planned, len(rows))
        assert [t.content for t in mem.turns("long")[-2:]] == ["step 1499 of the migration, table t1499",
                                                               "step 1500 of the migration, table t1500"]
