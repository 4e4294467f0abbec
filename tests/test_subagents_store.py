"""Sub-agent rows in the store: the SQL upsert agrees with the pure oracle, counters, migration 3, ingestion."""

from __future__ import annotations

import json
import logging
import random
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from needs import TRANSCRIPTS, needs_transcripts
from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk import Memory
from tortoise_sdk.models import SubagentCounters
from tortoise_sdk.store.sqlite.migrations import SQLITE_MIGRATIONS, migrate_sqlite
from tortoise_sdk.store.rows import subagent_id_for
from tortoise_sdk.store.sqlite import SQLiteStore
from tortoise_sdk.streams import SubagentFrame
from tortoise_sdk.subagents import SubagentRecorder, is_terminal, normalize_frame, replay

DATA = Path(__file__).parent / "data"
EXCERPT = DATA / "claude_code_subagent_excerpt.jsonl"

SESSION = "491e126e-1e71-469c-ade2-fcc8af567c74"
TASK_ID = "toolu_01Cz2Pnv7qNcnK1ZiocxWhQX"
NS = "ns"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
METRICS = ("total_tokens", "tool_use_count", "duration_ms")


# -- a store with turns that frames refer to -----------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SQLiteStore, dict[tuple[str, str], str]]]:
    """A store whose namespace holds turns m1, m2 (s1), child-m (s1:agent-x), m1 (s2); and the resolution map."""
    store = SQLiteStore(tmp_path_factory.mktemp("sub") / "world.db")
    mem = Memory(store=store, namespace=NS)
    mem.capture("s1", [{"role": "user", "content": "hi", "id": "m1"}, {"role": "assistant", "content": "ok", "id": "m2"}])
    mem.capture("s1:agent-x", [{"role": "assistant", "content": "child", "id": "child-m"}])
    mem.capture("s2", [{"role": "user", "content": "other", "id": "m1"}])
    ids = {(h.session_id, h.external_id): h.turn_id for s in ("s1", "s1:agent-x", "s2") for h in store.turns(NS, s)}
    direct = ids[("s1", "m2")]
    resolve = {
        ("s1", "m1"): ids[("s1", "m1")], ("s1", "m2"): ids[("s1", "m2")], ("s1", "child-m"): ids[("s1:agent-x", "child-m")],
        ("s2", "m1"): ids[("s2", "m1")], ("s1", direct): direct,  # a store turn id given directly
    }
    yield store, resolve
    store.close()


def clear(store: SQLiteStore) -> None:
    store.transaction(lambda c: (c.execute("DELETE FROM subagent_contexts"), c.execute("DELETE FROM subagent_counters")))


def record_all(store: SQLiteStore, frames: list[SubagentFrame], nows: list[datetime]) -> SubagentRecorder:
    cell = [T0]
    recorder = SubagentRecorder(store, NS, clock=lambda: cell[0])
    for frame, now in zip(frames, nows):
        cell[0] = now
        recorder.record(frame)
    return recorder


Key = tuple[str, str, str]


def raw_refs(store: Any) -> dict[Key, str | None]:
    """The stored raw turn reference (``turn_ref``) of each row of the namespace."""
    mark = "?" if isinstance(store, SQLiteStore) else "%s"
    with store.read() as c:
        rows = c.execute("SELECT session_id, agent_execution_id, tool_call_id, turn_ref FROM subagent_contexts"
                         f" WHERE namespace = {mark}", (NS,)).fetchall()
    return {(r[0], r[1], r[2]): r[3] for r in rows}


def stored_rows(store: Any) -> tuple[dict[Key, dict[str, Any]], dict[Key, str | None]]:
    """Each row as the pure rules state it (``turn_id`` is the raw reference), and its resolved turn id."""
    refs = raw_refs(store)
    rows, resolved = {}, {}
    for r in store.subagents(NS):
        key = (r.session_id, r.agent_execution_id, r.tool_call_id)
        rows[key] = {**r.model_dump(exclude={"id", "namespace", "turn_ref"}), "turn_id": refs[key]}
        resolved[key] = r.turn_id
    return rows, resolved


