"""Memory in a running agent loop (issue 9): a 300-turn LoCoMo conversation replayed exchange by exchange.

``MemorySession`` gets a block before each exchange and captures it after, with the default
background batching; a worker's pass (``mem.process_pending()``) runs after every exchange,
so a job runs as soon as it is due, and ``session.close()`` flushes the rest. Extraction crashes
once between S4 and S5. The model is the stub on loopback answering through litellm's real
HTTP path, with ``tests/reading_model.py`` reading each prompt (a cassette of ~45 calls whose
prompts depend on the batching would be large and re-recorded with every prompt edit; the
stub's request log is the wire record the checks read).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from conftest import FAST_RETRY
from locomo import LOCOMO_DIR, load_chat, needs_locomo
from reading_model import EVERY, MIN_WORDS, S2Prompt, answer, line_of
from stub_model import StubModel, StubRequest
from tortoise_sdk import Memory
from tortoise_sdk.adapters.loop import MemorySession
from tortoise_sdk.config import DEFAULT_EXTRACT_EVERY
from tortoise_sdk.pipeline import runner

pytestmark = [needs_locomo, pytest.mark.block_network(allowed_hosts=["127.0.0.1"])]

TURNS = 300
#: The extraction whose S5 never runs (the 3rd).
CRASH_AT = 3


@dataclass
class Replay:
    """What a replay left: the store, the stub's requests, the windows S5 was asked to write and which crashed."""

    mem: Memory
    chat: list[tuple[dict, dict]]
    requests: list[StubRequest]
    writes: list[tuple[int, int]] = field(default_factory=list)
    crashed: list[tuple[int, int]] = field(default_factory=list)
    queued_reports: int = 0

    def s2(self) -> list[S2Prompt]:
        return [S2Prompt.parse(r.prompt) for r in self.requests if r.stage == "s2"]


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Any:
    chat = load_chat(LOCOMO_DIR / "conv-26.json", TURNS)
    real_write = runner.write_plan
    rec: dict[str, Any] = {"writes": [], "crashed": []}

    def write_plan(store: Any, namespace: str, plan: Any, **kwargs: Any) -> Any:
        window = (plan.window.start, plan.window.end)
        rec["writes"].append(window)
        if len(rec["writes"]) == CRASH_AT:
            rec["crashed"].append(window)
            raise RuntimeError("injected crash between S4 and S5")
        return real_write(store, namespace, plan, **kwargs)

    db = str(tmp_path_factory.mktemp("loop") / "loop.db")
    with StubModel([], responder=answer) as stub, pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "write_plan", write_plan)
        # job_retry_s=0: the crashed job is retried in the same worker pass (the default waits 30 s, longer
        # than this whole replay, and later captures would fold into it).
        mem = Memory(db, namespace="loop", model="openai/stub-model", api_base=stub.base_url, api_key="sk-stub",
                     model_settings={**FAST_RETRY, "max_attempts": 2}, job_retry_s=0)
        session = MemorySession(mem, "chat")
        messages: list[dict] = []
        queued = 0
        for user, assistant in chat:
            messages.append(user)
            session.before_turn(messages)
            receipt = session.after_turn(user, assistant)
            queued += receipt is not None and receipt.extraction.status == "queued"
            messages.append(assistant)
            mem.process_pending()  # a worker's pass: the jobs that are due
        session.close()
        assert stub.unanswered == []
        yield Replay(mem, chat, stub.requests, rec["writes"], rec["crashed"], queued)
        mem.close()


def test_the_replay_is_extracted_in_batches(replay: Replay) -> None:
    # Every exchange was queued, not extracted in the loop: one job per extract_every evidence turns.
    assert replay.queued_reports == TURNS // 2
    s2 = replay.s2()
    windows = [(p.new[0][0], p.new[-1][0]) for p in s2]
    assert len(windows) == TURNS // DEFAULT_EXTRACT_EVERY + 1  # + the crashed window's retry
    assert all(end - start + 1 <= DEFAULT_EXTRACT_EVERY for start, end in windows)
    calls = Counter(r.stage for r in replay.requests)
    assert calls == {"s1": len(windows), "s2": len(windows), "s4": len(windows)}


