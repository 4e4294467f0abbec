"""Stream parsers: Claude Code transcripts, stream-json, ACP, LangChain callbacks, detection."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from needs import TRANSCRIPTS, needs_transcripts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tortoise_sdk.errors import ConfigError, StreamParseError
from tortoise_sdk.pipeline.grounding import is_evidence
from tortoise_sdk.streams import (
    AcpParser,
    ParsedStream,
    StreamJsonParser,
    SubagentFrame,
    TurnEvent,
    detect_format,
    parse_stream,
)
from tortoise_sdk.subagents import replay

DATA = Path(__file__).parent / "data"
EXCERPT = DATA / "claude_code_subagent_excerpt.jsonl"

TASK_ID = "toolu_01Cz2Pnv7qNcnK1ZiocxWhQX"
SESSION = "491e126e-1e71-469c-ade2-fcc8af567c74"
NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)


def merged(parsed: ParsedStream) -> dict[tuple[str, str, str], dict[str, Any]]:
    rows, _ = replay(parsed.frames, [NOW] * len(parsed.frames))
    return rows


def covered_lines(parsed: ParsedStream) -> set[int]:
    lines = {e.line for e in parsed.events} | {f.line for f in parsed.frames} | {s.line for s in parsed.report.skipped}
    return {n for n in lines if n is not None}


# -- Claude Code transcripts ---------------------------------------------------------------------


def check_completed_task(parsed: ParsedStream) -> None:
    (result,) = [f for f in parsed.frames if f.total_tokens is not None]
    assert (result.tool_call_id, result.total_tokens, result.duration_ms, result.tool_use_count) == (TASK_ID, 33894, 38799, 9)
    assert (result.agent_status, result.tool_status, result.agent_id) == ("completed", "completed", "afb92ff")
    row = merged(parsed)[(SESSION, "unknown", TASK_ID)]
    assert (row["total_tokens"], row["duration_ms"], row["tool_use_count"]) == (33894, 38799, 9)
    assert (row["subagent_type"], row["description"], row["agent_id"]) == ("Plan", "Draft beads for linting setup", "afb92ff")
    assert row["turn_id"] == "79ed4dd9-9c66-46f4-af77-d38ce0621136"
    # AC-11: settled when the result line says it happened, not when it was merged
    assert result.observed_at == datetime(2026, 2, 10, 21, 58, 54, 253000, tzinfo=timezone.utc)
    assert row["settled_at"] == result.observed_at and row["source"] == "backfill" and row["is_async"] is False


@needs_transcripts
def test_real_subagent_transcript_reports_the_completed_task_exactly() -> None:
    parsed = parse_stream(TRANSCRIPTS / "subagent.jsonl")
    assert parsed.format == "claude-code"
    check_completed_task(parsed)
    assert {f.tool_call_id for f in parsed.frames} == {TASK_ID}


def test_excerpt_reports_the_completed_task_exactly() -> None:
    check_completed_task(parse_stream(EXCERPT))


@needs_transcripts
@pytest.mark.parametrize("name", ["short.jsonl", "subagent.jsonl", "tool_heavy.jsonl"])
def test_real_transcripts_account_for_every_line(name: str) -> None:
    path = TRANSCRIPTS / name
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    parsed = parse_stream(path)
    report = parsed.report
    assert report.lines == sum(report.line_types.values()) == len(lines)
    assert report.malformed == 0
    assert covered_lines(parsed) == set(range(1, len(lines) + 1))
    session = next(x["sessionId"] for x in lines if "sessionId" in x)
    agents = sorted({x["data"]["agentId"] for x in lines if x.get("data", {}).get("type") == "agent_progress"})
    assert list(parsed.sessions) == [session, *(f"{session}:agent-{a}" for a in agents)]
    uuids = {x.get("uuid") for x in lines} | {x.get("data", {}).get("message", {}).get("uuid") for x in lines}
    assert all(t.id in uuids for ts in parsed.sessions.values() for t in ts)
    again = parse_stream(path)
    assert again.model_dump() == parsed.model_dump()


def test_excerpt_turn_shapes() -> None:
    parsed = parse_stream(EXCERPT)
    by_line = {e.line: e.turn for e in parsed.events}
    assert by_line[1].role == "user" and by_line[1].id == "cc2c7130-8a1e-4f3c-8f99-b54aa375b7a7"
    assert by_line[2].role == "assistant" and by_line[2].content == "Now let me draft the beads."
    launch = by_line[3]
    assert launch.content.startswith("[tool_use Task description=Draft beads for linting setup subagent_type=Plan")
    assert launch.metadata is not None and launch.metadata["tool_uses"][0]["input"]["model"] == "haiku"
    result = by_line[5]
    assert (result.role, result.name) == ("tool", "Task")
    assert result.content.startswith("[tool_result Task] Excellent!")
    assert result.metadata is not None and result.metadata["tool_use_result"]["totalTokens"] == 33894
    assert parsed.report.line_types == {"user": 2, "assistant": 2, "progress:agent_progress": 1}
    child = by_line[4]  # progress: a frame, and the child's own message as a turn of the derived session
    assert (child.role, child.id) == ("user", "a2bb9623-3017-492e-b392-36b3dcaac2e3")
    assert child.content.startswith("Draft bead content for setting up Credo, Dialyxir, and mix_audit")
    assert child.metadata is not None and (child.metadata["subagent"], child.metadata["agent_id"]) == (True, "afb92ff")
    assert list(parsed.sessions) == [SESSION, f"{SESSION}:agent-afb92ff"]


def cc_line(kind: str, uuid: str, content: Any, **extra: Any) -> str:
    role = "assistant" if kind == "assistant" else "user"
    line = {
        "type": kind,
        "sessionId": "sess-a",
        "uuid": uuid,
        "timestamp": "2026-02-10T22:00:00.000Z",
        "message": {"role": role, "content": content},
        **extra,
    }
    return json.dumps(line)


ASYNC_LINES = [
    cc_line(
        "assistant",
        "u-launch",
        [{"type": "tool_use", "id": "toolu_bg", "name": "Task", "input": {"description": "Scan", "subagent_type": "Explore", "prompt": "SECRET PROMPT", "run_in_background": True}}],
    ),
    cc_line(
        "user",
        "u-ack",
        [{"type": "tool_result", "tool_use_id": "toolu_bg", "content": "Async agent launched successfully.\nagentId: a8b740b"}],
        toolUseResult={"isAsync": True, "status": "async_launched", "agentId": "a8b740b", "description": "Scan", "prompt": "SECRET PROMPT", "outputFile": "/tmp/a.output", "totalTokens": 0, "totalToolUseCount": 0, "totalDurationMs": 0},
        sourceToolAssistantUUID="u-launch",
    ),
    cc_line(
        "assistant",
        "u-bash",
        [{"type": "tool_use", "id": "toolu_sh", "name": "Bash", "input": {"command": "sleep 1", "run_in_background": True}}],
    ),
    cc_line(
        "user",
        "u-note",
        "<task-notification>\n<task-id>a8b740b</task-id>\n<status>completed</status>\n<summary>Agent \"Scan\" completed</summary>\n"
        "<result>SECRET RESULT</result>\n<usage>total_tokens: 23099\ntool_uses: 2\nduration_ms: 15506</usage>\n</task-notification>",
    ),
    cc_line("user", "u-shell-note", "<task-notification>\n<task-id>bae407b</task-id>\n<status>completed</status>\n</task-notification>"),
    cc_line(
        "assistant",
        "u-think",
        [{"type": "thinking", "thinking": "hmm", "signature": "x"}],
    ),
    cc_line(
        "assistant",
        "u-side",
        [{"type": "text", "text": "child says hi"}],
        isSidechain=True,
        agentId="a8b740b",
    ),
    json.dumps(
        {
            "type": "progress",
            "sessionId": "sess-a",
            "uuid": "u-prog",
            "timestamp": "2026-02-10T22:00:01.000Z",
            "parentToolUseID": "toolu_bg",
            "data": {
                "type": "agent_progress",
                "agentId": "a8b740b",
                "message": {
                    "type": "assistant",
                    "uuid": "u-inner",
                    "message": {"role": "assistant", "model": "claude-haiku-4-5", "content": [{"type": "tool_use", "id": "toolu_nested", "name": "Agent", "input": {"description": "Nested", "prompt": "SECRET PROMPT"}}]},
                },
            },
        }
    ),
]


def test_async_launch_reports_no_usage_and_the_notification_completes_it() -> None:
    parsed = parse_stream(ASYNC_LINES)
    ack = next(f for f in parsed.frames if f.agent_status == "async_launched")
    assert (ack.total_tokens, ack.tool_use_count, ack.duration_ms) == (None, None, None)
    assert ack.is_async is True and ack.agent_id == "a8b740b" and ack.tool_status == "completed"
    note = next(f for f in parsed.frames if f.agent_status == "completed")
    assert (note.tool_call_id, note.total_tokens, note.tool_use_count, note.duration_ms) == ("toolu_bg", 23099, 2, 15506)
    assert note.turn_external_id == "u-launch"
    row = merged(parsed)[("sess-a", "unknown", "toolu_bg")]
    assert (row["agent_status"], row["total_tokens"], row["subagent_type"], row["is_async"]) == ("completed", 23099, "Explore", True)
    assert row["model"] == "claude-haiku-4-5"
    # the shell's notification is not a sub-agent; nothing carries prompt or result text
    assert {f.tool_call_id for f in parsed.frames} == {"toolu_bg", "toolu_nested"}
    assert all("SECRET" not in f.model_dump_json() for f in parsed.frames)


def test_async_launch_before_any_notification_keeps_metrics_none() -> None:
    row = merged(parse_stream(ASYNC_LINES[:2]))[("sess-a", "unknown", "toolu_bg")]
    assert (row["total_tokens"], row["tool_use_count"], row["duration_ms"]) == (None, None, None)


def test_nested_sidechain_thinking_and_notification_turns() -> None:
    parsed = parse_stream(ASYNC_LINES)
    nested = next(f for f in parsed.frames if f.tool_call_id == "toolu_nested")
    assert (nested.parent_tool_call_id, nested.turn_external_id, nested.description) == ("toolu_bg", "u-inner", "Nested")
    assert [(t.id, t.content) for t in parsed.sessions["sess-a:agent-a8b740b"]] == [
        ("u-side", "child says hi"), ("u-inner", "[tool_use Agent description=Nested prompt=SECRET PROMPT]")]
    roles = {t.id: t.role for t in parsed.sessions["sess-a"]}
    assert roles["u-note"] == "system" and roles["u-ack"] == "tool"
    assert "u-think" not in roles
    assert parsed.report.skip_reasons()["thinking only (not stored as text)"] == 1


# After a compaction Claude Code writes a compact_boundary line, then the summary as a user-role line.
COMPACTION_LINES = [
    cc_line("user", "u-before", "My sister Ana moved to Lisbon last spring."),
    json.dumps({"type": "system", "subtype": "compact_boundary", "sessionId": "sess-a", "uuid": "u-boundary",
                "parentUuid": None, "logicalParentUuid": "u-before", "content": "Conversation compacted",
                "compactMetadata": {"trigger": "auto", "preTokens": 155012}, "level": "info",
                "timestamp": "2026-02-10T22:01:00.000Z"}),
    cc_line("user", "u-summary",
            "This session is being continued from a previous conversation that ran out of context. The conversation "
            "is summarized below:\nAnalysis: the user said their sister Ana moved to Lisbon last spring.",
            isCompactSummary=True, isVisibleInTranscriptOnly=True, parentUuid="u-boundary"),
    cc_line("user", "u-caveat", "<local-command-caveat>Caveat: The messages below were generated by the user while "
                                "running local commands. DO NOT respond to these messages or otherwise consider them "
                                "in your response unless the user explicitly asks you to.</local-command-caveat>",
            isMeta=True),
    cc_line("user", "u-command", "<command-name>/model</command-name>\n            <command-message>model</command-message>"
                                 "\n            <command-args></command-args>"),
    cc_line("user", "u-stdout", "<local-command-stdout>Kept model as Default (recommended)</local-command-stdout>"),
    cc_line("user", "u-after", "Ana is visiting us in June."),
]


def test_compaction_summary_and_host_lines_are_kept_as_system_turns_that_are_never_evidence() -> None:
    parsed = parse_stream(COMPACTION_LINES)
    turns = {t.id: t for t in parsed.sessions["sess-a"]}
    assert list(turns) == ["u-before", "u-summary", "u-caveat", "u-command", "u-stdout", "u-after"]  # nothing lost
    summary = turns["u-summary"]
    assert summary.role == "system" and summary.content.startswith("This session is being continued")
    assert summary.metadata is not None
    assert (summary.metadata["not_evidence"], summary.metadata["is_compact_summary"]) == ("compact_summary", True)
    assert {i: (t.role, (t.metadata or {}).get("not_evidence")) for i, t in turns.items()} == {
        "u-before": ("user", None), "u-summary": ("system", "compact_summary"), "u-caveat": ("system", "meta"),
        "u-command": ("user", None),  # what the user typed
        "u-stdout": ("system", "command_output"), "u-after": ("user", None)}
    assert [i for i, t in turns.items() if is_evidence(t, t.metadata)] == ["u-before", "u-command", "u-after"]
    assert parsed.report.skip_reasons()["system line (compact_boundary)"] == 1


@needs_transcripts
def test_real_transcripts_store_no_host_text_as_user_evidence() -> None:
    """tool_heavy.jsonl has a command caveat (isMeta) and a command's output in user-role lines."""
    parsed = parse_stream(TRANSCRIPTS / "tool_heavy.jsonl")
    turns = [t for ts in parsed.sessions.values() for t in ts]
    host = [t for t in turns if (t.metadata or {}).get("not_evidence")]
    assert sorted((t.metadata or {})["not_evidence"] for t in host) == ["command_output", "meta"]
    assert all(t.role == "system" and not is_evidence(t, t.metadata) for t in host)
    assert not [t for t in turns if t.role == "user" and t.content.lstrip().startswith("<local-command")]