def check_against_replay(store: Any, order: list[SubagentFrame], nows: list[datetime],
                         resolve: dict[tuple[str, str], str]) -> tuple[dict[Key, dict[str, Any]], SubagentCounters]:
    """The stored rows are ``replay``'s (raw references compared), each turn id the resolution of its reference."""
    expected_rows, expected_counts = replay(order, nows)
    got, resolved = stored_rows(store)
    assert got == expected_rows  # every column of every row, two keys never merged
    # every turn referred to is stored before the frames: each reference is resolved (or never will be)
    assert resolved == {key: resolve.get((key[0], row["turn_id"])) for key, row in got.items()}
    return got, expected_counts


# -- hypothesis: the SQL upsert is the oracle ----------------------------------------------------

texts = st.sampled_from([None, "", "  ", "a", "b"])
frames_st = st.builds(
    SubagentFrame,
    # few keys, so that most examples merge several frames into one row
    session_id=st.sampled_from(["s1", "s1", "s1", "s2", "", None]),
    tool_call_id=st.sampled_from(["tc1", "tc1", "tc1", "tc2", "", None]),
    agent_execution_id=st.sampled_from([None, None, "", "e1"]),
    parent_tool_call_id=texts,
    turn_external_id=st.sampled_from([None, "", "m1", "m2", "child-m", "missing", "direct"]),
    subagent_type=texts, description=texts, agent_id=texts, child_session_id=texts, model=texts,
    agent_status=st.sampled_from([None, "", "async_launched", "running", "completed"]),
    tool_status=st.sampled_from([None, "", "pending", "running", "async_launched", "completed", " Error ", "cancelled"]),
    is_async=st.sampled_from([None, False, True]),
    total_tokens=st.sampled_from([None, 0, -5, 1, 33894]),
    tool_use_count=st.sampled_from([None, 0, -1, 3]),
    duration_ms=st.sampled_from([None, 0, -2, 100]),
    source=st.sampled_from(["live", "backfill"]),
    observed_at=st.integers(0, 5).map(lambda s: T0 + timedelta(seconds=s))
    | st.just(datetime(2026, 3, 1, 14, 0, 1, tzinfo=timezone(timedelta(hours=2)))),  # same instant, other zone
)


def with_direct(frames: list[SubagentFrame], resolve: dict[tuple[str, str], str]) -> list[SubagentFrame]:
    direct = resolve[("s1", "m2")]
    return [f.model_copy(update={"turn_external_id": direct}) if f.turn_external_id == "direct" else f for f in frames]


@settings(max_examples=150, deadline=None)
@given(frames=st.lists(frames_st, max_size=12), data=st.data())
def test_sql_upsert_equals_the_oracle_for_any_order_and_duplication(world, frames, data) -> None:
    store, resolve = world
    frames = with_direct(frames, resolve)
    # any permutation, with any frames repeated
    order = data.draw(st.permutations(frames + data.draw(st.lists(st.sampled_from(frames), max_size=4)) if frames else []))
    nows = [T0 + timedelta(hours=1, milliseconds=i) for i in range(len(order))]
    clear(store)
    recorder = record_all(store, order, nows)
    got, expected_counts = check_against_replay(store, order, nows, resolve)
    assert store.subagent_counters(NS) == expected_counts == recorder.counts
    listed = store.subagents(NS)
    keys = [(r.observed_at, r.tool_call_id, r.agent_execution_id, r.session_id) for r in listed]
    assert keys == sorted(keys)
    assert [r.id for r in listed] == [subagent_id_for(NS, r.session_id, r.agent_execution_id, r.tool_call_id)
                                      for r in listed]

    # the facts, stated directly; a backfill frame after the row turned live is ignored (AC-22)
    for key, row in got.items():
        every = [n for f in order if (n := normalize_frame(f)[0]) is not None and n.key == key]
        live_from = next((i for i, n in enumerate(every) if n.source == "live"), len(every))
        mine = [n for i, n in enumerate(every) if i <= live_from or n.source == "live"]
        assert row["is_async"] == any(n.is_async for n in mine)
        assert (row["settled_at"] is not None) == any(n.terminal for n in mine)
        if row["settled_at"] is not None:
            first = next(n for n in mine if n.terminal)
            assert (row["tool_status"], row["settled_at"]) == (first.tool_status, first.observed_at)  # AC-11
        assert row["source"] == ("live" if live_from < len(every) else "backfill")
        assert row["observed_at"] == mine[0].observed_at
        for metric in METRICS:
            assert (row[metric] is None) == all(getattr(n, metric) is None for n in mine)
            assert row[metric] != 0 or metric == "tool_use_count"