def test_each_turn_reaches_at_most_three_s2_requests(replay: Replay) -> None:
    lines = [line_of(i, t["name"], t["content"]) for i, t in enumerate(t for pair in replay.chat for t in pair)]
    prompts = [r.prompt for r in replay.requests if r.stage == "s2"]
    seen = Counter(i for i, line in enumerate(lines) for p in prompts if line in p)
    assert set(seen) == set(range(TURNS))
    assert max(seen.values()) <= 3
    # Three times only around the crash: its window's turns (new twice, then context once) and its context
    # (context twice, after being new once).
    at = replay.writes.index(replay.crashed[0])
    crashed = replay.s2()[at]
    assert {i for i, n in seen.items() if n == 3} == {i for i, *_ in crashed.new[-4:] + crashed.context}
    # As new once, as context at most once more, elsewhere.
    for p in replay.s2():
        assert {i for i, *_ in p.context}.isdisjoint({i for i, *_ in p.new})


def test_every_turn_is_covered_by_a_committed_extraction_after_flush(replay: Replay) -> None:
    mem = replay.mem
    assert mem.store.extraction_state("loop", "chat").watermark == TURNS - 1
    assert [j.status for j in mem.store.jobs("loop")] == ["done"] * len(mem.store.jobs("loop"))
    committed = [w for w in replay.writes if w not in replay.crashed or replay.writes.count(w) > 1]
    covered = sorted(i for start, end in set(committed) for i in range(start, end + 1))
    assert covered == list(range(TURNS))  # each turn in exactly one committed window
    # Nothing lost: every turn the model remembered is cited by a live memory, the crashed window's too.
    turns = [t for pair in replay.chat for t in pair]
    expected = {turns[i]["id"] for i in range(0, TURNS, EVERY) if len(turns[i]["content"].split()) >= MIN_WORDS}
    cited = {s.external_id for m in mem.memories("chat") for s in m.sources}
    assert expected <= cited
    assert len(expected) > 60
    # ... and once: the retry wrote nothing twice.
    contents = [m.content for m in mem.memories("chat")]
    assert len(contents) == len(set(contents))


def test_a_crash_between_s4_and_s5_re_extracts_the_same_window(replay: Replay) -> None:
    (crashed,) = replay.crashed
    at = replay.writes.index(crashed)
    retry = replay.writes[at + 1]
    assert retry[0] == crashed[0]  # the same first turn: nothing skipped
    assert retry[1] >= crashed[1]
    # The retry read the crashed window's turns as new again (not as context) and saw no memory of them.
    s2 = replay.s2()
    first, second = s2[at], s2[at + 1]
    assert [i for i, *_ in first.new] == list(range(crashed[0], crashed[1] + 1))
    assert [i for i, *_ in second.new][:len(first.new)] == [i for i, *_ in first.new]
    assert second.context == first.context
    # The window after the retry starts right after it.
    assert replay.writes[at + 2][0] == retry[1] + 1


def test_the_session_remembers_what_it_showed(replay: Replay) -> None:
    shown = replay.mem.cursor("reflex:shown:chat").value["turns"]
    assert len(shown) == 3 and any(shown)


def test_a_create_agent_loop_is_extracted_in_batches_through_the_middleware(tmp_path: Any) -> None:
    """The same batching from LangChain: 40 exchanges of the chat through create_agent with MemoryMiddleware."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from tortoise_sdk.adapters.langchain import MemoryMiddleware
    from tortoise_sdk.models import MEMORY_BLOCK_MARKER

    chat = load_chat(LOCOMO_DIR / "conv-26.json", 80)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=a["content"], name=a["name"], id=a["id"])
                                                for _, a in chat]))
    with StubModel([], responder=answer) as stub, Memory(
            str(tmp_path / "m.db"), namespace="lc", model="openai/stub-model", api_base=stub.base_url,
            api_key="sk-stub", model_settings={**FAST_RETRY, "max_attempts": 2}) as mem:
        middleware = MemoryMiddleware(mem, "lc-chat")
        agent = create_agent(model, [], middleware=[middleware])
        messages: list[Any] = []
        for user, _ in chat:
            messages = agent.invoke({"messages": [*messages, HumanMessage(user["content"], name=user["name"],
                                                                         id=user["id"])]})["messages"]
            mem.process_pending()
        middleware.close()
        assert stub.unanswered == []
        s2 = [S2Prompt.parse(r.prompt) for r in stub.requests if r.stage == "s2"]
        assert [(p.new[0][0], p.new[-1][0]) for p in s2] == [(0, 19), (20, 39), (40, 59), (60, 79)]
        assert Counter(r.stage for r in stub.requests) == {"s1": 4, "s2": 4, "s4": 4}
        turns = mem.turns("lc-chat")
        assert [t.external_id for t in turns] == [t["id"] for pair in chat for t in pair]
        assert not any(t.content.startswith(MEMORY_BLOCK_MARKER) for t in turns)
        assert mem.store.extraction_state("lc", "lc-chat").watermark == 79
        assert len(mem.cursor("reflex:shown:lc-chat").value["turns"]) == 3