def test_malformed_lines_are_counted_never_raised() -> None:
    lines = EXCERPT.read_text().splitlines() + ["{not json", "[1, 2]", "", "   "]
    parsed = parse_stream([*lines, b"\xff\xfe{}"])
    assert parsed.report.malformed == 3
    assert {s.reason for s in parsed.report.skipped if s.type == "malformed"} == {"invalid json", "json list, not an object", "invalid utf-8"}
    check_completed_task(parsed)


def test_unreadable_input_raises_stream_parse_error(tmp_path: Path) -> None:
    with pytest.raises(StreamParseError, match="cannot read"):
        parse_stream(tmp_path / "missing.jsonl")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01\x02\n\xff\xfe\nnot json at all\n")
    with pytest.raises(StreamParseError, match="no line is a JSON object"):
        parse_stream(garbage)
    with pytest.raises(ConfigError):
        parse_stream(EXCERPT, format="yaml")


def test_duplicated_lines_keep_one_turn_per_message_id() -> None:
    lines = EXCERPT.read_text().splitlines()
    parsed = parse_stream(lines + lines)
    ids = [t.id for ts in parsed.sessions.values() for t in ts]
    assert len(ids) == len(set(ids)) == 5
    assert parsed.report.skip_reasons()["duplicate message id"] == 5
    assert len(parsed.frames) == len(parse_stream(lines).frames)


