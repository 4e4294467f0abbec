"""Failed stages never consume their turns (issue 22 §2), on both engines.

Every combination of stage failures (each of three S1 chunks, S2, S3, S4, S5) is run
once through a job, then once more with every stage answering. The stages are
replaced by scripted outcomes (no model is called here; the HTTP path of the same
failures is in test_extraction_api), so the rule itself is what is checked: the
watermark never passes a turn whose S1 chunk or S2 failed, such a run leaves its job
pending for a retry and says which turns wait, and the retry reads them again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tortoise_sdk.pipeline.runner as runner
from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.llm import LLMConfig
from tortoise_sdk.models import Diagnostic
from tortoise_sdk.pipeline.jobs import process_pending
from tortoise_sdk.pipeline.merge import Point, Proposal
from tortoise_sdk.pipeline.runner import PipelineOptions, extract_session
from tortoise_sdk.pipeline.s1_narrate import NarrationResult, chunk_turns
from tortoise_sdk.pipeline.s2_map import StageOutcome
from tortoise_sdk.pipeline.s3_priors import Priors
from tortoise_sdk.store import Store, open_store

TURNS = 8
CHUNK = 3  # chunks: turns 0-2, 3-5, 6-7
STAGES = ("chunk0", "chunk1", "chunk2", "s2", "s3", "s4", "s5")
COMBINATIONS = [frozenset(s for s, on in zip(STAGES, bits) if on)
                for bits in itertools.product((False, True), repeat=len(STAGES))]


@pytest.fixture(params=("sqlite", "postgres"))
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    url = str(tmp_path / "partial.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(url)
    yield s
    s.close()


def fact(i: int) -> str:
    return f"Fact number {i} is about the garden shed."


def turn_text(i: int) -> str:
    return f"Remember this: fact number {i} is about the garden shed."


class Script:
    """The stages' outcomes: the ``failing`` ones fail, the others answer; S2 proposes one point per new turn."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failing: frozenset[str] = frozenset()
        self._write = runner.write_plan
        monkeypatch.setattr(runner, "narrate", self.narrate)
        monkeypatch.setattr(runner, "map_session", self.map_session)
        monkeypatch.setattr(runner, "find_priors", self.find_priors)
        monkeypatch.setattr(runner, "review", self.review)
        monkeypatch.setattr(runner, "write_plan", self.write_plan)

    async def narrate(self, client: Any, prompt: Any, turns: Any, *, size: int, **_: Any) -> NarrationResult:
        stories: list[str | None] = []
        errors = []
        for n, chunk in enumerate(chunk_turns(turns, size)):
            if f"chunk{n}" in self.failing:
                stories.append(None)
                errors.append(Diagnostic(stage="s1", code="server", message=f"chunk {n} failed: HTTP 500",
                                         detail={"chunk": n}))
            else:
                stories.append(f"Chunk {n} tells of turns {chunk[0].index}-{chunk[-1].index}.")
        return NarrationResult(stories, " ".join(s for s in stories if s), errors)

    async def map_session(self, client: Any, prompt: Any, *, turns: Any, **_: Any) -> StageOutcome:
        if "s2" in self.failing:
            return StageOutcome(None, errors=[Diagnostic(stage="s2", code="server", message="s2 failed: HTTP 500")])
        return StageOutcome(Proposal(points=tuple(Point(content=fact(t.index), quote=turn_text(t.index), turn=t.index)
                                                  for t in turns)))

    def find_priors(self, *args: Any, **kwargs: Any) -> Priors:
        return Priors(degraded="the search failed") if "s3" in self.failing else Priors()

    async def review(self, *args: Any, **kwargs: Any) -> StageOutcome:
        if "s4" in self.failing:
            return StageOutcome(None, errors=[Diagnostic(stage="s4", code="server", message="s4 failed: HTTP 500")])
        return StageOutcome(Proposal())

    def write_plan(self, *args: Any, **kwargs: Any) -> Any:
        if "s5" in self.failing:
            raise RuntimeError("the database went away")
        return self._write(*args, **kwargs)


