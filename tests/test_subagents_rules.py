"""The pure sub-agent merge rules: unit cases for each rule, and hypothesis invariants."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tortoise_sdk.streams import SubagentFrame
from tortoise_sdk.subagents import (
    COLUMN_RULES,
    EMPTY_ROW,
    ROW_COLUMNS,
    TERMINAL_STATUSES,
    UNKNOWN_EXECUTION,
    fold,
    is_terminal,
    merge,
    normalize_frame,
    replay,
)

T0 = datetime(2026, 2, 10, 21, 58, tzinfo=timezone.utc)
METRICS = ("total_tokens", "tool_use_count", "duration_ms")
LAST_WINS = ("parent_tool_call_id", "subagent_type", "description", "agent_id", "child_session_id", "model", "agent_status")


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def frame(**fields: Any) -> SubagentFrame:
    fields.setdefault("session_id", "s1")
    fields.setdefault("tool_call_id", "toolu_1")
    fields.setdefault("observed_at", T0)
    return SubagentFrame(**fields)


def run(*frames: SubagentFrame) -> dict[str, Any]:
    row: dict[str, Any] | None = None
    for i, f in enumerate(frames):
        row = merge(row, f, at(i + 1))
    assert row is not None
    return row


# -- normalization and identity -----------------------------------------------------------------


@pytest.mark.parametrize("ident", [{"tool_call_id": None}, {"tool_call_id": ""}, {"session_id": "  "}, {"session_id": None}])
def test_frame_without_identity_writes_nothing_and_counts_only_that_it_was_attempted_and_skipped(ident: dict[str, Any]) -> None:
    f = frame(**ident, agent_execution_id=None, total_tokens=-3)
    normalized, counts = normalize_frame(f)
    assert normalized is None
    assert counts == {"attempted": 1, "skipped_no_identity": 1, "unknown_execution": 0,
                      "backfill_unknown_execution": 0, "anomalous_value": 0}
    assert merge(None, f, at(1)) is None
    stored = run(frame(model="m"))
    assert merge(stored, f, at(9)) == stored


def test_a_status_is_stored_stripped() -> None:
    # Reviewer: ' Completed ' settled the row but was stored and shown with its spaces.
    row = run(frame(tool_status=" Completed ", agent_status="\tdone "))
    assert (row["tool_status"], row["agent_status"], row["settled_at"]) == ("Completed", "done", T0)


def test_missing_execution_id_is_stored_as_unknown_and_counted() -> None:
    normalized, counts = normalize_frame(frame(agent_execution_id=""))
    assert normalized is not None and normalized.agent_execution_id == UNKNOWN_EXECUTION
    assert counts["unknown_execution"] == 1
    row = merge(None, frame(agent_execution_id=None), at(1))
    assert row is not None and row["agent_execution_id"] == "unknown"
    assert normalize_frame(frame(agent_execution_id="exec-1"))[1]["unknown_execution"] == 0


def test_unknown_execution_is_counted_per_source() -> None:
    """AC-31: only a live frame without an execution id is a signal; a backfill's is expected and counted apart."""
    live = normalize_frame(frame(agent_execution_id=None, source="live"))[1]
    backfill = normalize_frame(frame(agent_execution_id=None, source="backfill"))[1]
    assert (live["unknown_execution"], live["backfill_unknown_execution"]) == (1, 0)
    assert (backfill["unknown_execution"], backfill["backfill_unknown_execution"]) == (0, 1)
    assert normalize_frame(frame(agent_execution_id="e", source="backfill"))[1]["backfill_unknown_execution"] == 0


def test_rows_of_another_key_are_refused() -> None:
    row = run(frame(tool_call_id="a"))
    with pytest.raises(ValueError, match="does not match"):
        merge(row, frame(tool_call_id="b"), at(2))
    with pytest.raises(ValueError):
        merge(row, frame(tool_call_id="a", agent_execution_id="e"), at(2))


def test_every_column_has_one_documented_rule() -> None:
    assert tuple(COLUMN_RULES) == ROW_COLUMNS
    assert set(EMPTY_ROW) == set(ROW_COLUMNS)
    assert all(spec.doc for spec in COLUMN_RULES.values())


# -- column rules -----------------------------------------------------------------------------------