# -- hypothesis: permutations, duplication, junk ------------------------------------------------

BASE_LINES = (TRANSCRIPTS / "subagent.jsonl").read_text().splitlines() if TRANSCRIPTS.is_dir() else EXCERPT.read_text().splitlines()
ALL_LINES = BASE_LINES + ASYNC_LINES
REFERENCE = parse_stream(ALL_LINES)
REFERENCE_IDS = {f.tool_call_id for f in REFERENCE.frames}


def identities(parsed: ParsedStream) -> set[tuple[Any, ...]]:
    return {f.identity() for f in parsed.frames}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.permutations(ALL_LINES), st.lists(st.sampled_from(ALL_LINES), max_size=10))
def test_any_permutation_with_duplicates_yields_the_same_frame_identities(order: list[str], dupes: list[str]) -> None:
    parsed = parse_stream(order)
    assert {f.tool_call_id for f in parsed.frames} == REFERENCE_IDS
    assert identities(parsed) == identities(REFERENCE)
    with_dupes = parse_stream(order + dupes)
    assert identities(with_dupes) == identities(REFERENCE)
    rows = merged(with_dupes)
    for key, row in merged(REFERENCE).items():
        for column in ("total_tokens", "tool_use_count", "duration_ms", "agent_id", "subagent_type", "turn_id", "is_async"):
            assert rows[key][column] == row[column], column
        assert (rows[key]["settled_at"] is None) == (row["settled_at"] is None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["type", "message", "content", "sessionId", "data", "toolUseResult", "uuid", "id", "name", "input"]), inner, max_size=4),
    max_leaves=12,
)
junk_lines = st.one_of(st.text(max_size=30), json_values.map(json.dumps), st.binary(max_size=20))