@settings(max_examples=40, deadline=None)
@given(frames=st.lists(frames_st, max_size=10))
def test_counters_count_exactly_what_they_claim(world, frames) -> None:
    store, resolve = world
    frames = with_direct(frames, resolve)
    clear(store)
    record_all(store, frames, [T0] * len(frames))
    kept = [f for f in frames if (f.session_id or "").strip() and (f.tool_call_id or "").strip()]
    negatives = sum(1 for f in kept for m in METRICS if (getattr(f, m) or 0) < 0)
    assert store.subagent_counters(NS) == SubagentCounters(
        attempted=len(frames), persisted=len(kept), skipped_no_identity=len(frames) - len(kept),
        unknown_execution=sum(1 for f in kept if not (f.agent_execution_id or "").strip() and f.source == "live"),
        backfill_unknown_execution=sum(1 for f in kept if not (f.agent_execution_id or "").strip()
                                       and f.source == "backfill"),
        anomalous_value=negatives, failed=0,
    )
    assert len(store.subagents(NS)) == len({normalize_frame(f)[0].key for f in kept})


def test_two_executions_reusing_a_tool_call_id_are_two_rows(world) -> None:
    store, _ = world
    clear(store)
    base = dict(session_id="s1", tool_call_id="tc1", observed_at=T0)
    record_all(store, [SubagentFrame(agent_execution_id="e1", total_tokens=10, **base),
                       SubagentFrame(agent_execution_id="e2", total_tokens=20, **base),
                       SubagentFrame(total_tokens=30, **base)], [T0] * 3)
    rows = store.subagents(NS, session_id="s1")
    assert [(r.agent_execution_id, r.total_tokens) for r in rows] == [("e1", 10), ("e2", 20), ("unknown", 30)]
    assert store.subagent_counters(NS).unknown_execution == 1


def test_the_first_reference_wins_and_turn_id_is_its_resolution(world) -> None:
    store, resolve = world
    clear(store)
    f = dict(session_id="s1", observed_at=T0)
    rec = record_all(store, [SubagentFrame(tool_call_id="tc1", turn_external_id="missing", **f)], [T0])
    rec.record(SubagentFrame(tool_call_id="tc1", turn_external_id="child-m", **f))  # "missing" was first: kept
    rec.record(SubagentFrame(tool_call_id="tc2", **f))
    rec.record(SubagentFrame(tool_call_id="tc2", turn_external_id="child-m", **f))  # found in s1:agent-x
    rec.record(SubagentFrame(tool_call_id="tc2", turn_external_id="m1", **f))  # first non-empty wins
    assert raw_refs(store) == {("s1", "unknown", "tc1"): "missing", ("s1", "unknown", "tc2"): "child-m"}
    assert [(r.tool_call_id, r.turn_id) for r in store.subagents(NS)] == [
        ("tc1", None), ("tc2", resolve[("s1", "child-m")])]
    assert [r.tool_call_id for r in store.subagents(NS, turn_id=resolve[("s1", "child-m")])] == ["tc2"]
    assert store.subagents(NS, turn_id=resolve[("s1", "m1")]) == []


def test_a_frame_recorded_before_its_turn_gets_the_turn_when_it_is_captured(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        first = mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="t", turn_external_id="msg-1"))
        assert first is not None and first.turn_id is None
        mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="c", turn_external_id="in-child"))
        mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="o", turn_external_id="elsewhere"))
        mem.capture("s", [{"role": "user", "content": "x", "id": "msg-1"}])
        mem.capture("s:agent-a", [{"role": "assistant", "content": "y", "id": "in-child"}])
        mem.capture("s:other", [{"role": "assistant", "content": "z", "id": "elsewhere"}])  # not a derived session
        mem.capture("t", [{"role": "user", "content": "w", "id": "msg-1"}])  # another session's msg-1
        (launch,) = mem.turns("s")
        (child,) = mem.turns("s:agent-a")
        later = mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="t", description="d"))
        assert later is not None and (later.turn_id, later.description) == (launch.turn_id, "d")
        assert [r.tool_call_id for r in mem.subagents(turn_id=launch.turn_id)] == ["t"]
        assert {r.tool_call_id: r.turn_id for r in mem.subagents()} == {
            "t": launch.turn_id, "c": child.turn_id, "o": None}


