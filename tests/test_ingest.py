"""Memory.ingest: sub-agent progress and ACP tool calls become turns, id-less files past the per-call limit, edits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from needs import TRANSCRIPTS, needs_transcripts

from tortoise_sdk import Memory
from tortoise_sdk.pipeline.grounding import is_evidence

NS = "ingest"
SESSION = "491e126e-1e71-469c-ade2-fcc8af567c74"
CHILD = f"{SESSION}:agent-afb92ff"


def child_turns_are_never_evidence(mem: Memory, session: str) -> None:
    metadata = mem.store.turn_metadata(NS, session)
    for turn in mem.turns(session):
        assert metadata[turn.turn_id]["subagent"] is True and not is_evidence(turn, metadata[turn.turn_id])


# -- Claude Code agent_progress: the child's own messages ------------------------------------------


@needs_transcripts
def test_real_transcript_stores_the_sub_agent_messages_and_search_finds_them(tmp_path) -> None:
    path = TRANSCRIPTS / "subagent.jsonl"
    progress = [o for o in map(json.loads, path.read_text(encoding="utf-8").splitlines())
                if o.get("type") == "progress" and o["data"].get("type") == "agent_progress"]
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        report = mem.ingest(path)
        assert (report.sessions, report.turns_stored, report.errors) == (2, 62, [])
        assert [(r.session_id, r.turns_stored) for r in report.receipts] == [(SESSION, 43), (CHILD, 19)]
        children = mem.turns(CHILD)
        assert [t.external_id for t in children] == [o["data"]["message"]["uuid"] for o in progress]
        assert [t.role for t in children[:3]] == ["user", "assistant", "tool"]
        assert children[0].content.startswith("Draft bead content for setting up Credo, Dialyxir, and mix_audit")
        assert children[1].content == "[tool_use Read file_path=/home/marco/projects/spotter]"
        assert children[2].content == "[tool_result Read error] EISDIR: illegal operation on a directory, read"
        child_turns_are_never_evidence(mem, CHILD)
        # only the sub-agent read the directory: its content is searchable now
        assert [(h.session_id, h.external_id) for h in mem.search("EISDIR")] == [
            (CHILD, "47077b31-7dc4-417c-9926-4e371645638d")]
        # the summary is cut; the whole tool result stays in the turn's metadata
        listing = next(t for t in children if t.external_id == "f74604ec-db50-4846-a10c-30c2e6920550")
        full = progress[[o["data"]["message"]["uuid"] for o in progress].index(listing.external_id)]
        stored = mem.store.turn_metadata(NS, CHILD)[listing.turn_id]["tool_results"][0]["content"]
        assert stored == full["data"]["message"]["message"]["content"][0]["content"] and "beads.db" in stored
        again = mem.ingest(path)
        assert (again.turns_stored, again.sessions_unchanged, again.receipts, again.errors) == (0, 2, [], [])


def progress(uuid: str, inner_uuid: str, kind: str, content: Any) -> str:
    role = "assistant" if kind == "assistant" else "user"
    return json.dumps({"type": "progress", "sessionId": "s", "uuid": uuid, "timestamp": "2026-02-10T22:00:01.000Z",
                       "parentToolUseID": "toolu_task",
                       "data": {"type": "agent_progress", "agentId": "ag1", "prompt": "Count files",
                                "message": {"type": kind, "uuid": inner_uuid,
                                            "message": {"role": role, "content": content}}}})


SYNTHETIC = [
    json.dumps({"type": "assistant", "sessionId": "s", "uuid": "u-launch", "timestamp": "2026-02-10T22:00:00.000Z",
                "message": {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_task", "name": "Task",
                     "input": {"description": "Count", "subagent_type": "Explore", "prompt": "Count files"}}]}}),
    progress("p1", "i1", "user", [{"type": "text", "text": "Count files"}]),
    progress("p2", "i2", "assistant", [{"type": "tool_use", "id": "toolu_ls", "name": "Bash", "input": {"command": "ls"}}]),
    progress("p3", "i3", "user", [{"type": "tool_result", "tool_use_id": "toolu_ls", "content": "zebrafile.txt"}]),
    progress("p4", "i4", "assistant", [{"type": "thinking", "thinking": "hmm"}]),
]


def test_synthetic_progress_lines_are_turns_of_the_derived_session(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        report = mem.ingest(SYNTHETIC)
        assert (report.sessions, report.turns_stored, report.frames_recorded) == (2, 4, 2)  # launch + progress
        assert [(t.external_id, t.role, t.content) for t in mem.turns("s:agent-ag1")] == [
            ("i1", "user", "Count files"),
            ("i2", "assistant", "[tool_use Bash command=ls]"),
            ("i3", "tool", "[tool_result Bash] zebrafile.txt"),
        ]
        child_turns_are_never_evidence(mem, "s:agent-ag1")
        assert [h.session_id for h in mem.search("zebrafile")] == ["s:agent-ag1"]
        (row,) = mem.subagents()
        assert (row.tool_call_id, row.agent_id) == ("toolu_task", "ag1")
        assert mem.ingest(SYNTHETIC).turns_stored == 0


# -- ACP: ordinary tool calls ---------------------------------------------------------------------


def acp(body: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "acp", "update": body}})


ACP_BASH = [
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                "params": {"sessionId": "acp", "prompt": [{"type": "text", "text": "list the files"}]}}),
    acp({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Bash", "kind": "execute", "status": "pending",
         "rawInput": {"command": "ls"}}),
    acp({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "in_progress"}),
    acp({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed",
         "rawOutput": "README.md\nmain.py"}),
    acp({"sessionUpdate": "tool_call", "toolCallId": "call_2", "title": "Read missing.txt", "kind": "read",
         "status": "failed", "content": [{"type": "content", "content": {"type": "text", "text": "ENOENT"}}]}),
    acp({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Two files."}}),
]


def test_acp_tool_calls_of_ordinary_tools_are_summarized_as_turns(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        report = mem.ingest(ACP_BASH)
        assert (report.format, report.turns_stored, report.errors) == ("acp", 6, [])
        assert [(t.external_id, t.role, t.name, t.content) for t in mem.turns("acp")] == [
            ("acp:L1", "user", None, "list the files"),
            ("acp:tool-call_1", "assistant", None, "[tool_use Bash command=ls]"),
            ("acp:tool-call_1:result", "tool", "Bash", "[tool_result Bash] README.md main.py"),
            ("acp:tool-call_2", "assistant", None, "[tool_use Read missing.txt]"),
            ("acp:tool-call_2:result", "tool", "Read missing.txt", "[tool_result Read missing.txt error] ENOENT"),
            ("acp:L6", "assistant", None, "Two files."),
        ]
        result = mem.turns("acp")[2]
        assert mem.store.turn_metadata(NS, "acp")[result.turn_id]["raw_output"] == "README.md\nmain.py"
        assert report.parse.skip_reasons() == {"tool call update without a final result": 1}
        assert [h.external_id for h in mem.search("README")] == ["acp:tool-call_1:result"]
        assert mem.ingest(ACP_BASH).turns_stored == 0


# -- id-less turns past max_turns_per_capture ------------------------------------------------------


def turn_lines(n: int, *, ids: bool = False) -> list[str]:
    return [json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}",
                        **({"id": f"m{i}"} if ids else {})}) for i in range(n)]


def test_id_less_turns_past_the_per_call_limit_are_all_stored(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS, max_turns_per_capture=3) as mem:
        report = mem.ingest(turn_lines(7), format="turns", session_id="s")
        assert (report.turns_stored, report.errors, len(report.receipts)) == (7, [], 1)
        assert [t.content for t in mem.turns("s")] == [f"message {i}" for i in range(7)]
        again = mem.ingest(turn_lines(7), format="turns", session_id="s")
        assert (again.turns_stored, again.errors) == (0, [])
        assert len(mem.turns("s")) == 7


def test_turns_with_ids_are_still_captured_in_chunks(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS, max_turns_per_capture=3) as mem:
        report = mem.ingest(turn_lines(7, ids=True), format="turns", session_id="s")
        assert (report.turns_stored, report.errors) == (7, [])
        assert [r.turns_stored for r in report.receipts] == [3, 3, 1]


# -- an edited message under a stored id -----------------------------------------------------------


def test_an_edited_message_under_a_known_id_is_a_conflict_with_or_without_new_lines(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        assert mem.ingest(turn_lines(3, ids=True), format="turns", session_id="s").turns_stored == 3
        edited = turn_lines(3, ids=True)
        edited[1] = json.dumps({"role": "assistant", "content": "message 1, edited", "id": "m1"})
        only_edit = mem.ingest(edited, format="turns", session_id="s")
        with_new = mem.ingest([*edited, json.dumps({"role": "user", "content": "new", "id": "m3"})],
                              format="turns", session_id="s")
        for report in (only_edit, with_new):
            assert (report.ok, report.turns_stored, report.sessions_unchanged) == (False, 0, 0)
            (error,) = report.errors
            assert (error.stage, error.code, error.detail) == ("capture", "CaptureConflict", {"session_id": "s"})
            assert "'m1' is already stored with different content" in error.message
        assert only_edit.errors == with_new.errors
        assert [t.content for t in mem.turns("s")] == ["message 0", "message 1", "message 2"]
        unchanged = mem.ingest(turn_lines(3, ids=True), format="turns", session_id="s")
        assert (unchanged.sessions_unchanged, unchanged.receipts, unchanged.errors) == (1, [], [])