@settings(max_examples=60, deadline=None)
@given(st.lists(junk_lines, max_size=12), st.sampled_from(["auto", "claude-code", "stream-json", "acp", "turns"]))
def test_junk_never_crashes_a_parser(junk: list[Any], fmt: str) -> None:
    lines = EXCERPT.read_text().splitlines()[:3] + junk
    parsed = parse_stream(lines, format=fmt)
    assert parsed.report.lines == sum(parsed.report.line_types.values())


# -- stream-json ------------------------------------------------------------------------------

SJ_SESSION = "sj-1"


def sj(obj: dict[str, Any]) -> str:
    return json.dumps({"session_id": SJ_SESSION, **obj})


STREAM_JSON_LINES = [
    sj({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "tools": ["Task"]}),
    sj({"type": "user", "uuid": "m0", "parent_tool_use_id": None, "message": {"role": "user", "content": "find the bug"}}),
    sj({"type": "assistant", "uuid": "m1", "parent_tool_use_id": None, "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Delegating."},
        {"type": "tool_use", "id": "toolu_sj", "name": "Agent", "input": {"description": "Hunt bug", "subagent_type": "general-purpose", "prompt": "SECRET PROMPT", "run_in_background": True}},
    ]}}),
    sj({"type": "system", "subtype": "task_started", "task_id": "ag1", "tool_use_id": "toolu_sj", "description": "Hunt bug", "task_type": "local_agent", "uuid": "m2"}),
    sj({"type": "user", "uuid": "m3", "parent_tool_use_id": None, "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_sj", "content": "launched"}]},
        "tool_use_result": {"status": "async_launched", "isAsync": True, "agentId": "ag1"}}),
    sj({"type": "assistant", "uuid": "m4", "parent_tool_use_id": "toolu_sj", "message": {"role": "assistant", "content": [{"type": "text", "text": "child reading"}]}}),
    sj({"type": "system", "subtype": "task_progress", "task_id": "ag1", "tool_use_id": "toolu_sj", "description": "Reading main.py", "usage": {"total_tokens": 900, "tool_uses": 1, "duration_ms": 1200}}),
    sj({"type": "system", "subtype": "task_started", "task_id": "sh1", "tool_use_id": "toolu_shell", "description": "npm test", "task_type": "local_bash"}),
    sj({"type": "system", "subtype": "task_notification", "task_id": "ag1", "tool_use_id": "toolu_sj", "status": "completed", "summary": "SECRET RESULT", "output_file": "/tmp/o",
        "usage": {"total_tokens": 5000, "tool_uses": 12, "duration_ms": 15000}}),
    sj({"type": "stream_event", "event": {"type": "message_start"}}),
    sj({"type": "result", "subtype": "success", "duration_ms": 20000, "result": "done"}),
]