def test_an_oversized_metric_is_anomalous_and_the_frame_is_kept(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        row = mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="t", total_tokens=2**63,
                                                duration_ms=2**63 - 1, description="kept"))
        assert row is not None
        assert (row.total_tokens, row.duration_ms, row.description) == (None, 2**63 - 1, "kept")
        assert mem.subagent_counters() == SubagentCounters(attempted=1, persisted=1, unknown_execution=1,
                                                                anomalous_value=1)


# -- THE regression: an async launch reports no usage, and the row says NULL, never 0 -----------


def async_launch_lines() -> list[str]:
    """The excerpt's Task call and result, as a background launch whose result has not come back."""
    lines = [json.loads(line) for line in EXCERPT.read_text(encoding="utf-8").splitlines()]
    launch = next(o for o in lines if o["type"] == "assistant" and o["message"]["content"][0]["type"] == "tool_use")
    result = next(o for o in lines if "toolUseResult" in o)
    launch["message"]["content"][0]["input"]["run_in_background"] = True
    result["toolUseResult"] = {"status": "async_launched", "agentId": "afb92ff", "isAsync": True,
                               "description": "Draft beads for linting setup", "totalTokens": 0,
                               "totalDurationMs": 0, "totalToolUseCount": 0}
    result["message"]["content"][0]["content"] = [{"type": "text", "text": "Async agent launched successfully."}]
    return [json.dumps(launch), json.dumps(result)]


def test_async_launch_stores_null_metrics_not_zero(tmp_path) -> None:
    db = tmp_path / "m.db"
    with Memory(str(db), namespace=NS) as mem:
        report = mem.ingest(async_launch_lines())
        (row,) = mem.subagents()
    assert report.counters.persisted == 2 and report.counters.failed == 0
    # the launch call itself returned: settled by its tool status, whatever the agent status says
    assert (row.agent_status, row.is_async, row.tool_status) == ("async_launched", True, "completed")
    assert (row.total_tokens, row.tool_use_count, row.duration_ms) == (None, None, None)
    raw = sqlite3.connect(db)
    try:
        got = raw.execute("SELECT total_tokens, tool_use_count, duration_ms, typeof(total_tokens),"
                          " typeof(tool_use_count), typeof(duration_ms), is_async FROM subagent_contexts").fetchall()
        assert got == [(None, None, None, "null", "null", "null", 1)]
        defaults = {r[1]: r[4] for r in raw.execute("PRAGMA table_info(subagent_contexts)")}
        assert [defaults[m] for m in METRICS] == [None, None, None]  # no DEFAULT 0 on any metric
    finally:
        raw.close()