def first_waiting(failing: frozenset[str], turns: int = TURNS) -> int | None:
    """Of a window of ``turns``, the first (counted from its start) the watermark must not pass: every one when
    S2 or S5 failed, else the first turn of the first failed chunk."""
    if failing & {"s2", "s5"}:
        return 0
    return next((n * CHUNK for n in range(3) if f"chunk{n}" in failing and n * CHUNK < turns), None)


def test_no_turn_is_skipped_for_good_whatever_stages_fail(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script(monkeypatch)
    config = LLMConfig(model="openai/unused", api_key="unused")
    options = PipelineOptions(chunk_turns=CHUNK)
    reports: list[Any] = []

    def run(job: Any, fence: Any) -> Any:
        reports.append(extract_session(store, job.namespace, job.session_id, llm_config=config, options=options,
                                       fence=fence))
        return reports[-1]

    for n, failing in enumerate(COMBINATIONS):
        ns, where = f"combo{n}", f"failing {sorted(failing)}"
        store.capture(ns, prepare_capture("s", [{"role": "user" if i % 2 == 0 else "assistant", "content": turn_text(i)}
                                                for i in range(TURNS)], max_turns=TURNS))
        job = store.enqueue_job(ns, "s")
        script.failing = failing
        (after,) = process_pending(store, ns, run, retry_backoff_s=30)
        report, held = reports[-1], first_waiting(failing)
        state = store.extraction_state(ns, "s")
        mark = -1 if state is None else state.watermark
        if held is None:
            assert (mark, report.waiting, after.status) == (TURNS - 1, None, "done"), where
            assert report.status == ("partial" if failing else "ok"), where
        else:
            # The watermark stops just before the first waiting turn; the job waits out its backoff.
            assert (mark, report.waiting) == (held - 1, (held, TURNS - 1)), where
            assert (after.job_id, after.status, after.attempts) == (job.job_id, "pending", 1), where
            assert f"turns {held}-{TURNS - 1} wait for another run" in report.reason, where
            assert after.errors[-1] == f"attempt 1: {report.reason}", where
            assert report.status == ("failed" if failing & {"s5"} or {"s2", "s4"} <= failing else "partial"), where
        # What a run found is written even when its turns wait: the retry finds it again (NOOP), and nothing is lost.
        script.failing = frozenset()
        retried = process_pending(store, ns, run, due_only=False)
        if held is None:
            assert retried == [], where
        else:
            assert [(j.status, j.attempts) for j in retried] == [("done", 2)], where
            assert reports[-1].window == (held, TURNS - 1), where
        assert store.extraction_state(ns, "s").watermark == TURNS - 1, where
        assert sorted(m.content for m in store.memories(ns)) == sorted(fact(i) for i in range(TURNS)), where



@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.integers(0, 5), st.sets(st.sampled_from(STAGES))), min_size=1, max_size=5))
def test_over_captures_and_retries_the_watermark_never_passes_a_failed_turn(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        steps: list[tuple[int, set[str]]]) -> None:
    # A chat that grows between runs, each run with its own failures: after every run the watermark is
    # before the first turn that waits, and one run with every stage answering reads everything left.
    script = Script(monkeypatch)
    config = LLMConfig(model="openai/unused", api_key="unused")
    store = open_store(str(tmp_path_factory.mktemp("seq") / "m.db"))
    total = 0
    try:
        for added, failing in [*steps, (0, set())]:
            total += added
            if total == 0:
                continue
            store.capture("n", prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(total)],
                                               max_turns=total))
            before = store.extraction_state("n", "s")
            base = -1 if before is None else before.watermark
            script.failing = frozenset(failing)
            report = extract_session(store, "n", "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK))
            after = store.extraction_state("n", "s")
            mark = -1 if after is None else after.watermark
            if base == total - 1:
                assert report.status == "skipped" and mark == base
                continue
            held = first_waiting(frozenset(failing), total - 1 - base)
            expected = total - 1 if held is None else base + held
            assert mark == expected, (steps, failing, base, report.waiting)
            assert report.waiting == (None if held is None else (expected + 1, total - 1))
        assert sorted(m.content for m in store.memories("n")) == sorted(fact(i) for i in range(total))
    finally:
        store.close()


@pytest.mark.parametrize("kept", [0, 3])
def test_turns_past_a_cut_reply_wait_for_a_run_of_their_own(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                            kept: int) -> None:
    """Reviewer: an S2 reply cut by the output cap kept its complete items and the watermark passed every turn, so
    the facts of the turns after the cut were lost for good (the job "done", nothing waiting)."""
    script = Script(monkeypatch)
    full = script.map_session
    cut_once = [True]

    async def map_session(client: Any, prompt: Any, *, turns: Any, **kw: Any) -> StageOutcome:
        answer = await full(client, prompt, turns=turns, **kw)
        if not cut_once:  # the retry: a shorter window, whose reply fits
            return answer
        cut_once.pop()
        return StageOutcome(Proposal(points=answer.proposal.points[:kept]), partial=True,
                            warnings=[Diagnostic(stage="s2", code="truncation", message="s2 reply was cut")])

    monkeypatch.setattr(runner, "map_session", map_session)
    config = LLMConfig(model="openai/unused", api_key="unused")
    ns = f"cut{kept}"
    store.capture(ns, prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(TURNS)],
                                         max_turns=TURNS))
    report = extract_session(store, ns, "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK))
    # The reply was cut in its points, so its retractions were never reached, for any turn: the window waits whole
    # (a reviewer's: "I am no longer vegan" was lost when the turns it cited up to were passed), and is read again
    # at once in windows half as large, until each reply fits.
    assert report.status == "ok" and report.waiting is None and report.window == (0, TURNS - 1)
    assert [w.code for w in report.warnings if w.stage == "s2"] == ["truncation"]
    assert "read again in windows half as large" in report.reason
    assert store.extraction_state(ns, "s").watermark == TURNS - 1
    assert sorted(m.content for m in store.memories(ns)) == sorted(fact(i) for i in range(TURNS))


@pytest.mark.parametrize(("lists", "kept", "start", "why"), [
    (("entities", "events", "points", "retractions"), {"retractions": [2], "points": [5]}, 3, "after turn 2"),
    (("entities", "events", "points"), {"points": [5]}, 0, "before its retractions"),
    (("points", "retractions"), {"retractions": [4]}, 5, "after turn 4"),  # events left out by the model
    ((), {}, 0, "before any item"),
])
def test_a_cut_reply_is_known_up_to_the_last_turn_its_last_list_cites(lists: tuple[str, ...],
                                                                     kept: dict[str, list[int]], start: int,
                                                                     why: str) -> None:
    from types import SimpleNamespace

    from tortoise_sdk.pipeline.merge import Retraction
    from tortoise_sdk.store.plan import Window

    items = {k: [(Point if k == "points" else Retraction)(content=f"{k} {t}", quote="q", turn=t) for t in turns]
             for k, turns in kept.items()}
    outcome = StageOutcome(Proposal(**{k: tuple(v) for k, v in items.items()}), partial=True, lists=lists)
    grounded = SimpleNamespace(**{k: [SimpleNamespace(item=i, turn_index=i.turn) for i in items.get(k, [])]
                                  for k in ("events", "points", "retractions")})
    frontier, said = runner._cut_frontier(outcome, grounded, Window(start=0, end=9, base=-1))
    assert (frontier, why in said) == (start, True)


def test_a_later_turn_s4_cites_does_not_pass_the_turns_a_cut_s2_reply_lost(store: Store,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Reviewer: S2's reply was cut after turn 2, and S4 added an item citing the last turn. The turns S2 never
    reached were counted as read (the last cited turn was taken over S2's and S4's items together), so their facts
    were lost for good. Only the cut reply's own items say how far it got."""
    script = Script(monkeypatch)
    full = script.map_session
    cut_once = [True]

    async def map_session(client: Any, prompt: Any, *, turns: Any, **kw: Any) -> StageOutcome:
        answer = await full(client, prompt, turns=turns, **kw)
        if not cut_once:
            return answer
        cut_once.pop()
        return StageOutcome(Proposal(points=answer.proposal.points[:3]), partial=True,
                            warnings=[Diagnostic(stage="s2", code="truncation", message="s2 reply was cut")])

    last = TURNS - 1

    async def review(*args: Any, **kwargs: Any) -> StageOutcome:
        return StageOutcome(Proposal(points=(Point(content=fact(last), quote=turn_text(last), turn=last),)))

    monkeypatch.setattr(runner, "map_session", map_session)
    monkeypatch.setattr(runner, "review", review)
    config = LLMConfig(model="openai/unused", api_key="unused")
    store.capture("cut-s4", prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(TURNS)],
                                            max_turns=TURNS))
    report = extract_session(store, "cut-s4", "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK))
    assert report.status == "ok" and report.waiting is None  # the window waited whole and was read again
    assert store.extraction_state("cut-s4", "s").watermark == last
    assert sorted(m.content for m in store.memories("cut-s4")) == sorted(fact(i) for i in range(TURNS))


def test_a_failed_full_run_does_not_say_that_extracted_turns_wait(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reviewer: a failed `extract --full` of an extracted session said "turns 0-6 wait for another run"; the next
    run then said nothing was new. A failed run writes nothing: only the turns after the watermark wait."""
    script = Script(monkeypatch)
    config = LLMConfig(model="openai/unused", api_key="unused")
    ns = "full-fail"
    store.capture(ns, prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(TURNS)],
                                      max_turns=TURNS))
    assert extract_session(store, ns, "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK)).status == "ok"
    script.failing = frozenset({"s2", "s4"})
    report = extract_session(store, ns, "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK, full=True))
    assert report.status == "failed" and report.waiting is None and "wait" not in report.reason
    store.capture(ns, prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(TURNS + 2)],
                                      max_turns=TURNS + 2))
    report = extract_session(store, ns, "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK, full=True))
    assert report.waiting == (TURNS, TURNS + 1) and f"turns {TURNS}-{TURNS + 1} wait for another run" in report.reason


def test_a_job_settled_by_its_last_window_leaves_turns_captured_meanwhile_to_the_next_job(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reviewer's: the window loop ran on under the fence of a job its last window had settled, when a capture came
    in meanwhile: wasted model calls, then a refused write (a false fencing alarm) and the report thrown away."""
    import tortoise_sdk.pipeline.window as window

    monkeypatch.setattr(window, "WINDOW_CHARS", 200)
    script = Script(monkeypatch)
    store = open_store(str(tmp_path / "m.db"))
    config = LLMConfig(model="openai/unused", api_key="unused")
    try:
        store.capture("n", prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(6)],
                                           max_turns=6))
        store.enqueue_job("n", "s")
        read: list[list[int]] = []
        full = script.map_session

        async def map_session(client: Any, prompt: Any, *, turns: Any, **kw: Any) -> StageOutcome:
            read.append([t.index for t in turns])
            if turns[-1].index == 5:  # the last window: the user speaks again meanwhile
                store.capture("n", prepare_capture("s", [{"role": "user", "content": turn_text(i)} for i in range(8)],
                                                   max_turns=8))
                store.enqueue_job("n", "s")
            return await full(client, prompt, turns=turns, **kw)

        monkeypatch.setattr(runner, "map_session", map_session)
        process_pending(store, "n", lambda job, fence: extract_session(
            store, "n", "s", llm_config=config, options=PipelineOptions(chunk_turns=CHUNK), fence=fence),
            max_jobs=1)
        assert read[-1][-1] == 5 and store.fenced_writes == 0
        assert [j.status for j in store.jobs("n")] == ["done", "pending"]
    finally:
        store.close()