def test_stream_json_frames_turns_and_child_session() -> None:
    assert detect_format(STREAM_JSON_LINES) == "stream-json"
    parsed = parse_stream(STREAM_JSON_LINES, now=NOW)
    assert parsed.format == "stream-json"
    row = merged(parsed)[(SJ_SESSION, "unknown", "toolu_sj")]
    assert row["description"] == "Hunt bug"  # task_progress narration never replaces the label
    assert (row["agent_id"], row["agent_status"], row["tool_status"], row["is_async"]) == ("ag1", "completed", "completed", True)
    assert (row["total_tokens"], row["tool_use_count"], row["duration_ms"]) == (5000, 12, 15000)
    assert row["turn_id"] == "m1" and row["subagent_type"] == "general-purpose"
    assert {f.tool_call_id for f in parsed.frames} == {"toolu_sj"}
    assert parsed.report.skip_reasons()["task of a non-agent tool"] == 1
    assert [t.content for t in parsed.sessions[f"{SJ_SESSION}:task-toolu_sj"]] == ["child reading"]
    main = parsed.sessions[SJ_SESSION]
    assert [t.role for t in main] == ["user", "assistant", "tool"]
    assert main[1].content.startswith("Delegating.\n[tool_use Agent description=Hunt bug")
    assert all("SECRET" not in f.model_dump_json() for f in parsed.frames)


def test_stream_json_live_feeding_matches_batch() -> None:
    parser = StreamJsonParser(source="live", now=NOW)
    events = [e for line in STREAM_JSON_LINES for e in parser.feed_line(line)] + parser.finish()
    frames = [e for e in events if isinstance(e, SubagentFrame)]
    assert all(f.source == "live" for f in frames)
    rows, _ = replay(frames, [NOW] * len(frames))
    assert rows[(SJ_SESSION, "unknown", "toolu_sj")]["total_tokens"] == 5000


# -- ACP --------------------------------------------------------------------------------------