def test_unreported_value_never_blanks_and_last_reported_wins() -> None:
    row = run(frame(model="haiku", description="Draft"), frame(model=None, description=""), frame(model="  "))
    assert row["model"] == "haiku" and row["description"] == "Draft"
    assert run(frame(model="haiku"), frame(model="claude-haiku-4-5"))["model"] == "claude-haiku-4-5"


def test_observed_at_is_write_once_and_a_live_frame_makes_the_row_live() -> None:
    backfill = frame(source="backfill", observed_at=at(-100), model="m-backfill")
    live = frame(source="live", observed_at=at(50), agent_status="completed")
    row = run(backfill, live)
    assert row["source"] == "live" and row["observed_at"] == at(-100)
    assert (row["agent_status"], row["model"]) == ("completed", "m-backfill")
    assert run(backfill, frame(source="backfill", agent_status="x"))["source"] == "backfill"


def test_a_backfill_never_touches_a_live_row() -> None:
    """AC-22: the audit's case: a transcript ingested after live recording overwrote the model and settled it."""
    live = run(frame(source="live", model="claude-haiku", tool_status="running", observed_at=at(-10)))
    backfill = frame(source="backfill", model="inherit", tool_status="completed", total_tokens=9, observed_at=at(-5))
    assert merge(live, backfill, at(99)) == live
    assert merge(live, backfill, at(99))["settled_at"] is None


def test_a_replayed_backfill_is_a_no_op_and_a_grown_one_completes_its_row() -> None:
    launch = frame(source="backfill", subagent_type="Plan", tool_status="running", observed_at=at(-30))
    result = frame(source="backfill", tool_status="completed", agent_status="completed", total_tokens=5,
                   observed_at=at(-20))
    first = run(launch)
    assert merge(first, launch, at(50)) == first  # the same frame again: updated_at kept too
    grown = merge(first, result, at(60))
    assert grown is not None and (grown["settled_at"], grown["total_tokens"], grown["updated_at"]) == (at(-20), 5, at(60))
    (folded, n), = fold([normalize_frame(launch)[0], normalize_frame(result)[0]])
    assert n == 2 and merge(grown, folded, at(70)) == grown


def test_a_live_row_and_a_backfilled_one_are_two_rows_told_apart_by_source() -> None:
    rows, _ = replay([frame(agent_execution_id="exec-7", source="live"), frame(agent_execution_id=None, source="backfill")],
                     [at(1), at(2)])
    assert {k: r["source"] for k, r in rows.items()} == {("s1", "exec-7", "toolu_1"): "live",
                                                        ("s1", "unknown", "toolu_1"): "backfill"}


def test_turn_id_first_non_empty_wins_and_null_is_filled_forward() -> None:
    assert run(frame(turn_external_id=None), frame(turn_external_id="u1"))["turn_id"] == "u1"
    assert run(frame(turn_external_id="u1"), frame(turn_external_id="u2"))["turn_id"] == "u1"
    assert run(frame(turn_external_id="")).get("turn_id") is None


def test_is_async_is_sticky() -> None:
    assert run(frame(is_async=None))["is_async"] is False
    assert run(frame(is_async=True), frame(is_async=False), frame(is_async=None))["is_async"] is True
    assert run(frame(is_async=False), frame(is_async=True))["is_async"] is True


def test_zero_tokens_and_duration_mean_not_reported_but_zero_tool_uses_is_real() -> None:
    row = run(frame(total_tokens=120, duration_ms=900, tool_use_count=5), frame(total_tokens=0, duration_ms=0, tool_use_count=0))
    assert (row["total_tokens"], row["duration_ms"], row["tool_use_count"]) == (120, 900, 0)
    fresh = run(frame(total_tokens=0, duration_ms=0, tool_use_count=0))
    assert (fresh["total_tokens"], fresh["duration_ms"], fresh["tool_use_count"]) == (None, None, 0)


def test_negative_metric_is_null_counted_and_never_blanks() -> None:
    f = frame(total_tokens=-1, tool_use_count=-2, duration_ms=-3)
    assert normalize_frame(f)[1]["anomalous_value"] == 3
    row = run(frame(total_tokens=10, tool_use_count=2, duration_ms=30), f)
    assert (row["total_tokens"], row["tool_use_count"], row["duration_ms"]) == (10, 2, 30)
    assert all(run(f)[m] is None for m in METRICS)