def test_async_launch_then_notification_fills_usage_without_losing_launch_facts(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        mem.ingest(async_launch_lines())
        mem.record_subagent(SubagentFrame(session_id=SESSION, tool_call_id=TASK_ID, agent_status="completed",
                                          total_tokens=1200, tool_use_count=0, duration_ms=0, source="live"))
        (row,) = mem.subagents()
    assert (row.total_tokens, row.tool_use_count, row.duration_ms) == (1200, 0, None)  # 0 tool uses is real
    # the live notification made the row live: a later backfill of the transcript cannot change it
    assert (row.source, row.is_async, row.agent_status, row.subagent_type) == ("live", True, "completed", "Plan")


# -- ingestion of real transcripts ----------------------------------------------------------------


def check_settled_task(mem: Memory) -> None:
    (row,) = mem.subagents()
    assert (row.session_id, row.tool_call_id, row.agent_execution_id) == (SESSION, TASK_ID, "unknown")
    assert (row.total_tokens, row.duration_ms, row.tool_use_count) == (33894, 38799, 9)
    assert (row.subagent_type, row.description, row.agent_id) == ("Plan", "Draft beads for linting setup", "afb92ff")
    assert (row.tool_status, row.agent_status, row.source, row.is_async) == ("completed", "completed", "backfill", False)
    assert row.settled_at is not None
    launching = mem.store.get_turn(mem.namespace, row.turn_id)
    assert launching.external_id == "79ed4dd9-9c66-46f4-af77-d38ce0621136" and "[tool_use Task" in launching.content


def test_excerpt_ingests_one_settled_row(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        report = mem.ingest(EXCERPT)
        # 4 turns of the session, 1 of the sub-agent's own (its progress line) in "<session>:agent-afb92ff"
        assert (report.format, report.sessions, report.turns_stored, report.frames_recorded) == ("claude-code", 2, 5, 3)
        check_settled_task(mem)
        again = mem.ingest(EXCERPT)
        assert (again.turns_stored, again.sessions_unchanged, again.receipts, again.errors) == (0, 2, [], [])
        check_settled_task(mem)
        assert len(mem.receipts()) == 2


@needs_transcripts
def test_real_subagent_transcript_ingests_one_settled_row(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        report = mem.ingest(TRANSCRIPTS / "subagent.jsonl")
        assert (report.turns_stored, report.frames_recorded, report.counters.failed) == (62, 4, 0)  # 43 + 19 child
        check_settled_task(mem)
        assert mem.subagent_counters() == SubagentCounters(attempted=4, persisted=4, backfill_unknown_execution=4)


@needs_transcripts
def test_a_grown_transcript_appends_only_its_new_turns(tmp_path) -> None:
    lines = (TRANSCRIPTS / "subagent.jsonl").read_text(encoding="utf-8").splitlines()
    with Memory(str(tmp_path / "a.db"), namespace=NS) as grown, Memory(str(tmp_path / "b.db"), namespace=NS) as once:
        first = grown.ingest(lines[:40])
        second = grown.ingest(lines)
        once.ingest(lines)
        assert first.turns_stored + second.turns_stored == 62 and second.errors == []
        assert [(t.turn_id, t.content) for t in grown.turns(SESSION)] == [(t.turn_id, t.content) for t in once.turns(SESSION)]
        check_settled_task(grown)


# -- failures never fail the capture ---------------------------------------------------------------


def test_a_failing_upsert_warns_counts_failed_and_the_capture_succeeds(tmp_path, caplog) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        mem.store.transaction(lambda c: c.execute("DROP TABLE subagent_contexts"))
        with caplog.at_level(logging.WARNING, logger="tortoise_sdk.subagents"):
            report = mem.ingest(EXCERPT)
        assert report.turns_stored == 5 and report.ok
        assert report.counters == SubagentCounters(attempted=3, failed=3)
        assert mem.subagent_counters() == SubagentCounters(attempted=3, failed=3)
        assert "subagent upsert failed" in caplog.text
        assert mem.record_subagent(SubagentFrame(session_id="s", tool_call_id="t")) is None
        assert (mem.subagent_counters().attempted, mem.subagent_counters().failed) == (4, 4)


def test_a_frame_without_identity_only_counts(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        assert mem.record_subagent(SubagentFrame(session_id="s1", tool_call_id="  ", total_tokens=-1)) is None
        assert mem.subagents() == []
        assert mem.subagent_counters() == SubagentCounters(attempted=1, skipped_no_identity=1)
        with Memory(str(tmp_path / "m.db"), namespace="other") as other:
            assert other.subagent_counters() == SubagentCounters()


# -- migration 3 ----------------------------------------------------------------------------------


def dump(conn: sqlite3.Connection, tables: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    return {t: [tuple(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY rowid")] for t in tables}


def test_migration_3_on_an_existing_database_leaves_its_data_untouched(tmp_path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    previous = [m for m in SQLITE_MIGRATIONS if m.version < 3]
    assert migrate_sqlite(conn, previous) == [m.version for m in previous]
    now = "2026-01-01T00:00:00+00:00"
    conn.execute("INSERT INTO sessions VALUES ('default', 's1', NULL, ?, ?)", (now, now))
    conn.execute("INSERT INTO turns (turn_id, namespace, session_id, idx, role, name, content, external_id, timestamp,"
                 " metadata, content_hash, receipt_id, created_at) VALUES"
                 " ('t1', 'default', 's1', 0, 'user', NULL, 'kept verbatim', 'm1', NULL, NULL, 'h', 'r1', ?)", (now,))
    conn.execute("INSERT INTO turns_fts (rowid, content, name) SELECT rowid, content, name FROM turns")
    conn.execute("INSERT INTO receipts VALUES ('r1', 'default', 's1', NULL, NULL, '{}', ?)", (now,))
    tables = ["sessions", "turns", "receipts"]
    before = dump(conn, tables)
    schema_before = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()

    store = SQLiteStore(path)
    assert store.schema_version() == max(m.version for m in SQLITE_MIGRATIONS)
    assert store.migrate() == []  # twice: a no-op
    with store.read() as c:
        assert dump(c, tables) == before
        schema_after = [tuple(r) for r in c.execute("SELECT name, sql FROM sqlite_master ORDER BY name")]
    # Every table and index stays as it was; only migration 6 redefines the full-text triggers
    # (they index a bounded text since), migration 7 adds columns to jobs, migrations 10 and 11 to memories,
    # 11 one to memory_entities, 16 and 17 one each to entities.
    replaced = {"turns_ad", "turns_au", "jobs", "memories", "memory_entities", "entities"}
    assert {r for r in schema_before if r[0] not in replaced} <= set(schema_after)
    assert {n for n, _ in schema_after} >= {n for n, _ in schema_before}
    assert {n for n, _ in set(schema_after) - set(schema_before)} >= {"subagent_contexts", "subagent_counters"}
    assert [h.content for h in store.search_terms("default", ["verbatim"], k=5)] == ["kept verbatim"]
    store.close()

    again = SQLiteStore(path)
    with again.read() as c:
        assert [tuple(r) for r in c.execute("SELECT name, sql FROM sqlite_master ORDER BY name")] == schema_after
        assert c.execute("SELECT COUNT(*) FROM schema_migrations WHERE version = 3").fetchone()[0] == 1
    again.close()


def test_migration_4_keeps_existing_rows_and_their_turn_ids(tmp_path) -> None:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate_sqlite(conn, [m for m in SQLITE_MIGRATIONS if m.version <= 3]) == [1, 2, 3]
    at = "2026-01-01T00:00:00.000000+00:00"
    conn.execute("INSERT INTO subagent_contexts (namespace, session_id, turn_id, tool_call_id, total_tokens, source,"
                 " observed_at, updated_at) VALUES ('ns', 's1', 't_old', 'tc1', 5, 'live', ?, ?)", (at, at))
    conn.close()
    store = SQLiteStore(path)
    try:
        assert store.schema_version() == SQLITE_MIGRATIONS[-1].version  # 4 and all later ones
        (row,) = store.subagents(NS)
        assert (row.turn_id, row.total_tokens) == ("t_old", 5)
        assert raw_refs(store) == {("s1", "unknown", "tc1"): None}
        # a later frame records its reference; the resolved turn id stays the one stored
        rec = SubagentRecorder(store, NS)
        after = rec.record(SubagentFrame(session_id="s1", tool_call_id="tc1", turn_external_id="m9"))
        assert after is not None and after.turn_id == "t_old"
        assert raw_refs(store) == {("s1", "unknown", "tc1"): "m9"}
    finally:
        store.close()


# -- PostgreSQL: the same upsert, the same oracle --------------------------------------------------


def test_postgres_upsert_equals_the_oracle(world) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from pgtemp import require_postgres, temp_database

    require_postgres()
    from tortoise_sdk.store.postgres import PostgresStore

    rng = random.Random(5)
    strategy_frames: list[SubagentFrame] = []
    for _ in range(60):
        strategy_frames.append(SubagentFrame(
            session_id=rng.choice(["s1", "s2", ""]), tool_call_id=rng.choice(["tc1", "tc2", None]),
            agent_execution_id=rng.choice([None, "e1"]), turn_external_id=rng.choice([None, "m1", "child-m", "nope"]),
            subagent_type=rng.choice([None, "Plan", "Explore"]), agent_status=rng.choice([None, "async_launched", "done"]),
            tool_status=rng.choice([None, "running", "completed", "error"]), is_async=rng.choice([None, False, True]),
            total_tokens=rng.choice([None, 0, -1, 7]), tool_use_count=rng.choice([None, 0, 2]),
            duration_ms=rng.choice([None, 0, 5]), source=rng.choice(["live", "backfill"]),
            observed_at=T0 + timedelta(seconds=rng.randint(0, 3)),
        ))
    nows = [T0 + timedelta(hours=1, milliseconds=i) for i in range(len(strategy_frames))]
    with temp_database("tortoise_subagents") as url:
        pg = PostgresStore(url, min_size=0, max_size=2)
        try:
            mem = Memory(store=pg, namespace=NS)
            mem.capture("s1", [{"role": "user", "content": "hi", "id": "m1"}])
            mem.capture("s1:agent-x", [{"role": "assistant", "content": "child", "id": "child-m"}])
            ids = {(h.session_id, h.external_id): h.turn_id for s in ("s1", "s1:agent-x") for h in pg.turns(NS, s)}
            resolve = {("s1", "m1"): ids[("s1", "m1")], ("s1", "child-m"): ids[("s1:agent-x", "child-m")]}
            recorder = record_all(pg, strategy_frames, nows)  # type: ignore[arg-type]
            expected_rows, expected_counts = check_against_replay(pg, strategy_frames, nows, resolve)
            assert pg.subagent_counters(NS) == expected_counts == recorder.counts
            assert any(r["settled_at"] for r in expected_rows.values()) and is_terminal("completed")
            assert any(r["turn_id"] == "child-m" for r in expected_rows.values())
        finally:
            pg.close()


# -- the LangChain handler records through the same recorder -------------------------------------


def test_langchain_handler_records_into_memory(tmp_path) -> None:
    pytest.importorskip("langchain_core")
    from uuid import uuid4

    ticks = iter([10.0, 12.5])
    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        mem.capture("s1", [{"role": "user", "content": "review this", "id": "m1"}])
        handler = mem.subagent_handler("s1", clock=lambda: next(ticks))
        run = uuid4()
        handler.on_tool_start({"name": "task"}, "", run_id=run, tool_call_id="call_1",
                              inputs={"subagent_type": "reviewer", "description": "review the diff"})
        (running,) = mem.subagents(session_id="s1")
        assert (running.tool_status, running.settled_at, running.source) == ("running", None, "live")
        handler.on_tool_end("looks good", run_id=run)
        (row,) = mem.subagents(session_id="s1")
    assert (row.agent_execution_id, row.tool_call_id, row.subagent_type) == (str(run), "call_1", "reviewer")
    assert (row.tool_status, row.duration_ms, row.tool_use_count, row.total_tokens) == ("completed", 2500, 0, None)
    assert row.settled_at is not None and handler.sink_errors == 0


# -- nested agents and sub-agent turns ---------------------------------------------------------------


def cc(kind: str, uuid: str, content: Any, **extra: Any) -> str:
    return json.dumps({"type": kind, "sessionId": "sess-a", "uuid": uuid, "timestamp": "2026-02-10T22:00:00.000Z",
                       "message": {"role": "assistant" if kind == "assistant" else "user", "content": content},
                       **extra})


NESTED = [
    cc("assistant", "u-launch", [{"type": "tool_use", "id": "toolu_bg", "name": "Task",
                                  "input": {"description": "Scan", "subagent_type": "Explore", "prompt": "P"}}]),
    cc("assistant", "u-side", [{"type": "text", "text": "child says hi"}], isSidechain=True, agentId="a8b"),
    json.dumps({"type": "progress", "sessionId": "sess-a", "uuid": "u-prog", "timestamp": "2026-02-10T22:00:01.000Z",
                "parentToolUseID": "toolu_bg",
                "data": {"type": "agent_progress", "agentId": "a8b", "message": {
                    "type": "assistant", "uuid": "u-inner", "message": {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "toolu_nested", "name": "Agent", "input": {"description": "Nested"}}]}}}}),
]


def test_nested_agents_keep_their_parent_and_sub_agent_turns_are_never_evidence(tmp_path) -> None:
    from tortoise_sdk.pipeline.grounding import is_evidence

    with Memory(str(tmp_path / "m.db"), namespace=NS) as mem:
        report = mem.ingest(NESTED)
        rows = {r.tool_call_id: r for r in mem.subagents(session_id="sess-a")}
        assert set(rows) == {"toolu_bg", "toolu_nested"}
        assert (rows["toolu_nested"].parent_tool_call_id, rows["toolu_nested"].description) == ("toolu_bg", "Nested")
        assert rows["toolu_bg"].turn_id == mem.turns("sess-a")[0].turn_id
        children = mem.turns("sess-a:agent-a8b")  # the sidechain line, then the progress line's inner message
        assert [c.external_id for c in children] == ["u-side", "u-inner"]
        for child in children:
            metadata = mem.store.turn_metadata(NS, "sess-a:agent-a8b")[child.turn_id]
            assert metadata["subagent"] is True and not is_evidence(child, metadata)
        (parent,) = mem.turns("sess-a")
        assert is_evidence(parent, mem.store.turn_metadata(NS, "sess-a")[parent.turn_id])
        assert report.sessions == 2 and [s.session_id for s in mem.sessions()] == ["sess-a", "sess-a:agent-a8b"]