def update(session: str, body: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": body}})


def chunk(session: str, kind: str, text: str, **meta: Any) -> str:
    body: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if meta:
        body["_meta"] = {"claudeCode": meta}
    return update(session, body)


ACP_LINES = [
    json.dumps({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {"sessionId": "acp-1", "prompt": [{"type": "text", "text": "review this"}]}}),
    chunk("acp-1", "agent_thought_chunk", "thinking"),
    chunk("acp-1", "agent_message_chunk", "Let me "),
    chunk("acp-1", "agent_message_chunk", "delegate"),
    chunk("acp-1", "agent_message_chunk", "."),
    update("acp-1", {"sessionUpdate": "tool_call", "toolCallId": "toolu_acp", "title": "Task", "kind": "think", "status": "pending",
                     "rawInput": {"description": "Review diff", "subagent_type": "code-reviewer", "prompt": "SECRET PROMPT", "model": "sonnet"},
                     "_meta": {"claudeCode": {"toolName": "Task"}}}),
    update("acp-1", {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_acp", "status": "in_progress"}),
    chunk("acp-1", "agent_message_chunk", "child ", parentToolUseId="toolu_acp"),
    chunk("acp-1", "agent_message_chunk", "work", parentToolUseId="toolu_acp"),
    update("acp-1", {"sessionUpdate": "tool_call", "toolCallId": "toolu_read", "title": "Read file", "status": "pending", "_meta": {"claudeCode": {"toolName": "Read", "parentToolUseId": "toolu_acp"}}}),
    update("acp-1", {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_acp", "status": "completed",
                     "_meta": {"claudeCode": {"toolName": "Task", "toolResponse": {"status": "completed", "agentId": "ag7", "content": [{"type": "text", "text": "SECRET RESULT"}],
                                                                                    "totalTokens": 777, "totalDurationMs": 4321, "totalToolUseCount": 3, "resolvedModel": "claude-sonnet-4-5"}}}}),
    chunk("acp-1", "agent_message_chunk", "All good."),
    update("acp-1", {"sessionUpdate": "plan", "entries": []}),
    json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}}),
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
    # OpenCode, Cursor, Auggie
    update("acp-2", {"sessionUpdate": "tool_call", "toolCallId": "oc_1", "title": "task", "kind": "other", "status": "pending",
                     "rawInput": {"description": "Explore repo", "subagent_type": "explore", "prompt": "SECRET PROMPT"}}),
    update("acp-2", {"sessionUpdate": "tool_call_update", "toolCallId": "oc_1", "title": "Explore repo", "status": "completed",
                     "rawOutput": {"output": "SECRET RESULT", "metadata": {"sessionId": "ses_child", "model": {"providerID": "anthropic", "modelID": "claude-haiku-4-5"}, "summary": []}}}),
    update("acp-3", {"sessionUpdate": "tool_call", "toolCallId": "cu_1", "title": "Subagent", "status": "in_progress",
                     "rawInput": {"_toolName": "task", "description": "Fix tests", "subagentType": "generalPurpose", "prompt": "SECRET PROMPT"}}),
    update("acp-3", {"sessionUpdate": "tool_call_update", "toolCallId": "cu_1", "status": "completed", "rawOutput": {"durationMs": 1234, "isBackground": False}}),
    update("acp-4", {"sessionUpdate": "tool_call", "toolCallId": "au_1", "title": "sub-agent-explore: Find the config", "status": "completed"}),
]


def test_acp_turns_concatenate_chunks_per_message() -> None:
    assert detect_format(ACP_LINES) == "acp"
    parsed = parse_stream(ACP_LINES, now=NOW)
    main = parsed.sessions["acp-1"]
    assert [(t.role, t.content) for t in main] == [("user", "review this"), ("assistant", "Let me delegate."), ("assistant", "All good.")]
    assert main[1].id == "acp-1:L3" and main[1].metadata == {"format": "acp", "line": 3, "chunk_lines": [3, 4, 5]}
    assert [(t.id, t.content) for t in parsed.sessions["acp-1:task-toolu_acp"]] == [
        ("acp-1:task-toolu_acp:L8", "child work"), ("acp-1:task-toolu_acp:tool-toolu_read", "[tool_use Read]")]
    reasons = parsed.report.skip_reasons()
    assert reasons == {"thought chunk (not stored as text)": 1, "session update (plan) carries no turn or frame": 1,
                       "prompt response (ends the turn)": 1, "initialize carries no turn or frame": 1}
    chunk_lines = {n for ts in parsed.sessions.values() for t in ts for n in (t.metadata or {}).get("chunk_lines", [])}
    assert covered_lines(parsed) | chunk_lines == set(range(1, len(ACP_LINES) + 1))


