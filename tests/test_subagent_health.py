"""Expected versus observed sub-agent launches (AC-28/AC-29), on both engines, and ``tortoise subagents --health``."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from needs import TRANSCRIPTS, needs_transcripts
from test_store_conformance import ns, pg_url, store, store_url  # noqa: F401 - the two-engine fixtures
from tortoise_sdk import Memory
from tortoise_sdk.store import Store
from tortoise_sdk.store.sqlite import SQLiteStore
from tortoise_sdk.streams import SubagentFrame

EXCERPT = Path(__file__).parent / "data" / "claude_code_subagent_excerpt.jsonl"


def _delete_row(store: Store, ns: str, tool_call_id: str) -> None:
    mark = "?" if isinstance(store, SQLiteStore) else "%s"
    store.transaction(lambda c: c.execute(
        f"DELETE FROM subagent_contexts WHERE namespace = {mark} AND tool_call_id = {mark}", (ns, tool_call_id)))


def check_health_lists(store: Store, ns: str, paths: list[Path]) -> None:
    """After ingest both lists are empty; a deleted row is a shortfall; a row with no launch is an excess."""
    mem = Memory(store=store, namespace=ns)
    for path in paths:
        mem.ingest(path)
    rows = mem.subagents()
    assert rows, "the transcripts launch sub-agents"
    health = mem.subagent_health()
    assert (health.shortfall, health.excess, health.ok) == ([], [], True)
    assert health.last_observed_at == max(r.observed_at for r in rows)

    victim = rows[0]
    _delete_row(store, ns, victim.tool_call_id)
    health = mem.subagent_health()
    assert [(c.session_id, c.turn_id, c.tool_call_id) for c in health.shortfall] == [
        (victim.session_id, victim.turn_id, victim.tool_call_id)]
    launching = store.get_turn(ns, health.shortfall[0].turn_id)
    assert f"[tool_use {health.shortfall[0].tool_name}" in launching.content
    assert health.excess == [] and not health.ok

    # a row whose launch is in no turn: reported as excess, and the shortfall is still there (never netted)
    phantom = mem.record_subagent(SubagentFrame(session_id=victim.session_id, tool_call_id="toolu_phantom",
                                                agent_execution_id="exec-9", source="live"))
    assert phantom is not None
    health = mem.subagent_health()
    assert len(health.shortfall) == 1
    assert [(k.session_id, k.agent_execution_id, k.tool_call_id, k.source) for k in health.excess] == [
        (victim.session_id, "exec-9", "toolu_phantom", "live")]
    assert health.last_observed_at == phantom.observed_at

    # scoped by time and session
    later = mem.subagent_health(since=phantom.observed_at + timedelta(seconds=1))
    assert (later.shortfall, later.excess) == ([], [])
    recent = mem.subagent_health(since=phantom.observed_at - timedelta(seconds=1))
    assert (len(recent.shortfall), len(recent.excess)) == (0, 1)  # the launch was observed long before
    assert mem.subagent_health(session_id="no-such-session").ok
    assert len(mem.subagent_health(session_id=victim.session_id).shortfall) == 1
    assert Memory(store=store, namespace=ns + "_other").subagent_health().ok


def test_health_lists_on_the_excerpt(store: Store, ns):
    check_health_lists(store, ns, [EXCERPT])


@needs_transcripts
def test_health_lists_on_the_real_claude_code_transcripts(store: Store, ns):
    check_health_lists(store, ns, sorted(TRANSCRIPTS.glob("*.jsonl")))


def test_a_launch_inside_a_sub_agent_session_is_matched_by_its_parent_session_row(store: Store, ns):
    """A nested Task call sits in a turn of ``sess-a:agent-a8b``; its row is keyed by ``sess-a``."""
    from test_subagents_store import NESTED

    mem = Memory(store=store, namespace=ns)
    mem.ingest(NESTED)
    assert {r.session_id for r in mem.subagents()} == {"sess-a"}
    assert mem.subagent_health().ok
    _delete_row(store, ns, "toolu_nested")
    (missing,) = mem.subagent_health(session_id="sess-a").shortfall
    assert (missing.session_id, missing.tool_call_id, missing.tool_name) == ("sess-a:agent-a8b", "toolu_nested", "Agent")


def test_since_must_be_a_time(tmp_path):
    from tortoise_sdk.errors import InvalidInput

    with Memory(str(tmp_path / "m.db")) as mem, pytest.raises(InvalidInput, match="ISO 8601"):
        mem.subagent_health(since="last tuesday")
    with Memory(str(tmp_path / "m.db")) as mem:
        assert mem.subagent_health(since="2026-02-01T00:00:00Z").since == datetime(2026, 2, 1, tzinfo=timezone.utc)


def test_cli_health_exits_0_when_every_launch_is_recorded_and_1_when_not(capsys, db):
    assert run_cli(capsys, "--db", db, "capture", str(EXCERPT))[0] == 0
    code, out, _ = run_cli(capsys, "--db", db, "subagents", "--health", "--json")
    doc = json.loads(out)
    assert (code, doc["ok"], doc["shortfall"], doc["excess"]) == (0, True, [], [])
    assert doc["last_observed_at"].startswith("2026-02-10T21:58")
    with Memory(db) as mem:
        (row,) = mem.subagents()
        _delete_row(mem.store, mem.namespace, row.tool_call_id)
    code, out, _ = run_cli(capsys, "--db", db, "subagents", "--health")
    assert code == 1
    assert out.startswith("shortfall 1, excess 0, no launch expected 0; 1 launch(es) expected, 0 row(s) observed;"
                          " last sub-agent observed never")
    assert f"not recorded: Task call {row.tool_call_id} in turn {row.turn_id}" in out
    code, out, _ = run_cli(capsys, "--db", db, "subagents", "--health", "--since", "2027-01-01", "--json")
    assert (code, json.loads(out)["shortfall"]) == (0, [])
    code, _, err = run_cli(capsys, "--db", db, "subagents", "--since", "2027-01-01")
    assert code == 2 and "--since goes with --health" in err
    code, _, err = run_cli(capsys, "--db", db, "subagents", "--health", "--since", "soon")
    assert code == 2 and "ISO 8601" in err


# -- round two: excess never alarms (AC-28), the window is honoured (AC-29) ---------------------------------

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _launch(mem: Memory, session_id: str, call_id: str, at: datetime) -> None:
    """A captured assistant turn holding a ``Task`` launch, as the transcript parsers store one."""
    mem.capture(session_id, [{"role": "assistant", "content": f"[tool_use Task description=look {call_id}]",
                              "id": f"msg-{call_id}", "timestamp": at.isoformat(),
                              "metadata": {"tool_uses": [{"id": call_id, "name": "Task"}]}}], extract=False)


def _row(mem: Memory, session_id: str, call_id: str, at: datetime, execution: str | None = None,
         source: str = "live") -> None:
    frame = SubagentFrame(session_id=session_id, tool_call_id=call_id, agent_execution_id=execution,
                          source=source, observed_at=at, tool_status="completed")
    assert mem.record_subagent(frame) is not None


def _excess_world(mem: Memory) -> None:
    """A Claude Code session with its launch recorded and a stray row; rows of three hosts that launch nothing."""
    _launch(mem, "cc", "toolu_1", T0)
    _row(mem, "cc", "toolu_1", T0 + timedelta(seconds=1), source="backfill")
    _row(mem, "cc", "toolu_stray", T0 + timedelta(seconds=2), execution="exec-1")
    _row(mem, "lc", "call_lc", T0 + timedelta(seconds=3), execution="run-1")          # LangChain: run id
    _row(mem, "oa", "call_oa", T0 + timedelta(seconds=4), execution="trace_abc")      # OpenAI Agents: trace id
    _row(mem, "acp", "toolu_acp", T0 + timedelta(seconds=5), source="backfill")       # ACP ingest


def test_excess_alone_is_reported_never_alarmed(store: Store, ns):
    """AC-28: rows no launch expected leave ``ok`` True; only like is compared with like (per session's stream)."""
    mem = Memory(store=store, namespace=ns)
    _excess_world(mem)
    health = mem.subagent_health()
    assert (health.shortfall, health.ok, health.expected, health.observed) == ([], True, 1, 5)
    assert [(k.session_id, k.tool_call_id) for k in health.excess] == [("cc", "toolu_stray")]
    assert [(k.session_id, k.tool_call_id, k.source) for k in health.no_launch_expected] == [
        ("lc", "call_lc", "live"), ("oa", "call_oa", "live"), ("acp", "toolu_acp", "backfill")]
    _launch(mem, "cc", "toolu_2", T0 + timedelta(seconds=6))  # a launch nobody recorded: now it alarms
    health = mem.subagent_health()
    assert [c.tool_call_id for c in health.shortfall] == ["toolu_2"] and not health.ok
    assert len(health.excess) == 1  # and the excess is still listed apart (never netted)


def test_cli_health_exits_0_on_excess_alone_and_1_on_shortfall(capsys, store_url, ns):
    """AC-28 through the CLI, on both engines."""
    with Memory(store_url, namespace=ns) as mem:
        _excess_world(mem)
    code, out, _ = run_cli(capsys, "--db", store_url, "--namespace", ns, "subagents", "--health", "--json")
    doc = json.loads(out)
    assert (code, doc["ok"], len(doc["excess"]), len(doc["no_launch_expected"])) == (0, True, 1, 3)
    code, out, _ = run_cli(capsys, "--db", store_url, "--namespace", ns, "subagents", "--health")
    assert code == 0 and out.startswith("shortfall 0, excess 1, no launch expected 3; 1 launch(es) expected")
    assert "no launch expected: row (lc, run-1, call_lc), live" in out
    with Memory(store_url, namespace=ns) as mem:
        _launch(mem, "cc", "toolu_2", T0 + timedelta(seconds=6))
    code, out, _ = run_cli(capsys, "--db", store_url, "--namespace", ns, "subagents", "--health")
    assert code == 1 and "not recorded: Task call toolu_2" in out
    # AC-29 through the CLI: the window's own last row, and its launches against its rows
    window = ("--db", store_url, "--namespace", ns, "subagents", "--health", "--json", "--since")
    code, out, _ = run_cli(capsys, *window, (T0 + timedelta(seconds=5)).isoformat())
    doc = json.loads(out)
    assert (code, [c["tool_call_id"] for c in doc["shortfall"]], doc["observed"]) == (1, ["toolu_2"], 1)
    assert doc["last_observed_at"].startswith("2026-03-01T12:00:05")
    code, out, _ = run_cli(capsys, *window, "2026-04-01")
    doc = json.loads(out)
    assert (code, doc["last_observed_at"], doc["observed"], doc["expected"]) == (0, None, 0, 0)


def test_last_observed_at_honours_since(store: Store, ns):
    """AC-29: the latest row within the window, None when the window has none; no rows there is no alarm by itself."""
    mem = Memory(store=store, namespace=ns)
    _launch(mem, "cc", "toolu_1", T0)
    _row(mem, "cc", "toolu_1", T0, source="backfill")
    _row(mem, "cc", "toolu_2", T0 + timedelta(days=1), execution="exec-2")
    assert mem.subagent_health().last_observed_at == T0 + timedelta(days=1)
    assert mem.subagent_health(since=T0 + timedelta(hours=1)).last_observed_at == T0 + timedelta(days=1)
    quiet = mem.subagent_health(since=T0 + timedelta(days=31))
    assert (quiet.last_observed_at, quiet.observed, quiet.expected, quiet.ok) == (None, 0, 0, True)


def test_a_window_with_expected_calls_and_no_rows_is_a_shortfall(store: Store, ns):
    """AC-29: launches in the window are matched only by rows in the window."""
    mem = Memory(store=store, namespace=ns)
    since = T0 + timedelta(days=30)
    _row(mem, "cc", "toolu_1", T0, source="backfill")  # recorded, but before the window
    _launch(mem, "cc", "toolu_1", since + timedelta(hours=1))
    _launch(mem, "cc", "toolu_2", since + timedelta(hours=2))
    health = mem.subagent_health(since=since)
    assert [c.tool_call_id for c in health.shortfall] == ["toolu_1", "toolu_2"]
    assert (health.expected, health.observed, health.last_observed_at, health.ok) == (2, 0, None, False)
    assert [c.tool_call_id for c in mem.subagent_health().shortfall] == ["toolu_2"]  # all time: toolu_1 has its row


# -- hypothesis: any launches, rows and window keep the check's invariants ----------------------------------

SESSIONS = ("a", "a:agent-x", "b")
CALLS = ("t1", "t2", "t3")
MOMENTS = tuple(T0 + timedelta(hours=h) for h in range(4))
launches_st = st.lists(st.tuples(st.sampled_from(SESSIONS), st.sampled_from(CALLS), st.sampled_from(MOMENTS)),
                       max_size=4, unique_by=lambda x: (x[0], x[1]))
rows_st = st.lists(st.tuples(st.sampled_from(("a", "b", "c")), st.sampled_from(CALLS),
                             st.sampled_from(("e1", "e2")), st.sampled_from(MOMENTS)),
                   max_size=5, unique_by=lambda x: x[:3])


def _derives(launch_session: str, row_session: str) -> bool:
    return launch_session == row_session or launch_session.startswith(row_session + ":agent-")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(launches=launches_st, rows=rows_st, since=st.sampled_from((None, *MOMENTS)))
def test_health_invariants_for_any_launches_rows_and_window(store: Store, launches, rows, since):
    """The two anti-joins against a plain oracle; only a shortfall fails; more rows never make it fail."""
    mem = Memory(store=store, namespace=f"h_{uuid.uuid4().hex[:10]}")
    for session, call, moment in launches:
        _launch(mem, session, call, moment)
    for session, call, execution, moment in rows:
        _row(mem, session, call, moment, execution=execution)
    health = mem.subagent_health(since=since)

    def in_window(moment: datetime) -> bool:
        return since is None or moment >= since

    window_rows = [r for r in rows if in_window(r[3])]
    shortfall = sorted((s, c) for s, c, m in launches if in_window(m) and not any(
        rc == c and _derives(s, rs) for rs, rc, _, _ in window_rows))
    unmatched = [r for r in window_rows if not any(c == r[1] and _derives(s, r[0]) for s, c, _ in launches)]
    comparable = {r[:3] for r in unmatched if any(_derives(s, r[0]) for s, _, _ in launches)}
    assert sorted((c.session_id, c.tool_call_id) for c in health.shortfall) == shortfall
    assert {(k.session_id, k.tool_call_id, k.agent_execution_id) for k in health.excess} == comparable
    assert {(k.session_id, k.tool_call_id, k.agent_execution_id) for k in health.no_launch_expected} == {
        r[:3] for r in unmatched} - comparable
    assert (health.ok, health.expected, health.observed) == (
        not shortfall, sum(in_window(m) for _, _, m in launches), len(window_rows))
    assert health.last_observed_at == max((r[3] for r in window_rows), default=None)
    # excess never alarms: a stray row of any session leaves ok as it was
    _row(mem, "b", "t_stray", MOMENTS[-1], execution="e9")
    assert mem.subagent_health(since=since).ok is health.ok