def test_async_launch_regression_reports_no_usage_as_none_not_zero() -> None:
    launch = frame(agent_status="async_launched", tool_status="completed", is_async=True, total_tokens=0, duration_ms=0)
    row = run(launch)
    assert (row["total_tokens"], row["tool_use_count"], row["duration_ms"]) == (None, None, None)
    done = run(launch, frame(agent_status="completed", total_tokens=4195, tool_use_count=2, duration_ms=4484))
    assert (done["total_tokens"], done["tool_use_count"], done["duration_ms"]) == (4195, 2, 4484)
    assert done["agent_status"] == "completed" and done["settled_at"] == T0  # the launch frame's observation


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES) + ["Completed", " FAILED ", "Cancelled"])
def test_terminal_statuses_compare_lowercased_and_stripped(status: str) -> None:
    assert is_terminal(status)
    assert run(frame(tool_status=status, observed_at=at(-50)))["settled_at"] == at(-50)  # observed, not merged


@pytest.mark.parametrize("status", [None, "", "running", "pending", "in_progress", "async_launched", "stopped", "done"])
def test_other_statuses_do_not_settle(status: str | None) -> None:
    assert not is_terminal(status)
    assert run(frame(tool_status=status))["settled_at"] is None


def test_agent_status_never_decides_terminality() -> None:
    row = run(frame(agent_status="completed"), frame(agent_status="failed", tool_status="running"))
    assert row["settled_at"] is None and row["tool_status"] == "running"


def test_first_terminal_settles_and_freezes_tool_status_while_others_keep_following() -> None:
    row = run(
        frame(tool_status="running", observed_at=at(-40)),
        frame(tool_status="completed", agent_status="async_launched", observed_at=at(-30)),
        frame(tool_status="failed", agent_status="completed", total_tokens=50, model="m2", observed_at=at(-20)),
        frame(tool_status="running", parent_tool_call_id="toolu_parent", observed_at=at(-10)),
    )
    assert row["settled_at"] == at(-30)
    assert row["tool_status"] == "completed"
    assert (row["agent_status"], row["total_tokens"], row["model"]) == ("completed", 50, "m2")
    assert row["parent_tool_call_id"] == "toolu_parent"
    assert row["updated_at"] == at(4)


def test_replay_counts_what_it_writes() -> None:
    rows, counters = replay(
        [frame(), frame(tool_call_id=""), frame(agent_execution_id="e", total_tokens=-1), frame()],
        [at(1), at(2), at(3), at(4)],
    )
    assert set(rows) == {("s1", "unknown", "toolu_1"), ("s1", "e", "toolu_1")}
    assert (counters.attempted, counters.persisted, counters.skipped_no_identity, counters.unknown_execution,
            counters.anomalous_value) == (4, 3, 1, 2, 1)


# -- hypothesis invariants --------------------------------------------------------------------------

texts = st.sampled_from([None, "", "  ", "a", "b", "c"])
statuses = st.sampled_from(
    [None, "", "running", "pending", "in_progress", "async_launched", "stopped", "completed", "Completed", "ERROR", "failed", "cancelled", "success", "complete"]
)
metrics = st.one_of(st.sampled_from([None, 0, -1]), st.integers(-10, 10_000))
times = st.sampled_from([at(-300), at(-200), at(-100), at(0)])


def frames_for(session: st.SearchStrategy[str | None], tool: st.SearchStrategy[str | None], execution: st.SearchStrategy[str | None]) -> st.SearchStrategy[SubagentFrame]:
    return st.builds(
        SubagentFrame,
        session_id=session,
        tool_call_id=tool,
        agent_execution_id=execution,
        parent_tool_call_id=texts,
        turn_external_id=texts,
        subagent_type=texts,
        description=texts,
        agent_id=texts,
        child_session_id=texts,
        model=texts,
        agent_status=statuses,
        tool_status=statuses,
        is_async=st.sampled_from([None, True, False]),
        total_tokens=metrics,
        tool_use_count=metrics,
        duration_ms=metrics,
        source=st.sampled_from(["live", "backfill"]),
        observed_at=times,
    )


# One key: None and "" execution ids both mean 'unknown'.
one_key = frames_for(st.just("s1"), st.just("toolu_1"), st.sampled_from([None, ""]))


@st.composite
def committed_orders(draw: st.DrawFn) -> tuple[list[SubagentFrame], list[SubagentFrame]]:
    """Two commit orders of the same frames, with some frames duplicated."""
    base = draw(st.lists(one_key, min_size=1, max_size=8))
    dupes = draw(st.lists(st.sampled_from(base), max_size=4))
    return draw(st.permutations(base + dupes)), draw(st.permutations(base + dupes))