def test_acp_objects_joined_on_one_line_keep_distinct_ids() -> None:
    # Ids made from the line number (no messageId) collided: the joined reply was dropped as a repeat.
    lines = [ACP_LINES[0] + ACP_LINES[2], ACP_LINES[5] + chunk("acp-1", "agent_message_chunk", "Done.")]
    main = parse_stream(lines, "acp", now=NOW).sessions["acp-1"]
    assert [(t.id, t.role, t.content) for t in main] == [
        ("acp-1:L1", "user", "review this"), ("acp-1:L1.1", "assistant", "Let me "),
        ("acp-1:L2.1", "assistant", "Done.")]


def test_acp_frames_for_claude_opencode_cursor_auggie() -> None:
    rows = merged(parse_stream(ACP_LINES, now=NOW))
    claude = rows[("acp-1", "unknown", "toolu_acp")]
    assert (claude["subagent_type"], claude["description"], claude["agent_id"]) == ("code-reviewer", "Review diff", "ag7")
    assert (claude["total_tokens"], claude["duration_ms"], claude["tool_use_count"]) == (777, 4321, 3)
    assert (claude["tool_status"], claude["agent_status"], claude["model"]) == ("completed", "completed", "claude-sonnet-4-5")
    opencode = rows[("acp-2", "unknown", "oc_1")]
    assert (opencode["child_session_id"], opencode["model"], opencode["description"]) == ("ses_child", "anthropic/claude-haiku-4-5", "Explore repo")
    assert opencode["settled_at"] == NOW
    cursor = rows[("acp-3", "unknown", "cu_1")]
    assert (cursor["duration_ms"], cursor["is_async"], cursor["subagent_type"]) == (1234, False, "generalPurpose")
    auggie = rows[("acp-4", "unknown", "au_1")]
    assert (auggie["subagent_type"], auggie["description"], auggie["tool_status"]) == ("explore", "Find the config", "completed")
    assert set(rows) == {("acp-1", "unknown", "toolu_acp"), ("acp-2", "unknown", "oc_1"), ("acp-3", "unknown", "cu_1"), ("acp-4", "unknown", "au_1")}


def test_acp_frames_carry_no_prompt_or_result_text() -> None:
    parsed = parse_stream(ACP_LINES, now=NOW)
    assert all("SECRET" not in f.model_dump_json() for f in parsed.frames)


def test_acp_live_feeding_flushes_on_finish() -> None:
    parser = AcpParser(source="live", now=NOW)
    events = [e for line in ACP_LINES[:5] for e in parser.feed_line(line)]
    assert [e.turn.content for e in events if isinstance(e, TurnEvent)] == ["review this"]
    tail = parser.finish()
    assert [e.turn.content for e in tail if isinstance(e, TurnEvent)] == ["Let me delegate."]


# -- detection and the plain turns format ----------------------------------------------------------


def test_detect_format() -> None:
    assert detect_format(EXCERPT.read_text().splitlines()) == "claude-code"
    assert detect_format(['{"role": "user", "content": "hi"}']) == "turns"
    assert detect_format([]) == "turns"
    with pytest.raises(StreamParseError, match="pass format="):
        detect_format(['{"foo": 1}', '{"bar": 2}'])


def test_turns_format_with_sessions_and_invalid_lines() -> None:
    lines = [
        json.dumps({"role": "user", "content": "I moved to Lisbon", "session_id": "s1", "id": "t1", "speaker": "Caroline"}),
        json.dumps({"role": "assistant", "content": "Nice!", "session_id": "s1", "id": "t2"}),
        json.dumps({"role": "wizard", "content": "??", "session_id": "s1"}),
        json.dumps({"role": "user", "content": "hello"}),
    ]
    parsed = parse_stream(lines, session_id="fallback")
    assert parsed.format == "turns"
    assert [t.id for t in parsed.sessions["s1"]] == ["t1", "t2"]
    assert parsed.sessions["s1"][0].metadata == {"speaker": "Caroline"}
    assert [t.content for t in parsed.sessions["fallback"]] == ["hello"]
    assert parsed.report.skipped[0].reason.startswith("invalid turn: role")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["hi", "I moved to Lisbon", "x" * 40, "{}", "\u00e9t\u00e9 }{"]),
                          st.sampled_from(["user", "assistant"])), min_size=1, max_size=8),
       st.lists(st.sampled_from(["\n", "", " "]), min_size=8, max_size=8))
def test_objects_joined_on_one_line_are_read_as_if_each_had_its_own(turns: list[tuple[str, str]], seps: list[str]) -> None:
    # Claude Code once wrote a reply and a summary on one line: a line of several objects loses none of them.
    objs = [json.dumps({"role": role, "content": text, "session_id": "s", "id": f"t{i}"}) for i, (text, role) in
            enumerate(turns)]
    joined = objs[0] + "".join(sep + o for sep, o in zip(seps, objs[1:]))
    one_each, together = parse_stream(objs, format="turns"), parse_stream(joined.split("\n"), format="turns")
    assert [(t.id, t.content) for t in together.sessions["s"]] == [(t.id, t.content) for t in one_each.sessions["s"]]
    assert together.report.malformed == 0


def test_a_line_of_one_object_and_junk_is_still_malformed() -> None:
    parsed = parse_stream(['{"role": "user", "content": "a", "session_id": "s"}{"role"', '[1]{"a": 1}',
                           '{"role": "user", "content": "b", "session_id": "s"}'], format="turns")
    assert parsed.report.malformed == 2 and [t.content for t in parsed.sessions["s"]] == ["b"]


def test_whole_json_document_of_turns(tmp_path: Path) -> None:
    path = tmp_path / "turns.json"
    path.write_text(json.dumps({"session_id": "doc", "turns": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}, indent=2))
    parsed = parse_stream(path)
    assert [t.content for t in parsed.sessions["doc"]] == ["a", "b"]


# -- LangChain callbacks ------------------------------------------------------------------------------


def test_langchain_handler_reports_agent_tools() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from tortoise_sdk.streams import SubagentCallbackHandler

    model = GenericFakeChatModel(
        messages=iter(
            [AIMessage(content=t, usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}) for t in ("a", "b", "c")]
        )
    )

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return "x"

    @tool
    def inner(description: str) -> str:
        """A nested sub-agent."""
        return str(model.invoke("nested").content)

    @tool
    def task(description: str, subagent_type: str) -> str:
        """Launch a sub-agent."""
        lookup.invoke({"q": "a"})
        inner.invoke({"name": "inner", "args": {"description": "deeper"}, "id": "call_inner", "type": "tool_call"})
        return str(model.invoke("hello").content)

    frames: list[SubagentFrame] = []
    handler = SubagentCallbackHandler(frames.append, agent_tools={"task", "inner"})
    call = {"name": "task", "args": {"description": "Research", "subagent_type": "researcher"}, "id": "call_1", "type": "tool_call"}
    task.invoke(call, config={"callbacks": [handler], "metadata": {"thread_id": "th-1"}})

    outer = [f for f in frames if f.tool_call_id == "call_1"]
    nested = [f for f in frames if f.tool_call_id == "call_inner"]
    assert [f.tool_status for f in outer] == ["running", "success"]
    assert [f.tool_status for f in nested] == ["running", "success"]
    end = outer[-1]
    assert (end.session_id, end.subagent_type, end.description) == ("th-1", "researcher", "Research")
    assert (end.total_tokens, end.tool_use_count) == (14, 2)  # its own model call plus the nested one's
    assert end.duration_ms is not None and end.duration_ms >= 0
    assert end.agent_execution_id == outer[0].agent_execution_id is not None
    assert nested[-1].parent_tool_call_id == "call_1" and nested[-1].total_tokens == 7
    assert nested[-1].tool_use_count == 0
    rows, counters = replay(frames, [NOW] * len(frames))
    assert counters.unknown_execution == 0 and len(rows) == 2


def test_langchain_handler_error_sink_failure_and_plain_tools() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    from tortoise_sdk.streams import SubagentCallbackHandler

    @tool
    def task(description: str) -> str:
        """Fails."""
        raise RuntimeError("boom")

    @tool
    def plain(q: str) -> str:
        """Not an agent."""
        return q

    frames: list[SubagentFrame] = []
    handler = SubagentCallbackHandler(frames.append, session_id="s")
    with pytest.raises(RuntimeError):
        task.invoke({"name": "task", "args": {"description": "x"}, "id": "c1", "type": "tool_call"}, config={"callbacks": [handler]})
    plain.invoke({"q": "a"}, config={"callbacks": [handler]})
    assert [f.tool_status for f in frames] == ["running", "error"]

    def broken(frame: SubagentFrame) -> None:
        raise OSError("disk full")

    failing = SubagentCallbackHandler(broken, session_id="s")
    with pytest.raises(RuntimeError, match="boom"):
        task.invoke({"name": "task", "args": {"description": "x"}, "id": "c2", "type": "tool_call"}, config={"callbacks": [failing]})
    assert failing.sink_errors == 2