def replay_one(order: list[SubagentFrame]) -> dict[str, Any]:
    rows, _ = replay(order, [at(i + 1) for i in range(len(order))])
    (row,) = rows.values()
    return row


def last(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return present[-1] if present else None


def applied(order: list[SubagentFrame]) -> list[SubagentFrame]:
    """The frames that reach the row: a backfill frame after the row turned live is ignored (AC-22)."""
    first_live = next((i for i, f in enumerate(order) if f.source == "live"), len(order))
    return [f for i, f in enumerate(order) if i <= first_live or f.source == "live"]


@settings(max_examples=300, deadline=None)
@given(committed_orders())
def test_merge_invariants_hold_for_any_order_and_duplication(orders: tuple[list[SubagentFrame], list[SubagentFrame]]) -> None:
    for order in orders:
        row = replay_one(order)
        norm = [normalize_frame(f)[0] for f in applied(order)]
        assert all(n is not None for n in norm)
        terminal_at = [i for i, n in enumerate(norm) if n.terminal]  # type: ignore[union-attr]
        # settlement: iff some frame was terminal; at the first one's observation; status frozen to it
        assert (row["settled_at"] is not None) == bool(terminal_at)
        if terminal_at:
            first = norm[terminal_at[0]]
            assert row["settled_at"] == first.observed_at  # type: ignore[union-attr]
            assert row["tool_status"] == first.tool_status  # type: ignore[union-attr]
        else:
            assert row["tool_status"] == last([n.tool_status for n in norm])  # type: ignore[union-attr]
        # write-once: the first committed frame's; live once any live frame came
        assert row["observed_at"] == order[0].observed_at
        assert row["source"] == ("live" if any(f.source == "live" for f in order) else "backfill")
        assert row["turn_id"] == next((n.turn_id for n in norm if n.turn_id), None)  # type: ignore[union-attr]
        assert row["is_async"] is any(n.is_async is True for n in norm)  # type: ignore[union-attr]
        # metrics: never 0 for tokens/duration, never negative, last reported wins
        for m in METRICS:
            assert row[m] is None or row[m] >= 0
            assert row[m] == last([getattr(n, m) for n in norm])
        assert row["total_tokens"] != 0 and row["duration_ms"] != 0
        for column in LAST_WINS:
            assert row[column] == last([getattr(n, column) for n in norm])
        # updated_at: the last merge, unless a backfill frame left the row untouched
        if order[-1].source == "live":
            assert row["updated_at"] == at(len(order))
        assert row["updated_at"] in {at(i + 1) for i in range(len(order))}
    # order-independent, within one source: what was ever reported stays reported, settlement/async alike
    if all(f.source == orders[0][0].source for f in orders[0]):
        a, b = (replay_one(o) for o in orders)
        for column in (*METRICS, *LAST_WINS, "turn_id", "tool_status"):
            assert (a[column] is None) == (b[column] is None)
        assert (a["settled_at"] is None) == (b["settled_at"] is None)
        assert a["is_async"] == b["is_async"]


live_key = frames_for(st.just("s1"), st.just("toolu_1"), st.sampled_from([None, ""])).map(
    lambda f: f.model_copy(update={"source": "live"}))
backfill_key = frames_for(st.just("s1"), st.just("toolu_1"), st.sampled_from([None, ""])).map(
    lambda f: f.model_copy(update={"source": "backfill"}))


def merged(row: dict[str, Any] | None, frames: list[Any], start: int) -> dict[str, Any] | None:
    for i, f in enumerate(frames):
        row = merge(row, f, at(start + i))
    return row


@settings(max_examples=200, deadline=None)
@given(st.lists(one_key, min_size=1, max_size=6), st.lists(live_key, min_size=1, max_size=4),
       st.lists(backfill_key, min_size=1, max_size=6))
def test_a_backfill_after_a_live_frame_leaves_the_row_byte_identical(history, live, backfill) -> None:
    """AC-22, any history: once a live frame merged, no backfill frame (or fold of them) changes a column."""
    row = merged(merged(None, history, 1), live, 100)
    assert row is not None and row["source"] == "live"
    assert merged(row, backfill, 200) == row
    for folded, _ in fold([normalize_frame(f)[0] for f in backfill]):  # type: ignore[misc]
        assert merge(row, folded, at(300)) == row


@settings(max_examples=200, deadline=None)
@given(st.lists(backfill_key, max_size=6), st.lists(backfill_key, min_size=1, max_size=8))
def test_a_folded_backfill_merges_like_its_frames_and_its_replay_is_a_no_op(history, backfill) -> None:
    """The recorder writes a backfill folded per key: the same row as frame by frame, and replaying changes nothing."""
    start = merged(None, history, 1)
    (folded, n), = fold([normalize_frame(f)[0] for f in backfill])  # type: ignore[misc]
    assert n == len(backfill)
    once = merge(start, folded, at(100))
    one_by_one = merged(start, backfill, 100)
    assert once is not None and one_by_one is not None
    assert {c: once[c] for c in ROW_COLUMNS if c != "updated_at"} == {c: one_by_one[c] for c in ROW_COLUMNS if c != "updated_at"}
    assert merge(once, folded, at(200)) == once  # byte-identical, updated_at included
    first_terminal = next((f.observed_at for f in (*history, *backfill) if is_terminal((f.tool_status or "").strip() or None)), None)
    assert once["settled_at"] == first_terminal  # AC-11: the first terminal frame's own timestamp


@settings(max_examples=200, deadline=None)
@given(st.lists(one_key, min_size=1, max_size=10))
def test_a_reported_value_is_never_replaced_by_null(frames: list[SubagentFrame]) -> None:
    row: dict[str, Any] | None = None
    for i, f in enumerate(frames):
        new = merge(row, f, at(i + 1))
        assert new is not None
        if row is not None:
            for column in ROW_COLUMNS:
                if row[column] is not None:
                    assert new[column] is not None, column
        row = new


many_keys = frames_for(
    st.sampled_from(["s1", "s2", "", None]), st.sampled_from(["t1", "t2", "", None]), st.sampled_from(["e1", None, ""])
)


@settings(max_examples=200, deadline=None)
@given(st.lists(many_keys, max_size=16))
def test_two_keys_never_merge_and_counters_count_exactly(frames: list[SubagentFrame]) -> None:
    nows = [at(i + 1) for i in range(len(frames))]
    rows, counters = replay(frames, nows)

    def blank(v: str | None) -> bool:
        return v is None or not v.strip()

    identified = [(f, n) for f, n in zip(frames, nows) if not blank(f.session_id) and not blank(f.tool_call_id)]
    assert counters.skipped_no_identity == len(frames) - len(identified)
    assert (counters.attempted, counters.persisted) == (len(frames), len(identified))
    assert counters.unknown_execution == sum(blank(f.agent_execution_id) and f.source == "live" for f, _ in identified)
    assert counters.backfill_unknown_execution == sum(
        blank(f.agent_execution_id) and f.source == "backfill" for f, _ in identified)
    assert counters.anomalous_value == sum(
        (getattr(f, m) or 0) < 0 for f, _ in identified for m in METRICS
    )
    keys = {(f.session_id, f.agent_execution_id or "unknown", f.tool_call_id) for f, _ in identified}
    assert set(rows) == keys
    for key, row in rows.items():
        own = [(f, n) for f, n in identified if (f.session_id, f.agent_execution_id or "unknown", f.tool_call_id) == key]
        alone, _ = replay([f for f, _ in own], [n for _, n in own])
        assert alone[key] == row


two_executions = frames_for(st.just("s1"), st.just("toolu_1"), st.sampled_from(["run-1", "run-2"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(two_executions, min_size=1, max_size=10), st.data())
def test_one_execution_never_touches_another_s_row_in_any_order_or_duplication(frames, data) -> None:
    """AC-32: two runs reusing a tool call id keep two rows; each is its own frames merged alone, whatever
    the interleaving and duplication, so a late frame of one never lands on the other's settled row."""
    order = data.draw(st.permutations(frames + data.draw(st.lists(st.sampled_from(frames), max_size=4))))
    rows, _ = replay(order, [at(i + 1) for i in range(len(order))])
    assert set(rows) == {("s1", f.agent_execution_id, "toolu_1") for f in order}
    for key, row in rows.items():
        own = [(f, at(i + 1)) for i, f in enumerate(order) if f.agent_execution_id == key[1]]
        alone, _ = replay([f for f, _ in own], [n for _, n in own])
        assert alone[key] == row
